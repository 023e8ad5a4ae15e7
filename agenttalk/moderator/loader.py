"""`load_scenario`: a built-in name, a YAML file, YAML text or a mapping -> a validated Scenario."""

from __future__ import annotations

import os
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from agenttalk.errors import ScenarioError
from agenttalk.moderator.scenario import FieldProblems, Scenario

BUILTIN_SCENARIOS = ("debate", "project_review")
"""Scenarios shipped as YAML in `agenttalk/moderator/scenarios/`."""

ScenarioSource = Scenario | Mapping[str, Any] | str | os.PathLike[str]


def load_scenario(source: ScenarioSource) -> Scenario:
    """Validate a scenario given as a built-in name, a path, YAML text or a mapping.

    A string is a built-in name if it is one, else a path if it names a `.yaml`/`.yml` file or
    an existing file, else YAML text. Raises `ScenarioError` naming every bad field.
    """
    if isinstance(source, Scenario):
        return source
    if isinstance(source, Mapping):
        return _validate(source, "(inline)")
    if isinstance(source, str) and source in BUILTIN_SCENARIOS:
        return builtin_scenario(source)
    if isinstance(source, os.PathLike) or _looks_like_path(source):
        path = Path(source)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ScenarioError(str(path), [("", f"cannot read the file: {exc}")]) from exc
        return _from_text(text, str(path))
    return _from_text(source, "(text)")


def builtin_scenario(name: str) -> Scenario:
    """One of `BUILTIN_SCENARIOS`, read from the package data."""
    if name not in BUILTIN_SCENARIOS:
        known = ", ".join(BUILTIN_SCENARIOS)
        raise ScenarioError(name, [("", f"no built-in scenario of that name; use one of {known}")])
    text = (
        resources.files("agenttalk.moderator")
        .joinpath("scenarios", f"{name}.yaml")
        .read_text("utf-8")
    )
    return _from_text(text, f"built-in {name}")


def _looks_like_path(source: str) -> bool:
    if "\n" in source:
        return False
    return source.endswith((".yaml", ".yml")) or Path(source).is_file()


def _from_text(text: str, where: str) -> Scenario:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(where, [("", f"not valid YAML: {exc}")]) from exc
    if not isinstance(data, Mapping):
        known = ", ".join(BUILTIN_SCENARIOS)
        problem = (
            "expected a mapping of scenario fields (or a built-in name: "
            f"{known}, or the path of a .yaml file)"
        )
        raise ScenarioError(where, [("", problem)])
    return _validate(data, where)


def _validate(data: Mapping[str, Any], where: str) -> Scenario:
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(where, _problems(exc)) from exc


def _problems(exc: ValidationError) -> list[tuple[str, str]]:
    """One (field path, message) pair per problem, expanding our cross-field FieldProblems."""
    out: list[tuple[str, str]] = []
    for err in exc.errors():
        loc = ".".join(str(part) for part in err["loc"])
        cause = (err.get("ctx") or {}).get("error")
        if isinstance(cause, FieldProblems):
            out += [(f"{loc}.{field}" if loc else field, msg) for field, msg in cause.problems]
        elif err["type"] == "extra_forbidden":
            out.append((loc, "unknown field; remove it or check its spelling"))
        elif err["type"] == "missing":
            out.append((loc, "required field is missing"))
        else:
            out.append((loc, err["msg"]))
    return out
