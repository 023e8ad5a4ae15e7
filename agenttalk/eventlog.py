"""The shared event log: one append-only JSON-lines file per discussion session.

ROOT/agents/event_log/agent_profile.json              kind: event_log
ROOT/agents/event_log/inbox/*.json                     event files to ingest (one event or a list)
ROOT/agents/event_log/outbox/<session>.jsonl           the live log, sequence ascending
ROOT/agents/event_log/outbox/<session>.archive.jsonl   pruned events (nothing is destroyed)
ROOT/agents/event_log/outbox/<session>.seq             highest sequence ever given, once pruned

One process writes (the daemon); others may read at any time. Every read takes a limit of 1-100
and costs the same whatever the log's size: it reads blocks from the end of the file, or
binary-searches the sequence. There is deliberately no read-everything call.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agenttalk import fsio, jsonlines
from agenttalk.errors import InputFileError
from agenttalk.events import (
    AgentVisibleEvent,
    Content,
    Event,
    EventDraft,
    EventMeta,
    EventType,
    PruneBeforeSequence,
    PruneByCount,
    PruneByType,
    PruneStrategy,
    check_limit,
    check_session,
    read_event_file,
)
from agenttalk.intake import check_inside, ignorable, quarantine
from agenttalk.models import AgentProfile
from agenttalk.society import AgentDir

__all__ = [
    "AgentVisibleEvent",
    "Event",
    "EventDraft",
    "EventLog",
    "EventMeta",
    "EventType",
    "PruneBeforeSequence",
    "PruneByCount",
    "PruneByType",
    "PruneStrategy",
]

log = logging.getLogger(__name__)

AGENT_ID = "event_log"
MAX_EVENTS = 500


def _parse(line: bytes) -> Event | None:
    try:
        return Event.model_validate_json(line)
    except ValidationError:
        log.warning("skipped an unreadable event log line: %.80r", line)
        return None


def _sequence_of(line: bytes) -> int | None:
    try:
        return int(json.loads(line)["sequence"])
    except (ValueError, KeyError, TypeError):
        return None


@dataclass
class _Session:
    lock: threading.Lock = field(default_factory=threading.Lock)
    ready: bool = False
    next_sequence: int = 1
    count: int = 0
    ids: set[str] | None = None
    """event_ids in log and archive, loaded the first time a dropped event carries one."""


class EventLog:
    """The event log agent's files under a society root; thread-safe, one lock per session."""

    def __init__(self, root: Path, durable: bool = True, *, max_events: int = MAX_EVENTS) -> None:
        self.root = root
        self.durable = durable
        self.max_events = max_events
        self.folder = root / "agents" / AGENT_ID
        self.outbox = self.folder / "outbox"
        self.inbox = self.folder / "inbox"
        self._sessions: dict[str, _Session] = {}
        self._sessions_lock = threading.Lock()
        self._agent_ready = False
        self._ingest_lock = threading.Lock()  # one ingest at a time: a file is read once

    # -- files ---------------------------------------------------------------------------------

    def log_path(self, session_id: str) -> Path:
        return self.outbox / f"{check_session(session_id)}.jsonl"

    def archive_path(self, session_id: str) -> Path:
        return self.outbox / f"{check_session(session_id)}.archive.jsonl"

    def _seq_path(self, session_id: str) -> Path:
        return self.outbox / f"{session_id}.seq"

    def sessions(self) -> list[str]:
        """Session ids that have a log, sorted."""
        if not self.outbox.is_dir():
            return []
        names = (p.name.removesuffix(".jsonl") for p in self.outbox.glob("*.jsonl"))
        return sorted(n for n in names if not n.startswith(".") and not n.endswith(".archive"))

    def ensure_agent(self) -> None:
        """Create `agents/event_log/` with its profile (kind event_log) if it is missing."""
        profile = self.folder / "agent_profile.json"
        if not profile.exists():
            data = {
                "agent_id": AGENT_ID,
                "name": "Event log",
                "kind": "event_log",
                "description": "Appends discussion events dropped into its inbox to "
                "outbox/<session>.jsonl; pruned events go to outbox/<session>.archive.jsonl.",
            }
            AgentProfile.model_validate(data)
            fsio.atomic_write_json(profile, data, durable=self.durable)
        for sub in (self.inbox, self.outbox):
            sub.mkdir(parents=True, exist_ok=True)
        self._agent_ready = True

    def _session(self, session_id: str) -> _Session:
        """The session's in-memory state (created on first use); `_open` loads it."""
        check_session(session_id)
        with self._sessions_lock:
            state = self._sessions.setdefault(session_id, _Session())
        return state

    def _open(self, session_id: str, state: _Session) -> None:
        if state.ready:
            return
        if not self._agent_ready:
            self.ensure_agent()
        path, archive = self.log_path(session_id), self.archive_path(session_id)
        jsonlines.recover(path, archive, durable=self.durable)
        for p in (path, archive):
            cut = jsonlines.repair_tail(p, durable=self.durable)
            if cut:
                log.warning("%s: cut a torn last line (%d bytes) left by a crash", p, cut)
        last = next((s for s in map(_sequence_of, jsonlines.iter_reverse(path)) if s), 0)
        state.next_sequence = max(last, self._high_water(session_id)) + 1
        state.count = jsonlines.count(path)
        state.ready = True

    def _high_water(self, session_id: str) -> int:
        try:
            return int(fsio.read_json(self._seq_path(session_id))["high_water"])
        except FileNotFoundError:
            return 0

    # -- writing -------------------------------------------------------------------------------

    def append_event(
        self,
        session_id: str,
        type: EventType | str,
        speaker: str,
        content: Content,
        meta: EventMeta | dict[str, Any] | None = None,
    ) -> Event:
        """Append one event with the next sequence number; prune the session past `max_events`."""
        draft = EventDraft(
            session_id=session_id,
            type=EventType(type),
            speaker=speaker,
            content=content,
            meta=EventMeta.model_validate(meta or {}),
        )
        event = self.append_draft(draft)
        assert event is not None  # a draft without event_id is never a duplicate
        return event

    def append_draft(self, draft: EventDraft) -> Event | None:
        """Append a validated draft; None if its event_id is already in the session's files."""
        state = self._session(draft.session_id)
        with state.lock:
            self._open(draft.session_id, state)
            if draft.event_id is not None:
                if state.ids is None:
                    state.ids = self._load_ids(draft.session_id)
                if draft.event_id in state.ids:
                    return None
            event = Event(
                event_id=draft.event_id or str(uuid.uuid4()),
                type=draft.type,
                speaker=draft.speaker,
                content=draft.content,
                timestamp=draft.timestamp or fsio.now_iso(),
                session_id=draft.session_id,
                sequence=state.next_sequence,
                meta=draft.meta,
            )
            jsonlines.append(self.log_path(event.session_id), event.to_line(), durable=self.durable)
            state.next_sequence += 1
            state.count += 1
            if state.ids is not None:
                state.ids.add(event.event_id)
            if state.count > self.max_events:
                self._auto_prune(draft.session_id, state)
            return event

    def _load_ids(self, session_id: str) -> set[str]:
        ids: set[str] = set()
        for path in (self.log_path(session_id), self.archive_path(session_id)):
            for line in jsonlines.iter_forward(path):
                try:
                    ids.add(str(json.loads(line)["event_id"]))
                except (ValueError, KeyError, TypeError):
                    continue
        return ids

    def prune_events(self, session_id: str, strategy: PruneStrategy) -> int:
        """Move the events the strategy drops to the archive; returns how many moved."""
        state = self._session(session_id)
        with state.lock:
            self._open(session_id, state)
            if not self.log_path(session_id).exists():
                return 0
            if isinstance(strategy, PruneByCount):
                if strategy.keep >= state.count:
                    return 0
                first_kept = state.count - strategy.keep
                position = itertools.count()
                return self._split(session_id, state, lambda _: next(position) >= first_kept)
            if isinstance(strategy, PruneByType):
                return self._split(session_id, state, lambda e: strategy.keeps(e.type))
            return self._split(session_id, state, lambda e: e.sequence >= strategy.sequence)

    def _auto_prune(self, session_id: str, state: _Session) -> None:
        """Keep every SUMMARY and the most recent half of the other events."""
        summary = f'"type":"{EventType.SUMMARY}"'.encode()
        others = 0
        for line in jsonlines.iter_forward(self.log_path(session_id)):
            event = _parse(line) if summary in line else None
            if event is None or event.type != EventType.SUMMARY:
                others += 1
        if others < 2:
            return
        to_move = others - others // 2
        seen = 0

        def keep(event: Event) -> bool:
            nonlocal seen
            if event.type == EventType.SUMMARY:
                return True
            seen += 1
            return seen > to_move

        moved = self._split(session_id, state, keep)
        log.info("session %s: auto-pruned %d events to the archive", session_id, moved)

    def _split(self, session_id: str, state: _Session, keep: Callable[[Event], bool]) -> int:
        high_water = state.next_sequence - 1
        if high_water > self._high_water(session_id):
            fsio.atomic_write_json(
                self._seq_path(session_id), {"high_water": high_water}, durable=self.durable
            )

        def keep_line(line: bytes) -> bool:
            event = _parse(line)
            return event is None or keep(event)  # an unreadable line is never dropped

        moved = jsonlines.split(
            self.log_path(session_id),
            self.archive_path(session_id),
            keep_line,
            durable=self.durable,
        )
        state.count -= moved
        return moved

    # -- reading -------------------------------------------------------------------------------

    def _reverse(self, session_id: str, type: EventType | None = None) -> Iterator[Event]:
        needle = f'"type":"{type}"'.encode() if type is not None else None
        for line in jsonlines.iter_reverse(self.log_path(session_id)):
            if needle is not None and needle not in line:
                continue  # cheap filter; the parsed type decides
            event = _parse(line)
            if event is not None and (type is None or event.type == type):
                yield event

    def _last(self, session_id: str, limit: int, type: EventType | None = None) -> list[Event]:
        check_limit(limit)
        events: list[Event] = []
        for event in self._reverse(session_id, type):
            events.append(event)
            if len(events) == limit:
                break
        events.reverse()
        return events

    def get_recent_events(self, session_id: str, limit: int) -> list[Event]:
        """The last `limit` events, oldest first."""
        return self._last(session_id, limit)

    def get_events_by_type(self, session_id: str, type: EventType | str, limit: int) -> list[Event]:
        """The last `limit` events of one type, oldest first."""
        return self._last(session_id, limit, EventType(type))

    def get_events_after_sequence(
        self, session_id: str, after: int, limit: int, *, type: EventType | str | None = None
    ) -> list[Event]:
        """The first `limit` events with sequence above `after` (optionally of one type).

        Page through new events by passing the last sequence seen as `after`.
        """
        check_limit(limit)
        wanted = EventType(type) if type is not None else None
        events: list[Event] = []
        for line in jsonlines.iter_after(self.log_path(session_id), _sequence_of, after):
            event = _parse(line)
            if event is not None and (wanted is None or event.type == wanted):
                events.append(event)
                if len(events) == limit:
                    break
        return events

    def get_agent_visible_events(self, session_id: str, limit: int) -> list[AgentVisibleEvent]:
        """The last `limit` events as agents see them: type, speaker, content text, timestamp."""
        return [
            AgentVisibleEvent(
                type=e.type, speaker=e.speaker, content=e.content_text(), timestamp=e.timestamp
            )
            for e in self._last(session_id, limit)
        ]

    # -- event files ---------------------------------------------------------------------------

    def ingest(
        self,
        inbox: Path | None = None,
        *,
        settle_seconds: float = 1.0,
        max_file_bytes: int = 1_000_000,
    ) -> list[Event]:
        """Append the events of each `*.json` file at the top of the inbox, then remove the file.

        Files go in name order, events in file order. A bad file moves to `archive/bad/` with a
        `.error.json` naming the file, field and fix, and none of its events is appended; a file
        that does not parse yet and changed within `settle_seconds` waits for the next call. An
        event whose `event_id` is already logged is skipped, so re-ingesting a file left behind by
        a crash between appending and removing it adds nothing twice.
        """
        with self._ingest_lock:
            return self._ingest(
                inbox if inbox is not None else self.inbox, settle_seconds, max_file_bytes
            )

    def _ingest(self, inbox: Path, settle_seconds: float, max_file_bytes: int) -> list[Event]:
        agent = AgentDir(AGENT_ID, inbox.parent)
        try:
            with os.scandir(inbox) as it:
                names = sorted(
                    e.name
                    for e in it
                    if e.name.endswith(".json") and not ignorable(e.name) and not e.is_dir()
                )
        except FileNotFoundError:
            return []
        appended: list[Event] = []
        for name in names:
            path = inbox / name
            try:
                check_inside(agent, path)
                drafts = read_event_file(path, max_bytes=max_file_bytes, settle=settle_seconds)
            except InputFileError as exc:
                quarantine(agent, path, exc, durable=self.durable)
                continue
            except FileNotFoundError:
                continue
            if drafts is None:
                continue
            for draft in drafts:
                event = self.append_draft(draft)
                if event is not None:
                    appended.append(event)
            path.unlink(missing_ok=True)
            if self.durable:
                jsonlines.fsync_dir(inbox)
        return appended
