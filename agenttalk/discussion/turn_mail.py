"""Discussion turns as ordinary execution commands: the moderator posts them, normal routing
brings the answers back.

    agents/<participant>/inbox/cmd_<session>_s0007_intent.json    the turn (a Command)
    agents/<moderator>/inbox/<session>/s0007_intent_from_<participant>.json          its answer
    agents/<moderator>/inbox/<session>/s0007_intent_failed_from_<participant>.json   or its failure

Command ids are `s<step>_<turn>`, a function of the step alone: after a crash the moderator
replays the session and finds each answer already there, so no turn is asked twice.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agenttalk import fsio
from agenttalk.models import Command, DiscussionTurn, Message, OnComplete, OnFailure
from agenttalk.society import AgentDir, CommandKey, Society

POLL_SECONDS = 0.5
"""How long to wait between looks when nobody pokes (the daemon pokes on every delivery)."""

PROMPTS = {
    "intent": "Discussion turn: say whether you want to speak now, and how urgently.",
    "speech": "Discussion turn: the moderator has given you the floor; make your speech.",
    "vote": "Discussion turn: score the participants' consensus on this phase from 0 to 100.",
}


class SessionStopped(Exception):
    """The daemon is stopping; the session resumes from its files at the next start."""


@dataclass(frozen=True)
class TurnReply:
    agent_id: str
    ok: bool
    result: dict[str, Any]
    """The turn's result object (empty on failure)."""
    score: float | None = None
    error: str | None = None


class TurnMail:
    def __init__(
        self,
        society: Society,
        moderator: AgentDir,
        session_id: str,
        *,
        notify: Callable[[str], None],
        stop: threading.Event,
        durable: bool = True,
    ) -> None:
        self.society = society
        self.moderator = moderator
        self.session_id = session_id
        self.replies = moderator.plan_inbox(session_id)
        self.notify = notify
        self.stop = stop
        self.durable = durable
        self._wake = threading.Event()

    def poke(self) -> None:
        """Something arrived in the moderator's inbox: look now (thread-safe)."""
        self._wake.set()

    def ask(self, agent_ids: list[str], step: int, turn: DiscussionTurn) -> dict[str, TurnReply]:
        """Post the turn to every agent (at once: they answer in parallel) and wait for all."""
        command_id = f"s{step:04d}_{turn.turn}"
        for agent_id in agent_ids:
            self._post(agent_id, command_id, turn)
        return self._collect(agent_ids, command_id)

    def _post(self, agent_id: str, command_id: str, turn: DiscussionTurn) -> None:
        agent = self.society.agent(agent_id)
        if self._reply(agent, command_id) is not None:
            return  # answered (or ended without an answer) before a restart
        path = agent.inbox / f"cmd_{self.session_id}_{command_id}.json"
        if path.exists():
            return  # posted before a restart and still pending
        back = [self.moderator.agent_id]
        command = Command(
            command_id=command_id,
            plan_id=self.session_id,
            prompt=PROMPTS[turn.turn],
            score_required=turn.turn == "vote",
            discussion=turn,
            on_complete=OnComplete(send_to=back),
            on_failure=OnFailure(send_to=back),
        )
        fsio.atomic_write_json(path, command.model_dump(mode="json"), durable=self.durable)
        self.notify(agent_id)

    def _collect(self, agent_ids: list[str], command_id: str) -> dict[str, TurnReply]:
        replies: dict[str, TurnReply] = {}
        while True:
            self._wake.clear()  # before looking, so a poke during the look is not lost
            for agent_id in agent_ids:
                if agent_id not in replies:
                    reply = self._reply(self.society.agent(agent_id), command_id)
                    if reply is not None:
                        replies[agent_id] = reply
            if len(replies) == len(agent_ids):
                return replies
            if self.stop.is_set():
                raise SessionStopped(self.session_id)
            self._wake.wait(POLL_SECONDS)

    def _reply(self, agent: AgentDir, command_id: str) -> TurnReply | None:
        reply = self._read(agent.agent_id, command_id)
        if reply is None and agent.finished_status(CommandKey(self.session_id, command_id)):
            # The executor archives after delivering: look once more before concluding none came.
            reply = self._read(agent.agent_id, command_id)
            if reply is None:
                error = "the turn command finished but its answer never arrived (see its audit)"
                return TurnReply(agent.agent_id, False, {}, error=error)
        return reply

    def _read(self, sender: str, command_id: str) -> TurnReply | None:
        for name in (f"{command_id}_from_{sender}.json", f"{command_id}_failed_from_{sender}.json"):
            path = self.replies / name
            if path.exists():
                return _parse(path, sender)
        return None


def _parse(path: Path, sender: str) -> TurnReply:
    try:
        message = Message.model_validate_json(path.read_bytes())
    except (OSError, ValidationError) as exc:
        return TurnReply(sender, False, {}, error=f"{path.name}: unreadable answer: {exc}")
    if message.status != "done" or not isinstance(message.result, dict):
        return TurnReply(sender, False, {}, error=message.error or "no result")
    return TurnReply(sender, True, message.result, score=message.score)
