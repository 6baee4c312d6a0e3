"""``ctxledger ui``: the report pages served live, read-only, on a local address.

Routes (``GET`` and ``HEAD`` only; any other method gets ``405``):

- ``/``: the index of sessions (paginated, filterable, newest activity first);
- ``/sessions/<id>``: a session's report page, which follows the log (it polls the version
  endpoint every second and redraws when the session has new events);
- ``/api/sessions?offset=&limit=&q=&sort=activity|id``: a JSON list of objects with
  ``session_id``, ``last_seq``, ``checkpoints``, ``view_tokens``, ``messages`` and
  ``last_activity``; the number of matching sessions is in ``X-Total-Count``;
- ``/api/sessions/<id>``: the same object for one session plus ``report``, the report data
  (:meth:`ctxledger.tooling.report_data.ReportBuilder.data`);
- ``/api/sessions/<id>/version``: ``{"session_id", "event_seq"}``, cheap, for polling.

Ids are percent-encoded path segments. An unknown session, an unknown path and anything that
does not decode is ``404``. The log is opened read-only by the caller. The server binds
127.0.0.1 by default; bound to a loopback address it also answers only requests whose ``Host``
names a loopback address (a web page elsewhere cannot reach it through DNS rebinding). Bind it
to ``0.0.0.0`` only on a trusted network: anyone who reaches the port reads every message of
every session, unauthenticated. The server is the standard library's threaded one; a client
that hangs up mid-answer costs nothing but a debug log line.
"""

from __future__ import annotations

import gzip
import ipaddress
import json
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from ctxledger._logging import get_logger
from ctxledger.domain.cost import Pricing
from ctxledger.errors import CtxLedgerError
from ctxledger.storage import EventLog
from ctxledger.tooling.report import live_page
from ctxledger.tooling.ui_index import SessionIndex

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "MAX_PAGE", "UiServer", "is_loopback"]

_log = get_logger(__name__)

#: Where ``ctxledger ui`` listens unless told otherwise.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
#: The most sessions one ``/api/sessions`` page lists.
MAX_PAGE = 500
_ALLOWED = "GET, HEAD"
_GZIP_ABOVE = 1024
_LOOPBACK_NAMES = {"localhost", "localhost.localdomain"}


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine's loopback."""
    if host.strip("[]").lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _NotFound(Exception):
    pass


class _BadRequest(Exception):
    pass


class UiServer:
    """The live UI over an open (read-only) log.

    Args:
        log: The event log; the caller opens it read-only and closes it after :meth:`close`.
        host: The address to bind.
        port: The port (0: any free port; see :attr:`url`).
        pricing: Prices the usage shown in reports.
        label: What the index page names as the log (its folder or URI).

    Raises:
        OSError: The address cannot be bound (in use, or not this machine's).
    """

    def __init__(
        self,
        log: EventLog,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        *,
        pricing: Pricing | None = None,
        label: str = "",
    ) -> None:
        self.index = SessionIndex(log, pricing=pricing)
        self.label = label
        handler = type("_Bound", (_Handler,), {"ui": self})
        try:
            self._server = ThreadingHTTPServer((host, port), handler)
        except OSError:
            self.index.close()
            raise
        self._server.daemon_threads = True
        self.host = host
        self.port = int(self._server.server_address[1])
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The index page's address."""
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{shown}:{self.port}/"

    def serve_forever(self) -> None:
        """Serve until :meth:`shutdown` (from another thread) or an interrupt."""
        self._server.serve_forever(poll_interval=0.2)

    def start(self) -> None:
        """Serve on a thread of its own (for tests and embedding)."""
        self._thread = threading.Thread(
            target=self.serve_forever, name="ctxledger-ui", daemon=True
        )
        self._thread.start()

    def shutdown(self) -> None:
        """Stop serving (the pages already sent keep what they show)."""
        self._server.shutdown()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def close(self) -> None:
        """Stop serving and following the log; release the socket."""
        if self._thread is not None:
            self.shutdown()
        self._server.server_close()
        self.index.close()

    def __enter__(self) -> UiServer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- routes ----------------------------------------------------------------------------

    def route(self, target: str) -> tuple[str, bytes, dict[str, str]]:
        """Answer a GET of ``target``: ``(content type, body, extra headers)``.

        Raises:
            _NotFound: Nothing is there.
            _BadRequest: A query parameter is not valid.
        """
        parts = urlsplit(target)
        path = parts.path
        if path == "/":
            page = self._page({"mode": "index", "db": self.label})
            return "text/html; charset=utf-8", page, {}
        if path == "/api/sessions":
            body, total = self._list(parse_qs(parts.query))
            return "application/json", body, {"X-Total-Count": str(total)}
        for prefix in ("/sessions/", "/api/sessions/"):
            if path.startswith(prefix):
                content_type, body = self._session(prefix, path[len(prefix) :])
                return content_type, body, {}
        raise _NotFound

    def _page(self, boot: dict[str, Any], title: str = "ctxledger ui") -> bytes:
        return live_page(boot, title).encode("utf-8")

    def _list(self, query: dict[str, list[str]]) -> tuple[bytes, int]:
        def number(name: str, default: int, top: int) -> int:
            raw = query.get(name, [str(default)])[-1]
            if not raw.isdigit() or not 0 <= int(raw) <= top:
                raise _BadRequest(f"{name} must be a whole number from 0 to {top}")
            return int(raw)

        offset = number("offset", 0, 10**12)
        limit = number("limit", 100, MAX_PAGE)
        sort = query.get("sort", ["activity"])[-1]
        if sort not in ("activity", "id"):
            raise _BadRequest("sort must be 'activity' or 'id'")
        rows, total = self.index.page(
            offset=offset, limit=limit, query=query.get("q", [""])[-1], sort=sort
        )
        body = json.dumps([row.as_json() for row in rows], ensure_ascii=False).encode("utf-8")
        return body, total

    def _session(self, prefix: str, rest: str) -> tuple[str, bytes]:
        raw, _, tail = rest.partition("/")
        try:
            session_id = unquote(raw, errors="strict")
        except UnicodeDecodeError:
            raise _NotFound from None
        if not session_id or "\0" in session_id:
            raise _NotFound
        api = prefix == "/api/sessions/"
        if not api and not tail:
            if self.index.version(session_id) is None:
                raise _NotFound
            boot = {"mode": "live", "api": f"/api/sessions/{quote(session_id, safe='')}"}
            return "text/html; charset=utf-8", self._page(boot, f"ctxledger: {session_id}")
        if api and not tail:
            body = self.index.report(session_id)
            if body is None:
                raise _NotFound
            return "application/json", body
        if api and tail == "version":
            version = self.index.version(session_id)
            if version is None:
                raise _NotFound
            answer = {"session_id": session_id, "event_seq": version}
            return "application/json", json.dumps(answer, ensure_ascii=False).encode("utf-8")
        raise _NotFound


class _Handler(BaseHTTPRequestHandler):
    """Answers the UI's routes; every other method is refused with 405."""

    ui: UiServer
    server_version = "ctxledger-ui"
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._answer(head=False)

    def do_HEAD(self) -> None:
        self._answer(head=True)

    def _refuse(self) -> None:
        self._send(HTTPStatus.METHOD_NOT_ALLOWED, "text/plain; charset=utf-8",
                   b"read-only: only GET and HEAD\n", head=False, allow=True)

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _refuse

    def _answer(self, *, head: bool) -> None:
        if not self._host_allowed():
            self._send(HTTPStatus.FORBIDDEN, "text/plain; charset=utf-8",
                       b"this server answers only requests to its loopback address\n", head=head)
            return
        try:
            content_type, body, headers = self.ui.route(self.path)
        except _NotFound:
            self._send(HTTPStatus.NOT_FOUND, "text/plain; charset=utf-8", b"not found\n", head=head)
            return
        except _BadRequest as exc:
            self._send(HTTPStatus.BAD_REQUEST, "text/plain; charset=utf-8",
                       f"{exc}\n".encode(), head=head)
            return
        except CtxLedgerError as exc:  # a damaged session: said, not a crash of the server
            _log.warning("ui_read_failed", path=self.path, error=str(exc))
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, "text/plain; charset=utf-8",
                       f"cannot read the log: {exc}\n".encode(), head=head)
            return
        self._send(HTTPStatus.OK, content_type, body, head=head, headers=headers)

    def _host_allowed(self) -> bool:
        if not is_loopback(self.ui.host):
            return True  # bound to a public address on purpose: any name may reach it
        header = self.headers.get("Host")
        if header is None:
            return True
        name = header.rsplit(":", 1)[0] if not header.endswith("]") else header
        return is_loopback(name)

    def _send(
        self,
        status: HTTPStatus,
        content_type: str,
        body: bytes,
        *,
        head: bool,
        allow: bool = False,
        headers: dict[str, str] | None = None,
    ) -> None:
        encoded = body
        gzipped = len(body) > _GZIP_ABOVE and "gzip" in self.headers.get("Accept-Encoding", "")
        if gzipped:
            encoded = gzip.compress(body, compresslevel=5)
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(encoded)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Referrer-Policy", "no-referrer")
            self.send_header("X-Frame-Options", "DENY")
            if gzipped:
                self.send_header("Content-Encoding", "gzip")
            if allow:
                self.send_header("Allow", _ALLOWED)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            if not head:
                self.wfile.write(encoded)
        except (BrokenPipeError, ConnectionResetError):  # the client hung up: nothing to do
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("ui_request", client=self.client_address[0], line=format % args)
