"""Exactly once under SIGKILL: the real `agenttalk run` process, killed and restarted.

The daemon runs as a subprocess against a loopback OpenAI-compatible server in this process.
What SIGKILL can show: every step survives a process crash at any point (atomic files, the saved
LLM outcome, deterministic message ids). What it cannot show: that fsync makes the files survive
a power cut; the page cache outlives a killed process, so the fsyncs of `durability: safe` are
not what these tests check.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import make_society, read_json, wait_until, write_json
from torture.support import daemon_process, run_until_idle, sigkill, status_json

from agenttalk import fsio
from agenttalk.executor import RunRecord
from agenttalk.llm.loopback import LoopbackLLM
from agenttalk.llm.reply import Outcome
from agenttalk.models import Message
from agenttalk.routing import deliver, message_id
from agenttalk.society import CommandKey, Society

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")

PLAN = "crash"
SERVICE = "loopback"
CONFIG: dict[str, Any] = {
    "heartbeat_seconds": 1,
    "durability": "safe",
    "settle_seconds": 0.2,
    "llm": {
        "default": SERVICE,
        # no base_url: the daemon takes OPENAI_BASE_URL from its environment
        "services": {SERVICE: {"provider": "openai", "model": "crash-model", "max_retries": 0}},
    },
}


@dataclass(frozen=True)
class Cmd:
    """One command of a test society and what it must leave behind once it has ended."""

    agent: str
    command_id: str
    send_to: tuple[str, ...]
    output_name: str
    required_inputs: tuple[str, ...] = ()

    @property
    def prompt(self) -> str:
        return f"Task {self.command_id} for {self.agent}."

    def as_json(self) -> dict[str, Any]:
        return {
            "command_id": self.command_id,
            "plan_id": PLAN,
            "prompt": self.prompt,
            "required_inputs": list(self.required_inputs),
            "on_complete": {"send_to": list(self.send_to), "output_name": self.output_name},
        }


def society_with(root: Path, commands: list[Cmd]) -> Society:
    agents = sorted({c.agent for c in commands} | {t for c in commands for t in c.send_to})
    society = make_society(root, [a for a in agents if a != "user"], CONFIG)
    for cmd in commands:
        write_json(society.agent(cmd.agent).inbox / f"cmd_{cmd.command_id}.json", cmd.as_json())
    return society


def agent_asked(seen_body: dict[str, Any]) -> str:
    """The agent a loopback request came from (profiles from `make_society` say `You are X.`)."""
    match = re.search(r"You are (\S+?)\.", seen_body["messages"][0]["content"])
    assert match, "the system message names no agent"
    return match.group(1)


def task_asked(seen_body: dict[str, Any]) -> str:
    return str(seen_body["messages"][1]["content"].split("## Task\n", 1)[1].splitlines()[0])


def assert_each_ended_once(society: Society, commands: list[Cmd], context: str = "") -> None:
    """Each command done exactly once, each target holding exactly its one message per command."""
    agents = {c.agent for c in commands}
    targets = {t for c in commands for t in c.send_to}
    for agent_id in sorted(agents | targets):
        agent = society.agent(agent_id)
        mine = [c for c in commands if c.agent == agent_id]
        left = sorted(p.name for p in agent.inbox.glob("cmd_*.json"))
        assert left == [], f"{agent_id}: commands left in the inbox {context}"
        done = agent.archive / "done" / PLAN
        archived = sorted(p.name for p in done.iterdir()) if done.is_dir() else []
        assert archived == sorted(f"{c.command_id}.json" for c in mine), f"{agent_id} {context}"
        for other in ("failed", "bad"):
            folder = agent.archive / other
            assert not folder.exists() or not any(folder.rglob("*")), f"{agent_id}: {other}"
        temporaries = [str(p) for p in agent.inbox.rglob(".*") if p.name.endswith(".tmp")]
        assert temporaries == [], f"temporary files left in an inbox {context}"

        inbound = [(c, agent_id) for c in commands if agent_id in c.send_to]
        plan_inbox = agent.plan_inbox(PLAN)
        present = sorted(p.name for p in plan_inbox.iterdir()) if plan_inbox.is_dir() else []
        assert present == sorted(c.output_name for c, _ in inbound), f"{agent_id} {context}"
        for cmd, to in inbound:
            message = read_json(plan_inbox / cmd.output_name)
            assert message["message_id"] == message_id(cmd.agent, PLAN, cmd.command_id, to, "done")
            assert (message["from"], message["command_id"]) == (cmd.agent, cmd.command_id)
            assert message["result"] == f"done: {cmd.prompt}"

        for cmd in mine:
            audit_path = agent.audit_dir(CommandKey(PLAN, cmd.command_id)) / "audit.json"
            assert audit_path.exists(), f"{agent_id} {cmd.command_id}: no audit {context}"
            audit = read_json(audit_path)
            assert audit["status"] == "done", audit
            assert audit["routing"]["targets"] == list(cmd.send_to)
            statuses = {d["to"]: d["status"] for d in audit["routing"]["deliveries"]}
            assert set(statuses) == set(cmd.send_to)
            assert set(statuses.values()) <= {"delivered", "already_delivered"}, statuses


def assert_status_agrees(root: Path, commands: list[Cmd]) -> None:
    """`agenttalk status --json`, read from the files alone, tells the same story."""
    by_agent = status_json(root)
    for agent_id in {c.agent for c in commands}:
        st = by_agent[agent_id]
        assert st["profile_error"] is None and st["rejected_files"] == []
        states = {(c["plan_id"], c["command_id"]): c["state"] for c in st["commands"]}
        assert len(states) == len(st["commands"]), "a command is listed twice"
        expected = {(PLAN, c.command_id): "done" for c in commands if c.agent == agent_id}
        assert states == expected


# -- one kill inside an LLM call ---------------------------------------------------------------

FAN_OUT = [
    # the writer fans out to three agents; two of them feed a third: a chain three deep
    Cmd("writer", "draft", ("reviewer", "checker", "editor"), "draft.json"),
    Cmd("reviewer", "review", ("user",), "review.json", ("draft.json",)),
    Cmd("checker", "check", ("editor",), "check.json", ("draft.json",)),
    Cmd("editor", "edit", ("user",), "edit.json", ("draft.json", "check.json")),
]


def test_sigkill_during_the_llm_call_repeats_only_that_call_and_ends_each_command_once(
    tmp_path: Path,
) -> None:
    society = society_with(tmp_path / "society", FAN_OUT)
    log = tmp_path / "daemon.log"
    with LoopbackLLM(delay=1.5) as llm:
        with daemon_process(society.root, log, llm) as proc:
            wait_until(lambda: llm.requests, timeout=20, what="the writer's LLM request")
            # Only the writer could run: it is inside its 1.5 s LLM call now.
            assert [agent_asked(r.body) for r in llm.requests] == ["writer"]
            assert proc.poll() is None
            sigkill(proc)
        writer = society.agent("writer")
        assert writer.running_path(CommandKey(PLAN, "draft")).exists()
        assert not writer.result_path(CommandKey(PLAN, "draft")).exists()
        assert not any(society.agent("reviewer").inbox.rglob("draft.json"))
        # The killed daemon's running marker stays behind; status must not believe it.
        states = {
            s["agent_id"]: [(c["command_id"], c["state"]) for c in s["commands"]]
            for s in status_json(society.root).values()
        }
        assert states["writer"] == [("draft", "pending")]
        assert states["editor"] == [("edit", "waiting")]

        run_until_idle(society.root, log, llm)

        asked = Counter(agent_asked(r.body) for r in llm.requests)
    assert asked == {"writer": 2, "reviewer": 1, "checker": 1, "editor": 1}
    assert_each_ended_once(society, FAN_OUT)
    for cmd in FAN_OUT:
        agent, key = society.agent(cmd.agent), CommandKey(PLAN, cmd.command_id)
        assert not agent.result_path(key).exists(), "a saved LLM outcome is left"
        assert not agent.running_path(key).exists(), "a stale running marker is left"
    assert_status_agrees(society.root, FAN_OUT)


# -- many kills at random points across a chained batch ----------------------------------------

AGENTS = ("a1", "a2", "a3", "a4", "a5")
LLM_SECONDS = 0.25


def chained_batch(rounds: int) -> list[Cmd]:
    """Per round: a1 -> a2, a3; a2 -> a4; a3 -> a4, a5; a4 -> a5, user; a5 -> user."""
    out = []
    for r in range(rounds):
        a1, a2, a3, a4, a5 = (f"r{r}_{a}.json" for a in AGENTS)
        out += [
            Cmd("a1", f"r{r}_a1", ("a2", "a3"), a1),
            Cmd("a2", f"r{r}_a2", ("a4",), a2, (a1,)),
            Cmd("a3", f"r{r}_a3", ("a4", "a5"), a3, (a1,)),
            Cmd("a4", f"r{r}_a4", ("a5", "user"), a4, (a2, a3)),
            Cmd("a5", f"r{r}_a5", ("user",), a5, (a3, a4)),
        ]
    return out


def test_repeated_sigkills_at_random_points_still_end_each_command_once(tmp_path: Path) -> None:
    seed = int(os.environ.get("AGENTTALK_CRASH_SEED", "20240607"))
    rng = random.Random(seed)
    batch = chained_batch(rounds=4)
    society = society_with(tmp_path / "society", batch)
    log = tmp_path / "daemon.log"
    kills = 0

    def all_archived() -> bool:
        done = sum(
            len(list((society.agent(a).archive / "done" / PLAN).glob("*.json"))) for a in AGENTS
        )
        return done == len(batch)

    with LoopbackLLM(delay=LLM_SECONDS) as llm:
        for attempt in range(6):
            with daemon_process(society.root, log, llm) as proc:
                if attempt == 0:
                    # Somewhere in start-up and intake (imports take a good part of a second).
                    time.sleep(rng.uniform(0.3, 1.2))
                else:
                    before = len(llm.requests)

                    def progressed(before: int = before) -> bool:
                        return len(llm.requests) > before or all_archived()

                    wait_until(progressed, timeout=20, what="the restarted daemon's next request")
                    if len(llm.requests) > before:
                        # The kill point is what is under test: inside the LLM call, or just
                        # after the reply, while the outcome is saved, delivered and archived.
                        after = rng.choice(
                            [rng.uniform(0, LLM_SECONDS), LLM_SECONDS + rng.uniform(0, 0.05)]
                        )
                        time.sleep(max(0.0, llm.requests[before].at + after - time.time()))
                assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
                sigkill(proc)
                kills += 1
            if all_archived():
                break
        run_until_idle(society.root, log, llm)
        # A kill while the request was being sent leaves the server a request without a body.
        asked = Counter(task_asked(r.body) for r in llm.requests if "messages" in r.body)

    context = f"(seed {seed}, {kills} kills)"
    assert kills >= 2, f"the batch finished before the daemon was killed twice {context}"
    assert_each_ended_once(society, batch, context)
    never_asked = [c.command_id for c in batch if asked[c.prompt] == 0]
    assert never_asked == [], context
    assert_status_agrees(society.root, batch)


# -- a crash after the LLM outcome was saved ---------------------------------------------------


def test_restart_after_the_outcome_was_saved_delivers_it_without_asking_again(
    tmp_path: Path,
) -> None:
    """The state a crash leaves between saving the LLM outcome and the last delivery."""
    draft = FAN_OUT[0]
    society = society_with(tmp_path / "society", [draft])
    writer = society.agent("writer")
    key = CommandKey(PLAN, draft.command_id)
    # What Executor.run saves before it delivers anything (the outbox record) ...
    outcome = Outcome(
        status="ok",
        reply={"result": f"done: {draft.prompt}"},
        service=SERVICE,
        model="crash-model",
    )
    record = RunRecord(started_at=time.time(), outcome=outcome)
    fsio.atomic_write_json(writer.result_path(key), record.model_dump(mode="json"))
    # ... and the first of its three deliveries, made before the crash.
    first = Message(
        message_id=message_id("writer", PLAN, draft.command_id, "reviewer", "done"),
        plan_id=PLAN,
        command_id=draft.command_id,
        from_="writer",
        to="reviewer",
        created_at="2024-01-01T00:00:00.000Z",
        result=f"done: {draft.prompt}",
        text=f"done: {draft.prompt}",
    )
    assert deliver(society, first, draft.output_name, durable=True).status == "delivered"
    delivered = society.agent("reviewer").plan_inbox(PLAN) / draft.output_name
    before = delivered.read_bytes()
    # The second delivery was cut short: the killed writer's temporary file stays behind. A live
    # writer's (here: this process, as `agenttalk send` would be) must be left alone.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    checker_inbox = society.agent("checker").plan_inbox(PLAN)
    half_written = checker_inbox / f".{draft.output_name}.{dead.pid}.0a1b2c3d.tmp"
    in_progress = society.agent("editor").inbox / f".notes.txt.{os.getpid()}.0a1b2c3d.tmp"
    for path, text in ((half_written, '{"message_id": "msg_'), (in_progress, "being written")):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    log = tmp_path / "daemon.log"
    with LoopbackLLM() as llm:
        run_until_idle(society.root, log, llm)
        assert llm.requests == [], "the saved outcome was asked for again"

    assert delivered.read_bytes() == before, "the message delivered before the crash was rewritten"
    assert not half_written.exists(), "a killed writer's temporary file was left in an inbox"
    assert in_progress.read_text() == "being written"
    in_progress.unlink()
    audit = read_json(writer.audit_dir(key) / "audit.json")
    statuses = {d["to"]: d["status"] for d in audit["routing"]["deliveries"]}
    assert statuses == {
        "reviewer": "already_delivered",
        "checker": "delivered",
        "editor": "delivered",
    }
    assert audit["result"] == f"done: {draft.prompt}"
    assert not writer.result_path(key).exists()
    assert_each_ended_once(society, [draft])
    assert_status_agrees(society.root, [draft])


def test_restart_after_a_crash_inside_the_archive_move_finishes_the_move(tmp_path: Path) -> None:
    """`fsio.move` links, then unlinks: a crash in between leaves the command in both places."""
    draft = FAN_OUT[0]
    society = society_with(tmp_path / "society", [draft])
    writer = society.agent("writer")
    log = tmp_path / "daemon.log"
    with LoopbackLLM() as llm:
        run_until_idle(society.root, log, llm)
        archived = writer.finished_path("done", CommandKey(PLAN, draft.command_id))
        command_file = writer.inbox / f"cmd_{draft.command_id}.json"
        os.link(archived, command_file)  # the state that crash leaves
        asked = len(llm.requests)
        run_until_idle(society.root, log, llm)
        assert len(llm.requests) == asked, "the archived command was run again"
    assert not command_file.exists()
    assert_each_ended_once(society, [draft])
    assert_status_agrees(society.root, [draft])


def test_a_session_killed_mid_discussion_resumes_and_ends_every_turn_once(tmp_path: Path) -> None:
    from test_sessions import NAMES, SESSION, debate_society, decision_lines, drop_session, reply

    root = tmp_path / "society"
    society = debate_society(root, CONFIG)
    drop_session(society)
    moderator = society.agent("moderator")
    out = moderator.outbox / SESSION
    log = tmp_path / "daemon.log"

    def steps() -> int:
        return len(decision_lines(society)) if (out / "decisions.jsonl").exists() else 0

    with LoopbackLLM(default=lambda body: reply(body["messages"]), delay=0.01) as llm:
        for at in (6, 14, 22):
            with daemon_process(root, log, llm) as proc:
                wait_until(lambda at=at: steps() >= at, timeout=60)
                sigkill(proc)
        run_until_idle(root, log, llm, timeout=120)

    lines = decision_lines(society)
    assert [line["step"] for line in lines] == list(range(1, len(lines) + 1))
    assert lines[-1]["decision"]["action"] == "END_DISCUSSION"
    assert read_json(out / "progress.json")["state"] == "done"
    assert (out / "transcript.md").is_file()
    assert (moderator.archive / "done" / "session_remote_work.json").is_file()
    answers = Counter(p.name for p in (moderator.inbox / SESSION).iterdir())
    for agent_id in NAMES:
        agent = society.agent(agent_id)
        done = [p.name for p in (agent.archive / "done" / SESSION).iterdir()]
        assert all(re.fullmatch(r"s\d{4}_(intent|speech|vote)\.json", n) for n in done), done
        assert not list(agent.inbox.glob("cmd_*.json"))
        for name in done:
            assert answers[name.replace(".json", f"_from_{agent_id}.json")] == 1
    events_path = root / "agents" / "event_log" / "outbox" / f"{SESSION}.jsonl"
    events = [json.loads(line) for line in events_path.read_text().splitlines()]
    sequences = [e["sequence"] for e in events]
    assert sequences == sorted(set(sequences))
    assert len({e["event_id"] for e in events}) == len(events)
    speeches = lines[-1]["state"]["total_rounds"]  # the state counts each speech once
    assert speeches and sum(1 for e in events if e["type"] == "SPEECH") == speeches
