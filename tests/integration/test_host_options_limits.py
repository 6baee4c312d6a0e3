"""HostOptions' maximums and host_id rules, its ctxledger errors for a positional or unknown
argument, and a host that fails to start leaving no thread behind."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import msgspec
import pytest

from ctxledger import Host, HostOptions, InvalidArgumentError

MAXIMUMS = {
    "max_active_sessions": 1_000_000,
    "history_actors": 64,
    "compaction_workers": 64,
    "projection_actors": 64,
    "background_compactions": 1024,
    "summary_processes": 64,
    "snapshot_interval": 2**64 - 1,
}


@pytest.mark.parametrize(("name", "maximum"), sorted(MAXIMUMS.items()))
def test_a_count_above_its_maximum_is_refused_naming_the_range(name: str, maximum: int) -> None:
    """One past the maximum (or 2**64, 10**5) is an InvalidArgumentError naming field and range;
    the maximum itself is kept."""
    assert getattr(HostOptions(**{name: maximum}), name) == maximum
    for value in {value for value in (maximum + 1, 2**64, 10**5) if value > maximum}:
        with pytest.raises(InvalidArgumentError) as caught:
            HostOptions(**{name: value})
        assert caught.value.argument == name and f"at most {maximum:,}" in str(caught.value)
        with pytest.raises(msgspec.ValidationError, match=name):
            msgspec.json.decode(msgspec.json.encode({name: value}), type=HostOptions)


@pytest.mark.parametrize("host_id", ["a\x00b", "\ud800", "tab\there", "x" * 513, "x" * 100_000])
def test_a_host_id_that_is_not_printable_or_too_long_is_refused(host_id: str) -> None:
    """host_id with a NUL, a lone surrogate, a control character or over 512 characters."""
    with pytest.raises(InvalidArgumentError) as caught:
        HostOptions(host_id=host_id)
    assert caught.value.argument == "host_id"


def test_the_longest_host_id_is_kept() -> None:
    """512 printable characters (any script) are a host id."""
    assert HostOptions(host_id="é" * 512).host_id == "é" * 512


def test_a_positional_argument_is_an_invalid_argument_error() -> None:
    """HostOptions(1) names HostOptions and says it takes keywords (still a TypeError)."""
    with pytest.raises(InvalidArgumentError, match="keyword arguments only") as caught:
        HostOptions(1)  # type: ignore[misc]
    assert caught.value.argument == "HostOptions" and isinstance(caught.value, TypeError)


def test_an_unknown_keyword_is_an_invalid_argument_error() -> None:
    """HostOptions(bogus=1) names ``bogus``."""
    with pytest.raises(InvalidArgumentError, match="no such option") as caught:
        HostOptions(bogus=1)  # type: ignore[call-arg]
    assert caught.value.argument == "bogus"


def test_a_refused_count_opens_nothing_and_starts_no_thread(tmp_path: Path) -> None:
    """Host.open with history_actors=2**64 fails at HostOptions: no folder, no thread."""
    threads = threading.active_count()
    with pytest.raises(InvalidArgumentError, match="history_actors"):
        Host.open(tmp_path / "log", options=HostOptions(history_actors=2**64))
    assert threading.active_count() == threads and not (tmp_path / "log").exists()


# The child runs with an address-space limit that lets a dozen 256 MiB thread stacks in: the
# host starts its threads until the system refuses one among the 64 of the kind named.
_FAILING_START = textwrap.dedent(
    """
    import json, resource, sys, threading, time
    from ctxledger import Host, HostOptions
    from ctxledger.storage import MemoryEventLog

    log = MemoryEventLog()
    before = threading.active_count()
    threading.stack_size(256 * 2**20)
    with open("/proc/self/status") as status:
        size = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize"))
    resource.setrlimit(resource.RLIMIT_AS, (size + 12 * 256 * 2**20, resource.RLIM_INFINITY))
    counts = {"history_actors": 1, "compaction_workers": 1, "projection_actors": 1}
    counts[sys.argv[1]] = 64
    options = HostOptions(**counts, summary_processes=0)
    try:
        Host(log, options=options)
        error = None
    except RuntimeError as exc:
        error = str(exc)
    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    # The compaction workers are told to stop without waiting for them (a summariser call in
    # progress is not awaited): each ends once it reads its stop, soon but not at once.
    deadline = time.monotonic() + 60
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    names = [thread.name for thread in threading.enumerate()]
    print(json.dumps({"error": error, "before": before, "after": len(names), "names": names}))
    """
)


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS and /proc are Linux's")
@pytest.mark.parametrize("many", ["history_actors", "compaction_workers", "projection_actors"])
def test_a_host_that_fails_to_start_stops_the_threads_it_started(many: str) -> None:
    """When the system refuses a thread midway (among the history actors, the compaction
    workers or the projection actors), every actor and thread already started stops."""
    done = subprocess.run(
        [sys.executable, "-c", _FAILING_START, many],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"MALLOC_ARENA_MAX": "1", "PATH": ""},  # one malloc arena: the limit is stacks
    )
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["error"] == "can't start new thread"
    assert outcome["after"] == outcome["before"], outcome["names"]
