"""The daemon end to end, through real files: intake, waiting, routing, audit, archive, failures."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    FAKE_MODEL,
    FAKE_SERVICE,
    accepted,
    agent_of,
    drop_command,
    files_under,
    make_daemon,
    make_society,
    profile_for,
    read_json,
    running_daemon,
    task_of,
    wait_until,
    write_bytes,
    write_json,
)

from agenttalk.daemon import Daemon
from agenttalk.llm import LLMRequest
from agenttalk.llm.fake import FakeProvider
from agenttalk.llm.loopback import LoopbackLLM
from agenttalk.society import CommandKey, Society
from agenttalk.status import agent_status

# -- helpers ---------------------------------------------------------------------------------


def agent_dir(society: Society, agent_id: str) -> Path:
    return society.agent(agent_id).path


def audit_of(society: Society, agent_id: str, plan_id: str, command_id: str) -> dict[str, Any]:
    path = society.agent(agent_id).audit_dir(CommandKey(plan_id, command_id)) / "audit.json"
    data = read_json(path)
    assert isinstance(data, dict)
    return data


def delivered(society: Society, to: str, plan_id: str, name: str) -> Path:
    return society.agent(to).plan_inbox(plan_id) / name


def archived(society: Society, agent_id: str, status: str, plan_id: str, command_id: str) -> Path:
    return society.agent(agent_id).finished_path(status, CommandKey(plan_id, command_id))


def pending_commands(society: Society, agent_id: str) -> list[str]:
    inbox = society.agent(agent_id).inbox
    return sorted(p.name for p in inbox.glob("cmd_*.json"))


def rejected(society: Society, agent_id: str) -> dict[str, dict[str, Any]]:
    """Error records in archive/bad, keyed by the original file name."""
    bad = society.agent(agent_id).archive / "bad"
    records = {}
    for path in bad.glob("*.error.json"):
        record = read_json(path)
        moved = Path(record["moved_to"])
        assert moved.exists() or moved.is_symlink(), f"{moved} was not kept beside its error"
        records[record["file"]] = record
    return records


def run_until_idle(society: Society, provider: FakeProvider) -> None:
    make_daemon(society, provider).run(until_idle=True)


# -- one command ------------------------------------------------------------------------------


def test_a_command_without_inputs_runs_delivers_a_full_message_and_a_full_audit(
    tmp_path: Path,
) -> None:
    society = make_society(tmp_path, agents=["writer", "reader"])
    reply = {"result": "hello world", "score_explanation": "unused"}
    fake = FakeProvider([reply])
    command = {
        "command_id": "hello",
        "plan_id": "p1",
        "prompt": "Say hello.",
        "on_complete": {"send_to": ["reader"], "message_template": "Hi: {result} ({agent_id})"},
    }
    cmd_file = drop_command(society, "writer", command)
    cmd_bytes = cmd_file.read_bytes()

    run_until_idle(society, fake)

    message_path = delivered(society, "reader", "p1", "hello_from_writer.json")
    message = read_json(message_path)
    assert set(message) >= {
        "message_id", "plan_id", "command_id", "from", "to", "created_at",
        "result", "score", "score_explanation", "text", "status",
    }  # fmt: skip
    assert message["message_id"].startswith("msg_")
    assert (message["plan_id"], message["command_id"]) == ("p1", "hello")
    assert (message["from"], message["to"]) == ("writer", "reader")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", message["created_at"])
    assert message["status"] == "done"
    assert message["result"] == "hello world"
    assert message["score"] is None
    assert message["score_explanation"] == "unused"
    assert message["text"] == "Hi: hello world (writer)"

    # The command file left the top of the inbox for the archive, unchanged.
    assert not cmd_file.exists()
    assert pending_commands(society, "writer") == []
    done = archived(society, "writer", "done", "p1", "hello")
    assert done.read_bytes() == cmd_bytes

    # The outbox keeps a copy of the message sent.
    writer_outbox = society.agent("writer").audit_dir(CommandKey("p1", "hello"))
    assert read_json(writer_outbox / "sent" / "reader" / "hello_from_writer.json") == message

    audit = audit_of(society, "writer", "p1", "hello")
    assert audit["status"] == "done" and audit["error"] is None
    assert audit["command"]["command_id"] == "hello"
    assert audit["command"]["on_complete"]["send_to"] == ["reader"]
    assert audit["command_sha256"] == hashlib.sha256(cmd_bytes).hexdigest()
    assert audit["inputs"] == [] and audit["missing_inputs"] == []
    assert len(fake.history) == 1
    llm = audit["llm"]
    assert llm["service"] == FAKE_SERVICE and llm["model"] == FAKE_MODEL
    assert len(llm["attempts"]) == 1
    attempt = llm["attempts"][0]
    assert attempt["messages_added"] == fake.history[0].messages
    assert attempt["messages_added"][0]["content"].startswith("You are writer.")
    assert "Say hello." in attempt["messages_added"][1]["content"]
    assert json.loads(attempt["raw_reply"]) == reply
    assert audit["result"] == "hello world"
    assert llm["usage"]["total_tokens"] > 0
    assert llm["usage"]["total_tokens"] == attempt["usage"]["total_tokens"]
    assert audit["routing"]["matched_min_score"] is None
    assert audit["routing"]["targets"] == ["reader"]
    assert audit["routing"]["deliveries"] == [
        {
            "to": "reader",
            "file": str(message_path.relative_to(society.root)),
            "status": "delivered",
            "error": None,
        }
    ]
    timings = audit["timings"]
    assert set(timings) == {"waited_s", "llm_s", "total_s"}
    assert 0 <= timings["waited_s"] <= timings["total_s"] < 10
    assert audit["archived_as"] == str(done.relative_to(society.root))


def test_audit_records_each_input_with_its_sha256_and_the_prompt_shows_its_content(
    tmp_path: Path,
) -> None:
    society = make_society(tmp_path, agents=["writer", "reader"])
    inbox = society.agent("writer").inbox
    hand = write_json(inbox / "brief.json", {"topic": "caching"})
    planned = write_json(inbox / "p1" / "notes.json", {"note": "plan-only"})
    fake = FakeProvider([{"result": "ok"}])
    drop_command(
        society,
        "writer",
        {
            "command_id": "use_inputs",
            "plan_id": "p1",
            "prompt": "Use them.",
            "required_inputs": ["brief.json", "notes.json"],
            "on_complete": {"send_to": ["reader"]},
        },
    )

    run_until_idle(society, fake)

    audit = audit_of(society, "writer", "p1", "use_inputs")
    assert audit["inputs"] == [
        {
            "name": "brief.json",
            "sha256": hashlib.sha256(hand.read_bytes()).hexdigest(),
            "size": hand.stat().st_size,
            "truncated": False,
        },
        {
            "name": "p1/notes.json",
            "sha256": hashlib.sha256(planned.read_bytes()).hexdigest(),
            "size": planned.stat().st_size,
            "truncated": False,
        },
    ]
    user = fake.history[0].messages[1]["content"]
    assert "### brief.json\n" in user and '"topic": "caching"' in user
    assert "### p1/notes.json\n" in user and '"note": "plan-only"' in user


# -- routing ----------------------------------------------------------------------------------


def test_score_routing_adds_only_the_highest_condition_reached(tmp_path: Path) -> None:
    society = make_society(tmp_path, agents=["judge", "archivist", "promoter", "fixer"])
    scores = {"high": 85, "low": 40}

    def reply(request: LLMRequest) -> dict[str, Any]:
        return {"result": "verdict", "score": scores[task_of(request)], "score_explanation": "x"}

    for command_id in scores:
        drop_command(
            society,
            "judge",
            {
                "command_id": command_id,
                "plan_id": "p",
                "prompt": command_id,
                "score_required": True,
                "score_criteria": "0-100",
                "on_complete": {
                    "send_to": ["archivist"],
                    "send_to_condition": [
                        {"min_score": 0, "send_to": ["fixer"]},
                        {"min_score": 70, "send_to": ["promoter"]},
                    ],
                },
            },
        )

    fake = FakeProvider(reply)
    run_until_idle(society, fake)

    def names(agent_id: str) -> list[str]:
        return files_under(society.agent(agent_id).plan_inbox("p"))

    assert names("archivist") == ["high_from_judge.json", "low_from_judge.json"]
    assert names("promoter") == ["high_from_judge.json"]
    assert names("fixer") == ["low_from_judge.json"]
    assert read_json(delivered(society, "promoter", "p", "high_from_judge.json"))["score"] == 85
    high = audit_of(society, "judge", "p", "high")["routing"]
    assert high["matched_min_score"] == 70
    assert high["targets"] == ["archivist", "promoter"]
    low = audit_of(society, "judge", "p", "low")["routing"]
    assert low["matched_min_score"] == 0
    assert low["targets"] == ["archivist", "fixer"]
    # The criteria reach the model, and the contract asks for a score.
    assert all("## Scoring criteria\n0-100" in r.messages[1]["content"] for r in fake.history)
    assert all('"score"' in r.messages[0]["content"] for r in fake.history)


def test_an_unknown_target_is_recorded_in_the_audit_and_the_others_still_get_the_message(
    tmp_path: Path,
) -> None:
    society = make_society(tmp_path, agents=["writer", "reader"])
    drop_command(
        society,
        "writer",
        {
            "command_id": "c1",
            "plan_id": "p",
            "prompt": "Write.",
            "on_complete": {"send_to": ["ghost", "reader"]},
        },
    )

    run_until_idle(society, FakeProvider([{"result": "text"}]))

    assert delivered(society, "reader", "p", "c1_from_writer.json").is_file()
    assert not (society.agents_dir / "ghost").exists()
    audit = audit_of(society, "writer", "p", "c1")
    assert audit["status"] == "done"
    by_target = {d["to"]: d for d in audit["routing"]["deliveries"]}
    assert by_target["reader"]["status"] == "delivered"
    assert by_target["ghost"]["status"] == "failed"
    assert by_target["ghost"]["file"] is None
    assert "unknown agent 'ghost'" in by_target["ghost"]["error"]
    sent = society.agent("writer").audit_dir(CommandKey("p", "c1")) / "sent"
    assert files_under(sent) == ["reader/c1_from_writer.json"]


# -- waiting for inputs ---------------------------------------------------------------------


def test_a_command_waits_for_its_inputs_and_runs_once_they_arrive(tmp_path: Path) -> None:
    society = make_society(tmp_path, agents=["reviewer", "manager"])
    fake = FakeProvider(lambda request: {"result": "reviewed"})
    drop_command(
        society,
        "reviewer",
        {
            "command_id": "review",
            "plan_id": "p",
            "prompt": "Review.",
            "required_inputs": ["draft.txt", "extra_*.md"],
            "on_complete": {"send_to": ["manager"]},
        },
    )

    run_until_idle(society, fake)

    assert fake.history == []
    assert pending_commands(society, "reviewer") == ["cmd_review.json"]
    status = agent_status(society, "reviewer")
    [state] = status.commands
    assert state.state == "waiting"
    assert state.missing_inputs == ["draft.txt", "extra_*.md"]

    write_bytes(society.agent("reviewer").inbox / "draft.txt", b"the draft")
    run_until_idle(society, fake)
    assert fake.history == []
    [state] = agent_status(society, "reviewer").commands
    assert state.missing_inputs == ["extra_*.md"]

    write_bytes(society.agent("reviewer").inbox / "p" / "extra_1.md", b"more")
    run_until_idle(society, fake)

    assert len(fake.history) == 1
    assert archived(society, "reviewer", "done", "p", "review").is_file()
    assert delivered(society, "manager", "p", "review_from_reviewer.json").is_file()
    [state] = agent_status(society, "reviewer").commands
    assert state.state == "done"


def test_a_waiting_command_runs_within_a_second_of_its_last_input_arriving(
    tmp_path: Path,
) -> None:
    # A 60 s heartbeat: only the file event can start the command in time.
    society = make_society(
        tmp_path, agents=["reviewer", "manager"], config={"heartbeat_seconds": 60}
    )
    requested_at: list[float] = []

    def reply(request: LLMRequest) -> dict[str, Any]:
        requested_at.append(time.time())
        return {"result": "reviewed"}

    daemon = make_daemon(society, FakeProvider(reply))
    drop_command(
        society,
        "reviewer",
        {
            "command_id": "review",
            "plan_id": "p",
            "prompt": "Review.",
            "required_inputs": ["draft.json", "draft.txt"],
            "on_complete": {"send_to": ["manager"]},
        },
    )
    key = CommandKey("p", "review")
    with running_daemon(daemon):
        wait_until(lambda: accepted(daemon, "reviewer", key.command_id), what="intake")
        write_bytes(society.agent("reviewer").inbox / "draft.json", b'{"v": 1}')
        write_bytes(society.agent("reviewer").inbox / "p" / "draft.txt", b"text")
        arrived = time.time()
        wait_until(lambda: requested_at, timeout=5, what="the LLM request")
        latency = requested_at[0] - arrived
        wait_until(lambda: archived(society, "reviewer", "done", "p", "review").exists())
    assert latency < 1.0, f"ran {latency:.2f}s after its last input arrived"


def test_a_delivered_result_starts_the_waiting_downstream_command_at_once(
    tmp_path: Path,
) -> None:
    society = make_society(tmp_path, agents=["writer", "manager"], config={"heartbeat_seconds": 60})
    requested: dict[str, float] = {}

    def reply(request: LLMRequest) -> dict[str, Any]:
        requested[agent_of(request)] = time.time()
        return {"result": f"from {agent_of(request)}"}

    daemon = make_daemon(society, FakeProvider(reply))
    drop_command(
        society,
        "manager",
        {
            "command_id": "decide",
            "plan_id": "p",
            "prompt": "Decide.",
            "required_inputs": ["feedback_writer.json"],
            "on_complete": {"send_to": ["user"]},
        },
    )
    with running_daemon(daemon):
        manager = society.agent("manager")
        wait_until(lambda: accepted(daemon, manager.agent_id, "decide"))
        drop_command(
            society,
            "writer",
            {
                "command_id": "write",
                "plan_id": "p",
                "prompt": "Write.",
                "on_complete": {
                    "send_to": ["manager"],
                    "output_name": "feedback_{agent_id}.json",
                },
            },
        )
        wait_until(lambda: archived(society, "manager", "done", "p", "decide").exists())
    assert requested["manager"] - requested["writer"] < 1.0


def test_chained_commands_run_in_one_until_idle_run(tmp_path: Path) -> None:
    # No watcher and a 60 s heartbeat: only the daemon's own hand-off can wake the manager.
    society = make_society(
        tmp_path, agents=["reviewer", "manager", "boss"], config={"heartbeat_seconds": 60}
    )

    def reply(request: LLMRequest) -> dict[str, Any]:
        return {"result": f"{agent_of(request)} says fine"}

    fake = FakeProvider(reply)
    # The downstream command is dropped first, so it is already waiting when its input lands.
    drop_command(
        society,
        "manager",
        {
            "command_id": "summarise",
            "plan_id": "p",
            "prompt": "Summarise the feedback.",
            "required_inputs": ["feedback_reviewer.json"],
            "on_complete": {"send_to": ["boss"]},
        },
    )
    drop_command(
        society,
        "reviewer",
        {
            "command_id": "review",
            "plan_id": "p",
            "prompt": "Review.",
            "on_complete": {"send_to": ["manager"], "output_name": "feedback_{agent_id}.json"},
        },
    )

    make_daemon(society, fake).run(until_idle=True, watch=False)

    assert [agent_of(r) for r in fake.history] == ["reviewer", "manager"]
    assert "### p/feedback_reviewer.json" in fake.history[1].messages[1]["content"]
    assert "reviewer says fine" in fake.history[1].messages[1]["content"]
    final = read_json(delivered(society, "boss", "p", "summarise_from_manager.json"))
    assert final["result"] == "manager says fine"
    assert archived(society, "manager", "done", "p", "summarise").is_file()


def test_two_plans_with_the_same_input_names_never_mix(tmp_path: Path) -> None:
    society = make_society(tmp_path, agents=["reviewer", "manager"])

    def reply(request: LLMRequest) -> dict[str, Any]:
        task = task_of(request)
        return {"result": f"{agent_of(request)} on {task}"}

    fake = FakeProvider(reply)
    write_bytes(society.agent("manager").inbox / "house_rules.txt", b"be kind")
    for plan in ("planA", "planB"):
        drop_command(
            society,
            "manager",
            {
                "command_id": "decide",
                "plan_id": plan,
                "prompt": f"decide {plan}",
                "required_inputs": ["feedback.json", "house_rules.txt"],
            },
            name=f"cmd_{plan}_decide.json",
        )
        drop_command(
            society,
            "reviewer",
            {
                "command_id": "review",
                "plan_id": plan,
                "prompt": f"review {plan}",
                "on_complete": {"send_to": ["manager"], "output_name": "feedback.json"},
            },
            name=f"cmd_{plan}_review.json",
        )

    run_until_idle(society, fake)

    seen = {task_of(r): r.messages[1]["content"] for r in fake.history if agent_of(r) == "manager"}
    assert set(seen) == {"decide planA", "decide planB"}
    for mine, other in (("planA", "planB"), ("planB", "planA")):
        content = seen[f"decide {mine}"]
        assert f"### {mine}/feedback.json" in content
        assert f"reviewer on review {mine}" in content
        assert other not in content
        assert "### house_rules.txt\nbe kind" in content
    for plan in ("planA", "planB"):
        audit = audit_of(society, "manager", plan, "decide")
        assert [i["name"] for i in audit["inputs"]] == ["house_rules.txt", f"{plan}/feedback.json"]
        assert archived(society, "manager", "done", plan, "decide").is_file()


def test_without_wait_for_inputs_the_command_runs_at_once_naming_what_is_missing(
    tmp_path: Path,
) -> None:
    society = make_society(tmp_path, agents=["writer", "reader"])
    fake = FakeProvider([{"result": "did my best"}])
    write_json(society.agent("writer").inbox / "present.json", {"x": 1})
    drop_command(
        society,
        "writer",
        {
            "command_id": "eager",
            "plan_id": "p",
            "prompt": "Go.",
            "required_inputs": ["present.json", "absent.txt", "later_*.json"],
            "wait_for_inputs": False,
            "on_complete": {"send_to": ["reader"]},
        },
    )

    run_until_idle(society, fake)

    user = fake.history[0].messages[1]["content"]
    assert "## Missing inputs (not available; work without them)\n- absent.txt\n- later_*.json" in (
        user
    )
    assert "### present.json" in user
    audit = audit_of(society, "writer", "p", "eager")
    assert audit["status"] == "done"
    assert audit["missing_inputs"] == ["absent.txt", "later_*.json"]
    assert [i["name"] for i in audit["inputs"]] == ["present.json"]


# -- timeouts -------------------------------------------------------------------------------


def timeout_command(command_id: str) -> dict[str, Any]:
    return {
        "command_id": command_id,
        "plan_id": "p",
        "prompt": "Wait for it.",
        "required_inputs": ["never.json"],
        "timeout": 1,
        "on_complete": {"send_to": ["watcher"]},
        "on_failure": {"send_to": ["watcher", "user"], "message_template": "FAILED: {error}"},
    }


def test_a_waiting_command_times_out_and_on_failure_is_told(tmp_path: Path) -> None:
    society = make_society(tmp_path, agents=["worker", "watcher"])
    fake = FakeProvider(lambda request: {"result": "never asked"})
    daemon = make_daemon(society, fake)
    failed = archived(society, "worker", "failed", "p", "slow")
    with running_daemon(daemon):
        started = time.time()
        drop_command(society, "worker", timeout_command("slow"))
        wait_until(failed.exists, timeout=5, what="the timeout")
        elapsed = time.time() - started
    assert 0.9 <= elapsed < 3.0
    assert fake.history == []
    for to in ("watcher", "user"):
        notice = read_json(delivered(society, to, "p", "slow_failed_from_worker.json"))
        assert notice["status"] == "failed"
        assert notice["from"] == "worker" and notice["to"] == to
        assert "timed out after 1s waiting for inputs: missing never.json" in notice["error"]
        assert notice["text"] == f"FAILED: {notice['error']}"
        assert notice["result"] is None
    assert not delivered(society, "watcher", "p", "slow_from_worker.json").exists()
    audit = audit_of(society, "worker", "p", "slow")
    assert audit["status"] == "failed"
    assert "timed out" in audit["error"]
    assert "llm" not in audit
    assert audit["routing"]["targets"] == ["watcher", "user"]
    assert pending_commands(society, "worker") == []


def test_the_arrival_time_survives_a_restart_so_a_timeout_still_fires(tmp_path: Path) -> None:
    society = make_society(tmp_path, agents=["worker", "watcher"])
    fake = FakeProvider(lambda request: {"result": "never asked"})
    drop_command(society, "worker", timeout_command("slow"))
    first_seen = time.time()
    run_until_idle(society, fake)
    assert pending_commands(society, "worker") == ["cmd_slow.json"]
    [state] = agent_status(society, "worker").commands
    assert state.state == "waiting"

    # Let the 1 s timeout pass while no daemon runs, then start a fresh one.
    wait_until(lambda: time.time() > first_seen + 1.2, timeout=3, what="the clock")
    started = time.monotonic()
    run_until_idle(Society(society.root), fake)
    took = time.monotonic() - started

    assert archived(society, "worker", "failed", "p", "slow").is_file()
    assert took < 1.0
    assert fake.history == []
    notice = read_json(delivered(society, "watcher", "p", "slow_failed_from_worker.json"))
    assert "timed out" in notice["error"]


# -- order and concurrency ----------------------------------------------------------------


def test_one_command_at_a_time_per_agent_oldest_arrival_first(tmp_path: Path) -> None:
    society = make_society(tmp_path, agents=["solo", "sink"], config={"heartbeat_seconds": 60})
    release = threading.Event()
    order: list[str] = []
    active = 0
    peak = 0
    lock = threading.Lock()

    def reply(request: LLMRequest) -> dict[str, Any]:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
            order.append(task_of(request))
        release.wait(timeout=5)
        with lock:
            active -= 1
        return {"result": "ok"}

    def command(command_id: str) -> dict[str, Any]:
        return {
            "command_id": command_id,
            "plan_id": "p",
            "prompt": command_id,
            "on_complete": {"send_to": ["sink"]},
        }

    solo = society.agent("solo")
    daemon = make_daemon(society, FakeProvider(reply))
    with running_daemon(daemon):
        # Names sort the other way round from arrival: only arrival may decide the order.
        drop_command(society, "solo", command("c_third"))
        wait_until(lambda: order, what="the first command to start")
        for command_id in ("b_second", "a_first"):
            drop_command(society, "solo", command(command_id))
            wait_until(lambda cid=command_id: accepted(daemon, solo.agent_id, cid))
        release.set()
        for command_id in ("c_third", "b_second", "a_first"):
            wait_until(lambda cid=command_id: archived(society, "solo", "done", "p", cid).exists())
    assert order == ["c_third", "b_second", "a_first"]
    assert peak == 1


def test_agents_run_in_parallel_up_to_max_concurrency(tmp_path: Path) -> None:
    agents = ["a1", "a2", "a3", "a4"]
    society = make_society(tmp_path, agents=[*agents, "sink"], config={"max_concurrency": 2})
    pair = threading.Barrier(2, timeout=5)
    hold = threading.Event()
    lock = threading.Lock()
    active: dict[str, int] = defaultdict(int)
    peak_total = 0
    peak_per_agent = 0
    problems: list[str] = []

    def reply(request: LLMRequest) -> dict[str, Any]:
        nonlocal peak_total, peak_per_agent
        agent = agent_of(request)
        with lock:
            active[agent] += 1
            peak_total = max(peak_total, sum(active.values()))
            peak_per_agent = max(peak_per_agent, active[agent])
        try:
            pair.wait()  # proves two really overlap
        except threading.BrokenBarrierError:
            problems.append(f"{agent} never had company")
        hold.wait(timeout=0.1)  # simulated latency: room for a wrongly started third call
        with lock:
            active[agent] -= 1
        return {"result": agent}

    for index, agent in enumerate(agents):
        for n in range(2):
            drop_command(
                society,
                agent,
                {
                    "command_id": f"job{n}",
                    "plan_id": "p",
                    "prompt": f"job {index}.{n}",
                    "on_complete": {"send_to": ["sink"], "output_name": "{command_id}_{agent_id}"},
                },
            )

    run_until_idle(society, FakeProvider(reply))

    assert problems == []
    assert peak_total == 2
    assert peak_per_agent == 1
    assert len(files_under(society.agent("sink").plan_inbox("p"))) == 8


# -- bad input ----------------------------------------------------------------------------


def test_bad_files_are_moved_aside_with_a_reason_and_good_work_goes_on(tmp_path: Path) -> None:
    society = make_society(tmp_path, agents=["worker", "other"], config={"max_file_bytes": 4096})
    inbox = society.agent("worker").inbox
    outside = write_json(tmp_path / "outside" / "cmd_evil.json", {"command_id": "e", "prompt": "x"})

    def cmd(**fields: Any) -> dict[str, Any]:
        return {"command_id": "bad", "prompt": "p", **fields}

    def on_complete(**fields: Any) -> dict[str, Any]:
        return cmd(on_complete={"send_to": ["other"], **fields})

    corpus: dict[str, tuple[bytes | dict[str, Any] | list[Any], str, str]] = {
        # file name: (content, field named in the record, words in the problem)
        "cmd_truncated.json": (b'{"command_id": "t", "pro', "(json)", "not valid JSON"),
        "cmd_types.json": (cmd(required_inputs=5, timeout="soon"), "required_inputs", "list"),
        "cmd_unknown.json": (cmd(colour="red"), "colour", "unknown field"),
        "cmd_no_prompt.json": ({"command_id": "np"}, "prompt", "required"),
        "cmd_absolute.json": (cmd(required_inputs=["/etc/passwd"]), "required_inputs.0", "/"),
        "cmd_dotdot.json": (cmd(required_inputs=["../bob/x"]), "required_inputs.0", ".."),
        "cmd_name_up.json": (
            on_complete(output_name="../{to}.json"),
            "on_complete.output_name",
            "..",
        ),
        "cmd_name_sub.json": (
            on_complete(output_name="sub/x.json"),
            "on_complete.output_name",
            "/",
        ),
        "cmd_send_up.json": (cmd(on_complete={"send_to": ["../x"]}), "on_complete.send_to.0", ""),
        "cmd_template.json": (
            on_complete(message_template="{result.__class__}"),
            "on_complete.message_template",
            "{result.__class__} is not allowed",
        ),
        "cmd_oversized.json": (cmd(prompt="x" * 5000), "(file)", "over the limit of 4096"),
        "cmd_latin1.json": (b'{"command_id": "l", "prompt": "caf\xe9"}', "(encoding)", "UTF-8"),
        "cmd_empty.json": (b"", "(json)", "empty"),
        "cmd_array.json": ([{"command_id": "arr", "prompt": "p"}], "(json)", "list"),
        "cmd_self.json": (
            cmd(on_complete={"send_to": ["worker"]}),
            "on_complete.send_to",
            "worker",
        ),
    }
    for name, (content, _, _) in corpus.items():
        data = content if isinstance(content, bytes) else json.dumps(content).encode()
        write_bytes(inbox / name, data)
    os.symlink(outside, inbox / "cmd_link.json")
    drop_command(
        society,
        "worker",
        {
            "command_id": "good",
            "plan_id": "p",
            "prompt": "Fine.",
            "on_complete": {"send_to": ["other"]},
        },
    )
    fake = FakeProvider(lambda request: {"result": "good result"})

    run_until_idle(society, fake)

    assert read_json(delivered(society, "other", "p", "good_from_worker.json"))["result"] == (
        "good result"
    )
    assert [task_of(r) for r in fake.history] == ["Fine."]
    records = rejected(society, "worker")
    assert set(records) == {*corpus, "cmd_link.json"}
    for name, (_, field, words) in corpus.items():
        record = records[name]
        # The field itself, or (for checks spanning a model) the object holding it.
        assert record["field"] in (field, field.rpartition(".")[0]), (name, record)
        assert words in record["error"], (name, record)
        assert record["fix"], (name, record)
        assert record["agent_id"] == "worker"
    assert records["cmd_link.json"]["field"] == "(file)"
    assert "symlink leads out of the agent folder" in records["cmd_link.json"]["error"]
    assert outside.is_file(), "the symlink's target outside is left alone"
    assert pending_commands(society, "worker") == []

    # A second command reusing a pending command_id with other content is rejected too.
    waiting = {"command_id": "dup", "plan_id": "p", "prompt": "A.", "required_inputs": ["z.json"]}
    drop_command(society, "worker", waiting, name="cmd_dup1.json")
    run_until_idle(society, fake)
    drop_command(society, "worker", {**waiting, "prompt": "B."}, name="cmd_dup2.json")
    run_until_idle(society, fake)
    record = rejected(society, "worker")["cmd_dup2.json"]
    assert record["field"] == "command_id"
    assert "already pending as cmd_dup1.json" in record["error"]
    assert pending_commands(society, "worker") == ["cmd_dup1.json"]
    # Every rejection is also what `agenttalk status` reports.
    assert len(agent_status(society, "worker").rejected_files) == len(corpus) + 2


def test_a_finished_command_never_runs_again(tmp_path: Path) -> None:
    society = make_society(tmp_path, agents=["writer", "reader"])
    fake = FakeProvider(lambda request: {"result": "once"})
    command = {
        "command_id": "once",
        "plan_id": "p",
        "prompt": "Once.",
        "on_complete": {"send_to": ["reader"]},
    }
    drop_command(society, "writer", command)
    run_until_idle(society, fake)
    assert len(fake.history) == 1
    message = delivered(society, "reader", "p", "once_from_writer.json")
    first = message.read_bytes()

    run_until_idle(Society(society.root), fake)
    assert len(fake.history) == 1

    drop_command(society, "writer", command, name="cmd_once_again.json")
    run_until_idle(society, fake)
    assert len(fake.history) == 1
    record = rejected(society, "writer")["cmd_once_again.json"]
    assert record["field"] == "command_id"
    assert "has already run (done)" in record["error"]
    assert message.read_bytes() == first
    assert pending_commands(society, "writer") == []


# -- the user endpoint and broken profiles -------------------------------------------------


def test_user_is_an_endpoint_that_receives_results_and_runs_nothing(tmp_path: Path) -> None:
    society = make_society(tmp_path, agents=["writer"])
    assert not (society.agents_dir / "user").exists()
    fake = FakeProvider(lambda request: {"result": "for you"})
    drop_command(
        society,
        "writer",
        {
            "command_id": "tell",
            "plan_id": "p",
            "prompt": "Tell.",
            "on_complete": {"send_to": ["user"]},
        },
    )

    run_until_idle(society, fake)

    message = read_json(delivered(society, "user", "p", "tell_from_writer.json"))
    assert message["result"] == "for you" and message["to"] == "user"

    trap = drop_command(
        society,
        "user",
        {
            "command_id": "trap",
            "plan_id": "p",
            "prompt": "Run me.",
            "on_complete": {"send_to": ["writer"]},
        },
    )
    run_until_idle(society, fake)
    assert trap.is_file()
    assert len(fake.history) == 1
    assert files_under(society.agent("user").archive) == []
    assert not (society.agents_dir / "user" / "outbox").exists()


def test_commands_of_an_agent_with_an_invalid_profile_wait_until_it_is_fixed(
    tmp_path: Path,
) -> None:
    society = make_society(
        tmp_path, agents=["broken", "fine", "sink"], config={"heartbeat_seconds": 60}
    )
    profile = society.agent("broken").profile_path
    write_json(profile, {"agent_id": "broken", "name": "Broken"})  # no prompt
    fake = FakeProvider(lambda request: {"result": f"by {agent_of(request)}"})
    for agent_id in ("broken", "fine"):
        drop_command(
            society,
            agent_id,
            {
                "command_id": "job",
                "plan_id": "p",
                "prompt": "Work.",
                "on_complete": {"send_to": ["sink"]},
            },
        )

    daemon = make_daemon(society, fake)
    with running_daemon(daemon):
        wait_until(lambda: archived(society, "fine", "done", "p", "job").exists())
        status = agent_status(society, "broken")
        assert status.profile_error is not None and "prompt" in status.profile_error
        assert [c.state for c in status.commands] == ["pending"]
        assert pending_commands(society, "broken") == ["cmd_job.json"]
        assert files_under(society.agent("broken").archive) == []

        write_json(profile, profile_for("broken"))
        wait_until(lambda: archived(society, "broken", "done", "p", "job").exists())
    assert sorted(agent_of(r) for r in fake.history) == ["broken", "fine"]
    assert read_json(delivered(society, "sink", "p", "job_from_broken.json"))["result"] == (
        "by broken"
    )


# -- LLM replies and inputs in the prompt ------------------------------------------------


def test_three_invalid_replies_fail_the_command_with_the_reason(tmp_path: Path) -> None:
    society = make_society(tmp_path, agents=["writer", "reader", "boss"])
    fake = FakeProvider(["no json here", '{"answer": 1}', '```json\n{"result": null}\n```'])
    drop_command(
        society,
        "writer",
        {
            "command_id": "flaky",
            "plan_id": "p",
            "prompt": "Try.",
            "on_complete": {"send_to": ["reader"]},
            "on_failure": {"send_to": ["boss"]},
        },
    )

    run_until_idle(society, fake)

    assert len(fake.history) == 3
    audit = audit_of(society, "writer", "p", "flaky")
    assert audit["status"] == "failed"
    assert "not valid after 2 repair attempts" in audit["error"]
    attempts = audit["llm"]["attempts"]
    assert [a["number"] for a in attempts] == [1, 2, 3]
    assert [a["raw_reply"] for a in attempts] == [
        "no json here",
        '{"answer": 1}',
        '```json\n{"result": null}\n```',
    ]
    assert all(a["error"] for a in attempts)
    assert "not JSON" in attempts[0]["error"]
    assert "'result' is a required property" in attempts[1]["error"]
    for before, attempt in itertools.pairwise(attempts):
        assistant, repair = attempt["messages_added"]
        assert assistant == {"role": "assistant", "content": before["raw_reply"]}
        assert repair["role"] == "user" and before["error"] in repair["content"]
    # Each repair request carries the whole conversation so far.
    assert len(fake.history[2].messages) == len(fake.history[0].messages) + 4
    assert audit["error"].endswith(attempts[2]["error"])

    assert archived(society, "writer", "failed", "p", "flaky").is_file()
    assert not delivered(society, "reader", "p", "flaky_from_writer.json").exists()
    notice = read_json(delivered(society, "boss", "p", "flaky_failed_from_writer.json"))
    assert notice["status"] == "failed"
    assert notice["error"] == audit["error"]
    assert notice["text"] == f"Command flaky of writer failed: {audit['error']}"


def test_a_long_input_is_cut_with_a_marker_and_a_binary_input_is_a_marker(
    tmp_path: Path,
) -> None:
    society = make_society(tmp_path, agents=["reader", "sink"], config={"max_input_chars": 100})
    inbox = society.agent("reader").inbox
    write_bytes(inbox / "long.txt", b"a" * 100 + b"b" * 400)
    blob = write_bytes(inbox / "blob.bin", bytes(range(256)))
    fake = FakeProvider([{"result": "read"}])
    drop_command(
        society,
        "reader",
        {
            "command_id": "read",
            "plan_id": "p",
            "prompt": "Read.",
            "required_inputs": ["long.txt", "*.bin"],
            "on_complete": {"send_to": ["sink"]},
        },
    )

    run_until_idle(society, fake)

    user = fake.history[0].messages[1]["content"]
    assert (
        "### long.txt\n" + "a" * 100 + "\n[... truncated: 400 more characters not shown ...]"
        in (user)
    )
    assert "b" * 10 not in user
    assert "### blob.bin\n[binary or non-UTF-8 file, 256 bytes: content not shown]" in user
    inputs = {i["name"]: i for i in audit_of(society, "reader", "p", "read")["inputs"]}
    assert inputs["long.txt"]["truncated"] is True
    assert inputs["long.txt"]["size"] == 500
    assert inputs["blob.bin"]["truncated"] is False
    assert inputs["blob.bin"]["sha256"] == hashlib.sha256(blob.read_bytes()).hexdigest()


def test_after_a_restart_the_first_accepted_file_wins_over_a_reused_command_id(
    tmp_path: Path,
) -> None:
    # The same two names, in both roles: whatever order the folder lists them in, one agent
    # sees the copy before the original after the restart.
    society = make_society(tmp_path, agents=["first", "second"])
    roles = {"first": ("cmd_x.json", "cmd_y.json"), "second": ("cmd_y.json", "cmd_x.json")}
    waiting = {"command_id": "dup", "plan_id": "p", "prompt": "A.", "required_inputs": ["z.json"]}
    fake = FakeProvider(lambda request: {"result": "never"})
    for agent_id, (original, _) in roles.items():
        drop_command(society, agent_id, waiting, name=original)
    run_until_idle(society, fake)
    for agent_id, (_, copy) in roles.items():
        drop_command(society, agent_id, {**waiting, "prompt": "B."}, name=copy)

    run_until_idle(Society(society.root), fake)

    for agent_id, (original, copy) in roles.items():
        assert pending_commands(society, agent_id) == [original]
        record = rejected(society, agent_id)[copy]
        assert record["field"] == "command_id"
        assert f"already pending as {original}" in record["error"]
        assert set(rejected(society, agent_id)) == {copy}
    assert fake.history == []


def test_a_plan_whose_id_looks_like_a_command_file_keeps_its_inputs(tmp_path: Path) -> None:
    # Plan inputs live in inbox/<plan_id>/; that folder is never mistaken for a command.
    society = make_society(tmp_path, agents=["maker", "user_of_it"])
    plan = "cmd_x.json"
    fake = FakeProvider(lambda request: {"result": f"by {agent_of(request)}"})
    drop_command(
        society,
        "user_of_it",
        {"command_id": "use", "plan_id": plan, "prompt": "Use.", "required_inputs": ["r.json"]},
    )
    drop_command(
        society,
        "maker",
        {
            "command_id": "make",
            "plan_id": plan,
            "prompt": "Make.",
            "on_complete": {"send_to": ["user_of_it"], "output_name": "r.json"},
        },
    )

    run_until_idle(society, fake)

    assert rejected(society, "user_of_it") == {}
    assert delivered(society, "user_of_it", plan, "r.json").is_file()
    assert archived(society, "user_of_it", "done", plan, "use").is_file()
    assert [c.state for c in agent_status(society, "user_of_it").commands] == ["done"]


def test_the_daemon_talks_to_an_openai_compatible_server_over_http(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-daemon-test-secret"
    monkeypatch.setenv("AGENTTALK_TEST_KEY", key)
    with LoopbackLLM() as server:
        service = {
            "provider": "openai",
            "base_url": server.base_url,
            "model": "loop-model",
            "api_key_env": "AGENTTALK_TEST_KEY",
            "max_retries": 0,
        }
        society = make_society(
            tmp_path,
            agents=["writer", "reader"],
            config={"llm": {"default": "local", "services": {"local": service}}},
        )
        drop_command(
            society,
            "writer",
            {
                "command_id": "remote",
                "plan_id": "p",
                "prompt": "Name a colour.",
                "score_required": True,
                "on_complete": {"send_to": ["reader"]},
            },
        )
        Daemon(society).run(until_idle=True)

    [seen] = server.requests
    headers = {name.lower(): value for name, value in seen.headers.items()}
    assert headers["authorization"] == f"Bearer {key}"
    assert seen.body["model"] == "loop-model"
    message = read_json(delivered(society, "reader", "p", "remote_from_writer.json"))
    assert message["result"] == "done: Name a colour."
    assert message["score"] == 80
    audit = audit_of(society, "writer", "p", "remote")
    assert audit["llm"]["service"] == "local" and audit["llm"]["model"] == "loop-model"
    assert audit["llm"]["attempts"][0]["messages_added"] == seen.body["messages"]
    assert audit["llm"]["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "total_tokens": 15,
    }
    for path in society.root.rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), f"the API key leaked into {path}"
