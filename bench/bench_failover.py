"""Failover time and tail-reader lag of hosts sharing one PostgreSQL database.

**Failover**: host A (a process) serves a session, appending steps; host B (another process)
has its host open. A is SIGKILLed while it appends; B is told at once to use the session. The
figure is kill -> B's first append returned (wall clocks of one machine). When A ran on another
machine (simulated: A's lease records another host name), B waits for A's lease to expire
(between 2/3 and all of ``lease_ttl``, as A renews every third), then recovers the session
(snapshot + tail, interrupted tool call answered) and appends; measured with the default
``lease_ttl`` (10 s) and short ones. When A ran on B's machine, B proves A dead (its pid is
gone) and takes the lease at once. A graceful hand-over (A closes, releasing its lease) is
measured the same way (A's close started -> B's first append).

**Restart**: A (default settings) is SIGKILLed; a new process starts, opens a host at the
default settings and appends to the session: kill -> that append returned (Python start and
imports included), and ``Host.open`` -> append returned (the take-over itself).

**Tail-reader lag**: writers append through one PostgresEventLog; a reader in another process
follows every session with :func:`ctxledger.storage.tail` (woken by NOTIFY, re-reading by
position) on its own connections. Lag = seen by the reader - the writer's append returned
(negative when the reader wins the race with the writer's wake-up), and seen - append called.

Usage: python bench/bench_failover.py [--quick] [--repeat N]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime

from ctxledger.testing.processes import child_process

SESSION = "agent-1"


# --- child roles ----------------------------------------------------------------------------------


def _quiet() -> None:
    import logging

    import structlog

    structlog.configure(
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR),
    )


def child_serve(dsn: str, ttl: float, machine: str = "same") -> None:
    """Serve SESSION forever: append a call, its result, prepare a view; ``ok`` once going.

    With ``machine`` ``other`` its leases record another host name, as if it ran elsewhere.
    """
    if machine == "other":
        import socket

        socket.gethostname = lambda: "another-machine"  # read once, when the lease is taken
    from ctxledger import Host, HostOptions, Message, ToolCall

    _quiet()
    with Host.open(dsn, options=HostOptions(host_id=f"a-{os.getpid()}", lease_ttl=ttl)) as host:
        session = host.session(SESSION)
        step = 0
        told = False
        while True:
            step += 1
            call = ToolCall(f"c{step}", "bash", '{"command": "make test"}')
            session.append_many([Message.user(f"step {step}"), Message.assistant("run", [call])])
            session.append(Message.tool("ok " * 40, call.id, "bash"))
            session.prepare_step()
            if not told and step >= 20:
                print("ok", flush=True)
                told = True


def child_restart(dsn: str, started: float) -> None:
    """A host restarted after a crash: open at the default settings, append; print the times."""
    from ctxledger import Host, Message

    _quiet()
    opening = time.time()
    with Host.open(dsn) as host:
        host.session(SESSION).append(Message.user("after the restart"))
        print("appended", started, opening, time.time(), flush=True)


def child_graceful(dsn: str, ttl: float) -> None:
    """Serve SESSION for a while, then on ``close`` from stdin print the time and close."""
    from ctxledger import Host, HostOptions, Message

    _quiet()
    host = Host.open(dsn, options=HostOptions(host_id=f"a-{os.getpid()}", lease_ttl=ttl))
    session = host.session(SESSION)
    for n in range(20):
        session.append(Message.user(f"m{n}"))
    print("ok", flush=True)
    sys.stdin.readline()
    print("closing", time.time(), flush=True)
    host.close()
    print("closed", flush=True)


def child_standby(dsn: str, ttl: float) -> None:
    """Open a host; on ``go`` take SESSION over and append; print the wall time it returned."""
    from ctxledger import Host, HostOptions, Message

    _quiet()
    with Host.open(dsn, options=HostOptions(host_id=f"b-{os.getpid()}", lease_ttl=ttl)) as host:
        print("ready", flush=True)
        sys.stdin.readline()
        session = host.session(SESSION)
        session.append(Message.user("taken over"))
        print("appended", time.time(), flush=True)


def child_reader(dsn: str, count: int) -> None:
    """Tail every session; print ``<prompt_tokens> <wall time seen>`` for ``count`` events."""
    from ctxledger.storage import PostgresEventLog, tail

    stop = threading.Event()
    with PostgresEventLog.open(dsn) as log:
        start = log.last_position()
        log.wait_for_position(start, 0.01)  # start listening before the writers start
        print("ready", flush=True)
        out = []
        for record in tail(log, start, stop=stop, poll=0.05):
            out.append(f"{record.event.prompt_tokens} {time.time()}")  # type: ignore[attr-defined]
            if len(out) == count:
                break
        print("\n".join(out), flush=True)


# --- the parent -----------------------------------------------------------------------------------


def spawn(*args: str) -> contextlib.AbstractContextManager[subprocess.Popen[str]]:
    """A child of this script, killed (if still running), reaped and its pipes closed on exit."""
    return child_process(
        [sys.executable, __file__, "--child", *args], stdin=subprocess.PIPE, stderr=None
    )


def expect(proc: subprocess.Popen[str], word: str) -> list[str]:
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit(f"child ended before {word!r} (exit {proc.wait()})")
        parts = line.split()
        if parts and parts[0] == word:
            return parts


def tell(proc: subprocess.Popen[str], line: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


def failover_once(dsn: str, ttl: float, machine: str = "other") -> float:
    """Kill the serving host mid-run; seconds until the standby's first append returned."""
    serving_child = spawn("serve", dsn, str(ttl), machine)
    with serving_child as serving, spawn("standby", dsn, str(ttl)) as standby:
        expect(serving, "ok")
        expect(standby, "ready")
        time.sleep(0.3)
        killed = time.time()
        serving.send_signal(signal.SIGKILL)
        tell(standby, "go")
        appended = float(expect(standby, "appended")[1])
        standby.wait(timeout=60)
        return appended - killed


def restart_once(dsn: str) -> tuple[float, float]:
    """Kill the serving host (default settings), start a new one: (kill -> its first append,
    Host.open -> its first append), seconds."""
    with spawn("serve", dsn, "10", "same") as serving:
        expect(serving, "ok")
        time.sleep(0.3)
        killed = time.time()
        serving.send_signal(signal.SIGKILL)
        serving.wait()
        with spawn("restart", dsn, str(time.time())) as restarted:
            _, _, opening, appended = expect(restarted, "appended")
            restarted.wait(timeout=60)
    return float(appended) - killed, float(appended) - float(opening)


def graceful_once(dsn: str, ttl: float) -> float:
    """The serving host closes (releasing its lease); seconds until the standby appended."""
    with spawn("graceful", dsn, str(ttl)) as serving, spawn("standby", dsn, str(ttl)) as standby:
        expect(serving, "ok")
        expect(standby, "ready")
        tell(serving, "close")
        closing = float(expect(serving, "closing")[1])
        expect(serving, "closed")
        tell(standby, "go")
        appended = float(expect(standby, "appended")[1])
        standby.wait(timeout=60)
        return appended - closing


def tail_lag(dsn: str, writers: int, events: int, rate: float | None) -> dict[str, float]:
    """Lags (ms) of a tail reader in another process behind ``writers`` appending threads."""
    from ctxledger.events.types import UsageReported
    from ctxledger.storage import PostgresEventLog

    per = events // writers
    total = per * writers
    with spawn("reader", dsn, str(total)) as reader:
        expect(reader, "ready")
        called: dict[int, float] = {}
        acked: dict[int, float] = {}
        with PostgresEventLog.open(dsn) as log:

            def write(index: int) -> None:
                expected = log.last_seq(f"w{index}")
                gap = writers / rate if rate else 0.0
                nxt = time.monotonic()
                for n in range(per):
                    token = index * 1_000_000 + n
                    if gap:
                        nxt += gap
                        time.sleep(max(0.0, nxt - time.monotonic()))
                    called[token] = time.time()
                    expected = log.append(
                        f"w{index}", [UsageReported(prompt_tokens=token)], expected_seq=expected
                    )[0].seq
                    acked[token] = time.time()

            threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        out, _ = reader.communicate(timeout=120)
    seen = {int(a): float(b) for a, b in (line.split() for line in out.splitlines() if line)}
    after_ack = sorted((seen[t] - acked[t]) * 1000 for t in acked)
    after_call = sorted((seen[t] - called[t]) * 1000 for t in called)

    def pct(values: list[float], q: float) -> float:
        return values[min(len(values) - 1, int(q * len(values)))]

    return {
        "events": len(acked),
        "ack_p50": pct(after_ack, 0.5),
        "ack_p99": pct(after_ack, 0.99),
        "call_p50": pct(after_call, 0.5),
        "call_p99": pct(after_call, 0.99),
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        role, dsn, arg = sys.argv[2:5]
        if role == "serve":
            child_serve(dsn, float(arg), *sys.argv[5:6])
        elif role == "restart":
            child_restart(dsn, float(arg))
        elif role == "graceful":
            child_graceful(dsn, float(arg))
        elif role == "standby":
            child_standby(dsn, float(arg))
        else:
            child_reader(dsn, int(arg))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="short leases only, one repeat")
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(__file__))
    from pg_support import PgDatabases, available

    if not available():
        raise SystemExit("no PostgreSQL server binaries (initdb, pg_ctl)")
    repeat = 1 if args.quick else args.repeat
    ttls = [2.0, 1.0] if args.quick else [10.0, 2.0, 1.0]
    print(f"# bench_failover {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, repeat={repeat}")
    dbs = PgDatabases()
    try:
        print("\n| scenario | lease_ttl s | runs | failover s (median) | min | max |")
        print("|---|---|---|---|---|---|")
        for ttl in ttls:
            times = [failover_once(dbs.fresh(), ttl) for _ in range(repeat)]
            print(
                f"| SIGKILL mid-step, B on another machine | {ttl:g} | {len(times)} "
                f"| {statistics.median(times):.2f} | {min(times):.2f} | {max(times):.2f} |",
                flush=True,
            )
        times = [failover_once(dbs.fresh(), 10.0, "same") for _ in range(repeat)]
        print(
            f"| SIGKILL mid-step, B on the same machine | 10 | {len(times)} "
            f"| {statistics.median(times):.3f} | {min(times):.3f} | {max(times):.3f} |",
            flush=True,
        )
        restarts = [restart_once(dbs.fresh()) for _ in range(repeat)]
        for index, label in ((0, "kill → first append"), (1, "Host.open → first append")):
            times = [figures[index] for figures in restarts]
            print(
                f"| restart on the same machine, {label} | 10 | {len(times)} "
                f"| {statistics.median(times):.3f} | {min(times):.3f} | {max(times):.3f} |",
                flush=True,
            )
        times = [graceful_once(dbs.fresh(), 10.0) for _ in range(repeat)]
        print(
            f"| close (lease released) | 10 | {len(times)} | {statistics.median(times):.2f} "
            f"| {min(times):.2f} | {max(times):.2f} |",
            flush=True,
        )
        print("\n| tail reader | events | rate | lag after ack p50 / p99 ms "
              "| lag after call p50 / p99 ms |")
        print("|---|---|---|---|---|")
        cases = [(1, 500, 200.0), (8, 4000, None)] if not args.quick else [(1, 200, 200.0)]
        for writers, events, rate in cases:
            lags = [tail_lag(dbs.fresh(), writers, events, rate) for _ in range(repeat)]
            med = {k: statistics.median(lag[k] for lag in lags) for k in lags[0]}
            label = f"{rate:g}/s paced" if rate else "unpaced"
            print(
                f"| {writers} writer(s) | {int(med['events'])} x {repeat} | {label} "
                f"| {med['ack_p50']:.2f} / {med['ack_p99']:.2f} "
                f"| {med['call_p50']:.2f} / {med['call_p99']:.2f} |",
                flush=True,
            )
    finally:
        dbs.close()


if __name__ == "__main__":
    main()
