"""Scenario loading: built-ins, the four source kinds, and validation errors that name the field."""

from __future__ import annotations

import copy
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml
from moderator_support import phase, scenario

from agenttalk.errors import ConfigError, ScenarioError
from agenttalk.moderator import (
    BUILTIN_SCENARIOS,
    ModeratorController,
    Scenario,
    builtin_scenario,
    load_scenario,
)


@pytest.mark.parametrize("name", BUILTIN_SCENARIOS)
def test_builtin_scenarios_load_and_drive_a_controller(name: str) -> None:
    loaded = load_scenario(name)
    assert loaded.id == name
    state = ModeratorController(name).create_initial_state(["a", "b"])
    assert state.current_phase_id == loaded.flow.phases[0].id


def test_every_shipped_yaml_is_a_listed_builtin() -> None:
    folder = resources.files("agenttalk.moderator").joinpath("scenarios")
    shipped = sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.is_file())
    assert shipped == sorted(BUILTIN_SCENARIOS)


def test_builtin_debate_closes_con_first_and_project_review_can_roll_back() -> None:
    debate = builtin_scenario("debate")
    assert debate.flow.phases[-1].faction_order == ["con", "pro"]
    assert debate.alignment.type == "opposing"
    review = builtin_scenario("project_review")
    convergence = review.phase("convergence")
    assert convergence is not None
    assert convergence.rollback_to == "option_discussion"
    assert convergence.consensus_threshold == 60
    assert review.moderator_policy.max_idle_rounds == 1


def test_builtin_phase_tables_follow_the_original_demos() -> None:
    rows = [
        (p.id, p.max_rounds, p.allow_interrupt, p.speaking_order, p.force_summary)
        for p in builtin_scenario("debate").flow.phases
    ]
    assert rows == [
        ("opening", 2, False, "moderated", False),
        ("free_discussion", 6, True, "free", True),
        ("focused_conflict", 4, False, "moderated", True),
        ("closing", 2, False, "round_robin", True),
    ]


def test_unknown_builtin_name_lists_the_known_ones() -> None:
    with pytest.raises(ScenarioError, match="debate, project_review"):
        builtin_scenario("debat")


def test_loads_from_a_path_yaml_text_a_dict_and_a_scenario(tmp_path: Path) -> None:
    data = scenario(phase("one"), phase("two"))
    text = yaml.safe_dump(data)
    file = tmp_path / "custom.yaml"
    file.write_text(text, encoding="utf-8")
    loaded = [
        load_scenario(file),
        load_scenario(str(file)),
        load_scenario(text),
        load_scenario(data),
    ]
    assert all(s == loaded[0] for s in loaded)
    assert [p.id for p in loaded[0].flow.phases] == ["one", "two"]
    assert load_scenario(loaded[0]) is loaded[0]


def test_the_originals_hyphenated_spellings_and_numeric_version_are_accepted() -> None:
    data = scenario(phase("rr", speaking_order="round-robin"))
    data["alignment"] = {"type": "multi-faction", "factions": []}
    data["version"] = 1.0
    loaded = load_scenario(data)
    assert loaded.flow.phases[0].speaking_order == "round_robin"
    assert loaded.alignment.type == "multi_faction"
    assert loaded.version == "1.0"


def test_policy_defaults_match_the_issue() -> None:
    data = scenario()
    del data["moderator_policy"]
    policy = load_scenario(data).moderator_policy
    assert (policy.max_steps, policy.max_rollbacks) == (200, 1)


def test_session_overrides_are_validated() -> None:
    base = load_scenario(scenario())
    changed = base.with_overrides(intervention_level=0, max_steps=7)
    assert (changed.moderator_policy.intervention_level, changed.moderator_policy.max_steps) == (
        0,
        7,
    )
    assert base.moderator_policy.intervention_level == 2
    with pytest.raises(ValueError, match="intervention_level"):
        base.with_overrides(intervention_level=9)


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = data
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        if value is _DELETE:
            del node[last]
        else:
            node[int(last) if last.isdigit() else last] = value

    return apply


_DELETE = object()


def _rollback(index: int, to: str) -> Callable[[dict[str, Any]], None]:
    def apply(data: dict[str, Any]) -> None:
        data["flow"]["phases"][index] |= {"rollback_to": to, "consensus_threshold": 50}

    return apply


INVALID = [
    ("id", _set("id", _DELETE)),
    ("version", _set("version", "")),
    ("alignment.type", _set("alignment.type", "collaborative")),
    ("alignment.factions", _set("alignment.factions", [{"id": "x", "description": "X."}])),
    ("alignment.factions.0.description", _set("alignment.factions.0.description", _DELETE)),
    ("alignment.factions.1.id", _set("alignment.factions.1.id", "pro")),
    ("flow.phases", _set("flow.phases", [])),
    ("flow.phases.0.max_rounds", _set("flow.phases.0.max_rounds", 0)),
    ("flow.phases.0.allow_interrupt", _set("flow.phases.0.allow_interrupt", "yes")),
    ("flow.phases.0.speaking_order", _set("flow.phases.0.speaking_order", "random")),
    ("flow.phases.0.end_condition", _set("flow.phases.0.end_condition", "never")),
    ("flow.phases.0.timeout", _set("flow.phases.0.end_condition", "timeout")),
    ("flow.phases.0.description", _set("flow.phases.0.description", _DELETE)),
    ("flow.phases.0.max_round", _set("flow.phases.0.max_round", 3)),
    ("flow.phases.1.id", _set("flow.phases.1.id", "one")),
    ("flow.phases.1.type", _set("flow.phases.1.type", "opening")),
    ("flow.phases.0.type", _set("flow.phases.0.type", "closing")),
    ("flow.phases.0.rollback_to", _rollback(0, "two")),
    ("flow.phases.1.rollback_to", _rollback(1, "nowhere")),
    ("flow.phases.1.rollback_to", _rollback(1, "two")),
    ("flow.phases.1.consensus_threshold", _set("flow.phases.1.rollback_to", "one")),
    ("flow.phases.1.rollback_to", _set("flow.phases.1.consensus_threshold", 50)),
    ("flow.phases.1.consensus_threshold", _set("flow.phases.1.consensus_threshold", 101)),
    ("flow.phases.0.faction_order", _set("flow.phases.0.faction_order", ["pro", "con"])),
    ("moderator_policy.intervention_level", _set("moderator_policy.intervention_level", 4)),
    ("moderator_policy.max_idle_rounds", _set("moderator_policy.max_idle_rounds", 0)),
    ("moderator_policy.max_steps", _set("moderator_policy.max_steps", 0)),
    ("moderator_policy.max_rollbacks", _set("moderator_policy.max_rollbacks", -1)),
    ("moderator_policy.cold_threshold", _set("moderator_policy.cold_threshold", -5)),
    ("moderator_policy.bias_allowed", _set("moderator_policy.bias_allowed", "no")),
    ("roles.0.system_prompt_template", _set("roles", [{"id": "r", "name": "R"}])),
]


@pytest.mark.parametrize(
    ("field", "mutate"), INVALID, ids=[f"{i}-{f}" for i, (f, _) in enumerate(INVALID)]
)
def test_validation_errors_name_the_field(
    field: str, mutate: Callable[[dict[str, Any]], None]
) -> None:
    data = copy.deepcopy(scenario(phase("one"), phase("two")))
    mutate(data)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(data)
    assert field in caught.value.fields
    assert field in str(caught.value)
    assert isinstance(caught.value, ConfigError)


def test_faction_order_must_name_known_factions() -> None:
    data = scenario(phase("rr", speaking_order="round_robin", faction_order=["pro", "neutral"]))
    with pytest.raises(ScenarioError) as caught:
        load_scenario(data)
    assert caught.value.fields == ["flow.phases.0.faction_order.1"]


def test_every_problem_is_reported_at_once() -> None:
    data = scenario(phase("one", max_rounds=0, speaking_order="random"))
    with pytest.raises(ScenarioError) as caught:
        load_scenario(data)
    assert set(caught.value.fields) == {
        "flow.phases.0.max_rounds",
        "flow.phases.0.speaking_order",
    }


def test_bad_yaml_text_and_scalars_and_missing_files_are_scenario_errors(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="not valid YAML"):
        load_scenario("id: [unclosed\nname: x")
    with pytest.raises(ScenarioError, match="built-in name"):
        load_scenario("debatee")
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "missing.yaml")
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(str(tmp_path / "missing.yml"))


def test_a_scenario_built_directly_is_validated_too() -> None:
    data = scenario(phase("one"), phase("one"))
    with pytest.raises(ValueError, match="duplicate phase id"):
        Scenario.model_validate(data)
