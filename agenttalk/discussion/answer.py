"""The participant's side of a discussion turn: a `cmd_*.json` with `discussion` set, answered.

The executor calls `answer_turn` instead of its generic prompt when a command carries a
`DiscussionTurn`. The reply becomes an ordinary `{result, score?}` outcome, so the turn is
audited, archived and routed back to the moderator like any other command:

    intent  result {"intent", "urgency", "target", "topic"}   (an unusable reply counts as pass)
    speech  result {"content", "tone", "truncated"}           (no usable speech: failed)
    vote    result {"reason"}, score 0-100                     (no valid score: failed)

The agent's short-term memory is updated here, in the agent's own folder. A crash between the
memory write and the saved outcome may repeat that one note; memory stays within its limits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agenttalk.discussion.context import build_visible_context
from agenttalk.discussion.memory import load_memory, save_memory
from agenttalk.discussion.turns import (
    NoSpeech,
    generate_intent,
    generate_speech,
    generate_vote,
)
from agenttalk.eventlog import EventLog
from agenttalk.llm import Provider
from agenttalk.llm.reply import Outcome
from agenttalk.models import AgentProfile, DiscussionTurn


def answer_turn(
    provider: Provider,
    profile: AgentProfile,
    turn: DiscussionTurn,
    eventlog: EventLog,
    folder: Path,
    model: str,
    *,
    durable: bool = True,
) -> Outcome:
    context = build_visible_context(
        eventlog,
        turn.session_id,
        phase_name=turn.phase_name,
        phase_type=turn.phase_type,
        round=turn.round,
        max_rounds=turn.max_rounds,
        topic=turn.topic,
        call_reason=turn.call_reason,
        limit=turn.recent_events_limit,
    )
    memory = load_memory(folder, profile.agent_id)
    if turn.turn == "intent":
        said = generate_intent(provider, profile, context, memory, model)
        memory.add(said.note)
        save_memory(folder, memory, durable=durable)
        intent = said.intent
        result: dict[str, Any] = {"intent": intent.type, "urgency": intent.urgency}
        result.update(target=intent.target, topic=intent.topic)
        # An unusable reply is still an answer (pass): a silent agent must not stall the session.
        return said.outcome.model_copy(
            update={"status": "ok", "reply": {"result": result}, "error": said.outcome.error}
        )
    if turn.turn == "speech":
        try:
            spoke = generate_speech(
                provider, profile, context, memory, model, intended_topic=turn.intended_topic
            )
        except NoSpeech as exc:
            return exc.outcome.model_copy(update={"error": str(exc)})
        memory.add(spoke.note)
        save_memory(folder, memory, durable=durable)
        speech = spoke.speech.model_dump(mode="json", exclude={"agent_id"})
        return spoke.outcome.model_copy(update={"reply": {"result": speech}})
    voted = generate_vote(provider, profile, context, memory, model)
    if voted.score is None:
        return voted.outcome.model_copy(update={"status": "failed", "reply": None})
    reply = {"result": {"reason": voted.reason}, "score": voted.score}
    return voted.outcome.model_copy(update={"status": "ok", "reply": reply})
