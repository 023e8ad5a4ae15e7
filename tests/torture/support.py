"""Shared pieces of the torture suite: sizes (short in CI, long by hand), the daemon as a real
subprocess, and the end-state checks every torture test makes.

`AGENTTALK_TORTURE=long` selects the long sizes; anything else (or unset) the CI sizes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agenttalk.llm.loopback import LoopbackLLM

AGENTTALK = Path(sys.executable).with_name("agenttalk")
LONG = os.environ.get("AGENTTALK_TORTURE", "").lower() == "long"


def size(short: int, long: int) -> int:
    """The CI size, or the long one under AGENTTALK_TORTURE=long."""
    return long if LONG else short


def seed() -> int:
    """One seed for every random choice; a failure message names it (AGENTTALK_TORTURE_SEED)."""
    return int(os.environ.get("AGENTTALK_TORTURE_SEED", "5150"))


def daemon_env(base_url: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "AGENTTALK_"))}
    if base_url is not None:
        env.update(OPENAI_BASE_URL=base_url, OPENAI_API_KEY="test")
    return env


@contextmanager
def daemon_process(
    root: Path, log: Path, llm: LoopbackLLM | None = None, *args: str
) -> Iterator[subprocess.Popen[bytes]]:
    """`agenttalk run --root ROOT` as a subprocess; whatever happens, it is gone on exit."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [str(AGENTTALK), "run", "--root", str(root), *args],
            env=daemon_env(llm.base_url if llm else None),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def sigkill(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL, "the daemon ended before it was killed"


def run_until_idle(
    root: Path, log: Path, llm: LoopbackLLM | None = None, timeout: float = 600, *args: str
) -> None:
    with log.open("ab") as out:
        result = subprocess.run(
            [str(AGENTTALK), "run", "--root", str(root), "--until-idle", *args],
            env=daemon_env(llm.base_url if llm else None),
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=timeout,
        )
    assert result.returncode == 0, tail(log)


def status_json(root: Path) -> dict[str, dict[str, Any]]:
    """`agenttalk status --json`, keyed by agent id."""
    out = subprocess.run(
        [str(AGENTTALK), "status", "--json", "--root", str(root)],
        capture_output=True,
        check=True,
        timeout=300,
        env=daemon_env(),
    )
    return {s["agent_id"]: s for s in json.loads(out.stdout)}


def tail(log: Path, chars: int = 4000) -> str:
    return log.read_text(errors="replace")[-chars:] if log.exists() else "(no log)"


_TEMPORARY = re.compile(r"\..+\.(\d+)\.[0-9a-f]{8}\.tmp")


def assert_no_half_written_files(root: Path) -> None:
    """Every JSON file parses (rejected files in archive/bad excepted: they are the bad input)
    and no writer's temporary file is left anywhere."""
    broken, temporaries = [], []
    for folder, _dirs, names in os.walk(root):
        rel = Path(folder).relative_to(root)
        quarantined = len(rel.parts) >= 4 and rel.parts[2:4] == ("archive", "bad")
        for name in names:
            path = Path(folder) / name
            if _TEMPORARY.fullmatch(name):
                temporaries.append(str(path.relative_to(root)))
            elif name.endswith(".json") and (not quarantined or name.endswith(".error.json")):
                try:
                    json.loads(path.read_bytes())
                except ValueError:
                    broken.append(str(path.relative_to(root)))
    assert broken == [], f"half-written or broken JSON files: {broken[:20]}"
    assert temporaries == [], f"temporary files left behind: {temporaries[:20]}"


def assert_no_bookkeeping_left(root: Path) -> None:
    """Once all work has ended, no saved LLM outcome and no running marker remains."""
    left = [
        str(p.relative_to(root))
        for p in (root / "agents").glob("*/.agenttalk/*/**/*")
        if p.is_file()
    ]
    assert left == [], f"daemon bookkeeping left after every command ended: {left[:20]}"


@dataclass(frozen=True)
class Cmd:
    """One command of a torture society and what it must leave behind once it has ended."""

    agent: str
    command_id: str
    plan_id: str
    send_to: tuple[str, ...]
    output_name: str
    required_inputs: tuple[str, ...] = ()
    on_failure: tuple[str, ...] = ()
    score_required: bool = False

    @property
    def prompt(self) -> str:
        return f"Task {self.command_id} for {self.agent}."

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "command_id": self.command_id,
            "plan_id": self.plan_id,
            "prompt": self.prompt,
            "required_inputs": list(self.required_inputs),
            "on_complete": {"send_to": list(self.send_to), "output_name": self.output_name},
            "on_failure": {"send_to": list(self.on_failure)},
        }
        if self.score_required:
            data["score_required"] = True
        return data


def write_json(path: Path, obj: Any) -> None:
    """Write atomically as a careful writer does: a dotfile, then one rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.writing")
    tmp.write_bytes(json.dumps(obj).encode())
    os.replace(tmp, path)


def profile(agent_id: str) -> dict[str, Any]:
    return {"agent_id": agent_id, "name": agent_id.title(), "prompt": f"You are {agent_id}."}


def make_root(root: Path, agents: list[str], config: Mapping[str, Any]) -> None:
    import yaml

    root.mkdir(parents=True, exist_ok=True)
    (root / "config.yaml").write_text(yaml.safe_dump(dict(config)), encoding="utf-8")
    for agent_id in agents:
        if agent_id != "user":
            write_json(root / "agents" / agent_id / "agent_profile.json", profile(agent_id))


def drop(root: Path, cmd: Cmd) -> None:
    write_json(root / "agents" / cmd.agent / "inbox" / f"cmd_{cmd.command_id}.json", cmd.as_json())


def archived(root: Path, agent_id: str, status: str) -> list[str]:
    folder = root / "agents" / agent_id / "archive" / status
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def _read(path: Path) -> Any:
    return json.loads(path.read_bytes())


def assert_ended_well(
    root: Path, commands: list[Cmd], *, allow_failed: bool = False, context: str = ""
) -> dict[str, str]:
    """The end state every torture test checks: each command ended exactly once, no file
    half-written, no bookkeeping left, `agenttalk status` agrees. Returns command_id -> status."""
    statuses = assert_each_ended_once(root, commands, allow_failed=allow_failed, context=context)
    assert_no_half_written_files(root)
    assert_no_bookkeeping_left(root)
    assert_status_agrees(root, statuses, commands)
    return statuses


def assert_each_ended_once(
    root: Path, commands: list[Cmd], *, allow_failed: bool = False, context: str = ""
) -> dict[str, str]:
    """Every command ended exactly once: one archive entry and one audit that agree, no command
    file left, and every target holding exactly one message per command (its result if done,
    the failure notice if failed) and nothing else. Returns command_id -> status."""
    from agenttalk.routing import message_id

    agents = root / "agents"
    statuses: dict[str, str] = {}
    expected_inbox: dict[tuple[str, str], set[str]] = {}
    for cmd in commands:
        agent = agents / cmd.agent
        audit_path = agent / "outbox" / cmd.plan_id / cmd.command_id / "audit.json"
        assert audit_path.is_file(), f"{cmd.agent} {cmd.command_id}: no audit {context}"
        audit = _read(audit_path)
        status = audit["status"]
        statuses[cmd.command_id] = status
        assert status == "done" or (allow_failed and status == "failed"), (
            f"{cmd.agent} {cmd.command_id}: {status}: {audit.get('error')} {context}"
        )
        if status == "failed":
            assert audit["error"], f"{cmd.command_id}: failed without a reason {context}"
        name = f"{cmd.command_id}_failed_from_{cmd.agent}.json"
        targets = cmd.send_to if status == "done" else cmd.on_failure
        out = cmd.output_name if status == "done" else name
        for to in targets:
            expected_inbox.setdefault((to, cmd.plan_id), set()).add(out)
            message = _read(agents / to / "inbox" / cmd.plan_id / out)
            want = message_id(cmd.agent, cmd.plan_id, cmd.command_id, to, status)
            assert message["message_id"] == want, f"{to}/{out}: another message {context}"
            assert message["command_id"] == cmd.command_id
        deliveries = audit["routing"]["deliveries"]
        assert sorted(d["to"] for d in deliveries) == sorted(targets), (cmd, deliveries)
        assert {d["status"] for d in deliveries} <= {"delivered", "already_delivered"}, deliveries
    by_agent: dict[str, list[Cmd]] = {}
    for cmd in commands:
        by_agent.setdefault(cmd.agent, []).append(cmd)
    for agent_id, mine in by_agent.items():
        agent = agents / agent_id
        left = sorted(p.name for p in (agent / "inbox").glob("cmd_*.json"))
        assert left == [], f"{agent_id}: command files left in the inbox {context}: {left[:5]}"
        finished = [f"{s}/{p}" for s in ("done", "failed") for p in archived(root, agent_id, s)]
        want = [f"{statuses[c.command_id]}/{c.plan_id}/{c.command_id}.json" for c in mine]
        assert sorted(finished) == sorted(want), f"{agent_id}: archive entries {context}"
        assert archived(root, agent_id, "bad") == [], f"{agent_id}: rejected files {context}"
    plans = {c.plan_id for c in commands}
    receivers = {t for c in commands for t in (*c.send_to, *c.on_failure)}
    for to in receivers:
        for plan in plans:
            folder = agents / to / "inbox" / plan
            present = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
            want_names = expected_inbox.get((to, plan), set())
            assert present == want_names, (
                f"{to}/inbox/{plan}: extra {sorted(present - want_names)[:5]}, "
                f"missing {sorted(want_names - present)[:5]} {context}"
            )
    return statuses


def assert_status_agrees(root: Path, statuses: Mapping[str, str], commands: list[Cmd]) -> None:
    """`agenttalk status --json`, read from the files alone, tells the same story."""
    reported = status_json(root)
    for agent_id in {c.agent for c in commands}:
        st = reported[agent_id]
        assert st["profile_error"] is None and st["rejected_files"] == [], st
        listed = [(c["plan_id"], c["command_id"], c["state"]) for c in st["commands"]]
        want = [(c.plan_id, c.command_id, statuses[c.command_id]) for c in commands]
        want = [w for w, c in zip(want, commands, strict=True) if c.agent == agent_id]
        assert sorted(listed) == sorted(want), f"{agent_id}: status disagrees with the files"
