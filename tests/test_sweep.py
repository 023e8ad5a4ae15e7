"""Temporaries of killed writers are removed where writes happen, without walking the archive."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import make_daemon, make_society, read_json, write_json

from agenttalk import fsio
from agenttalk.llm.fake import FakeProvider
from agenttalk.society import CommandKey


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def temporary(folder: Path, name: str, pid: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f".{name}.{pid}.0a1b2c3d.tmp"
    path.write_text("half written")
    return path


def test_stale_temporaries_go_from_inboxes_bookkeeping_and_bad_files(tmp_path: Path) -> None:
    society = make_society(tmp_path, agents=["alice"])
    agent = society.agent("alice")
    dead = dead_pid()
    stale = [
        temporary(agent.path, "agent_profile.json", dead),
        temporary(agent.inbox, "cmd_1.json", dead),
        temporary(agent.plan_inbox("p1"), "draft.json", dead),
        temporary(agent.private / "results" / "p1", "c1.json", dead),
        temporary(agent.archive / "bad", "x.json.error.json", dead),
        temporary(agent.outbox, "session.seq", dead),
    ]
    live = temporary(agent.inbox, "notes.txt", os.getppid())  # a writer still at work
    keep = agent.inbox / "cmd_2.json"
    keep.write_text("{}")

    fsio.sweep_temporaries(society.agents_dir)

    assert [p for p in stale if p.exists()] == []
    assert live.exists(), "a live writer's temporary file was removed"
    assert keep.exists()


def test_a_commands_audit_folder_is_swept_when_the_command_runs_again(tmp_path: Path) -> None:
    society = make_society(tmp_path, agents=["alice"])
    agent = society.agent("alice")
    key = CommandKey("p1", "c1")
    # A crash while writing the audit: its temporary stays, the command is still in the inbox.
    left = temporary(agent.audit_dir(key), "audit.json", dead_pid())
    write_json(
        agent.inbox / "cmd_c1.json", {"command_id": "c1", "plan_id": "p1", "prompt": "Again."}
    )
    fsio.sweep_temporaries(society.agents_dir)
    assert left.exists(), "the start-up sweep walked a command's audit folder"

    make_daemon(society, FakeProvider()).run(until_idle=True, watch=False)

    assert read_json(agent.audit_dir(key) / "audit.json")["status"] == "done"
    assert not left.exists()
