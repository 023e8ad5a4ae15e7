"""Token and cost accounting from the audit records, and the budget that stops spending."""

from __future__ import annotations

import json
import os
import threading
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

from agenttalk.config import BudgetConfig, Limit
from agenttalk.society import Society


class Totals(BaseModel):
    calls: int = 0
    commands: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost: float = 0.0
    latency_s: float = 0.0

    def add(self, llm: dict[str, Any]) -> None:
        usage = llm.get("usage") or {}
        self.commands += 1
        self.calls += len(llm.get("attempts") or [])
        self.prompt_tokens += int(usage.get("prompt_tokens") or 0)
        self.completion_tokens += int(usage.get("completion_tokens") or 0)
        self.total_tokens += int(usage.get("total_tokens") or 0)
        self.cost += float(llm.get("cost") or 0.0)
        self.latency_s += sum(float(a.get("latency_s") or 0) for a in llm.get("attempts") or [])


def _limits(limit: Limit) -> bool:
    return limit.max_tokens is not None or limit.max_cost is not None


def _subfolders(folder: str) -> list[str]:
    try:
        with os.scandir(folder) as it:
            return sorted(e.path for e in it if e.is_dir(follow_symlinks=False))
    except (FileNotFoundError, NotADirectoryError):
        return []


def audits(society: Society, plans: list[str] | None = None) -> Iterator[dict[str, Any]]:
    """Every audit record in the society (outbox/<plan>/<command>/audit.json), or of `plans`."""
    for agent_id in society.agent_ids():
        outbox = str(society.agent(agent_id).outbox)
        if plans is None:
            plan_folders = _subfolders(outbox)
        else:
            plan_folders = [os.path.join(outbox, p) for p in plans]
        for plan_folder in plan_folders:
            for command_folder in _subfolders(plan_folder):
                try:
                    with open(os.path.join(command_folder, "audit.json"), "rb") as f:
                        record = json.loads(f.read())
                except (OSError, ValueError):
                    continue
                if isinstance(record, dict):
                    yield record


class UsageReport(BaseModel):
    total: Totals = Totals()
    by_agent: dict[str, Totals] = {}
    by_plan: dict[str, Totals] = {}
    by_service: dict[str, Totals] = {}


def usage_report(society: Society) -> UsageReport:
    report = UsageReport()
    groups: dict[str, defaultdict[str, Totals]] = {
        k: defaultdict(Totals) for k in ("agent", "plan", "service")
    }
    for record in audits(society):
        llm = record.get("llm")
        if not isinstance(llm, dict):
            continue
        report.total.add(llm)
        groups["agent"][str(record.get("agent_id"))].add(llm)
        groups["plan"][str(record.get("plan_id"))].add(llm)
        groups["service"][str(llm.get("service"))].add(llm)
    report.by_agent = dict(sorted(groups["agent"].items()))
    report.by_plan = dict(sorted(groups["plan"].items()))
    report.by_service = dict(sorted(groups["service"].items()))
    return report


class Ledger:
    """Running spend, global and per plan, checked before each LLM call (thread-safe).

    Commands already running when a limit is reached still finish, so spend can pass a limit
    by at most what the commands in flight use.
    """

    def __init__(self, budget: BudgetConfig) -> None:
        self.budget = budget
        self.lock = threading.Lock()
        self.tokens = 0
        self.cost = 0.0
        self.plan_tokens: defaultdict[str, int] = defaultdict(int)
        self.plan_cost: defaultdict[str, float] = defaultdict(float)

    @classmethod
    def from_audits(cls, society: Society) -> Ledger:
        """The spend so far, read from the audits only where a limit needs it.

        Reading every audit costs seconds at 100,000 finished commands, at every start: without
        a global limit only the plans with limits are read, without any limit nothing.
        """
        budget = society.config.budget
        ledger = cls(budget)
        if budget.max_tokens is not None or budget.max_cost is not None:
            records = audits(society)
        else:
            limited = [p for p, limit in budget.plans.items() if _limits(limit)]
            if not limited:
                return ledger
            records = audits(society, plans=limited)
        for record in records:
            llm = record.get("llm")
            if isinstance(llm, dict):
                usage = llm.get("usage") or {}
                ledger.add(
                    str(record.get("plan_id")),
                    int(usage.get("total_tokens") or 0),
                    float(llm.get("cost") or 0.0),
                )
        return ledger

    def add(self, plan_id: str, tokens: int, cost: float) -> None:
        with self.lock:
            self.tokens += tokens
            self.cost += cost
            self.plan_tokens[plan_id] += tokens
            self.plan_cost[plan_id] += cost

    def exceeded(self, plan_id: str) -> str | None:
        """The reason no more may be spent for `plan_id`, or None."""
        with self.lock:
            checks: list[tuple[str, Limit, int, float]] = [
                ("", self.budget, self.tokens, self.cost)
            ]
            plan = self.budget.plans.get(plan_id)
            if plan is not None:
                checks.append(
                    (
                        f" of plan {plan_id}",
                        plan,
                        self.plan_tokens[plan_id],
                        self.plan_cost[plan_id],
                    )
                )
            for scope, limit, tokens, cost in checks:
                if limit.max_tokens is not None and tokens >= limit.max_tokens:
                    return (
                        f"budget exceeded: {tokens} tokens spent, the budget{scope} is "
                        f"{limit.max_tokens} (raise budget.max_tokens in config.yaml)"
                    )
                if limit.max_cost is not None and cost >= limit.max_cost:
                    return (
                        f"budget exceeded: {cost:.4f} spent, the budget{scope} is "
                        f"{limit.max_cost} (raise budget.max_cost in config.yaml)"
                    )
        return None
