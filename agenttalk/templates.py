"""Safe `{name}` templates: plain field names only; no attribute, index, conversion or spec."""

from __future__ import annotations

import string
from collections.abc import Iterable, Mapping

MESSAGE_FIELDS = frozenset(
    {"result", "score", "score_explanation", "command_id", "plan_id", "agent_id"}
)
FAILURE_FIELDS = frozenset({"error", "command_id", "plan_id", "agent_id"})
OUTPUT_NAME_FIELDS = frozenset({"command_id", "plan_id", "agent_id", "to"})

_formatter = string.Formatter()


def check_template(template: str, allowed: Iterable[str]) -> None:
    """Raise ValueError naming the first placeholder that is not a plain allowed field."""
    allowed_set = frozenset(allowed)
    try:
        parts = list(_formatter.parse(template))
    except ValueError as exc:
        raise ValueError(
            f"malformed template ({exc}); write literal braces as {{{{ and }}}}"
        ) from exc
    for _literal, field, spec, conversion in parts:
        if field is None:
            continue
        if field not in allowed_set:
            names = ", ".join("{" + n + "}" for n in sorted(allowed_set))
            raise ValueError(f"placeholder {{{field}}} is not allowed; use only {names}")
        if spec or conversion:
            raise ValueError(f"placeholder {{{field}}} may not carry a format spec or conversion")


def render(template: str, values: Mapping[str, object]) -> str:
    """Fill a template already accepted by `check_template`; None renders as an empty string."""
    out = []
    for literal, field, _spec, _conv in _formatter.parse(template):
        out.append(literal)
        if field is not None:
            value = values.get(field)
            out.append("" if value is None else _text(value))
    return "".join(out)


def _text(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    import json

    return json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else str(value)
