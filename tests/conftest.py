"""Shared test helpers: tiny societies under tmp_path, atomic drops, waiting with deadlines.

Import them in a test module with `from conftest import make_society, wait_until, ...`.
Every helper works on real files; nothing is patched.
"""

from __future__ import annotations

import copy
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import yaml

from agenttalk.daemon import Daemon
from agenttalk.llm import LLMRequest, Provider
from agenttalk.llm.registry import Providers
from agenttalk.society import Society

T = TypeVar("T")

FAKE_SERVICE = "fake"
FAKE_MODEL = "fake-model"

BASE_CONFIG: dict[str, Any] = {
    "heartbeat_seconds": 1.0,
    "settle_seconds": 0.2,
    "durability": "fast",
    "llm": {
        "default": FAKE_SERVICE,
        "services": {FAKE_SERVICE: {"provider": "fake", "model": FAKE_MODEL}},
    },
}
"""What `make_society` writes to config.yaml unless told otherwise: fast, scripted LLM."""


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def profile_for(agent_id: str, **extra: Any) -> dict[str, Any]:
    """A valid profile whose prompt names the agent (see `agent_of`)."""
    return {
        "agent_id": agent_id,
        "name": agent_id.title(),
        "prompt": f"You are {agent_id}.",
        **extra,
    }


def make_society(
    root: Path,
    agents: Iterable[str] = ("alice", "bob"),
    config: Mapping[str, Any] | None = None,
) -> Society:
    """Create `root` with config.yaml (BASE_CONFIG deep-merged with `config`) and agent folders."""
    root.mkdir(parents=True, exist_ok=True)
    data = _merge(BASE_CONFIG, config or {})
    (root / "config.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    for agent_id in agents:
        write_json(root / "agents" / agent_id / "agent_profile.json", profile_for(agent_id))
    return Society(root)


def make_daemon(society: Society, provider: Provider) -> Daemon:
    """A daemon whose every configured service answers with `provider`."""
    providers = Providers(society.config, society.root)
    for name in society.config.llm.services:
        providers.install(name, provider)
    return Daemon(society, providers)


def write_bytes(path: Path, data: bytes) -> Path:
    """Write atomically, as a careful writer would: a dotfile first, then one rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.writing")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path


def write_json(path: Path, obj: Any) -> Path:
    return write_bytes(path, json.dumps(obj, indent=2).encode("utf-8"))


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def drop_command(
    society: Society, agent_id: str, command: Mapping[str, Any], name: str | None = None
) -> Path:
    """Drop `command` into the agent's inbox as `cmd_<command_id>.json` (or `name`)."""
    name = name or f"cmd_{command['command_id']}.json"
    return write_json(society.agent(agent_id).inbox / name, dict(command))


def wait_until(
    predicate: Callable[[], T], timeout: float = 5.0, interval: float = 0.01, what: str = ""
) -> T:
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


@contextmanager
def running_daemon(daemon: Daemon) -> Iterator[threading.Thread]:
    """Run `daemon.run()` in a thread; on exit stop it and assert the thread has ended."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            daemon.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, name="daemon-under-test", daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        daemon.stop()
        thread.join(timeout=10)
        assert not thread.is_alive(), "the daemon thread did not stop"
    assert not errors, f"the daemon raised {errors[0]!r}"


_AGENT_RE = re.compile(r"You are (\S+?)\.")


def agent_of(request: LLMRequest) -> str:
    """The agent a request is for (profiles made by `profile_for` say `You are <id>.`)."""
    match = _AGENT_RE.search(request.messages[0]["content"])
    assert match, "system message names no agent"
    return match.group(1)


def task_of(request: LLMRequest) -> str:
    """The first line of the command's prompt, as composed into the user message."""
    user = request.messages[1]["content"]
    return user.split("## Task\n", 1)[1].splitlines()[0]


def files_under(folder: Path) -> list[str]:
    """Relative paths of all regular files below `folder`, sorted (empty if it is missing)."""
    if not folder.is_dir():
        return []
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def accepted(daemon: Daemon, agent_id: str, command_id: str) -> bool:
    """The running daemon has taken `command_id` of `agent_id` in (pending, waiting or running)."""
    slot = daemon.slots.get(agent_id)
    return slot is not None and any(
        p.accepted.command.command_id == command_id for p in list(slot.pending.values())
    )
