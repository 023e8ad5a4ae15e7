"""Any OpenAI-compatible chat-completions server, through the official SDK."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import openai

from agenttalk.config import ServiceConfig
from agenttalk.errors import ContextLengthError, LLMError, ServiceAuthError
from agenttalk.llm import LLMRequest, LLMResponse, Usage
from agenttalk.llm.limits import ServiceGate, estimate_tokens
from agenttalk.llm.retry import call_with_retries

log = logging.getLogger(__name__)


def describe(exc: BaseException) -> str:
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: {exc.message}"
    if isinstance(exc, openai.APITimeoutError):
        return "request timed out"
    if isinstance(exc, openai.APIConnectionError):
        return f"connection error: {exc.__cause__ or exc}"
    return f"{type(exc).__name__}: {exc}"


class OpenAIProvider:
    """Retries belong to `call_with_retries`; the SDK client itself never retries."""

    def __init__(
        self,
        name: str,
        service: ServiceConfig,
        client: openai.OpenAI,
        sleep: Callable[[float], None] = time.sleep,
        gate: ServiceGate | None = None,
    ) -> None:
        self.name = name
        self.service = service
        self.client = client
        self.sleep = sleep
        self.gate = gate or ServiceGate(service)

    def response_format(self, request: LLMRequest) -> dict[str, Any] | None:
        """json_schema where the service supports it, else JSON mode if enabled, else none."""
        if request.response_schema is None:
            return None
        if self.service.supports_json_schema:
            return {
                "type": "json_schema",
                "json_schema": {"name": "agenttalk_reply", "schema": request.response_schema},
            }
        if self.service.json_mode:
            return {"type": "json_object"}
        return None

    def _create(self, kwargs: dict[str, Any], estimate: int) -> Any:
        """One HTTP attempt, admitted by the service's concurrency and rate limits."""
        with self.gate.admit(estimate) as actual:
            completion = self.client.chat.completions.create(**kwargs)
            if completion.usage is not None:
                actual.append(completion.usage.total_tokens or estimate)
            return completion

    def complete(self, request: LLMRequest) -> LLMResponse:
        history: list[str] = []
        kwargs: dict[str, Any] = {"model": request.model, "messages": request.messages}
        if request.temperature is not None:
            kwargs["temperature"] = request.temperature
        if request.max_tokens is not None:
            kwargs["max_tokens"] = request.max_tokens
        response_format = self.response_format(request)
        if response_format is not None:
            kwargs["response_format"] = response_format
        estimate = estimate_tokens(request)

        def on_retry(exc: BaseException, delay: float) -> None:
            history.append(f"{describe(exc)} (retrying in {delay:.2f}s)")
            log.warning("%s: %s; retrying in %.2fs", self.name, describe(exc), delay)

        started = time.monotonic()
        try:
            completion = call_with_retries(
                lambda: self._create(kwargs, estimate),
                max_retries=self.service.max_retries,
                base=self.service.retry_base_seconds,
                cap=self.service.retry_max_seconds,
                on_retry=on_retry,
                sleep=self.sleep,
            )
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            raise ServiceAuthError(
                self.name,
                f"{self.name}: {describe(exc)}; check the API key "
                f"({self.service.api_key_env or 'OPENAI_API_KEY'})",
            ) from exc
        except openai.BadRequestError as exc:
            if exc.code == "context_length_exceeded":
                raise ContextLengthError(f"{self.name}: {describe(exc)}", history) from exc
            raise LLMError(f"{self.name}: {describe(exc)}", history) from exc
        except openai.OpenAIError as exc:
            raise LLMError(f"{self.name}: {describe(exc)}", history) from exc
        latency = time.monotonic() - started
        if not completion.choices:
            raise LLMError(f"{self.name}: the reply has no choices", history)
        text = completion.choices[0].message.content or ""
        usage = Usage()
        if completion.usage is not None:
            usage = Usage(
                prompt_tokens=completion.usage.prompt_tokens or 0,
                completion_tokens=completion.usage.completion_tokens or 0,
                total_tokens=completion.usage.total_tokens or 0,
            )
        return LLMResponse(
            text=text,
            model=completion.model or request.model,
            usage=usage,
            latency_s=latency,
            transient_errors=history,
        )
