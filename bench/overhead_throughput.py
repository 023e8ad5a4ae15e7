"""Overhead throughput: commands per second end to end with an LLM that answers at once.

    .venv/bin/python bench/overhead_throughput.py [--agents 20] [--per-agent 25]
                                                  [--concurrency 8] [--durability safe fast]
                                                  [--repeat 3] [--quick]

For each durability setting: builds a society in a temporary folder, starts a loopback
OpenAI-compatible server (its own process, no delay) and the daemon (`agenttalk run`, its own
process), waits until the daemon has run one warm-up command per agent, then drops
`--agents x --per-agent` commands at once (each written as a dotfile, then renamed into the
inbox, as `agenttalk send` does) and times until every one is archived in archive/done/ and
its message delivered to `user`. Target: at least 100 commands/s with `durability: safe`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from machine import print_machine

PLAN = "bench"


def build(root: Path, base_url: str, agents: int, durability: str, concurrency: int) -> None:
    config = {
        "durability": durability,
        "max_concurrency": concurrency,
        "llm": {
            "default": "loopback",
            "services": {"loopback": {"base_url": base_url, "model": "bench", "max_retries": 0}},
        },
    }
    (root / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    for a in range(agents):
        agent_id = f"agent_{a:03d}"
        folder = root / "agents" / agent_id
        (folder / "inbox").mkdir(parents=True)
        profile = {"agent_id": agent_id, "name": agent_id, "prompt": "You answer briefly."}
        (folder / "agent_profile.json").write_text(json.dumps(profile), encoding="utf-8")
    (root / "agents" / "user" / "inbox").mkdir(parents=True)


def drop(root: Path, agent: int, command_id: str) -> None:
    inbox = root / "agents" / f"agent_{agent:03d}" / "inbox"
    command = {
        "command_id": command_id,
        "plan_id": PLAN,
        "prompt": f"Task {command_id}.",
        "on_complete": {"send_to": ["user"]},
    }
    tmp = inbox / f".cmd_{command_id}.json.part"
    tmp.write_text(json.dumps(command), encoding="utf-8")
    os.rename(tmp, inbox / f"cmd_{command_id}.json")


def count_done(root: Path, agents: int) -> int:
    total = 0
    for a in range(agents):
        done = root / "agents" / f"agent_{a:03d}" / "archive" / "done" / PLAN
        with contextlib.suppress(FileNotFoundError):
            total += len(os.listdir(done))
    return total


def wait_done(root: Path, agents: int, want: int, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while count_done(root, agents) < want:
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out: {count_done(root, agents)}/{want} commands done")
        time.sleep(0.005)
    return time.perf_counter()


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(base_url: str, args: argparse.Namespace, durability: str) -> tuple[float, float]:
    """Commands per second, and daemon CPU milliseconds per command."""
    with tempfile.TemporaryDirectory(prefix="agenttalk-bench-") as tmp:
        root = Path(tmp)
        build(root, base_url, args.agents, durability, args.concurrency)
        exe = Path(sys.executable).with_name("agenttalk")
        env = {**os.environ, "OPENAI_API_KEY": "bench"}
        daemon = subprocess.Popen(
            [str(exe), "run", "--root", str(root)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            for a in range(args.agents):  # warm-up: imports, connections, folders
                drop(root, a, "warmup")
            wait_done(root, args.agents, args.agents, 60)
            total = args.agents * args.per_agent
            cpu = cpu_seconds(daemon.pid)
            started = time.perf_counter()
            for c in range(args.per_agent):
                for a in range(args.agents):
                    drop(root, a, f"c{c:04d}")
            finished = wait_done(root, args.agents, args.agents + total, 600)
            cpu = cpu_seconds(daemon.pid) - cpu
            delivered = len(os.listdir(root / "agents" / "user" / "inbox" / PLAN))
            if delivered != args.agents + total:
                raise SystemExit(f"{delivered} messages delivered, expected {args.agents + total}")
        finally:
            daemon.terminate()
            daemon.wait(timeout=60)
        return total / (finished - started), cpu / total * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--per-agent", type=int, default=25)
    parser.add_argument("--concurrency", type=int, default=8, help="config max_concurrency")
    parser.add_argument(
        "--durability", nargs="+", choices=["safe", "fast"], default=["safe", "fast"]
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per setting (best is shown)")
    parser.add_argument("--quick", action="store_true", help="one run of 200 commands a setting")
    args = parser.parse_args()
    if args.quick:
        args.per_agent, args.repeat = 10, 1
    print_machine()
    server = subprocess.Popen(
        [sys.executable, "-m", "agenttalk.llm.loopback"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdin is not None and server.stdout is not None
    base_url = server.stdout.readline().strip()
    total = args.agents * args.per_agent
    print(
        f"{total} commands over {args.agents} agents, loopback LLM without delay, "
        f"max_concurrency {args.concurrency}, daemon `agenttalk run`"
    )
    print(f"{'durability':<11}{'best cmd/s':>11}{'median':>9}{'CPU ms/cmd':>12}   runs")
    try:
        for durability in args.durability:
            runs = [measure(base_url, args, durability) for _ in range(args.repeat)]
            rates = sorted(r for r, _ in runs)
            cpu = min(c for _, c in runs)
            print(
                f"{durability:<11}{rates[-1]:>11.1f}{rates[len(rates) // 2]:>9.1f}{cpu:>12.2f}"
                f"   {', '.join(f'{r:.0f}' for r, _ in runs)}"
                + ("   (target >= 100 durable)" if durability == "safe" else ""),
                flush=True,
            )
    finally:
        server.stdin.close()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
