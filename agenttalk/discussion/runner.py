"""Running one discussion session to its end, step by step.

Each step: every participant states an intent (unless the controller's first checks make
intents irrelevant), the moderator controller decides, the decision is applied, and one line
`{"step", "state", "intents", "decision"}` goes to `agents/moderator/outbox/<session>/
decisions.jsonl` (sorted keys, no timestamps: a replay with the same replies is byte-identical).
Every INTENT, SPEECH, SUMMARY, VOTE and SYSTEM event goes to the event log.

Intents, speeches and votes are ordinary execution commands in the participants' inboxes, and
their answers come back by normal routing (`TurnMail`). Nothing here calls an LLM for a turn.

Resuming after a crash or a stop is a replay from step 1: turn commands and event ids are
functions of the step, so every answer is found already in the inbox and every event already
logged is skipped; decisions.jsonl is rewritten with the same bytes.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from agenttalk import fsio
from agenttalk.discussion import language
from agenttalk.discussion.session import Session
from agenttalk.discussion.turn_mail import TurnMail, TurnReply
from agenttalk.discussion.turns import normalise_intent
from agenttalk.discussion.voice import Voice
from agenttalk.eventlog import EventLog, EventType
from agenttalk.events import EventDraft, EventMeta
from agenttalk.models import DiscussionTurn, TurnKind
from agenttalk.moderator import (
    Intent,
    ModeratorAction,
    ModeratorController,
    ModeratorDecision,
    ModeratorState,
)
from agenttalk.society import AgentDir

log = logging.getLogger(__name__)

A = ModeratorAction
PROGRESS = "progress.json"
SPEAKING = {A.ALLOW_SPEECH, A.CALL_AGENT, A.PROMPT_QUESTION}


class SessionRunner:
    """Runs `session` to END_DISCUSSION through the moderator agent's folder."""

    def __init__(
        self,
        moderator: AgentDir,
        session: Session,
        eventlog: EventLog,
        mail: TurnMail,
        voice: Voice,
        *,
        durable: bool = True,
    ) -> None:
        self.moderator = moderator
        self.session = session
        self.spec = session.spec
        self.log = eventlog
        self.mail = mail
        self.voice = voice
        self.durable = durable
        self.controller = ModeratorController(session.scenario)
        self.out = moderator.outbox / self.spec.session_id
        self.lines: list[language.Line] = []
        self.intents: dict[str, Intent] = {}
        self.appended = 0
        """Events this run has appended (or found already logged): the next event's id."""

    @property
    def decisions_path(self) -> Path:
        return self.out / "decisions.jsonl"

    def run(self) -> ModeratorState:
        self.out.mkdir(parents=True, exist_ok=True)
        self.decisions_path.write_bytes(b"")  # a resume rewrites it from step 1, same bytes
        ids = list(self.spec.participants)
        state = self.controller.create_initial_state(ids, self.session.factions)
        self._progress(state, 0, "running")
        first = self.session.scenario.flow.phases[0]
        self._say(state, 0, "opening", language.opening(self.spec.topic, ids, first))
        step = 0
        while True:
            step += 1
            intents = self._collect_intents(state, step) if self._intents_matter(state) else []
            recent = self.log.get_recent_events(self.spec.session_id, self._recent_limit())
            decision = self.controller.decide_next_action(state, intents, recent)
            self._record(step, state, intents, decision)
            self._progress(state, step, "running")
            if decision.action == A.END_DISCUSSION:
                speeches = sum(1 for line in self.lines if line.kind == "speech")
                self._say(state, step, "closing", language.closing(decision.reason, speeches))
                break
            state = self._apply(state, decision, step)
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

    def _collect_intents(self, state: ModeratorState, step: int) -> list[Intent]:
        ids = list(self.spec.participants)
        replies = self.mail.ask(ids, step, self._turn(state, "intent"))
        intents = []
        for agent_id in ids:
            intent = self._intent(replies[agent_id])
            content = {"intent": intent.type, "urgency": intent.urgency}
            self._event(state, EventType.INTENT, agent_id, content)
            intents.append(intent)
            self.intents[agent_id] = intent
        return intents

    @staticmethod
    def _intent(reply: TurnReply) -> Intent:
        """A failed turn, or an answer that is not an intent, counts as `pass`."""
        if not reply.ok:
            return Intent(agent_id=reply.agent_id, type="pass", urgency=1)
        return normalise_intent(reply.agent_id, reply.result)

    def _apply(
        self, state: ModeratorState, decision: ModeratorDecision, step: int
    ) -> ModeratorState:
        c = self.controller
        action, target = decision.action, decision.target_agent_id
        if action in SPEAKING and target is not None:
            if action != A.ALLOW_SPEECH:
                self._say(state, step, "question", language.announce(decision))
            call = decision.reason if action != A.ALLOW_SPEECH else None
            if self._speak(state, step, target, call):
                return c.update_state_after_speech(state, target)
            return c.update_state_after_idle(state)
        if action == A.FORCE_SUMMARY:
            phase = self.session.scenario.phase(state.current_phase_id)
            assert phase is not None
            speeches = [
                line for line in self.lines if line.kind == "speech" and line.phase == phase.id
            ][-20:]
            facts = "\n".join(f"{line.speaker}: {line.text}" for line in speeches)
            draft = language.summary(phase, speeches)
            text = self.voice.line(f"{step}.summary", "phase summary", draft, facts)
            self._event(state, EventType.SUMMARY, self.moderator.agent_id, text)
            self.lines.append(language.Line(phase.id, self.moderator.agent_id, "summary", text))
            return c.update_state_after_summary(state)
        if action == A.CALL_VOTE:
            self._say(state, step, "call for a vote", language.announce(decision))
            self._vote(state, step)
            return c.update_state_after_vote(state)
        if action == A.SWITCH_PHASE and decision.next_phase_id is not None:
            self._say(state, step, "announcement", language.announce(decision))
            return c.update_state_after_phase_switch(state, decision.next_phase_id)
        if action != A.WAIT:
            self._say(state, step, "announcement", language.announce(decision))
        return c.update_state_after_idle(state)

    def _speak(
        self, state: ModeratorState, step: int, agent_id: str, call_reason: str | None
    ) -> bool:
        intent = self.intents.get(agent_id)
        turn = self._turn(state, "speech", call_reason)
        if intent is not None and intent.topic:
            turn = turn.model_copy(update={"intended_topic": intent.topic})
        reply = self.mail.ask([agent_id], step, turn)[agent_id]
        content = str(reply.result.get("content") or "").strip() if reply.ok else ""
        if not content:
            log.warning("%s: %s did not speak: %s", self.spec.session_id, agent_id, reply.error)
            return False
        self._event(state, EventType.SPEECH, agent_id, content)
        self.lines.append(language.Line(state.current_phase_id, agent_id, "speech", content))
        return True

    def _vote(self, state: ModeratorState, step: int) -> None:
        ids = list(self.spec.participants)
        replies = self.mail.ask(ids, step, self._turn(state, "vote"))
        for agent_id in ids:
            reply = replies[agent_id]
            if not reply.ok or reply.score is None:
                continue  # no valid score: the vote is not counted
            score = reply.score
            content = {"score": score, "reason": str(reply.result.get("reason") or "")}
            self._event(state, EventType.VOTE, agent_id, content, score=score)
            line = language.Line(state.current_phase_id, agent_id, "vote", f"{score:g}")
            self.lines.append(line)

    # -- helpers -------------------------------------------------------------------------------

    def _turn(
        self, state: ModeratorState, kind: TurnKind, call_reason: str | None = None
    ) -> DiscussionTurn:
        phase = self.session.scenario.phase(state.current_phase_id)
        assert phase is not None
        return DiscussionTurn(
            session_id=self.spec.session_id,
            turn=kind,
            topic=self.spec.topic,
            phase_name=phase.name,
            phase_type=phase.type,
            round=state.phase_round + 1,
            max_rounds=phase.max_rounds,
            call_reason=call_reason,
            recent_events_limit=self.spec.recent_events_limit,
        )

    def _event(
        self,
        state: ModeratorState,
        type: EventType,
        speaker: str,
        content: Any,
        **meta: Any,
    ) -> None:
        """Append an event with an id from the run's count: a replayed event is skipped."""
        self.appended += 1
        draft = EventDraft(
            session_id=self.spec.session_id,
            type=type,
            speaker=speaker,
            content=content,
            meta=EventMeta.model_validate(
                {"phase": state.current_phase_id, "round": state.phase_round, **meta}
            ),
            event_id=f"{self.moderator.agent_id}-{self.appended:06d}",
        )
        self.log.append_draft(draft)

    def _say(self, state: ModeratorState, step: int, kind: str, draft: str) -> None:
        text = self.voice.line(f"{step}.{kind}", kind, draft)
        self._event(state, EventType.SYSTEM, self.moderator.agent_id, text)
        line = language.Line(state.current_phase_id, self.moderator.agent_id, "moderator", text)
        self.lines.append(line)

    def _progress(self, state: ModeratorState, step: int, status: str) -> None:
        """`progress.json`, read by `agenttalk status` and by a restart (resume or not)."""
        progress = {
            "session_id": self.spec.session_id,
            "state": status,
            "phase": state.current_phase_id,
            "step": step,
            "speeches": state.total_rounds,
            "session_sha256": self.session.sha256,
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
