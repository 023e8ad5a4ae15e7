"""The `agenttalk` command: thin wrappers that build objects and call into the package."""

from __future__ import annotations

import json
import logging
import signal
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from agenttalk.config import Config
from agenttalk.daemon import Daemon
from agenttalk.errors import AgentTalkError, ConfigError, InputFileError
from agenttalk.llm.selection import default_service, unservable
from agenttalk.models import AgentProfile, Command, Message
from agenttalk.scaffold import init_society
from agenttalk.society import Society, resolve_root
from agenttalk.status import render_text, society_status, unknown_agents
from agenttalk.submit import Plan, load_plan, send_file, submit_plan

app = typer.Typer(
    help="AgentTalk: a file-based society of LLM agents. Drop cmd_*.json into an agent's inbox, "
    "run the daemon, read the outboxes.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
plan_app = typer.Typer(help="Submit a plan (many commands at once) and follow it.")
app.add_typer(plan_app, name="plan")

RootOption = Annotated[
    Path | None,
    typer.Option(
        "--root",
        envvar="AGENTTALK_ROOT",
        help="Society folder (config.yaml + agents/). Default: $AGENTTALK_ROOT, else the "
        "current directory.",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


def _society(root: Path | None) -> Society:
    return Society(resolve_root(root))


def _fail(exc: Exception) -> NoReturn:
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(1)


def _setup_logging(verbose: bool, quiet: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    # watchdog logs a harmless error per watch when its observer stops; hide that noise.
    logging.getLogger("watchdog.observers.inotify").setLevel(logging.CRITICAL)


@app.command()
def init(
    directory: Annotated[Path, typer.Argument(help="Folder to create the society in.")] = Path("."),
    no_plan: Annotated[
        bool, typer.Option("--no-plan", help="Do not submit the example plan.")
    ] = False,
) -> None:
    """Create a working example society: config.yaml, five agents, and its plan submitted."""
    try:
        dropped = init_society(directory, submit=not no_plan)
    except AgentTalkError as exc:
        _fail(exc)
    typer.echo(f"created a society in {directory}/ ({len(dropped)} commands dropped)")
    typer.echo(f"next: agenttalk run --root {directory} --until-idle")


@app.command()
def run(
    root: RootOption = None,
    until_idle: Annotated[
        bool, typer.Option("--until-idle", help="Exit 0 once nothing is runnable or running.")
    ] = False,
    service: Annotated[
        str | None,
        typer.Option(
            "--service",
            help="Run every agent on this configured service, e.g. `--service dry-run` "
            "(the scripted fake) to try a society without a model.",
        ),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
) -> None:
    """Run the heartbeat daemon: execute commands as their inputs arrive (Ctrl-C stops)."""
    _setup_logging(verbose)
    try:
        society = _society(root)
        if service is not None and service not in society.config.llm.services:
            raise ConfigError(f"--service {service}: not in config.yaml llm.services")
        daemon = Daemon(society, service_override=service)
        daemon.prepare()  # fail now on a missing key or model, not at the first command
    except AgentTalkError as exc:
        _fail(exc)
    signal.signal(signal.SIGTERM, lambda *_: daemon.stop())
    try:
        daemon.run(until_idle=until_idle)
    except KeyboardInterrupt:
        daemon.stop()


@app.command()
def send(
    agent: Annotated[str, typer.Argument(help="The agent whose inbox receives the file.")],
    file: Annotated[Path, typer.Argument(help="A command (cmd_*.json) or an input file.")],
    root: RootOption = None,
    plan: Annotated[
        str | None, typer.Option("--plan", help="Deliver an input to this plan only.")
    ] = None,
) -> None:
    """Validate a file, then drop it atomically into an agent's inbox."""
    try:
        path = send_file(_society(root), agent, file, plan)
    except AgentTalkError as exc:
        _fail(exc)
    typer.echo(f"dropped {path}")


@app.command()
def status(root: RootOption = None, as_json: JsonOption = False) -> None:
    """Per agent: pending, waiting (with missing inputs), running, done, failed (with reasons)."""
    try:
        statuses = society_status(_society(root))
    except AgentTalkError as exc:
        _fail(exc)
    if as_json:
        typer.echo(json.dumps([s.model_dump() for s in statuses], indent=2, ensure_ascii=False))
    else:
        typer.echo(render_text(statuses))


@app.command()
def validate(root: RootOption = None) -> None:
    """Check config.yaml, every profile, every pending command and every plan; exit 1 on errors."""
    problems: list[str] = []
    try:
        society = _society(root)
    except AgentTalkError as exc:
        _fail(exc)
    for agent_id in unknown_agents(society):
        problems += [str(st.profile_error) for st in society_status(society, [agent_id])]
    for agent_id in society.agent_ids():
        profile_path = society.agent(agent_id).profile_path
        if profile_path.exists():
            try:
                why = unservable(society.config, society.load_profile(agent_id))
                if why:
                    problems.append(f"{profile_path}: {why}")
            except ConfigError as exc:
                problems.append(str(exc))
        for st in society_status(society, [agent_id]):
            problems += [
                f"agents/{agent_id}/inbox/{c.file}: {c.error}"
                for c in st.commands
                if c.state == "invalid"
            ]
    plans_dir = society.root / "plans"
    for path in sorted(plans_dir.glob("*.json")) + sorted(plans_dir.glob("*.y*ml")):
        try:
            plan = load_plan(path)
            _check_plan(society, plan, str(path.relative_to(society.root)))
        except AgentTalkError as exc:
            problems.append(f"{path.relative_to(society.root)}: {exc}")
    if problems:
        typer.echo("\n".join(problems), err=True)
        raise typer.Exit(1)
    typer.echo(f"ok: config, {len(society.agent_ids())} agents, pending commands and plans")


def _check_plan(society: Society, plan: Plan, source: str) -> None:
    from agenttalk.submit import validate_command

    for i, entry in enumerate(plan.commands):
        raw = {**entry.command, "plan_id": entry.command.get("plan_id", plan.plan_id)}
        try:
            validate_command(society, entry.agent, raw, f"{source} commands[{i}]")
        except InputFileError as exc:
            if exc.field != "command_id":  # "already ran" is not a mistake in the plan file
                raise


SCHEMAS: dict[str, Any] = {
    "command": Command,
    "profile": AgentProfile,
    "message": Message,
    "config": Config,
    "plan": Plan,
}


@app.command()
def schema(
    kind: Annotated[str, typer.Argument(help="command, profile, message, config or plan.")],
) -> None:
    """Print the JSON Schema of a file kind."""
    model = SCHEMAS.get(kind)
    if model is None:
        _fail(AgentTalkError(f"unknown kind {kind!r}; use one of: {', '.join(SCHEMAS)}"))
    typer.echo(json.dumps(model.model_json_schema(by_alias=True), indent=2))


@app.command()
def demo(
    directory: Annotated[
        Path | None, typer.Argument(help="Folder for the society (default: a new temp folder).")
    ] = None,
    service: Annotated[
        str | None, typer.Option("--service", help="Service to use (default: automatic).")
    ] = None,
) -> None:
    """Create a fresh example society and run it to completion on the default service."""
    import tempfile

    from rich.console import Console

    from agenttalk.demo import run_demo

    _setup_logging(False, quiet=True)
    target = directory or Path(tempfile.mkdtemp(prefix="agenttalk-demo-"))
    try:
        config = Society(target).config if (target / "config.yaml").exists() else Config()
        name = service or default_service(config)
        ok = run_demo(target, name, Console())
    except AgentTalkError as exc:
        _fail(exc)
    raise typer.Exit(0 if ok else 1)


@app.command()
def usage(root: RootOption = None, as_json: JsonOption = False) -> None:
    """Tokens, calls, latency and estimated cost per agent, plan and service (from the audits)."""
    from agenttalk.usage import usage_report

    try:
        report = usage_report(_society(root))
    except AgentTalkError as exc:
        _fail(exc)
    if as_json:
        typer.echo(report.model_dump_json(indent=2))
        return
    lines = []
    for title, group in (
        ("agent", report.by_agent),
        ("plan", report.by_plan),
        ("service", report.by_service),
    ):
        lines.append(f"by {title}:")
        for name, t in group.items():
            lines.append(
                f"  {name:28} {t.commands:5} commands {t.calls:5} calls "
                f"{t.prompt_tokens:9} in {t.completion_tokens:8} out  cost {t.cost:.4f}"
            )
    t = report.total
    lines.append(
        f"total: {t.commands} commands, {t.calls} calls, {t.total_tokens} tokens, cost {t.cost:.4f}"
    )
    typer.echo("\n".join(lines))


@plan_app.command("submit")
def plan_submit(
    file: Annotated[Path, typer.Argument(help="The plan file (JSON or YAML), e.g. plans/x.json.")],
    root: RootOption = None,
) -> None:
    """Validate every command of a plan; drop them all, or none if any is invalid."""
    try:
        society = _society(root)
        dropped = submit_plan(society, load_plan(file), str(file))
    except AgentTalkError as exc:
        _fail(exc)
    for path in dropped:
        typer.echo(f"dropped {path.relative_to(society.root)}")


@plan_app.command("status")
def plan_status(
    plan_id: Annotated[str, typer.Argument(help="The plan_id to show.")],
    root: RootOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show the state of every command of one plan."""
    try:
        statuses = society_status(_society(root))
    except AgentTalkError as exc:
        _fail(exc)
    if as_json:
        rows = [
            {"agent_id": s.agent_id, **c.model_dump()}
            for s in statuses
            for c in s.commands
            if c.plan_id == plan_id
        ]
        typer.echo(json.dumps(rows, indent=2, ensure_ascii=False))
    else:
        typer.echo(render_text(statuses, plan_id=plan_id))


@app.command()
def events(
    session: Annotated[str, typer.Argument(help="The discussion session id.")],
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=100, help="How many events to show (1-100).")
    ],
    event_type: Annotated[
        str | None,
        typer.Option("--type", help="Only this type: INTENT, SPEECH, SUMMARY, VOTE or SYSTEM."),
    ] = None,
    after: Annotated[
        int | None,
        typer.Option(
            "--after",
            help="The first events with a sequence above this (default: the most recent ones).",
        ),
    ] = None,
    root: RootOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show a session's events from the event log (agents/event_log/outbox/<session>.jsonl)."""
    from agenttalk.eventlog import EventLog, EventType

    event_log = EventLog(resolve_root(root), durable=False)  # reads only
    try:
        kind = EventType(event_type.upper()) if event_type else None
    except ValueError:
        _fail(AgentTalkError(f"--type {event_type}: use one of {', '.join(EventType)}"))
    try:
        if session not in event_log.sessions():
            known = ", ".join(event_log.sessions()) or "none yet"
            raise AgentTalkError(f"no event log for session {session!r} (sessions: {known})")
        if after is not None:
            found = event_log.get_events_after_sequence(session, after, limit, type=kind)
        elif kind is not None:
            found = event_log.get_events_by_type(session, kind, limit)
        else:
            found = event_log.get_recent_events(session, limit)
    except (AgentTalkError, ValueError) as exc:
        _fail(exc)
    if as_json:
        rows = [e.model_dump(mode="json") for e in found]
        typer.echo(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    for e in found:
        typer.echo(f"#{e.sequence} {e.timestamp} {e.type} {e.speaker}: {e.content_text()}")
