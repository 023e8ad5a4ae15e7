"""What every command is doing, read from the files alone (the daemon need not run)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from agenttalk import fsio
from agenttalk.errors import ConfigError, InputFileError
from agenttalk.inputs import check_inputs
from agenttalk.intake import ignorable, is_candidate, read_command
from agenttalk.society import USER_AGENT, AgentDir, CommandKey, Society


class CommandState(BaseModel):
    plan_id: str
    command_id: str
    state: str
    """pending (ready to run), waiting, running, done, failed or invalid."""
    file: str
    missing_inputs: list[str] = Field(default_factory=list)
    error: str | None = None
    score: float | None = None


class SessionState(BaseModel):
    """A discussion session of the moderator agent."""

    session_id: str
    state: str
    """queued (its file waits in the inbox), running or done."""
    phase: str | None = None
    step: int = 0
    speeches: int = 0


class AgentStatus(BaseModel):
    agent_id: str
    profile_error: str | None = None
    commands: list[CommandState] = Field(default_factory=list)
    sessions: list[SessionState] = Field(default_factory=list)
    rejected_files: list[dict[str, Any]] = Field(default_factory=list)

    def count(self, state: str) -> int:
        return sum(1 for c in self.commands if c.state == state)


def _running(agent: AgentDir, key: CommandKey) -> bool:
    try:
        pid = int(json.loads(agent.running_path(key).read_bytes())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return fsio.pid_alive(pid)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _audit(agent: AgentDir, key: CommandKey) -> dict[str, Any]:
    try:
        data = json.loads((agent.audit_dir(key) / "audit.json").read_bytes())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def agent_status(society: Society, agent_id: str) -> AgentStatus:
    agent = society.agent(agent_id)
    status = AgentStatus(agent_id=agent_id)
    if agent_id == USER_AGENT:
        return status
    if not agent.profile_path.exists():
        status.profile_error = (
            f"{agent.profile_path}: missing, so agent {agent_id!r} does not exist and the "
            "commands in its inbox never run; create the profile (`agenttalk schema profile`) "
            "or move the commands into an existing agent's inbox"
        )
    else:
        try:
            society.load_profile(agent_id)
        except ConfigError as exc:
            status.profile_error = str(exc)
    config = society.config
    status.sessions = _sessions(agent)
    if agent.inbox.is_dir():
        for path in sorted(agent.inbox.iterdir()):
            if ignorable(path.name) or not is_candidate(path.name):
                continue
            if path.is_dir() and not path.is_symlink():
                continue  # a plan's folder, not a command
            try:
                accepted = read_command(
                    agent, path, max_bytes=config.max_file_bytes, settle=config.settle_seconds
                )
            except (InputFileError, OSError) as exc:
                status.commands.append(
                    CommandState(
                        plan_id="?", command_id="?", state="invalid", file=path.name, error=str(exc)
                    )
                )
                continue
            if accepted is None:
                continue
            cmd = accepted.command
            key = CommandKey(cmd.plan_id, cmd.command_id)
            finished = agent.finished_status(key)
            if finished and _same_file(agent.finished_path(finished, key), path):
                continue  # a crash between archive link and unlink: it is listed as finished
            state = CommandState(
                plan_id=cmd.plan_id, command_id=cmd.command_id, state="pending", file=path.name
            )
            if _running(agent, key):
                state.state = "running"
            else:
                check = check_inputs(agent, cmd, settle=config.settle_seconds)
                if not check.complete and cmd.wait_for_inputs:
                    state.state, state.missing_inputs = "waiting", check.missing
            status.commands.append(state)
    for finished in ("done", "failed"):
        folder = agent.archive / finished
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*/*.json")):
            key = CommandKey(path.parent.name, path.stem)
            audit = _audit(agent, key)
            status.commands.append(
                CommandState(
                    plan_id=key.plan_id,
                    command_id=key.command_id,
                    state=finished,
                    file=str(path.relative_to(agent.path)),
                    error=audit.get("error"),
                    score=audit.get("score"),
                )
            )
    bad = agent.archive / "bad"
    if bad.is_dir():
        for path in sorted(bad.glob("*.error.json")):
            try:
                status.rejected_files.append(json.loads(path.read_bytes()))
            except (OSError, ValueError):
                continue
    return status


def _sessions(agent: AgentDir) -> list[SessionState]:
    """Queued session files in the inbox, then sessions with progress in the outbox."""
    sessions = []
    if agent.inbox.is_dir():
        for path in sorted(agent.inbox.glob("session_*.json")):
            try:
                data = json.loads(path.read_bytes())
                session_id = str(data["session_id"])
            except (OSError, ValueError, KeyError, TypeError):
                session_id = path.name
            sessions.append(SessionState(session_id=session_id, state="queued"))
    for path in sorted(agent.outbox.glob("*/progress.json")):
        try:
            sessions.append(SessionState.model_validate_json(path.read_bytes()))
        except (OSError, ValueError):
            continue
    return sessions


def unknown_agents(society: Society) -> list[str]:
    """Folders under agents/ with commands in their inbox but no profile: nothing runs them."""
    if not society.agents_dir.is_dir():
        return []
    known = set(society.agent_ids())
    with os.scandir(society.agents_dir) as it:
        folders = [e for e in it if e.is_dir() and not e.name.startswith(".")]
    return sorted(
        e.name
        for e in folders
        if e.name not in known and any((Path(e.path) / "inbox").glob("cmd_*.json"))
    )


def society_status(society: Society, agent_ids: list[str] | None = None) -> list[AgentStatus]:
    """Every agent, and every folder holding commands for an agent that does not exist."""
    ids = agent_ids or sorted(society.agent_ids() + unknown_agents(society))
    return [agent_status(society, a) for a in ids]


def render_text(statuses: list[AgentStatus], plan_id: str | None = None) -> str:
    lines = []
    for st in statuses:
        commands = [c for c in st.commands if plan_id is None or c.plan_id == plan_id]
        if plan_id is not None and not commands:
            continue
        counts = ", ".join(
            f"{n} {s}"
            for s in ("pending", "waiting", "running", "done", "failed", "invalid")
            if (n := sum(1 for c in commands if c.state == s))
        )
        lines.append(f"{st.agent_id}: {counts or 'idle'}")
        if st.profile_error:
            lines.append(f"  ! profile: {st.profile_error}")
        for session in st.sessions if plan_id is None else []:
            where = f", phase {session.phase}, step {session.step}" if session.phase else ""
            speeches = f", {session.speeches} speeches" if session.phase else ""
            lines.append(f"  session  {session.session_id}: {session.state}{where}{speeches}")
        for c in commands:
            if c.state in ("done",) and plan_id is None:
                continue
            detail = ""
            if c.missing_inputs:
                detail = " missing: " + ", ".join(c.missing_inputs)
            if c.error:
                detail += f" error: {c.error}"
            if c.score is not None:
                detail += f" score: {c.score:g}"
            lines.append(f"  {c.state:8} {c.plan_id}/{c.command_id} ({c.file}){detail}")
        if plan_id is None:
            for rec in st.rejected_files:
                lines.append(
                    f"  rejected {Path(str(rec.get('moved_to', '?'))).name}: "
                    f"{rec.get('field')}: {rec.get('error')} (fix: {rec.get('fix')})"
                )
    return "\n".join(lines) or "no agents"
