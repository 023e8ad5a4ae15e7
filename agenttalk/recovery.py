"""Tidying what a daemon killed at the wrong moment leaves in an agent's bookkeeping folder.

A kill after a command was archived but before its saved LLM outcome and running marker were
removed leaves both behind for good: the command never runs again to remove them.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from agenttalk import fsio
from agenttalk.society import AgentDir, CommandKey

log = logging.getLogger(__name__)


def _marker_pid(path: Path) -> int | None:
    try:
        return int(json.loads(path.read_bytes())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def clear_stale_bookkeeping(agent: AgentDir) -> int:
    """Remove saved outcomes of finished commands and running markers of dead daemons (or of
    this one's pid reused: call it before this daemon runs anything for `agent`)."""
    removed = 0
    results = agent.private / "results"
    for path in results.glob("*/*.json"):
        if agent.finished_status(CommandKey(path.parent.name, path.stem)) is not None:
            path.unlink(missing_ok=True)
            removed += 1
    me = os.getpid()
    for path in (agent.private / "running").glob("*.json"):
        pid = _marker_pid(path)
        if pid is None or pid == me or not fsio.pid_alive(pid):
            path.unlink(missing_ok=True)
            removed += 1
    if removed:
        log.info("%s: removed %d stale bookkeeping files", agent.agent_id, removed)
    return removed
