"""The budget ledger reads past spending from the audits, and only the spending a limit needs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import make_society, write_json

from agenttalk.society import CommandKey, Society
from agenttalk.usage import Ledger


def spent(society: Society, agent_id: str, plan: str, command: str, tokens: int) -> None:
    """The audit a finished command leaves, with `tokens` spent at 0.001 a token."""
    audit = {
        "agent_id": agent_id,
        "plan_id": plan,
        "command_id": command,
        "status": "done",
        "llm": {"usage": {"total_tokens": tokens}, "cost": tokens / 1000, "attempts": [{}]},
    }
    write_json(society.agent(agent_id).audit_dir(CommandKey(plan, command)) / "audit.json", audit)


def society_with(tmp_path: Path, budget: dict[str, Any] | None) -> Society:
    society = make_society(tmp_path, ["alice", "bob"], {"budget": budget} if budget else None)
    spent(society, "alice", "p", "c1", 100)
    spent(society, "bob", "p", "c2", 50)
    spent(society, "alice", "q", "c3", 7)
    return society


def test_a_global_budget_counts_every_audit(tmp_path: Path) -> None:
    ledger = Ledger.from_audits(society_with(tmp_path, {"max_tokens": 1000}))
    assert ledger.tokens == 157
    assert ledger.plan_tokens == {"p": 150, "q": 7}
    assert abs(ledger.cost - 0.157) < 1e-9


def test_a_plan_budget_counts_that_plan_and_stops_it_when_reached(tmp_path: Path) -> None:
    ledger = Ledger.from_audits(society_with(tmp_path, {"plans": {"p": {"max_tokens": 150}}}))
    assert ledger.plan_tokens["p"] == 150
    reason = ledger.exceeded("p")
    assert reason is not None and "150 tokens spent" in reason
    assert ledger.exceeded("q") is None


def test_a_plan_cost_budget_counts_that_plans_cost(tmp_path: Path) -> None:
    ledger = Ledger.from_audits(society_with(tmp_path, {"plans": {"q": {"max_cost": 0.5}}}))
    assert abs(ledger.plan_cost["q"] - 0.007) < 1e-9
    assert ledger.exceeded("q") is None


def test_without_a_budget_nothing_can_be_exceeded(tmp_path: Path) -> None:
    ledger = Ledger.from_audits(society_with(tmp_path, None))
    assert ledger.exceeded("p") is None
    assert ledger.exceeded("q") is None
