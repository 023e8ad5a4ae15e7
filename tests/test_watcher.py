"""The inbox watcher: one inotify instance for every agent, waking the daemon on what matters."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import make_society, profile_for, wait_until, write_json

from agenttalk import inotify
from agenttalk.watcher import InboxWatcher

needs_inotify = pytest.mark.skipif(not inotify.available(), reason="Linux inotify only")


class Notes:
    """The agent ids the watcher reported, in order."""

    def __init__(self) -> None:
        self.seen: queue.SimpleQueue[str] = queue.SimpleQueue()

    def __call__(self, agent_id: str) -> None:
        self.seen.put(agent_id)

    def clear(self) -> None:
        while not self.seen.empty():
            self.seen.get_nowait()

    def expect(self, agent_id: str, timeout: float = 5.0) -> None:
        """Wait for a notice about `agent_id` (others may come first)."""
        while True:
            try:
                got = self.seen.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no notice for {agent_id} within {timeout}s") from None
            if got == agent_id:
                return


@contextmanager
def watching(agents_dir: Path, notes: Notes, *, use_inotify: bool = True) -> Iterator[InboxWatcher]:
    before = set(threading.enumerate())
    watcher = InboxWatcher(agents_dir, notes, use_inotify=use_inotify)
    watcher.start()
    try:
        yield watcher
    finally:
        watcher.stop()
        wait_until(lambda: set(threading.enumerate()) <= before, what="watcher threads to end")


@needs_inotify
def test_a_command_in_a_watched_inbox_wakes_its_agent(tmp_path: Path) -> None:
    society = make_society(tmp_path, agents=["alice"])
    society.agent("alice").inbox.mkdir()
    notes = Notes()
    with watching(society.agents_dir, notes) as watcher:
        watcher.watch_agent("alice")
        write_json(society.agent("alice").inbox / "cmd_1.json", {"command_id": "1"})
        notes.expect("alice")


@needs_inotify
def test_a_new_agent_and_its_plan_folder_are_watched_as_they_appear(tmp_path: Path) -> None:
    society = make_society(tmp_path, agents=[])
    society.agents_dir.mkdir()
    notes = Notes()
    with watching(society.agents_dir, notes):
        agent = society.agent("newcomer")
        agent.path.mkdir()
        notes.expect("newcomer")
        write_json(agent.profile_path, profile_for("newcomer"))
        notes.expect("newcomer")
        agent.inbox.mkdir()
        notes.expect("newcomer")
        notes.clear()
        write_json(agent.inbox / "cmd_1.json", {"command_id": "1"})
        notes.expect("newcomer")
        plan = agent.plan_inbox("p1")
        plan.mkdir()
        notes.expect("newcomer")
        notes.clear()
        write_json(plan / "draft.json", {"text": "input for plan p1"})
        notes.expect("newcomer")


@needs_inotify
def test_plan_folders_that_existed_before_the_watch_are_watched(tmp_path: Path) -> None:
    society = make_society(tmp_path, agents=["alice"])
    plan = society.agent("alice").plan_inbox("p1")
    plan.mkdir(parents=True)
    notes = Notes()
    with watching(society.agents_dir, notes) as watcher:
        watcher.watch_agent("alice")
        notes.clear()
        (plan / "notes.txt").write_text("an input arrives")
        notes.expect("alice")


@needs_inotify
def test_a_recreated_agent_folder_is_watched_again(tmp_path: Path) -> None:
    society = make_society(tmp_path, agents=["alice"])
    agent = society.agent("alice")
    agent.inbox.mkdir()
    notes = Notes()
    with watching(society.agents_dir, notes) as watcher:
        watcher.watch_agent("alice")
        agent.path.rename(tmp_path / "alice-old")  # its watch goes with it
        agent.path.mkdir()
        notes.expect("alice")
        agent.inbox.mkdir()
        notes.expect("alice")
        notes.clear()
        write_json(agent.inbox / "cmd_1.json", {"command_id": "1"})
        notes.expect("alice")


def test_the_watchdog_fallback_wakes_for_a_command_in_a_plan_folder(tmp_path: Path) -> None:
    society = make_society(tmp_path, agents=["alice"])
    plan = society.agent("alice").plan_inbox("p1")
    plan.mkdir(parents=True)
    notes = Notes()
    with watching(society.agents_dir, notes, use_inotify=False) as watcher:
        watcher.watch_agent("alice")  # a no-op: the one recursive watch covers every agent
        (plan / "notes.txt").write_text("an input arrives")
        notes.expect("alice")
