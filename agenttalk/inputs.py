"""Which of a command's required inputs are present, complete and of its own plan."""

from __future__ import annotations

import fnmatch
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from agenttalk.errors import InputFileError
from agenttalk.intake import check_inside, ignorable, is_candidate
from agenttalk.models import Command
from agenttalk.society import AgentDir


@dataclass(frozen=True)
class InputFile:
    name: str
    """Path relative to the inbox: `notes.txt` (no plan) or `<plan_id>/feedback.json`."""
    path: Path


@dataclass
class InputCheck:
    found: list[InputFile] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    """Patterns that matched no complete file."""
    recheck_at: float | None = None
    """When a file that is still settling counts as complete."""
    rejected: list[tuple[Path, InputFileError]] = field(default_factory=list)
    """Files that may never be read (symlinks out of the agent folder)."""

    @property
    def complete(self) -> bool:
        return not self.missing


def _candidates(agent: AgentDir, plan_id: str) -> list[tuple[str, InputFile]]:
    """(bare name, file) for inputs with no plan (inbox top level) and of `plan_id`."""
    out = []
    for folder, prefix in ((agent.inbox, ""), (agent.plan_inbox(plan_id), plan_id + "/")):
        try:
            it = os.scandir(folder)
        except FileNotFoundError:
            continue
        with it:
            for entry in it:
                name = entry.name
                if ignorable(name) or (not prefix and is_candidate(name)):
                    continue
                if entry.is_file(follow_symlinks=True) or entry.is_symlink():
                    out.append((name, InputFile(prefix + name, Path(entry.path))))
    return out


def _ready(path: Path, now: float, settle: float) -> float | None:
    """None if complete, else the time it will count as complete."""
    try:
        st = path.stat()
    except OSError:
        return now + settle
    settled_at = st.st_mtime + settle
    if now >= settled_at:
        return None
    if path.suffix == ".json":
        try:
            json.loads(path.read_bytes())
            return None
        except (ValueError, RecursionError):
            pass
    return settled_at


def check_inputs(
    agent: AgentDir, command: Command, *, settle: float, now: float | None = None
) -> InputCheck:
    now = time.time() if now is None else now
    result = InputCheck()
    if not command.required_inputs:
        return result  # no inbox scan: it costs O(inbox size), once per command dispatched
    candidates = _candidates(agent, command.plan_id)
    seen: set[str] = set()
    for pattern in command.required_inputs:
        matched = False
        for bare, file in candidates:
            if not fnmatch.fnmatchcase(bare, pattern):
                continue
            try:
                check_inside(agent, file.path, "required_inputs")
            except InputFileError as exc:
                result.rejected.append((file.path, exc))
                continue
            pending = _ready(file.path, now, settle)
            if pending is not None:
                result.recheck_at = min(result.recheck_at or pending, pending)
                continue
            matched = True
            if file.name not in seen:
                seen.add(file.name)
                result.found.append(file)
        if not matched:
            result.missing.append(pattern)
    result.found.sort(key=lambda f: f.name)
    return result
