"""The discussion executor: persona prompts, visible context, memory, intent and speech turns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agenttalk.discussion import (
    CONSTRAINTS,
    MemoryEntry,
    ShortTermMemory,
    VisibleContext,
    build_visible_context,
    generate_intent,
    generate_speech,
    load_memory,
    save_memory,
    system_prompt,
)
from agenttalk.discussion.turns import MAX_SPEECH_CHARS
from agenttalk.errors import LLMError
from agenttalk.eventlog import EventLog
from agenttalk.llm.fake import FakeProvider
from agenttalk.models import AgentProfile, Stance

MODEL = "fake-model"
SESSION = "remote-work"


def profile(agent_id: str = "li", **extra: Any) -> AgentProfile:
    fields: dict[str, Any] = {
        "agent_id": agent_id,
        "name": "Li Qiang",
        "prompt": "You debate.",
        "role": "lead speaker for the motion",
        "persona_description": "A seasoned debater who argues from data.",
        "stance": Stance(faction_id="pro", position="Remote work should become the norm"),
        "speaking_style": "analytical",
        "expertise": ["human resources", "organisation design"],
        "traits": ["rational", "confident"],
    }
    fields.update(extra)
    return AgentProfile(**fields)


def context(**extra: Any) -> VisibleContext:
    fields: dict[str, Any] = {
        "phase_name": "Free debate",
        "phase_type": "free_discussion",
        "round": 3,
        "max_rounds": 8,
        "topic": "Should remote work become the norm?",
    }
    fields.update(extra)
    return VisibleContext(**fields)


def intent_of(reply: dict[str, Any]) -> Any:
    provider = FakeProvider([{"type": "INTENT", **reply}])
    return generate_intent(provider, profile(), context(), ShortTermMemory(agent_id="li"), MODEL)


def speech_of(*replies: str | dict[str, Any]) -> Any:
    provider = FakeProvider(list(replies))
    return generate_speech(provider, profile(), context(), ShortTermMemory(agent_id="li"), MODEL)


# -- persona -----------------------------------------------------------------------------------


def test_system_prompt_carries_the_persona_and_the_five_constraints() -> None:
    text = system_prompt(profile())
    for part in [
        "Li Qiang",
        "lead speaker for the motion",
        "A seasoned debater who argues from data.",
        "reason with logic and data",  # the analytical style, in words
        "Faction: pro",
        "Position: Remote work should become the norm",
        "human resources, organisation design",
        "rational, confident",
    ]:
        assert part in text
    assert len(CONSTRAINTS) == 5
    for number, rule in enumerate(CONSTRAINTS, 1):
        assert f"{number}. {rule}" in text
    joined = " ".join(CONSTRAINTS).lower()
    for idea in ["persona", "allowed", "context shown", "never invent", "json"]:
        assert idea in joined


def test_every_turn_sends_the_persona_as_its_system_message() -> None:
    provider = FakeProvider([{"intent": "speak", "urgency": 3}])
    generate_intent(provider, profile(), context(), ShortTermMemory(agent_id="li"), MODEL)
    messages = provider.history[0].messages
    assert messages[0] == {"role": "system", "content": system_prompt(profile())}
    assert "Should remote work become the norm?" in messages[1]["content"]
    assert "round 3 of 8" in messages[1]["content"]


def test_profile_rejects_an_unknown_persona_field() -> None:
    with pytest.raises(ValueError, match="stanse"):
        AgentProfile.model_validate(
            {"agent_id": "li", "name": "Li", "prompt": "p", "stanse": {"faction_id": "pro"}}
        )


# -- intent ------------------------------------------------------------------------------------


def test_an_unknown_intent_type_becomes_pass() -> None:
    turn = intent_of({"intent": "shout", "urgency": 4})
    assert turn.intent.type == "pass"
    assert turn.intent.agent_id == "li"


@pytest.mark.parametrize(("raw", "expected"), [(0.4, 1), (7, 5), (2.6, 3), (2.5, 3), (-3, 1)])
def test_urgency_is_rounded_and_clamped_to_1_to_5(raw: float, expected: int) -> None:
    assert intent_of({"intent": "speak", "urgency": raw}).intent.urgency == expected


def test_a_valid_intent_keeps_target_and_topic() -> None:
    turn = intent_of({"intent": "respond", "urgency": 4, "target": "wang", "topic": "efficiency"})
    assert (turn.intent.type, turn.intent.target, turn.intent.topic) == (
        "respond",
        "wang",
        "efficiency",
    )
    assert turn.note.importance == 0.3 and "respond" in turn.note.content


def test_a_malformed_json_reply_is_repaired() -> None:
    provider = FakeProvider(
        ['{"intent": "speak", "urgency": ', '{"intent": "speak", "urgency": 5}']
    )
    turn = generate_intent(provider, profile(), context(), ShortTermMemory(agent_id="li"), MODEL)
    assert turn.outcome.status == "ok"
    assert (turn.intent.type, turn.intent.urgency) == ("speak", 5)
    assert len(provider.history) == 2
    repair = provider.history[1].messages[-1]["content"]
    assert "could not be used" in repair and '"intent"' in repair
    assert turn.messages == provider.history[0].messages


def test_an_intent_still_invalid_after_the_repairs_counts_as_pass() -> None:
    provider = FakeProvider(["no", "still no", "never"])
    turn = generate_intent(provider, profile(), context(), ShortTermMemory(agent_id="li"), MODEL)
    assert turn.outcome.status == "failed"
    assert (turn.intent.type, turn.intent.urgency) == ("pass", 1)
    assert len(provider.history) == 3


# -- speech ------------------------------------------------------------------------------------


def test_speech_content_is_required_repaired_then_failed() -> None:
    provider = FakeProvider([{"tone": "calm"}, {"content": "   "}, {"content": ""}])
    with pytest.raises(LLMError, match="no usable speech"):
        generate_speech(provider, profile(), context(), ShortTermMemory(agent_id="li"), MODEL)
    assert len(provider.history) == 3


def test_a_missing_content_is_repaired_when_the_next_reply_has_it() -> None:
    turn = speech_of({"tone": "calm"}, {"content": "Data shows otherwise.", "tone": "assertive"})
    assert (turn.speech.content, turn.speech.tone) == ("Data shows otherwise.", "assertive")
    assert turn.note.importance == 0.8


def test_speech_content_is_capped() -> None:
    turn = speech_of({"content": "x" * (MAX_SPEECH_CHARS + 500)})
    assert turn.speech.truncated
    assert turn.speech.content == "x" * MAX_SPEECH_CHARS + "..."


@pytest.mark.parametrize("tone", ["furious", None, 3])
def test_an_unknown_or_missing_tone_falls_back_to_calm(tone: Any) -> None:
    reply: dict[str, Any] = {"content": "Fine."}
    if tone is not None:
        reply["tone"] = tone
    assert speech_of(reply).speech.tone == "calm"


def test_speech_prompt_names_the_intended_topic() -> None:
    provider = FakeProvider([{"content": "Yes."}])
    memory = ShortTermMemory(agent_id="li")
    generate_speech(provider, profile(), context(), memory, MODEL, intended_topic="commute time")
    assert "commute time" in provider.history[0].messages[-1]["content"]


# -- visible context ---------------------------------------------------------------------------


def fill_log(tmp_path: Path, count: int) -> EventLog:
    log = EventLog(tmp_path, durable=False)
    for number in range(1, count + 1):
        log.append_event(SESSION, "SPEECH", f"agent{number % 3}", f"speech {number}")
    return log


def build(log: EventLog, **extra: Any) -> VisibleContext:
    return build_visible_context(
        log,
        SESSION,
        phase_name="Free debate",
        phase_type="free_discussion",
        round=1,
        topic="t",
        **extra,
    )


def test_visible_context_defaults_to_the_last_10_events(tmp_path: Path) -> None:
    ctx = build(fill_log(tmp_path, 30))
    assert [e.content for e in ctx.events] == [f"speech {n}" for n in range(21, 31)]


def test_visible_context_never_exceeds_20_events(tmp_path: Path) -> None:
    log = fill_log(tmp_path, 30)
    assert len(build(log, limit=20).events) == 20
    with pytest.raises(ValueError, match="1 to 20"):
        build(log, limit=21)
    with pytest.raises(ValueError):
        context(events=build(log, limit=20).events * 2)


def test_visible_context_carries_the_latest_summary_and_the_call(tmp_path: Path) -> None:
    log = fill_log(tmp_path, 3)
    log.append_event(SESSION, "SUMMARY", "moderator", "old summary")
    log.append_event(SESSION, "SUMMARY", "moderator", "both sides agree on costs")
    ctx = build(log, call_reason="you have not spoken yet")
    assert ctx.phase_summary == "both sides agree on costs"
    text = ctx.render()
    assert "both sides agree on costs" in text and "old summary" not in text.split("## Recent")[0]
    assert "called on you" in text and "you have not spoken yet" in text


def test_a_turn_prompt_carries_only_the_visible_events(tmp_path: Path) -> None:
    log = fill_log(tmp_path, 30)
    provider = FakeProvider([{"intent": "pass", "urgency": 1}])
    memory = ShortTermMemory(agent_id="li")
    generate_intent(provider, profile(), build(log), memory, MODEL)
    user = provider.history[0].messages[1]["content"]
    assert "speech 21" in user and "speech 30" in user
    assert "speech 20\n" not in user and "speech 1\n" not in user


# -- memory ------------------------------------------------------------------------------------


def note(content: str, importance: float) -> MemoryEntry:
    return MemoryEntry(content=content, importance=importance, timestamp="2026-01-01T00:00:00Z")


def test_memory_prunes_lowest_importance_first_and_earliest_on_ties() -> None:
    memory = ShortTermMemory(agent_id="li")
    for number in range(10):
        memory.add(note(f"n{number}", 0.3 if number in (2, 5) else 0.8))
    pruned = memory.add(note("n10", 0.5))
    assert [e.content for e in pruned] == ["n2"]
    pruned = memory.add(note("n11", 0.9))
    assert [e.content for e in pruned] == ["n5"]
    pruned = memory.add(note("n12", 0.1))  # itself the least important
    assert [e.content for e in pruned] == ["n12"]
    assert len(memory.entries) == 10


def test_memory_stays_within_2000_tokens() -> None:
    memory = ShortTermMemory(agent_id="li")
    memory.add(note("a" * 4000, 0.9))  # 1000 tokens
    memory.add(note("b" * 3000, 0.4))  # 750 tokens
    pruned = memory.add(note("c" * 2000, 0.6))  # 500 more: 2250 > 2000
    assert [e.content[0] for e in pruned] == ["b"]
    assert memory.tokens() == 1500


def test_memory_persists_atomically_in_the_agents_own_folder(tmp_path: Path) -> None:
    folder = tmp_path / "agents" / "li"
    memory = ShortTermMemory(agent_id="li")
    memory.add(note("I said costs fall", 0.8))
    path = save_memory(folder, memory, durable=False)
    assert path == folder / ".agenttalk" / "memory.json"
    assert json.loads(path.read_text())["entries"][0]["content"] == "I said costs fall"
    assert load_memory(folder, "li") == memory
    assert load_memory(tmp_path / "agents" / "wang", "wang").entries == []
    with pytest.raises(ValueError, match="belongs to 'li'"):
        load_memory(folder, "wang")
    assert [p.name for p in path.parent.iterdir()] == ["memory.json"]  # no temporaries left


def test_memory_appears_in_its_own_agents_prompt_only() -> None:
    li_memory = ShortTermMemory(agent_id="li")
    li_memory.add(note("SECRET-PLAN-42", 0.9))
    provider = FakeProvider([{"intent": "speak", "urgency": 2}] * 2)
    generate_intent(provider, profile("li"), context(), li_memory, MODEL)
    wang = profile("wang", name="Wang Ming")
    generate_intent(provider, wang, context(), ShortTermMemory(agent_id="wang"), MODEL)
    li_request, wang_request = provider.history
    assert "SECRET-PLAN-42" in li_request.messages[1]["content"]
    assert all("SECRET-PLAN-42" not in m["content"] for m in wang_request.messages)
    with pytest.raises(ValueError, match="only its own memory"):
        generate_intent(provider, wang, context(), li_memory, MODEL)


def test_a_turns_note_can_be_remembered_and_shows_up_next_turn() -> None:
    memory = ShortTermMemory(agent_id="li")
    provider = FakeProvider(
        [{"content": "Costs fall by a third."}, {"intent": "pass", "urgency": 1}]
    )
    turn = generate_speech(provider, profile(), context(), memory, MODEL)
    memory.add(turn.note)
    generate_intent(provider, profile(), context(), memory, MODEL)
    assert "Costs fall by a third." in provider.history[1].messages[1]["content"]
