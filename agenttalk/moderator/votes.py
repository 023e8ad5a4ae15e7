"""Reading consensus votes out of `recent_events`.

An event may be any object with attributes, or a mapping, with `type`, `speaker`, `content` and
`meta` (the event log's events qualify). A vote is an event whose `type` is `VOTE` (any case, or
a str enum with that value) and whose `meta["phase"]` is the phase id. Its score, 0 to 100, is
`meta["score"]` if present, else `content` when it is a number or numeric text, else
`content["score"]`. Scores outside 0-100 or unreadable ones are ignored. Events are read in
the order given (oldest first); only each speaker's latest vote for the phase counts, so votes
from an earlier pass through the same phase are superseded.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

VOTE = "VOTE"


class EventView(BaseModel):
    """The fields of an event the moderator reads."""

    model_config = ConfigDict(from_attributes=True, extra="ignore", frozen=True)

    type: str
    """INTENT, SPEECH, SUMMARY, VOTE or SYSTEM."""
    speaker: str = ""
    """An agent id, `moderator` or `system`."""
    content: Any = None
    """Text or a payload."""
    meta: dict[str, Any] = {}
    """`phase`, `round`, ... and, for votes, optionally `score`."""

    @field_validator("type", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        if isinstance(value, Enum):
            value = value.value
        return value.upper() if isinstance(value, str) else value

    @field_validator("meta", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        if isinstance(value, BaseModel):  # the event log's EventMeta (extra keys kept)
            return value.model_dump()
        return {} if value is None else value


def mean_vote(events: Iterable[Any], phase_id: str) -> float | None:
    """The mean of each speaker's latest valid vote for the phase; None when there is none."""
    latest: dict[str, float] = {}
    for item in events:
        event = EventView.model_validate(item)
        if event.type != VOTE or event.meta.get("phase") != phase_id:
            continue
        score = vote_score(event)
        if score is not None:
            latest[event.speaker] = score
    if not latest:
        return None
    return sum(latest.values()) / len(latest)


def vote_score(event: EventView) -> float | None:
    """The score a VOTE event carries, or None if it has no valid one."""
    if "score" in event.meta:
        return _score(event.meta["score"])
    content = event.content
    if isinstance(content, Mapping):
        return _score(content.get("score"))
    return _score(content)


def _score(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value) if 0 <= value <= 100 else None
