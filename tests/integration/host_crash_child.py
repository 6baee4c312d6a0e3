"""Child process for the host crash test: drives sessions forever, printing each served view.

Usage: python host_crash_child.py DB_DIR SEED [PAUSE]

Each line printed (flushed) is ``<session> <through_seq> <view_hash>`` and is written only after
``prepare_step`` returned, so the ViewServed event it describes is durable.

``PAUSE`` holds the child still at a chosen point until it is killed, so that a test reaches
both recovery paths whatever the machine's speed: ``step:N`` at the first step from the N-th
on whose session this process already served a view, after the step's messages are appended
and before its view is served; ``view:N`` after the N-th view is served and printed. Either
prints ``paused <session>``.
"""

from __future__ import annotations

import logging
import random
import sys
import time

import structlog

from ctxledger import Config, ExtractiveSummarizer, Host, Message, SummaryRequest, ToolCall

CONFIG = Config(context_window=3000, compression_threshold=0.6, min_retain_rounds=2, micro_batch=2)
SESSIONS = [f"agent-{n}" for n in range(4)]


def slow_summarizer() -> ExtractiveSummarizer:
    inner = ExtractiveSummarizer()

    def summarize(request: SummaryRequest) -> str | None:
        time.sleep(0.03)  # widen the window in which a kill lands during a summariser call
        return inner(request)

    return summarize  # type: ignore[return-value]


def step_messages(rng: random.Random, session_id: str, step: int) -> list[Message]:
    """One agent step: sometimes a new user turn, then a tool call with its result."""
    messages = []
    if step % 4 == 0:
        messages.append(
            Message.user(f"task {step}: fix tests/test_{step}.py " + "u" * rng.randint(20, 300))
        )
    call = ToolCall(
        f"{session_id}-call-{step}", "bash", f'{{"command": "pytest tests/test_{step}.py"}}'
    )
    messages.append(Message.assistant(f"running step {step}", [call]))
    messages.append(
        Message.tool("FAILED tests/test_x.py\n" + "log " * rng.randint(10, 300), call.id, "bash")
    )
    return messages


def main() -> None:
    # stdout carries the protocol; the application (not the library) decides where logs go.
    structlog.configure(
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
    )
    db, seed = sys.argv[1], int(sys.argv[2])
    where, _, number = (sys.argv[3] if len(sys.argv) > 3 else "none:0").partition(":")
    count = int(number)
    rng = random.Random(seed)
    with Host.open(db, config=CONFIG, summarizer=slow_summarizer()) as host:
        sessions = [host.session(sid) for sid in SESSIONS]
        steps = {s.id: len(s.history()) for s in sessions}
        done = 0
        served: set[str] = set()
        while True:
            session = rng.choice(sessions)
            steps[session.id] += 1
            done += 1
            session.append_many(step_messages(rng, session.id, steps[session.id]))
            if where == "step" and done >= count and session.id in served:
                pause(session.id)
            view = session.prepare_step()
            print(session.id, view.through_seq, view.view_hash, flush=True)
            served.add(session.id)
            if where == "view" and done >= count:
                pause(session.id)


def pause(session_id: str) -> None:
    """Say so, then wait to be killed."""
    print("paused", session_id, flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main()
