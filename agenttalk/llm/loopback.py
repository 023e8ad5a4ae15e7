"""A small OpenAI-compatible chat-completions server on 127.0.0.1, for tests and benchmarks.

Each request takes the next scripted step; with the script used up it answers with
`default(request)`. Steps: a reply text, a dict reply, `Status(code, headers, body)`,
`Delay(seconds, step)` or `Drop()` (close the connection without answering).
"""

from __future__ import annotations

import json
import threading
import time
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


def default_reply(request: dict[str, Any]) -> dict[str, Any]:
    """A valid AgentTalk reply that names the task it saw."""
    messages = request.get("messages") or [{"content": ""}]
    user = str(messages[-1].get("content", ""))
    first = next((line for line in user.splitlines() if line and not line.startswith("#")), "")
    return {"result": f"done: {first[:80]}", "score": 80, "score_explanation": "loopback"}


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # the default listen backlog of 5 drops bursts of connections
    daemon_threads = True


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
                if isinstance(step, Status):
                    self._send(step.code, step.body.encode(), step.headers)
                    return
                content = step if isinstance(step, str) else json.dumps(step)
                payload = {
                    "id": "chatcmpl-loopback",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", "loopback"),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": content},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                }
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
    import sys

    parser = argparse.ArgumentParser(description="A loopback OpenAI-compatible server.")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each reply")
    args = parser.parse_args()
    with LoopbackLLM(delay=args.delay) as llm:
        print(llm.base_url, flush=True)
        sys.stdin.read()  # the parent closes stdin to stop us
        print(len(llm.requests), flush=True)


if __name__ == "__main__":
    main()
