"""Rules that must hold for any scenario, any participants and any intents (Hypothesis).

Each test drives a whole simulated discussion: the decision is applied with its updater, a
called or questioned target speaks or passes as Hypothesis chooses, votes get arbitrary scores,
and every other decision is followed by `update_state_after_idle`.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moderator_support import A, Run, drive

from agenttalk.moderator import Intent, ModeratorController, ModeratorState

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ORDERS = ["free", "round_robin", "moderated"]
TYPE_RANK = {"respond": 0, "question": 1, "speak": 2, "interrupt": 3}


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    count = draw(st.integers(1, 4))
    phases = []
    for i in range(count):
        order = draw(st.sampled_from(ORDERS))
        spec: dict[str, Any] = {
            "id": f"p{i}",
            "type": "discussion",
            "name": f"Phase {i}",
            "description": "A phase.",
            "max_rounds": draw(st.integers(1, 4)),
            "allow_interrupt": draw(st.booleans()),
            "speaking_order": order,
            "end_condition": "max_rounds",
            "force_summary": draw(st.booleans()),
        }
        if order == "round_robin" and draw(st.booleans()):
            spec["faction_order"] = draw(st.permutations(["pro", "con"]))
        if i > 0 and draw(st.booleans()):
            spec["rollback_to"] = f"p{draw(st.integers(0, i - 1))}"
            spec["consensus_threshold"] = draw(st.integers(0, 100))
        phases.append(spec)
    return {
        "id": "prop",
        "name": "Property",
        "description": "Generated.",
        "version": "1",
        "alignment": {
            "type": "opposing",
            "factions": [{"id": "pro", "description": "P."}, {"id": "con", "description": "C."}],
        },
        "flow": {"phases": phases},
        "moderator_policy": {
            "intervention_level": draw(st.integers(0, 3)),
            "max_idle_rounds": draw(st.integers(1, 3)),
            "max_steps": draw(st.integers(1, 60)),
            "max_rollbacks": draw(st.integers(0, 2)),
        },
    }


def intents_for(agents: tuple[str, ...]) -> st.SearchStrategy[list[Intent]]:
    one = st.builds(
        Intent,
        agent_id=st.sampled_from(agents),
        type=st.sampled_from(["speak", "interrupt", "question", "respond", "pass"]),
        urgency=st.integers(1, 5),
    )
    return st.lists(one, max_size=5)


@st.composite
def sessions(draw: st.DrawFn) -> tuple[ModeratorController, ModeratorState]:
    ctrl = ModeratorController(draw(scenarios()))
    agents = [f"ag{i}" for i in range(draw(st.integers(1, 4)))]
    factions = {a: f for a in agents if (f := draw(st.sampled_from(["pro", "con", None])))}
    return ctrl, ctrl.create_initial_state(agents, factions)


def simulate(data: st.DataObject) -> tuple[ModeratorController, Run]:
    ctrl, start = data.draw(sessions())
    intents = intents_for(start.agent_ids)
    run = drive(
        ctrl,
        start,
        intents_for=lambda s: data.draw(intents),
        answers=lambda d: data.draw(st.booleans()),
        score_for=lambda agent: data.draw(st.integers(0, 100)),
        limit=ctrl.policy.max_steps + 1,
    )
    return ctrl, run


def top_intent(intents: list[Intent], agent: str, allow_interrupt: bool) -> Intent | None:
    """The documented ranking, restated: interrupts first if allowed, urgency, type."""
    own = [i for i in intents if i.agent_id == agent and i.type != "pass"]
    key = lambda i: (  # noqa: E731
        0 if i.type == "interrupt" and allow_interrupt else 1,
        -i.urgency,
        TYPE_RANK[i.type],
    )
    return min(own, key=key, default=None)


@SETTINGS
@given(st.data())
def test_nobody_speaks_three_times_in_a_row_in_a_free_phase(data: st.DataObject) -> None:
    _, run = simulate(data)
    for step in run.steps:
        s = step.state
        if step.spoke is not None and s.speaking_order == "free":
            assert not (step.spoke == s.last_speaker_id and s.consecutive_speaks >= 2)


@SETTINGS
@given(st.data())
def test_no_interrupt_below_urgency_3_or_in_a_closed_phase_is_allowed(data: st.DataObject) -> None:
    _, run = simulate(data)
    for step in run.steps:
        d, s = step.decision, step.state
        if d.action != A.ALLOW_SPEECH:
            continue
        assert d.target_agent_id is not None
        top = top_intent(step.intents, d.target_agent_id, s.allow_interrupt)
        assert top is not None, "speech was allowed to an agent who did not ask"
        granted = top.type == "interrupt" and s.allow_interrupt and top.urgency >= 3
        assert d.metadata["is_interrupt"] is granted
        if s.speaking_order == "free" and top.type == "interrupt":
            assert granted


@SETTINGS
@given(st.data())
def test_phases_advance_in_order_or_roll_back_as_configured(data: st.DataObject) -> None:
    ctrl, run = simulate(data)
    ids = [p.id for p in ctrl.scenario.flow.phases]
    for step in run.steps:
        d, s = step.decision, step.state
        here = ids.index(s.current_phase_id)
        if d.action == A.SWITCH_PHASE:
            if d.metadata["rollback"]:
                assert d.next_phase_id == ctrl.scenario.flow.phases[here].rollback_to
                assert s.rollbacks < ctrl.policy.max_rollbacks
            else:
                assert d.next_phase_id == ids[here + 1]
        if d.action == A.END_DISCUSSION and d.reason != "step_limit":
            assert here == len(ids) - 1
    assert run.final is not None
    assert run.final.rollbacks <= ctrl.policy.max_rollbacks


@SETTINGS
@given(st.data())
def test_every_session_ends_within_max_steps(data: st.DataObject) -> None:
    ctrl, run = simulate(data)
    assert run.steps[-1].decision.action == A.END_DISCUSSION
    assert run.final is not None and run.final.steps <= ctrl.policy.max_steps
    assert len(run.steps) <= ctrl.policy.max_steps + 1


@SETTINGS
@given(st.data())
def test_decisions_do_not_depend_on_the_order_of_intents(data: st.DataObject) -> None:
    ctrl, run = simulate(data)
    for step in run.steps:
        shuffled = data.draw(st.permutations(step.intents))
        assert ctrl.decide_next_action(step.state, shuffled, step.events) == step.decision
