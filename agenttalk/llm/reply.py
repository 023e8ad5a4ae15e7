"""Getting a JSON reply (`{result, score?, score_explanation?}` or any schema): extraction,
validation, repair."""

from __future__ import annotations

import functools
import json
import re
from typing import Any, Literal

import jsonschema
from pydantic import BaseModel, Field

from agenttalk.errors import ContextLengthError, LLMError, ServiceAuthError
from agenttalk.llm import LLMRequest, Provider, Usage

MAX_REPAIRS = 2
_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


def reply_schema(score_required: bool) -> dict[str, Any]:
    """`score` is required exactly when the command asks for one."""
    return {
        "type": "object",
        "properties": {
            "result": {"not": {"type": "null"}},
            "score": {"type": "number", "minimum": 0, "maximum": 100},
            "score_explanation": {"type": "string"},
        },
        "required": ["result", "score", "score_explanation"] if score_required else ["result"],
    }


def contract(score_required: bool) -> str:
    # Described in words, not as a JSON example: small models copy an example's placeholders.
    keys = '"result": your answer to the task, as text'
    if score_required:
        keys += (
            '; "score": a number from 0 to 100 following the scoring criteria; '
            '"score_explanation": one sentence saying why'
        )
    return f"Reply with only one JSON object with these keys: {keys}."


def extract_json(text: str) -> Any:
    """Parse the reply, tolerating a code fence or prose around one JSON object."""
    stripped = text.strip()
    candidates = [stripped]
    candidates += [m.group(1).strip() for m in _FENCE.finditer(text)]
    start, end = stripped.find("{"), stripped.rfind("}")
    if start != -1 and end > start:
        candidates.append(stripped[start : end + 1])
    error: ValueError | None = None
    for candidate in candidates:
        try:
            return json.loads(candidate, strict=False)  # raw newlines inside strings are fine
        except ValueError as exc:
            error = error or exc
    raise ValueError(f"the reply is not JSON ({error})")


@functools.cache
def _validator(schema_json: str) -> jsonschema.protocols.Validator:
    """Building a validator checks the schema itself; that is worth doing once per schema."""
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def validate_reply(text: str, schema: dict[str, Any]) -> dict[str, Any]:
    data = extract_json(text)
    try:
        error = jsonschema.exceptions.best_match(
            _validator(json.dumps(schema, sort_keys=True)).iter_errors(data)
        )
        if error is not None:
            raise error
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "the reply"
        raise ValueError(f"{where}: {exc.message}") from exc
    assert isinstance(data, dict)
    return data


class Attempt(BaseModel):
    number: int
    messages_added: list[dict[str, str]]
    """Messages sent in this attempt beyond those of the attempt before (all, for the first)."""
    raw_reply: str | None = None
    error: str | None = None
    transient_errors: list[str] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    latency_s: float = 0.0
    model: str | None = None


class Outcome(BaseModel):
    """What the LLM produced for one command; persisted before anything is delivered."""

    status: Literal["ok", "failed"]
    reply: dict[str, Any] | None = None
    error: str | None = None
    service: str
    model: str
    attempts: list[Attempt] = Field(default_factory=list)
    cost: float = 0.0
    """Estimated from the service's prices and the reported usage."""

    @property
    def usage(self) -> Usage:
        total = Usage()
        for attempt in self.attempts:
            total = total + attempt.usage
        return total


def ask_structured(
    provider: Provider, request: LLMRequest, *, score_required: bool, max_repairs: int = MAX_REPAIRS
) -> Outcome:
    return ask_json(
        provider,
        request,
        reply_schema(score_required),
        instructions=contract(score_required),
        max_repairs=max_repairs,
    )


def ask_json(
    provider: Provider,
    request: LLMRequest,
    schema: dict[str, Any],
    *,
    instructions: str,
    max_repairs: int = MAX_REPAIRS,
) -> Outcome:
    """Ask for one JSON object meeting `schema`; a bad reply is sent back with the error and
    `instructions` (the expected format in words) up to `max_repairs` times."""
    request = request.model_copy(update={"response_schema": schema})
    attempts: list[Attempt] = []
    added = list(request.messages)
    for number in range(1, max_repairs + 2):
        attempt = Attempt(number=number, messages_added=added)
        attempts.append(attempt)
        try:
            response = provider.complete(request)
        except (ServiceAuthError, ContextLengthError):
            raise  # the caller decides: keep the command pending, or shrink the prompt
        except LLMError as exc:
            attempt.error = str(exc)
            attempt.transient_errors = exc.history
            return Outcome(
                status="failed",
                error=str(exc),
                service=provider.name,
                model=request.model,
                attempts=attempts,
            )
        attempt.raw_reply = response.text
        attempt.usage = response.usage
        attempt.latency_s = round(response.latency_s, 4)
        attempt.transient_errors = response.transient_errors
        attempt.model = response.model
        try:
            reply = validate_reply(response.text, schema)
        except ValueError as exc:
            attempt.error = str(exc)
            added = [
                {"role": "assistant", "content": response.text},
                {"role": "user", "content": f"Your reply could not be used: {exc}. {instructions}"},
            ]
            request = request.model_copy(update={"messages": request.messages + added})
            continue
        return Outcome(
            status="ok",
            reply=reply,
            service=provider.name,
            model=response.model,
            attempts=attempts,
        )
    return Outcome(
        status="failed",
        error=f"the reply was not valid after {max_repairs} repair attempts: {attempts[-1].error}",
        service=provider.name,
        model=request.model,
        attempts=attempts,
    )
