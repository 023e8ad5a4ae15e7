"""The LLM layer: the real OpenAI SDK against a loopback HTTP server, replies, templates, models."""

from __future__ import annotations

import email.utils
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from agenttalk.cli import app
from agenttalk.config import ServiceConfig
from agenttalk.daemon import Daemon
from agenttalk.errors import ConfigError, LLMError
from agenttalk.llm import LLMRequest
from agenttalk.llm.loopback import Delay, Drop, LoopbackLLM, Status
from agenttalk.llm.openai_provider import OpenAIProvider
from agenttalk.llm.registry import build_provider, openai_client
from agenttalk.llm.reply import ask_structured, extract_json, reply_schema, validate_reply
from agenttalk.models import Command
from agenttalk.scaffold import init_society
from agenttalk.society import Society
from agenttalk.templates import MESSAGE_FIELDS, check_template, render

KEY = "sk-test-key"
REQUEST = LLMRequest(
    messages=[
        {"role": "system", "content": "You are a test agent."},
        {"role": "user", "content": "Say something."},
    ],
    model="test-model",
)
GOOD = {"result": "fine", "score": 75, "score_explanation": "because"}


@pytest.fixture(scope="module")
def _server() -> Iterator[LoopbackLLM]:
    # One server per module: stopping one takes half a second (serve_forever's poll interval).
    with LoopbackLLM() as server:
        yield server


@pytest.fixture
def loopback(_server: LoopbackLLM) -> LoopbackLLM:
    """The module's loopback server with an empty script and no requests seen."""
    _server.script.clear()
    _server.requests.clear()
    return _server


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AGENTTALK_ROOT", "MY_LLM_KEY"):
        monkeypatch.delenv(name, raising=False)


class Sleeps:
    """A recording `sleep` for OpenAIProvider: retries happen without waiting."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def provider(
    server: LoopbackLLM,
    monkeypatch: pytest.MonkeyPatch,
    sleeps: Sleeps | None = None,
    **service: Any,
) -> OpenAIProvider:
    """The real OpenAI adapter (SDK client built by the registry) aimed at `server`."""
    monkeypatch.setenv("MY_LLM_KEY", KEY)
    config = ServiceConfig(base_url=server.base_url, api_key_env="MY_LLM_KEY", **service)
    client = openai_client("test", config)
    return OpenAIProvider("test", config, client, sleep=sleeps or Sleeps())


def script(server: LoopbackLLM, *steps: Any) -> None:
    server.script.extend(steps)


# -- the retry layer over real HTTP ------------------------------------------------------------


def test_429_twice_with_retry_after_zero_then_success(
    loopback: LoopbackLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_LLM_KEY", KEY)
    script(loopback, Status(429, {"Retry-After": "0"}), Status(429, {"Retry-After": "0"}))
    service = ServiceConfig(base_url=loopback.base_url, api_key_env="MY_LLM_KEY")
    llm = build_provider("svc", service, Path("unused"))
    assert isinstance(llm, OpenAIProvider)

    response = llm.complete(REQUEST)

    assert json.loads(response.text)["result"].startswith("done: ")
    assert len(loopback.requests) == 3
    assert len(response.transient_errors) == 2
    assert all("HTTP 429" in e for e in response.transient_errors)
    assert response.usage.total_tokens == 15
    # the key travels only in the Authorization header
    headers = {k.lower(): v for k, v in loopback.requests[0].headers.items()}
    assert headers["authorization"] == f"Bearer {KEY}"
    assert loopback.requests[0].body["model"] == "test-model"


def test_retry_after_is_honoured(loopback: LoopbackLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    sleeps = Sleeps()
    llm = provider(loopback, monkeypatch, sleeps, retry_max_seconds=60)
    script(loopback, Status(429, {"Retry-After": "7"}))

    llm.complete(REQUEST)

    assert sleeps.calls == [7.0]
    assert len(loopback.requests) == 2


def test_retry_after_is_capped_by_retry_max_seconds(
    loopback: LoopbackLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    sleeps = Sleeps()
    llm = provider(loopback, monkeypatch, sleeps, retry_max_seconds=30)
    script(loopback, Status(429, {"Retry-After": "600"}), Status(503, {"retry-after-ms": "1500"}))

    llm.complete(REQUEST)

    assert sleeps.calls == [30.0, 1.5]


def test_retry_after_as_an_http_date_is_honoured(
    loopback: LoopbackLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    sleeps = Sleeps()
    llm = provider(loopback, monkeypatch, sleeps)
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    script(loopback, Status(503, {"Retry-After": when}))

    llm.complete(REQUEST)

    (delay,) = sleeps.calls
    assert 27 <= delay <= 30


def test_unreadable_retry_after_falls_back_to_backoff(
    loopback: LoopbackLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    sleeps = Sleeps()
    llm = provider(loopback, monkeypatch, sleeps, retry_base_seconds=2)
    script(loopback, Status(429, {"Retry-After": "soon"}))

    response = llm.complete(REQUEST)

    assert len(loopback.requests) == 2
    assert response.transient_errors[0].startswith("HTTP 429")
    (delay,) = sleeps.calls
    assert 1 <= delay <= 2


def test_500_three_times_then_success_backs_off_exponentially(
    loopback: LoopbackLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    sleeps = Sleeps()
    llm = provider(loopback, monkeypatch, sleeps, retry_base_seconds=1, retry_max_seconds=60)
    script(loopback, Status(500), Status(500), Status(500))

    response = llm.complete(REQUEST)

    assert len(loopback.requests) == 4
    assert [e.split(":")[0] for e in response.transient_errors] == ["HTTP 500"] * 3
    # full jitter within [ceiling/2, ceiling], ceiling doubling from retry_base_seconds
    assert len(sleeps.calls) == 3
    for delay, ceiling in zip(sleeps.calls, [1, 2, 4], strict=True):
        assert ceiling / 2 <= delay <= ceiling


def test_503_beyond_max_retries_raises_llm_error_with_history(
    loopback: LoopbackLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm = provider(loopback, monkeypatch, max_retries=2)
    script(loopback, Status(503), Status(503), Status(503), Status(503))

    with pytest.raises(LLMError) as info:
        llm.complete(REQUEST)

    assert len(loopback.requests) == 3
    assert "HTTP 503" in str(info.value)
    assert len(info.value.history) == 2
    assert all("HTTP 503" in e for e in info.value.history)


@pytest.mark.parametrize("code", [400, 401, 403, 404, 422])
def test_client_errors_are_not_retried(
    loopback: LoopbackLLM, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    sleeps = Sleeps()
    llm = provider(loopback, monkeypatch, sleeps)
    script(loopback, Status(code))

    with pytest.raises(LLMError) as info:
        llm.complete(REQUEST)

    assert len(loopback.requests) == 1
    assert f"HTTP {code}" in str(info.value)
    assert info.value.history == []
    assert sleeps.calls == []


@pytest.mark.parametrize("code", [408, 409, 429, 500, 502, 503, 504])
def test_transient_statuses_are_retried(
    loopback: LoopbackLLM, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    llm = provider(loopback, monkeypatch)
    script(loopback, Status(code))

    response = llm.complete(REQUEST)

    assert len(loopback.requests) == 2
    assert response.transient_errors[0].startswith(f"HTTP {code}")


def test_dropped_connection_is_retried(
    loopback: LoopbackLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm = provider(loopback, monkeypatch)
    script(loopback, Drop())

    response = llm.complete(REQUEST)

    assert len(loopback.requests) == 2
    assert response.transient_errors[0].startswith("connection error")


def test_timeout_is_retried(loopback: LoopbackLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    llm = provider(loopback, monkeypatch, timeout=0.3)
    script(loopback, Delay(1.5, Drop()))  # a late answer would hit a closed socket and log noise

    response = llm.complete(REQUEST)

    assert len(loopback.requests) == 2
    assert response.transient_errors[0].startswith("request timed out")
    assert json.loads(response.text)["score"] == 80


def test_timeouts_beyond_max_retries_fail(
    loopback: LoopbackLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm = provider(loopback, monkeypatch, timeout=0.2, max_retries=1)
    script(loopback, Delay(1.0, Drop()), Delay(1.0, Drop()))

    with pytest.raises(LLMError, match="timed out") as info:
        llm.complete(REQUEST)

    assert len(loopback.requests) == 2
    assert len(info.value.history) == 1


def test_the_sdk_client_never_retries_by_itself(
    loopback: LoopbackLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm = provider(loopback, monkeypatch, max_retries=0)
    assert llm.client.max_retries == 0
    script(loopback, Status(500))

    with pytest.raises(LLMError, match="HTTP 500"):
        llm.complete(REQUEST)

    assert len(loopback.requests) == 1
    headers = {k.lower(): v for k, v in loopback.requests[0].headers.items()}
    assert headers.get("x-stainless-retry-count", "0") == "0"


def test_temperature_and_max_tokens_are_sent_only_when_set(
    loopback: LoopbackLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm = provider(loopback, monkeypatch)
    llm.complete(REQUEST)
    llm.complete(REQUEST.model_copy(update={"temperature": 0.2, "max_tokens": 50}))

    first, second = (s.body for s in loopback.requests)
    assert "temperature" not in first and "max_tokens" not in first
    assert second["temperature"] == 0.2 and second["max_tokens"] == 50
    assert second["messages"] == REQUEST.messages


# -- structured replies over real HTTP ---------------------------------------------------------


def test_malformed_reply_gets_a_repair_request(
    loopback: LoopbackLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm = provider(loopback, monkeypatch)
    script(loopback, "this is not JSON", GOOD)

    outcome = ask_structured(llm, REQUEST, score_required=True)

    assert outcome.status == "ok"
    assert outcome.reply == GOOD
    assert len(outcome.attempts) == 2
    assert outcome.attempts[0].error is not None and "not JSON" in outcome.attempts[0].error
    assert len(loopback.requests) == 2
    repair = loopback.requests[1].body["messages"]
    assert repair[: len(REQUEST.messages)] == REQUEST.messages
    assert repair[-2] == {"role": "assistant", "content": "this is not JSON"}
    assert "could not be used" in repair[-1]["content"]
    assert '"score"' in repair[-1]["content"]  # the contract is restated
    assert outcome.usage.total_tokens == 30


def test_reply_in_a_code_fence_parses(
    loopback: LoopbackLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm = provider(loopback, monkeypatch)
    script(loopback, "Sure!\n```json\n" + json.dumps(GOOD) + "\n```\n")

    outcome = ask_structured(llm, REQUEST, score_required=True)

    assert outcome.status == "ok"
    assert outcome.reply == GOOD
    assert len(loopback.requests) == 1


def test_prose_around_the_object_parses(
    loopback: LoopbackLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm = provider(loopback, monkeypatch)
    script(loopback, "Here is my answer: " + json.dumps(GOOD) + " Hope that helps.")

    outcome = ask_structured(llm, REQUEST, score_required=True)

    assert outcome.status == "ok"
    assert outcome.reply == GOOD


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ({"result": "x", "score_explanation": "no score"}, "'score' is a required property"),
        ({"result": "x", "score": 150, "score_explanation": "too high"}, "score: 150"),
        ({"result": None, "score": 50, "score_explanation": "null"}, "result:"),
    ],
    ids=["score-missing", "score-150", "result-null"],
)
def test_schema_breaking_reply_gets_two_repairs_then_fails(
    loopback: LoopbackLLM, monkeypatch: pytest.MonkeyPatch, bad: dict[str, Any], reason: str
) -> None:
    llm = provider(loopback, monkeypatch)
    script(loopback, bad, bad, bad, GOOD)

    outcome = ask_structured(llm, REQUEST, score_required=True)

    assert outcome.status == "failed"
    assert outcome.reply is None
    assert len(loopback.requests) == 3
    assert len(outcome.attempts) == 3
    assert outcome.error is not None
    assert "after 2 repair attempts" in outcome.error
    assert reason in outcome.error
    for seen in loopback.requests[1:]:
        assert reason in seen.body["messages"][-1]["content"]


def test_score_not_required_accepts_a_reply_without_score(
    loopback: LoopbackLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm = provider(loopback, monkeypatch)
    script(loopback, {"result": {"names": ["a", "b"]}})

    outcome = ask_structured(llm, REQUEST, score_required=False)

    assert outcome.status == "ok"
    assert outcome.reply == {"result": {"names": ["a", "b"]}}
    assert len(loopback.requests) == 1


def test_http_failure_ends_the_structured_ask_without_repairs(
    loopback: LoopbackLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm = provider(loopback, monkeypatch, max_retries=1)
    script(loopback, Status(500), Status(500))

    outcome = ask_structured(llm, REQUEST, score_required=False)

    assert outcome.status == "failed"
    assert outcome.error is not None and "HTTP 500" in outcome.error
    assert len(outcome.attempts) == 1
    assert len(outcome.attempts[0].transient_errors) == 1
    assert len(loopback.requests) == 2


# -- reply parsing units -----------------------------------------------------------------------


def test_reply_schema_requires_score_exactly_when_asked() -> None:
    assert reply_schema(True)["required"] == ["result", "score", "score_explanation"]
    assert reply_schema(False)["required"] == ["result"]
    score = reply_schema(False)["properties"]["score"]
    assert score["minimum"] == 0 and score["maximum"] == 100


@pytest.mark.parametrize(
    "text",
    [
        '{"result": 1}',
        '  {"result": 1}\n',
        '```json\n{"result": 1}\n```',
        '```\n{"result": 1}\n```',
        'The answer:\n```JSON\n{"result": 1}\n```\nDone.',
        'I think {"result": 1} is right.',
    ],
)
def test_extract_json_tolerates_fences_and_prose(text: str) -> None:
    assert extract_json(text) == {"result": 1}


@pytest.mark.parametrize("text", ["", "no json here", "{broken", "```json\n{nope}\n```"])
def test_extract_json_rejects_non_json(text: str) -> None:
    with pytest.raises(ValueError, match="not JSON"):
        extract_json(text)


def test_validate_reply_names_the_failing_field() -> None:
    schema = reply_schema(True)
    assert validate_reply(json.dumps(GOOD), schema) == GOOD
    with pytest.raises(ValueError, match=r"^score: 150 is greater than the maximum of 100"):
        validate_reply('{"result": "x", "score": 150, "score_explanation": "e"}', schema)
    with pytest.raises(ValueError, match=r"^score: 'high' is not of type 'number'"):
        validate_reply('{"result": "x", "score": "high", "score_explanation": "e"}', schema)
    with pytest.raises(ValueError, match="'result' is a required property"):
        validate_reply('{"score": 1}', reply_schema(False))
    with pytest.raises(ValueError, match="is not of type 'object'"):
        validate_reply("[1, 2]", reply_schema(False))


# -- templates ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "reason"),
    [
        ("{result.__class__}", "not allowed"),
        ("{result[0]}", "not allowed"),
        ("{score!r}", "format spec or conversion"),
        ("{score:>10}", "format spec or conversion"),
        ("{password}", "not allowed"),
        ("{}", "not allowed"),
        ("{0}", "not allowed"),
        ("{result", "malformed template"),
        ("result}", "malformed template"),
    ],
)
def test_check_template_rejects_anything_but_plain_names(template: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        check_template(template, MESSAGE_FIELDS)


def test_check_template_accepts_plain_names_and_escaped_braces() -> None:
    check_template("{agent_id}: {result} ({score}/100, {{literal}})", MESSAGE_FIELDS)


def test_render_fills_values() -> None:
    text = render(
        "{agent_id} says {result} ({score}/100) {{x}}",
        {"agent_id": "rev", "result": "ok", "score": 80.0},
    )
    assert text == "rev says ok (80/100) {x}"


def test_render_none_as_empty_and_structures_as_json() -> None:
    assert render("[{score}]", {"score": None}) == "[]"
    assert render("[{score}]", {}) == "[]"
    assert render("{score}", {"score": 72.5}) == "72.5"
    assert render("{result}", {"result": {"a": [1, "é"]}}) == '{"a": [1, "é"]}'
    assert render("{result}", {"result": ["x", 2]}) == '["x", 2]'


# -- models ------------------------------------------------------------------------------------


def _command(**fields: Any) -> dict[str, Any]:
    return {"command_id": "cmd_x", "prompt": "do it", **fields}


@pytest.mark.parametrize("name", ["/etc/passwd", "../secret.txt", "a/../b", "sub/file.txt", ".env"])
def test_command_rejects_paths_in_required_inputs(name: str) -> None:
    with pytest.raises(ValidationError, match="required_inputs"):
        Command.model_validate(_command(required_inputs=[name]))


def test_command_accepts_plain_names_and_globs() -> None:
    cmd = Command.model_validate(_command(required_inputs=["proposal.json", "feedback_*.json"]))
    assert cmd.required_inputs == ["proposal.json", "feedback_*.json"]
    assert cmd.plan_id == "default"


@pytest.mark.parametrize("name", ["{to}/x.json", "out/{command_id}.json", "../x.json", "/abs"])
def test_command_rejects_output_name_with_a_path(name: str) -> None:
    with pytest.raises(ValidationError, match=r"on_complete\.output_name\n.*plain file name"):
        Command.model_validate(_command(on_complete={"send_to": ["user"], "output_name": name}))


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        (
            {"on_complete": {"message_template": "{result.__class__}"}},
            "on_complete.message_template",
        ),
        ({"on_complete": {"output_name": "{score}.json"}}, "on_complete.output_name"),
        ({"on_failure": {"message_template": "{result}"}}, "on_failure.message_template"),
    ],
)
def test_template_errors_name_the_template_field(fields: dict[str, Any], where: str) -> None:
    with pytest.raises(ValidationError) as info:
        Command.model_validate(_command(**fields))
    assert ".".join(str(p) for p in info.value.errors()[0]["loc"]) == where
    assert "is not allowed" in str(info.value)


def test_send_to_condition_needs_score_required() -> None:
    conditions = [{"min_score": 70, "send_to": ["manager"]}]
    with pytest.raises(ValidationError, match="set score_required to true"):
        Command.model_validate(_command(on_complete={"send_to_condition": conditions}))
    ok = Command.model_validate(
        _command(score_required=True, on_complete={"send_to_condition": conditions})
    )
    assert ok.on_complete.send_to_condition[0].send_to == ["manager"]


@pytest.mark.parametrize(
    "fields",
    [
        {"promt": "typo"},
        {"on_complete": {"sendto": ["user"]}},
        {"on_failure": {"send_to": ["user"], "extra": 1}},
    ],
)
def test_command_rejects_unknown_fields(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        Command.model_validate(_command(**fields))


@pytest.mark.parametrize(
    "fields",
    [
        {"command_id": "../evil"},
        {"plan_id": "a/b"},
        {"on_complete": {"send_to": ["../user"]}},
        {"on_complete": {"message_template": "{result.__class__}"}},
        {"on_failure": {"message_template": "{result}"}},
        {"timeout": 0},
    ],
)
def test_command_rejects_unsafe_values(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Command.model_validate(_command(**fields))


def test_schema_command_lists_the_seed_fields() -> None:
    result = CliRunner().invoke(app, ["schema", "command"])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.stdout)
    seed = {
        "command_id",
        "plan_id",
        "prompt",
        "required_inputs",
        "wait_for_inputs",
        "score_required",
        "score_criteria",
        "on_complete",
    }
    assert seed | {"timeout", "on_failure"} <= set(schema["properties"])
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == {"command_id", "prompt"}
    on_complete = schema["$defs"]["OnComplete"]["properties"]
    assert {"send_to", "send_to_condition", "message_template", "output_name"} <= set(on_complete)


# -- API keys ----------------------------------------------------------------------------------


def test_no_key_and_no_base_url_says_to_export_openai_api_key() -> None:
    with pytest.raises(ConfigError, match="export OPENAI_API_KEY"):
        openai_client("openai", ServiceConfig())


def test_unset_api_key_env_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="MY_LLM_KEY") as info:
        build_provider("svc", ServiceConfig(api_key_env="MY_LLM_KEY"), Path("unused"))
    assert "export MY_LLM_KEY" in str(info.value)


def test_a_local_server_needs_no_key(
    loopback: LoopbackLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", loopback.base_url)
    llm = build_provider("local", ServiceConfig(), Path("unused"))

    response = llm.complete(REQUEST)

    assert json.loads(response.text)["score"] == 80
    assert len(loopback.requests) == 1


def test_the_api_key_is_never_written_to_any_file(
    tmp_path: Path, loopback: LoopbackLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-test-SECRET123"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("OPENAI_BASE_URL", loopback.base_url)
    root = tmp_path / "society"
    dropped = init_society(root)
    # one transient error, so the retry history (which lands in the audit) is exercised too
    script(loopback, Status(503, {"Retry-After": "0"}))

    threads_before = set(threading.enumerate())
    Daemon(Society(root)).run(until_idle=True, watch=False)
    started = set(threading.enumerate()) - threads_before
    assert [t for t in started if "process_request_thread" not in t.name] == []  # loopback's own

    assert len(loopback.requests) == len(dropped) + 1
    headers = {k.lower(): v for k, v in loopback.requests[0].headers.items()}
    assert headers["authorization"] == f"Bearer {secret}"
    done = list((root / "agents").glob("*/archive/done/*/*.json"))
    assert len(done) == len(dropped)
    files = [p for p in root.rglob("*") if p.is_file()]
    assert len(files) > len(dropped)
    for path in files:
        assert b"SECRET123" not in path.read_bytes(), path
    assert os.environ["OPENAI_API_KEY"] == secret
