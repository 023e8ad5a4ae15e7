"""Dispatch latency: from a command landing in an idle daemon's inbox to its LLM request.

    .venv/bin/python bench/dispatch_latency.py [--n 200] [--mode process|thread]

For each durability setting it builds a one-agent society in a temporary folder (the agent's
input already present), starts a loopback OpenAI-compatible server and the daemon with
`heartbeat_seconds: 10` (so only file events can wake it), then N times drops a command the way
`agenttalk send` does (dotfile, then one rename into the inbox) and measures the time from the
rename to the server receiving the request. Each command finishes before the next is dropped.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml
from machine import print_machine

from agenttalk.daemon import Daemon
from agenttalk.llm.loopback import LoopbackLLM
from agenttalk.society import Society

AGENT = "worker"
PLAN = "bench"


def build_society(root: Path, base_url: str, durability: str) -> None:
    config = {
        "heartbeat_seconds": 10,
        "durability": durability,
        "llm": {
            "default": "loopback",
            "services": {"loopback": {"base_url": base_url, "model": "bench", "max_retries": 0}},
        },
    }
    (root / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    agent = root / "agents" / AGENT
    (agent / "inbox").mkdir(parents=True)
    profile = {"agent_id": AGENT, "name": "Worker", "prompt": "You answer briefly."}
    (agent / "agent_profile.json").write_text(json.dumps(profile), encoding="utf-8")
    brief = agent / "inbox" / "brief.txt"
    brief.write_text("Summarise this brief in one line.\n", encoding="utf-8")
    old = time.time() - 60  # long settled: the input counts as complete at once
    os.utime(brief, (old, old))
    (root / "agents" / "user" / "inbox").mkdir(parents=True)


def drop(inbox: Path, index: int) -> tuple[float, Path]:
    """Write the command as a dotfile, rename it into the inbox; return the rename time."""
    command_id = f"c{index:05d}"
    command: dict[str, Any] = {
        "command_id": command_id,
        "plan_id": PLAN,
        "prompt": f"Task {index}: summarise the brief.",
        "required_inputs": ["brief.txt"],
        "on_complete": {"send_to": ["user"]},
    }
    tmp = inbox / f".cmd_{command_id}.json.part"
    tmp.write_text(json.dumps(command), encoding="utf-8")
    final = inbox / f"cmd_{command_id}.json"
    os.replace(tmp, final)
    return time.time(), final


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.0005)


class DaemonRunner:
    """The daemon as a subprocess (`agenttalk run`) or as `Daemon.run()` in a thread."""

    def __init__(self, root: Path, mode: str) -> None:
        self.root, self.mode = root, mode
        self.proc: subprocess.Popen[bytes] | None = None
        self.daemon: Daemon | None = None
        self.thread: threading.Thread | None = None

    def __enter__(self) -> DaemonRunner:
        if self.mode == "process":
            exe = Path(sys.executable).with_name("agenttalk")
            env = {**os.environ, "OPENAI_API_KEY": "bench"}
            self.proc = subprocess.Popen(
                [str(exe), "run", "--root", str(self.root)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        else:
            self.daemon = Daemon(Society(self.root))
            self.thread = threading.Thread(target=self.daemon.run, daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        if self.daemon is not None and self.thread is not None:
            self.daemon.stop()
            self.thread.join(timeout=30)


def measure(n: int, durability: str, mode: str, warmup: int) -> list[float]:
    with tempfile.TemporaryDirectory(prefix="agenttalk-bench-") as tmp, LoopbackLLM() as llm:
        root = Path(tmp)
        build_society(root, llm.base_url, durability)
        inbox = root / "agents" / AGENT / "inbox"
        done = root / "agents" / AGENT / "archive" / "done" / PLAN
        latencies: list[float] = []
        with DaemonRunner(root, mode):
            for i in range(warmup + n):
                seen = len(llm.requests)
                dropped_at, path = drop(inbox, i)
                wait_for(lambda n=seen: len(llm.requests) > n, 30, f"the request of {path.name}")
                if i >= warmup:
                    latencies.append((llm.requests[seen].at - dropped_at) * 1000)
                archived = done / f"c{i:05d}.json"
                wait_for(archived.exists, 30, f"{path.name} to finish")
        return latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def main() -> None:
    parser = argparse.ArgumentParser(description="Dispatch latency of an idle daemon.")
    parser.add_argument("--n", type=int, default=200, help="commands per durability setting")
    parser.add_argument(
        "--mode",
        choices=("process", "thread"),
        default="process",
        help="daemon as `agenttalk run` (default) or as Daemon.run() in a thread",
    )
    parser.add_argument("--warmup", type=int, default=3, help="unmeasured commands first")
    args = parser.parse_args()
    # watchdog logs a harmless error per watch when an in-process observer stops
    logging.getLogger("watchdog.observers.inotify").setLevel(logging.CRITICAL)
    print_machine()
    print(f"daemon: {args.mode}, n={args.n} (+{args.warmup} warm-up), heartbeat 10 s")
    print(f"{'durability':<11}{'median':>9}{'p90':>9}{'p99':>9}{'max':>9}   (ms)")
    for durability in ("safe", "fast"):
        ms = measure(args.n, durability, args.mode, args.warmup)
        print(
            f"{durability:<11}{statistics.median(ms):9.1f}{percentile(ms, 0.9):9.1f}"
            f"{percentile(ms, 0.99):9.1f}{max(ms):9.1f}"
        )


if __name__ == "__main__":
    main()
