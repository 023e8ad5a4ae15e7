"""A small OpenAI-compatible chat-completions server on 127.0.0.1, for tests and benchmarks.

Each request takes the next scripted step; with the script used up it answers with
`default(request)`. Steps: a reply text, a dict reply, `Status(code, headers, body)`,
`Delay(seconds, step)`, `Drop()` (close the connection without answering) or `Cut()` (close it
halfway through the reply). `Faults(rate, seed)` is a default that answers a seeded random
share of requests with one of those faults (`--faults RATE`).
"""

from __future__ import annotations

import json
import random
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Status:
    code: int
    headers: dict[str, str] = field(default_factory=dict)
    body: str = '{"error": {"message": "scripted error", "type": "server_error"}}'


@dataclass
class Delay:
    seconds: float
    then: Any = None
    """The step to perform after the delay (None: the default reply)."""


@dataclass
class Drop:
    """Close the connection without an answer."""


@dataclass
class Cut:
    """Send the status, the headers and half of the body, then close the connection."""


def default_reply(request: dict[str, Any]) -> dict[str, Any]:
    """A valid AgentTalk reply that names the task it saw."""
    messages = request.get("messages") or [{"content": ""}]
    user = str(messages[-1].get("content", ""))
    first = next((line for line in user.splitlines() if line and not line.startswith("#")), "")
    return {"result": f"done: {first[:80]}", "score": 80, "score_explanation": "loopback"}


FAULT_KINDS = (
    "429",
    "500",
    "502",
    "503",
    "timeout",
    "drop",
    "cut",
    "not_json",
    "truncated_json",
    "score_high",
    "score_low",
    "empty",
)


class Faults:
    """A `default` for LoopbackLLM: a seeded random `rate` of requests get one of `kinds`, the
    others `reply(request)`; `served` counts what the requests got. A timeout holds the reply
    back for `hang` seconds (set the client's timeout below it)."""

    def __init__(
        self,
        rate: float,
        seed: int = 0,
        reply: Callable[[dict[str, Any]], dict[str, Any]] = default_reply,
        hang: float = 2.0,
        kinds: tuple[str, ...] = FAULT_KINDS,
    ) -> None:
        self.rate = rate
        self.rng = random.Random(seed)
        self.reply = reply
        self.hang = hang
        self.kinds = kinds
        self.served: Counter[str] = Counter()
        self._lock = threading.Lock()

    def step(self, kind: str, request: dict[str, Any]) -> Any:
        """The step that serves `kind` (a fault, or "ok") for `request`."""
        reply = self.reply(request)
        steps: dict[str, Any] = {
            "ok": reply,
            "429": Status(429, {"retry-after": "0"}, '{"error": {"message": "slow down"}}'),
            "500": Status(500),
            "502": Status(502),
            "503": Status(503),
            "timeout": Delay(self.hang, reply),
            "drop": Drop(),
            "cut": Cut(),
            "not_json": "I would rather not answer in JSON today.",
            "truncated_json": json.dumps(reply)[:12],
            "score_high": {**reply, "score": 150},
            "score_low": {**reply, "score": -5},
            "empty": "",
        }
        return steps[kind]

    def __call__(self, request: dict[str, Any]) -> Any:
        with self._lock:
            faulty = self.rng.random() < self.rate
            kind = self.rng.choice(self.kinds) if faulty else "ok"
            self.served[kind] += 1
        return self.step(kind, request)


def completion(request: dict[str, Any], content: str) -> dict[str, Any]:
    """A chat.completion response carrying `content`."""
    return {
        "id": "chatcmpl-loopback",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", "loopback"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # the default listen backlog of 5 drops bursts of connections
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (killed, timed out) is normal here: no traceback."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


@dataclass
class Seen:
    at: float
    body: dict[str, Any]
    headers: dict[str, str]


class LoopbackLLM:
    def __init__(
        self,
        script: list[Any] | None = None,
        default: Callable[[dict[str, Any]], Any] = default_reply,
        delay: float = 0.0,
    ) -> None:
        self.script = list(script or [])
        self.default = default
        self.delay = delay
        self.requests: list[Seen] = []
        self._lock = threading.Lock()
        self.server = _Server(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> LoopbackLLM:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)

    def _next_step(self, body: dict[str, Any]) -> Any:
        with self._lock:
            if self.script:
                return self.script.pop(0)
        return self.default(body)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        llm = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # else headers and body wait on delayed ACKs (40 ms)

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                arrived = time.monotonic()
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with llm._lock:
                    llm.requests.append(Seen(time.time(), body, dict(self.headers)))
                if llm.delay:  # the reply leaves `delay` after the request came in
                    time.sleep(max(0.0, llm.delay - (time.monotonic() - arrived)))
                self._perform(llm._next_step(body), body)

            def _perform(self, step: Any, body: dict[str, Any]) -> None:
                if isinstance(step, Delay):
                    time.sleep(step.seconds)
                    step = step.then if step.then is not None else llm.default(body)
                if isinstance(step, Drop):
                    self.close_connection = True
                    self.connection.close()
                    return
                if isinstance(step, Cut):
                    data = json.dumps(completion(body, json.dumps(default_reply(body))))
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data[: len(data) // 2].encode())
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if isinstance(step, Status):
                    self._send(step.code, step.body.encode(), step.headers)
                    return
                content = step if isinstance(step, str) else json.dumps(step)
                payload = completion(body, content)
                self._send(200, json.dumps(payload).encode(), {})

            def _send(self, code: int, data: bytes, headers: dict[str, str]) -> None:
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        return Handler


def main() -> None:
    """`python -m agenttalk.llm.loopback --delay 0.2`: serve until stdin closes (benchmarks)."""
    import argparse

    parser = argparse.ArgumentParser(description="A loopback OpenAI-compatible server.")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each reply")
    parser.add_argument(
        "--faults", type=float, default=0.0, help="share of requests answered with a fault (0-1)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the fault choice")
    args = parser.parse_args()
    default = Faults(args.faults, args.seed) if args.faults else default_reply
    with LoopbackLLM(default=default, delay=args.delay) as llm:
        print(llm.base_url, flush=True)
        sys.stdin.read()  # the parent closes stdin to stop us
        print(len(llm.requests), flush=True)


if __name__ == "__main__":
    main()
