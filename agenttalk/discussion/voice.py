"""The moderator's voice: template lines, rephrased by an LLM when the moderator's profile names
a service (`"llm": {"service": ...}` in `agents/moderator/agent_profile.json`).

It phrases what the controller has already decided and never decides anything: its text goes
only to the event log and the transcript. Each LLM line is kept in `outbox/<session>/voice.jsonl`
under a key of the step, so a resumed session replays the same words without asking again. Any
LLM failure falls back to the template line.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agenttalk import jsonlines
from agenttalk.errors import LLMError
from agenttalk.llm import LLMRequest, Provider
from agenttalk.llm.reply import Outcome, ask_json

log = logging.getLogger(__name__)

MAX_LINE_CHARS = 1500
FACTS_CHARS = 4000
VOICE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"text": {"type": "string", "pattern": r"\S", "maxLength": MAX_LINE_CHARS}},
    "required": ["text"],
}
VOICE_FORMAT = 'Reply with only one JSON object: "text": the line, in plain prose.'
SYSTEM = (
    "You are the voice of a discussion's moderator. The moderator has already decided what "
    "happens; you only phrase it. Never change who speaks, the phase, the outcome or any number, "
    "and never take sides. Be brief and neutral."
)


@dataclass(frozen=True)
class VoiceLLM:
    provider: Provider
    model: str
    on_outcome: Callable[[Outcome], None] | None = None
    """Told of every outcome, e.g. to count its tokens in the usage ledger."""


class Voice:
    def __init__(self, cache: Path, llm: VoiceLLM | None = None, *, durable: bool = True) -> None:
        self.cache = cache
        self.llm = llm
        self.durable = durable
        self._said: dict[str, str] = {}
        if cache.exists():
            jsonlines.repair_tail(cache, durable=durable)  # drop a line cut by a crash
        for line in jsonlines.iter_forward(cache):
            try:
                entry = json.loads(line)
                self._said[str(entry["key"])] = str(entry["text"])
            except (ValueError, KeyError, TypeError):
                continue

    def line(self, key: str, kind: str, draft: str, facts: str = "") -> str:
        """The moderator's `kind` line (opening, summary, ...) whose template text is `draft`."""
        if self.llm is None:
            return draft
        if key in self._said:
            return self._said[key]
        text = self._ask(self.llm, kind, draft, facts) or draft
        entry = json.dumps({"key": key, "text": text}, ensure_ascii=False)
        jsonlines.append(self.cache, entry.encode() + b"\n", durable=self.durable)
        self._said[key] = text
        return text

    def _ask(self, llm: VoiceLLM, kind: str, draft: str, facts: str) -> str | None:
        user = f"Write the moderator's {kind}. It must say what this draft says:\n{draft}"
        if facts:
            user += f"\n\nWhat was said (for a summary, keep each speaker's point):\n{facts}"
        request = LLMRequest(
            messages=[
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"{user[:FACTS_CHARS]}\n\n{VOICE_FORMAT}"},
            ],
            model=llm.model,
            temperature=0.3,
            max_tokens=400 if kind == "summary" else 150,
        )
        try:
            outcome = ask_json(llm.provider, request, VOICE_SCHEMA, instructions=VOICE_FORMAT)
        except LLMError as exc:
            log.warning("moderator voice: %s; using the template line", exc)
            return None
        if llm.on_outcome is not None:
            llm.on_outcome(outcome)
        if outcome.status != "ok" or outcome.reply is None:
            log.warning("moderator voice: %s; using the template line", outcome.error)
            return None
        return " ".join(str(outcome.reply["text"]).split())[:MAX_LINE_CHARS] or None
