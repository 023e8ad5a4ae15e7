"""`agenttalk init`: a working example society (config, agents, a plan), ready to run."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

from agenttalk.errors import AgentTalkError
from agenttalk.society import USER_AGENT, Society
from agenttalk.submit import load_plan, submit_plan

EXAMPLE_PLAN = "plans/consensus_review.json"


def example_dir() -> Path:
    return Path(str(resources.files("agenttalk") / "example"))


def init_society(target: Path, *, submit: bool = True) -> list[Path]:
    """Copy the example society into `target` and (by default) submit its plan."""
    if (target / "config.yaml").exists() or (target / "agents").exists():
        raise AgentTalkError(f"{target} already holds a society (config.yaml or agents/)")
    target.mkdir(parents=True, exist_ok=True)
    source = example_dir()
    shutil.copy(source / "config.yaml", target / "config.yaml")
    shutil.copytree(source / "agents", target / "agents")
    shutil.copytree(source / "plans", target / "plans")
    shutil.copytree(source / "sessions", target / "sessions")
    for agent in [*(target / "agents").iterdir(), target / "agents" / USER_AGENT]:
        (agent / "inbox").mkdir(parents=True, exist_ok=True)
        (agent / "outbox").mkdir(parents=True, exist_ok=True)
    if not submit:
        return []
    society = Society(target)
    return submit_plan(society, load_plan(target / EXAMPLE_PLAN), EXAMPLE_PLAN)
