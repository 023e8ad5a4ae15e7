"""INTENT and SPEECH generation: one agent's prompt in, a validated, normalised result out.

Replies are checked against a JSON Schema and repaired by the LLM layer (`ask_json`); values the
seed normalises rather than rejects (an unknown intent, an urgency out of range, an unknown tone,
an overlong speech) are fixed here.
"""

from __future__ import annotations

import math
from typing import Any, Literal, cast, get_args

from pydantic import BaseModel, ConfigDict, Field

from agenttalk.discussion.context import VisibleContext
from agenttalk.discussion.memory import MemoryEntry, ShortTermMemory
from agenttalk.discussion.persona import system_prompt
from agenttalk.errors import LLMError
from agenttalk.llm import LLMRequest, Provider
from agenttalk.llm.reply import Outcome, ask_json
from agenttalk.models import AgentProfile
from agenttalk.moderator import Intent
from agenttalk.moderator.state import IntentType

Tone = Literal["calm", "assertive", "questioning", "conciliatory", "passionate"]
DEFAULT_TONE: Tone = "calm"
MAX_SPEECH_CHARS = 2000
INTENT_TEMPERATURE, INTENT_MAX_TOKENS = 0.7, 200
SPEECH_TEMPERATURE, SPEECH_MAX_TOKENS = 0.8, 500

INTENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "type": {"const": "INTENT"},
        # A string, not an enum: an unknown intent becomes `pass` instead of costing a repair.
        "intent": {"type": "string"},
        "urgency": {"type": "number"},
        "target": {"type": ["string", "null"]},
        "topic": {"type": ["string", "null"]},
    },
    "required": ["intent", "urgency"],
}
SPEECH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "type": {"const": "SPEECH"},
        "content": {"type": "string", "pattern": r"\S"},
        # Untyped: any other tone becomes the default instead of costing a repair.
        "tone": {"description": "calm, assertive, questioning, conciliatory or passionate"},
    },
    "required": ["content"],
}
INTENT_FORMAT = (
    'Reply with only one JSON object: "type": "INTENT"; "intent": one of speak, interrupt, '
    'question, respond, pass; "urgency": a whole number from 1 (can wait) to 5 (must speak now); '
    'optionally "target": whom you address, and "topic": what you want to say, in a few words.'
)
SPEECH_FORMAT = (
    'Reply with only one JSON object: "type": "SPEECH"; "content": what you say, 100 to 300 '
    'words, not empty; "tone": one of calm, assertive, questioning, conciliatory, passionate.'
)


class Speech(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    agent_id: str
    content: str = Field(min_length=1, max_length=MAX_SPEECH_CHARS + 3)
    """At most 2000 characters, plus `...` when the reply was cut."""
    tone: Tone = DEFAULT_TONE
    truncated: bool = False


class IntentTurn(BaseModel):
    """An intent plus what produced it: the request messages and every attempt."""

    intent: Intent
    messages: list[dict[str, str]]
    """The first request's messages, system and user."""
    outcome: Outcome
    note: MemoryEntry
    """What the agent should remember of this turn (the caller adds and saves it)."""


class NoSpeech(LLMError):
    """No usable speech came back after the repairs; `outcome` holds every attempt."""

    def __init__(self, agent_id: str, outcome: Outcome) -> None:
        super().__init__(f"{agent_id}: no usable speech: {outcome.error}")
        self.outcome = outcome


class SpeechTurn(BaseModel):
    speech: Speech
    messages: list[dict[str, str]]
    outcome: Outcome
    note: MemoryEntry


def normalise_urgency(value: Any) -> int:
    """Round half up and clamp to 1-5; anything non-numeric is 1."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return 1
    return min(5, max(1, math.floor(value + 0.5)))


def normalise_intent(agent_id: str, reply: dict[str, Any]) -> Intent:
    kind = reply.get("intent")
    intent_type = cast(IntentType, kind if kind in get_args(IntentType) else "pass")
    return Intent(
        agent_id=agent_id,
        type=intent_type,
        urgency=normalise_urgency(reply.get("urgency")),
        target=_text_or_none(reply.get("target")),
        topic=_text_or_none(reply.get("topic")),
    )


def normalise_speech(agent_id: str, reply: dict[str, Any]) -> Speech:
    content = str(reply["content"]).strip()
    truncated = len(content) > MAX_SPEECH_CHARS
    if truncated:
        content = content[:MAX_SPEECH_CHARS] + "..."
    tone = reply.get("tone")
    return Speech(
        agent_id=agent_id,
        content=content,
        tone=cast(Tone, tone if tone in get_args(Tone) else DEFAULT_TONE),
        truncated=truncated,
    )


def _text_or_none(value: Any) -> str | None:
    return value.strip() or None if isinstance(value, str) else None


def build_messages(
    profile: AgentProfile, context: VisibleContext, memory: ShortTermMemory, task: str
) -> list[dict[str, str]]:
    if memory.agent_id != profile.agent_id:
        raise ValueError(
            f"memory of {memory.agent_id!r} given for {profile.agent_id!r}: "
            "an agent's prompt carries only its own memory"
        )
    parts = [context.render(), memory.render(), task]
    user = "\n\n".join(part for part in parts if part)
    return [
        {"role": "system", "content": system_prompt(profile)},
        {"role": "user", "content": user},
    ]


def _request(
    profile: AgentProfile,
    messages: list[dict[str, str]],
    model: str,
    temperature: float,
    max_tokens: int,
) -> LLMRequest:
    return LLMRequest(
        messages=messages,
        model=model,
        temperature=profile.llm.temperature if profile.llm.temperature is not None else temperature,
        max_tokens=profile.llm.max_tokens or max_tokens,
    )


def generate_intent(
    provider: Provider,
    profile: AgentProfile,
    context: VisibleContext,
    memory: ShortTermMemory,
    model: str,
) -> IntentTurn:
    """The agent's wish to speak. A reply still invalid after the repairs counts as `pass`
    (`outcome.status` says `failed`): a silent agent must not stall the discussion."""
    task = f"## Your task\nDecide whether you want to speak now. {INTENT_FORMAT}"
    messages = build_messages(profile, context, memory, task)
    request = _request(profile, messages, model, INTENT_TEMPERATURE, INTENT_MAX_TOKENS)
    outcome = ask_json(provider, request, INTENT_SCHEMA, instructions=INTENT_FORMAT)
    if outcome.status == "ok" and outcome.reply is not None:
        intent = normalise_intent(profile.agent_id, outcome.reply)
    else:
        intent = Intent(agent_id=profile.agent_id, type="pass", urgency=1)
    note = f"I chose to {intent.type} (urgency {intent.urgency})"
    if intent.topic:
        note += f" about: {intent.topic}"
    return IntentTurn(
        intent=intent,
        messages=messages,
        outcome=outcome,
        note=MemoryEntry(content=note, importance=0.3, kind="thought"),
    )


def generate_speech(
    provider: Provider,
    profile: AgentProfile,
    context: VisibleContext,
    memory: ShortTermMemory,
    model: str,
    *,
    intended_topic: str | None = None,
) -> SpeechTurn:
    """The agent's speech, once the moderator has given it the floor.

    Raises `NoSpeech` (an `LLMError`) when no usable speech came back after the repairs.
    """
    task = "## Your task\nThe moderator has given you the floor."
    if intended_topic:
        task += f" You said you wanted to speak about: {intended_topic}."
    task += f" {SPEECH_FORMAT}"
    messages = build_messages(profile, context, memory, task)
    request = _request(profile, messages, model, SPEECH_TEMPERATURE, SPEECH_MAX_TOKENS)
    outcome = ask_json(provider, request, SPEECH_SCHEMA, instructions=SPEECH_FORMAT)
    if outcome.status != "ok" or outcome.reply is None:
        raise NoSpeech(profile.agent_id, outcome)
    speech = normalise_speech(profile.agent_id, outcome.reply)
    return SpeechTurn(
        speech=speech,
        messages=messages,
        outcome=outcome,
        note=MemoryEntry(content=f"I said: {speech.content[:100]}", importance=0.8, kind="action"),
    )


VOTE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "type": {"const": "VOTE"},
        "score": {"type": "number", "minimum": 0, "maximum": 100},
        "reason": {"type": "string"},
    },
    "required": ["score"],
}
VOTE_FORMAT = (
    'Reply with only one JSON object: "type": "VOTE"; "score": your consensus score, a number '
    'from 0 (no agreement at all) to 100 (full agreement); "reason": one sentence.'
)
VOTE_TEMPERATURE, VOTE_MAX_TOKENS = 0.3, 120


class VoteTurn(BaseModel):
    agent_id: str
    score: float | None
    """None when no valid score came back after the repairs (the vote is not counted)."""
    reason: str
    messages: list[dict[str, str]]
    outcome: Outcome


def generate_vote(
    provider: Provider,
    profile: AgentProfile,
    context: VisibleContext,
    memory: ShortTermMemory,
    model: str,
) -> VoteTurn:
    """The agent's consensus score (0-100) for the phase that is ending."""
    task = (
        "## Your task\nThe moderator calls a consensus vote on this phase: how far do the "
        f"participants agree? {VOTE_FORMAT}"
    )
    messages = build_messages(profile, context, memory, task)
    request = _request(profile, messages, model, VOTE_TEMPERATURE, VOTE_MAX_TOKENS)
    outcome = ask_json(provider, request, VOTE_SCHEMA, instructions=VOTE_FORMAT)
    reply = outcome.reply if outcome.status == "ok" and outcome.reply is not None else None
    return VoteTurn(
        agent_id=profile.agent_id,
        score=float(reply["score"]) if reply is not None else None,
        reason=str(reply.get("reason") or "") if reply is not None else str(outcome.error),
        messages=messages,
        outcome=outcome,
    )
