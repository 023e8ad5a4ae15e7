"""Where things live in a society root.

ROOT/config.yaml
ROOT/agents/<id>/agent_profile.json
ROOT/agents/<id>/inbox/cmd_*.json                 pending commands (top level only)
ROOT/agents/<id>/inbox/<file>                     hand-dropped inputs, usable by any plan
ROOT/agents/<id>/inbox/<plan_id>/<file>           inputs delivered for one plan
ROOT/agents/<id>/outbox/<plan_id>/<command_id>/   audit.json + a copy of every message sent
ROOT/agents/<id>/archive/{done,failed}/<plan_id>/<command_id>.json   finished command files
ROOT/agents/<id>/archive/bad/<file> + <file>.error.json              rejected files
ROOT/agents/<id>/.agenttalk/                      daemon bookkeeping (arrival times, results)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from agenttalk.config import Config, format_validation_error, load_config
from agenttalk.errors import ConfigError
from agenttalk.models import AgentProfile

USER_AGENT = "user"
PROFILE = "agent_profile.json"


def resolve_root(root: Path | None) -> Path:
    """--root, else $AGENTTALK_ROOT, else the current directory."""
    if root is None:
        env = os.environ.get("AGENTTALK_ROOT")
        root = Path(env) if env else Path.cwd()
    return root.resolve()


@dataclass(frozen=True)
class CommandKey:
    plan_id: str
    command_id: str

    def __str__(self) -> str:
        return f"{self.plan_id}/{self.command_id}"


@dataclass(frozen=True)
class AgentDir:
    agent_id: str
    path: Path

    @property
    def profile_path(self) -> Path:
        return self.path / PROFILE

    @property
    def inbox(self) -> Path:
        return self.path / "inbox"

    @property
    def outbox(self) -> Path:
        return self.path / "outbox"

    @property
    def archive(self) -> Path:
        return self.path / "archive"

    @property
    def private(self) -> Path:
        return self.path / ".agenttalk"

    def plan_inbox(self, plan_id: str) -> Path:
        return self.inbox / plan_id

    def finished_path(self, status: str, key: CommandKey) -> Path:
        return self.archive / status / key.plan_id / f"{key.command_id}.json"

    def finished_status(self, key: CommandKey) -> str | None:
        for status in ("done", "failed"):
            if self.finished_path(status, key).exists():
                return status
        return None

    def audit_dir(self, key: CommandKey) -> Path:
        return self.outbox / key.plan_id / key.command_id

    def result_path(self, key: CommandKey) -> Path:
        return self.private / "results" / key.plan_id / f"{key.command_id}.json"

    def running_path(self, key: CommandKey) -> Path:
        return self.private / "running" / f"{key.plan_id}__{key.command_id}.json"

    def is_user(self) -> bool:
        return self.agent_id == USER_AGENT


class Society:
    """A society root: config.yaml plus agents/."""

    def __init__(self, root: Path, config: Config | None = None) -> None:
        self.root = root
        self.config = config if config is not None else load_config(root)
        self.agents_dir = root / "agents"

    def agent(self, agent_id: str) -> AgentDir:
        return AgentDir(agent_id, self.agents_dir / agent_id)

    def agent_ids(self) -> list[str]:
        """Agents with a profile, plus `user` if its folder exists; sorted."""
        if not self.agents_dir.is_dir():
            return []
        ids = []
        with os.scandir(self.agents_dir) as it:
            for entry in it:
                if entry.name.startswith(".") or not entry.is_dir():
                    continue
                if entry.name == USER_AGENT or os.path.exists(os.path.join(entry.path, PROFILE)):
                    ids.append(entry.name)
        return sorted(ids)

    def folder_names(self) -> list[str]:
        """The folders in agents/ (not dotfolders): agents, and folders that may become one.

        Cheaper than `agent_ids` (no look inside each folder), for callers that look anyway.
        """
        try:
            with os.scandir(self.agents_dir) as it:
                return [e.name for e in it if not e.name.startswith(".") and e.is_dir()]
        except FileNotFoundError:
            return []

    def exists(self, agent_id: str) -> bool:
        if agent_id == USER_AGENT:
            return True
        return self.agent(agent_id).profile_path.is_file()

    def load_profile(self, agent_id: str) -> AgentProfile:
        path = self.agent(agent_id).profile_path
        try:
            profile = AgentProfile.model_validate_json(path.read_bytes())
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read ({exc.strerror})") from exc
        except ValidationError as exc:
            raise ConfigError(f"{path}: {format_validation_error(exc)}") from exc
        if profile.agent_id != agent_id:
            raise ConfigError(
                f"{path}: agent_id: {profile.agent_id!r} does not match the folder name "
                f"{agent_id!r}; make them equal"
            )
        service = profile.llm.service
        if service is not None and service not in self.config.llm.services:
            raise ConfigError(
                f"{path}: llm.service: {service!r} is not in config.yaml llm.services; "
                "add it there or remove the field to use llm.default"
            )
        return profile
