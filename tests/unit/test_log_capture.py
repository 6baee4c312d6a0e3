"""The tests' log capture: with ``this_thread``, another thread's lines are left out."""

from __future__ import annotations

import threading

from ctxledger._logging import get_logger
from log_capture import capture_logs


def test_this_thread_leaves_out_what_other_threads_log() -> None:
    logger = get_logger("ctxledger.test_capture")
    other = threading.Thread(target=lambda: logger.info("from_another_thread"))
    with capture_logs(this_thread=True) as mine, capture_logs() as every:
        other.start()
        other.join()
        logger.warning("from_this_thread", n=1)
    assert [e["event"] for e in mine] == ["from_this_thread"]
    assert mine[0]["n"] == 1 and mine[0]["log_level"] == "warning"
    assert sorted(e["event"] for e in every) == ["from_another_thread", "from_this_thread"]
