"""Pure helpers the controller decides with: intent ranking, health and turn order.

Every tie goes by registration order (`state.agent_ids`), so no result depends on the order in
which intents or counts were supplied.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agenttalk.moderator.scenario import Phase
from agenttalk.moderator.state import (
    IMBALANCE_THRESHOLD,
    INTERRUPT_MIN_URGENCY,
    MAX_CONSECUTIVE_SPEAKS,
    OVERHEAT_MIN_SPEECHES,
    Intent,
    ModeratorState,
)

_TYPE_RANK = {"respond": 0, "question": 1, "speak": 2, "interrupt": 3}
"""Only breaks ties between one agent's intents of equal urgency; interrupts go first anyway
when the phase allows them."""


def rank_intents(
    intents: Iterable[Intent | Mapping[str, Any]], state: ModeratorState
) -> list[Intent]:
    """Drop `pass`; then interrupts first when the phase allows them, urgency descending,
    registration order. Raises ValueError for an intent from an unregistered agent."""
    position = {agent: i for i, agent in enumerate(state.agent_ids)}
    kept: list[Intent] = []
    for raw in intents:
        intent = Intent.model_validate(raw)
        if intent.type == "pass":
            continue
        if intent.agent_id not in position:
            raise ValueError(f"intent from {intent.agent_id!r}, who is not a participant")
        kept.append(intent)

    def key(it: Intent) -> tuple[int, int, int, int, bool, str, bool, str]:
        interrupt_first = 0 if it.type == "interrupt" and state.allow_interrupt else 1
        return (
            interrupt_first,
            -it.urgency,
            position[it.agent_id],
            _TYPE_RANK[it.type],
            it.target is not None,
            it.target or "",
            it.topic is not None,
            it.topic or "",
        )

    return sorted(kept, key=key)


def top_intents(ranked: list[Intent]) -> dict[str, Intent]:
    """Each agent's highest-ranked intent."""
    top: dict[str, Intent] = {}
    for intent in ranked:
        top.setdefault(intent.agent_id, intent)
    return top


def is_granted_interrupt(intent: Intent, state: ModeratorState) -> bool:
    """An interrupt the current phase may grant: allowed here and urgent enough."""
    return (
        intent.type == "interrupt"
        and state.allow_interrupt
        and intent.urgency >= INTERRUPT_MIN_URGENCY
    )


def held_back(state: ModeratorState) -> str | None:
    """The last speaker if they have reached MAX_CONSECUTIVE_SPEAKS, else None."""
    if state.last_speaker_id is not None and state.consecutive_speaks >= MAX_CONSECUTIVE_SPEAKS:
        return state.last_speaker_id
    return None


def overheated_agent(state: ModeratorState) -> str | None:
    """The agent with the most speeches (earliest on ties) if it holds more than 60% of them
    and more than 2."""
    total = sum(state.speak_counts.get(a, 0) for a in state.agent_ids)
    top, top_count = None, 0
    for agent in state.agent_ids:
        count = state.speak_counts.get(agent, 0)
        if count > top_count:
            top, top_count = agent, count
    if total == 0 or top_count <= OVERHEAT_MIN_SPEECHES:
        return None
    return top if top_count / total > IMBALANCE_THRESHOLD else None


def least_speaker(state: ModeratorState, exclude: Iterable[str | None] = ()) -> str | None:
    """The registered agent with the fewest speeches (earliest on ties), skipping `exclude`."""
    skip = set(exclude)
    best, best_count = None, 0
    for agent in state.agent_ids:
        if agent in skip:
            continue
        count = state.speak_counts.get(agent, 0)
        if best is None or count < best_count:
            best, best_count = agent, count
    return best


def turn_order(state: ModeratorState, phase: Phase | None) -> tuple[str, ...]:
    """Round-robin order: with a `faction_order` and factions, the factions take turns (the
    k-th member of each faction in faction order, members in registration order); agents
    outside those factions follow in registration order. Otherwise registration order."""
    if phase is None or not phase.faction_order or not state.factions:
        return state.agent_ids
    groups = [
        [a for a in state.agent_ids if state.factions.get(a) == faction]
        for faction in phase.faction_order
    ]
    order: list[str] = []
    for k in range(max(len(g) for g in groups)):
        order += [g[k] for g in groups if k < len(g)]
    order += [a for a in state.agent_ids if a not in order]
    return tuple(order)
