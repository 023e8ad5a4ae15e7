"""config.yaml: daemon settings and the named LLM services."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agenttalk.errors import ConfigError


class ServiceConfig(BaseModel):
    """One LLM service: an OpenAI-compatible server, the embedded local model, or the fake."""

    model_config = ConfigDict(extra="forbid")

    provider: Literal["openai", "local", "fake"] = "openai"
    """`openai`: any OpenAI-compatible server; `local`: Gemma 3 270M in-process (the `local`
    extra); `fake`: scripted replies (tests, dry runs; never chosen implicitly)."""
    base_url: str | None = None
    """API base URL; unset means the SDK's OPENAI_BASE_URL, else api.openai.com."""
    model: str = "gpt-4o-mini"
    """Model name sent with every request."""
    api_key_env: str | None = None
    """Name of the environment variable holding the key; unset means OPENAI_API_KEY."""
    timeout: float = 120.0
    """Seconds to wait for one HTTP response."""
    max_retries: int = Field(default=5, ge=0, le=20)
    """Retries of transient errors (408, 409, 429, 5xx, timeouts, connection errors)."""
    retry_base_seconds: float = Field(default=1.0, ge=0)
    """First backoff delay; doubles per retry, with jitter, unless the server sends Retry-After."""
    retry_max_seconds: float = Field(default=60.0, ge=0)
    """Upper bound of one backoff delay, also for Retry-After."""
    max_concurrency: int | None = Field(default=None, ge=1)
    """Calls in flight to this service at once; unset means only the global cap applies."""
    rpm: int | None = Field(default=None, ge=1)
    """Requests per minute allowed (token bucket); a command waits for capacity."""
    tpm: int | None = Field(default=None, ge=1)
    """Tokens per minute allowed (estimated before the call, corrected by the reported usage)."""
    supports_json_schema: bool = False
    """Send the reply schema as `response_format` (json_schema); else the prompt carries it."""
    json_mode: bool = False
    """Send `response_format: json_object` when json_schema is not supported."""
    capabilities: list[str] = Field(default_factory=list)
    """Tags such as `reasoning`, `coding`, `cheap`; profiles may ask for them."""
    price_input_per_mtok: float = Field(default=0.0, ge=0)
    """Price per million prompt tokens, for cost estimates and money budgets."""
    price_output_per_mtok: float = Field(default=0.0, ge=0)
    """Price per million completion tokens."""
    model_path: str | None = None
    """local only: a GGUF file; unset means the Gemma 3 270M weights of the `local` extra."""
    context_window: int = Field(default=4096, ge=256)
    """local only: context size in tokens."""
    replies_file: str | None = None
    """fake only: a JSON file with a list of replies (strings or objects), used in order."""

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (
            prompt_tokens * self.price_input_per_mtok
            + completion_tokens * self.price_output_per_mtok
        ) / 1_000_000


def _default_services() -> dict[str, ServiceConfig]:
    return {
        "openai": ServiceConfig(),
        "local": ServiceConfig(provider="local", model="gemma-3-270m", capabilities=["cheap"]),
    }


class LLMConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    default: str | None = None
    """The service for agents whose profile names none; unset means automatic: an `openai`
    service when OPENAI_API_KEY or OPENAI_BASE_URL is set, else `local` when installed."""
    services: dict[str, ServiceConfig] = Field(default_factory=_default_services)
    """Named services, in order of preference for capability matching."""

    @model_validator(mode="after")
    def _default_exists(self) -> LLMConfig:
        if self.default is not None and self.default not in self.services:
            names = ", ".join(sorted(self.services)) or "none"
            raise ValueError(
                f"llm.default is {self.default!r} but llm.services has only: {names}; "
                "name one of them or add the service"
            )
        return self


class Limit(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_tokens: int | None = Field(default=None, ge=1)
    """Total tokens (prompt + completion) that may be spent."""
    max_cost: float | None = Field(default=None, gt=0)
    """Money that may be spent, in the unit of the services' prices."""


class BudgetConfig(Limit):
    """Spending limits; once reached, further commands fail with "budget exceeded"."""

    plans: dict[str, Limit] = Field(default_factory=dict)
    """Limits per plan_id, on top of the global one."""


class Config(BaseModel):
    """Settings of one society root."""

    model_config = ConfigDict(extra="forbid")

    heartbeat_seconds: float = Field(default=10.0, gt=0)
    """Full rescan interval; file events wake the daemon earlier."""
    max_concurrency: int = Field(default=8, ge=1, le=1024)
    """LLM calls in flight across all agents (one command per agent at a time; up to twice as
    many commands may be busy with their files meanwhile)."""
    default_timeout: float = Field(default=3600.0, gt=0)
    """Seconds a command waits for its inputs when it sets no `timeout`."""
    settle_seconds: float = Field(default=1.0, ge=0)
    """A hand-copied file that does not parse yet counts as complete once unchanged this long."""
    max_file_bytes: int = Field(default=1_000_000, ge=1024)
    """Largest command or input file accepted; bigger command files are moved aside."""
    max_input_chars: int = Field(default=20_000, ge=100)
    """Characters of one input file put into the prompt; the rest is cut with a visible marker."""
    min_free_bytes: int = Field(default=5_000_000, ge=0)
    """Free disk space below which no new command starts (it waits, and an alert is written)."""
    durability: Literal["safe", "fast"] = "safe"
    """`safe` fsyncs files and directories so a crash loses nothing accepted; `fast` skips fsync."""
    llm: LLMConfig = Field(default_factory=LLMConfig)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)


def load_config(root: Path) -> Config:
    """Read `root/config.yaml`; a missing file means all defaults."""
    path = root / "config.yaml"
    if not path.exists():
        return Config()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {format_validation_error(exc)}") from exc


def format_validation_error(exc: ValidationError) -> str:
    """One line per problem: `field.path: message`."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field; remove it or check its spelling"
        parts.append(f"{loc}: {msg}")
    return "; ".join(parts)
