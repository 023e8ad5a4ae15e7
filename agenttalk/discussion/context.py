"""What one agent may see on a turn: phase, topic, a few recent public events, the latest summary.

Never the full history, another agent's memory or the moderator's state: the builder reads only
the event log's agent view, with a bounded limit.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agenttalk.eventlog import AgentVisibleEvent, EventLog, EventType

MAX_RECENT_EVENTS = 20
"""The most recent events a prompt may ever carry (seed: token governance)."""
DEFAULT_RECENT_EVENTS = 10
MAX_EVENT_CHARS = 600
"""An event's text is cut to this length in a prompt, so a turn's size stays bounded."""


class VisibleContext(BaseModel):
    """The whole of what an agent's discussion prompt may carry besides its persona and memory."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    phase_name: str
    """The current phase's display name."""
    phase_type: str
    """The phase's type, e.g. `free_discussion`."""
    round: int = Field(ge=1)
    """The current round within the phase."""
    max_rounds: int | None = Field(default=None, ge=1)
    """The phase's round limit, if it has one."""
    topic: str
    """The discussion topic."""
    events: list[AgentVisibleEvent] = Field(default_factory=list, max_length=MAX_RECENT_EVENTS)
    """The most recent agent-visible events, oldest first."""
    phase_summary: str | None = None
    """The latest phase summary, if any."""
    call_reason: str | None = None
    """Set when the moderator called on this agent to speak: why."""

    def render(self) -> str:
        progress = f"round {self.round}"
        if self.max_rounds is not None:
            progress += f" of {self.max_rounds}"
        lines = [
            "## Current phase",
            f"- Phase: {self.phase_name} ({self.phase_type})",
            f"- Progress: {progress}",
            "",
            "## Topic",
            self.topic,
        ]
        if self.phase_summary:
            lines += ["", "## Summary of the discussion so far", self.phase_summary]
        lines += ["", f"## Recent events ({len(self.events)})"]
        if not self.events:
            lines.append("(nobody has spoken yet)")
        for number, event in enumerate(self.events, 1):
            text = " ".join(event.content.split())
            if len(text) > MAX_EVENT_CHARS:
                text = text[:MAX_EVENT_CHARS] + "..."
            kind = "" if event.type == EventType.SPEECH else f" ({event.type.value.lower()})"
            lines.append(f"{number}. [{event.speaker}]{kind} {text}")
        if self.call_reason:
            lines += ["", "## The moderator has called on you to speak", self.call_reason]
        return "\n".join(lines)


def check_recent_limit(limit: int) -> int:
    if not 1 <= limit <= MAX_RECENT_EVENTS:
        raise ValueError(
            f"recent events limit {limit} is out of range: use 1 to {MAX_RECENT_EVENTS} "
            f"(default {DEFAULT_RECENT_EVENTS})"
        )
    return limit


def build_visible_context(
    log: EventLog,
    session_id: str,
    *,
    phase_name: str,
    phase_type: str,
    round: int,
    topic: str,
    max_rounds: int | None = None,
    call_reason: str | None = None,
    limit: int = DEFAULT_RECENT_EVENTS,
) -> VisibleContext:
    """Read the last `limit` (1-20) visible events and the latest SUMMARY event from the log."""
    check_recent_limit(limit)
    events = log.get_agent_visible_events(session_id, limit)
    summaries = log.get_events_by_type(session_id, EventType.SUMMARY, 1)
    return VisibleContext(
        phase_name=phase_name,
        phase_type=phase_type,
        round=round,
        max_rounds=max_rounds,
        topic=topic,
        events=events,
        phase_summary=summaries[-1].content_text() if summaries else None,
        call_reason=call_reason,
    )
