"""Cheaper scans keep their answers: quiet inboxes skipped, profiles loaded once at start."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from conftest import drop_command, make_daemon, make_society, profile_for, wait_until, write_json

from agenttalk.llm.fake import FakeProvider
from agenttalk.society import CommandKey


def test_a_command_dropped_into_a_quiet_inbox_is_found_by_the_rescan(tmp_path: Path) -> None:
    society = make_society(tmp_path, agents=["alice"])
    agent = society.agent("alice")
    agent.inbox.mkdir()
    old = time.time() - 60
    os.utime(agent.inbox, (old, old))  # long unchanged: the rescan may skip reading it
    daemon = make_daemon(society, FakeProvider())
    thread = threading.Thread(target=daemon.run, kwargs={"watch": False}, daemon=True)
    thread.start()
    try:
        wait_until(
            lambda: "alice" in daemon.slots and daemon.slots["alice"].inbox_mtime is not None,
            what="a first look at the quiet inbox",
        )
        drop_command(society, "alice", {"command_id": "c1", "plan_id": "p", "prompt": "Hi."})
        done = agent.finished_path("done", CommandKey("p", "c1"))
        wait_until(done.exists, timeout=10, what="the command, found without file events")
    finally:
        daemon.stop()
        thread.join(timeout=10)
    assert not thread.is_alive()


def test_a_profile_edited_after_prepare_is_read_again(tmp_path: Path) -> None:
    society = make_society(tmp_path, agents=["alice"])
    provider = FakeProvider()
    daemon = make_daemon(society, provider)
    daemon.prepare()  # loads alice's profile once, for the first scan to reuse
    edited = profile_for("alice", prompt="You are alice. You now answer in rhymes.")
    write_json(society.agent("alice").profile_path, edited)
    drop_command(society, "alice", {"command_id": "c1", "plan_id": "p", "prompt": "Hi."})
    daemon.run(until_idle=True, watch=False)
    assert len(provider.history) == 1
    assert "answer in rhymes" in provider.history[0].messages[0]["content"]
