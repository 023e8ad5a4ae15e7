"""Dropping files into inboxes the safe way: validate first, then write atomically."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agenttalk import fsio
from agenttalk.errors import AgentTalkError, InputFileError
from agenttalk.intake import check_targets, validation_to_input_error
from agenttalk.models import Command, Identifier, check_file_name, check_identifier
from agenttalk.society import USER_AGENT, CommandKey, Society


def validate_command(society: Society, agent_id: str, raw: Any, name: str) -> Command:
    """A command as the daemon would accept it for `agent_id`, or InputFileError."""
    if not society.exists(agent_id) or agent_id == USER_AGENT:
        raise InputFileError(
            name,
            "agent",
            f"no agent {agent_id!r} (agents/{agent_id}/agent_profile.json)",
            "address an existing agent; `agenttalk status` lists them",
        )
    if not isinstance(raw, dict):
        raise InputFileError(name, "(json)", "not a JSON object", "write one JSON object")
    try:
        command = Command.model_validate(raw)
    except ValidationError as exc:
        raise validation_to_input_error(name, exc) from exc
    check_targets(name, command, agent_id)
    key = CommandKey(command.plan_id, command.command_id)
    finished = society.agent(agent_id).finished_status(key)
    if finished:
        raise InputFileError(
            name,
            "command_id",
            f"{key} already ran for {agent_id} ({finished})",
            "choose a new command_id",
        )
    return command


def command_file_name(command: Command) -> str:
    return f"cmd_{command.plan_id}__{command.command_id}.json"


def drop_command(society: Society, agent_id: str, command: Command) -> Path:
    path = society.agent(agent_id).inbox / command_file_name(command)
    if path.exists():
        raise AgentTalkError(f"{path} already exists: that command is pending already")
    data = command.model_dump(mode="json", exclude_defaults=False)
    fsio.atomic_write_json(path, data, durable=society.config.durability == "safe")
    return path


def send_file(society: Society, agent_id: str, source: Path, plan_id: str | None) -> Path:
    """`agenttalk send`: a command (cmd_*.json, or any JSON with a command_id) or an input file."""
    try:
        data = source.read_bytes()
    except OSError as exc:
        raise AgentTalkError(f"cannot read {source}: {exc.strerror}") from exc
    limit = society.config.max_file_bytes
    if len(data) > limit:
        raise InputFileError(
            source.name,
            "(file)",
            f"{len(data)} bytes is over {limit}",
            "shorten it or raise max_file_bytes in config.yaml",
        )
    raw: Any = None
    if source.suffix == ".json":
        try:
            raw = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise InputFileError(
                source.name, "(json)", f"not valid JSON: {exc}", "fix the JSON"
            ) from exc
    if source.name.startswith("cmd_") or (isinstance(raw, dict) and "command_id" in raw):
        command = validate_command(society, agent_id, raw, source.name)
        return drop_command(society, agent_id, command)
    if not society.exists(agent_id):
        raise AgentTalkError(f"no agent {agent_id!r}")
    try:
        check_file_name(source.name)
    except ValueError as exc:
        raise InputFileError(source.name, "(name)", str(exc), "rename the file") from exc
    if plan_id is not None:
        try:
            check_identifier(plan_id)  # it becomes a folder name: no way out of the inbox
        except ValueError as exc:
            raise InputFileError(
                source.name, "--plan", str(exc), "use the plan_id of the plan the input is for"
            ) from exc
    agent = society.agent(agent_id)
    folder = agent.plan_inbox(plan_id) if plan_id else agent.inbox
    target = folder / source.name
    fsio.atomic_write_bytes(target, data, durable=society.config.durability == "safe")
    return target


class PlanCommand(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: Identifier
    """The agent that runs the command."""
    command: dict[str, Any]
    """The command; its plan_id is the plan's (set it or leave it out)."""


class Plan(BaseModel):
    """A plan file in plans/: a plan_id and commands addressed to agents."""

    model_config = ConfigDict(extra="forbid")

    plan_id: Identifier
    description: str | None = None
    commands: list[PlanCommand] = Field(min_length=1)


def load_plan(path: Path) -> Plan:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
        raise AgentTalkError(f"{path}: cannot read the plan: {exc}") from exc
    try:
        return Plan.model_validate(raw)
    except ValidationError as exc:
        raise validation_to_input_error(path.name, exc) from exc


def submit_plan(society: Society, plan: Plan, source: str) -> list[Path]:
    """Validate every command first; drop none if any is invalid, else drop them all."""
    problems: list[str] = []
    validated: list[tuple[str, Command]] = []
    seen: set[tuple[str, str]] = set()
    for i, entry in enumerate(plan.commands):
        where = f"{source} commands[{i}]"
        raw = dict(entry.command)
        if raw.setdefault("plan_id", plan.plan_id) != plan.plan_id:
            problems.append(
                f"{where}: plan_id: {raw['plan_id']!r} differs from the plan's "
                f"{plan.plan_id!r} (fix: remove it from the command)"
            )
            continue
        try:
            command = validate_command(society, entry.agent, raw, where)
        except InputFileError as exc:
            problems.append(str(exc))
            continue
        if (entry.agent, command.command_id) in seen:
            problems.append(
                f"{where}: command_id: {command.command_id!r} appears twice for "
                f"{entry.agent} (fix: make it unique)"
            )
            continue
        seen.add((entry.agent, command.command_id))
        if (society.agent(entry.agent).inbox / command_file_name(command)).exists():
            problems.append(f"{where}: {command.command_id} is already pending for {entry.agent}")
            continue
        validated.append((entry.agent, command))
    if problems:
        raise AgentTalkError("plan not submitted:\n  " + "\n  ".join(problems))
    return [drop_command(society, agent, command) for agent, command in validated]
