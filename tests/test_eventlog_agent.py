"""The event log as a file-backed agent: the daemon appends the event files dropped in its inbox."""

from __future__ import annotations

import threading
from pathlib import Path

from conftest import drop_command, make_daemon, make_society, write_json

from agenttalk.eventlog import EventLog
from agenttalk.llm.fake import FakeProvider


def test_the_daemon_appends_dropped_event_files_and_runs_nothing_for_the_log(
    tmp_path: Path,
) -> None:
    society = make_society(tmp_path, agents=["alice"])
    EventLog(tmp_path).ensure_agent()
    inbox = society.agent("event_log").inbox
    write_json(
        inbox / "001.json",
        [
            {"session_id": "s1", "type": "INTENT", "speaker": "alice", "content": "may I?"},
            {"session_id": "s1", "type": "SPEECH", "speaker": "alice", "content": "Hello."},
        ],
    )
    write_json(
        inbox / "002.json", {"session_id": "s1", "type": "NOPE", "speaker": "x", "content": ""}
    )
    # a command file in the log's inbox is not a command: the log runs no LLM
    drop_command(society, "event_log", {"command_id": "c", "prompt": "x"})
    drop_command(society, "alice", {"command_id": "work", "prompt": "go"})
    fake = FakeProvider()
    make_daemon(society, fake).run(until_idle=True, watch=False)

    events = EventLog(tmp_path).get_recent_events("s1", 10)
    assert [(e.type, e.content, e.sequence) for e in events] == [
        ("INTENT", "may I?", 1),
        ("SPEECH", "Hello.", 2),
    ]
    assert not (inbox / "001.json").exists()
    bad = list((society.agent("event_log").archive / "bad").glob("*002.json.error.json"))
    assert len(bad) == 1
    assert len(fake.history) == 1  # only alice's command called the LLM


def test_a_file_event_in_the_log_inbox_does_not_keep_the_daemon_busy(tmp_path: Path) -> None:
    society = make_society(tmp_path, agents=["alice"])
    EventLog(tmp_path).ensure_agent()
    daemon = make_daemon(society, FakeProvider())
    # A file event marks the agent for a second look shortly after; the log's scan must clear
    # that mark, or the loop spins and `--until-idle` never returns.
    daemon.notify("event_log")
    thread = threading.Thread(target=daemon.run, kwargs={"until_idle": True, "watch": False})
    thread.start()
    thread.join(timeout=20)
    if thread.is_alive():
        daemon.stop()
        thread.join(timeout=10)
        raise AssertionError("the daemon never became idle")
    assert daemon.slots["event_log"].wake_at is None
