"""Append-only JSON-lines files: one record per line, each line written with a single write().

Readers never see half a record: a last line without its newline is a write in progress (or a
crash mid-write) and is skipped; only the single writer truncates it (`repair_tail`). Reads go
from the end in fixed-size blocks, or binary-search a sorted key, so their cost does not grow
with the file. `split` moves lines to an archive file without losing or doubling one across a
crash: a journal records the archive's size before the move, and `recover` rolls back a move
that did not finish.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from agenttalk import fsio

BLOCK = 64 * 1024


def _open_append(path: Path) -> tuple[int, bool]:
    """An O_APPEND descriptor, and whether the file was just created (its folder needs fsync)."""
    try:
        return os.open(path, os.O_WRONLY | os.O_APPEND), False
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644), True


def append(path: Path, data: bytes, *, durable: bool) -> None:
    """Append whole lines (`data` ends with a newline) with one write()."""
    fd, created = _open_append(path)
    try:
        _write_all(fd, data)  # one write(); the loop inside only guards a short write
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    if durable and created:
        fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    fsio.fsync_dir(path)


def _complete_end(f: BinaryIO, size: int) -> int:
    """The offset just past the last newline: everything after it is a torn or unfinished line."""
    pos = size
    while pos > 0:
        n = min(BLOCK, pos)
        pos -= n
        f.seek(pos)
        i = f.read(n).rfind(b"\n")
        if i >= 0:
            return pos + i + 1
    return 0


def repair_tail(path: Path, *, durable: bool) -> int:
    """Truncate a torn last line (a crash mid-write); returns how many bytes were cut."""
    try:
        f = open(path, "r+b")  # noqa: SIM115 (closed below; truncation needs the descriptor)
    except FileNotFoundError:
        return 0
    with f:
        size = os.fstat(f.fileno()).st_size
        end = _complete_end(f, size)
        if end < size:
            f.truncate(end)
            if durable:
                os.fsync(f.fileno())
        return size - end


def iter_reverse(path: Path) -> Iterator[bytes]:
    """Complete lines from last to first, reading fixed-size blocks from the end."""
    try:
        f = open(path, "rb")  # noqa: SIM115 (a generator: closed by the with below)
    except FileNotFoundError:
        return
    with f:
        pos = _complete_end(f, os.fstat(f.fileno()).st_size)
        carry = b""
        while pos > 0:
            n = min(BLOCK, pos)
            pos -= n
            f.seek(pos)
            parts = (f.read(n) + carry).split(b"\n")
            carry = parts[0]
            for line in reversed(parts[1:]):
                if line:
                    yield line
        if carry:
            yield carry


def _lines_from(f: BinaryIO, start: int, end: int) -> Iterator[bytes]:
    f.seek(start)
    pos = start
    while pos < end:
        line = f.readline()
        if not line.endswith(b"\n"):
            return
        pos += len(line)
        if line.strip():
            yield line.rstrip(b"\n")


def iter_forward(path: Path) -> Iterator[bytes]:
    """Complete lines from first to last, one at a time."""
    try:
        f = open(path, "rb")  # noqa: SIM115
    except FileNotFoundError:
        return
    with f:
        yield from _lines_from(f, 0, _complete_end(f, os.fstat(f.fileno()).st_size))


def iter_after(path: Path, key: Callable[[bytes], int | None], after: int) -> Iterator[bytes]:
    """Lines whose `key` is above `after`, oldest first, in a file sorted by `key`.

    The first such line is found by binary search over byte offsets (O(log size) line reads);
    lines whose key is None (unreadable) are stepped over.
    """
    try:
        f = open(path, "rb")  # noqa: SIM115
    except FileNotFoundError:
        return
    with f:
        end = _complete_end(f, os.fstat(f.fileno()).st_size)

        def line_start(pos: int) -> int:
            if pos == 0:
                return 0
            f.seek(pos - 1)
            f.readline()
            return min(f.tell(), end)

        def is_past(pos: int) -> bool:  # monotone in pos because keys are sorted
            for line in _lines_from(f, line_start(pos), end):
                k = key(line)
                if k is not None:
                    return k > after
            return True

        lo, hi = 0, end
        while lo < hi:
            mid = (lo + hi) // 2
            if is_past(mid):
                hi = mid
            else:
                lo = mid + 1
        for line in _lines_from(f, line_start(lo), end):
            k = key(line)
            if k is not None and k > after:
                yield line


def count(path: Path) -> int:
    """The number of complete lines."""
    return sum(1 for _ in iter_forward(path))


def _journal(path: Path) -> Path:
    return path.with_name(f".{path.name}.split.json")


def _staging(path: Path) -> Path:
    return path.with_name(f".{path.name}.split.tmp")


def recover(path: Path, archive: Path, *, durable: bool) -> None:
    """Finish or undo a `split` that a crash interrupted, so every line is in exactly one file.

    Staging file present: the log was not replaced yet, so the lines copied to the archive are
    cut off again. Journal without staging file: the log was replaced; only the journal is left.
    """
    journal, staging = _journal(path), _staging(path)
    if journal.exists():
        if staging.exists():
            size = int(json.loads(journal.read_bytes())["archive_size"])
            if archive.exists() and archive.stat().st_size > size:
                os.truncate(archive, size)
            staging.unlink()
        journal.unlink()
    elif staging.exists():
        staging.unlink()
    else:
        return
    if durable:
        fsync_dir(path.parent)


def split(path: Path, archive: Path, keep: Callable[[bytes], bool], *, durable: bool) -> int:
    """Move every line `keep` rejects from `path` to the end of `archive`; returns how many.

    Order: staging file, journal (archive size), archive append, rename of the staging file
    over the log, journal removal. Call `recover` first if a previous split may have crashed.
    """
    staging = _staging(path)
    out = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    arch: int | None = None
    created = False
    try:
        size = archive.stat().st_size if archive.exists() else 0
        fsio.atomic_write_json(_journal(path), {"archive_size": size}, durable=durable)
        arch, created = _open_append(archive)
        kept: list[bytes] = []
        moved: list[bytes] = []
        n_moved = 0
        for line in iter_forward(path):
            (kept if keep(line) else moved).append(line + b"\n")
            if len(kept) + len(moved) >= 1024:  # bounded memory: write in batches
                n_moved += _flush(out, arch, kept, moved)
        n_moved += _flush(out, arch, kept, moved)
        if durable:
            os.fsync(out)
            os.fsync(arch)
    except BaseException:
        os.close(out)
        if arch is not None:
            os.close(arch)
        recover(path, archive, durable=durable)
        raise
    os.close(out)
    os.close(arch)
    if durable and created:
        fsync_dir(archive.parent)
    os.replace(staging, path)
    if durable:
        fsync_dir(path.parent)
    _journal(path).unlink()
    if durable:
        fsync_dir(path.parent)
    return n_moved


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _flush(out: int, arch: int, kept: list[bytes], moved: list[bytes]) -> int:
    n = len(moved)
    _write_all(out, b"".join(kept))
    _write_all(arch, b"".join(moved))
    kept.clear()
    moved.clear()
    return n
