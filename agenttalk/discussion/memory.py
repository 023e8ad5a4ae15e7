"""An agent's short-term memory: a few notes of its own, kept in its own folder, fed to its prompts.

ROOT/agents/<id>/.agenttalk/memory.json    at most 10 entries and 2000 tokens (chars / 4)
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agenttalk import fsio
from agenttalk.models import Identifier

MAX_ENTRIES = 10
MAX_TOKENS = 2000
FILE = Path(".agenttalk") / "memory.json"


def estimate_tokens(text: str) -> int:
    """The seed's estimate: one token per four characters, rounded up."""
    return math.ceil(len(text) / 4)


class MemoryEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    content: str
    importance: float = Field(ge=0, le=1)
    """0-1; the least important entry is pruned first."""
    kind: Literal["thought", "action", "feedback"] = "thought"
    """`thought` for an intent, `action` for a speech, `feedback` for what others made of it."""
    timestamp: str = Field(default_factory=fsio.now_iso)


class ShortTermMemory(BaseModel):
    """One agent's notes, oldest first; `add` keeps it within both limits."""

    model_config = ConfigDict(extra="forbid")

    agent_id: Identifier
    """The owner: only this agent's prompts may carry these notes."""
    entries: list[MemoryEntry] = Field(default_factory=list)
    max_entries: int = Field(default=MAX_ENTRIES, ge=1, le=MAX_ENTRIES)
    max_tokens: int = Field(default=MAX_TOKENS, ge=1, le=MAX_TOKENS)

    def tokens(self) -> int:
        return sum(estimate_tokens(entry.content) for entry in self.entries)

    def add(self, entry: MemoryEntry) -> list[MemoryEntry]:
        """Append, then prune the lowest importance (earliest on ties) until within limits."""
        self.entries.append(entry)
        pruned: list[MemoryEntry] = []
        while self.entries and (
            len(self.entries) > self.max_entries or self.tokens() > self.max_tokens
        ):
            # min() returns the first of equal minima, that is the earliest entry.
            victim = min(range(len(self.entries)), key=lambda i: self.entries[i].importance)
            pruned.append(self.entries.pop(victim))
        return pruned

    def render(self) -> str:
        if not self.entries:
            return ""
        lines = ["## Your own notes (private to you)"]
        lines += [f"- ({entry.kind}) {entry.content}" for entry in self.entries]
        return "\n".join(lines)


def memory_path(agent_folder: Path) -> Path:
    return agent_folder / FILE


def load_memory(agent_folder: Path, agent_id: str) -> ShortTermMemory:
    """The agent's memory from `agents/<id>/.agenttalk/memory.json`, or an empty one."""
    path = memory_path(agent_folder)
    if not path.exists():
        return ShortTermMemory(agent_id=agent_id)
    memory = ShortTermMemory.model_validate(fsio.read_json(path))
    if memory.agent_id != agent_id:
        raise ValueError(f"{path} belongs to {memory.agent_id!r}, not {agent_id!r}")
    return memory


def save_memory(agent_folder: Path, memory: ShortTermMemory, *, durable: bool = True) -> Path:
    path = memory_path(agent_folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    fsio.atomic_write_json(path, memory.model_dump(mode="json"), durable=durable)
    return path
