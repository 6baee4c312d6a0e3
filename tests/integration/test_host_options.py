"""``HostOptions``: the host-level settings in one struct, checked when built, in force on a host.

The keywords ``Host.open`` and ``Host`` took before keep working with a ``DeprecationWarning``
naming the field to use; given beside ``options=`` they are refused.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ctxledger import ConfigError, Host, HostOptions, InvalidArgumentError, Message
from ctxledger.storage import LmdbEventLog, MemoryEventLog

#: ``Host.open``'s keyword defaults before HostOptions (None: derived when the host starts).
TODAYS_DEFAULTS: dict[str, Any] = {
    "durability": None,  # "sync" when Host.open opens the log
    "max_active_sessions": 1024,
    "history_actors": 2,
    "compaction_workers": 4,
    "projection_actors": 2,
    "background_compactions": 4,
    "host_id": None,
    "lease_ttl": 10.0,
    "lease_wait": None,  # 2 * lease_ttl + 1
    "leases": None,  # only on a log shared between processes
    "summary_processes": None,  # 1 for the offline summariser on more than one CPU, else 0
    "snapshot_interval": None,  # each session's Config.snapshot_interval
}

#: ``summary_processes`` in force on a host with the default (offline) summariser.
PROCESSES = 1 if (os.cpu_count() or 1) > 1 else 0

#: One valid value per field, none of them the default.
OTHER_VALUES: dict[str, Any] = {
    "durability": "none",
    "max_active_sessions": 7,
    "history_actors": 3,
    "compaction_workers": 1,
    "projection_actors": 1,
    "background_compactions": 2,
    "host_id": "worker-7",
    "lease_ttl": 4.5,
    "lease_wait": 0.25,
    "leases": False,
    "summary_processes": 2,
    "snapshot_interval": 50,
}

BAD_VALUES = [
    ("durability", "fast", ConfigError),
    ("durability", True, ConfigError),
    *[
        (name, value, InvalidArgumentError)
        for name in (
            "max_active_sessions",
            "history_actors",
            "compaction_workers",
            "projection_actors",
            "background_compactions",
        )
        for value in (0, -1, True, 2.0, "2", None)
    ],
    ("host_id", "", InvalidArgumentError),
    ("host_id", 5, InvalidArgumentError),
    *[
        (name, value, InvalidArgumentError)
        for name in ("lease_ttl", "lease_wait")
        for value in (0, -1.0, float("nan"), float("inf"), True, "10")
    ],
    ("lease_ttl", None, InvalidArgumentError),
    ("leases", 1, InvalidArgumentError),
    ("leases", "yes", InvalidArgumentError),
    *[("summary_processes", value, InvalidArgumentError) for value in (-1, True, 1.0, "1")],
    *[
        ("snapshot_interval", value, InvalidArgumentError)
        for value in (0, -1, True, False, 2.0, "2")
    ],
]


def _field(error: Exception) -> str:
    return getattr(error, "argument", None) or getattr(error, "field", "")


def test_defaults_equal_the_keyword_defaults_of_before() -> None:
    """``HostOptions()`` holds the defaults ``Host.open``'s keywords had."""
    assert msgspec.structs.asdict(HostOptions()) == TODAYS_DEFAULTS
    assert msgspec.convert({}, HostOptions) == HostOptions()


def test_a_default_host_runs_as_before(tmp_path: Path) -> None:
    """``Host.open(path)``: a sync log, two history actors, leases off on LMDB, lease_wait 21 s."""
    with Host.open(tmp_path / "db") as host:
        assert host.log.durability == "sync"  # type: ignore[attr-defined]
        assert len(host._history) == 2
        assert host._leases is None
        resolved = {
            **TODAYS_DEFAULTS,
            "durability": "sync",
            "lease_wait": 21.0,
            "leases": False,
            "summary_processes": PROCESSES,
        }
        assert msgspec.structs.asdict(host.options) == resolved | {"host_id": host.host_id}
        assert host.host_id and host.lease_ttl == 10.0 and host.lease_wait == 21.0
        assert host.max_active_sessions == 1024


@pytest.mark.parametrize(("name", "value", "error"), BAD_VALUES)
def test_each_field_is_checked_when_built(name: str, value: object, error: type) -> None:
    """A wrong type or an out-of-range value is refused, naming the field; nothing is clamped."""
    with pytest.raises(error) as caught:
        HostOptions(**{name: value})
    assert _field(caught.value) == name
    with pytest.raises(error):
        msgspec.structs.replace(HostOptions(), **{name: value})


@pytest.mark.parametrize(("name", "value", "error"), BAD_VALUES)
def test_decoding_checks_each_field(name: str, value: object, error: type) -> None:
    """Options decoded with msgspec (a settings file) are checked like built ones."""
    # msgpack, not JSON: it carries NaN and infinity.
    with pytest.raises(msgspec.ValidationError, match=name):
        msgspec.msgpack.decode(msgspec.msgpack.encode({name: value}), type=HostOptions)


def test_values_are_kept_as_given() -> None:
    """Every valid value is used as given (the smallest counts and seconds included)."""
    assert msgspec.structs.asdict(HostOptions(**OTHER_VALUES)) == OTHER_VALUES
    tiny = HostOptions(max_active_sessions=1, history_actors=1, lease_ttl=0.001, lease_wait=1e-9)
    assert (tiny.max_active_sessions, tiny.history_actors) == (1, 1)
    assert (tiny.lease_ttl, tiny.lease_wait) == (0.001, 1e-9)


def test_options_are_frozen_and_keyword_only() -> None:
    """A HostOptions cannot be changed in place, nor built positionally."""
    options = HostOptions()
    with pytest.raises(AttributeError):
        options.history_actors = 8  # type: ignore[misc]
    with pytest.raises(TypeError):
        HostOptions("sync")  # type: ignore[misc]


@pytest.mark.parametrize("codec", [msgspec.json, msgspec.msgpack])
def test_options_round_trip_through_msgspec(codec: Any) -> None:
    """Encoded and decoded (JSON or msgpack), options compare equal; unknown fields are refused."""
    for options in (HostOptions(), HostOptions(**OTHER_VALUES), HostOptions(durability="group")):
        assert codec.decode(codec.encode(options), type=HostOptions) == options
    with pytest.raises(msgspec.ValidationError, match="history_actor"):
        codec.decode(codec.encode({"history_actor": 2}), type=HostOptions)


def test_options_are_in_force(tmp_path: Path) -> None:
    """Each setting reaches the host: actors, eviction, durability, host id and leases."""
    options = HostOptions(
        durability="none",
        history_actors=3,
        max_active_sessions=2,
        host_id="worker-7",
        lease_ttl=4.0,
    )
    with Host.open(tmp_path / "db", options=options) as host:
        assert host.log.durability == "none"  # type: ignore[attr-defined]
        assert len(host._history) == 3
        for n in range(6):
            host.session(f"s{n}").append(Message.user("hello"))
        assert len(host.active_sessions()) <= 2
        assert host.options == msgspec.structs.replace(
            options, lease_wait=9.0, leases=False, summary_processes=PROCESSES
        )
        assert (host.host_id, host.lease_ttl, host.lease_wait) == ("worker-7", 4.0, 9.0)
        with pytest.raises(AttributeError):
            host.options = HostOptions()  # type: ignore[misc]


def test_the_options_in_force_start_another_host(tmp_path: Path) -> None:
    """``host.options`` with ``host_id`` cleared opens a second host like the first."""
    with Host.open(tmp_path / "a", options=HostOptions(durability="none")) as first:
        again = msgspec.structs.replace(first.options, host_id=None)
        with Host.open(tmp_path / "b", options=again) as second:
            assert second.log.durability == "none"  # type: ignore[attr-defined]
            assert second.host_id != first.host_id
            assert msgspec.structs.replace(second.options, host_id=None) == again


def test_a_host_on_a_given_log_takes_the_logs_durability(tmp_path: Path) -> None:
    """``Host(log)`` reports the log's mode; a different mode in the options is refused."""
    with LmdbEventLog.open(tmp_path / "db", durability="none") as log:
        with Host(log, owns_log=False) as host:
            assert host.options.durability == "none"
        with Host(log, owns_log=False, options=HostOptions(durability="none")) as host:
            host.session("s").append(Message.user("hello"))
        with pytest.raises(InvalidArgumentError, match="'sync' asked") as caught:
            Host(log, owns_log=False, options=HostOptions(durability="sync"))
        assert caught.value.argument == "durability"
    with Host(MemoryEventLog()) as host:
        assert host.options.durability is None and host.options.leases is False
    with pytest.raises(InvalidArgumentError, match="no durability mode"):
        Host(MemoryEventLog(), options=HostOptions(durability="sync"))


def test_leases_on_an_lmdb_folder_are_refused_before_it_is_created(tmp_path: Path) -> None:
    """``leases=True`` needs a database other hosts share; an LMDB folder is not created."""
    with pytest.raises(InvalidArgumentError) as caught:
        Host.open(tmp_path / "db", options=HostOptions(leases=True))
    assert caught.value.argument == "leases"
    assert not (tmp_path / "db").exists()


def test_options_must_be_host_options(tmp_path: Path) -> None:
    """A dict (or anything else) for ``options`` is refused, naming it; nothing is created."""
    with pytest.raises(InvalidArgumentError) as caught:
        Host.open(tmp_path / "db", options={"history_actors": 1})  # type: ignore[arg-type]
    assert caught.value.argument == "options"
    with pytest.raises(InvalidArgumentError):
        Host(MemoryEventLog(), options="fast")  # type: ignore[arg-type]
    assert not (tmp_path / "db").exists()


#: The fields that were keywords of ``Host.open`` before HostOptions (the others never were).
OLD_KEYWORDS = sorted(set(OTHER_VALUES) - {"summary_processes", "snapshot_interval"})


@pytest.mark.parametrize("name", OLD_KEYWORDS)
def test_old_keywords_of_open_warn_and_still_work(tmp_path: Path, name: str) -> None:
    """``Host.open(history_actors=3)`` works as before and warns, naming the field to use."""
    with pytest.warns(DeprecationWarning, match=rf"options=HostOptions\({name}=") as caught:
        host = Host.open(tmp_path / "db", **{name: OTHER_VALUES[name]})
    try:
        assert caught[0].filename == __file__  # the warning points at the caller's line
        assert getattr(host.options, name) == OTHER_VALUES[name]
        if name == "durability":
            assert host.log.durability == "none"  # type: ignore[attr-defined]
        host.session("s").append(Message.user("hello"))
    finally:
        host.close()


@pytest.mark.parametrize("name", sorted(set(OLD_KEYWORDS) - {"durability"}))
def test_old_keywords_of_the_constructor_warn_and_still_work(name: str) -> None:
    """``Host(log, host_id=...)`` works as before and warns, naming the field to use."""
    with pytest.warns(DeprecationWarning, match=rf"Host\({name}=\.\.\.\) is deprecated") as caught:
        host = Host(MemoryEventLog(), **{name: OTHER_VALUES[name]})
    with host:
        assert caught[0].filename == __file__
        assert getattr(host.options, name) == OTHER_VALUES[name]


def test_several_old_keywords_warn_once_each(tmp_path: Path) -> None:
    """Each old keyword is named by its own warning; together they make one HostOptions."""
    with pytest.warns(DeprecationWarning) as caught:
        host = Host.open(tmp_path / "db", durability="none", history_actors=1, host_id="h")
    with host:
        named = sorted(str(w.message).split("(")[1].split("=")[0] for w in caught)
        assert named == ["durability", "history_actors", "host_id"]
        assert host.options == HostOptions(
            durability="none",
            history_actors=1,
            host_id="h",
            lease_wait=21.0,
            leases=False,
            summary_processes=PROCESSES,
        )


def test_an_old_keyword_beside_options_is_refused(tmp_path: Path) -> None:
    """``options=`` and an old keyword together: an error naming the keyword, no warning, no log."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a DeprecationWarning would fail the call first
        with pytest.raises(InvalidArgumentError, match="beside options=") as caught:
            Host.open(tmp_path / "db", options=HostOptions(), history_actors=1)
        assert caught.value.argument == "history_actors"
        with pytest.raises(InvalidArgumentError, match="beside options="):
            Host(MemoryEventLog(), options=HostOptions(host_id="a"), host_id="b")
    assert not (tmp_path / "db").exists()


def test_an_old_keyword_with_a_bad_value_fails_as_the_field_does(tmp_path: Path) -> None:
    """The old keyword is checked as its HostOptions field is, before anything is created."""
    with (
        pytest.warns(DeprecationWarning),
        pytest.raises(InvalidArgumentError) as caught,
    ):
        Host.open(tmp_path / "db", compaction_workers=0)
    assert caught.value.argument == "compaction_workers"
    assert not (tmp_path / "db").exists()


def test_an_unknown_keyword_is_a_type_error(tmp_path: Path) -> None:
    """A misspelt keyword fails as Python's own would, not as a deprecated one."""
    with pytest.raises(TypeError, match="unexpected keyword argument 'history_actor'"):
        Host.open(tmp_path / "db", history_actor=1)  # type: ignore[call-arg]
    assert not (tmp_path / "db").exists()
