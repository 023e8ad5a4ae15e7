"""What the controller returns once the phase is running: the speaking orders, the cold
handler and the proactive nudges, plus the reasons shown to participants."""

from __future__ import annotations

import math
from typing import Any

from agenttalk.moderator.rules import (
    held_back,
    is_granted_interrupt,
    least_speaker,
    top_intents,
    turn_order,
)
from agenttalk.moderator.scenario import Phase
from agenttalk.moderator.state import (
    ROUND_ROBIN_INTERRUPT_URGENCY,
    Intent,
    ModeratorAction,
    ModeratorDecision,
    ModeratorState,
)

A = ModeratorAction

STEP_LIMIT = "step_limit"
ALL_PHASES_COMPLETED = "all_phases_completed"
PHASE_END = "phase_end"
MAX_ROUNDS = "max_rounds"
ROLLBACK = "rollback"
CONSENSUS_VOTE = "consensus_vote"
COLD_LONG = "The discussion seems to have stalled; please share your view."
COLD_CALL = "Please share your point of view."
PROACTIVE_CALL = "Please share your perspective."
OVERHEATED = "Please give the other participants a chance to speak."
YOUR_TURN = "It is your turn to speak."
MODERATED_CALL = "Please give your view."
LET_OTHERS_FIRST = "Please let others speak first."
NO_INTERRUPTS = "Interrupting is not allowed in this phase."
URGENCY_TOO_LOW = "Interrupting needs a higher urgency."
NOTHING_TO_DO = "Nobody asked to speak."


def decide(
    action: ModeratorAction,
    target: str | None = None,
    *,
    next_phase_id: str | None = None,
    reason: str | None = None,
    **metadata: Any,
) -> ModeratorDecision:
    return ModeratorDecision(
        action=action,
        target_agent_id=target,
        next_phase_id=next_phase_id,
        reason=reason,
        metadata=metadata,
    )


def allow(state: ModeratorState, intent: Intent, rule: str) -> ModeratorDecision:
    """ALLOW_SPEECH to the agent whose highest-ranked intent is `intent`."""
    granted = is_granted_interrupt(intent, state)
    return decide(A.ALLOW_SPEECH, intent.agent_id, rule=rule, is_interrupt=granted)


def cold(state: ModeratorState) -> ModeratorDecision:
    """A long silence; the quietest agent is called (never a third time in a row)."""
    least = least_speaker(state, exclude=[held_back(state)])
    level = state.intervention_level
    if level == 3:
        return decide(
            A.PROMPT_QUESTION,
            least,
            rule="cold",
            llm_request_type="question",
            cold_rounds=state.idle_rounds,
            target_agent_id=least,
        )
    if least is not None and level == 2:
        return decide(A.CALL_AGENT, least, reason=COLD_CALL, rule="cold")
    if least is not None and level == 1 and state.idle_rounds >= 2 * state.cold_threshold:
        return decide(A.CALL_AGENT, least, reason=COLD_LONG, rule="cold")
    return decide(A.WAIT, reason=NOTHING_TO_DO, rule="cold")


def proactive(state: ModeratorState) -> ModeratorDecision:
    """Levels 2-3 nudge after any idle step."""
    if state.intervention_level == 3:
        return decide(
            A.PROMPT_QUESTION,
            rule="proactive",
            llm_request_type="question",
            intent="proactive_guide",
        )
    least = least_speaker(state, exclude=[state.last_speaker_id])
    if least is None:
        return decide(A.WAIT, reason=NOTHING_TO_DO, rule="proactive")
    return decide(A.CALL_AGENT, least, reason=PROACTIVE_CALL, rule="proactive")


def round_robin(
    state: ModeratorState, phase: Phase | None, ranked: list[Intent]
) -> ModeratorDecision:
    order = turn_order(state, phase)
    expected = order[state.round_robin_index % len(order)]
    top = top_intents(ranked)
    if expected in top:
        return allow(state, top[expected], "round_robin")
    if state.allow_interrupt:
        first = next((i for i in ranked if i.type == "interrupt"), None)
        if first is not None and first.urgency >= ROUND_ROBIN_INTERRUPT_URGENCY:
            return allow(state, first, "round_robin")
    return decide(A.CALL_AGENT, expected, reason=YOUR_TURN, rule="round_robin")


def free(state: ModeratorState, ranked: list[Intent]) -> ModeratorDecision:
    blocked = held_back(state)
    eligible = [i for i in ranked if i.agent_id != blocked]
    if not eligible:
        return decide(A.REJECT_SPEECH, ranked[0].agent_id, reason=LET_OTHERS_FIRST, rule="free")
    chosen = eligible[0]
    if chosen.type == "interrupt" and not state.allow_interrupt:
        return decide(A.REJECT_SPEECH, chosen.agent_id, reason=NO_INTERRUPTS, rule="free")
    if chosen.type == "interrupt" and not is_granted_interrupt(chosen, state):
        return decide(A.REJECT_SPEECH, chosen.agent_id, reason=URGENCY_TOO_LOW, rule="free")
    return allow(state, chosen, "free")


def moderated(state: ModeratorState, ranked: list[Intent]) -> ModeratorDecision:
    """The quietest agent speaks; asking to speak counts as half a speech less."""
    blocked = held_back(state)
    top = top_intents(ranked)
    best, best_score = None, math.inf
    for agent in state.agent_ids:
        if agent == blocked:
            continue
        score = state.speak_counts.get(agent, 0) - (0.5 if agent in top else 0.0)
        if score < best_score:
            best, best_score = agent, score
    if best is None:
        return decide(A.WAIT, reason=NOTHING_TO_DO, rule="moderated")
    if best in top:
        return allow(state, top[best], "moderated")
    return decide(A.CALL_AGENT, best, reason=MODERATED_CALL, rule="moderated")
