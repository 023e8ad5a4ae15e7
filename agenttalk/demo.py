"""`agenttalk demo`: a fresh example society run to completion, with progress on screen."""

from __future__ import annotations

import threading
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agenttalk.daemon import Daemon
from agenttalk.llm.registry import Providers
from agenttalk.scaffold import init_society
from agenttalk.society import USER_AGENT, Society
from agenttalk.status import society_status


def run_demo(target: Path, service: str, console: Console) -> bool:
    """Create the example society in `target`, run it until idle; True if every command is done."""
    dropped = init_society(target)
    society = Society(target)
    providers = Providers(society.config, society.root)
    providers.get(service)  # a missing key or model fails here, before anything runs
    daemon = Daemon(society, providers, service_override=service)
    console.print(f"[bold]AgentTalk demo[/] in {target} on service [cyan]{service}[/]")
    errors: list[BaseException] = []

    def work() -> None:
        try:
            daemon.run(until_idle=True, watch=False)
        except BaseException as exc:  # shown to the user below
            errors.append(exc)

    thread = threading.Thread(target=work, name="agenttalk-demo")
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("starting", total=len(dropped))
        thread.start()
        while thread.is_alive():
            thread.join(timeout=0.5)
            statuses = society_status(society)
            finished = sum(s.count("done") + s.count("failed") for s in statuses)
            busy = [s.agent_id for s in statuses if s.count("running")]
            label = f"running: {', '.join(busy)}" if busy else "waiting for inputs"
            if finished == len(dropped):
                label = "finished"
            progress.update(task, completed=finished, description=label)
    if errors:
        raise errors[0]
    statuses = society_status(society)
    table = Table("agent", "command", "state", "score", "error")
    ok = True
    for st in statuses:
        for c in st.commands:
            ok = ok and c.state == "done"
            score = "" if c.score is None else f"{c.score:g}"
            table.add_row(st.agent_id, c.command_id, c.state, score, c.error or "")
    console.print(table)
    console.print(f"Results for people:  {society.agent(USER_AGENT).inbox}")
    console.print(
        f"Full audit per agent: {society.agents_dir}/<agent>/outbox/<plan>/<command>/audit.json"
    )
    console.print(f"Status any time:      agenttalk status --root {target}")
    return ok
