"""Which process holds a lease, and whether it is proven dead on this machine.

A lease names its host by ``host_id`` (any string the application chose, by default unique per
process). To let a host restarted after a crash take its sessions back at once, instead of
waiting for its dead predecessor's leases to expire, a lease also records the process that took
it: the machine's host name, its boot id (``/proc/sys/kernel/random/boot_id``), the pid
namespace, the pid, and the pid's start time (field 22 of ``/proc/PID/stat``, in clock ticks
after boot).

Another process may take a lease over before it expires only when the holder is *proven* dead:
it ran on this machine (same host name, boot id and pid namespace) and its pid is gone, is a
zombie, or now belongs to a process that started at another time (the pid was reused). Whatever
cannot be checked (another machine, another container's pid namespace, no ``/proc``, a process
of another user hidden from ``/proc``) counts as alive, and the lease is waited for as before.
A live holder, even a stopped one (SIGSTOP), is never taken over this way.
"""

from __future__ import annotations

import os
import socket
from functools import lru_cache

import msgspec

__all__ = ["LeaseHolder", "decode_holder", "holder_is_dead", "this_process"]

_BOOT_ID = "/proc/sys/kernel/random/boot_id"


class LeaseHolder(msgspec.Struct, frozen=True, kw_only=True):
    """The process that took a lease (see the module docstring).

    Attributes:
        host: The machine's host name.
        boot: The kernel's boot id (changes at every boot).
        pid_ns: The pid namespace (``readlink /proc/self/ns/pid``): pids of two namespaces are
            not comparable.
        pid: The process id.
        start: The process's start time, in clock ticks after boot.
    """

    host: str
    boot: str
    pid_ns: str
    pid: int
    start: int


def decode_holder(value: object) -> LeaseHolder | None:
    """A holder read back (a dict from ``jsonb``, or JSON text); None if absent or malformed
    (a lease written by an older version records none)."""
    try:
        if isinstance(value, str | bytes):
            return msgspec.json.decode(value, type=LeaseHolder)
        if isinstance(value, dict):
            return msgspec.convert(value, LeaseHolder)
    except msgspec.ValidationError:
        return None
    except msgspec.DecodeError:
        return None
    return None


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start time) of process ``pid`` from ``/proc``, or None if it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read().decode("ascii", "replace")
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ")".
    fields = data[data.rfind(")") + 2 :].split()
    try:
        return fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None


@lru_cache(maxsize=4)
def _machine() -> tuple[str, str, str] | None:
    try:
        with open(_BOOT_ID, encoding="ascii") as boot:
            boot_id = boot.read().strip()
        pid_ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    return socket.gethostname(), boot_id, pid_ns


@lru_cache(maxsize=4)
def _process(pid: int) -> LeaseHolder | None:
    machine = _machine()
    stat = _stat(pid)
    if machine is None or stat is None:
        return None
    host, boot, pid_ns = machine
    return LeaseHolder(host=host, boot=boot, pid_ns=pid_ns, pid=pid, start=stat[1])


def this_process() -> LeaseHolder | None:
    """This process as a lease holder; None where ``/proc`` cannot tell (not Linux)."""
    return _process(os.getpid())  # by pid: a forked child is another holder


def holder_is_dead(holder: LeaseHolder | None) -> bool:
    """Whether ``holder`` is proven dead: same machine, boot and pid namespace as this
    process, and its pid gone, a zombie, or reused by a process started at another time."""
    me = this_process()
    if holder is None or me is None or holder.pid <= 0:
        return False
    if (holder.host, holder.boot, holder.pid_ns) != (me.host, me.boot, me.pid_ns):
        return False
    if holder.pid == me.pid:
        return holder.start != me.start
    stat = _stat(holder.pid)
    if stat is None:
        # Not in /proc: gone, or hidden (hidepid) as another user's process, which kill(0)
        # tells apart.
        try:
            os.kill(holder.pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False
        return False
    state, start = stat
    return state in ("Z", "X") or start != holder.start
