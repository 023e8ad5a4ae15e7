"""AgentTalk's exceptions.

AgentTalkError              a problem to show the user as it is (the CLI exits 1)
├── ConfigError             config.yaml or an agent profile is wrong
│   └── ScenarioError       a discussion scenario is invalid (names every bad field)
├── InputFileError          a dropped file cannot be accepted (names file, field, fix)
└── LLMError                the LLM call failed for good (after the retry layer gave up)
"""

from __future__ import annotations


class AgentTalkError(Exception):
    """Base class: the message is meant for the user."""


class ConfigError(AgentTalkError):
    """config.yaml or an agent profile is invalid."""


class ScenarioError(ConfigError):
    """A discussion scenario is invalid; `problems` holds (field path, message) pairs."""

    def __init__(self, source: str, problems: list[tuple[str, str]]) -> None:
        self.source = source
        self.problems = problems
        listed = "; ".join(f"{field or '(top level)'}: {msg}" for field, msg in problems)
        super().__init__(f"scenario {source}: {listed}")

    @property
    def fields(self) -> list[str]:
        """The dotted paths of the offending fields, e.g. `flow.phases.1.max_rounds`."""
        return [field for field, _ in self.problems]


class InputFileError(AgentTalkError):
    """A file dropped into an inbox cannot be accepted."""

    def __init__(self, file: str, field: str, problem: str, fix: str) -> None:
        self.file = file
        self.field = field
        self.problem = problem
        self.fix = fix
        super().__init__(f"{file}: {field}: {problem} (fix: {fix})")

    def as_record(self) -> dict[str, str]:
        return {"file": self.file, "field": self.field, "error": self.problem, "fix": self.fix}


class LLMError(AgentTalkError):
    """The LLM call failed and will not be retried further; `history` lists retried errors."""

    def __init__(self, message: str, history: list[str] | None = None) -> None:
        super().__init__(message)
        self.history = history or []


class ContextLengthError(LLMError):
    """The prompt does not fit the model's context window; retrying it unchanged is useless."""


class ServiceAuthError(LLMError):
    """The service rejected the credentials; its commands stay pending until the key works."""

    def __init__(self, service: str, message: str) -> None:
        super().__init__(message)
        self.service = service
