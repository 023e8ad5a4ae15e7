"""Building the provider of each configured service, once, on first use."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import openai

from agenttalk.config import Config, ServiceConfig
from agenttalk.errors import ConfigError
from agenttalk.llm import Provider
from agenttalk.llm.fake import FakeProvider
from agenttalk.llm.openai_provider import OpenAIProvider


def build_provider(name: str, service: ServiceConfig, root: Path) -> Provider:
    if service.provider == "fake":
        if service.replies_file is None:
            return FakeProvider(name=name)
        path = root / service.replies_file
        try:
            replies = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"llm.services.{name}.replies_file: cannot read {path}: {exc}"
            ) from exc
        if not isinstance(replies, list):
            raise ConfigError(f"llm.services.{name}.replies_file: {path} must hold a JSON list")
        return FakeProvider(replies, name=name)
    if service.provider == "local":
        from agenttalk.llm.local import LocalProvider  # the `local` extra is optional

        if service.model_path is not None:
            service = service.model_copy(update={"model_path": str(root / service.model_path)})
        return LocalProvider(name, service)
    return OpenAIProvider(name, service, openai_client(name, service))


def openai_client(name: str, service: ServiceConfig) -> openai.OpenAI:
    """An SDK client with retries off (ours is the one retry layer); the key comes from the env."""
    base_url = service.base_url or os.environ.get("OPENAI_BASE_URL") or None
    key_env = service.api_key_env or "OPENAI_API_KEY"
    api_key = os.environ.get(key_env)
    if not api_key:
        if service.api_key_env:
            raise ConfigError(
                f"llm.services.{name}: the environment variable {key_env} (api_key_env) is not "
                f"set; export {key_env}=<your key>"
            )
        if base_url is None:
            raise ConfigError(
                f"llm.services.{name}: no API key: export OPENAI_API_KEY, or set base_url (or "
                "OPENAI_BASE_URL) to a local OpenAI-compatible server"
            )
        api_key = "no-key"  # a local server that needs none
    return openai.OpenAI(api_key=api_key, base_url=base_url, max_retries=0, timeout=service.timeout)


class Providers:
    """One provider per service name, built lazily and shared by all worker threads."""

    def __init__(self, config: Config, root: Path) -> None:
        self.config = config
        self.root = root
        self._built: dict[str, Provider] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> Provider:
        with self._lock:
            if name not in self._built:
                service = self.config.llm.services.get(name)
                if service is None:
                    raise ConfigError(f"no service {name!r} in config.yaml llm.services")
                self._built[name] = build_provider(name, service, self.root)
            return self._built[name]

    def install(self, name: str, provider: Provider) -> None:
        """Use `provider` for `name` (tests and embedding applications)."""
        with self._lock:
            self._built[name] = provider
