"""Services that refused our API key: their commands wait, one probe per heartbeat, one alert."""

from __future__ import annotations

import logging
from pathlib import Path

from agenttalk import fsio
from agenttalk.errors import ServiceAuthError

log = logging.getLogger(__name__)


class AuthBlocks:
    """Blocked services and when each may be probed again (main-thread state of the daemon)."""

    def __init__(self, root: Path, heartbeat: float, *, durable: bool) -> None:
        self.root = root
        self.heartbeat = heartbeat
        self.durable = durable
        self.probe_at: dict[str, float] = {}

    def __contains__(self, service: object) -> bool:
        return service in self.probe_at

    def alert_path(self, service: str) -> Path:
        return self.root / "alerts" / f"auth_{service}.json"

    def block(self, error: ServiceAuthError, now: float) -> None:
        """Stop sending to the service; write the alert the first time only."""
        service = error.service
        if service not in self.probe_at:
            alert = {
                "alert": "service_auth_failed",
                "service": service,
                "error": str(error),
                "at": fsio.now_iso(),
                "effect": "commands for this service stay pending; one is retried each heartbeat",
                "fix": "set a valid API key for the service and restart the daemon",
            }
            fsio.atomic_write_json(self.alert_path(service), alert, durable=self.durable)
            log.error("%s; its commands stay pending until the key works", error)
        self.probe_at[service] = now + self.heartbeat

    def unblock(self, service: str) -> None:
        del self.probe_at[service]
        self.alert_path(service).unlink(missing_ok=True)
        log.info("service %s accepts our key again", service)

    def may_send(self, service: str | None, now: float) -> float | None:
        """None if a command may go to `service` now (a probe counts), else when to look again."""
        probe_at = self.probe_at.get(service or "")
        if probe_at is None:
            return None
        if probe_at > now:
            return probe_at
        self.probe_at[service or ""] = now + self.heartbeat  # this command is the probe
        return None
