"""The moderator's data: its state, the intents it reads and the decisions it returns."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agenttalk.moderator.scenario import SpeakingOrder

MAX_CONSECUTIVE_SPEAKS = 2
"""Nobody is granted a third speech in a row (reference §2.1)."""
IMBALANCE_THRESHOLD = 0.6
"""Overheated: one agent holds more than this share of all speeches ..."""
OVERHEAT_MIN_SPEECHES = 2
"""... and more than this many speeches."""
INTERRUPT_MIN_URGENCY = 3
"""An interrupt below this urgency is never granted."""
ROUND_ROBIN_INTERRUPT_URGENCY = 4
"""In round robin, an interrupt takes someone else's turn only from this urgency up."""

IntentType = Literal["speak", "interrupt", "question", "respond", "pass"]


class ModeratorAction(StrEnum):
    """What the moderator decided to do next."""

    ALLOW_SPEECH = "ALLOW_SPEECH"
    REJECT_SPEECH = "REJECT_SPEECH"
    PROMPT_QUESTION = "PROMPT_QUESTION"
    CALL_AGENT = "CALL_AGENT"
    FORCE_SUMMARY = "FORCE_SUMMARY"
    SWITCH_PHASE = "SWITCH_PHASE"
    END_DISCUSSION = "END_DISCUSSION"
    WAIT = "WAIT"
    WARN_AGENT = "WARN_AGENT"
    CALL_VOTE = "CALL_VOTE"


class Intent(BaseModel):
    """A participant's wish to speak, as produced by the agent executor."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent_id: str
    """A registered participant."""
    type: IntentType
    """`pass` intents are dropped; only `interrupt` and `urgency` affect the ranking."""
    urgency: int = Field(ge=1, le=5)
    """1 (can wait) to 5 (must speak now)."""
    target: str | None = None
    """Whom the agent wants to address."""
    topic: str | None = None
    """What the agent wants to say."""


class ModeratorDecision(BaseModel):
    """One decision; `metadata` carries rule details (`is_interrupt`, `rollback`, ...)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    action: ModeratorAction
    """What to do."""
    target_agent_id: str | None = None
    """Who is allowed, rejected, called, warned or asked."""
    next_phase_id: str | None = None
    """SWITCH_PHASE only: the phase to enter."""
    reason: str | None = None
    """Why, in words a participant can be shown (END_DISCUSSION: a code such as `step_limit`)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Rule details: `is_interrupt` on ALLOW_SPEECH, `rollback` on SWITCH_PHASE,
    `llm_request_type` on FORCE_SUMMARY / PROMPT_QUESTION, ..."""


class ModeratorState(BaseModel):
    """Everything the controller decides from; updaters return a new state, never mutate."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    current_phase_id: str
    """The phase being run."""
    current_phase_type: str
    """Its type (opening, free_discussion, ...)."""
    phase_round: int = 0
    """Speeches in the current phase."""
    total_rounds: int = 0
    """Speeches in the whole discussion."""
    last_speaker_id: str | None = None
    """Who spoke last (kept across phases)."""
    consecutive_speaks: int = 0
    """How many speeches in a row the last speaker made."""
    idle_rounds: int = 0
    """Steps without a speech since the last speech or phase switch."""
    intervention_level: int = Field(ge=0, le=3)
    """From the scenario's policy (or a session override)."""
    allow_interrupt: bool
    """The current phase's `allow_interrupt`."""
    speaking_order: SpeakingOrder
    """The current phase's `speaking_order`."""
    cold_threshold: int = Field(ge=1)
    """Idle steps before the discussion counts as cold (policy `max_idle_rounds`)."""
    speak_counts: dict[str, int]
    """Speeches per agent over the whole discussion."""
    agent_ids: tuple[str, ...] = Field(min_length=1)
    """Participants in registration order: every tie goes to the earliest."""
    factions: dict[str, str] = Field(default_factory=dict)
    """Agent id -> faction id, for round robin with `faction_order`."""
    round_robin_index: int = 0
    """Turns taken in the current round-robin phase."""
    phase_summary_done: bool = False
    """The current phase's summary has been made."""
    phase_vote_done: bool = False
    """The current phase's consensus vote has been taken."""
    rollbacks: int = 0
    """Rollbacks so far."""
    steps: int = 0
    """Updater calls so far; the discussion ends when it reaches `max_steps`."""
