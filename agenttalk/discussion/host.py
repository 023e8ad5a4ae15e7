"""The daemon's side of discussions: session files in a moderator's inbox, run one at a time.

A session runs in a thread of its own, not in one of the daemon's command workers: it spends its
life waiting for turn commands that those workers run. Stopping the daemon interrupts it; the
next start finds the file still in the inbox and resumes it (see `SessionRunner`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

from agenttalk import fsio
from agenttalk.discussion.runner import SessionRunner
from agenttalk.discussion.session import Session, is_session_file, read_session
from agenttalk.discussion.turn_mail import SessionStopped, TurnMail
from agenttalk.discussion.voice import Voice, VoiceLLM
from agenttalk.errors import ConfigError, InputFileError
from agenttalk.eventlog import EventLog
from agenttalk.intake import ignorable, quarantine
from agenttalk.llm.registry import Providers
from agenttalk.llm.reply import Outcome
from agenttalk.society import AgentDir, Society
from agenttalk.usage import Ledger

log = logging.getLogger(__name__)


@dataclass
class _Running:
    thread: threading.Thread
    mail: TurnMail


class SessionHost:
    def __init__(
        self,
        society: Society,
        eventlog: EventLog,
        providers: Providers,
        ledger: Ledger,
        notify: Callable[[str], None],
        *,
        durable: bool = True,
    ) -> None:
        self.society = society
        self.eventlog = eventlog
        self.providers = providers
        self.ledger = ledger
        self.notify = notify
        self.durable = durable
        self.settle = society.config.settle_seconds
        self._stop = threading.Event()
        self._running: dict[str, _Running] = {}
        """By moderator id. Only the daemon's main thread reads or changes it."""

    @property
    def busy(self) -> bool:
        return any(r.thread.is_alive() for r in self._running.values())

    def scan(self, moderator: AgentDir, now: float) -> float | None:
        """Wake the moderator's session, or start its next session file; returns when to look
        again for a file still being written."""
        running = self._running.get(moderator.agent_id)
        if running is not None:
            if running.thread.is_alive():
                running.mail.poke()  # a turn's answer may have arrived
                return None
            del self._running[moderator.agent_id]
        if self._stop.is_set():
            return None
        try:
            names = sorted(e.name for e in os.scandir(moderator.inbox) if e.is_file())
        except FileNotFoundError:
            return None
        for name in names:
            if ignorable(name) or not is_session_file(name):
                continue
            path = moderator.inbox / name
            try:
                session = read_session(self.society, moderator, path, settle=self.settle, now=now)
            except InputFileError as exc:
                quarantine(moderator, path, exc, durable=self.durable)
                continue
            except FileNotFoundError:
                continue
            if session is None:
                return now + self.settle
            self._start(moderator, session)
            return None
        return None

    def stop(self) -> None:
        """Interrupt the running sessions (they resume at the next start) and wait for them."""
        self._stop.set()
        for running in self._running.values():
            running.mail.poke()
            running.thread.join()

    def _start(self, moderator: AgentDir, session: Session) -> None:
        mail = TurnMail(
            self.society,
            moderator,
            session.spec.session_id,
            notify=self.notify,
            stop=self._stop,
            durable=self.durable,
        )
        thread = threading.Thread(
            target=self._run,
            args=(moderator, session, mail),
            name=f"session-{session.spec.session_id}",
        )
        self._running[moderator.agent_id] = _Running(thread, mail)
        thread.start()

    def _run(self, moderator: AgentDir, session: Session, mail: TurnMail) -> None:
        session_id = session.spec.session_id
        try:
            if session.progress != "done":
                if session.progress == "running":
                    log.info("%s: resuming session %s", moderator.agent_id, session_id)
                voice = Voice(
                    moderator.outbox / session_id / "voice.jsonl",
                    self._voice_llm(moderator, session_id),
                    durable=self.durable,
                )
                runner = SessionRunner(
                    moderator, session, self.eventlog, mail, voice, durable=self.durable
                )
                runner.run()
            done = moderator.archive / "done" / session.path.name
            fsio.move(session.path, done, durable=self.durable)
        except SessionStopped:
            log.info("session %s stopped; it resumes at the next start", session_id)
        except Exception as exc:
            log.exception("%s: session %s failed", moderator.agent_id, session.path.name)
            error = InputFileError(
                session.path.name, "(session)", f"the session failed: {exc}", "see the daemon log"
            )
            try:
                quarantine(moderator, session.path, error, durable=self.durable)
            except OSError:
                log.exception("cannot move %s aside", session.path)
        finally:
            self.notify(moderator.agent_id)

    def _voice_llm(self, moderator: AgentDir, session_id: str) -> VoiceLLM | None:
        """The moderator's own LLM, if its profile names a service (it only phrases lines)."""
        try:
            profile = self.society.load_profile(moderator.agent_id)
        except ConfigError as exc:
            log.warning("%s; the moderator speaks from templates", exc)
            return None
        name = profile.llm.service
        if name is None:
            return None
        service = self.society.config.llm.services[name]

        def count(outcome: Outcome) -> None:
            usage = outcome.usage
            cost = service.cost(usage.prompt_tokens, usage.completion_tokens)
            self.ledger.add(session_id, usage.total_tokens, cost)

        provider = self.providers.get(name)
        return VoiceLLM(provider, profile.llm.model or service.model, count)
