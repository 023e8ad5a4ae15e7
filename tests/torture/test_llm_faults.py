"""LLM faults over the real loopback HTTP server: storms of 429 and 5xx, timeouts, connections
dropped before and during the reply, replies that are not JSON, scores out of range. Every
command ends (done, or failed with the reason in its audit), none is lost, none runs twice.

CI: 48 commands (24 chained pairs). Long (AGENTTALK_TORTURE=long): 400 commands.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from agenttalk.llm.loopback import FAULT_KINDS, Faults, LoopbackLLM, Status

from .support import (
    Cmd,
    assert_ended_well,
    daemon_process,
    make_root,
    seed,
    size,
    tail,
)

PLAN = "faults"
HANG = 1.5
CONFIG: dict[str, Any] = {
    "heartbeat_seconds": 1,
    "durability": "safe",
    "settle_seconds": 0.2,
    "max_concurrency": 8,
    "llm": {
        "default": "flaky",
        "services": {
            "flaky": {
                "provider": "openai",
                "model": "flaky-model",
                "max_retries": 3,
                "retry_base_seconds": 0.02,
                "retry_max_seconds": 0.1,
                "timeout": HANG / 2,
            }
        },
    },
}
REASONS = (
    "HTTP 429",
    "HTTP 500",
    "HTTP 502",
    "HTTP 503",
    "request timed out",
    "connection error",
    "not valid after 2 repair attempts",
    "timed out after",  # waiting for an input its failed predecessor never sent
)


def pairs(n: int) -> list[Cmd]:
    """Pairs across four writers and four readers: the reader waits for the writer's result;
    if the writer fails, the reader times out waiting. Both report failures to `user`."""
    out = []
    for i in range(n):
        writer, reader = f"writer{i % 4}", f"reader{i % 4}"
        out.append(Cmd(writer, f"w{i:03d}", PLAN, (reader,), f"w{i:03d}.json", (), ("user",), True))
        out.append(
            Cmd(
                reader,
                f"r{i:03d}",
                PLAN,
                ("user",),
                f"r{i:03d}.json",
                (f"w{i:03d}.json",),
                ("user",),
            )
        )
    return out


def test_storms_and_random_llm_faults_end_every_command_once_with_a_reason(
    tmp_path: Path,
) -> None:
    commands = pairs(size(24, 200))
    root = tmp_path / "society"
    make_root(root, sorted({c.agent for c in commands}), CONFIG)
    for cmd in commands:
        data = cmd.as_json()
        if cmd.required_inputs:
            data["timeout"] = 8  # a reader whose writer failed ends by timing out
        path = root / "agents" / cmd.agent / "inbox" / f"cmd_{cmd.command_id}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data))
    faults = Faults(rate=0.45, seed=seed(), hang=HANG)
    # First a storm of 429s, then one of 5xx, then each fault kind once, then the random mix.
    script: list[Any] = [Status(429, {"retry-after": "0"})] * 12
    script += [Status(code) for code in (500, 502, 503) * 4]
    script += [
        faults.step(kind, {"messages": [{"content": "Task scripted"}]}) for kind in FAULT_KINDS
    ]
    log = tmp_path / "daemon.log"
    started = time.monotonic()
    with LoopbackLLM(script=script, default=faults) as llm, daemon_process(root, log, llm) as proc:
        deadline = time.monotonic() + size(240, 900)

        def audits() -> int:
            return sum(
                1
                for c in commands
                if (
                    root / "agents" / c.agent / "outbox" / PLAN / c.command_id / "audit.json"
                ).exists()
            )

        while (n := audits()) < len(commands):
            assert proc.poll() is None, tail(log)
            assert time.monotonic() < deadline, f"{n} of {len(commands)} ended; {tail(log)}"
            time.sleep(0.2)
        proc.terminate()
        assert proc.wait(timeout=60) == 0, tail(log)
        requests = len(llm.requests)
    elapsed = time.monotonic() - started

    statuses = assert_ended_well(root, commands, allow_failed=True)
    failed = sorted(c for c, s in statuses.items() if s == "failed")
    print(
        f"llm faults: {len(commands)} commands, {requests} requests, {len(failed)} failed, "
        f"served {dict(faults.served)}, {elapsed:.1f}s"
    )
    for cmd in commands:
        audit = json.loads(
            (
                root / "agents" / cmd.agent / "outbox" / PLAN / cmd.command_id / "audit.json"
            ).read_bytes()
        )
        if audit["status"] == "failed":
            assert any(r in audit["error"] for r in REASONS), audit["error"]
            notice = (
                root / "agents/user/inbox" / PLAN / f"{cmd.command_id}_failed_from_{cmd.agent}.json"
            )
            assert json.loads(notice.read_bytes())["error"] == audit["error"]
        elif cmd.score_required:
            assert 0 <= audit["score"] <= 100, audit
    assert 0 < len(failed) < len(commands), "the faults should fail some commands, not all"
    assert faults.served["ok"] > 0
