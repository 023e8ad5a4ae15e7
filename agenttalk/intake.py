"""Reading dropped command files: complete, safe and valid, or moved aside with a reason."""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from agenttalk import fsio
from agenttalk.errors import InputFileError
from agenttalk.models import Command
from agenttalk.society import AgentDir

log = logging.getLogger(__name__)

SCHEMA_HINT = "see `agenttalk schema command` for the format"


@dataclass(frozen=True)
class Accepted:
    path: Path
    command: Command
    sha256: str
    signature: tuple[int, int]
    arrived_at: float
    """When the file was renamed or written into the inbox: its ctime, which survives restarts
    (rename sets it; an edit resets it, so an edited command counts as newly arrived)."""
    """(size, mtime_ns) when read; a change means the file was edited."""


def is_candidate(name: str) -> bool:
    """Command files are `cmd_*.json` at the top of an inbox; dotfiles are temporaries."""
    return name.startswith("cmd_") and name.endswith(".json")


def ignorable(name: str) -> bool:
    """Dotfiles and editor or copy temporaries are never read."""
    return name.startswith(".") or name.endswith(("~", ".swp", ".part", ".tmp"))


def check_inside(agent: AgentDir, path: Path, field: str = "(file)") -> None:
    """A symlink may not lead out of the agent's folder."""
    if not path.is_symlink():
        return
    target = path.resolve()
    if not target.is_relative_to(agent.path.resolve()):
        raise InputFileError(
            path.name,
            field,
            f"symlink leads out of the agent folder (to {target})",
            "copy the file into the inbox instead of linking to it",
        )


def read_command(
    agent: AgentDir, path: Path, *, max_bytes: int, settle: float, now: float | None = None
) -> Accepted | None:
    """Parse and validate one command file.

    Returns None while a file that does not parse yet may still be being written (younger than
    `settle` seconds); raises InputFileError once it is certainly bad.
    """
    name = path.name
    check_inside(agent, path)
    st = path.stat()
    if not os.path.isfile(path):
        raise InputFileError(name, "(file)", "not a regular file", "drop a JSON file")
    if st.st_size > max_bytes:
        raise InputFileError(
            name,
            "(file)",
            f"{st.st_size} bytes is over the limit of {max_bytes}",
            "shorten the command, or raise max_file_bytes in config.yaml",
        )
    data = path.read_bytes()
    signature = (st.st_size, st.st_mtime_ns)
    age = (now if now is not None else time.time()) - st.st_mtime
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if age < settle:
            return None
        raise InputFileError(
            name, "(encoding)", f"not UTF-8 text (byte {exc.start})", "save the file as UTF-8"
        ) from exc
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        if age < settle:
            return None
        problem = "the file is empty" if not text.strip() else f"not valid JSON: {exc}"
        raise InputFileError(name, "(json)", problem, "write one JSON object") from exc
    except RecursionError as exc:
        raise InputFileError(name, "(json)", "nested too deeply", "flatten the structure") from exc
    if not isinstance(raw, dict):
        raise InputFileError(
            name,
            "(json)",
            f"top level is {type(raw).__name__}, not an object",
            f"write one JSON object; {SCHEMA_HINT}",
        )
    try:
        command = Command.model_validate(raw)
    except ValidationError as exc:
        raise validation_to_input_error(name, exc) from exc
    check_targets(name, command, agent.agent_id)
    return Accepted(path, command, fsio.sha256_bytes(data), signature, st.st_ctime)


def validation_to_input_error(name: str, exc: ValidationError) -> InputFileError:
    errors = exc.errors()
    first = errors[0]
    field = ".".join(str(p) for p in first["loc"]) or "(top level)"
    problems = []
    for err in errors:
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        problems.append(f"{loc}: {msg}")
    if first["type"] == "extra_forbidden":
        fix = f"remove the field or correct its spelling; {SCHEMA_HINT}"
    elif first["type"] == "missing":
        fix = f"add the field; {SCHEMA_HINT}"
    else:
        fix = f"correct the value; {SCHEMA_HINT}"
    return InputFileError(name, field, "; ".join(problems), fix)


def check_targets(name: str, command: Command, agent_id: str) -> None:
    """An agent never sends to itself: its own inbox would feed its own commands."""
    lists = [("on_complete.send_to", command.on_complete.send_to)]
    lists += [
        (f"on_complete.send_to_condition.{i}.send_to", c.send_to)
        for i, c in enumerate(command.on_complete.send_to_condition)
    ]
    lists.append(("on_failure.send_to", command.on_failure.send_to))
    for field, targets in lists:
        if agent_id in targets:
            raise InputFileError(
                name,
                field,
                f"{agent_id!r} is the agent running this command",
                "send the result to another agent (or to 'user')",
            )


def quarantine(agent: AgentDir, path: Path, error: InputFileError, *, durable: bool) -> Path:
    """Move a bad file to archive/bad/ with `<name>.error.json` beside it; log it once."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    log.error("rejected %s/inbox/%s: %s", agent.agent_id, path.name, error)
    dest = fsio.move(path, agent.archive / "bad" / f"{stamp}_{path.name}", durable=durable)
    record = {
        "agent_id": agent.agent_id,
        "original_path": str(path),
        "moved_to": str(dest),
        "at": fsio.now_iso(),
        **error.as_record(),
    }
    try:
        fsio.atomic_write_json(dest.with_name(dest.name + ".error.json"), record, durable=durable)
    except OSError as exc:  # a full disk: the file is aside already; the log keeps the reason
        log.error("cannot write the error record of %s (%s)", dest, exc)
    return dest
