"""A clean exit (issue 25): the library's threads never keep the interpreter alive.

Real interpreters (``sys.executable -c ...``) open a host and end without ``close()``: normally,
by raising, and while a summary is being written in the background. Each must exit (the wait
is a deadlock guard, not a timing assertion), and what it appended is in the log. A host
garbage-collected unclosed is named in a ResourceWarning.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from ctxledger import Host, Message
from ctxledger.events import CompactionFailed, CompactionStarted
from ctxledger.replay import verify

#: Seconds a child may take before the test calls it hung (a deadlock guard only).
GUARD = 120.0

PRELUDE = """
import sys, threading
from ctxledger import Config, Host, Message
host = Host.open(sys.argv[1])
session = host.session("s")
session.append(Message.user("acknowledged"))
print("appended", flush=True)
"""

WORKER = """
import sys, threading
from ctxledger import Host, Message
host = Host.open(sys.argv[1])
session = host.session("s")
ready = threading.Event()

def worker():
    ready.wait()
    for n in range(50):
        session.append(Message.user(f"from the worker {n}"))
    print("worker done", flush=True)

threading.Thread(target=worker).start()  # not a daemon: the interpreter waits for it
ready.set()
print("main done", flush=True)
"""

BACKGROUND = """
import sys, threading
from ctxledger import Config, Host, Message

started = threading.Event()

def summarizer(request):
    started.set()
    threading.Event().wait(3600)  # a summary that never comes
    return "never"

config = Config(context_window=2000, compression_threshold=0.5, min_retain_rounds=1,
                prepare_threshold=0.85, summary_timeout=3600)
host = Host.open(sys.argv[1], config=config, summarizer=summarizer)
session = host.session("s")
n = 0
while not started.is_set():  # appends alone: a step at the threshold would wait for it
    n += 1
    session.append_many([Message.user(f"question {n}: " + "q" * 90),
                         Message.assistant(f"answer {n}: " + "a" * 90)])
    assert n < 400, "no background summary started"
assert started.wait(60)
session.append(Message.user("acknowledged"))
print("appended", flush=True)
"""


def run_child(script: str, folder: Path) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a fresh interpreter on ``folder``; fail if it does not exit."""
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), str(folder)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = child.communicate(timeout=GUARD)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        pytest.fail("the interpreter did not exit: a library thread kept it alive")
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()
    return subprocess.CompletedProcess(child.args, child.returncode, out, err)


def contents(folder: Path) -> list[str]:
    with Host.open(folder) as host:
        return [message.content for message in host.session("s").history()]


def test_a_script_that_ends_without_close_exits_with_its_append_durable(
    tmp_path: Path,
) -> None:
    """No close(), no context manager: the interpreter exits 0 and the append is in the log."""
    done = run_child(PRELUDE, tmp_path / "db")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["appended"]
    assert contents(tmp_path / "db") == ["acknowledged"]
    assert verify(tmp_path / "db").ok


def test_a_script_that_raises_without_close_exits_with_its_append_durable(
    tmp_path: Path,
) -> None:
    """An uncaught exception: the traceback, exit status 1, and the append is in the log."""
    done = run_child(PRELUDE + "raise RuntimeError('the agent crashed')\n", tmp_path / "db")
    assert done.returncode == 1
    assert "RuntimeError: the agent crashed" in done.stderr
    assert "Exception ignored" not in done.stderr
    assert contents(tmp_path / "db") == ["acknowledged"]


def test_the_host_serves_the_programs_own_threads_until_they_end(tmp_path: Path) -> None:
    """The main thread ends while a (non-daemon) worker still appends: the host is closed only
    after the worker is done, and every one of its appends is in the log."""
    done = run_child(WORKER, tmp_path / "db")
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == ["main done", "worker done"]
    assert contents(tmp_path / "db") == [f"from the worker {n}" for n in range(50)]


def test_a_background_summary_running_at_exit_is_abandoned_cleanly(tmp_path: Path) -> None:
    """The interpreter exits while a summariser hangs in the background; its compaction is
    then recovered as interrupted, as after a crash, and the log verifies."""
    done = run_child(BACKGROUND, tmp_path / "db")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["appended"]
    with Host.open(tmp_path / "db") as host:
        session = host.session("s")
        assert session.history()[-1].content == "acknowledged"
        events = [record.event for record in host.log.read("s")]
    (started,) = [e for e in events if isinstance(e, CompactionStarted)]
    assert started.background
    failed = [e for e in events if isinstance(e, CompactionFailed)]
    assert [e.compaction_id for e in failed] == [started.compaction_id]
    assert failed[0].reason == "interrupted"
    assert verify(tmp_path / "db").ok


def test_a_host_collected_unclosed_is_named_in_a_resource_warning(tmp_path: Path) -> None:
    """As for files: a ResourceWarning names the folder, and the host is closed anyway (its
    threads end and the folder opens again)."""
    host = Host.open(tmp_path / "db")
    host.session("s").append(Message.user("kept"))
    with pytest.warns(ResourceWarning, match=r"unclosed <Host .*db"):
        del host
        gc.collect()
    for thread in threading.enumerate():
        if thread.name == "ctxledger-close":
            thread.join(GUARD)
    assert not [t for t in threading.enumerate() if t.name.startswith("HistoryActor")]
    assert contents(tmp_path / "db") == ["kept"]
