"""The one contract every LLM provider meets: a request of messages in, text and usage out."""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, Field


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
        )


class LLMRequest(BaseModel):
    messages: list[dict[str, str]]
    model: str
    temperature: float | None = None
    max_tokens: int | None = None
    response_schema: dict[str, Any] | None = None
    """The JSON Schema the reply must meet (providers may use it to constrain output)."""


class LLMResponse(BaseModel):
    text: str
    model: str
    usage: Usage = Field(default_factory=Usage)
    latency_s: float = 0.0
    transient_errors: list[str] = Field(default_factory=list)
    """Errors of HTTP attempts that were retried before this response."""


class Clock(Protocol):
    """Time for rate limits; tests inject a fake one instead of sleeping."""

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class Provider(Protocol):
    """An LLM service. Raises `agenttalk.errors.LLMError` when the call fails for good."""

    name: str

    def complete(self, request: LLMRequest) -> LLMResponse: ...
