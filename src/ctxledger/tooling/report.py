"""The session report as one self-contained HTML page (``ctxledger report``), and the pages the
live UI serves (``ctxledger ui``).

A page is a template, a stylesheet and one script (``report_assets/``), all inline: the static
report holds its data too, gzip-compressed and base64-encoded (the script inflates it with the
browser's ``DecompressionStream``), so the file opens offline and fetches nothing. Its Content
Security Policy allows no request at all (``connect-src 'none'``) and runs only the page's own
script (by its hash), so even a message holding ``<script>`` could not run as code; the script
puts every text from the log into the page as text anyway. Live pages may fetch from their own
origin only.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import html
import json
import os
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from ctxledger.domain import Tokenizer
from ctxledger.domain.cost import Pricing
from ctxledger.storage import EventLog
from ctxledger.tooling.report_data import ReportBuilder

__all__ = ["ReportFile", "encode_data", "live_page", "report_page", "write_report"]


@dataclass(frozen=True)
class ReportFile:
    """A report written by :func:`write_report`.

    Attributes:
        path: The HTML file.
        bytes: Its size.
        steps: Steps (served views) it shows.
        compactions: Compactions it shows.
    """

    path: Path
    bytes: int
    steps: int
    compactions: int


@cache
def _asset(name: str) -> str:
    return (resources.files("ctxledger.tooling") / "report_assets" / name).read_text("utf-8")


def _digest(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


def _json_for_script(value: object) -> str:
    """JSON that cannot end the ``<script>`` element holding it (``<``, ``>``, ``&`` escaped)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def encode_data(data: dict[str, Any]) -> str:
    """The report data as the static page embeds it: gzip-compressed JSON, base64-encoded."""
    raw = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return base64.b64encode(gzip.compress(raw, compresslevel=9, mtime=0)).decode("ascii")


def _page(title: str, boot: dict[str, Any], payload: str, connect: str) -> str:
    script, style = _asset("report.js"), _asset("report.css")
    # The script and the stylesheet sit inside <script>/<style> as they are: they must not be
    # able to close them.
    assert "</script" not in script.lower() and "</style" not in style.lower()
    policy = (
        "default-src 'none'; "
        f"script-src 'sha256-{_digest(script)}'; "
        f"style-src 'sha256-{_digest(style)}'; "
        f"img-src data:; connect-src {connect}; base-uri 'none'; form-action 'none'"
    )
    return (
        "<!doctype html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="referrer" content="no-referrer">\n'
        '<link rel="icon" href="data:,">\n'
        f"<title>{html.escape(title)}</title>\n"
        f"<style>{style}</style>\n</head>\n<body>\n"
        "<noscript>This page needs JavaScript.</noscript>\n"
        '<div id="app"><p>loading…</p></div>\n'
        f'<script id="ctxledger-boot" type="application/json">{_json_for_script(boot)}</script>\n'
        f'<script id="ctxledger-data" type="application/octet-stream">{payload}</script>\n'
        f"<script>{script}</script>\n</body>\n</html>\n"
    )


def report_page(data: dict[str, Any]) -> str:
    """The static report of ``data`` (:meth:`ReportBuilder.data`): one page, nothing fetched."""
    title = f"ctxledger report: {data['session_id']}"
    return _page(title, {"mode": "static"}, encode_data(data), "'none'")


def live_page(boot: dict[str, Any], title: str) -> str:
    """A page of the live UI: ``boot`` tells the script what to show and where to fetch it
    (``{"mode": "index", "db": ...}`` or ``{"mode": "live", "api": "/api/sessions/<id>"}``)."""
    return _page(title, boot, "", "'self'")


def write_report(
    log: EventLog,
    session_id: str,
    path: str | os.PathLike[str],
    *,
    tokenizer: Tokenizer | None = None,
    pricing: Pricing | None = None,
) -> ReportFile:
    """Write the report of ``session_id`` as one self-contained HTML file.

    The file is written next to its target and renamed over it, so a reader never sees half
    a report.

    Args:
        log: The event log (only read).
        session_id: The session.
        path: The HTML file to write; its folder must exist.
        tokenizer: The tokenizer the host used (``chars // 3`` by default).
        pricing: Prices for the cost of the recorded usage.

    Raises:
        UnknownSessionError: The session is not in the log.
        CorruptRecordError: A record is damaged.
        OSError: The file cannot be written.
    """
    builder = ReportBuilder(log, session_id, tokenizer=tokenizer, pricing=pricing)
    builder.catch_up()
    data = builder.data()
    page = report_page(data).encode("utf-8")
    target = Path(path)
    partial = target.with_name(f".{target.name}.partial")
    try:
        partial.write_bytes(page)
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    return ReportFile(
        path=target,
        bytes=len(page),
        steps=len(data["steps"]["seq"]),
        compactions=len(data["compactions"]),
    )
