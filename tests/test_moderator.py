"""The moderator's rules, one test per rule (reference §2.2-2.4) and per change a-i of issue 4."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from moderator_support import A, controller, drive, phase, state, vote, want

from agenttalk.moderator import Intent, ModeratorController, ModeratorState
from agenttalk.moderator.handlers import (
    COLD_CALL,
    COLD_LONG,
    LET_OTHERS_FIRST,
    MODERATED_CALL,
    NO_INTERRUPTS,
    OVERHEATED,
    PROACTIVE_CALL,
    STEP_LIMIT,
    URGENCY_TOO_LOW,
    YOUR_TURN,
)

ORDERS = ["free", "round_robin", "moderated"]

# --- initial state and updaters (§2.1, §2.4) -------------------------------------------------


def test_initial_state_comes_from_the_first_phase_and_the_policy() -> None:
    ctrl = controller(
        phase("one", speaking_order="moderated", allow_interrupt=False),
        phase("two"),
        intervention_level=3,
        max_idle_rounds=4,
    )
    s = ctrl.create_initial_state(["x", "y"], factions={"x": "pro"})
    assert (s.current_phase_id, s.current_phase_type) == ("one", "discussion")
    assert (s.speaking_order, s.allow_interrupt) == ("moderated", False)
    assert (s.intervention_level, s.cold_threshold) == (3, 4)
    assert s.speak_counts == {"x": 0, "y": 0}
    assert s.agent_ids == ("x", "y")
    assert s.factions == {"x": "pro"}
    assert s.last_speaker_id is None
    assert (s.phase_round, s.total_rounds, s.idle_rounds, s.steps, s.rollbacks) == (0, 0, 0, 0, 0)


@pytest.mark.parametrize(
    ("agents", "factions", "match"),
    [
        ([], None, "at least one"),
        (["x", "x"], None, "unique"),
        (["x"], {"y": "pro"}, "not a participant"),
        (["x"], {"x": "neutral"}, "not a faction"),
    ],
)
def test_initial_state_rejects_bad_participants(
    agents: list[str], factions: dict[str, str] | None, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        controller().create_initial_state(agents, factions)


def test_speech_counts_one_round_and_tracks_the_run_of_the_same_speaker() -> None:
    ctrl = controller()
    s0 = state(ctrl, idle_rounds=3)
    s1 = ctrl.update_state_after_speech(s0, "a")
    s2 = ctrl.update_state_after_speech(s1, "a")
    s3 = ctrl.update_state_after_speech(s2, "b")
    assert (s1.consecutive_speaks, s2.consecutive_speaks, s3.consecutive_speaks) == (1, 2, 1)
    assert s3.speak_counts == {"a": 2, "b": 1, "c": 0}
    assert (s3.last_speaker_id, s3.phase_round, s3.total_rounds, s1.idle_rounds) == ("b", 3, 3, 0)
    assert s3.round_robin_index == 0
    assert s0.speak_counts == {"a": 0, "b": 0, "c": 0}
    with pytest.raises(ValueError, match="not a participant"):
        ctrl.update_state_after_speech(s0, "zed")


def test_round_robin_index_advances_only_in_round_robin_phases() -> None:
    ctrl = controller(phase("rr", speaking_order="round_robin"))
    assert ctrl.update_state_after_speech(state(ctrl), "a").round_robin_index == 1


def test_phase_switch_resets_the_phase_but_keeps_the_speaker_history() -> None:
    ctrl = controller(phase("one"), phase("two", speaking_order="moderated", allow_interrupt=False))
    s = state(
        ctrl,
        phase_round=3,
        idle_rounds=2,
        round_robin_index=5,
        phase_summary_done=True,
        phase_vote_done=True,
        last_speaker_id="a",
        consecutive_speaks=2,
        speak_counts={"a": 3, "b": 0, "c": 0},
    )
    after = ctrl.update_state_after_phase_switch(s, "two")
    assert (after.current_phase_id, after.speaking_order, after.allow_interrupt) == (
        "two",
        "moderated",
        False,
    )
    assert (after.phase_round, after.idle_rounds, after.round_robin_index) == (0, 0, 0)
    assert not after.phase_summary_done and not after.phase_vote_done
    assert (after.last_speaker_id, after.consecutive_speaks) == ("a", 2)
    assert after.speak_counts == {"a": 3, "b": 0, "c": 0}
    assert after.rollbacks == 0
    with pytest.raises(ValueError, match="not a phase"):
        ctrl.update_state_after_phase_switch(s, "three")


UPDATERS = {
    "speech": lambda c, s: c.update_state_after_speech(s, "a"),
    "idle": lambda c, s: c.update_state_after_idle(s),
    "summary": lambda c, s: c.update_state_after_summary(s),
    "vote": lambda c, s: c.update_state_after_vote(s),
    "phase_switch": lambda c, s: c.update_state_after_phase_switch(s, "two"),
}


@pytest.mark.parametrize("name", UPDATERS)
def test_d_every_updater_counts_a_step_and_leaves_its_input_alone(name: str) -> None:
    ctrl = controller(phase("one"), phase("two"))
    before = state(ctrl, steps=4)
    snapshot = before.model_dump()
    after = UPDATERS[name](ctrl, before)
    assert after.steps == 5
    assert before.model_dump() == snapshot


def test_idle_counts_an_idle_round() -> None:
    ctrl = controller()
    assert ctrl.update_state_after_idle(state(ctrl, idle_rounds=1)).idle_rounds == 2


# --- d: the step limit comes first --------------------------------------------------------


def test_d_the_step_limit_ends_the_discussion_before_anything_else() -> None:
    ctrl = controller(phase("one", max_rounds=1), max_steps=5)
    s = state(ctrl, steps=5, phase_round=1)
    decision = ctrl.decide_next_action(s, [want("a", urgency=5)], [])
    assert decision.action == A.END_DISCUSSION
    assert decision.reason == "step_limit"
    below = ctrl.decide_next_action(state(ctrl, steps=4), [want("a")], [])
    assert below.action == A.ALLOW_SPEECH


def test_i_a_warning_is_given_once_then_the_others_get_the_floor() -> None:
    # The original warned an agent that kept asking forever, blocking everyone else.
    ctrl = controller(phase("one", max_rounds=50), intervention_level=1)
    start = state(ctrl, speak_counts={"a": 9, "b": 1, "c": 0})
    run = drive(
        ctrl,
        start,
        lambda s: [want("a", urgency=5), want("c", urgency=1)],
        limit=4,
        require_end=False,
    )
    assert [(step.decision.action, step.decision.target_agent_id) for step in run.steps] == [
        (A.WARN_AGENT, "a"),
        (A.ALLOW_SPEECH, "c"),
        (A.WARN_AGENT, "a"),
        (A.ALLOW_SPEECH, "c"),
    ]


def test_i_a_set_aside_agent_alone_counts_as_no_intent() -> None:
    ctrl = controller(intervention_level=2)
    s = state(ctrl, speak_counts={"a": 9, "b": 1, "c": 0}, idle_rounds=1, last_speaker_id="a")
    decision = ctrl.decide_next_action(s, [want("a", urgency=5)], [])
    assert (decision.action, decision.target_agent_id) == (A.CALL_AGENT, "c")


def test_d_a_rejected_speaker_alone_ends_at_the_step_limit() -> None:
    ctrl = controller(phase("one", max_rounds=50), max_steps=8)
    start = state(ctrl, last_speaker_id="a", consecutive_speaks=2)
    run = drive(ctrl, start, lambda s: [want("a")])
    assert {step.decision.action for step in run.steps[:-1]} == {A.REJECT_SPEECH}
    assert run.final is not None and run.final.steps == 8


# --- phase end (§2.2.1) and a: summary, then switch ----------------------------------------


def test_a_phase_end_summarises_once_then_switches() -> None:
    ctrl = controller(phase("one", max_rounds=2, force_summary=True), phase("two"))
    s = state(ctrl, phase_round=2)
    first = ctrl.decide_next_action(s, [want("a")], [])
    assert first.action == A.FORCE_SUMMARY
    assert first.metadata["phase_id"] == "one"
    assert first.metadata["llm_request_type"] == "summary"
    second = ctrl.decide_next_action(ctrl.update_state_after_summary(s), [want("a")], [])
    assert (second.action, second.next_phase_id) == (A.SWITCH_PHASE, "two")
    assert second.reason == "max_rounds"
    assert second.metadata["rollback"] is False


def test_phase_end_without_summary_switches_straight_away() -> None:
    ctrl = controller(phase("one", max_rounds=1), phase("two"))
    decision = ctrl.decide_next_action(state(ctrl, phase_round=1), [], [])
    assert (decision.action, decision.next_phase_id) == (A.SWITCH_PHASE, "two")


def test_the_last_phase_ends_the_discussion() -> None:
    ctrl = controller(phase("one"), phase("two", max_rounds=1, force_summary=True))
    s = state(ctrl, current_phase_id="two", phase_round=1, phase_summary_done=True)
    decision = ctrl.decide_next_action(s, [want("a")], [])
    assert (decision.action, decision.reason) == (A.END_DISCUSSION, "all_phases_completed")


def test_phase_end_uses_the_scenario_and_skips_unknown_phases() -> None:
    ctrl = controller(phase("one", max_rounds=3))
    assert ctrl.decide_next_action(state(ctrl, phase_round=2), [want("a")], []).action == (
        A.ALLOW_SPEECH
    )
    unknown = state(ctrl, current_phase_id="gone", phase_round=99)
    assert ctrl.decide_next_action(unknown, [want("a")], []).action == A.ALLOW_SPEECH


def test_phase_end_comes_before_cold_and_overheat() -> None:
    ctrl = controller(phase("one", max_rounds=1), phase("two"), intervention_level=3)
    s = state(ctrl, phase_round=1, idle_rounds=9, speak_counts={"a": 9, "b": 0, "c": 0})
    assert ctrl.decide_next_action(s, [want("a", urgency=5)], []).action == A.SWITCH_PHASE


# --- f: rollback by consensus vote -------------------------------------------------------


def _rollback_controller(**policy: Any) -> ModeratorController:
    return controller(
        phase("explore", max_rounds=1),
        phase(
            "converge",
            max_rounds=1,
            force_summary=True,
            rollback_to="explore",
            consensus_threshold=60,
        ),
        phase("close", max_rounds=1),
        **policy,
    )


def _at_converge_end(ctrl: ModeratorController, **update: Any) -> ModeratorState:
    return state(ctrl, current_phase_id="converge", phase_round=1, **update)


def test_f_summary_then_one_vote_then_the_decision() -> None:
    ctrl = _rollback_controller()
    s = _at_converge_end(ctrl)
    assert ctrl.decide_next_action(s, [], []).action == A.FORCE_SUMMARY
    s = ctrl.update_state_after_summary(s)
    call = ctrl.decide_next_action(s, [], [])
    assert call.action == A.CALL_VOTE
    assert call.metadata["phase_id"] == "converge"
    assert call.metadata["consensus_threshold"] == 60
    s = ctrl.update_state_after_vote(s)
    events = [vote("a", "converge", 40), vote("b", "converge", 50), vote("c", "converge", 60)]
    back = ctrl.decide_next_action(s, [], events)
    assert (back.action, back.next_phase_id) == (A.SWITCH_PHASE, "explore")
    assert back.metadata["rollback"] is True
    assert back.metadata["mean_score"] == 50
    rolled = ctrl.update_state_after_phase_switch(s, "explore")
    assert (rolled.rollbacks, rolled.current_phase_id, rolled.phase_vote_done) == (
        1,
        "explore",
        False,
    )


def test_f_a_mean_at_the_threshold_moves_on() -> None:
    ctrl = _rollback_controller()
    s = _at_converge_end(ctrl, phase_summary_done=True, phase_vote_done=True)
    events = [vote("a", "converge", 60), vote("b", "converge", 60)]
    decision = ctrl.decide_next_action(s, [], events)
    assert (decision.action, decision.next_phase_id) == (A.SWITCH_PHASE, "close")
    assert decision.metadata["rollback"] is False
    assert ctrl.update_state_after_phase_switch(s, "close").rollbacks == 0


def test_f_no_rollback_once_max_rollbacks_is_reached() -> None:
    ctrl = _rollback_controller(max_rollbacks=1)
    s = _at_converge_end(ctrl, phase_summary_done=True, phase_vote_done=True, rollbacks=1)
    decision = ctrl.decide_next_action(s, [], [vote("a", "converge", 0)])
    assert decision.next_phase_id == "close"


def test_f_without_votes_the_phase_moves_on() -> None:
    ctrl = _rollback_controller()
    s = _at_converge_end(ctrl, phase_summary_done=True, phase_vote_done=True)
    decision = ctrl.decide_next_action(s, [], [vote("a", "explore", 0)])
    assert decision.next_phase_id == "close"
    assert decision.metadata["mean_score"] is None


@dataclass
class _Event:
    type: Any
    speaker: str
    content: Any
    meta: dict[str, Any] | None


@pytest.mark.parametrize(
    ("events", "mean"),
    [
        ([vote("a", "converge", "30"), vote("b", "converge", 50)], 40),
        ([{**vote("a", "converge", "x"), "meta": {"phase": "converge", "score": 20}}], 20),
        ([vote("a", "converge", {"score": 10}), vote("b", "converge", {"other": 1})], 10),
        ([vote("a", "converge", 90), vote("a", "converge", 10)], 10),
        ([vote("a", "converge", 150), vote("b", "converge", True), vote("c", "converge", 30)], 30),
        ([_Event("vote", "a", 20, {"phase": "converge"}), _Event("VOTE", "b", 40, None)], 20),
        ([{**vote("a", "converge", 0), "type": "SPEECH"}, vote("b", "converge", 70)], 70),
    ],
    ids=["text", "meta", "mapping", "latest", "invalid", "objects", "only-votes"],
)
def test_f_the_vote_shapes_that_are_read(events: list[Any], mean: float) -> None:
    ctrl = _rollback_controller()
    s = _at_converge_end(ctrl, phase_summary_done=True, phase_vote_done=True)
    assert ctrl.decide_next_action(s, [], events).metadata["mean_score"] == mean


def test_f_a_full_run_rolls_back_once_and_then_finishes() -> None:
    ctrl = _rollback_controller()
    run = drive(ctrl, ctrl.create_initial_state(["a", "b"]), lambda s: [], score_for=lambda a: 10)
    switches = [
        (step.decision.next_phase_id, step.decision.metadata["rollback"])
        for step in run.steps
        if step.decision.action == A.SWITCH_PHASE
    ]
    assert switches == [
        ("converge", False),
        ("explore", True),
        ("converge", False),
        ("close", False),
    ]
    assert [s.decision.action for s in run.steps].count(A.CALL_VOTE) == 2
    assert run.steps[-1].decision.reason == "all_phases_completed"


def test_f_no_rollbacks_allowed_means_no_rollback() -> None:
    ctrl = _rollback_controller(max_rollbacks=0)
    run = drive(ctrl, ctrl.create_initial_state(["a"]), lambda s: [], score_for=lambda a: 0)
    assert not any(step.decision.metadata.get("rollback") for step in run.steps)


# --- health: overheat (i) and cold (h), e: level 0 observes --------------------------------


@pytest.mark.parametrize(
    ("counts", "hot"),
    [
        ({"a": 3, "b": 1, "c": 0}, True),
        ({"a": 2, "b": 0, "c": 0}, False),
        ({"a": 3, "b": 2, "c": 0}, False),
        ({"a": 7, "b": 2, "c": 2}, True),
        ({"a": 6, "b": 2, "c": 2}, False),
    ],
)
def test_overheat_needs_a_share_above_60_percent_and_more_than_2_speeches(
    counts: dict[str, int], hot: bool
) -> None:
    ctrl = controller(intervention_level=1)
    decision = ctrl.decide_next_action(state(ctrl, speak_counts=counts), [want("a")], [])
    assert decision.action == (A.WARN_AGENT if hot else A.ALLOW_SPEECH)
    assert decision.target_agent_id == "a"
    if hot:
        assert decision.reason == OVERHEATED


def test_i_an_overheated_agent_without_the_top_intent_is_only_set_aside() -> None:
    ctrl = controller(intervention_level=2)
    s = state(ctrl, speak_counts={"a": 5, "b": 1, "c": 0})
    decision = ctrl.decide_next_action(s, [want("a", urgency=2), want("c", urgency=3)], [])
    assert (decision.action, decision.target_agent_id) == (A.ALLOW_SPEECH, "c")
    low = ctrl.decide_next_action(s, [want("a", urgency=5), want("b", urgency=1)], [])
    assert (low.action, low.target_agent_id) == (A.WARN_AGENT, "a")


def test_e_level_0_lets_an_overheated_agent_speak() -> None:
    ctrl = controller(intervention_level=0)
    s = state(ctrl, speak_counts={"a": 5, "b": 0, "c": 0}, idle_rounds=9)
    decision = ctrl.decide_next_action(s, [want("a")], [])
    assert (decision.action, decision.target_agent_id) == (A.ALLOW_SPEECH, "a")


@pytest.mark.parametrize("level", [1, 2, 3])
def test_h_a_cold_discussion_with_intents_handles_them(level: int) -> None:
    ctrl = controller(intervention_level=level)
    s = state(ctrl, idle_rounds=10)
    decision = ctrl.decide_next_action(s, [want("b")], [])
    assert (decision.action, decision.target_agent_id) == (A.ALLOW_SPEECH, "b")


def test_h_pass_intents_do_not_end_a_cold_spell() -> None:
    ctrl = controller(intervention_level=2)
    s = state(ctrl, idle_rounds=2)
    decision = ctrl.decide_next_action(s, [want("b", "pass", 5)], [])
    assert (decision.action, decision.reason) == (A.CALL_AGENT, COLD_CALL)


def test_cold_level_1_calls_only_after_twice_the_threshold() -> None:
    ctrl = controller(intervention_level=1, max_idle_rounds=2)
    assert ctrl.decide_next_action(state(ctrl, idle_rounds=3), [], []).action == A.WAIT
    late = ctrl.decide_next_action(state(ctrl, idle_rounds=4), [], [])
    assert (late.action, late.target_agent_id, late.reason) == (A.CALL_AGENT, "a", COLD_LONG)


def test_cold_calls_the_quietest_earliest_registered_agent() -> None:
    ctrl = controller(intervention_level=2)
    s = state(ctrl, idle_rounds=2, speak_counts={"a": 2, "b": 1, "c": 1})
    assert ctrl.decide_next_action(s, [], []).target_agent_id == "b"


def test_cold_never_calls_an_agent_for_a_third_speech_in_a_row() -> None:
    ctrl = controller(intervention_level=2)
    s = state(
        ctrl,
        idle_rounds=2,
        speak_counts={"a": 2, "b": 5, "c": 5},
        last_speaker_id="a",
        consecutive_speaks=2,
    )
    assert ctrl.decide_next_action(s, [], []).target_agent_id == "b"


def test_cold_level_3_asks_a_question_aimed_at_the_quietest() -> None:
    ctrl = controller(intervention_level=3, max_idle_rounds=2)
    s = state(ctrl, idle_rounds=2, speak_counts={"a": 1, "b": 1, "c": 0})
    decision = ctrl.decide_next_action(s, [], [])
    assert (decision.action, decision.target_agent_id) == (A.PROMPT_QUESTION, "c")
    assert decision.metadata["cold_rounds"] == 2
    assert decision.metadata["llm_request_type"] == "question"


def test_proactive_level_2_calls_the_quietest_other_than_the_last_speaker() -> None:
    ctrl = controller(intervention_level=2, max_idle_rounds=3)
    s = state(ctrl, idle_rounds=1, speak_counts={"a": 0, "b": 1, "c": 2}, last_speaker_id="a")
    decision = ctrl.decide_next_action(s, [], [])
    assert (decision.action, decision.target_agent_id, decision.reason) == (
        A.CALL_AGENT,
        "b",
        PROACTIVE_CALL,
    )
    alone = state(ctrl, ["a"], idle_rounds=1, last_speaker_id="a")
    assert ctrl.decide_next_action(alone, [], []).action == A.WAIT


def test_proactive_level_3_asks_a_guiding_question() -> None:
    ctrl = controller(intervention_level=3, max_idle_rounds=3)
    decision = ctrl.decide_next_action(state(ctrl, idle_rounds=1), [], [])
    assert decision.action == A.PROMPT_QUESTION
    assert decision.metadata["intent"] == "proactive_guide"


def test_nothing_asked_and_nothing_idle_waits() -> None:
    ctrl = controller(intervention_level=3)
    assert ctrl.decide_next_action(state(ctrl), [], []).action == A.WAIT


# --- every intervention level with every speaking order ------------------------------------

# a: 4 speeches of 5 (overheated), last speaker; round robin expects b.
_BUSY = {"speak_counts": {"a": 4, "b": 1, "c": 0}, "last_speaker_id": "a", "round_robin_index": 1}
SITUATIONS: dict[str, tuple[dict[str, Any], list[Intent]]] = {
    "hot-holds-top": (_BUSY, [want("a", urgency=5), want("c", urgency=2)]),
    "hot-below": (_BUSY, [want("a", urgency=1), want("c", urgency=4)]),
    "cold": ({**_BUSY, "idle_rounds": 4}, []),
    "idle": ({**_BUSY, "idle_rounds": 1}, []),
}
# (situation, level) -> {order: (action, target)}; a single entry applies to every order.
EXPECTED: dict[tuple[str, int], dict[str, tuple[A, str | None]]] = {
    ("hot-holds-top", 0): {
        "free": (A.ALLOW_SPEECH, "a"),
        "round_robin": (A.CALL_AGENT, "b"),
        "moderated": (A.ALLOW_SPEECH, "c"),
    },
    **{("hot-holds-top", lv): {"*": (A.WARN_AGENT, "a")} for lv in (1, 2, 3)},
    **{
        ("hot-below", lv): {
            "free": (A.ALLOW_SPEECH, "c"),
            "round_robin": (A.CALL_AGENT, "b"),
            "moderated": (A.ALLOW_SPEECH, "c"),
        }
        for lv in (0, 1, 2, 3)
    },
    ("cold", 0): {"*": (A.WAIT, None)},
    ("cold", 1): {"*": (A.CALL_AGENT, "c")},
    ("cold", 2): {"*": (A.CALL_AGENT, "c")},
    ("cold", 3): {"*": (A.PROMPT_QUESTION, "c")},
    ("idle", 0): {"*": (A.WAIT, None)},
    ("idle", 1): {"*": (A.WAIT, None)},
    ("idle", 2): {"*": (A.CALL_AGENT, "c")},
    ("idle", 3): {"*": (A.PROMPT_QUESTION, None)},
}


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("level", [0, 1, 2, 3])
@pytest.mark.parametrize("situation", SITUATIONS)
def test_every_level_with_every_speaking_order(situation: str, level: int, order: str) -> None:
    ctrl = controller(
        phase("main", speaking_order=order, max_rounds=50),
        intervention_level=level,
        max_idle_rounds=2,
    )
    update, intents = SITUATIONS[situation]
    decision = ctrl.decide_next_action(state(ctrl, **update), intents, [])
    table = EXPECTED[(situation, level)]
    assert (decision.action, decision.target_agent_id) == table.get(order, table.get("*"))


# --- b: a total order of intents ----------------------------------------------------------


def test_b_pass_intents_are_dropped() -> None:
    ctrl = controller(intervention_level=0)
    decision = ctrl.decide_next_action(
        state(ctrl), [want("a", "pass", 5), want("b", urgency=1)], []
    )
    assert decision.target_agent_id == "b"


def test_b_interrupts_go_first_when_the_phase_allows_them() -> None:
    ctrl = controller(phase("main", allow_interrupt=True))
    decision = ctrl.decide_next_action(
        state(ctrl), [want("a", urgency=5), want("c", "interrupt", 3)], []
    )
    assert (decision.target_agent_id, decision.metadata["is_interrupt"]) == ("c", True)


@pytest.mark.parametrize("reverse", [False, True], ids=["C8", "C9"])
def test_b_a_forbidden_interrupt_ranks_by_urgency_whatever_the_input_order(reverse: bool) -> None:
    ctrl = controller(phase("main", allow_interrupt=False))
    intents = [want("b", "interrupt", 5), want("a", "speak", 1)]
    decision = ctrl.decide_next_action(state(ctrl), intents[::-1] if reverse else intents, [])
    assert (decision.action, decision.target_agent_id, decision.reason) == (
        A.REJECT_SPEECH,
        "b",
        NO_INTERRUPTS,
    )


def test_b_equal_urgency_goes_by_registration_order() -> None:
    ctrl = controller()
    s = state(ctrl, ["c", "b", "a"])
    intents = [want("a", urgency=4), want("b", urgency=4), want("c", urgency=2)]
    assert ctrl.decide_next_action(s, intents, []).target_agent_id == "b"


def test_b_intents_may_be_mappings_and_must_come_from_participants() -> None:
    ctrl = controller()
    decision = ctrl.decide_next_action(
        state(ctrl), [{"agent_id": "b", "type": "question", "urgency": 2}], []
    )
    assert decision.target_agent_id == "b"
    with pytest.raises(ValueError, match="not a participant"):
        ctrl.decide_next_action(state(ctrl), [want("zed")], [])


# --- free order (§2.2.5) --------------------------------------------------------------------


def test_free_seed_scenario_1_the_most_urgent_speaks() -> None:
    ctrl = controller()
    s = state(ctrl, phase_round=2, last_speaker_id="a", consecutive_speaks=1)
    decision = ctrl.decide_next_action(s, [want("b", urgency=3), want("c", urgency=2)], [])
    assert (decision.action, decision.target_agent_id) == (A.ALLOW_SPEECH, "b")
    assert decision.metadata["is_interrupt"] is False


def test_c_free_seed_scenario_3_an_interrupt_is_flagged() -> None:
    ctrl = controller(phase("main", allow_interrupt=True))
    s = state(ctrl, last_speaker_id="a", consecutive_speaks=2)
    decision = ctrl.decide_next_action(s, [want("a", urgency=3), want("b", "interrupt", 4)], [])
    assert (decision.action, decision.target_agent_id) == (A.ALLOW_SPEECH, "b")
    assert decision.metadata["is_interrupt"] is True


def test_free_the_last_speaker_is_held_back_after_two_in_a_row() -> None:
    ctrl = controller()
    s = state(ctrl, last_speaker_id="a", consecutive_speaks=2)
    both = ctrl.decide_next_action(s, [want("a", urgency=5), want("b", urgency=1)], [])
    assert both.target_agent_id == "b"
    alone = ctrl.decide_next_action(s, [want("a", urgency=5)], [])
    assert (alone.action, alone.target_agent_id, alone.reason) == (
        A.REJECT_SPEECH,
        "a",
        LET_OTHERS_FIRST,
    )
    once = state(ctrl, last_speaker_id="a", consecutive_speaks=1)
    assert ctrl.decide_next_action(once, [want("a")], []).action == A.ALLOW_SPEECH


def test_free_a_low_urgency_interrupt_is_rejected_without_falling_through() -> None:
    ctrl = controller(phase("main", allow_interrupt=True))
    decision = ctrl.decide_next_action(
        state(ctrl), [want("a", "interrupt", 2), want("b", urgency=5)], []
    )
    assert (decision.action, decision.target_agent_id, decision.reason) == (
        A.REJECT_SPEECH,
        "a",
        URGENCY_TOO_LOW,
    )


# --- round robin (§2.2.5) and g: faction order -----------------------------------------------


def _rr(**fields: Any) -> ModeratorController:
    return controller(phase("rr", speaking_order="round_robin", max_rounds=50, **fields))


def test_round_robin_the_expected_agent_speaks_whatever_the_urgency() -> None:
    ctrl = _rr()
    s = state(ctrl, round_robin_index=4)  # 4 % 3 -> b
    decision = ctrl.decide_next_action(s, [want("a", urgency=5), want("b", urgency=1)], [])
    assert (decision.action, decision.target_agent_id) == (A.ALLOW_SPEECH, "b")
    assert decision.metadata["is_interrupt"] is False


@pytest.mark.parametrize(
    ("allow", "urgency", "expected"),
    [
        (True, 4, ("c", A.ALLOW_SPEECH)),
        (True, 3, ("a", A.CALL_AGENT)),
        (False, 5, ("a", A.CALL_AGENT)),
    ],
)
def test_round_robin_only_an_urgent_allowed_interrupt_takes_the_turn(
    allow: bool, urgency: int, expected: tuple[str, A]
) -> None:
    ctrl = _rr(allow_interrupt=allow)
    decision = ctrl.decide_next_action(state(ctrl), [want("c", "interrupt", urgency)], [])
    assert (decision.target_agent_id, decision.action) == expected
    if decision.action == A.ALLOW_SPEECH:
        assert decision.metadata["is_interrupt"] is True
    else:
        assert decision.reason == YOUR_TURN


def test_round_robin_ignores_the_consecutive_limit() -> None:
    ctrl = _rr()
    s = state(ctrl, ["a"], last_speaker_id="a", consecutive_speaks=5)
    assert ctrl.decide_next_action(s, [want("a")], []).action == A.ALLOW_SPEECH


def _turns(ctrl: ModeratorController, s: ModeratorState, n: int) -> list[str | None]:
    turns = []
    for _ in range(n):
        decision = ctrl.decide_next_action(s, [want(a) for a in s.agent_ids], [])
        turns.append(decision.target_agent_id)
        assert decision.target_agent_id is not None
        s = ctrl.update_state_after_speech(s, decision.target_agent_id)
    return turns


def test_round_robin_goes_in_registration_order_and_wraps() -> None:
    ctrl = _rr()
    assert _turns(ctrl, ctrl.create_initial_state(["a", "b", "c"]), 5) == ["a", "b", "c", "a", "b"]


def test_g_factions_take_turns_in_faction_order() -> None:
    ctrl = _rr(faction_order=["con", "pro"])
    factions = {"p1": "pro", "c1": "con", "p2": "pro", "c2": "con", "p3": "pro"}
    s = ctrl.create_initial_state(["p1", "c1", "p2", "c2", "p3", "x"], factions)
    assert _turns(ctrl, s, 7) == ["c1", "p1", "c2", "p2", "p3", "x", "c1"]


def test_g_without_factions_faction_order_falls_back_to_registration_order() -> None:
    ctrl = _rr(faction_order=["con", "pro"])
    assert _turns(ctrl, ctrl.create_initial_state(["a", "b"]), 2) == ["a", "b"]


def test_g_a_new_phase_starts_its_turns_at_the_first_faction() -> None:
    ctrl = controller(
        phase("rr1", speaking_order="round_robin", max_rounds=1),
        phase("rr2", speaking_order="round_robin", faction_order=["con", "pro"]),
    )
    s = ctrl.create_initial_state(["p", "c"], {"p": "pro", "c": "con"})
    s = ctrl.update_state_after_speech(s, "p")
    s = ctrl.update_state_after_phase_switch(s, "rr2")
    assert _turns(ctrl, s, 2) == ["c", "p"]


# --- moderated (§2.2.5) ---------------------------------------------------------------------


def _moderated(**fields: Any) -> ModeratorController:
    return controller(phase("m", speaking_order="moderated", max_rounds=50, **fields))


def test_moderated_the_quietest_speaks_and_asking_counts_half_a_speech() -> None:
    ctrl = _moderated()
    s = state(ctrl, speak_counts={"a": 1, "b": 1, "c": 0})
    called = ctrl.decide_next_action(s, [want("a", urgency=5)], [])
    assert (called.action, called.target_agent_id, called.reason) == (
        A.CALL_AGENT,
        "c",
        MODERATED_CALL,
    )
    even = state(ctrl, speak_counts={"a": 1, "b": 1, "c": 1})
    allowed = ctrl.decide_next_action(even, [want("b", urgency=1)], [])
    assert (allowed.action, allowed.target_agent_id) == (A.ALLOW_SPEECH, "b")


def test_moderated_ties_go_by_registration_order() -> None:
    ctrl = _moderated()
    s = state(ctrl, ["c", "b", "a"])
    decision = ctrl.decide_next_action(s, [want("a"), want("b")], [])
    assert decision.target_agent_id == "b"


def test_moderated_skips_a_speaker_with_two_in_a_row_and_may_find_nobody() -> None:
    ctrl = _moderated()
    s = state(ctrl, ["a", "b"], last_speaker_id="a", consecutive_speaks=2)
    assert ctrl.decide_next_action(s, [want("a")], []).target_agent_id == "b"
    alone = state(ctrl, ["a"], last_speaker_id="a", consecutive_speaks=2)
    assert ctrl.decide_next_action(alone, [want("a")], []).action == A.WAIT


# --- c: is_interrupt in every speaking order ------------------------------------------------


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize(
    ("allow", "intent", "flag"),
    [
        (True, want("a", "interrupt", 4), True),
        (True, want("a", "speak", 4), False),
        (False, want("a", "respond", 4), False),
    ],
)
def test_c_is_interrupt_marks_exactly_granted_interrupts(
    order: str, allow: bool, intent: Intent, flag: bool
) -> None:
    ctrl = controller(phase("main", speaking_order=order, allow_interrupt=allow))
    decision = ctrl.decide_next_action(state(ctrl), [intent], [])
    assert (decision.action, decision.target_agent_id) == (A.ALLOW_SPEECH, "a")
    assert decision.metadata["is_interrupt"] is flag


@pytest.mark.parametrize("order", ["round_robin", "moderated"])
def test_c_a_low_urgency_interrupt_on_ones_turn_is_an_ordinary_turn(order: str) -> None:
    ctrl = controller(phase("main", speaking_order=order, allow_interrupt=True))
    decision = ctrl.decide_next_action(state(ctrl), [want("a", "interrupt", 2)], [])
    assert (decision.action, decision.metadata["is_interrupt"]) == (A.ALLOW_SPEECH, False)


def test_constants_match_the_reference() -> None:
    from agenttalk.moderator import state as state_module

    assert state_module.MAX_CONSECUTIVE_SPEAKS == 2
    assert state_module.IMBALANCE_THRESHOLD == 0.6
    assert state_module.INTERRUPT_MIN_URGENCY == 3
    assert STEP_LIMIT == "step_limit"


# --- whole discussions and serialisation ----------------------------------------------------


def test_the_builtin_debate_runs_to_completion_and_closes_con_first() -> None:
    ctrl = ModeratorController("debate")
    factions = {"p1": "pro", "c1": "con", "p2": "pro", "c2": "con"}
    start = ctrl.create_initial_state(list(factions), factions)
    run = drive(ctrl, start, lambda s: [want(a, urgency=2) for a in s.agent_ids])
    assert run.steps[-1].decision.reason == "all_phases_completed"
    closing = [step.spoke for step in run.steps if step.state.current_phase_id == "closing"]
    assert [who for who in closing if who] == ["c1", "p1"]
    phases = [s.decision.next_phase_id for s in run.steps if s.decision.action == A.SWITCH_PHASE]
    assert phases == ["free_discussion", "focused_conflict", "closing"]


def test_state_and_decisions_round_trip_through_json() -> None:
    ctrl = controller(intervention_level=3)
    s = ctrl.update_state_after_speech(state(ctrl, idle_rounds=1), "b")
    decision = ctrl.decide_next_action(s, [want("a", "interrupt", 4)], [])
    assert ModeratorState.model_validate_json(s.model_dump_json()) == s
    assert type(decision).model_validate_json(decision.model_dump_json()) == decision
