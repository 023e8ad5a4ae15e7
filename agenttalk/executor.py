"""Running one accepted command to its end: LLM outcome (persisted), routing, audit, archive."""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field

from agenttalk import fsio
from agenttalk.config import ServiceConfig
from agenttalk.discussion.answer import answer_turn
from agenttalk.errors import ContextLengthError
from agenttalk.eventlog import EventLog
from agenttalk.inputs import check_inputs
from agenttalk.intake import Accepted
from agenttalk.llm import LLMRequest
from agenttalk.llm.registry import Providers
from agenttalk.llm.reply import Outcome, ask_structured
from agenttalk.llm.selection import select_service
from agenttalk.models import AgentProfile, Command, Message
from agenttalk.prompt import InputContent, cap_text, compose
from agenttalk.routing import Decision, Delivery, choose_targets, deliver, message_id
from agenttalk.society import AgentDir, CommandKey, Society
from agenttalk.templates import render
from agenttalk.usage import Ledger

log = logging.getLogger(__name__)


@dataclass
class Job:
    agent: AgentDir
    accepted: Accepted
    arrived_at: float

    @property
    def command(self) -> Command:
        return self.accepted.command

    @property
    def key(self) -> CommandKey:
        return CommandKey(self.command.plan_id, self.command.command_id)


@dataclass
class Report:
    status: str
    touched: list[str] = field(default_factory=list)
    """Agents that received a message (their waiting commands re-check at once)."""
    called_llm: bool = False
    """The service answered (so it accepts our key)."""


class InputRecord(BaseModel):
    name: str
    sha256: str
    size: int
    truncated: bool = False


class RunRecord(BaseModel):
    """The LLM step's outcome and what it saw; written before any delivery (outbox pattern)."""

    started_at: float
    inputs: list[InputRecord] = Field(default_factory=list)
    missing_inputs: list[str] = Field(default_factory=list)
    shrunk_inputs_to_chars: int | None = None
    """Set when a context-length error made us cut every input to this many characters."""
    outcome: Outcome


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Executor:
    def __init__(
        self,
        society: Society,
        providers: Providers,
        service_override: str | None = None,
        ledger: Ledger | None = None,
        eventlog: EventLog | None = None,
    ) -> None:
        self.society = society
        self.providers = providers
        self.ledger = ledger or Ledger.from_audits(society)
        self.llm_slots = threading.BoundedSemaphore(society.config.max_concurrency)
        """The global cap on LLM calls in flight (services may have lower caps of their own)."""
        self.service_override = service_override
        """Run every agent on this service (e.g. `--service dry-run`), whatever its profile says."""
        self.durable = society.config.durability == "safe"
        self.eventlog = eventlog or EventLog(society.root, durable=self.durable)
        """Read for discussion turns: the recent public events of the session."""

    def run(self, job: Job, profile: AgentProfile) -> Report:
        """Execute `job` (its inputs are ready, or it does not wait for them).

        Raises ServiceAuthError (the command stays pending) when the service refuses the key.
        """
        agent, key = job.agent, job.key
        running = agent.running_path(key)
        fsio.atomic_write_json(
            running, {"pid": os.getpid(), "started_at": fsio.now_iso()}, durable=False
        )
        try:
            record_path = agent.result_path(key)
            if record_path.exists():
                record = RunRecord.model_validate_json(record_path.read_bytes())
                log.info("%s %s: resuming with the saved LLM outcome", agent.agent_id, key)
            else:
                record = self._ask(job, profile)
                fsio.atomic_write_json(
                    record_path, record.model_dump(mode="json"), durable=self.durable
                )
            outcome = record.outcome
            fsio.sweep_folder(agent.audit_dir(key))  # left by a crash in an earlier attempt
            if outcome.status == "ok":
                assert outcome.reply is not None
                decision, deliveries = self._route_result(job, outcome.reply)
                status, error = "done", None
            else:
                error = outcome.error or "unknown error"
                decision, deliveries = self._route_failure(job, error)
                status = "failed"
            report = self._finish(job, status, error, record, decision, deliveries)
            report.called_llm = bool(outcome.attempts)
            return report
        finally:
            running.unlink(missing_ok=True)

    def fail(self, job: Job, error: str) -> Report:
        """End `job` as failed without calling the LLM (e.g. it timed out waiting for inputs)."""
        fsio.sweep_folder(job.agent.audit_dir(job.key))
        decision, deliveries = self._route_failure(job, error)
        return self._finish(job, "failed", error, None, decision, deliveries)

    def service_for(self, profile: AgentProfile) -> str:
        return self.service_override or select_service(self.society.config, profile)

    # -- steps ---------------------------------------------------------------------------------

    def _read_inputs(self, job: Job, max_chars: int) -> tuple[list[InputContent], list[str]]:
        config = self.society.config
        check = check_inputs(job.agent, job.command, settle=config.settle_seconds)
        contents: list[InputContent] = []
        for item in check.found:
            try:
                data = item.path.read_bytes()[: config.max_file_bytes]
            except OSError as exc:
                check.missing.append(f"{item.name} (unreadable: {exc.strerror})")
                continue
            text, truncated = cap_text(data, max_chars)
            contents.append(
                InputContent(item.name, fsio.sha256_bytes(data), len(data), text, truncated)
            )
        return contents, check.missing

    def _ask(self, job: Job, profile: AgentProfile) -> RunRecord:
        started = time.time()
        config = self.society.config
        command = job.command
        service_name = self.service_for(profile)
        service = config.llm.services[service_name]
        model = profile.llm.model or service.model
        contents, missing = self._read_inputs(job, config.max_input_chars)
        record = RunRecord(
            started_at=started,
            missing_inputs=missing,
            outcome=Outcome(status="failed", service=service_name, model=model),
        )
        reason = self.ledger.exceeded(command.plan_id)
        if reason is not None:
            record.outcome.error = reason
            return record
        provider = self.providers.get(service_name)
        if command.discussion is not None:
            try:
                with self.llm_slots:
                    outcome = answer_turn(
                        provider,
                        profile,
                        command.discussion,
                        self.eventlog,
                        job.agent.path,
                        model,
                        durable=self.durable,
                    )
            except ContextLengthError as exc:
                record.outcome.error = f"{exc}: the discussion prompt does not fit the model"
                return record
            return self._used(record, service, command.plan_id, outcome, [])

        def ask(contents: list[InputContent]) -> Outcome:
            request = LLMRequest(
                messages=compose(profile, command, contents, missing),
                model=model,
                temperature=profile.llm.temperature,
                max_tokens=profile.llm.max_tokens,
            )
            with self.llm_slots:
                return ask_structured(provider, request, score_required=command.score_required)

        try:
            outcome = ask(contents)
        except ContextLengthError as exc:
            # Shrink policy: cut every input to a quarter of max_input_chars and retry once.
            cap = max(200, config.max_input_chars // 4)
            if not any(len(c.text) > cap for c in contents):
                record.outcome.error = f"{exc}: the prompt does not fit even without long inputs"
                return record
            contents, missing = self._read_inputs(job, cap)
            record.shrunk_inputs_to_chars = cap
            try:
                outcome = ask(contents)
            except ContextLengthError as again:
                record.outcome.error = (
                    f"{again}: still too long after cutting each input to {cap} characters; "
                    "shorten the inputs or use a model with a larger context window"
                )
                return record
        return self._used(record, service, command.plan_id, outcome, contents)

    def _used(
        self,
        record: RunRecord,
        service: ServiceConfig,
        plan_id: str,
        outcome: Outcome,
        contents: list[InputContent],
    ) -> RunRecord:
        """Complete `record` with the outcome, its cost, and the inputs it saw; count the usage."""
        usage = outcome.usage
        outcome.cost = service.cost(usage.prompt_tokens, usage.completion_tokens)
        self.ledger.add(plan_id, usage.total_tokens, outcome.cost)
        record.inputs = [
            InputRecord(name=c.name, sha256=c.sha256, size=c.size, truncated=c.truncated)
            for c in contents
        ]
        record.outcome = outcome
        return record

    def _route_result(self, job: Job, reply: dict[str, Any]) -> tuple[Decision, list[Delivery]]:
        command, sender = job.command, job.agent.agent_id
        score = reply.get("score") if command.score_required else None
        decision = choose_targets(command.on_complete, score)
        values = {
            "result": reply["result"],
            "score": score,
            "score_explanation": reply.get("score_explanation"),
            "command_id": command.command_id,
            "plan_id": command.plan_id,
            "agent_id": sender,
        }
        text = render(command.on_complete.message_template, values)
        deliveries = []
        for to in decision.targets:
            message = Message(
                message_id=message_id(sender, command.plan_id, command.command_id, to, "done"),
                plan_id=command.plan_id,
                command_id=command.command_id,
                from_=sender,
                to=to,
                created_at=fsio.now_iso(),
                result=reply["result"],
                score=score,
                score_explanation=reply.get("score_explanation"),
                text=text,
            )
            name = render(command.on_complete.output_name, {**values, "to": to})
            deliveries.append(self._send(job, message, name))
        return decision, deliveries

    def _route_failure(self, job: Job, error: str) -> tuple[Decision, list[Delivery]]:
        command, sender = job.command, job.agent.agent_id
        targets = list(dict.fromkeys(command.on_failure.send_to))
        values = {
            "error": error,
            "command_id": command.command_id,
            "plan_id": command.plan_id,
            "agent_id": sender,
        }
        text = render(command.on_failure.message_template, values)
        deliveries = []
        for to in targets:
            message = Message(
                message_id=message_id(sender, command.plan_id, command.command_id, to, "failed"),
                plan_id=command.plan_id,
                command_id=command.command_id,
                from_=sender,
                to=to,
                created_at=fsio.now_iso(),
                status="failed",
                text=text,
                error=error,
            )
            name = f"{command.command_id}_failed_from_{sender}.json"
            deliveries.append(self._send(job, message, name))
        return Decision(targets, None), deliveries

    def _send(self, job: Job, message: Message, name: str) -> Delivery:
        delivery = deliver(self.society, message, name, durable=self.durable)
        if delivery.status != "failed" and delivery.file is not None:
            copy = job.agent.audit_dir(job.key) / "sent" / message.to / name
            fsio.link_or_copy(self.society.root / delivery.file, copy, durable=self.durable)
        else:
            log.warning("%s %s: %s", job.agent.agent_id, job.key, delivery.error)
        return delivery

    def _finish(
        self,
        job: Job,
        status: str,
        error: str | None,
        record: RunRecord | None,
        decision: Decision,
        deliveries: list[Delivery],
    ) -> Report:
        agent, key, command = job.agent, job.key, job.command
        finished = time.time()
        audit: dict[str, Any] = {
            "agent_id": agent.agent_id,
            "plan_id": command.plan_id,
            "command_id": command.command_id,
            "status": status,
            "error": error,
            "command_file": job.accepted.path.name,
            "command_sha256": job.accepted.sha256,
            "command": command.model_dump(mode="json"),
            "arrived_at": _iso(job.arrived_at),
            "finished_at": _iso(finished),
        }
        if record is not None:
            outcome = record.outcome
            reply = outcome.reply or {}
            audit.update(
                started_at=_iso(record.started_at),
                timings={
                    "waited_s": round(record.started_at - job.arrived_at, 3),
                    "llm_s": round(sum(a.latency_s for a in outcome.attempts), 3),
                    "total_s": round(finished - job.arrived_at, 3),
                },
                inputs=[i.model_dump() for i in record.inputs],
                missing_inputs=record.missing_inputs,
                llm={
                    "service": outcome.service,
                    "model": outcome.model,
                    "usage": outcome.usage.model_dump(),
                    "cost": outcome.cost,
                    "shrunk_inputs_to_chars": record.shrunk_inputs_to_chars,
                    "attempts": [a.model_dump() for a in outcome.attempts],
                },
                result=reply.get("result"),
                score=reply.get("score"),
                score_explanation=reply.get("score_explanation"),
            )
        audit["routing"] = {
            "matched_min_score": decision.matched_min_score,
            "targets": decision.targets,
            "deliveries": [d.as_dict() for d in deliveries],
        }
        archived = agent.finished_path(status, key)
        audit["archived_as"] = str(archived.relative_to(self.society.root))
        fsio.atomic_write_json(agent.audit_dir(key) / "audit.json", audit, durable=self.durable)
        if job.accepted.path.exists():
            fsio.move(job.accepted.path, archived, durable=self.durable)
        agent.result_path(key).unlink(missing_ok=True)
        log.info("%s %s: %s%s", agent.agent_id, key, status, f" ({error})" if error else "")
        touched = [d.to for d in deliveries if d.status != "failed"]
        return Report(status, touched)
