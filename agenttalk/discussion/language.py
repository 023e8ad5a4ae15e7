"""The moderator's words: opening, closing, phase summaries, questions and the transcript.

Deterministic templates: they phrase what the controller decided and never decide anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from agenttalk.moderator import ModeratorDecision, Phase

SUMMARY_POINT_CHARS = 160


@dataclass(frozen=True)
class Line:
    """One transcript line: who said what, in which phase."""

    phase: str
    speaker: str
    kind: str
    """`speech`, `summary`, `vote` or `moderator`."""
    text: str


def opening(topic: str, participants: list[str], first: Phase) -> str:
    return (
        f"Welcome. Today's topic: {topic}. Participants: {', '.join(participants)}. "
        f"We begin with the phase '{first.name}'."
    )


def closing(reason: str | None, speeches: int) -> str:
    return f"The discussion is closed ({reason or 'done'}) after {speeches} speeches. Thank you."


def summary(phase: Phase, speeches: list[Line]) -> str:
    """A phase summary from the phase's speeches as the runner recorded them."""
    if not speeches:
        return f"Summary of '{phase.name}': nobody spoke in this phase."
    counts: dict[str, int] = {}
    for line in speeches:
        counts[line.speaker] = counts.get(line.speaker, 0) + 1
    who = ", ".join(f"{speaker} ({n})" for speaker, n in counts.items())
    points = []
    for line in speeches[-4:]:
        text = " ".join(line.text.split())
        if len(text) > SUMMARY_POINT_CHARS:
            text = text[:SUMMARY_POINT_CHARS] + "..."
        points.append(f"{line.speaker}: {text}")
    return (
        f"Summary of '{phase.name}': {len(speeches)} speeches by {who}. "
        f"Latest points - {' | '.join(points)}"
    )


def announce(decision: ModeratorDecision) -> str:
    """The moderator's line for a decision that gives nobody the floor by itself."""
    target = decision.target_agent_id
    reason = decision.reason or ""
    action = decision.action.value
    if action == "SWITCH_PHASE":
        back = " (rolling back: not enough consensus)" if decision.metadata.get("rollback") else ""
        return f"We move to the phase '{decision.next_phase_id}'{back}."
    if action == "PROMPT_QUESTION":
        return f"A question to {target or 'everyone'}: {reason}"
    if action == "CALL_VOTE":
        return "Consensus vote: please score your agreement from 0 to 100."
    if target:
        return f"{action.replace('_', ' ').lower()} {target}: {reason}"
    return f"{action.replace('_', ' ').lower()}: {reason}"


def transcript(session_id: str, topic: str, participants: list[str], lines: list[Line]) -> str:
    out = [
        f"# Discussion {session_id}",
        "",
        f"**Topic:** {topic}",
        "",
        f"**Participants:** {', '.join(participants)}",
    ]
    phase = None
    for line in lines:
        if line.phase != phase:
            phase = line.phase
            out += ["", f"## Phase: {phase}", ""]
        if line.kind == "summary":
            out += ["", f"> **Phase summary.** {line.text}", ""]
        elif line.kind == "speech":
            out.append(f"**{line.speaker}:** {line.text}")
            out.append("")
        elif line.kind == "vote":
            out.append(f"- vote by {line.speaker}: {line.text}")
        else:
            out.append(f"*Moderator: {line.text}*")
            out.append("")
    return "\n".join(out).rstrip() + "\n"
