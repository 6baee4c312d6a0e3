"""Child process of the failover tests: one host serving one session of a PostgreSQL log.

Usage: python pg_failover_child.py DSN HOST_ID LEASE_TTL SESSION ROLE [STOP_AT_STEP]

HOST_ID ``-`` leaves the host id to the default (unique per process).

ROLE ``serve``: take the session and run agent steps forever. A step appends a user message and
an assistant tool call (one append), then the tool's result (a second append), then prepares the
next view. After each append *returned* it prints ``ack <seq> <seq> ...``; after each view
``view <through_seq> <view_hash>`` (all flushed). When a step fails with a ctxledger error it
prints ``error <ErrorClass> <message>`` and exits 0. With STOP_AT_STEP, that step stops after
its tool call was acknowledged (the tool "runs" forever; the host keeps renewing its lease).

ROLE ``standby``: open a host and print ``ready``; on the line ``go`` from stdin take the
session over (waiting for the lease), print ``took <seconds waited>`` and ``recovered
<view_hash>`` (the view of the recovered session, recorded), append one message and print
``ack <seq>``; then wait for ``quit`` (holding the lease) and exit.
"""

from __future__ import annotations

import logging
import sys
import time

import structlog

from ctxledger import Config, Host, HostOptions, Message, ToolCall
from ctxledger.errors import CtxLedgerError

CONFIG = Config(context_window=3000, compression_threshold=0.6, min_retain_rounds=2, micro_batch=2)


def serve(host: Host, session_id: str, stop_at: int) -> None:
    session = host.session(session_id)
    step = len(session.history())
    while True:
        step += 1
        call = ToolCall(f"call-{step}", "bash", f'{{"command": "pytest tests/test_{step}.py"}}')
        try:
            seqs = session.append_many(
                [
                    Message.user(f"task {step}: fix tests/test_{step}.py"),
                    Message.assistant(f"running step {step}", [call]),
                ]
            )
            print("ack", *seqs, flush=True)
            if step == stop_at:
                print("calling", flush=True)
                time.sleep(3600)
            seq = session.append(Message.tool("FAILED " + "log " * (step % 50), call.id, "bash"))
            print("ack", seq, flush=True)
            view = session.prepare_step()
            print("view", view.through_seq, view.view_hash, flush=True)
        except CtxLedgerError as exc:
            print("error", type(exc).__name__, str(exc).replace("\n", " "), flush=True)
            return


def standby(host: Host, session_id: str) -> None:
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    started = time.monotonic()
    session = host.session(session_id)
    print("took", f"{time.monotonic() - started:.3f}", flush=True)
    view = session.build_model_view()
    print("recovered", view.view_hash, flush=True)
    seq = session.append(Message.user("taken over"))
    print("ack", seq, flush=True)
    sys.stdin.readline()  # "quit"


def main() -> None:
    structlog.configure(
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
    )
    dsn, host_id, ttl, session_id, role = sys.argv[1:6]
    chosen = None if host_id == "-" else host_id
    with Host.open(
        dsn,
        config=CONFIG,
        options=HostOptions(host_id=chosen, lease_ttl=float(ttl)),
    ) as host:
        if role == "serve":
            serve(host, session_id, int(sys.argv[6]) if len(sys.argv) > 6 else 0)
        else:
            standby(host, session_id)


if __name__ == "__main__":
    main()
