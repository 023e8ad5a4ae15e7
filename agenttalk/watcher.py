"""File events as wake-up hints: which agents' inboxes changed. The rescan stays the truth."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer

log = logging.getLogger(__name__)

EVENTS = [
    FileCreatedEvent,
    DirCreatedEvent,
    FileMovedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileDeletedEvent,
    DirDeletedEvent,
]
"""What can make work runnable. Leaving out opens, reads and attribute changes keeps the kernel
queue short: every read of a profile or input would otherwise queue events too."""


class _Handler(FileSystemEventHandler):
    def __init__(self, agents_dir: str, notify: Callable[[str], None]) -> None:
        self.prefix = agents_dir.rstrip(os.sep) + os.sep
        self.notify = notify

    def dispatch(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return
        for raw in (event.src_path, getattr(event, "dest_path", "")):
            path = os.fsdecode(raw)
            if not path.startswith(self.prefix):
                continue
            parts = path[len(self.prefix) :].split(os.sep)
            # agents/<id> (a new agent) or anything under agents/<id>/inbox
            if len(parts) == 1 or parts[1] == "inbox" or parts[1] == "agent_profile.json":
                self.notify(parts[0])


class InboxWatcher:
    """One watch on agents/ (new agents) and one recursive watch per agent inbox."""

    def __init__(self, agents_dir: Path, notify: Callable[[str], None]) -> None:
        self.agents_dir = agents_dir
        self.handler = _Handler(str(agents_dir), notify)
        self.observer = Observer()
        self.watched: set[str] = set()

    def start(self) -> None:
        self.observer.schedule(
            self.handler, str(self.agents_dir), recursive=False, event_filter=EVENTS
        )
        self.observer.start()

    def watch_agent(self, agent_id: str) -> None:
        if agent_id in self.watched:
            return
        inbox = self.agents_dir / agent_id / "inbox"
        try:
            self.observer.schedule(self.handler, str(inbox), recursive=True, event_filter=EVENTS)
            self.observer.schedule(
                self.handler, str(inbox.parent), recursive=False, event_filter=EVENTS
            )
        except OSError as exc:  # e.g. out of inotify watches: the rescan still finds everything
            log.warning("cannot watch %s (%s); relying on the heartbeat rescan", inbox, exc)
        self.watched.add(agent_id)

    def stop(self) -> None:
        self.observer.stop()
        self.observer.join(timeout=5)
