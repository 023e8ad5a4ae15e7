"""The files that cross a boundary: commands, agent profiles and delivered messages."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from agenttalk.templates import (
    FAILURE_FIELDS,
    MESSAGE_FIELDS,
    OUTPUT_NAME_FIELDS,
    check_template,
    render,
)

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_UNSAFE_NAME_CHARS = re.compile(r"[/\\\x00]")


def check_identifier(value: str) -> str:
    if not _ID_RE.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a valid id: use letters, digits, '_', '-' or '.', "
            "starting with a letter or digit, at most 128 characters"
        )
    return value


Identifier = Annotated[str, AfterValidator(check_identifier)]


def check_file_name(name: str) -> str:
    """A single file name inside a folder: no path separators, no leading dot, no '..'."""
    if not name or _UNSAFE_NAME_CHARS.search(name) or name.startswith(".") or ".." in name:
        raise ValueError(
            f"{name!r} must be a plain file name inside the inbox "
            "(no '/', '\\', '..', absolute path or leading dot)"
        )
    return name


def _pattern(value: str) -> str:
    return check_file_name(value)


InputPattern = Annotated[str, AfterValidator(_pattern)]


class SendCondition(BaseModel):
    """Targets added when the score reaches `min_score` (the highest reached condition wins)."""

    model_config = ConfigDict(extra="forbid")

    min_score: float = Field(ge=0, le=100)
    send_to: list[Identifier] = Field(min_length=1)


class OnComplete(BaseModel):
    """Where the result goes."""

    model_config = ConfigDict(extra="forbid")

    send_to: list[Identifier] = Field(default_factory=list)
    """Agents that always receive the result."""
    send_to_condition: list[SendCondition] = Field(default_factory=list)
    """Score branches; needs `score_required: true`."""
    message_template: str = "{result}"
    """The message text: {result} {score} {score_explanation} {command_id} {plan_id} {agent_id}."""
    output_name: str = "{command_id}_from_{agent_id}.json"
    """File name in the target's inbox: {command_id} {plan_id} {agent_id} {to}."""

    # Field validators, so an error names `on_complete.output_name`, not just `on_complete`.
    @field_validator("message_template")
    @classmethod
    def _message_template(cls, value: str) -> str:
        check_template(value, MESSAGE_FIELDS)
        return value

    @field_validator("output_name")
    @classmethod
    def _output_name(cls, value: str) -> str:
        check_output_name(value)
        return value


class OnFailure(BaseModel):
    """Who hears about a failure."""

    model_config = ConfigDict(extra="forbid")

    send_to: list[Identifier] = Field(default_factory=list)
    message_template: str = "Command {command_id} of {agent_id} failed: {error}"
    """The failure text: {error} {command_id} {plan_id} {agent_id}."""

    @field_validator("message_template")
    @classmethod
    def _template(cls, value: str) -> str:
        check_template(value, FAILURE_FIELDS)
        return value


def check_output_name(template: str) -> None:
    check_template(template, OUTPUT_NAME_FIELDS)
    sample = render(template, dict.fromkeys(OUTPUT_NAME_FIELDS, "x"))
    check_file_name(sample)


TurnKind = Literal["intent", "speech", "vote"]


class DiscussionTurn(BaseModel):
    """Makes a command a discussion turn: the agent answers from its persona, its own memory and
    what it may see of the session (never the full history), instead of the generic prompt.

    The moderator writes these; the agent executor answers them (`agenttalk.discussion.answer`).
    """

    model_config = ConfigDict(extra="forbid")

    session_id: Identifier
    """The discussion session; its event log gives the visible recent events and summary."""
    turn: TurnKind
    """What is asked: a wish to speak, a speech, or a consensus score (0-100)."""
    topic: str = Field(min_length=1)
    phase_name: str
    phase_type: str
    round: int = Field(ge=1)
    """The current round within the phase."""
    max_rounds: int | None = Field(default=None, ge=1)
    call_reason: str | None = None
    """Set when the moderator called on this agent: why."""
    intended_topic: str | None = None
    """For a speech: what the agent said it wanted to speak about."""
    recent_events_limit: int = Field(default=10, ge=1, le=20)
    """Recent events shown in the prompt (at most 20)."""


class Command(BaseModel):
    """An execution command, `cmd_*.json` (seed PR-007, plus timeout, on_failure, output_name)."""

    model_config = ConfigDict(extra="forbid")

    command_id: Identifier
    plan_id: Identifier = "default"
    """Plan this command belongs to; its inputs come only from this plan (or from no plan)."""
    prompt: str = Field(min_length=1)
    required_inputs: list[InputPattern] = Field(default_factory=list)
    """File names or glob patterns in the inbox; each must match at least one file."""
    wait_for_inputs: bool = True
    """Wait until every input is present; false runs at once and names the missing ones."""
    score_required: bool = False
    score_criteria: str | None = None
    timeout: float | None = Field(default=None, gt=0)
    """Seconds to wait for inputs, from arrival; unset means config `default_timeout`."""
    on_complete: OnComplete = Field(default_factory=OnComplete)
    on_failure: OnFailure = Field(default_factory=OnFailure)
    discussion: DiscussionTurn | None = None
    """Set on the turns a moderator sends; `prompt` then only describes the turn."""

    @model_validator(mode="after")
    def _conditions_need_score(self) -> Command:
        if self.on_complete.send_to_condition and not self.score_required:
            raise ValueError(
                "on_complete.send_to_condition routes by score: set score_required to true"
            )
        return self


class LLMSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    service: str | None = None
    """A service name from config.yaml `llm.services`; unset means by capabilities, else default."""
    capabilities: list[str] = Field(default_factory=list)
    """Tags the service must have; the first service in config order with all of them serves."""
    model: str | None = None
    """Overrides the service's model."""
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, ge=1)


class Stance(BaseModel):
    """The side a discussion participant argues for."""

    model_config = ConfigDict(extra="forbid")

    faction_id: str = Field(min_length=1)
    """The faction, e.g. `pro` or `con`."""
    position: str = Field(min_length=1)
    """The position in one sentence."""


class AgentProfile(BaseModel):
    """`agents/<id>/agent_profile.json`."""

    model_config = ConfigDict(extra="forbid")

    agent_id: Identifier
    name: str
    kind: Literal["llm", "event_log", "moderator"] = "llm"
    """`llm`: runs commands with a model; `event_log` and `moderator` are the system agents."""
    prompt: str = ""
    """The agent's own role prompt, placed first in every system message."""
    description: str | None = None
    llm: LLMSettings = Field(default_factory=LLMSettings)
    role: str | None = None
    """Discussion persona: the part played, e.g. "lead speaker for the motion"."""
    persona_description: str | None = None
    """Discussion persona: who the agent is, in a sentence or two."""
    stance: Stance | None = None
    """Discussion persona: faction and position."""
    speaking_style: str | None = None
    """Discussion persona: concise, elaborate, aggressive, diplomatic, analytical, emotional,
    or a free description."""
    expertise: list[str] = Field(default_factory=list)
    """Discussion persona: fields the agent knows well."""
    traits: list[str] = Field(default_factory=list)
    """Discussion persona: character traits."""

    @model_validator(mode="after")
    def _llm_agents_have_a_prompt(self) -> AgentProfile:
        if self.kind == "llm" and not self.prompt.strip():
            raise ValueError("prompt: an llm agent needs its role prompt; add a `prompt` text")
        return self


class Message(BaseModel):
    """A result (or failure notice) delivered into another agent's inbox."""

    message_id: str
    plan_id: str
    command_id: str
    from_: str = Field(validation_alias=AliasChoices("from", "from_"), serialization_alias="from")
    to: str
    created_at: str
    status: str = "done"
    """`done` for a result, `failed` for an on_failure notice."""
    result: Any = None
    score: float | None = None
    score_explanation: str | None = None
    text: str
    error: str | None = None
