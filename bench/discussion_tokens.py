"""Prompt tokens per turn of a long discussion: flat, because a prompt never carries the history.

    .venv/bin/python bench/discussion_tokens.py [--turns 200] [--participants 4]

Runs one session of a single long free-discussion phase with a scripted fake LLM (every speech
about 150 words) and reports, for speech turns 10 to 200, the prompt tokens (characters / 4 of
the request messages) of the requests made for that turn: the mean of the intent requests and
the speech request. For comparison it prints what a full-history prompt would carry: the
tokens of every reply so far added to the turn's first prompt.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import yaml
from machine import print_machine

from agenttalk.daemon import Daemon
from agenttalk.llm import LLMRequest
from agenttalk.llm.fake import FakeProvider
from agenttalk.llm.registry import Providers
from agenttalk.society import Society

REPORT_AT = (10, 20, 50, 100, 150, 200)


def scenario(turns: int) -> dict[str, Any]:
    return {
        "id": "long",
        "name": "Long discussion",
        "description": "One long free discussion.",
        "version": "1.0",
        "alignment": {
            "type": "opposing",
            "factions": [
                {"id": "pro", "name": "For", "description": "For the motion."},
                {"id": "con", "name": "Against", "description": "Against the motion."},
            ],
        },
        "flow": {
            "phases": [
                {
                    "id": "free",
                    "type": "free_discussion",
                    "name": "Free discussion",
                    "description": "Anyone may speak.",
                    "max_rounds": turns,
                    "allow_interrupt": False,
                    "speaking_order": "free",
                    "end_condition": "max_rounds",
                    "force_summary": False,
                }
            ]
        },
        "moderator_policy": {"intervention_level": 0, "max_idle_rounds": 2, "max_steps": 4 * turns},
    }


def build(root: Path, turns: int, participants: int) -> Society:
    ids = [f"agent_{n}" for n in range(participants)]
    (root / "config.yaml").write_text(
        yaml.safe_dump(
            {
                "durability": "fast",
                "llm": {"default": "fake", "services": {"fake": {"provider": "fake"}}},
            }
        )
    )
    for agent_id in [*ids, "moderator"]:
        folder = root / "agents" / agent_id
        folder.mkdir(parents=True)
        profile: dict[str, Any] = {"agent_id": agent_id, "name": agent_id, "prompt": "p"}
        if agent_id == "moderator":
            profile = {"agent_id": agent_id, "name": "Moderator", "kind": "moderator"}
        else:
            profile["role"] = "debater"
            profile["persona_description"] = "A debater who argues from data."
        (folder / "agent_profile.json").write_text(json.dumps(profile))
    session = {
        "session_id": "long",
        "topic": "Should remote work become the norm?",
        "participants": ids,
        "scenario": scenario(turns),
    }
    inbox = root / "agents" / "moderator" / "inbox"
    inbox.mkdir()
    (inbox / "session_long.json").write_text(json.dumps(session))
    return Society(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--participants", type=int, default=4)
    args = parser.parse_args()

    turn = 1
    per_turn: dict[int, list[int]] = {}
    history_chars = [0]
    full_history: dict[int, int] = {}
    """Turn -> tokens of its first prompt had it carried every reply so far (a full history)."""

    def script(request: LLMRequest) -> dict[str, Any]:
        nonlocal turn
        chars = sum(len(m["content"]) for m in request.messages)
        per_turn.setdefault(turn, []).append(math.ceil(chars / 4))
        if turn not in full_history:
            full_history[turn] = math.ceil(chars / 4) + math.ceil(history_chars[0] / 4)
        user = request.messages[-1]["content"]
        reply: dict[str, Any]
        if '"type": "INTENT"' in user:
            reply = {"type": "INTENT", "intent": "speak", "urgency": 1 + turn % 5, "topic": "x"}
        else:
            words = " ".join(f"word{(turn * 7 + i) % 101}" for i in range(150))
            reply = {"type": "SPEECH", "content": f"Turn {turn}: {words}", "tone": "calm"}
            turn += 1
        history_chars[0] += len(json.dumps(reply))
        return reply

    with tempfile.TemporaryDirectory() as tmp:
        society = build(Path(tmp), args.turns, args.participants)
        providers = Providers(society.config, society.root)
        providers.install("fake", FakeProvider(script))
        # The real path: the daemon runs the session; each turn is a command in an inbox.
        Daemon(society, providers).run(until_idle=True, watch=False)

    print_machine()
    print(f"{args.participants} participants, {args.turns} speech turns, 150-word speeches")
    print(f"{'turn':>5} {'prompt tokens/request (mean)':>30} {'max':>6} {'full history':>13}")
    for t in REPORT_AT:
        if t > args.turns or t not in per_turn:
            continue
        values = per_turn[t]
        mean = sum(values) / len(values)
        full = full_history[t]
        print(f"{t:>5} {mean:>30.0f} {max(values):>6} {full:>13}")
    steady = [sum(per_turn[t]) / len(per_turn[t]) for t in range(10, args.turns + 1)]
    spread = (max(steady) - min(steady)) / min(steady)
    print(
        f"turns 10-{args.turns}: mean prompt {min(steady):.0f}-{max(steady):.0f} tokens "
        f"(spread {spread:.1%})"
    )


if __name__ == "__main__":
    main()
