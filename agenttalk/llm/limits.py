"""Per-service concurrency caps and RPM/TPM token buckets: a call waits for capacity."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from agenttalk.config import ServiceConfig
from agenttalk.llm import Clock, LLMRequest


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class TokenBucket:
    """`per_minute` units refilled continuously; the balance may go negative after corrections."""

    def __init__(self, per_minute: int, clock: Clock) -> None:
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0
        self.clock = clock
        self.tokens = self.capacity
        self.updated = clock.monotonic()

    def _refill(self) -> None:
        now = self.clock.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
        self.updated = now

    def wait_time(self, amount: float) -> float:
        """Seconds until `amount` (at most the capacity) is available; 0 if it is now."""
        self._refill()
        need = min(amount, self.capacity) - self.tokens
        return 0.0 if need <= 0 else need / self.rate

    def take(self, amount: float) -> None:
        self._refill()
        self.tokens -= amount


def estimate_tokens(request: LLMRequest) -> int:
    """Prompt characters / 4 plus the completion allowance: the usual rough token count."""
    chars = sum(len(m["content"]) for m in request.messages)
    return chars // 4 + (request.max_tokens or 256)


class ServiceGate:
    """Admission to one service: a concurrency cap and RPM/TPM buckets (each optional)."""

    def __init__(self, service: ServiceConfig, clock: Clock | None = None) -> None:
        self.clock = clock or SystemClock()
        self.slots = (
            threading.BoundedSemaphore(service.max_concurrency) if service.max_concurrency else None
        )
        self.rpm = TokenBucket(service.rpm, self.clock) if service.rpm else None
        self.tpm = TokenBucket(service.tpm, self.clock) if service.tpm else None
        self.lock = threading.Lock()
        self.waited = 0.0
        """Seconds callers spent waiting for rate capacity (for the audit and benchmarks)."""

    @contextmanager
    def admit(self, estimate: int) -> Iterator[list[int]]:
        """Wait for capacity; the caller may append the actual token count to the yielded list."""
        if self.slots:
            self.slots.acquire()
        try:
            self._wait_for_rate(estimate)
            actual: list[int] = []
            yield actual
            if actual and self.tpm:
                with self.lock:
                    self.tpm.take(actual[0] - estimate)
        finally:
            if self.slots:
                self.slots.release()

    def _wait_for_rate(self, estimate: int) -> None:
        while True:
            with self.lock:
                wait = max(
                    self.rpm.wait_time(1) if self.rpm else 0.0,
                    self.tpm.wait_time(estimate) if self.tpm else 0.0,
                )
                if wait <= 0:
                    if self.rpm:
                        self.rpm.take(1)
                    if self.tpm:
                        self.tpm.take(estimate)
                    return
            self.waited += wait
            self.clock.sleep(wait)
