"""The single retry layer for LLM HTTP calls: typed errors, exponential backoff, Retry-After."""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Callable
from typing import TypeVar

import openai
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

T = TypeVar("T")

RETRY_STATUS = frozenset({408, 409, 429})


def is_retryable(exc: BaseException) -> bool:
    """408/409/429/5xx, timeouts and connection errors; never 4xx client mistakes."""
    if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in RETRY_STATUS or exc.status_code >= 500
    return False


def retry_after_seconds(exc: BaseException) -> float | None:
    """The server's `retry-after-ms` or `Retry-After` (seconds or HTTP date), if any."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None  # unreadable: fall back to our own backoff
    return max(0.0, parsed.timestamp() - time.time())


def backoff(base: float, cap: float) -> Callable[[RetryCallState], float]:
    """Full-jitter exponential backoff, overridden by Retry-After (both capped at `cap`)."""

    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        hint = retry_after_seconds(exc) if exc else None
        if hint is not None:
            return min(hint, cap)
        ceiling = min(cap, base * 2 ** (state.attempt_number - 1))
        return random.uniform(ceiling / 2, ceiling)

    return wait


def call_with_retries(
    fn: Callable[[], T],
    *,
    max_retries: int,
    base: float,
    cap: float,
    on_retry: Callable[[BaseException, float], None],
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run `fn`, retrying transient errors; the last error propagates unchanged."""

    def before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        if exc is not None:
            on_retry(exc, state.upcoming_sleep)

    retrying = Retrying(
        retry=retry_if_exception(is_retryable),
        stop=stop_after_attempt(max_retries + 1),
        wait=backoff(base, cap),
        sleep=sleep,
        before_sleep=before_sleep,
        reraise=True,
    )
    return retrying(fn)
