"""File events as wake-up hints: which agents' inboxes changed. The rescan stays the truth.

On Linux one inotify instance and one thread watch, non-recursively, agents/, every agent's
folder (its profile, a new inbox), its inbox and the inbox's plan folders; watches for new
folders are added as they appear. That is 2-3 kernel watches per agent and no thread per watch
(watchdog starts a thread for every scheduled folder: 20,000 for 10,000 agents). Elsewhere one
recursive watchdog watch on agents/ stands in.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
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
from watchdog.observers.api import BaseObserver

from agenttalk import inotify
from agenttalk.society import PROFILE, USER_AGENT

log = logging.getLogger(__name__)

MASK = inotify.CREATE | inotify.MOVED_TO | inotify.MOVED_FROM | inotify.CLOSE_WRITE | inotify.DELETE
"""What can make work runnable. Leaving out opens, reads, modifications and attribute changes
keeps the kernel queue short: every read of a profile or input would otherwise queue events."""

EVENTS = [
    FileCreatedEvent,
    DirCreatedEvent,
    FileMovedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileDeletedEvent,
    DirDeletedEvent,
]
"""The same choice for the watchdog fallback."""


@dataclass(frozen=True)
class _Watch:
    kind: str
    """root (agents/), agent (agents/<id>), inbox or plan (inbox/<plan_id>)."""
    agent_id: str
    path: str


class InboxWatcher:
    """Calls `notify(agent_id)` when something that may start work changes for that agent."""

    def __init__(
        self, agents_dir: Path, notify: Callable[[str], None], *, use_inotify: bool = True
    ) -> None:
        self.agents_dir = str(agents_dir)
        self.notify = notify
        self.watched: set[str] = set()
        self._watches: dict[int, _Watch] = {}
        self._lock = threading.Lock()
        self._stopping = False
        self._warned = False
        self._inotify: inotify.Inotify | None = None
        if use_inotify and inotify.available():
            try:
                self._inotify = inotify.Inotify()
            except OSError as exc:  # e.g. fs.inotify.max_user_instances reached
                log.warning("cannot use inotify (%s); using watchdog instead", exc)
        self._thread: threading.Thread | None = None
        self._observer: BaseObserver | None = None

    def start(self) -> None:
        if self._inotify is None:
            self._observer = Observer()
            handler = _Handler(self.agents_dir, self.notify)
            try:
                self._observer.schedule(
                    handler, self.agents_dir, recursive=True, event_filter=EVENTS
                )
            except OSError as exc:
                log.warning("cannot watch %s (%s); relying on the rescan", self.agents_dir, exc)
                self._observer = None
                return
            self._observer.start()
            return
        self._add(_Watch("root", "", self.agents_dir))
        self._thread = threading.Thread(target=self._run, name="inbox-watcher", daemon=True)
        self._thread.start()

    def watch_agent(self, agent_id: str) -> None:
        """Watch the agent's folder, inbox and plan folders (before its first scan: no gap)."""
        with self._lock:
            if agent_id in self.watched or self._inotify is None:
                return
            self.watched.add(agent_id)
        self._watch_tree(agent_id)

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
        if self._thread is not None and self._inotify is not None:
            self._stopping = True
            self._inotify.wake()
            self._thread.join(timeout=5)
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None

    # -- inotify -------------------------------------------------------------------------------

    def _watch_tree(self, agent_id: str) -> None:
        folder = os.path.join(self.agents_dir, agent_id)
        if not self._add(_Watch("agent", agent_id, folder)):
            return
        inbox = os.path.join(folder, "inbox")
        if self._add(_Watch("inbox", agent_id, inbox)):
            self._watch_plans(agent_id, inbox)

    def _watch_plans(self, agent_id: str, inbox: str) -> None:
        try:
            with os.scandir(inbox) as it:
                plans = [e.path for e in it if e.is_dir(follow_symlinks=False)]
        except OSError:
            return
        for path in plans:
            self._add(_Watch("plan", agent_id, path))

    def _add(self, watch: _Watch) -> bool:
        assert self._inotify is not None
        try:
            wd = self._inotify.add_watch(watch.path, MASK)
        except (FileNotFoundError, NotADirectoryError):
            return False  # gone already, or not a folder: nothing to watch
        except OSError as exc:  # e.g. out of watches (fs.inotify.max_user_watches)
            if not self._warned:
                self._warned = True
                log.warning("cannot watch %s (%s); relying on the rescan", watch.path, exc)
            return False
        with self._lock:
            self._watches[wd] = watch
        return True

    def _run(self) -> None:
        assert self._inotify is not None
        while not self._stopping:
            try:
                for event in self._inotify.read():
                    self._handle(event)
            except Exception:  # a hint source must never die silently: the rescan is the truth
                log.exception("inbox watcher: cannot handle an event; continuing")

    def _handle(self, event: inotify.Event) -> None:
        if event.mask & inotify.Q_OVERFLOW:
            log.warning("inotify queue overflowed; looking at every agent now")
            with self._lock:
                agents = sorted(self.watched)
            for agent_id in agents:
                self.notify(agent_id)
            return
        with self._lock:
            watch = self._watches.get(event.wd)
            if event.mask & inotify.IGNORED:
                self._watches.pop(event.wd, None)
                if watch is not None and watch.kind == "agent":
                    self.watched.discard(watch.agent_id)
                return
        name = event.name
        if watch is None or not name or name.startswith("."):
            return  # dotfiles are temporaries the daemon never reads
        new_dir = bool(event.mask & inotify.ISDIR) and bool(
            event.mask & (inotify.CREATE | inotify.MOVED_TO)
        )
        # Watches for a new folder are added before the notify: whatever lands in it after the
        # watch makes an event, whatever landed before is found by the scan the notify causes.
        path = os.path.join(watch.path, name)
        if watch.kind == "root":
            if name == USER_AGENT:
                return  # the user runs no commands; deliveries to it need no look
            if new_dir:  # new, or back under the same name (an old watch follows the old folder)
                with self._lock:
                    self.watched.add(name)
                self._watch_tree(name)
            self.notify(name)
        elif watch.kind == "agent":
            if name == "inbox" and new_dir and self._add(_Watch("inbox", watch.agent_id, path)):
                self._watch_plans(watch.agent_id, path)
            if name in ("inbox", PROFILE):
                self.notify(watch.agent_id)
        else:
            if new_dir and watch.kind == "inbox":
                self._add(_Watch("plan", watch.agent_id, path))
            self.notify(watch.agent_id)


class _Handler(FileSystemEventHandler):
    """The watchdog fallback: a recursive watch on agents/, filtered to inboxes and profiles."""

    def __init__(self, agents_dir: str, notify: Callable[[str], None]) -> None:
        self.prefix = agents_dir.rstrip(os.sep) + os.sep
        self.notify = notify

    def dispatch(self, event: FileSystemEvent) -> None:
        for raw in (event.src_path, getattr(event, "dest_path", "")):
            path = os.fsdecode(raw)
            if not path.startswith(self.prefix):
                continue
            parts = path[len(self.prefix) :].split(os.sep)
            # agents/<id> (a new agent) or anything under agents/<id>/inbox
            if len(parts) == 1 or parts[1] == "inbox" or parts[1] == PROFILE:
                self.notify(parts[0])
