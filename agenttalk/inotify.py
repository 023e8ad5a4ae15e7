"""A minimal Linux inotify binding (ctypes): one kernel instance, many watches, no threads.

watchdog gives every watched folder its own emitter thread; with one watch per agent that is
10,000 threads for 10,000 agents. Here the caller owns the single reading thread.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass

CLOSE_WRITE = 0x00000008
MOVED_FROM = 0x00000040
MOVED_TO = 0x00000080
CREATE = 0x00000100
DELETE = 0x00000200
Q_OVERFLOW = 0x00004000
IGNORED = 0x00008000
"""The watch is gone (its folder was deleted or moved away, or it was removed)."""
ONLYDIR = 0x01000000
ISDIR = 0x40000000

_CLOEXEC = 0o2000000
_NONBLOCK = 0o4000
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len (struct inotify_event)


@dataclass(frozen=True)
class Event:
    wd: int
    mask: int
    name: str
    """The entry inside the watched folder ("" for events on the folder itself)."""


def available() -> bool:
    return sys.platform.startswith("linux") and _libc() is not None


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    return libc if hasattr(libc, "inotify_init1") else None


class Inotify:
    """One inotify instance. `read` blocks until events come or `wake` is called."""

    def __init__(self) -> None:
        libc = _libc()
        if libc is None:
            raise OSError("inotify is not available on this system")
        self._libc = libc
        self.fd = libc.inotify_init1(_CLOEXEC | _NONBLOCK)
        if self.fd < 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"inotify_init1: {os.strerror(errno)}")
        self._wake_r, self._wake_w = os.pipe()

    def add_watch(self, path: str, mask: int) -> int:
        """Watch the folder `path` (not its subfolders); raises OSError (ENOENT, ENOSPC...)."""
        wd = int(self._libc.inotify_add_watch(self.fd, os.fsencode(path), mask | ONLYDIR))
        if wd < 0:
            errno = ctypes.get_errno()
            raise OSError(errno, os.strerror(errno), path)
        return wd

    def wake(self) -> None:
        """Make a blocked `read` return (with no events)."""
        os.write(self._wake_w, b"x")

    def read(self) -> Iterator[Event]:
        ready, _, _ = select.select([self.fd, self._wake_r], [], [])
        if self._wake_r in ready:
            os.read(self._wake_r, 64)
        if self.fd not in ready:
            return
        try:
            data = os.read(self.fd, 256 * 1024)
        except BlockingIOError:
            return
        offset = 0
        while offset + _HEADER.size <= len(data):
            wd, mask, _cookie, length = _HEADER.unpack_from(data, offset)
            raw = data[offset + _HEADER.size : offset + _HEADER.size + length]
            offset += _HEADER.size + length
            yield Event(wd, mask, os.fsdecode(raw.rstrip(b"\0")))

    def close(self) -> None:
        for fd in (self.fd, self._wake_r, self._wake_w):
            os.close(fd)
