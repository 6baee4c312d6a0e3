"""Shared by the report, UI and browser tests: a log that holds every kind of compaction, the
report data read back from a page, and a real browser when one is installed."""

from __future__ import annotations

import base64
import gzip
import json
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ctxledger import Config, Host, Message, ToolCall
from ctxledger.tooling.workload import iter_agent_steps

#: Held by one user message: the page must show it as text, never run it.
HOSTILE = "</script><script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned=2\">"
#: A small window, so a few dozen workload steps compact several times.
CONFIG = Config(context_window=8000, compression_threshold=0.8, min_retain_rounds=1)
SESSION = "agent-7"
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def build_log(path: Path, *, steps: int = 40, session_id: str = SESSION) -> Path:
    """A session with automatic, background-prepared, manual and reactive compactions, usage,
    a huge tool result (truncated in views) and a message holding markup."""
    # The host's clock stands still: a session's pace is then unknown, so a summary is
    # prepared whenever one is due, whatever the machine's load (with the wall clock, a slow
    # summary under load made the host prepare none, and once no step both masked and
    # truncated).
    with Host.open(path, config=CONFIG, clock=lambda: 1_800_000_000.0) as host:
        session = host.session(session_id)
        manual = reactive = False
        for index, step in enumerate(iter_agent_steps(3, steps=steps)):
            messages = list(step)
            if index == 2:
                call = ToolCall("big-1", "read_file", '{"path": "huge.log"}')
                messages += [
                    Message.user(f"Please keep this literal: {HOSTILE}"),
                    Message.assistant("Reading the log.", [call]),
                    Message.tool("x" * 60_000, "big-1", "read_file"),
                ]
            # The step's messages and its view in one command: whether a compaction at the
            # threshold finds a summary prepared in the background does not depend on whether
            # budget started one between an append and the view (a race that, under load,
            # once left the log with no foreground automatic compaction).
            session.step(messages)
            session.record_usage(
                {"prompt_tokens": 1000 + index, "completion_tokens": 50,
                 "prompt_tokens_details": {"cached_tokens": 400}}
            )
            # Background summaries finish before the next command: which compactions activate
            # a prepared summary is then the same on every run.
            session.wait_background()
            # One manual and one reactive compaction, at the first step each can cut, made at
            # such a quiet point too.
            if index >= steps // 3 and not manual:
                manual = session.compact(focus="keep the failing test names").compacted
                session.wait_background()
            if index >= steps // 2 and not reactive:
                error = "prompt is too long: 9000 tokens > 8000 maximum"
                reactive = session.reactive_compact(error).compacted
                session.wait_background()
    assert manual and reactive, "the workload gave no room for a manual or reactive compaction"
    return path


def report_data(page: str) -> dict[str, Any]:
    """The data a static report page holds (gzip-compressed JSON in base64)."""
    found = re.search(
        r'<script id="ctxledger-data" type="application/octet-stream">([A-Za-z0-9+/=]*)</script>',
        page,
    )
    assert found is not None, "the page holds no data element"
    return json.loads(gzip.decompress(base64.b64decode(found.group(1))))  # type: ignore[no-any-return]


def view_entries(data: dict[str, Any], step: int) -> list[list[Any]]:
    """The message entries of the view served at ``step`` (1-based), rebuilt from the runs."""
    views = data["steps"]["view"]
    every = data["keyframe_every"]
    ids: list[int] = []
    for index in range(((step - 1) // every) * every, step):
        encoded = views[index]
        ids = ids[: encoded[0]]
        for start, count in zip(encoded[1::2], encoded[2::2], strict=True):
            ids.extend(range(start, start + count))
    return [data["msgs"][i] for i in ids]


def chromium_path() -> str:
    """Debian's chromium, or skip the test saying why."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("no chromium installed (apt-get install chromium): browser test skipped")
    return found


@contextmanager
def browser_page() -> Iterator[tuple[Any, list[str], list[str]]]:
    """A fresh Chromium page with what its console reported as errors and every request it made.

    Yields ``(page, errors, requests)``; a page error counts as a console error.
    """
    executable = chromium_path()
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed: browser test skipped"
    )
    errors: list[str] = []
    requests: list[str] = []
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            page = context.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("request", lambda request: requests.append(request.url))
            page.on("dialog", lambda dialog: errors.append(f"dialog: {dialog.message}"))
            yield page, errors, requests
            context.close()
        finally:
            browser.close()
