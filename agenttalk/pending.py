"""The commands an agent has accepted and not yet finished, in arrival order, indexed by id."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass

from agenttalk.intake import Accepted
from agenttalk.society import CommandKey


@dataclass
class Pending:
    accepted: Accepted
    arrived_at: float
    """The file's ctime: timeouts count from it, also across restarts."""
    seq: int
    """Order in which the daemon noticed the command (ties within one scan: ctime, then name)."""
    not_before: float = 0.0
    """After an internal error, the command is not retried before this time."""

    @property
    def key(self) -> CommandKey:
        command = self.accepted.command
        return CommandKey(command.plan_id, command.command_id)


class PendingSet(MutableMapping[str, Pending]):
    """File name -> Pending. Iteration is in insertion order, which is `seq` order (the daemon
    gives every insertion a fresh, larger seq), so nothing needs sorting; `name_of` finds a
    command by its key in O(1). Both matter with thousands of files in one inbox."""

    def __init__(self) -> None:
        self._by_name: dict[str, Pending] = {}
        self._by_key: dict[CommandKey, str] = {}

    def __getitem__(self, name: str) -> Pending:
        return self._by_name[name]

    def __setitem__(self, name: str, pending: Pending) -> None:
        self.pop(name, None)  # a re-read file moves to the end, as its new seq says
        self._by_name[name] = pending
        self._by_key[pending.key] = name

    def __delitem__(self, name: str) -> None:
        pending = self._by_name.pop(name)
        if self._by_key.get(pending.key) == name:
            del self._by_key[pending.key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    def name_of(self, key: CommandKey) -> str | None:
        """The file that holds command `key`, if it is pending."""
        return self._by_key.get(key)
