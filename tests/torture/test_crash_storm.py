"""Crash storm: chained commands across many agents, the real `agenttalk run` SIGKILLed at random
moments many times and restarted; every command still ends exactly once.

CI: 150 commands, 10 agents, 8 kills. Long (AGENTTALK_TORTURE=long): 1,000 commands, 50 agents,
50 kills.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import make_daemon, make_society, write_json

from agenttalk.llm.fake import FakeProvider
from agenttalk.llm.loopback import LoopbackLLM
from agenttalk.society import CommandKey

from .support import (
    Cmd,
    assert_ended_well,
    daemon_process,
    drop,
    make_root,
    run_until_idle,
    seed,
    sigkill,
    size,
    tail,
)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")

PLAN = "storm"
CHAIN = 5
LLM_SECONDS = 0.05
CONFIG: dict[str, Any] = {
    "heartbeat_seconds": 1,
    "durability": "safe",
    "settle_seconds": 0.2,
    "max_concurrency": 4,
    "llm": {
        "default": "loopback",
        "services": {"loopback": {"provider": "openai", "model": "m", "max_retries": 0}},
    },
}


def chained_commands(agents: int, commands: int) -> list[Cmd]:
    """Agents in chains of five; per round each chain runs a five-deep DAG:
    p0 -> p1, p2; p1 -> p2; p2 -> p3, p4; p3 -> p4; p4 -> user.
    Each command but the first of a chain waits for files its predecessors delivered."""
    assert agents % CHAIN == 0 and commands % agents == 0
    out = []
    for r in range(commands // agents):
        for i in range(agents):
            p = i % CHAIN

            def w(j: int) -> str:
                return f"w{j:02d}"

            def name(j: int, r: int = r) -> str:
                return f"r{r:03d}_{w(j)}.json"

            send: tuple[str, ...]
            needs: tuple[str, ...]
            send, needs = {
                0: ((w(i + 1), w(i + 2)), ()),
                1: ((w(i + 1),), (name(i - 1),)),
                2: ((w(i + 1), w(i + 2)), (name(i - 2), name(i - 1))),
                3: ((w(i + 1),), (name(i - 1),)),
                4: (("user",), (name(i - 2), name(i - 1))),
            }[p]
            out.append(Cmd(w(i), f"r{r:03d}_{w(i)}", PLAN, send, name(i), needs))
    return out


def test_random_sigkills_of_the_daemon_still_end_every_chained_command_exactly_once(
    tmp_path: Path,
) -> None:
    agents, total, kills_planned = size(10, 50), size(150, 1000), size(8, 50)
    rng = random.Random(seed())
    commands = chained_commands(agents, total)
    root = tmp_path / "society"
    make_root(root, sorted({c.agent for c in commands}), CONFIG)
    for cmd in rng.sample(commands, len(commands)):  # arrival order is not the chain order
        drop(root, cmd)
    log = tmp_path / "daemon.log"
    per_life = max(2, total // kills_planned)
    started = time.monotonic()
    kills = []

    with LoopbackLLM(delay=LLM_SECONDS) as llm:
        for _ in range(kills_planned):
            with daemon_process(root, log, llm) as proc:
                before = len(llm.requests)
                if rng.random() < 0.15:
                    # during start-up: imports, the sweep of temporaries, the first scan
                    time.sleep(rng.uniform(0.05, 1.0))
                    where = "start-up"
                else:
                    target = before + rng.randint(1, 2 * per_life)
                    deadline = time.monotonic() + 120
                    while len(llm.requests) < target and proc.poll() is None:
                        assert time.monotonic() < deadline, tail(log)
                        time.sleep(0.005)
                    # inside the LLM call, or just after the reply (saving, delivering, archiving)
                    time.sleep(rng.uniform(0, 2 * LLM_SECONDS))
                    where = "work"
                assert proc.poll() is None, tail(log)
                sigkill(proc)
                kills.append((where, len(llm.requests) - before))
        run_until_idle(root, log, llm)
    elapsed = time.monotonic() - started

    context = f"(seed {seed()}, kills {kills})"
    during_work = sum(1 for where, _ in kills if where == "work")
    print(
        f"crash storm: {total} commands, {agents} agents, {len(kills)} kills "
        f"({during_work} during work, {len(kills) - during_work} during start-up), "
        f"{len(llm.requests)} LLM requests, {elapsed:.1f}s"
    )
    assert len(kills) == kills_planned
    assert sum(1 for where, _ in kills if where == "work") >= kills_planned // 2, context
    assert_ended_well(root, commands, context=context)
    for cmd in commands:
        if cmd.send_to == ("user",):
            message = (root / "agents/user/inbox" / PLAN / cmd.output_name).read_text()
            assert f"done: {cmd.prompt}" in message


def test_bookkeeping_left_by_a_kill_after_the_archive_move_is_cleared_at_restart(
    tmp_path: Path,
) -> None:
    """The state a kill between archiving a command and removing its saved LLM outcome and
    running marker leaves: nothing would ever run that command again to remove them."""
    society = make_society(tmp_path, ["writer", "sink"])
    command = {"command_id": "once", "plan_id": "p", "prompt": "Once."}
    write_json(society.agent("writer").inbox / "cmd_once.json", command)
    fake = FakeProvider(lambda request: {"result": "r"})
    make_daemon(society, fake).run(until_idle=True, watch=False)
    writer, key = society.agent("writer"), CommandKey("p", "once")
    assert writer.finished_status(key) == "done"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    write_json(writer.result_path(key), {"left": "by the kill"})
    write_json(writer.running_path(key), {"pid": dead.pid})
    live = writer.running_path(CommandKey("p", "other"))
    write_json(live, {"pid": 1})  # pid 1 is alive: not ours to touch

    make_daemon(society, fake).run(until_idle=True, watch=False)

    assert not writer.result_path(key).exists()
    assert not writer.running_path(key).exists()
    assert live.exists(), "a live process's marker was removed"
    assert len(fake.history) == 1, "the finished command was asked for again"
