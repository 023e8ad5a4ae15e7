"""LLM-bound efficiency: many commands against a server that answers after a fixed delay.

    .venv/bin/python bench/llm_efficiency.py [--agents 32] [--per-agent 10] [--delay 0.2]
                                             [--concurrency 16] [--durability safe]

Builds a society of `--agents` agents in a temporary folder, drops `--per-agent` commands into
each inbox (each sends its result to `user`), and runs the daemon until idle against a loopback
OpenAI-compatible server (its own process) whose every reply takes `--delay` seconds. The ideal
time is commands / concurrency x delay; the script prints the measured time and its ratio to the
ideal (target: at most 1.15).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from machine import print_machine

from agenttalk.daemon import Daemon
from agenttalk.society import Society


def build(root: Path, base_url: str, args: argparse.Namespace) -> int:
    config = {
        "max_concurrency": args.concurrency,
        "durability": args.durability,
        "llm": {
            "default": "loopback",
            "services": {"loopback": {"base_url": base_url, "model": "bench", "max_retries": 0}},
        },
    }
    (root / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    count = 0
    for a in range(args.agents):
        agent_id = f"agent_{a:03d}"
        folder = root / "agents" / agent_id
        (folder / "inbox").mkdir(parents=True)
        profile = {"agent_id": agent_id, "name": agent_id, "prompt": "You answer briefly."}
        (folder / "agent_profile.json").write_text(json.dumps(profile), encoding="utf-8")
        for c in range(args.per_agent):
            command = {
                "command_id": f"c{c:03d}",
                "plan_id": "bench",
                "prompt": f"Task {c}.",
                "on_complete": {"send_to": ["user"]},
            }
            (folder / "inbox" / f"cmd_{c:03d}.json").write_text(json.dumps(command))
            count += 1
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=32)
    parser.add_argument("--per-agent", type=int, default=10)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--durability", choices=["safe", "fast"], default="safe")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("OPENAI_API_KEY", "bench")
    print_machine()
    # The server runs in its own process, as a real one would: its CPU is not the daemon's.
    server = subprocess.Popen(
        [sys.executable, "-m", "agenttalk.llm.loopback", "--delay", str(args.delay)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdin is not None and server.stdout is not None
    base_url = server.stdout.readline().strip()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        total = build(root, base_url, args)
        daemon = Daemon(Society(root))
        daemon.prepare()  # as `agenttalk run` does before it starts
        started, cpu = time.perf_counter(), time.process_time()
        daemon.run(until_idle=True, watch=False)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        done = len(list(root.glob("agents/*/archive/done/bench/*.json")))
    server.stdin.close()
    requests = int(server.stdout.readline() or 0)
    server.wait(timeout=10)
    ideal = total / args.concurrency * args.delay
    print(
        f"commands: {total} over {args.agents} agents, reply delay {args.delay * 1000:.0f} ms, "
        f"max_concurrency {args.concurrency}, durability {args.durability}"
    )
    print(
        f"done: {done}/{total}, LLM requests: {requests}, "
        f"daemon CPU: {cpu:.2f} s ({cpu / total * 1000:.1f} ms per command)"
    )
    print(
        f"elapsed: {elapsed:.3f} s, ideal: {ideal:.3f} s, ratio: {elapsed / ideal:.3f} "
        f"(target <= 1.15)"
    )


if __name__ == "__main__":
    main()
