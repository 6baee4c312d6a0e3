"""``HostOptions.snapshot_interval``: the host's snapshot interval, over each session's Config's.

Its ``None`` (the default) leaves each session to its ``Config.snapshot_interval``, as before;
an int is the interval of every session of the host, whatever their (recorded) Config says.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxledger import Config, Host, HostOptions, InvalidArgumentError, Message
from ctxledger.events import SessionOpened
from ctxledger.replay.loading import DENSE_SNAPSHOTS


def _snapshots(path: Path, options: HostOptions, config: Config, appends: int) -> list[int]:
    """Append ``appends`` messages one by one to a session of ``config`` on a host with
    ``options``; return the seqs of the session's snapshots (those of the events before the
    last append: each was stored before that append was answered, behind it in its queue)."""
    with Host.open(path, config=config, options=options) as host:
        session = host.session("s")
        for n in range(appends):
            before = host.log.last_seq("s")
            session.append(Message.user(f"message {n}"))
        opened = host.log.read("s", 1, 1)[0].event
        assert isinstance(opened, SessionOpened) and opened.config == config  # as given
        return [seq for seq in host.log.snapshot_seqs("s") if seq <= before]


def test_the_hosts_interval_overrides_the_sessions_config(tmp_path: Path) -> None:
    """A host with ``snapshot_interval=4`` snapshots a session whose Config says 1000 every 4."""
    options = HostOptions(snapshot_interval=4)
    seqs = _snapshots(tmp_path / "db", options, Config(snapshot_interval=1000), 30)
    assert seqs == list(range(4, max(seqs) + 1, 4)) and max(seqs) >= 24


def test_the_hosts_interval_overrides_a_shorter_config(tmp_path: Path) -> None:
    """A host with ``snapshot_interval=1000`` takes none for a session whose Config says 4."""
    options = HostOptions(snapshot_interval=1000)
    assert _snapshots(tmp_path / "db", options, Config(snapshot_interval=4), 30) == []


@pytest.mark.parametrize("interval", [4, 1000])
def test_without_a_host_interval_the_config_holds(tmp_path: Path, interval: int) -> None:
    """``HostOptions()`` (None): each session's ``Config.snapshot_interval``, as before."""
    seqs = _snapshots(tmp_path / "db", HostOptions(), Config(snapshot_interval=interval), 30)
    if interval == 4:
        assert seqs == list(range(4, max(seqs) + 1, 4)) and max(seqs) >= 24
    else:
        assert seqs == []


def test_the_hosts_interval_prunes_the_kept_snapshots(tmp_path: Path) -> None:
    """Old snapshots are pruned by the host's interval, not by the Config's 1000 (which would
    keep every one of them)."""
    seqs = _snapshots(tmp_path / "db", HostOptions(snapshot_interval=2), Config(), 120)
    assert max(seqs) >= 110
    assert len(seqs) <= DENSE_SNAPSHOTS + (max(seqs) // 2).bit_length()


@pytest.mark.parametrize("value", [0, -4, True, 4.0, "4"])
def test_an_invalid_interval_is_refused_before_anything_is_written(
    tmp_path: Path, value: object
) -> None:
    """A bool, a non-int or a value below 1 raises the ctxledger error naming the field; no log
    is created."""
    with pytest.raises(InvalidArgumentError) as caught:
        Host.open(tmp_path / "db", options=HostOptions(snapshot_interval=value))  # type: ignore[arg-type]
    assert caught.value.argument == "snapshot_interval"
    assert not (tmp_path / "db").exists()
