"""A real HTTP server on 127.0.0.1 that speaks the OpenAI chat and Anthropic Messages shapes.

Tests point a summariser at it to check what is sent and how answers, errors and slow responses
are handled::

    with FakeLLMServer(reply="## Completed work\\n- fixed app.py") as server:
        summarize = OpenAIChatSummarizer(server.openai_base_url, "fake-model")
        summarize(request)
        server.requests[0].json["model"]  # "fake-model"

``POST …/chat/completions`` answers in the OpenAI shape, ``POST …/v1/messages`` in the Anthropic
shape, ``GET …/models`` lists one model. :meth:`FakeLLMServer.respond` sets the canned answer (a
reply text, or an HTTP status with a raw body, after an optional delay); :meth:`FakeLLMServer.queue`
lines up answers for the next requests. A delayed answer waits on an event that :meth:`stop`
sets, so a slow response never holds up test teardown.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

__all__ = ["CannedResponse", "FakeLLMServer", "RecordedRequest"]


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received.

    Attributes:
        method: ``GET`` or ``POST``.
        path: The request path, e.g. ``/v1/chat/completions``.
        headers: The headers, names lower-cased.
        body: The raw body.
    """

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        """The body decoded as JSON."""
        return json.loads(self.body)


@dataclass(frozen=True)
class CannedResponse:
    """What the server answers.

    Attributes:
        reply: The assistant text, wrapped in the shape of the API that was called.
        status: The HTTP status.
        body: A raw body sent instead of the API shape (bytes, text, or a JSON-able object),
            for error payloads and malformed answers.
        delay: Seconds to wait before answering.
        headers: Extra response headers (``retry-after`` for a 429).
    """

    reply: str = "## Completed work\n- nothing yet"
    status: int = 200
    body: bytes | str | Mapping[str, Any] | list[Any] | None = None
    delay: float = 0.0
    headers: Mapping[str, str] = field(default_factory=dict)


class FakeLLMServer:
    """An OpenAI- and Anthropic-compatible chat server in a background thread.

    Args:
        reply: The assistant text answered to every request until :meth:`respond` changes it.
        status: The HTTP status of the default answer.
        body: A raw body for the default answer (see :class:`CannedResponse`).
        delay: Seconds the default answer waits.
    """

    def __init__(
        self,
        reply: str = CannedResponse.reply,
        *,
        status: int = 200,
        body: bytes | str | Mapping[str, Any] | list[Any] | None = None,
        delay: float = 0.0,
    ) -> None:
        self.default = CannedResponse(reply=reply, status=status, body=body, delay=delay)
        self.requests: list[RecordedRequest] = []
        self._queued: deque[CannedResponse] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- configuration ---------------------------------------------------------------------

    def respond(
        self,
        reply: str = CannedResponse.reply,
        *,
        status: int = 200,
        body: bytes | str | Mapping[str, Any] | list[Any] | None = None,
        delay: float = 0.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Set the answer to every later request (queued answers go first)."""
        self.default = CannedResponse(reply, status, body, delay, dict(headers or {}))

    def queue(self, *responses: CannedResponse) -> None:
        """Answer the next requests with ``responses``, in order, then the default again."""
        with self._lock:
            self._queued.extend(responses)

    # --- lifecycle -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The server's root, ``http://127.0.0.1:<port>``."""
        if self._server is None:
            raise RuntimeError("the fake LLM server is not running")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def openai_base_url(self) -> str:
        """The ``base_url`` for an OpenAI-compatible client: ``<url>/v1``."""
        return self.url + "/v1"

    def start(self) -> Self:
        """Listen on 127.0.0.1 on a free port and serve in a daemon thread."""
        server = _QuietServer(("127.0.0.1", 0), _handler_for(self))
        server.daemon_threads = True
        server.block_on_close = False
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True,
            name="fake-llm-server",
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Release delayed answers, stop serving and close the socket."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # --- used by the handler ---------------------------------------------------------------

    def _record_and_choose(self, request: RecordedRequest) -> CannedResponse:
        with self._lock:
            self.requests.append(request)
            return self._queued.popleft() if self._queued else self.default

    def _wait(self, seconds: float) -> None:
        self._stopping.wait(seconds)


class _QuietServer(ThreadingHTTPServer):
    """A server that does not print the tracebacks of clients that hung up (timeout tests)."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


def _api_body(path: str, request_json: Any, reply: str) -> tuple[int, Any]:
    """The answer to ``path`` in the shape of the API it belongs to."""
    model = request_json.get("model", "fake-model") if isinstance(request_json, dict) else ""
    if path.endswith("/chat/completions"):
        return 200, {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
    if path.endswith("/v1/messages"):
        return 200, {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": reply}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
    return 404, {"error": {"message": f"no route for {path}", "type": "not_found"}}


def _handler_for(fake: FakeLLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 5  # an idle keep-alive connection frees its thread after this many seconds

        def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
            pass

        def do_GET(self) -> None:
            fake._record_and_choose(RecordedRequest("GET", self.path, self._headers(), b""))
            if self.path.endswith("/models"):
                self._send(200, {"object": "list", "data": [{"id": "fake-model"}]}, {})
            else:
                self._send(404, {"error": {"message": "not found"}}, {})

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            canned = fake._record_and_choose(
                RecordedRequest("POST", self.path, self._headers(), body)
            )
            if canned.delay:
                fake._wait(canned.delay)
            if canned.body is not None:
                self._send(canned.status, canned.body, canned.headers)
                return
            try:
                request_json = json.loads(body or b"{}")
            except ValueError:
                request_json = {}
            status, payload = _api_body(self.path, request_json, canned.reply)
            self._send(canned.status if status == 200 else status, payload, canned.headers)

        def _headers(self) -> dict[str, str]:
            return {name.lower(): value for name, value in self.headers.items()}

        def _send(self, status: int, body: Any, headers: Mapping[str, str]) -> None:
            if isinstance(body, bytes):
                data = body
            elif isinstance(body, str):
                data = body.encode()
            else:
                data = json.dumps(body).encode()
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                pass  # the client gave up (a timeout test): nobody is listening any more

    return Handler
