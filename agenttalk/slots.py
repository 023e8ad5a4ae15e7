"""What the daemon knows of each agent between two looks at its inbox."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from agenttalk.models import AgentProfile
from agenttalk.pending import PendingSet
from agenttalk.society import AgentDir


@dataclass
class Slot:
    """What the daemon knows of one agent."""

    agent: AgentDir
    pending: PendingSet = field(default_factory=PendingSet)
    running: str | None = None
    """File name of the command running now (one per agent)."""
    profile: AgentProfile | None = None
    profile_sig: tuple[int, int] | None = None
    profile_error: str | None = None
    service: str | None = None
    """The LLM service this agent's commands use."""
    wake_at: float | None = None
    """Earliest time something of this agent needs a look (timeout, settling file)."""
    inbox_mtime: int | None = None
    """The inbox folder's mtime when it was last read (None: too recent to trust, read again)."""
    profile_file: str = field(init=False)
    inbox_dir: str = field(init=False)

    def __post_init__(self) -> None:
        # str paths, made once: the heartbeat looks at every agent, pathlib per look adds up
        self.profile_file = str(self.agent.profile_path)
        self.inbox_dir = str(self.agent.inbox)


def inbox_unchanged(slot: Slot, now: float) -> bool:
    """Nothing to read: no command known, and no entry added or removed since the last read.

    Any new file changes the folder's mtime. A mtime within the last 2 s may be shared by a
    change still to come (coarse clocks), so it is not trusted: the next look reads again.
    """
    try:
        st = os.stat(slot.inbox_dir)
    except OSError:
        return False  # let the listing meet (and report) the problem
    quiet = not slot.pending and slot.running is None and slot.wake_at is None
    if quiet and slot.inbox_mtime == st.st_mtime_ns:
        return True
    slot.inbox_mtime = st.st_mtime_ns if st.st_mtime < now - 2.0 else None
    return False
