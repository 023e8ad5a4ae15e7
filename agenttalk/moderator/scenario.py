"""Discussion scenarios: the YAML format of the original (reference §2.6) with snake_case keys.

Cross-field rules raise `FieldProblems`, so a validation error can name the exact field
(`flow.phases.2.rollback_to`) instead of the whole model; `loader.py` turns them into
`ScenarioError`s.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    field_validator,
    model_validator,
)

SpeakingOrder = Literal["free", "round_robin", "moderated"]
EndCondition = Literal["max_rounds", "moderator_decision", "consensus", "timeout"]
AlignmentType = Literal["opposing", "free", "multi_faction"]


class FieldProblems(ValueError):
    """Cross-field validation failures as (field path relative to the model, message) pairs."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{field}: {msg}" for field, msg in problems))


def _snake(value: Any) -> Any:
    """The original spelled enum values with hyphens (`round-robin`); accept both spellings."""
    return value.replace("-", "_") if isinstance(value, str) else value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Faction(_Model):
    """One side of the discussion."""

    id: str = Field(min_length=1)
    """Referenced by `faction_order` and by a participant's stance."""
    description: str = Field(min_length=1)
    """What the faction stands for."""
    name: str | None = None
    """Display name; the id when unset."""


class Alignment(_Model):
    """How participants line up."""

    type: AlignmentType
    """`opposing` (exactly two factions), `free` or `multi_faction`."""
    factions: list[Faction] = Field(default_factory=list)
    """The factions participants may belong to."""

    _normalise_type = field_validator("type", mode="before")(_snake)

    @model_validator(mode="after")
    def _check(self) -> Alignment:
        problems: list[tuple[str, str]] = []
        if self.type == "opposing" and len(self.factions) != 2:
            problems.append(("factions", "an opposing alignment needs exactly 2 factions"))
        problems += _duplicates([f.id for f in self.factions], "factions", "faction id", ".id")
        if problems:
            raise FieldProblems(problems)
        return self


class Phase(_Model):
    """One phase of the flow; every phase ends when `max_rounds` speeches have been made."""

    id: str = Field(min_length=1)
    """Unique within the scenario."""
    type: str = Field(min_length=1)
    """opening, free_discussion, focused_conflict, convergence, closing, ...; an `opening`
    phase must come first and a `closing` phase last."""
    name: str = Field(min_length=1)
    """Shown to participants."""
    description: str = Field(min_length=1)
    """Shown to participants."""
    max_rounds: int = Field(ge=1)
    """Speeches in this phase before it ends (one round is one speech)."""
    allow_interrupt: StrictBool
    """Whether interrupts (urgency >= 3) may be granted."""
    speaking_order: SpeakingOrder
    """`free` (by intent rank), `round_robin` (in turn) or `moderated` (least speaker first)."""
    end_condition: EndCondition
    """Recorded for the language layer; the controller ends every phase at `max_rounds`."""
    force_summary: StrictBool = False
    """Ask for a summary when the phase ends, before it moves on."""
    faction_order: list[str] | None = None
    """round_robin only: the factions take turns in this order."""
    rollback_to: str | None = None
    """An earlier phase to return to when the closing vote's mean is below the threshold."""
    consensus_threshold: float | None = Field(default=None, ge=0, le=100)
    """The mean consensus score (0-100) at or above which the phase moves on."""
    timeout: float | None = Field(default=None, gt=0)
    """Seconds; required when `end_condition` is `timeout` (the pure controller has no clock)."""

    _normalise_order = field_validator("speaking_order", mode="before")(_snake)

    @model_validator(mode="after")
    def _check(self) -> Phase:
        problems: list[tuple[str, str]] = []
        if self.end_condition == "timeout" and self.timeout is None:
            problems.append(("timeout", "required when end_condition is timeout"))
        if self.rollback_to is not None and self.consensus_threshold is None:
            problems.append(("consensus_threshold", "required when rollback_to is set"))
        if self.consensus_threshold is not None and self.rollback_to is None:
            problems.append(("rollback_to", "required when consensus_threshold is set"))
        if self.faction_order is not None:
            if self.speaking_order != "round_robin":
                problems.append(("faction_order", "only a round_robin phase takes turns"))
            problems += _duplicates(self.faction_order, "faction_order", "faction")
        if problems:
            raise FieldProblems(problems)
        return self


class Flow(_Model):
    """The phases, run in list order."""

    phases: list[Phase] = Field(min_length=1)
    """At least one phase."""


class ModeratorPolicy(_Model):
    """How hard the moderator steers."""

    intervention_level: int = Field(default=2, ge=0, le=3)
    """0 pure observer, 1 light (calls on someone in a long silence), 2 medium (calls on quiet
    participants), 3 strong (asks questions to guide)."""
    max_idle_rounds: int = Field(default=2, ge=1)
    """Idle steps before the discussion counts as cold (the state's `cold_threshold`)."""
    max_steps: int = Field(default=200, ge=1)
    """Updater calls before the discussion ends with reason `step_limit`."""
    max_rollbacks: int = Field(default=1, ge=0)
    """Rollbacks allowed over the whole discussion."""
    cold_threshold: float | None = Field(default=None, ge=0)
    """Seconds in the original's format; accepted and unused (the controller counts steps)."""
    force_summary_each_phase: StrictBool | None = None
    """Accepted for the original's format and unused: set `force_summary` per phase."""
    bias_allowed: StrictBool | None = None
    """Accepted for the original's format and unused."""


class Role(_Model):
    """An optional role template for participants."""

    id: str = Field(min_length=1)
    """Unique within the scenario."""
    name: str = Field(min_length=1)
    """Display name."""
    system_prompt_template: str = Field(min_length=1)
    """Prompt text for a participant in this role."""
    description: str | None = None
    """What the role is for."""


class Scenario(_Model):
    """A validated discussion scenario."""

    id: str = Field(min_length=1)
    """Machine name, e.g. `debate`."""
    name: str = Field(min_length=1)
    """Display name."""
    description: str = Field(min_length=1)
    """What kind of discussion this is."""
    version: str = Field(min_length=1)
    """Free-form version string (a YAML number such as 1.0 is read as text)."""
    alignment: Alignment
    """How participants line up."""
    flow: Flow
    """The phases."""
    moderator_policy: ModeratorPolicy = Field(default_factory=ModeratorPolicy)
    """How hard the moderator steers."""
    roles: list[Role] = Field(default_factory=list)
    """Optional role templates."""

    @field_validator("version", mode="before")
    @classmethod
    def _version_as_text(cls, value: Any) -> Any:
        return (
            str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value
        )

    @model_validator(mode="after")
    def _check(self) -> Scenario:
        phases = self.flow.phases
        ids = [p.id for p in phases]
        problems = _duplicates(ids, "flow.phases", "phase id", ".id")
        factions = {f.id for f in self.alignment.factions}
        for i, phase in enumerate(phases):
            where = f"flow.phases.{i}"
            if phase.type == "opening" and i != 0:
                problems.append((f"{where}.type", "an opening phase must be the first phase"))
            if phase.type == "closing" and i != len(phases) - 1:
                problems.append((f"{where}.type", "a closing phase must be the last phase"))
            if phase.rollback_to is not None and phase.rollback_to not in ids[:i]:
                problems.append(
                    (f"{where}.rollback_to", f"{phase.rollback_to!r} is not an earlier phase id")
                )
            for j, faction in enumerate(phase.faction_order or []):
                if faction not in factions:
                    problems.append(
                        (f"{where}.faction_order.{j}", f"{faction!r} is not in alignment.factions")
                    )
        problems += _duplicates([r.id for r in self.roles], "roles", "role id", ".id")
        if problems:
            raise FieldProblems(problems)
        return self

    def phase(self, phase_id: str) -> Phase | None:
        """The phase with this id, or None."""
        return next((p for p in self.flow.phases if p.id == phase_id), None)

    def phase_index(self, phase_id: str) -> int | None:
        """The position of the phase in the flow, or None."""
        return next((i for i, p in enumerate(self.flow.phases) if p.id == phase_id), None)

    def with_overrides(
        self, *, intervention_level: int | None = None, max_steps: int | None = None
    ) -> Scenario:
        """A validated copy with a session's policy overrides applied."""
        overrides: dict[str, int] = {}
        if intervention_level is not None:
            overrides["intervention_level"] = intervention_level
        if max_steps is not None:
            overrides["max_steps"] = max_steps
        policy = ModeratorPolicy.model_validate(
            {**self.moderator_policy.model_dump(exclude_none=True), **overrides}
        )
        return self.model_copy(update={"moderator_policy": policy})


def _duplicates(
    values: list[str], field: str, what: str, suffix: str = ""
) -> list[tuple[str, str]]:
    seen: set[str] = set()
    problems = []
    for i, value in enumerate(values):
        if value in seen:
            problems.append((f"{field}.{i}{suffix}", f"duplicate {what} {value!r}"))
        seen.add(value)
    return problems
