"""A bad log path (empty, a NUL, not UTF-8) or a seq past 2**63 - 1 fails alone, naming it, and
creates nothing: through ``Host.open``, the storage, the replay tools and the CLI."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_helpers import assert_one_line_error, run

from ctxledger import Host, HostOptions, InvalidArgumentError, Message, replay
from ctxledger.storage import LmdbEventLog, copy_log, open_log

#: Paths no folder may have: empty (the current folder by accident), a NUL, not UTF-8 (what
#: undecodable bytes of a command-line argument become).
BAD_PATHS = ["", "a\x00b", "\ud800", "log-\udcff"]

OPENS: dict[str, Callable[[str], object]] = {
    "Host.open": lambda path: Host.open(path, options=HostOptions(durability="none")),
    "LmdbEventLog.open": lambda path: LmdbEventLog.open(path, durability="none"),
    "open_log": lambda path: open_log(path, durability="none"),
    "open_log readonly": lambda path: open_log(path, readonly=True),
    "replay.verify": replay.verify,
}


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    """A small log of one session."""
    with Host.open(tmp_path / "log", options=HostOptions(durability="none")) as host:
        host.session("a").append(Message.user("hello"))
    return tmp_path / "log"


@pytest.mark.parametrize("opener", sorted(OPENS))
@pytest.mark.parametrize("path", BAD_PATHS)
def test_a_bad_path_is_refused_and_nothing_is_created(
    opener: str, path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each way of opening a log refuses the path, naming it, before any folder or thread."""
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    threads = threading.active_count()
    with pytest.raises(InvalidArgumentError) as caught:
        OPENS[opener](path)
    assert caught.value.argument in ("path", "source")  # replay.verify names its argument
    assert (repr(path) in str(caught.value)) if path else "empty" in str(caught.value)
    assert list(work.iterdir()) == [] and threading.active_count() == threads


def test_copy_log_into_an_empty_path_is_refused(
    log_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """copy_log(source, '') names the path and copies nothing into the current folder."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidArgumentError, match="path"):
        copy_log(log_path, "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log"]


@pytest.mark.parametrize("target", [b"", b"a\xff"])
def test_cli_copy_to_a_bad_path_is_a_usage_error(
    target: bytes, log_path: Path, tmp_path: Path
) -> None:
    """``copy --to ''`` or ``--to`` undecodable bytes exits 2 with one line; nothing is made."""
    work = tmp_path / "cwd"
    work.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "ctxledger", "copy", "--from", bytes(log_path), "--to", target],
        cwd=work,
        capture_output=True,
        timeout=120,
        check=False,
    )
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 2, stderr
    assert stderr.startswith("error: Invalid value for '--to'") and len(stderr.splitlines()) == 1
    assert list(work.iterdir()) == []


def test_cli_reading_verbs_refuse_an_empty_db(log_path: Path) -> None:
    """``--db ''`` is a usage error naming the option, not a look into the current folder."""
    result = run("sessions", "--db", "")
    assert result.exit_code == 2
    assert_one_line_error(result, "--db", "must not be empty")


@pytest.mark.parametrize("option", ["--from", "--limit"])
def test_cli_show_refuses_a_seq_past_the_largest(option: str, log_path: Path) -> None:
    """``show --events --from/--limit`` beyond 2**63 - 1 is a usage error (exit 2), one line."""
    result = run("show", "--db", log_path, "a", "--events", option, str(10**26), "--no-pager")
    assert result.exit_code == 2
    assert_one_line_error(result, option, "9223372036854775807")


def test_host_log_reads_past_the_largest_seq(log_path: Path) -> None:
    """``host.log.read(id, 2**64)`` is empty, as for any seq past the end."""
    with Host.open(log_path, options=HostOptions(durability="none")) as host:
        assert host.log.read("a", 2**64) == [] and len(host.log.read("a", 1, 2**64)) == 2
