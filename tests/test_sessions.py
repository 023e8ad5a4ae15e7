"""Discussion sessions: a session file in the moderator's inbox runs a whole discussion."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from conftest import (
    make_daemon,
    make_society,
    read_json,
    running_daemon,
    wait_until,
    write_json,
)

from agenttalk.daemon import Daemon
from agenttalk.llm import LLMRequest
from agenttalk.llm.fake import FakeProvider
from agenttalk.llm.loopback import LoopbackLLM
from agenttalk.moderator import builtin_scenario
from agenttalk.society import CommandKey, Society
from agenttalk.status import agent_status, render_text

NAMES = ("alice", "bob", "carol", "dave")
FACTIONS = {"alice": "pro", "bob": "con", "carol": "pro", "dave": "con"}
SESSION = "remote_work"
_NAME_RE = re.compile(r"You take part in a discussion as (\w+)\.")
_EVENTS_RE = re.compile(r"## Recent events \((\d+)\)")


def persona(agent_id: str) -> dict[str, Any]:
    return {
        "agent_id": agent_id,
        "name": agent_id.title(),
        "prompt": f"You are {agent_id}.",
        "role": "debater",
        "persona_description": f"{agent_id.title()} argues from experience.",
        "stance": {"faction_id": FACTIONS[agent_id], "position": "a position"},
    }


def rollback_scenario() -> dict[str, Any]:
    """The built-in debate, with a consensus vote at the end of the focused conflict."""
    data = builtin_scenario("debate").model_dump(mode="json", exclude_none=True)
    for phase in data["flow"]["phases"]:
        if phase["id"] == "focused_conflict":
            phase["rollback_to"] = "free_discussion"
            phase["consensus_threshold"] = 50
    return data


def debate_society(root: Path, config: dict[str, Any] | None = None) -> Society:
    society = make_society(root, agents=(), config=config)
    for agent_id in NAMES:
        write_json(root / "agents" / agent_id / "agent_profile.json", persona(agent_id))
    write_json(
        root / "agents" / "moderator" / "agent_profile.json",
        {"agent_id": "moderator", "name": "Moderator", "kind": "moderator"},
    )
    return society


def drop_session(society: Society, **extra: Any) -> Path:
    session = {
        "session_id": SESSION,
        "topic": "Should remote work become the norm?",
        "participants": list(NAMES),
        "scenario": rollback_scenario(),
        **extra,
    }
    path = society.agent("moderator").inbox / "session_remote_work.json"
    return write_json(path, session)


def reply(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """Valid intent, speech and vote replies, varied but a function of the request only."""
    match = _NAME_RE.search(messages[0]["content"])
    assert match, "the system prompt names no agent"
    name = match.group(1)
    text = "\n".join(str(m["content"]) for m in messages)
    if '"type": "INTENT"' in text:
        urgency = 1 + len(text) % 5
        kind = "interrupt" if len(text) % 7 == 0 else "speak"
        return {"type": "INTENT", "intent": kind, "urgency": urgency, "topic": f"secret of {name}"}
    if '"type": "VOTE"' in text:
        votes = len(re.findall(r"\(vote\)", text))
        return {"type": "VOTE", "score": 20 if votes < 4 else 80, "reason": "so so"}
    return {"type": "SPEECH", "content": f"{name} makes point {len(text) % 97}.", "tone": "calm"}


def speaker(request: LLMRequest) -> str:
    match = _NAME_RE.search(request.messages[0]["content"])
    assert match, "the system prompt names no agent"
    return match.group(1)


class RecordedReplies:
    """Each agent's replies, in that agent's order, recorded then replayed. Participants answer
    a step in parallel, so "the same replies" means the same replies per agent."""

    def __init__(self) -> None:
        self.left: dict[str, list[dict[str, Any]]] = {}
        self.count = 0

    def record(self, request: LLMRequest) -> dict[str, Any]:
        answer = reply(request.messages)
        self.left.setdefault(speaker(request), []).append(answer)
        self.count += 1
        return answer

    def replay(self, request: LLMRequest) -> dict[str, Any]:
        return self.left[speaker(request)].pop(0)


def outbox(society: Society) -> Path:
    return society.agent("moderator").outbox / SESSION


def decision_lines(society: Society) -> list[dict[str, Any]]:
    text = (outbox(society) / "decisions.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def test_debate_over_loopback_ends_with_a_complete_log_and_bounded_private_prompts(
    tmp_path: Path,
) -> None:
    with LoopbackLLM(default=lambda body: reply(body["messages"])) as llm:
        service = {"provider": "openai", "base_url": llm.base_url, "model": "m"}
        config = {"llm": {"default": "loop", "services": {"loop": service}}}
        society = debate_society(tmp_path, config)
        drop_session(society)
        Daemon(society).run(until_idle=True, watch=False)
        requests = [seen.body["messages"] for seen in llm.requests]

    lines = decision_lines(society)
    assert [line["step"] for line in lines] == list(range(1, len(lines) + 1))
    assert all(line["state"]["steps"] == line["step"] - 1 for line in lines)
    last = lines[-1]["decision"]
    assert last["action"] == "END_DISCUSSION"
    assert last["reason"] == "all_phases_completed"
    actions = {line["decision"]["action"] for line in lines}
    assert {"ALLOW_SPEECH", "FORCE_SUMMARY", "CALL_VOTE", "SWITCH_PHASE"} <= actions
    assert any(line["decision"]["metadata"].get("rollback") for line in lines)

    transcript = (outbox(society) / "transcript.md").read_text(encoding="utf-8")
    assert transcript.count("**Phase summary.**") >= 4  # free (twice), focused, closing
    assert "## Phase: closing" in transcript
    moderator = society.agent("moderator")
    assert (moderator.archive / "done" / "session_remote_work.json").is_file()
    assert not list(moderator.inbox.glob("session_*.json"))

    log = tmp_path / "agents" / "event_log" / "outbox" / f"{SESSION}.jsonl"
    types = {json.loads(line)["type"] for line in log.read_text().splitlines()}
    assert types == {"INTENT", "SPEECH", "SUMMARY", "VOTE", "SYSTEM"}

    # Every turn was an ordinary command: archived, audited, its answer routed to the moderator.
    answers = sorted(p.name for p in (moderator.inbox / SESSION).iterdir())
    turns = 0
    for agent_id in NAMES:
        agent = society.agent(agent_id)
        done = sorted(p.stem for p in (agent.archive / "done" / SESSION).iterdir())
        assert done and all(re.fullmatch(r"s\d{4}_(intent|speech|vote)", c) for c in done)
        assert {c.split("_")[1] for c in done} == {"intent", "speech", "vote"}
        for command_id in done:
            audit = read_json(agent.audit_dir(CommandKey(SESSION, command_id)) / "audit.json")
            assert audit["command"]["discussion"]["turn"] == command_id.split("_")[1]
            assert audit["routing"]["targets"] == ["moderator"]
            assert f"{command_id}_from_{agent_id}.json" in answers
        turns += len(done)
    assert len(answers) == turns
    assert len(requests) == turns  # one request per turn: nothing was asked twice

    assert len(requests) > 100
    own_secret_seen = set()
    for messages in requests:
        match = _NAME_RE.search(messages[0]["content"])
        assert match
        owner = match.group(1)
        user = messages[1]["content"]
        shown = [int(n) for n in _EVENTS_RE.findall(user)]
        assert shown and max(shown) <= 20
        for other in {n.title() for n in NAMES} - {owner}:
            assert f"secret of {other}" not in user, f"{other}'s memory in {owner}'s prompt"
        if f"secret of {owner}" in user:
            own_secret_seen.add(owner)
    assert own_secret_seen == {n.title() for n in NAMES}  # memory does reach its owner


def test_replaying_a_session_with_the_same_replies_gives_identical_decisions(
    tmp_path: Path,
) -> None:
    replies = RecordedReplies()

    first = debate_society(tmp_path / "first")
    drop_session(first)
    (queued,) = agent_status(first, "moderator").sessions
    assert (queued.session_id, queued.state) == (SESSION, "queued")
    make_daemon(first, FakeProvider(replies.record)).run(until_idle=True, watch=False)
    second = debate_society(tmp_path / "second")
    drop_session(second)
    replay = FakeProvider(replies.replay)
    make_daemon(second, replay).run(until_idle=True, watch=False)

    assert len(replay.history) == replies.count
    assert not any(replies.left.values())
    one = (outbox(first) / "decisions.jsonl").read_bytes()
    two = (outbox(second) / "decisions.jsonl").read_bytes()
    assert one and one == two
    assert b"timestamp" not in one
    text = render_text([agent_status(first, "moderator")])
    assert f"session  {SESSION}: done, phase closing, step {len(one.splitlines())}" in text


def test_a_session_with_an_unknown_participant_is_rejected_naming_the_field(
    tmp_path: Path,
) -> None:
    society = debate_society(tmp_path)
    write_json(
        tmp_path / "agents" / "plain" / "agent_profile.json",
        {"agent_id": "plain", "name": "Plain", "prompt": "You are plain."},
    )
    drop_session(society, participants=["alice", "ghost"])
    other = society.agent("moderator").inbox / "session_b.json"
    write_json(
        other,
        {"session_id": "b", "topic": "t", "participants": ["alice", "plain"], "scenario": "debate"},
    )
    provider = FakeProvider([])
    make_daemon(society, provider).run(until_idle=True, watch=False)

    bad = society.agent("moderator").archive / "bad"
    records = {p.name: read_json(p) for p in bad.glob("*.error.json")}
    assert len(records) == 2
    by_file = {r["file"]: r for r in records.values()}
    assert by_file["session_remote_work.json"]["field"] == "participants"
    assert "'ghost'" in by_file["session_remote_work.json"]["error"]
    assert by_file["session_b.json"]["field"] == "participants"
    assert "'plain' has no persona" in by_file["session_b.json"]["error"]
    assert provider.history == []
    assert not outbox(society).exists()


def test_a_session_with_a_bad_scenario_names_the_scenario_field(tmp_path: Path) -> None:
    society = debate_society(tmp_path)
    scenario = yaml.safe_load(yaml.safe_dump(rollback_scenario()))
    scenario["flow"]["phases"][0]["max_rounds"] = 0
    drop_session(society, scenario=scenario)
    make_daemon(society, FakeProvider([])).run(until_idle=True, watch=False)

    (record,) = (society.agent("moderator").archive / "bad").glob("*.error.json")
    assert read_json(record)["field"].startswith("scenario.flow.phases.0")


def event_log_lines(root: Path) -> list[dict[str, Any]]:
    log = root / "agents" / "event_log" / "outbox" / f"{SESSION}.jsonl"
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def test_a_stopped_session_resumes_and_ends_as_if_never_stopped(tmp_path: Path) -> None:
    whole = debate_society(tmp_path / "whole")
    drop_session(whole)
    straight = FakeProvider(lambda request: reply(request.messages))
    make_daemon(whole, straight).run(until_idle=True, watch=False)

    cut = debate_society(tmp_path / "cut")
    session_file = drop_session(cut)
    first = FakeProvider(lambda request: reply(request.messages))
    with running_daemon(make_daemon(cut, first)):
        wait_until(lambda: len(decision_lines(cut)) >= 12 if outbox(cut).exists() else False)
    progress = read_json(outbox(cut) / "progress.json")
    assert progress["state"] == "running"
    assert session_file.exists(), "a stopped session keeps its file, to resume"
    second = FakeProvider(lambda request: reply(request.messages))
    make_daemon(cut, second).run(until_idle=True, watch=False)

    assert read_json(outbox(cut) / "progress.json")["state"] == "done"
    assert (outbox(cut) / "decisions.jsonl").read_bytes() == (
        outbox(whole) / "decisions.jsonl"
    ).read_bytes()
    assert (outbox(cut) / "transcript.md").read_text() == (
        outbox(whole) / "transcript.md"
    ).read_text()
    assert len(first.history) + len(second.history) == len(straight.history)  # none asked twice
    events = event_log_lines(tmp_path / "cut")
    assert [e["sequence"] for e in events] == list(range(1, len(events) + 1))
    assert len({e["event_id"] for e in events}) == len(events)
    assert [e["content"] for e in events] == [
        e["content"] for e in event_log_lines(tmp_path / "whole")
    ]


def test_a_moderator_llm_only_phrases_lines_and_never_changes_a_decision(tmp_path: Path) -> None:
    # The voiced lines reach the agents' prompts, so replay the participants' own replies.
    replies = RecordedReplies()

    plain = debate_society(tmp_path / "plain")
    drop_session(plain)
    make_daemon(plain, FakeProvider(replies.record)).run(until_idle=True, watch=False)

    voiced = debate_society(tmp_path / "voiced")
    write_json(
        voiced.agent("moderator").profile_path,
        {
            "agent_id": "moderator",
            "name": "Moderator",
            "kind": "moderator",
            "llm": {"service": "fake"},
        },
    )
    drop_session(voiced)
    asked: list[str] = []

    def answer(request: LLMRequest) -> dict[str, Any]:
        system = request.messages[0]["content"]
        if system.startswith("You are the voice of a discussion's moderator"):
            asked.append(request.messages[1]["content"])
            return {"text": f"Voiced line {len(asked)}."}
        return replies.replay(request)

    make_daemon(voiced, FakeProvider(answer)).run(until_idle=True, watch=False)

    assert (outbox(voiced) / "decisions.jsonl").read_bytes() == (
        outbox(plain) / "decisions.jsonl"
    ).read_bytes()
    summaries = [e for e in event_log_lines(tmp_path / "voiced") if e["type"] == "SUMMARY"]
    assert summaries and all(e["content"].startswith("Voiced line") for e in summaries)
    assert any("What was said" in text for text in asked)  # a summary sees the speeches
    transcript = (outbox(voiced) / "transcript.md").read_text()
    assert "Voiced line 1." in transcript and "Welcome." not in transcript
    cached = (outbox(voiced) / "voice.jsonl").read_text().splitlines()
    assert len(cached) == len(asked)
