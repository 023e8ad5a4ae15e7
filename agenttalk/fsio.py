"""Atomic, optionally durable file operations (write tmp, fsync, rename, fsync directory)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(path: Path, *, durable: bool) -> None:
    """`mkdir -p`; with `durable`, each folder made is fsynced into its parent.

    A file fsynced into a new folder is not durable until the folder's own entry is: a crash
    could otherwise take the folder, and the file with it.
    """
    created: list[Path] = []
    todo = [path]
    while todo:
        folder = todo[-1]
        try:
            os.mkdir(folder)
        except FileNotFoundError:
            todo.append(folder.parent)
            continue
        except FileExistsError:
            if not folder.is_dir():
                raise
        else:
            created.append(folder)
        todo.pop()
    if durable:
        for parent in dict.fromkeys(folder.parent for folder in created):
            fsync_dir(parent)


def atomic_write_bytes(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write `data` to `path` so readers see the old file or the whole new one, never a part.

    The temporary file is a dotfile in the same folder (same filesystem; scanners skip dotfiles).
    """
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    try:
        fd = os.open(tmp, flags, 0o644)
    except FileNotFoundError:  # create folders only when missing: mkdir is not free
        make_dirs(path.parent, durable=durable)
        fd = os.open(tmp, flags, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)


def dumps(obj: Any) -> bytes:
    return (json.dumps(obj, ensure_ascii=False, indent=2, default=str) + "\n").encode("utf-8")


def atomic_write_json(path: Path, obj: Any, *, durable: bool = True) -> None:
    atomic_write_bytes(path, dumps(obj), durable=durable)


def move(src: Path, dst: Path, *, durable: bool = True) -> Path:
    """Move `src` to `dst` (same filesystem); an existing `dst` gets a numbered sibling name.

    A hard link then an unlink, not a rename: a rename out of a watched folder is an unpaired
    IN_MOVED_FROM, which watchdog holds back for 0.5 s, stalling every event behind it. A crash
    between the two steps leaves both names; callers recognise the leftover by its content.
    """
    final = dst
    n = 1
    while final.exists() or final.is_symlink():
        final = dst.with_name(f"{dst.stem}.{n}{dst.suffix}")
        n += 1
    if not final.parent.is_dir():
        make_dirs(final.parent, durable=durable)
    try:
        os.link(src, final, follow_symlinks=False)
    except (FileNotFoundError, FileExistsError):
        raise
    except OSError:  # no hard links here (another filesystem type): rename instead
        os.rename(src, final)
    else:
        os.unlink(src)
    if durable:
        fsync_dir(final.parent)
        if final.parent != src.parent:
            fsync_dir(src.parent)
    return final


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def link_or_copy(src: Path, dst: Path, *, durable: bool = True) -> None:
    """Make `dst` show the same bytes as `src`: a hard link (one metadata write), else a copy."""
    try:
        try:
            os.link(src, dst)
        except FileNotFoundError:
            make_dirs(dst.parent, durable=durable)
            os.link(src, dst)
    except FileExistsError:
        if durable:  # made by an attempt that crashed, maybe before its folder was fsynced
            fsync_dir(dst.parent)
        return
    except OSError:  # another filesystem, or links not supported
        atomic_write_bytes(dst, src.read_bytes(), durable=durable)
        return
    if durable:
        fsync_dir(dst.parent)


_TEMPORARY = re.compile(r"\..+\.(\d+)\.[0-9a-f]{8}\.tmp")
"""The temporary files of `atomic_write_bytes`: `.<name>.<pid>.<8 hex digits>.tmp`."""


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_temporaries(agents_dir: Path) -> None:
    """Remove the temporary files of writers that were killed mid-write (run before any work).

    Only where writes happen outside a command's own audit folder: the agent's folder and its
    outbox (the event log) without subfolders; its inbox, bookkeeping and bad files with theirs
    (all shallow). The outbox's plan folders and the archive grow with every finished command
    and are not walked: a command's audit folder is swept when the command runs again, which a
    crash while writing there always leads to.

    A live pid other than ours may be writing now (`agenttalk send`); ours is a pid reused after
    a restart (as in a container), since this runs before this daemon writes anything.
    """
    try:
        with os.scandir(agents_dir) as it:
            agents = [e.path for e in it if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return
    for agent in agents:
        # The agent folder's listing says which subfolders exist: no failed look per agent.
        for sub in sweep_folder(agent, recursive=False):
            if sub in ("inbox", ".agenttalk"):
                sweep_folder(os.path.join(agent, sub))
            elif sub == "outbox":
                sweep_folder(os.path.join(agent, sub), recursive=False)
            elif sub == "archive":
                sweep_folder(os.path.join(agent, sub, "bad"))


def sweep_folder(folder: str | Path, *, recursive: bool = True) -> list[str]:
    """Remove the temporaries of dead writers in `folder` (and its subfolders if `recursive`).

    Call it only when no thread of this process writes there (see `sweep_temporaries`).
    Returns the names of the subfolders of `folder` itself.
    """
    me = os.getpid()
    top = os.fspath(folder)
    subfolders: list[str] = []
    stack = [top]
    while stack:
        parent = stack.pop()
        try:
            with os.scandir(parent) as it:
                entries = list(it)
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if parent == top:
                    subfolders.append(entry.name)
                if recursive:
                    stack.append(entry.path)
                continue
            match = _TEMPORARY.fullmatch(entry.name)
            if match is None:
                continue
            pid = int(match.group(1))
            if pid != me and pid_alive(pid):
                continue  # being written right now
            try:
                os.unlink(entry.path)
            except OSError:
                continue
            log.info("removed %s, left by a writer that was stopped mid-write", entry.path)
    return subfolders
