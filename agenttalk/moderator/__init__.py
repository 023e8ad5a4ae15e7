"""The deterministic moderator (no LLM): scenarios, state, intents and decisions.

controller = ModeratorController(load_scenario("debate"))
state = controller.create_initial_state(["ann", "bob"], factions={"ann": "pro", "bob": "con"})
decision = controller.decide_next_action(state, intents, recent_events)
state = controller.update_state_after_speech(state, decision.target_agent_id)  # or another
"""

from agenttalk.moderator.controller import ModeratorController
from agenttalk.moderator.loader import BUILTIN_SCENARIOS, builtin_scenario, load_scenario
from agenttalk.moderator.scenario import Phase, Scenario
from agenttalk.moderator.state import Intent, ModeratorAction, ModeratorDecision, ModeratorState

__all__ = [
    "BUILTIN_SCENARIOS",
    "Intent",
    "ModeratorAction",
    "ModeratorController",
    "ModeratorDecision",
    "ModeratorState",
    "Phase",
    "Scenario",
    "builtin_scenario",
    "load_scenario",
]
