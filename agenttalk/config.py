"""config.yaml: daemon settings and the named LLM services."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agenttalk.errors import ConfigError


class ServiceConfig(BaseModel):
    """One LLM service, reached through an OpenAI-compatible API (or the scripted fake)."""

    model_config = ConfigDict(extra="forbid")

    provider: Literal["openai", "fake"] = "openai"
    """`openai`: any OpenAI-compatible server; `fake`: scripted replies (tests, dry runs)."""
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
    replies_file: str | None = None
    """fake only: a JSON file with a list of replies (strings or objects), used in order."""


class LLMConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    default: str = "openai"
    """The service used by agents whose profile names none."""
    services: dict[str, ServiceConfig] = Field(default_factory=lambda: {"openai": ServiceConfig()})
    """Named services; an agent profile picks one with `llm.service`."""

    @model_validator(mode="after")
    def _default_exists(self) -> LLMConfig:
        if self.default not in self.services:
            names = ", ".join(sorted(self.services)) or "none"
            raise ValueError(
                f"llm.default is {self.default!r} but llm.services has only: {names}; "
                "name one of them or add the service"
            )
        return self


class Config(BaseModel):
    """Settings of one society root."""

    model_config = ConfigDict(extra="forbid")

    heartbeat_seconds: float = Field(default=10.0, gt=0)
    """Full rescan interval; file events wake the daemon earlier."""
    max_concurrency: int = Field(default=8, ge=1, le=1024)
    """Commands running at once across all agents (one per agent at a time)."""
    default_timeout: float = Field(default=3600.0, gt=0)
    """Seconds a command waits for its inputs when it sets no `timeout`."""
    settle_seconds: float = Field(default=1.0, ge=0)
    """A hand-copied file that does not parse yet counts as complete once unchanged this long."""
    max_file_bytes: int = Field(default=1_000_000, ge=1024)
    """Largest command or input file accepted; bigger command files are moved aside."""
    max_input_chars: int = Field(default=20_000, ge=100)
    """Characters of one input file put into the prompt; the rest is cut with a visible marker."""
    durability: Literal["safe", "fast"] = "safe"
    """`safe` fsyncs files and directories so a crash loses nothing accepted; `fast` skips fsync."""
    llm: LLMConfig = Field(default_factory=LLMConfig)


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
