"""Builders shared by the moderator tests: small scenarios, intents, states and a driver loop."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agenttalk.moderator import (
    Intent,
    ModeratorAction,
    ModeratorController,
    ModeratorDecision,
    ModeratorState,
)

A = ModeratorAction
AGENTS = ("a", "b", "c")


def phase(phase_id: str, **fields: Any) -> dict[str, Any]:
    """A valid phase: free order, interrupts allowed, 3 rounds, no summary, unless overridden."""
    return {
        "id": phase_id,
        "type": "discussion",
        "name": phase_id.title(),
        "description": f"The {phase_id} phase.",
        "max_rounds": 3,
        "allow_interrupt": True,
        "speaking_order": "free",
        "end_condition": "max_rounds",
        "force_summary": False,
        **fields,
    }


def scenario(*phases: dict[str, Any], **policy: Any) -> dict[str, Any]:
    """A valid opposing scenario (factions pro/con) with the given phases and policy."""
    return {
        "id": "test",
        "name": "Test",
        "description": "A scenario for tests.",
        "version": "1",
        "alignment": {
            "type": "opposing",
            "factions": [
                {"id": "pro", "description": "For."},
                {"id": "con", "description": "Against."},
            ],
        },
        "flow": {"phases": list(phases) or [phase("main")]},
        "moderator_policy": {"intervention_level": 2, "max_idle_rounds": 2, **policy},
    }


def controller(*phases: dict[str, Any], **policy: Any) -> ModeratorController:
    return ModeratorController(scenario(*phases, **policy))


def state(
    ctrl: ModeratorController, agents: Sequence[str] = AGENTS, **update: Any
) -> ModeratorState:
    """The initial state with fields overridden (validated, so a typo fails the test)."""
    base = ctrl.create_initial_state(list(agents))
    return ModeratorState.model_validate({**base.model_dump(), **update})


def want(agent: str, type: str = "speak", urgency: int = 3) -> Intent:
    return Intent(agent_id=agent, type=type, urgency=urgency)


def vote(agent: str, phase_id: str, score: Any) -> dict[str, Any]:
    return {"type": "VOTE", "speaker": agent, "content": score, "meta": {"phase": phase_id}}


@dataclass
class Step:
    state: ModeratorState
    intents: list[Intent]
    decision: ModeratorDecision
    events: list[dict[str, Any]]
    """The recent events the decision was made with."""
    spoke: str | None = None
    """Who spoke as a result of the decision, if anyone."""


@dataclass
class Run:
    steps: list[Step] = field(default_factory=list)
    final: ModeratorState | None = None


def drive(
    ctrl: ModeratorController,
    start: ModeratorState,
    intents_for: Callable[[ModeratorState], list[Intent]],
    answers: Callable[[ModeratorDecision], bool] = lambda d: True,
    score_for: Callable[[str], int] = lambda agent: 50,
    limit: int = 10_000,
    require_end: bool = True,
) -> Run:
    """Run a discussion until END_DISCUSSION, applying each decision with its updater.

    `answers(decision)` says whether a called or questioned target speaks; votes are logged as
    VOTE events with `score_for(agent)`. Fails if no END arrives within `limit` decisions,
    unless `require_end` is false.
    """
    run = Run()
    events: list[dict[str, Any]] = []
    current = start
    for _ in range(limit):
        intents = intents_for(current)
        recent = events[-50:]
        decision = ctrl.decide_next_action(current, intents, recent)
        step = Step(current, intents, decision, recent)
        run.steps.append(step)
        if decision.action == A.END_DISCUSSION:
            run.final = current
            return run
        target = decision.target_agent_id
        if decision.action == A.ALLOW_SPEECH or (
            decision.action in (A.CALL_AGENT, A.PROMPT_QUESTION)
            and target is not None
            and answers(decision)
        ):
            assert target is not None
            step.spoke = target
            current = ctrl.update_state_after_speech(current, target)
        elif decision.action == A.FORCE_SUMMARY:
            current = ctrl.update_state_after_summary(current)
        elif decision.action == A.CALL_VOTE:
            phase_id = current.current_phase_id
            events += [vote(agent, phase_id, score_for(agent)) for agent in current.agent_ids]
            current = ctrl.update_state_after_vote(current)
        elif decision.action == A.SWITCH_PHASE:
            assert decision.next_phase_id is not None
            current = ctrl.update_state_after_phase_switch(current, decision.next_phase_id)
        else:
            current = ctrl.update_state_after_idle(current)
    if require_end:
        raise AssertionError(f"no END_DISCUSSION within {limit} decisions")
    run.final = current
    return run
