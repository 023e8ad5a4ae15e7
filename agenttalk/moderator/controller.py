"""The deterministic moderator: which action comes next, and the pure state updaters.

`decide_next_action` checks, first match wins (reference §2.2 with issue 4's changes a-i):

0. `steps >= max_steps`: END_DISCUSSION `step_limit`.
1. Phase end (`phase_round >= max_rounds`): FORCE_SUMMARY once if the phase asks for one; then
   CALL_VOTE once if it may roll back; then SWITCH_PHASE back (mean vote below the threshold,
   rollbacks left) or forward; after the last phase END_DISCUSSION `all_phases_completed`.
2. Overheat (levels 1-3): an overheated agent holding the top intent right after a speech
   (`idle_rounds == 0`) gets WARN_AGENT; otherwise its intents are set aside.
3. No intents left (after dropping `pass`): at levels 1-3 a cold discussion (`idle_rounds >=
   cold_threshold`) gets the cold handler; at levels 2-3 any idle step gets a proactive nudge;
   otherwise WAIT.
4. Otherwise the intents go by the phase's speaking order.

The caller applies every decision with one updater: ALLOW_SPEECH (and a CALL_AGENT or
PROMPT_QUESTION whose target speaks) -> `update_state_after_speech`; FORCE_SUMMARY ->
`update_state_after_summary`; CALL_VOTE -> `update_state_after_vote`; SWITCH_PHASE ->
`update_state_after_phase_switch`; anything else -> `update_state_after_idle`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agenttalk.moderator.handlers import (
    ALL_PHASES_COMPLETED,
    CONSENSUS_VOTE,
    MAX_ROUNDS,
    NOTHING_TO_DO,
    OVERHEATED,
    PHASE_END,
    ROLLBACK,
    STEP_LIMIT,
    cold,
    decide,
    free,
    moderated,
    proactive,
    round_robin,
)
from agenttalk.moderator.loader import ScenarioSource, load_scenario
from agenttalk.moderator.rules import (
    overheated_agent,
    rank_intents,
)
from agenttalk.moderator.scenario import ModeratorPolicy, Phase, Scenario
from agenttalk.moderator.state import (
    Intent,
    ModeratorAction,
    ModeratorDecision,
    ModeratorState,
)
from agenttalk.moderator.votes import mean_vote

A = ModeratorAction


class ModeratorController:
    """Decides a discussion's next action from its state, pending intents and recent events."""

    def __init__(self, scenario: ScenarioSource) -> None:
        self.scenario: Scenario = load_scenario(scenario)

    @property
    def policy(self) -> ModeratorPolicy:
        """The scenario's moderator policy."""
        return self.scenario.moderator_policy

    def create_initial_state(
        self, agent_ids: Sequence[str], factions: Mapping[str, str] | None = None
    ) -> ModeratorState:
        """The state before the first step: first phase, all counters 0.

        `factions` maps agent ids to the scenario's faction ids; agents left out have none.
        """
        ids = tuple(agent_ids)
        if not ids:
            raise ValueError("a discussion needs at least one participant")
        if len(set(ids)) != len(ids):
            raise ValueError(f"participants must be unique, got {list(ids)}")
        known = {f.id for f in self.scenario.alignment.factions}
        for agent, faction in (factions or {}).items():
            if agent not in ids:
                raise ValueError(f"factions: {agent!r} is not a participant")
            if faction not in known:
                raise ValueError(f"factions: {faction!r} is not a faction of the scenario")
        first = self.scenario.flow.phases[0]
        return ModeratorState(
            current_phase_id=first.id,
            current_phase_type=first.type,
            intervention_level=self.policy.intervention_level,
            allow_interrupt=first.allow_interrupt,
            speaking_order=first.speaking_order,
            cold_threshold=self.policy.max_idle_rounds,
            speak_counts=dict.fromkeys(ids, 0),
            agent_ids=ids,
            factions=dict(factions or {}),
        )

    def decide_next_action(
        self,
        state: ModeratorState,
        intents: Iterable[Intent | Mapping[str, Any]],
        recent_events: Iterable[Any] = (),
    ) -> ModeratorDecision:
        """The next action; never depends on the order of `intents` (see the module doc)."""
        if state.steps >= self.policy.max_steps:
            return decide(A.END_DISCUSSION, reason=STEP_LIMIT, rule=STEP_LIMIT, steps=state.steps)
        ranked = rank_intents(intents, state)
        phase = self.scenario.phase(state.current_phase_id)
        if phase is not None and state.phase_round >= phase.max_rounds:
            return self._phase_end(state, phase, recent_events)
        level = state.intervention_level
        hot = overheated_agent(state) if level >= 1 else None
        if hot is not None and ranked:
            # Warn once per spell: right after a speech. If the warned agent keeps the top
            # intent, it is set aside like any other time, so the others are not blocked.
            if ranked[0].agent_id == hot and state.idle_rounds == 0:
                return decide(A.WARN_AGENT, hot, reason=OVERHEATED, rule="overheat")
            ranked = [i for i in ranked if i.agent_id != hot]
        if not ranked:
            if level >= 1 and state.idle_rounds >= state.cold_threshold:
                return cold(state)
            if level >= 2 and state.idle_rounds >= 1:
                return proactive(state)
            return decide(A.WAIT, reason=NOTHING_TO_DO, rule="idle")
        if state.speaking_order == "round_robin":
            return round_robin(state, phase, ranked)
        if state.speaking_order == "moderated":
            return moderated(state, ranked)
        return free(state, ranked)

    def _phase_end(
        self, state: ModeratorState, phase: Phase, recent_events: Iterable[Any]
    ) -> ModeratorDecision:
        if phase.force_summary and not state.phase_summary_done:
            return decide(
                A.FORCE_SUMMARY,
                reason=PHASE_END,
                rule=PHASE_END,
                phase_id=phase.id,
                llm_request_type="summary",
            )
        switch: dict[str, Any] = {"rule": PHASE_END, "from_phase_id": phase.id}
        if phase.rollback_to is not None and phase.consensus_threshold is not None:
            threshold = phase.consensus_threshold
            if not state.phase_vote_done:
                return decide(
                    A.CALL_VOTE,
                    reason=CONSENSUS_VOTE,
                    phase_id=phase.id,
                    consensus_threshold=threshold,
                    **switch,
                )
            mean = mean_vote(recent_events, phase.id)
            switch |= {"mean_score": mean, "consensus_threshold": threshold}
            if (
                mean is not None
                and mean < threshold
                and state.rollbacks < self.policy.max_rollbacks
            ):
                return decide(
                    A.SWITCH_PHASE,
                    next_phase_id=phase.rollback_to,
                    reason=ROLLBACK,
                    rollback=True,
                    **switch,
                )
        phases = self.scenario.flow.phases
        index = phases.index(phase)
        if index + 1 < len(phases):
            return decide(
                A.SWITCH_PHASE,
                next_phase_id=phases[index + 1].id,
                reason=MAX_ROUNDS,
                rollback=False,
                **switch,
            )
        return decide(A.END_DISCUSSION, reason=ALL_PHASES_COMPLETED, **switch)

    # --- state updaters: each returns a new state and counts one step ---------------------

    def update_state_after_speech(self, state: ModeratorState, agent_id: str) -> ModeratorState:
        """`agent_id` spoke: one round of the phase."""
        if agent_id not in state.agent_ids:
            raise ValueError(f"{agent_id!r} is not a participant")
        counts = dict(state.speak_counts)
        counts[agent_id] = counts.get(agent_id, 0) + 1
        same = agent_id == state.last_speaker_id
        return state.model_copy(
            update={
                "speak_counts": counts,
                "consecutive_speaks": state.consecutive_speaks + 1 if same else 1,
                "last_speaker_id": agent_id,
                "idle_rounds": 0,
                "round_robin_index": state.round_robin_index
                + (1 if state.speaking_order == "round_robin" else 0),
                "total_rounds": state.total_rounds + 1,
                "phase_round": state.phase_round + 1,
                "steps": state.steps + 1,
            }
        )

    def update_state_after_idle(self, state: ModeratorState) -> ModeratorState:
        """A step without a speech (WAIT, REJECT, WARN, or a call whose target passed)."""
        return state.model_copy(
            update={"idle_rounds": state.idle_rounds + 1, "steps": state.steps + 1}
        )

    def update_state_after_summary(self, state: ModeratorState) -> ModeratorState:
        """The phase summary has been made."""
        return state.model_copy(update={"phase_summary_done": True, "steps": state.steps + 1})

    def update_state_after_vote(self, state: ModeratorState) -> ModeratorState:
        """The phase's consensus vote has been taken (the VOTE events are in the log)."""
        return state.model_copy(update={"phase_vote_done": True, "steps": state.steps + 1})

    def update_state_after_phase_switch(
        self, state: ModeratorState, phase_id: str
    ) -> ModeratorState:
        """Enter `phase_id`; going to an earlier phase counts as a rollback."""
        phase = self.scenario.phase(phase_id)
        if phase is None:
            raise ValueError(f"{phase_id!r} is not a phase of scenario {self.scenario.id!r}")
        new_index = self.scenario.phase_index(phase_id)
        old_index = self.scenario.phase_index(state.current_phase_id)
        rollback = new_index is not None and old_index is not None and new_index < old_index
        return state.model_copy(
            update={
                "current_phase_id": phase.id,
                "current_phase_type": phase.type,
                "allow_interrupt": phase.allow_interrupt,
                "speaking_order": phase.speaking_order,
                "phase_round": 0,
                "idle_rounds": 0,
                "round_robin_index": 0,
                "phase_summary_done": False,
                "phase_vote_done": False,
                "rollbacks": state.rollbacks + (1 if rollback else 0),
                "steps": state.steps + 1,
            }
        )
