"""How long a group commit waits for more requests before it commits what it has.

A group waits for as many requests as the group before the last one had (in a closed loop the
callers woken meanwhile come straight back; with ``wake_at_once``, the last group's and those
queued when it committed), for at most ``gap`` seconds without an arrival and ``most`` in all.

Waiting pays when callers come back: one more request in the group is a commit (an fsync) fewer,
and that request is answered a whole commit sooner. When they do not (agents that think between
steps, each arriving on its own), every wait that ends empty-handed delays the whole group by
``gap``. :class:`Gathering` learns which it is: it keeps a running share of the waits that ended
with a request, and stops waiting while fewer than half do; one wait in :data:`PROBE_EVERY` that
it would have skipped is made anyway, so that it notices when callers come back again.

Measured with ``bench/bench_host.py`` (durability ``sync``, 2 cores): 1,024 agents stepping once
a second each, whose waits end empty more often than not, p50 2.87-3.05 → 2.55-2.81 ms (three
alternating pairs); 128 agents stepping back to back keep their steps per second (never waiting
at all cost them ~4 %).
"""

from __future__ import annotations

__all__ = ["PAYS", "PROBE_EVERY", "WEIGHT", "Gathering"]

#: The share of waits that must end with a request for a group to go on waiting.
PAYS = 0.5
#: The weight of the newest wait in the running share.
WEIGHT = 0.125
#: While waits do not pay, one that would be skipped in this many is made anyway.
PROBE_EVERY = 8


class Gathering:
    """One committer's gathering policy (used by its thread only).

    Args:
        gap: Seconds a group waits for one more expected request.
        most: Seconds a group may wait for expected requests in all.
        wake_at_once: The committer answers a group's callers as soon as it is committed
            (they are expected in the very next group).
    """

    __slots__ = ("_declined", "_sizes", "_wake_at_once", "gap", "most", "paid", "queued")

    def __init__(self, gap: float, most: float, *, wake_at_once: bool = False) -> None:
        self.gap = gap
        self.most = most
        self._wake_at_once = wake_at_once
        self._sizes = [1, 1]  # the sizes of the last two groups
        self.queued = 0  # requests queued when the last group committed
        self.paid = 1.0  # the running share of waits that ended with a request
        self._declined = 0  # waits skipped since waiting stopped paying

    def expected(self) -> int:
        """How many requests the next group waits for (within ``gap`` and ``most``).

        Callers answered with the group before the last are likely back by now (the last
        group's are still waiting for their answers). With ``wake_at_once`` the last group's
        callers were answered as it committed, so they are expected, and so are the requests
        that had queued up by then (from other callers: the group's own were still waiting).
        """
        if self._wake_at_once:
            return self._sizes[1] + self.queued
        return self._sizes[0]

    def committed(self, size: int) -> None:
        """Note a group of ``size`` requests committed (``queued`` is set by the committer)."""
        self._sizes = [self._sizes[1], size]

    def worth_waiting(self) -> bool:
        """Whether to wait for an expected request (see the module docstring)."""
        if self.paid >= PAYS:
            return True
        self._declined += 1
        return self._declined % PROBE_EVERY == 0

    def waited(self, arrived: bool) -> None:
        """Note how a wait ended: with a request, or empty-handed."""
        self.paid += WEIGHT * ((1.0 if arrived else 0.0) - self.paid)
        if self.paid >= PAYS:
            self._declined = 0
