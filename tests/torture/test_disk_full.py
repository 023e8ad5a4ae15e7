"""Disk full: the daemon runs on a 2 MB tmpfs that fills up. It refuses new work with a clear
error, keeps running, loses nothing it had accepted, and resumes once space is freed.

Two ways in: free space under `min_free_bytes` (the guard stops commands before they start),
and a write failing with ENOSPC in the middle of a command (the guard is off; the command stays
pending and resumes from its saved LLM outcome). Needs root to mount; skipped otherwise.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agenttalk import fsio
from agenttalk.diskspace import DiskGuard, is_disk_full

from .support import (
    Cmd,
    assert_ended_well,
    assert_no_half_written_files,
    daemon_process,
    make_root,
    tail,
)

PLAN = "disk"


@contextlib.contextmanager
def tmpfs(folder: Path, size: str = "2m") -> Iterator[Path]:
    folder.mkdir(parents=True)
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
            check=True,
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {exc}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False, timeout=60)


def fill(folder: Path, leave: int) -> Path:
    """Fill the filesystem of `folder` until a write fails, then free `leave` bytes."""
    reserve = folder / "reserve.bin"
    if leave:
        reserve.write_bytes(b"r" * leave)
    filler = folder / "filler.bin"
    with filler.open("wb", buffering=0) as f:
        chunk = b"f" * 65536
        while True:
            try:
                f.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                if len(chunk) == 1:
                    break
                chunk = chunk[: len(chunk) // 2]
    reserve.unlink(missing_ok=True)
    return filler


def audits(root: Path, commands: list[Cmd]) -> list[str]:
    return [
        c.command_id
        for c in commands
        if (root / "agents" / c.agent / "outbox" / PLAN / c.command_id / "audit.json").exists()
    ]


def wait_for(
    predicate: Callable[[], object],
    proc: subprocess.Popen[bytes],
    log: Path,
    what: str,
    timeout: float = 60,
) -> object:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert proc.poll() is None, f"the daemon died: {tail(log)}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {tail(log)}"
        time.sleep(0.05)
    return value


@pytest.mark.parametrize(
    ("min_free_bytes", "leave"),
    [(256 * 1024, 0), (0, 8192)],
    ids=["guard-before-start", "enospc-mid-command"],
)
def test_a_full_disk_holds_new_work_loses_nothing_and_resumes(
    tmp_path: Path, min_free_bytes: int, leave: int
) -> None:
    log = tmp_path / "daemon.log"  # outside the small disk
    with tmpfs(tmp_path / "disk") as disk:
        root = disk / "society"
        config = {
            "heartbeat_seconds": 1,
            "settle_seconds": 0.2,
            "durability": "safe",
            "min_free_bytes": min_free_bytes,
            "llm": {"default": "dry", "services": {"dry": {"provider": "fake", "model": "d"}}},
        }
        make_root(root, ["maker", "sink"], config)
        before = [Cmd("maker", f"early{i}", PLAN, ("sink",), f"early{i}.json") for i in range(3)]
        waiting = [
            Cmd("maker", f"wait{i}", PLAN, ("sink",), f"wait{i}.json", ("go.txt",))
            for i in range(3)
        ]
        later = [Cmd("maker", f"late{i}", PLAN, ("sink",), f"late{i}.json") for i in range(4)]
        staging = disk / "staging"  # same filesystem: renaming in needs no space
        for cmd in [*later]:
            fsio.atomic_write_json(staging / f"cmd_{cmd.command_id}.json", cmd.as_json())
        (staging / "go.txt").write_text("go")
        inbox = root / "agents" / "maker" / "inbox"
        for cmd in [*before, *waiting]:
            fsio.atomic_write_json(inbox / f"cmd_{cmd.command_id}.json", cmd.as_json())

        with daemon_process(root, log) as proc:
            wait_for(lambda: len(audits(root, before)) == 3, proc, log, "the first commands")
            filler = fill(disk, leave)
            for path in staging.iterdir():
                os.rename(path, inbox / path.name)

            wait_for(lambda: "disk full" in log.read_text(), proc, log, "the disk-full error")
            # While the disk stays full, nothing new finishes and the daemon stays up.
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                assert proc.poll() is None, tail(log)
                assert audits(root, [*waiting, *later]) == [], "work finished on a full disk"
                time.sleep(0.1)
            assert_no_half_written_files(root)
            left = sorted(p.name for p in inbox.glob("cmd_*.json"))
            assert left == sorted(f"cmd_{c.command_id}.json" for c in [*waiting, *later])

            filler.unlink()
            everything = [*before, *waiting, *later]
            wait_for(lambda: len(audits(root, everything)) == 10, proc, log, "the resumed work")
            wait_for(lambda: "disk space is back" in log.read_text(), proc, log, "the resume")
            assert not (root / "alerts" / "disk_full.json").exists()
            proc.terminate()
            assert proc.wait(timeout=60) == 0, tail(log)

        text = log.read_text()
        assert "new commands wait and nothing accepted is lost" in text
        assert "Traceback" not in text, tail(log)
        assert_ended_well(root, everything)


def test_the_guard_holds_work_with_one_alert_and_lets_it_go_when_space_is_back(
    tmp_path: Path,
) -> None:
    """The same rules without a mount (runs everywhere): below min_free_bytes nothing starts
    and the alert says why; once the space is there again the alert goes."""
    guard = DiskGuard(tmp_path, min_free_bytes=2**62, recheck=0.5)
    alert = tmp_path / "alerts" / "disk_full.json"
    now = time.time()
    assert guard.may_start(now) == now + 0.5
    assert "nothing accepted is lost" in alert.read_text()
    assert guard.may_start(now + 0.1) == now + 0.5, "looked again before the recheck time"
    guard.needed = 0  # as if space had been freed
    assert guard.may_start(now + 0.6) is None
    assert not alert.exists()
    full = OSError(errno.ENOSPC, "No space left on device")
    assert is_disk_full(full) and not is_disk_full(OSError(errno.EACCES, "denied"))
    guard.hit(full, now + 1)
    assert guard.may_start(now + 1.1) == pytest.approx(now + 1.5) and alert.exists()
