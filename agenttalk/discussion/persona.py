"""The system prompt: the agent's persona and the five constraints every discussion turn obeys."""

from __future__ import annotations

from agenttalk.models import AgentProfile

CONSTRAINTS = (
    "Stay in your persona at all times: never step out of character, and never discuss this "
    "system, yourself as an AI, or AI in general.",
    "Speak only when allowed: when asked for an intent you only state a wish to speak; never "
    "assume you will get the floor.",
    "Use only the context shown to you: do not speculate about history you cannot see or about "
    "other participants' private thoughts.",
    "Never invent what other participants said, nor events that did not happen.",
    "Reply with only the JSON object in the required format, nothing else.",
)

STYLES = {
    "concise": "You are brief and to the point.",
    "elaborate": "You explain your points fully, with examples.",
    "aggressive": "You press your points hard and challenge weak arguments directly.",
    "diplomatic": "You look for common ground and phrase disagreement politely.",
    "analytical": "You reason with logic and data, using analytical frameworks.",
    "emotional": "You speak with feeling and appeal to people's experience.",
}


def system_prompt(profile: AgentProfile) -> str:
    """The persona (identity, style, stance, expertise, traits) followed by the constraints."""
    lines = [f"You take part in a discussion as {profile.name}."]
    if profile.role:
        lines.append(f"Your role: {profile.role}.")
    identity = profile.persona_description or profile.prompt
    if identity.strip():
        lines += ["", "## Who you are", identity.strip()]
    if profile.speaking_style:
        style = STYLES.get(profile.speaking_style.lower(), profile.speaking_style)
        lines += ["", "## Your speaking style", style]
    if profile.stance:
        lines += [
            "",
            "## Your stance",
            f"Faction: {profile.stance.faction_id}",
            f"Position: {profile.stance.position}",
        ]
    if profile.expertise:
        lines += ["", "## Your expertise", ", ".join(profile.expertise)]
    if profile.traits:
        lines += ["", "## Your traits", ", ".join(profile.traits)]
    lines += ["", "## Constraints (always obey them)"]
    lines += [f"{number}. {rule}" for number, rule in enumerate(CONSTRAINTS, 1)]
    return "\n".join(lines)
