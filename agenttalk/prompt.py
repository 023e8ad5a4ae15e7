"""Composing the messages for one command: role prompt and contract, task, criteria, inputs."""

from __future__ import annotations

from dataclasses import dataclass

from agenttalk.llm.reply import contract
from agenttalk.models import AgentProfile, Command


@dataclass(frozen=True)
class InputContent:
    name: str
    sha256: str
    size: int
    text: str
    """What the prompt shows: the content, capped, or a marker for binary files."""
    truncated: bool = False


def cap_text(data: bytes, max_chars: int) -> tuple[str, bool]:
    """Decode as UTF-8; binary gets a marker, long text is cut with a visible marker."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return f"[binary or non-UTF-8 file, {len(data)} bytes: content not shown]", False
    if len(text) <= max_chars:
        return text, False
    rest = len(text) - max_chars
    return text[:max_chars] + f"\n[... truncated: {rest} more characters not shown ...]", True


def compose(
    profile: AgentProfile, command: Command, inputs: list[InputContent], missing: list[str]
) -> list[dict[str, str]]:
    system = f"{profile.prompt.strip()}\n\n{contract(command.score_required)}"
    parts = [f"## Task\n{command.prompt.strip()}"]
    if command.score_required:
        criteria = command.score_criteria or "Score from 0 (worst) to 100 (best)."
        parts.append(f"## Scoring criteria\n{criteria.strip()}")
    if inputs:
        blocks = [f"### {item.name}\n{item.text}" for item in inputs]
        parts.append("## Input files\n" + "\n\n".join(blocks))
    if missing:
        names = "\n".join(f"- {name}" for name in missing)
        parts.append(f"## Missing inputs (not available; work without them)\n{names}")
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": "\n\n".join(parts)},
    ]
