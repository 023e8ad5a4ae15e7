"""The event log's records: events, the event files dropped into its inbox, prune strategies.

Everything that crosses the log's boundary is one of these models; `agenttalk.eventlog` stores
them.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    model_validator,
)

from agenttalk.errors import InputFileError
from agenttalk.models import Identifier, check_identifier

MAX_LIMIT = 100
DRAFT_HINT = (
    'an event file holds one event or a list: {"session_id", "type" (INTENT, SPEECH, SUMMARY, '
    'VOTE or SYSTEM), "speaker", "content", optional "meta", "event_id", "timestamp"}'
)


def check_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be an integer from 1 to {MAX_LIMIT}, got {limit!r}")
    return limit


def check_session(session_id: str) -> str:
    check_identifier(session_id)
    if session_id.endswith(".archive"):
        raise ValueError(f"session id {session_id!r} may not end in '.archive' (the archive name)")
    return session_id


SessionId = Annotated[str, AfterValidator(check_session)]


class EventType(StrEnum):
    INTENT = "INTENT"
    SPEECH = "SPEECH"
    SUMMARY = "SUMMARY"
    VOTE = "VOTE"
    SYSTEM = "SYSTEM"


def _check_timestamp(value: str) -> str:
    try:
        datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an ISO 8601 time (e.g. 2024-12-23T12:30:00Z)") from None
    return value


Timestamp = Annotated[str, AfterValidator(_check_timestamp)]
Content = str | dict[str, JsonValue] | list[JsonValue]


class EventMeta(BaseModel):
    """Optional context; other keys are kept as given."""

    model_config = ConfigDict(extra="allow")

    phase: str | None = None
    """The phase the event belongs to."""
    round: int | None = Field(default=None, ge=0)
    """The phase round."""
    reply_to: str | None = None
    """The event_id this event answers."""
    tokens: int | None = Field(default=None, ge=0)
    """Tokens the content took to generate."""


class Event(BaseModel):
    """One line of a session log."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    event_id: str
    """Unique id (a UUID unless the event file gave one): for de-duplication and replies."""
    type: EventType
    speaker: Identifier
    """An agent id, `moderator` or `system`."""
    content: Content
    """Text, or a JSON object or list."""
    timestamp: Timestamp
    """ISO 8601, when the event was appended (or the time its file gave)."""
    session_id: SessionId
    sequence: int = Field(ge=1)
    """Strictly increasing within the session, never reused (also after pruning)."""
    meta: EventMeta = Field(default_factory=EventMeta)

    def content_text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return json.dumps(self.content, ensure_ascii=False, separators=(",", ":"))

    def to_line(self) -> bytes:
        data = self.model_dump(mode="json")
        data["meta"] = self.meta.model_dump(mode="json", exclude_none=True)
        return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


class AgentVisibleEvent(BaseModel):
    """What an agent's prompt may carry of an event."""

    type: EventType
    speaker: str
    content: str
    timestamp: str


class EventDraft(BaseModel):
    """An event as dropped into the inbox: the log adds `sequence` (and id and time if absent)."""

    model_config = ConfigDict(extra="forbid")

    session_id: SessionId
    type: EventType
    speaker: Identifier
    content: Content
    meta: EventMeta = Field(default_factory=EventMeta)
    event_id: Identifier | None = None
    """Give one to make the file safe to ingest twice: an id already logged is skipped."""
    timestamp: Timestamp | None = None


class PruneByCount(BaseModel):
    """Keep the most recent `keep` events."""

    model_config = ConfigDict(extra="forbid")
    strategy: Literal["by_count"] = "by_count"
    keep: int = Field(ge=0)


class PruneByType(BaseModel):
    """Drop the events of `drop_types`, or keep only those of `keep_types` (give one)."""

    model_config = ConfigDict(extra="forbid")
    strategy: Literal["by_type"] = "by_type"
    drop_types: frozenset[EventType] | None = None
    keep_types: frozenset[EventType] | None = None

    @model_validator(mode="after")
    def _one_list(self) -> PruneByType:
        if (self.drop_types is None) == (self.keep_types is None):
            raise ValueError("give exactly one of drop_types and keep_types")
        return self

    def keeps(self, t: EventType) -> bool:
        if self.keep_types is not None:
            return t in self.keep_types
        return t not in (self.drop_types or frozenset())


class PruneBeforeSequence(BaseModel):
    """Drop the events whose sequence is below `sequence`."""

    model_config = ConfigDict(extra="forbid")
    strategy: Literal["before_sequence"] = "before_sequence"
    sequence: int = Field(ge=1)


PruneStrategy = Annotated[
    PruneByCount | PruneByType | PruneBeforeSequence, Field(discriminator="strategy")
]


def read_event_file(path: Path, *, max_bytes: int, settle: float) -> list[EventDraft] | None:
    """The events of one dropped file; None while an unparseable file may still be written."""
    name = path.name
    st = path.stat()
    if not path.is_file():
        raise InputFileError(name, "(file)", "not a regular file", "drop a JSON file")
    if st.st_size > max_bytes:
        raise InputFileError(
            name, "(file)", f"{st.st_size} bytes is over the limit of {max_bytes}", "split it"
        )
    young = time.time() - st.st_mtime < settle
    try:
        raw = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        if young:
            return None
        raise InputFileError(name, "(encoding)", "not UTF-8 text", "save it as UTF-8") from exc
    except json.JSONDecodeError as exc:
        if young:
            return None
        raise InputFileError(name, "(json)", f"not valid JSON: {exc}", DRAFT_HINT) from exc
    except RecursionError as exc:
        raise InputFileError(name, "(json)", "nested too deeply", "flatten it") from exc
    items = raw if isinstance(raw, list) else [raw]
    if not items or not all(isinstance(item, dict) for item in items):
        raise InputFileError(name, "(top level)", "not an object or a list of objects", DRAFT_HINT)
    drafts = []
    for i, item in enumerate(items):
        try:
            drafts.append(EventDraft.model_validate(item))
        except ValidationError as exc:
            raise _draft_error(name, i if isinstance(raw, list) else None, exc) from exc
    return drafts


def _draft_error(name: str, index: int | None, exc: ValidationError) -> InputFileError:
    first = exc.errors()[0]
    loc = [str(p) for p in first["loc"]]
    field_name = ".".join(([f"[{index}]"] if index is not None else []) + loc) or "(top level)"
    problem = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        problem = "unknown field"
        fix = (
            "remove it: the log numbers events itself"
            if loc == ["sequence"]
            else f"remove the field or correct its spelling; {DRAFT_HINT}"
        )
    elif first["type"] == "missing":
        fix = f"add the field; {DRAFT_HINT}"
    else:
        fix = f"correct the value; {DRAFT_HINT}"
    return InputFileError(name, field_name, problem, fix)
