"""Running one accepted command to its end: LLM outcome (persisted), routing, audit, archive."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field

from agenttalk import fsio
from agenttalk.inputs import check_inputs
from agenttalk.intake import Accepted
from agenttalk.llm import LLMRequest
from agenttalk.llm.registry import Providers
from agenttalk.llm.reply import Outcome, ask_structured
from agenttalk.models import AgentProfile, Command, Message
from agenttalk.prompt import InputContent, cap_text, compose
from agenttalk.routing import Decision, Delivery, choose_targets, deliver, message_id
from agenttalk.society import AgentDir, CommandKey, Society
from agenttalk.templates import render

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
    outcome: Outcome


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Executor:
    def __init__(
        self, society: Society, providers: Providers, service_override: str | None = None
    ) -> None:
        self.society = society
        self.providers = providers
        self.service_override = service_override
        """Run every agent on this service (e.g. `--service dry-run`), whatever its profile says."""
        self.durable = society.config.durability == "safe"

    def run(self, job: Job, profile: AgentProfile) -> Report:
        """Execute `job` (its inputs are ready, or it does not wait for them)."""
        agent, key = job.agent, job.key
        fsio.atomic_write_json(
            agent.running_path(key),
            {"pid": os.getpid(), "started_at": fsio.now_iso()},
            durable=False,
        )
        record_path = agent.result_path(key)
        if record_path.exists():
            record = RunRecord.model_validate_json(record_path.read_bytes())
            log.info(
                "%s %s: resuming after a restart with the saved LLM outcome", agent.agent_id, key
            )
        else:
            record = self._ask(job, profile)
            fsio.atomic_write_json(
                record_path, record.model_dump(mode="json"), durable=self.durable
            )
        outcome = record.outcome
        if outcome.status == "ok":
            assert outcome.reply is not None
            decision, deliveries = self._route_result(job, outcome.reply)
            status, error = "done", None
        else:
            error = outcome.error or "unknown error"
            decision, deliveries = self._route_failure(job, error)
            status = "failed"
        return self._finish(job, status, error, record, decision, deliveries)

    def fail(self, job: Job, error: str) -> Report:
        """End `job` as failed without calling the LLM (e.g. it timed out waiting for inputs)."""
        decision, deliveries = self._route_failure(job, error)
        return self._finish(job, "failed", error, None, decision, deliveries)

    # -- steps ---------------------------------------------------------------------------------

    def _ask(self, job: Job, profile: AgentProfile) -> RunRecord:
        started = time.time()
        config = self.society.config
        check = check_inputs(job.agent, job.command, settle=config.settle_seconds)
        contents: list[InputContent] = []
        for item in check.found:
            try:
                data = item.path.read_bytes()[: config.max_file_bytes]
            except OSError as exc:
                check.missing.append(f"{item.name} (unreadable: {exc.strerror})")
                continue
            text, truncated = cap_text(data, config.max_input_chars)
            contents.append(
                InputContent(item.name, fsio.sha256_bytes(data), len(data), text, truncated)
            )
        messages = compose(profile, job.command, contents, check.missing)
        service_name = self.service_override or profile.llm.service or config.llm.default
        service = config.llm.services[service_name]
        request = LLMRequest(
            messages=messages,
            model=profile.llm.model or service.model,
            temperature=profile.llm.temperature,
            max_tokens=profile.llm.max_tokens,
        )
        provider = self.providers.get(service_name)
        outcome = ask_structured(provider, request, score_required=job.command.score_required)
        return RunRecord(
            started_at=started,
            inputs=[
                InputRecord(name=c.name, sha256=c.sha256, size=c.size, truncated=c.truncated)
                for c in contents
            ],
            missing_inputs=check.missing,
            outcome=outcome,
        )

    def _route_result(self, job: Job, reply: dict[str, Any]) -> tuple[Decision, list[Delivery]]:
        command, sender = job.command, job.agent.agent_id
        score = reply.get("score")
        decision = choose_targets(command.on_complete, score if command.score_required else None)
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
        if delivery.status != "failed":
            copy = job.agent.audit_dir(job.key) / "sent" / message.to / name
            fsio.atomic_write_json(copy, message.model_dump(by_alias=True), durable=self.durable)
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
        agent.running_path(key).unlink(missing_ok=True)
        log.info("%s %s: %s%s", agent.agent_id, key, status, f" ({error})" if error else "")
        touched = [d.to for d in deliveries if d.status != "failed"]
        return Report(status, touched)
