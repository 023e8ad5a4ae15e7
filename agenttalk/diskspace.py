"""A full disk: new commands wait (nothing accepted is lost), one alert, work resumes by itself.

Two signals: free space under `min_free_bytes` before a command starts (statvfs, microseconds),
and a write that failed with ENOSPC/EDQUOT while a command ran (that command stays pending and
resumes from its saved LLM outcome). After a failed write the daemon also waits for
RESUME_MARGIN bytes on top, so it does not retry into the same wall every time.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from pathlib import Path

from agenttalk import fsio

log = logging.getLogger(__name__)

NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
RESUME_MARGIN = 64 * 1024


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in NO_SPACE


class DiskGuard:
    """Whether commands may start; thread-safe (workers report failed writes)."""

    def __init__(self, root: Path, min_free_bytes: int, recheck: float) -> None:
        self.root = root
        self.min_free = min_free_bytes
        self.recheck = recheck
        self.full = False
        self.needed = min_free_bytes
        self.next_check = 0.0
        self._lock = threading.Lock()

    @property
    def alert_path(self) -> Path:
        return self.root / "alerts" / "disk_full.json"

    def free_bytes(self) -> int:
        st = os.statvfs(self.root)
        return st.f_bavail * st.f_frsize

    def may_start(self, now: float) -> float | None:
        """None if a command may start now, else when to look again."""
        with self._lock:
            if self.full and now < self.next_check:
                return self.next_check
            free = self.free_bytes()
            if free < self.needed or (self.full and free < self.needed + RESUME_MARGIN):
                self._enter(now, f"{free} bytes free, {self.needed} needed")
                return self.next_check
            if self.full:
                self._leave(free)
            return None

    def hit(self, exc: BaseException, now: float) -> None:
        """A write failed for lack of space."""
        with self._lock:
            self._enter(now, str(exc))

    def _enter(self, now: float, why: str) -> None:
        self.next_check = now + self.recheck
        if self.full:
            return
        self.full = True
        message = (
            f"disk full under {self.root} ({why}): new commands wait and nothing accepted is "
            f"lost; free some space (min_free_bytes is {self.min_free}) and work resumes by itself"
        )
        log.error("%s", message)
        alert = {"alert": "disk_full", "root": str(self.root), "error": message}
        try:
            fsio.atomic_write_json(self.alert_path, {**alert, "at": fsio.now_iso()}, durable=False)
        except OSError as exc:
            log.error("cannot write %s either (%s): this log is the record", self.alert_path, exc)

    def _leave(self, free: int) -> None:
        self.full = False
        self.alert_path.unlink(missing_ok=True)
        log.warning("disk space is back (%d bytes free); commands run again", free)
