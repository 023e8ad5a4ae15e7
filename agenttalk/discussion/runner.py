"""Running one discussion session to its end, step by step.

Each step: every participant states an intent (unless the controller's first checks make
intents irrelevant), the moderator controller decides, the decision is applied, and one line
`{"step", "state", "intents", "decision"}` goes to `agents/moderator/outbox/<session>/
decisions.jsonl` (sorted keys, no timestamps: a replay with the same replies is byte-identical).
Every INTENT, SPEECH, SUMMARY, VOTE and SYSTEM event goes to the event log.

Simplification: the runner calls the discussion executor's functions directly, in the
daemon's worker thread, instead of sending execution commands through the participants' inboxes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from agenttalk import fsio
from agenttalk.config import Config
from agenttalk.discussion import language
from agenttalk.discussion.context import VisibleContext, build_visible_context
from agenttalk.discussion.memory import load_memory, save_memory
from agenttalk.discussion.session import Session
from agenttalk.discussion.turns import generate_intent, generate_speech, generate_vote
from agenttalk.errors import LLMError
from agenttalk.eventlog import EventLog, EventType
from agenttalk.llm import Provider
from agenttalk.models import AgentProfile
from agenttalk.moderator import (
    Intent,
    ModeratorAction,
    ModeratorController,
    ModeratorDecision,
    ModeratorState,
)
from agenttalk.society import AgentDir, Society

log = logging.getLogger(__name__)

A = ModeratorAction
MODERATOR = "moderator"
PROGRESS = "progress.json"
SPEAKING = {A.ALLOW_SPEECH, A.CALL_AGENT, A.PROMPT_QUESTION}


class SessionRunner:
    """Runs `session` to END_DISCUSSION; `provider_for(profile)` gives (provider, model)."""

    def __init__(
        self,
        society: Society,
        session: Session,
        eventlog: EventLog,
        provider_for: Callable[[AgentProfile], tuple[Provider, str]],
        *,
        durable: bool = True,
    ) -> None:
        self.society = society
        self.session = session
        self.spec = session.spec
        self.log = eventlog
        self.provider_for = provider_for
        self.durable = durable
        self.controller = ModeratorController(session.scenario)
        self.moderator = society.agent(MODERATOR)
        self.out = self.moderator.outbox / self.spec.session_id
        self.lines: list[language.Line] = []
        self.intents: dict[str, Intent] = {}

    @property
    def decisions_path(self) -> Any:
        return self.out / "decisions.jsonl"

    def run(self) -> ModeratorState:
        self.out.mkdir(parents=True, exist_ok=True)
        self.decisions_path.write_bytes(b"")
        ids = list(self.spec.participants)
        state = self.controller.create_initial_state(ids, self.session.factions)
        first = self.session.scenario.flow.phases[0]
        self._say(state, language.opening(self.spec.topic, ids, first))
        step = 0
        while True:
            step += 1
            intents = self._collect_intents(state) if self._intents_matter(state) else []
            recent = self.log.get_recent_events(self.spec.session_id, self._recent_limit())
            decision = self.controller.decide_next_action(state, intents, recent)
            self._record(step, state, intents, decision)
            self._progress(state, step, "running")
            if decision.action == A.END_DISCUSSION:
                speeches = sum(1 for line in self.lines if line.kind == "speech")
                self._say(state, language.closing(decision.reason, speeches))
                break
            state = self._apply(state, decision)
        text = language.transcript(self.spec.session_id, self.spec.topic, ids, self.lines)
        fsio.atomic_write_bytes(self.out / "transcript.md", text.encode(), durable=self.durable)
        self._progress(state, step, "done")
        return state

    # -- steps ---------------------------------------------------------------------------------

    def _intents_matter(self, state: ModeratorState) -> bool:
        """The controller's first checks (step limit, phase end) ignore intents: skip the calls."""
        phase = self.session.scenario.phase(state.current_phase_id)
        if state.steps >= self.controller.policy.max_steps:
            return False
        return phase is None or state.phase_round < phase.max_rounds

    def _recent_limit(self) -> int:
        """Enough recent events for the moderator to see every vote of the phase."""
        return min(100, max(20, 2 * len(self.spec.participants) + 5))

    def _collect_intents(self, state: ModeratorState) -> list[Intent]:
        intents = []
        for agent_id in self.spec.participants:
            profile = self.session.profiles[agent_id]
            provider, model = self.provider_for(profile)
            memory = load_memory(self._folder(agent_id).path, agent_id)
            turn = generate_intent(provider, profile, self._context(state), memory, model)
            memory.add(turn.note)
            save_memory(self._folder(agent_id).path, memory, durable=self.durable)
            intent = turn.intent
            content = {"intent": intent.type, "urgency": intent.urgency}
            self._event(state, EventType.INTENT, agent_id, content)
            intents.append(intent)
            self.intents[agent_id] = intent
        return intents

    def _apply(self, state: ModeratorState, decision: ModeratorDecision) -> ModeratorState:
        c = self.controller
        action, target = decision.action, decision.target_agent_id
        if action in SPEAKING and target is not None:
            if action != A.ALLOW_SPEECH:
                self._say(state, language.announce(decision))
            call = decision.reason if action != A.ALLOW_SPEECH else None
            if self._speak(state, target, call):
                return c.update_state_after_speech(state, target)
            return c.update_state_after_idle(state)
        if action == A.FORCE_SUMMARY:
            phase = self.session.scenario.phase(state.current_phase_id)
            assert phase is not None
            speeches = [
                line for line in self.lines if line.kind == "speech" and line.phase == phase.id
            ][-20:]
            text = language.summary(phase, speeches)
            self._event(state, EventType.SUMMARY, MODERATOR, text)
            self.lines.append(language.Line(phase.id, MODERATOR, "summary", text))
            return c.update_state_after_summary(state)
        if action == A.CALL_VOTE:
            self._say(state, language.announce(decision))
            self._vote(state)
            return c.update_state_after_vote(state)
        if action == A.SWITCH_PHASE and decision.next_phase_id is not None:
            self._say(state, language.announce(decision))
            return c.update_state_after_phase_switch(state, decision.next_phase_id)
        if action != A.WAIT:
            self._say(state, language.announce(decision))
        return c.update_state_after_idle(state)

    def _speak(self, state: ModeratorState, agent_id: str, call_reason: str | None) -> bool:
        profile = self.session.profiles[agent_id]
        provider, model = self.provider_for(profile)
        folder = self._folder(agent_id).path
        memory = load_memory(folder, agent_id)
        intent = self.intents.get(agent_id)
        try:
            turn = generate_speech(
                provider,
                profile,
                self._context(state, call_reason),
                memory,
                model,
                intended_topic=intent.topic if intent is not None else None,
            )
        except LLMError as exc:
            log.warning("%s: %s did not speak: %s", self.spec.session_id, agent_id, exc)
            return False
        memory.add(turn.note)
        save_memory(folder, memory, durable=self.durable)
        self._event(state, EventType.SPEECH, agent_id, turn.speech.content)
        self.lines.append(
            language.Line(state.current_phase_id, agent_id, "speech", turn.speech.content)
        )
        return True

    def _vote(self, state: ModeratorState) -> None:
        phase = state.current_phase_id
        for agent_id in self.spec.participants:
            profile = self.session.profiles[agent_id]
            provider, model = self.provider_for(profile)
            memory = load_memory(self._folder(agent_id).path, agent_id)
            turn = generate_vote(provider, profile, self._context(state), memory, model)
            if turn.score is None:
                continue  # no valid score: the vote is not counted
            content = {"score": turn.score, "reason": turn.reason}
            self._event(state, EventType.VOTE, agent_id, content, score=turn.score)
            self.lines.append(language.Line(phase, agent_id, "vote", f"{turn.score:g}"))

    # -- helpers -------------------------------------------------------------------------------

    def _folder(self, agent_id: str) -> AgentDir:
        return self.society.agent(agent_id)

    def _context(self, state: ModeratorState, call_reason: str | None = None) -> VisibleContext:
        phase = self.session.scenario.phase(state.current_phase_id)
        assert phase is not None
        return build_visible_context(
            self.log,
            self.spec.session_id,
            phase_name=phase.name,
            phase_type=phase.type,
            round=state.phase_round + 1,
            max_rounds=phase.max_rounds,
            topic=self.spec.topic,
            call_reason=call_reason,
            limit=self.spec.recent_events_limit,
        )

    def _event(
        self,
        state: ModeratorState,
        type: EventType,
        speaker: str,
        content: Any,
        **meta: Any,
    ) -> None:
        meta = {"phase": state.current_phase_id, "round": state.phase_round, **meta}
        self.log.append_event(self.spec.session_id, type, speaker, content, meta)

    def _say(self, state: ModeratorState, text: str) -> None:
        self._event(state, EventType.SYSTEM, MODERATOR, text)
        self.lines.append(language.Line(state.current_phase_id, MODERATOR, "moderator", text))

    def _progress(self, state: ModeratorState, step: int, status: str) -> None:
        """`progress.json`, read by `agenttalk status` (decisions.jsonl stays replayable)."""
        progress = {
            "session_id": self.spec.session_id,
            "state": status,
            "phase": state.current_phase_id,
            "step": step,
            "speeches": state.total_rounds,
        }
        fsio.atomic_write_json(self.out / PROGRESS, progress, durable=self.durable)

    def _record(
        self, step: int, state: ModeratorState, intents: list[Intent], decision: ModeratorDecision
    ) -> None:
        line = {
            "step": step,
            "state": state.model_dump(mode="json"),
            "intents": [i.model_dump(mode="json") for i in intents],
            "decision": decision.model_dump(mode="json"),
        }
        data = json.dumps(line, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        with self.decisions_path.open("ab") as f:
            f.write(data.encode() + b"\n")


def provider_lookup(
    config: Config, get: Callable[[str], Provider], service_for: Callable[[AgentProfile], str]
) -> Callable[[AgentProfile], tuple[Provider, str]]:
    """(provider, model) for a profile: its service through the shared Providers."""

    def lookup(profile: AgentProfile) -> tuple[Provider, str]:
        name = service_for(profile)
        service = config.llm.services[name]
        return get(name), profile.llm.model or service.model

    return lookup
