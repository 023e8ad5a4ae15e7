"""The agent executor for discussions: persona prompts, visible context, memory, intent and speech.

The only code that calls the LLM for discussion turns. It decides nothing about who speaks (the
moderator does); it turns what one agent may see into that agent's intent or speech.
"""

from agenttalk.discussion.context import (
    DEFAULT_RECENT_EVENTS,
    MAX_RECENT_EVENTS,
    VisibleContext,
    build_visible_context,
)
from agenttalk.discussion.memory import MemoryEntry, ShortTermMemory, load_memory, save_memory
from agenttalk.discussion.persona import CONSTRAINTS, system_prompt
from agenttalk.discussion.turns import (
    IntentTurn,
    Speech,
    SpeechTurn,
    generate_intent,
    generate_speech,
)

__all__ = [
    "CONSTRAINTS",
    "DEFAULT_RECENT_EVENTS",
    "MAX_RECENT_EVENTS",
    "IntentTurn",
    "MemoryEntry",
    "ShortTermMemory",
    "Speech",
    "SpeechTurn",
    "VisibleContext",
    "build_visible_context",
    "generate_intent",
    "generate_speech",
    "load_memory",
    "save_memory",
    "system_prompt",
]
