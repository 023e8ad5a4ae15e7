"""A discussion session file: `agents/moderator/inbox/session_*.json`, read and checked.

{"session_id", "topic", "participants": [agent ids], "scenario": name or inline object,
 optional "intervention_level", "max_steps", "recent_events_limit"}

Anything wrong becomes an `InputFileError` naming the field, so the daemon can move the file
to `archive/bad/` with the reason beside it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agenttalk import fsio
from agenttalk.discussion.context import DEFAULT_RECENT_EVENTS, MAX_RECENT_EVENTS
from agenttalk.errors import ConfigError, InputFileError, ScenarioError
from agenttalk.events import SessionId
from agenttalk.models import AgentProfile, Identifier
from agenttalk.moderator import Scenario, load_scenario
from agenttalk.society import AgentDir, Society

SESSION_HINT = (
    'a session file is {"session_id", "topic", "participants": [agent ids], "scenario": a '
    'built-in name or an inline scenario, optional "intervention_level", "max_steps", '
    '"recent_events_limit"}'
)


def is_session_file(name: str) -> bool:
    return name.startswith("session_") and name.endswith(".json")


class SessionSpec(BaseModel):
    """What a session file asks for."""

    model_config = ConfigDict(extra="forbid")

    session_id: SessionId
    """Names the event log and `outbox/<session_id>/`; never reused."""
    topic: str = Field(min_length=1)
    """The motion or question discussed."""
    participants: list[Identifier] = Field(min_length=1)
    """Existing agents with a persona (`role` or `persona_description`), in speaking priority."""
    scenario: str | dict[str, Any] = "debate"
    """A built-in scenario name (`debate`, `project_review`) or an inline scenario object."""
    intervention_level: int | None = Field(default=None, ge=0, le=3)
    """Overrides the scenario's moderator policy."""
    max_steps: int | None = Field(default=None, ge=1)
    """Overrides the scenario's step limit."""
    recent_events_limit: int = Field(default=DEFAULT_RECENT_EVENTS, ge=1, le=MAX_RECENT_EVENTS)
    """Recent events shown in each prompt (1-20)."""


@dataclass(frozen=True)
class Session:
    """A checked session: the file, its spec, the scenario and each participant's profile."""

    path: Path
    spec: SessionSpec
    scenario: Scenario
    profiles: dict[str, AgentProfile]
    factions: dict[str, str]
    sha256: str
    """Of the session file: a restart resumes the session only if the file is the same."""
    progress: str | None = None
    """None for a new session; `running` to resume one cut short; `done` if it has ended and
    only archiving its file was left."""


def read_session(
    society: Society, moderator: AgentDir, path: Path, *, settle: float, now: float | None = None
) -> Session | None:
    """Parse and check a session file; None while it may still be being written."""
    name = path.name
    data = path.read_bytes()
    age = (now if now is not None else time.time()) - path.stat().st_mtime
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        if age < settle:
            return None
        raise InputFileError(name, "(json)", f"not valid JSON: {exc}", SESSION_HINT) from exc
    if not isinstance(raw, dict):
        raise InputFileError(name, "(json)", "the top level is not an object", SESSION_HINT)
    try:
        spec = SessionSpec.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "(top level)"
        problem = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
        raise InputFileError(name, field, problem, SESSION_HINT) from exc
    sha256 = fsio.sha256_bytes(data)
    progress = _progress(moderator, name, spec.session_id, sha256)
    try:
        scenario = load_scenario(spec.scenario).with_overrides(
            intervention_level=spec.intervention_level, max_steps=spec.max_steps
        )
    except ScenarioError as exc:
        field = f"scenario.{exc.fields[0]}" if exc.fields and exc.fields[0] else "scenario"
        raise InputFileError(name, field, str(exc), "fix the scenario or use `debate`") from exc
    profiles = {agent_id: _participant(society, name, agent_id) for agent_id in spec.participants}
    if len(profiles) != len(spec.participants):
        raise InputFileError(name, "participants", "an agent is listed twice", "list each once")
    known = {f.id for f in scenario.alignment.factions}
    factions = {
        agent_id: p.stance.faction_id
        for agent_id, p in profiles.items()
        if p.stance is not None and p.stance.faction_id in known
    }
    return Session(path, spec, scenario, profiles, factions, sha256, progress)


def _progress(moderator: AgentDir, file: str, session_id: str, sha256: str) -> str | None:
    """Where this session file got to before a restart (None: it has not started)."""
    out = moderator.outbox / session_id
    if not out.exists():
        return None
    try:
        progress = fsio.read_json(out / "progress.json")
    except FileNotFoundError:
        return "running"  # cut short before its first step
    except (OSError, ValueError):
        progress = {}
    if not isinstance(progress, dict) or progress.get("session_sha256") != sha256:
        raise InputFileError(
            file,
            "session_id",
            f"session {session_id!r} already exists (outbox/{session_id}/) for another file",
            "give the session a new session_id",
        )
    return "done" if progress.get("state") == "done" else "running"


def _participant(society: Society, file: str, agent_id: str) -> AgentProfile:
    fix = "list agents that have an agent_profile.json with a `role` or `persona_description`"
    if agent_id in ("moderator", "event_log", "user") or not society.exists(agent_id):
        raise InputFileError(file, "participants", f"{agent_id!r} is not a discussion agent", fix)
    try:
        profile = society.load_profile(agent_id)
    except ConfigError as exc:
        raise InputFileError(file, "participants", f"{agent_id!r}: {exc}", fix) from exc
    if profile.kind != "llm" or not (profile.role or profile.persona_description):
        raise InputFileError(file, "participants", f"{agent_id!r} has no persona", fix)
    return profile
