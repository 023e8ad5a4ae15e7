"""The LLM layer's service registry: selection, limits, structured output, error classes,
usage and budgets. HTTP behaviour is tested against the real loopback server."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    drop_command,
    make_society,
    profile_for,
    read_json,
    running_daemon,
    wait_until,
    write_json,
)
from typer.testing import CliRunner

from agenttalk.cli import app
from agenttalk.config import Config, ServiceConfig
from agenttalk.daemon import Daemon
from agenttalk.errors import ConfigError, ContextLengthError, ServiceAuthError
from agenttalk.llm import LLMRequest
from agenttalk.llm.limits import ServiceGate, TokenBucket
from agenttalk.llm.loopback import LoopbackLLM, Status
from agenttalk.llm.openai_provider import OpenAIProvider
from agenttalk.llm.registry import openai_client
from agenttalk.llm.reply import ask_structured
from agenttalk.llm.selection import default_service, select_service, unservable
from agenttalk.models import AgentProfile
from agenttalk.society import CommandKey, Society

CONTEXT_ERROR = json.dumps(
    {
        "error": {
            "message": "This model's maximum context length is 8 tokens.",
            "type": "invalid_request_error",
            "code": "context_length_exceeded",
        }
    }
)


class FakeClock:
    """Time that moves only when someone sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def _config(services: dict[str, Any], default: str | None = None) -> Config:
    return Config.model_validate({"llm": {"default": default, "services": services}})


def _profile(**llm: Any) -> AgentProfile:
    return AgentProfile.model_validate(profile_for("a", llm=llm))


# -- selection -----------------------------------------------------------------------------------


def test_a_named_service_wins_then_capabilities_in_config_order_then_the_default() -> None:
    config = _config(
        {
            "big": {"capabilities": ["reasoning", "coding"]},
            "small": {"capabilities": ["cheap", "coding"]},
            "fallback": {},
        },
        default="fallback",
    )
    assert select_service(config, _profile(service="small")) == "small"
    assert select_service(config, _profile(capabilities=["coding"])) == "big"
    assert select_service(config, _profile(capabilities=["cheap"])) == "small"
    assert select_service(config, _profile(capabilities=["vision"])) == "fallback"
    assert select_service(config, _profile()) == "fallback"


def test_validate_reports_a_profile_no_service_can_serve(tmp_path: Path) -> None:
    society = make_society(tmp_path, agents=["a"])
    write_json(society.agent("a").profile_path, profile_for("a", llm={"capabilities": ["vision"]}))
    reason = unservable(society.config, society.load_profile("a"))
    assert reason is not None and "vision" in reason
    result = CliRunner().invoke(app, ["validate", "--root", str(tmp_path)])
    assert result.exit_code == 1
    assert "vision" in result.output


def test_the_automatic_default_prefers_a_key_then_the_local_model() -> None:
    config = _config({"openai": {}, "local": {"provider": "local"}})
    assert default_service(config, env={"OPENAI_API_KEY": "k"}, has_local=True) == "openai"
    assert default_service(config, env={"OPENAI_BASE_URL": "http://x"}, has_local=False) == "openai"
    assert default_service(config, env={}, has_local=True) == "local"
    with pytest.raises(ConfigError, match=r"agenttalk\[local\]"):
        default_service(config, env={}, has_local=False)


def test_the_fake_is_never_chosen_implicitly() -> None:
    config = _config({"fake": {"provider": "fake"}})
    with pytest.raises(ConfigError):
        default_service(config, env={}, has_local=True)


# -- rate limits with an injected clock ----------------------------------------------------------


def test_rpm_bucket_makes_the_next_request_wait_instead_of_failing() -> None:
    clock = FakeClock()
    gate = ServiceGate(ServiceConfig(rpm=60), clock)
    for _ in range(60):
        with gate.admit(1):
            pass
    assert clock.sleeps == []
    with gate.admit(1):
        pass
    assert clock.sleeps == [pytest.approx(1.0)]  # 60 per minute = one per second


def test_tpm_bucket_waits_for_tokens_and_is_corrected_by_actual_usage() -> None:
    clock = FakeClock()
    gate = ServiceGate(ServiceConfig(tpm=600), clock)  # 10 tokens per second
    with gate.admit(500) as actual:
        actual.append(100)  # the call used fewer tokens than estimated: 400 come back
    with gate.admit(500):
        pass
    assert clock.sleeps == []
    with gate.admit(300):  # 0 left, 300 needed: 30 s
        pass
    assert sum(clock.sleeps) == pytest.approx(30.0)


def test_token_bucket_refills_with_time() -> None:
    clock = FakeClock()
    bucket = TokenBucket(120, clock)
    bucket.take(120)
    assert bucket.wait_time(2) == pytest.approx(1.0)
    clock.now += 1.0
    assert bucket.wait_time(2) == 0.0


def test_per_service_concurrency_cap_holds() -> None:
    gate = ServiceGate(ServiceConfig(max_concurrency=2))
    active, peak = 0, 0
    lock = threading.Lock()
    both_in = threading.Barrier(2, timeout=5)

    def call() -> None:
        nonlocal active, peak
        with gate.admit(1):
            with lock:
                active += 1
                peak = max(peak, active)
            with contextlib.suppress(threading.BrokenBarrierError):
                both_in.wait()
            time.sleep(0.02)
            with lock:
                active -= 1

    threads = [threading.Thread(target=call) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in threads)
    assert peak == 2


# -- structured output over HTTP -----------------------------------------------------------------


def _provider(llm: LoopbackLLM, monkeypatch: pytest.MonkeyPatch, **service: Any) -> OpenAIProvider:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    cfg = ServiceConfig(base_url=llm.base_url, retry_base_seconds=0, **service)
    return OpenAIProvider("svc", cfg, openai_client("svc", cfg), sleep=lambda s: None)


def _request() -> LLMRequest:
    return LLMRequest(messages=[{"role": "user", "content": "task"}], model="m")


@pytest.mark.parametrize(
    ("service", "expected"),
    [
        ({"supports_json_schema": True}, "json_schema"),
        ({"json_mode": True}, "json_object"),
        ({}, None),
    ],
)
def test_response_format_is_sent_only_to_services_that_support_it(
    monkeypatch: pytest.MonkeyPatch, service: dict[str, Any], expected: str | None
) -> None:
    with LoopbackLLM() as llm:
        outcome = ask_structured(
            _provider(llm, monkeypatch, **service), _request(), score_required=True
        )
    assert outcome.status == "ok"
    sent = llm.requests[0].body.get("response_format")
    if expected is None:
        assert sent is None
    else:
        assert sent["type"] == expected
    if expected == "json_schema":
        assert sent["json_schema"]["schema"]["required"] == ["result", "score", "score_explanation"]


def test_a_reply_that_breaks_the_schema_twice_then_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    good = {"result": "ok", "score": 70, "score_explanation": "fine"}
    with LoopbackLLM(
        [{"result": "x"}, {"result": "x", "score": 101, "score_explanation": ""}, good]
    ) as llm:
        outcome = ask_structured(_provider(llm, monkeypatch), _request(), score_required=True)
    assert outcome.status == "ok"
    assert outcome.reply == good
    assert [a.error is not None for a in outcome.attempts] == [True, True, False]
    assert "101" in llm.requests[2].body["messages"][-1]["content"]


def test_a_reply_in_a_code_fence_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    fenced = 'Here you go:\n```json\n{"result": "fenced"}\n```'
    with LoopbackLLM([fenced]) as llm:
        outcome = ask_structured(_provider(llm, monkeypatch), _request(), score_required=False)
    assert outcome.reply == {"result": "fenced"}
    assert len(llm.requests) == 1


def test_context_length_400_is_a_typed_error_and_never_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with LoopbackLLM([Status(400, body=CONTEXT_ERROR)]) as llm, pytest.raises(ContextLengthError):
        _provider(llm, monkeypatch).complete(_request())
    assert len(llm.requests) == 1


def test_401_is_an_auth_error_naming_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    with (
        LoopbackLLM([Status(401)]) as llm,
        pytest.raises(ServiceAuthError, match="OPENAI_API_KEY") as info,
    ):
        _provider(llm, monkeypatch).complete(_request())
    assert info.value.service == "svc"
    assert len(llm.requests) == 1


# -- the daemon with a real HTTP service ---------------------------------------------------------


def _http_society(tmp_path: Path, llm: LoopbackLLM, **extra: Any) -> Society:
    service = {
        "provider": "openai",
        "base_url": llm.base_url,
        "model": "m",
        "retry_base_seconds": 0,
        "price_input_per_mtok": 1000.0,
        "price_output_per_mtok": 2000.0,
    }
    config: dict[str, Any] = {"llm": {"default": "http", "services": {"http": service}}}
    config.update(extra)
    return make_society(tmp_path, agents=["writer"], config=config)


def test_context_length_shrinks_the_inputs_once_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    with LoopbackLLM([Status(400, body=CONTEXT_ERROR)]) as llm:
        society = _http_society(tmp_path, llm, max_input_chars=4000)
        write_json(society.agent("writer").inbox / "big.json", {"text": "x" * 3900})
        drop_command(
            society,
            "writer",
            {
                "command_id": "c1",
                "prompt": "sum up",
                "required_inputs": ["big.json"],
                "on_complete": {"send_to": ["user"]},
            },
        )
        Daemon(society).run(until_idle=True, watch=False)
    first, second = (len(r.body["messages"][-1]["content"]) for r in llm.requests)
    assert second < first - 2000
    audit = read_json(society.agent("writer").audit_dir(CommandKey("default", "c1")) / "audit.json")
    assert audit["status"] == "done"
    assert audit["llm"]["shrunk_inputs_to_chars"] == 1000


def test_context_length_twice_fails_with_a_clear_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    with LoopbackLLM([Status(400, body=CONTEXT_ERROR)] * 2) as llm:
        society = _http_society(tmp_path, llm, max_input_chars=4000)
        write_json(society.agent("writer").inbox / "big.json", {"text": "x" * 3900})
        drop_command(
            society,
            "writer",
            {"command_id": "c1", "prompt": "sum up", "required_inputs": ["big.json"]},
        )
        Daemon(society).run(until_idle=True, watch=False)
    assert len(llm.requests) == 2
    audit = read_json(society.agent("writer").audit_dir(CommandKey("default", "c1")) / "audit.json")
    assert audit["status"] == "failed"
    assert "larger context window" in audit["error"]


def test_401_keeps_commands_pending_raises_one_alert_and_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    with LoopbackLLM([Status(401)] * 3) as llm:
        society = _http_society(tmp_path, llm, heartbeat_seconds=0.3)
        for i in range(3):
            drop_command(society, "writer", {"command_id": f"c{i}", "prompt": f"task {i}"})
        alert = tmp_path / "alerts" / "auth_http.json"
        daemon = Daemon(society)
        with running_daemon(daemon):
            wait_until(alert.exists, timeout=5)
            inbox = society.agent("writer").inbox
            assert len(list(inbox.glob("cmd_*.json"))) == 3  # pending, not failed
            assert not (society.agent("writer").archive / "failed").exists()
            # one probe per heartbeat, then the key works again (script used up): all run
            wait_until(lambda: not list(inbox.glob("cmd_*.json")), timeout=10)
        assert not alert.exists()
    done = list((society.agent("writer").archive / "done" / "default").glob("*.json"))
    assert len(done) == 3
    assert len(llm.requests) == 6  # 3 refused probes, then one call per command


def test_usage_and_cost_are_recorded_and_summed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    with LoopbackLLM() as llm:
        society = _http_society(tmp_path, llm)
        for i in range(2):
            drop_command(
                society, "writer", {"command_id": f"c{i}", "plan_id": "p", "prompt": "task"}
            )
        Daemon(society).run(until_idle=True, watch=False)
    audit = read_json(society.agent("writer").audit_dir(CommandKey("p", "c0")) / "audit.json")
    # loopback reports 10 prompt + 5 completion tokens; prices are per million
    assert audit["llm"]["usage"]["total_tokens"] == 15
    assert audit["llm"]["cost"] == pytest.approx((10 * 1000 + 5 * 2000) / 1e6)
    result = CliRunner().invoke(app, ["usage", "--json", "--root", str(tmp_path)])
    assert result.exit_code == 0
    report = json.loads(result.output)
    assert report["by_agent"]["writer"]["total_tokens"] == 30
    assert report["by_plan"]["p"]["commands"] == 2
    assert report["by_service"]["http"]["cost"] == pytest.approx(0.04)


def test_a_budget_stops_further_spending(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    with LoopbackLLM() as llm:
        society = _http_society(tmp_path, llm, budget={"plans": {"p": {"max_tokens": 10}}})
        for i in range(3):
            drop_command(
                society, "writer", {"command_id": f"c{i}", "plan_id": "p", "prompt": "task"}
            )
        drop_command(society, "writer", {"command_id": "other", "plan_id": "q", "prompt": "task"})
        Daemon(society).run(until_idle=True, watch=False)
    writer = society.agent("writer")
    failed = sorted(p.stem for p in (writer.archive / "failed" / "p").glob("*.json"))
    assert len(failed) == 2
    assert (
        "budget exceeded"
        in read_json(writer.audit_dir(CommandKey("p", failed[0])) / "audit.json")["error"]
    )
    assert (writer.archive / "done" / "q" / "other.json").exists()
    assert len(llm.requests) == 2  # one for plan p (then over budget), one for plan q


def test_demo_runs_the_example_society_to_completion(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["demo", str(tmp_path / "d"), "--service", "dry-run"])
    assert result.exit_code == 0, result.output
    assert "cmd_review_consensus" in result.output
    assert str(tmp_path / "d" / "agents" / "user" / "inbox") in result.output.replace("\n", "")
    done = list((tmp_path / "d" / "agents").glob("*/archive/done/*/*.json"))
    assert len(done) == 4


def test_demo_with_an_unknown_service_says_so(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["demo", str(tmp_path / "d"), "--service", "nope"])
    assert result.exit_code == 1
    assert "nope" in result.output
