"""Budget's decision on a measured session: release it, ask whether its extension is due, or
queue a summary to prepare in the background.

The budget actor (:mod:`ctxledger.actors.budget`) folds, per session, a :class:`PressureMemo`
(an upper bound of the estimate and the memos of its own decisions) and asks the history actor
that owns the session for a measure once the bound may have reached the prepare point. With that
measure (a :class:`Measurement`), :func:`measured_verdict` decides, purely:

- background compaction is off for the session now: :class:`Off`, budget forgets it;
- no summary may start before a seq (one is running, the session is too short, one failed
  lately): :class:`Released`, not looked for again before that seq, and measured next time (the
  batches while measuring were not counted);
- the estimate is below the prepare point: :class:`Released` until the prepare point (none with
  a dynamic threshold policy, whose marks move with more than the Config);
- no summary could be ready before the threshold at the session's pace
  (:func:`~ctxledger.domain.policy.ready_in_time`): :class:`Released`, and either looked for again
  ``BACKGROUND_BACKOFF`` messages on (``recheck_pace``) or not for the rest of the active
  checkpoint's cycle (``late_for``);
- a prepared summary may still be activated: :class:`Released` while it absorbs the growth (until
  the next look, see :func:`_next_look`), or :class:`ExtensionWanted` (asked once a look: is its
  extension due?) when that is not known yet;
- otherwise :class:`Queued`, with the priority ``-estimate / threshold`` (the sessions closest
  to their threshold first).

The actor keeps its mailbox, the phase of each session's measure, the host-wide rationing and
the telling; this module holds no actor state and imports none.
"""

from __future__ import annotations

import msgspec

from ctxledger.domain._marks import ready_in_time
from ctxledger.domain.fold import BACKGROUND_BACKOFF

__all__ = [
    "ExtensionWanted",
    "Measurement",
    "Off",
    "PressureMemo",
    "PressureVerdict",
    "Queued",
    "Released",
    "measured_verdict",
]


class PressureMemo(msgspec.Struct, frozen=True, kw_only=True):
    """What budget folds for one session and its decision reads or writes.

    Attributes:
        last_seq: The newest message seq seen.
        quiet_until: No background compaction is looked for before this seq.
        bound: An upper bound of the background estimate, in tokens (None: unknown, measure).
        since: Tokens appended since the pending measure was asked for (None: the bound was
            dropped meanwhile): the measure may or may not include them, so the bound after it
            counts them again. Read only here.
        prepare: The prepare point last measured (None: unknown, or a dynamic policy's).
        absorbing: The prepared summary last found to absorb the growth, the estimate then, and
            the view at which its extension may be due (a step above).
        absorb_until: While the bound stays below this, that summary still absorbs: nothing is
            measured (a measure drafts the whole view, and the answer would be the same release).
        late_for: The checkpoint after which no summary could be prepared in time.
        told: The running total of tokens told by the last batch folded. Read only here.
        looked: The estimate and the tokens told at the last look past the threshold (the
            pace's start for the next, see :func:`_next_look`).
    """

    last_seq: int = 0
    quiet_until: int = 0
    bound: int | None = None
    since: int | None = 0
    prepare: int | None = None
    absorbing: tuple[str, int, int] | None = None
    absorb_until: int | None = None
    late_for: str | None = None
    told: int = 0
    looked: tuple[int, int] | None = None


class Measurement(msgspec.Struct, frozen=True, kw_only=True):
    """The history actor's measure of a session, as the decision reads it (carried to budget
    in :class:`ctxledger.actors.messages.Measured`).

    Attributes:
        off: Background compaction is off for it (or it is no longer active here).
        blocked_until: No background compaction may start before this message seq (one is
            running, or the session is too short, or one failed lately); 0: not blocked.
        last_seq: The newest message seq.
        estimate: The background estimate, exact (tokens of the view, no pending text).
        threshold: The compaction threshold in force.
        prepare: The prepare point in force.
        dynamic: The marks depend on more than the Config (a dynamic threshold policy).
        prepared: The id of the prepared summary that may still be activated, if any.
        active: The id of the active checkpoint, if any.
        grown: Tokens the view grew since the active checkpoint.
        seconds: Seconds since the active checkpoint was made.
        summary_seconds: The active checkpoint's summariser time.
        extension: Whether the prepared summary's extension is due (asked for only).
        recheck_pace: A summary late for this checkpoint's cycle is looked for again a few
            messages on, not for the rest of the cycle (``block_gives_way``, schema 5).
    """

    off: bool = False
    blocked_until: int = 0
    last_seq: int = 0
    estimate: int = 0
    threshold: int = 0
    prepare: int = 0
    dynamic: bool = False
    prepared: str | None = None
    active: str | None = None
    grown: int = 0
    seconds: float = 0.0
    summary_seconds: float = 0.0
    extension: bool | None = None
    recheck_pace: bool = False


class Off(msgspec.Struct, frozen=True, kw_only=True):
    """Background compaction is off for the session: forget it (and release the measure)."""


class Released(msgspec.Struct, frozen=True, kw_only=True):
    """No summary now. ``until``: the bound below which the batches of appends alone need not
    be published (the prepare point, or the next look at a prepared summary that absorbs the
    growth); None: none."""

    until: int | None = None


class ExtensionWanted(msgspec.Struct, frozen=True, kw_only=True):
    """Measure again, asking whether the prepared summary's extension is due."""


class Queued(msgspec.Struct, frozen=True, kw_only=True):
    """Prepare a summary in the background when the rationing allows: ``priority`` orders the
    queue, lowest first."""

    priority: float


#: What :func:`measured_verdict` decides, a closed union.
PressureVerdict = Off | Released | ExtensionWanted | Queued


def measured_verdict(
    memo: PressureMemo, measured: Measurement
) -> tuple[PressureMemo, PressureVerdict]:
    """Decide on a measured session (see the module docstring).

    Args:
        memo: The session's memo when the measure arrives.
        measured: The measure.

    Returns:
        The memo after the decision (unchanged with :class:`Off`) and the verdict.
    """
    if measured.off:
        return memo, Off()
    memo = msgspec.structs.replace(memo, last_seq=measured.last_seq, absorb_until=None)
    if measured.blocked_until:
        # The batches while measuring were not counted: measure next time.
        memo = msgspec.structs.replace(memo, quiet_until=measured.blocked_until, bound=None)
        return memo, Released()
    estimate, threshold, prepare = measured.estimate, measured.threshold, measured.prepare
    memo = msgspec.structs.replace(
        memo,
        bound=None if memo.since is None else estimate + memo.since,
        prepare=None if measured.dynamic else prepare,
    )
    if estimate < prepare:
        return memo, Released(until=memo.prepare)
    prepared, active = measured.prepared, measured.active
    if prepared is None and active is not None:
        if memo.late_for == active:
            return memo, Released()  # too late for this checkpoint's cycle
        if not ready_in_time(
            threshold - estimate, measured.grown, measured.seconds, measured.summary_seconds
        ):
            if measured.recheck_pace:
                # Looked at again a few messages on: the pace right after a checkpoint is one
                # or two steps' worth, and a summary prepared later in the cycle still absorbs
                # the growth (its block gives way) instead of needing a delta. The batches
                # while quiet are not counted.
                quiet_until = measured.last_seq + BACKGROUND_BACKOFF
                memo = msgspec.structs.replace(memo, quiet_until=quiet_until, bound=None)
            else:
                # A Config of schema 4: for the whole cycle.
                memo = msgspec.structs.replace(memo, late_for=active)
            return memo, Released()
    if prepared is not None:
        # Whether it will absorb the growth changes slowly as messages come (both views grow
        # alike but for masking, which shrinks only the view now): look again each time the
        # view grew by a quarter of the room between the prepare point and the threshold since
        # the last look.
        step = max(1, (threshold - prepare) // 4)
        checked = memo.absorbing
        if checked is not None and checked[0] == prepared and estimate < checked[1] + step:
            memo = _next_look(memo, checked[1] + step, measured, step)
            return memo, Released(until=memo.absorb_until)
        if measured.extension is None:
            return memo, ExtensionWanted()
        if not measured.extension:
            # Only appends (the bound stays known) leave the same summary usable: until the
            # bound reaches the next look, they are not even measured (nor published).
            memo = msgspec.structs.replace(memo, absorbing=(prepared, estimate, estimate + step))
            memo = _next_look(memo, estimate + step, measured, step)
            return memo, Released(until=memo.absorb_until)
    return memo, Queued(priority=-estimate / threshold)


def _next_look(memo: PressureMemo, target: int, measured: Measurement, step: int) -> PressureMemo:
    """The memo with ``absorb_until`` at the bound at which budget looks again at a prepared
    summary found to absorb the growth: once the view may have reached ``target`` (the last
    look's estimate and a ``step``).

    Below the threshold, exactly there. Past it, at the pace the view grew since the last look
    there, against the tokens appended meanwhile, and at most the whole gap between the prepare
    point and the threshold (``4 * step``) of appends on. A session past its threshold is not
    being served (a step would have compacted it): an import, a log of a conversation. There,
    masking can keep the view flat while the bound, which cannot see masking, grows by every
    message appended: a look at ``target`` in the bound was measured again every few appends
    (each measure holds the history actor ~0.3 ms, and the session's next append waits behind
    it), the view never getting there. Paced, a look is on time while the pace holds, and at
    most a gap of appends late if the view suddenly grows faster. Notes this look in
    ``looked`` (the estimate and the tokens told), the pace's start for the next.
    """
    bound, estimate = memo.bound, measured.estimate
    if estimate < measured.threshold or bound is None:
        return msgspec.structs.replace(memo, absorb_until=target, looked=None)
    looked = memo.looked
    memo = msgspec.structs.replace(memo, looked=(estimate, memo.told))
    if looked is None or memo.told <= looked[1]:
        return msgspec.structs.replace(memo, absorb_until=target)
    wanted = target - estimate  # how much more the view may grow before the look
    grew, appended = estimate - looked[0], memo.told - looked[1]
    paced = wanted * appended // grew if grew > 0 else 4 * step
    return msgspec.structs.replace(memo, absorb_until=max(target, bound + min(paced, 4 * step)))
