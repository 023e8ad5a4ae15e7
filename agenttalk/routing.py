"""Choosing recipients by score and delivering messages idempotently into their inboxes."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any

from agenttalk import fsio
from agenttalk.diskspace import is_disk_full
from agenttalk.models import Message, OnComplete
from agenttalk.society import Society


@dataclass(frozen=True)
class Decision:
    targets: list[str]
    matched_min_score: float | None
    """The `min_score` of the condition that added targets, if any."""


def choose_targets(on_complete: OnComplete, score: float | None) -> Decision:
    """`send_to` always; plus the targets of the highest condition the score reaches."""
    targets = list(on_complete.send_to)
    matched = None
    if score is not None:
        reached = [c for c in on_complete.send_to_condition if score >= c.min_score]
        if reached:
            best = max(reached, key=lambda c: c.min_score)
            matched = best.min_score
            targets += best.send_to
    return Decision(list(dict.fromkeys(targets)), matched)


def message_id(sender: str, plan_id: str, command_id: str, to: str, status: str) -> str:
    """Deterministic, so a repeated delivery after a crash is recognised as the same message."""
    key = "\x1f".join((sender, plan_id, command_id, to, status))
    return "msg_" + hashlib.sha256(key.encode()).hexdigest()[:20]


@dataclass
class Delivery:
    to: str
    file: str | None
    status: str
    """delivered, already_delivered, replaced (another message had the name) or failed."""
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def deliver(society: Society, message: Message, output_name: str, *, durable: bool) -> Delivery:
    """Write `message` as `<to>/inbox/<plan_id>/<output_name>` unless it is already there."""
    to = message.to
    if not society.exists(to):
        return Delivery(
            to, None, "failed", f"unknown agent {to!r}: no agents/{to}/agent_profile.json"
        )
    target = society.agent(to).plan_inbox(message.plan_id) / output_name
    status = "delivered"
    if target.exists():
        try:
            existing = json.loads(target.read_bytes()).get("message_id")
        except (OSError, ValueError, AttributeError):
            existing = None
        if existing == message.message_id:
            if durable:  # an attempt that crashed may have renamed it in without the fsync
                fsio.fsync_dir(target.parent)
            return Delivery(to, str(target.relative_to(society.root)), "already_delivered")
        status = "replaced"
    payload = message.model_dump(by_alias=True)
    try:
        fsio.atomic_write_json(target, payload, durable=durable)
    except OSError as exc:
        if is_disk_full(exc):
            raise  # not this message's fault: the command waits for space and delivers then
        return Delivery(to, None, "failed", f"cannot write {target}: {exc.strerror}")
    return Delivery(to, str(target.relative_to(society.root)), status)
