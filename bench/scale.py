"""Scale: a daemon watching 10,000 idle agents with 100,000 finished commands on disk.

    .venv/bin/python bench/scale.py [--agents 10000] [--finished 100000] [--idle 60] [--quick]
                                    [--root DIR]

Writes the society straight into the on-disk layout the daemon uses (profiles, archived command
files, audit records, delivered messages and their copies in `sent/`, one input in a plan folder
of every inbox), then starts the real daemon (`agenttalk run -v`, its own process) against a
loopback LLM and measures:

- start-up: from launch until a command dropped in the agent scanned last (`zz_probe`, right
  after launch) is archived, and the daemon's own "ready" line (first full scan done);
- idle CPU: utime + stime of the daemon (/proc/<pid>/stat) over `--idle` seconds, as seconds
  per minute and % of one core (target < 2 %);
- memory: VmRSS and VmHWM (target < 300 MB resident);
- heartbeat rescan: the duration the daemon logs for each full rescan (target < 1 s).

`--quick` is 2,000 agents, 20,000 finished commands and a 20 s idle window. `--root DIR` keeps
the generated society in DIR and reuses it on the next run (generation takes a while).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml
from machine import print_machine

from agenttalk.llm.loopback import LoopbackLLM

PLANS = 100
PROBE = "zz_probe"
RESCAN = re.compile(r"full rescan of (\d+) agents took ([0-9.]+) s")
READY = re.compile(r"ready: (\d+) agents scanned in ([0-9.]+) s")


def write(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def generate(root: Path, agents: int, finished: int, base_url: str) -> None:
    """The society as the daemon leaves it after running `finished` commands (no fsync: fast)."""
    write_config(root, base_url)
    agents_dir = root / "agents"
    user_inbox = agents_dir / "user" / "inbox"
    for p in range(PLANS):
        (user_inbox / f"plan_{p:02d}").mkdir(parents=True, exist_ok=True)
    per_agent, extra = divmod(finished, agents)
    for a in range(agents):
        agent_id = f"agent_{a:05d}"
        folder = agents_dir / agent_id
        # An input delivered for a plan, as a neighbour's message leaves it: a watched folder.
        neighbour = f"agent_{(a + 1) % agents:05d}"
        received = folder / "inbox" / f"plan_{a % PLANS:02d}"
        os.makedirs(received)
        write(str(received / f"c0000_from_{neighbour}.json"), b'{"text": "an input"}')
        profile = {"agent_id": agent_id, "name": agent_id, "prompt": "You answer briefly."}
        write(str(folder / "agent_profile.json"), json.dumps(profile).encode())
        made: set[str] = set()
        for c in range(per_agent + (a < extra)):
            plan = f"plan_{(a + c) % PLANS:02d}"
            command_id = f"c{c:04d}"
            command = {
                "command_id": command_id,
                "plan_id": plan,
                "prompt": f"Task {c} of {agent_id}.",
                "on_complete": {"send_to": ["user"]},
            }
            data = json.dumps(command).encode()
            archived = folder / "archive" / "done" / plan
            if plan not in made:
                os.makedirs(archived)
                made.add(plan)
            write(str(archived / f"{command_id}.json"), data)
            name = f"{command_id}_from_{agent_id}.json"
            message = {
                "message_id": f"msg_{a:05d}_{c:04d}",
                "plan_id": plan,
                "command_id": command_id,
                "from": agent_id,
                "to": "user",
                "result": "done",
                "text": "done",
            }
            delivered = str(user_inbox / plan / name)
            write(delivered, json.dumps(message).encode())
            audit_dir = folder / "outbox" / plan / command_id
            os.makedirs(audit_dir / "sent" / "user")
            os.link(delivered, audit_dir / "sent" / "user" / name)
            audit = {
                "agent_id": agent_id,
                "plan_id": plan,
                "command_id": command_id,
                "status": "done",
                "command": command,
                "llm": {
                    "service": "loopback",
                    "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
                    "cost": 0.0,
                    "attempts": [{"latency_s": 0.5}],
                },
                "result": "done",
                "archived_as": f"agents/{agent_id}/archive/done/{plan}/{command_id}.json",
            }
            write(str(audit_dir / "audit.json"), json.dumps(audit, indent=2).encode())
    probe = agents_dir / PROBE
    (probe / "inbox").mkdir(parents=True)
    profile = {"agent_id": PROBE, "name": "Probe", "prompt": "You answer briefly."}
    write(str(probe / "agent_profile.json"), json.dumps(profile).encode())


def write_config(root: Path, base_url: str) -> None:
    config = {
        "llm": {
            "default": "loopback",
            "services": {"loopback": {"base_url": base_url, "model": "bench", "max_retries": 0}},
        },
    }
    (root / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")


def drop_probe(root: Path, command_id: str) -> Path:
    inbox = root / "agents" / PROBE / "inbox"
    command = {"command_id": command_id, "plan_id": "probe", "prompt": "Ping."}
    tmp = inbox / f".cmd_{command_id}.json.part"
    tmp.write_text(json.dumps(command), encoding="utf-8")
    os.rename(tmp, inbox / f"cmd_{command_id}.json")
    return root / "agents" / PROBE / "archive" / "done" / "probe" / f"{command_id}.json"


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_mb(pid: int) -> dict[str, float]:
    values = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "Threads"):
                n = int(rest.split()[0])
                values[key] = n / 1024 if key != "Threads" else n
    return values


class LogReader(threading.Thread):
    """Collects the daemon's stderr: rescan durations and the ready line."""

    def __init__(self, stream: object) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.rescans: list[float] = []
        self.ready: float | None = None
        self.tail: list[str] = []

    def run(self) -> None:
        for line in self.stream:  # type: ignore[attr-defined]
            if m := RESCAN.search(line):
                self.rescans.append(float(m.group(2)))
            elif m := READY.search(line):
                self.ready = float(m.group(2))
            elif "ERROR" in line or "Traceback" in line:
                self.tail.append(line.rstrip())


def wait_for(path: Path, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout}s waiting for {path}")
        time.sleep(0.01)
    return time.perf_counter()


def measure(root: Path, idle: float, heartbeats: int) -> None:
    exe = Path(sys.executable).with_name("agenttalk")
    env = {**os.environ, "OPENAI_API_KEY": "bench"}
    launched = time.perf_counter()
    daemon = subprocess.Popen(
        [str(exe), "run", "--root", str(root), "-v"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    reader = LogReader(daemon.stderr)
    reader.start()
    try:
        archived = drop_probe(root, f"start_{int(time.time())}")
        ready = wait_for(archived, 600) - launched
        print(f"start-up: {ready:.2f} s until a command dropped at launch was archived")
        if reader.ready is not None:
            print(f"          (the daemon's first full scan took {reader.ready:.2f} s)")
        time.sleep(2)  # let the probe's work and any start-up stragglers finish
        t0, c0 = time.monotonic(), cpu_seconds(daemon.pid)
        time.sleep(idle)
        t1, c1 = time.monotonic(), cpu_seconds(daemon.pid)
        share = (c1 - c0) / (t1 - t0)
        print(
            f"idle CPU: {share * 60:.2f} s per minute = {share * 100:.2f} % of one core "
            f"over {t1 - t0:.0f} s (target < 2 %)"
        )
        deadline = time.monotonic() + 60
        while len(reader.rescans) < heartbeats and time.monotonic() < deadline:
            time.sleep(0.5)
        mem = memory_mb(daemon.pid)
        print(
            f"memory: VmRSS {mem['VmRSS']:.0f} MB, VmHWM {mem['VmHWM']:.0f} MB, "
            f"{mem['Threads']:.0f} threads (target < 300 MB)"
        )
        scans = reader.rescans  # the first full scan (profiles loaded) is the "ready" line
        if scans:
            print(
                f"heartbeat rescan: median {sorted(scans)[len(scans) // 2]:.3f} s, "
                f"max {max(scans):.3f} s over {len(scans)} rescans (target < 1 s)"
            )
        else:
            print("heartbeat rescan: no rescan logged")
        probe = drop_probe(root, f"idle_{int(time.time())}")
        dropped = time.perf_counter()
        print(f"a command dropped now is archived after {wait_for(probe, 60) - dropped:.3f} s")
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
        reader.join(timeout=5)
    for line in reader.tail[:20]:
        print("daemon:", line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=10_000)
    parser.add_argument("--finished", type=int, default=100_000, help="finished commands")
    parser.add_argument("--idle", type=float, default=60.0, help="seconds of idle CPU measured")
    parser.add_argument("--quick", action="store_true", help="2,000 agents, 20,000 done, 20 s")
    parser.add_argument("--root", type=Path, help="keep the society here and reuse it")
    args = parser.parse_args()
    if args.quick:
        args.agents, args.finished, args.idle = 2_000, 20_000, 20.0
    print_machine()
    with LoopbackLLM() as llm, tempfile.TemporaryDirectory(prefix="agenttalk-scale-") as tmp:
        root = args.root or Path(tmp)
        marker = root / f".generated-v2-{args.agents}-{args.finished}"
        if not marker.exists():
            if root.exists() and args.root is not None:
                shutil.rmtree(root / "agents", ignore_errors=True)
            root.mkdir(parents=True, exist_ok=True)
            started = time.perf_counter()
            generate(root, args.agents, args.finished, llm.base_url)
            marker.touch()
            print(f"generated in {time.perf_counter() - started:.1f} s", flush=True)
        write_config(root, llm.base_url)  # the loopback port changes from run to run
        print(
            f"society: {args.agents} idle agents, {args.finished} finished commands, "
            f"heartbeat 10 s, idle window {args.idle:.0f} s",
            flush=True,
        )
        measure(root, args.idle, heartbeats=3 if args.idle >= 30 else 2)


if __name__ == "__main__":
    main()
