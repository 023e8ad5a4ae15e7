"""Burst: far more files dropped at once than inotify can queue (max_queued_events, 16,384 here);
the heartbeat rescan must still find and run every command.

CI: 8,000 commands over 10 agents (over 24,000 events). Long (AGENTTALK_TORTURE=long): 50,000
over 50 agents.
The scripted fake LLM answers at once and `durability: fast`, so the file layer is the bottleneck.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

from agenttalk import fsio

from .support import (
    Cmd,
    assert_ended_well,
    daemon_process,
    make_root,
    size,
    tail,
)

PLAN = "burst"
CONFIG: dict[str, Any] = {
    "heartbeat_seconds": 2,
    "durability": "fast",
    "settle_seconds": 0.2,
    "max_concurrency": 8,
    "llm": {"default": "dry", "services": {"dry": {"provider": "fake", "model": "dry"}}},
}


def max_queued_events() -> int:
    try:
        return int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    except OSError:
        return 16384


def done_count(root: Path, agents: list[str]) -> int:
    total = 0
    for agent_id in agents:
        with contextlib.suppress(FileNotFoundError):
            total += len(os.listdir(root / "agents" / agent_id / "archive" / "done" / PLAN))
    return total


def test_a_burst_that_overflows_inotify_still_runs_every_command(tmp_path: Path) -> None:
    total, n_agents = size(8_000, 50_000), size(10, 50)
    # tmp, write, close, rename: three kernel events per file at the least
    assert 3 * total > max_queued_events()
    agents = [f"b{i:02d}" for i in range(n_agents)]
    commands = [Cmd(agents[i % n_agents], f"c{i:05d}", PLAN, (), "x.json") for i in range(total)]
    root = tmp_path / "society"
    make_root(root, agents, CONFIG)
    for agent_id in agents:
        (root / "agents" / agent_id / "inbox").mkdir(parents=True)
    log = tmp_path / "daemon.log"
    with daemon_process(root, log) as proc:
        # the daemon is up and watching every inbox once it has run a first command
        first = Cmd(agents[0], "warmup", PLAN, (), "x.json")
        commands.append(first)
        inbox0 = root / "agents" / agents[0] / "inbox"
        fsio.atomic_write_json(inbox0 / "cmd_warmup.json", first.as_json(), durable=False)
        deadline = time.monotonic() + 120
        while done_count(root, agents) < 1:
            assert proc.poll() is None and time.monotonic() < deadline, tail(log)
            time.sleep(0.05)

        # The daemon is frozen (SIGSTOP: as a daemon starved of CPU or stuck on a slow disk
        # would be) while the burst lands, so the kernel queue overflows for certain: each
        # atomic drop (create, close, rename in the inbox) queues several events.
        proc.send_signal(signal.SIGSTOP)
        started = time.monotonic()
        try:
            for cmd in commands[:-1]:
                inbox = root / "agents" / cmd.agent / "inbox"
                data = cmd.as_json()
                fsio.atomic_write_json(inbox / f"cmd_{cmd.command_id}.json", data, durable=False)
        finally:
            proc.send_signal(signal.SIGCONT)
        dropped = time.monotonic()
        deadline = dropped + size(300, 900)
        while (n := done_count(root, agents)) < len(commands):
            assert proc.poll() is None, tail(log)
            assert time.monotonic() < deadline, f"{n} of {len(commands)} ran; {tail(log)}"
            time.sleep(0.2)
        finished = time.monotonic()
        proc.terminate()
        assert proc.wait(timeout=60) == 0, tail(log)

    print(
        f"burst: {total} commands dropped in {dropped - started:.1f}s, "
        f"all run {finished - started:.1f}s after the first drop"
    )
    assert "inotify queue overflowed" in log.read_text(errors="replace").lower(), (
        "the burst did not overflow the inotify queue; the test shows nothing"
    )
    assert_ended_well(root, commands)
