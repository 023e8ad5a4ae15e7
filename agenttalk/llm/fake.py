"""A scripted LLM for tests and explicit dry runs (`provider: fake`); never chosen implicitly."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

from agenttalk.errors import LLMError
from agenttalk.llm import LLMRequest, LLMResponse, Usage

Script = Sequence[str | dict[str, Any]] | Callable[[LLMRequest], str | dict[str, Any]]


DRY_RUN_WORDS = {"intent": "speak", "tone": "calm"}
"""Values a dry run gives string fields whose schema allows only certain words."""


def dry_run_reply(request: LLMRequest) -> dict[str, Any]:
    """The reply used when no script is given: it names the task, passes any score check, and
    meets the reply schema the request carries (a discussion turn's, or the moderator's)."""
    lines = request.messages[-1]["content"].strip().splitlines()
    task = next((line for line in lines if line.strip() and not line.startswith("#")), "")[:120]
    schema = request.response_schema or {}
    properties: dict[str, Any] = schema.get("properties", {})
    if not properties or "result" in properties:
        return {"result": f"[dry run] {task}", "score": 100, "score_explanation": "dry run"}
    reply: dict[str, Any] = {}
    for name, prop in properties.items():
        kinds = prop.get("type")
        if "const" in prop:
            reply[name] = prop["const"]
        elif kinds == "number":
            reply[name] = prop.get("maximum", 3)
        elif name in DRY_RUN_WORDS:
            reply[name] = DRY_RUN_WORDS[name]
        elif kinds == "string" or name in schema.get("required", []):
            reply[name] = f"[dry run] {task}"
    return reply


class FakeProvider:
    """Replies from a list (in order) or a function of the request; keeps every request."""

    def __init__(self, script: Script | None = None, name: str = "fake") -> None:
        self.name = name
        self._script: Script = script if script is not None else dry_run_reply
        self._next = 0
        self._lock = threading.Lock()
        self.history: list[LLMRequest] = []

    def complete(self, request: LLMRequest) -> LLMResponse:
        script = self._script
        with self._lock:
            self.history.append(request)
            if not callable(script):
                if self._next >= len(script):
                    raise LLMError(f"{self.name}: the script has no reply left")
                reply = script[self._next]
                self._next += 1
        if callable(script):
            # Outside the lock: agents run in parallel, as with a real service.
            reply = script(request)
        text = reply if isinstance(reply, str) else json.dumps(reply)
        words = sum(len(m["content"].split()) for m in request.messages)
        usage = Usage(
            prompt_tokens=words,
            completion_tokens=len(text.split()),
            total_tokens=words + len(text.split()),
        )
        return LLMResponse(text=text, model=request.model, usage=usage)
