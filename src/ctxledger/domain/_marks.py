"""The two marks and when they act: the marks in force for a session and the predicates that
compare a view's estimate to them (DESIGN §2 "Two marks").

:func:`marks` derives a session's marks from its Config (scaled with a dynamic threshold);
:func:`should_compact` is the one place the threshold is compared; :func:`prepare_due`,
:func:`extend_due`, :func:`ready_in_time` and :func:`absorbs` say when a summary is prepared
ahead of need, extended and good enough to activate without waiting. They read only the Config
and the marks, never a cut, so they stand apart from the cut and the plan of
:mod:`ctxledger.domain.policy`, which re-exports every name here.
"""

from __future__ import annotations

from ctxledger.config import SHARES, Config, prepare_point
from ctxledger.domain.budget import threshold_for
from ctxledger.domain.cuts import Marks
from ctxledger.domain.state import SessionState

__all__ = [
    "absorbs",
    "background_on",
    "extend_due",
    "marks",
    "prepare_due",
    "ready_in_time",
    "should_compact",
]


def marks(state: SessionState) -> Marks:
    """The marks in force for ``state``: its Config's, scaled with a dynamic threshold."""
    config = state.config
    threshold = threshold_for(state)
    if config.legacy:
        prepare = int(threshold * (config.prepare_threshold or 0.0))
        return Marks(threshold, threshold, prepare, one_mark=True)
    sizes = config.sizes()
    target = sizes.target_tokens
    if threshold != sizes.threshold_tokens:  # the dynamic policy moved the high mark
        target = max(1, target * threshold // sizes.threshold_tokens)
    target = min(target, threshold - 1) if threshold > 1 else 1
    shares = SHARES[config.schema_version]
    prepare = prepare_point(config.prepare_threshold, threshold, target, shares.prepare)
    overshoot = None
    if shares.result_step:
        # One long tool result (a file read) can pass the threshold by its truncation limit.
        overshoot = max(0, min(sizes.tool_result_tokens, threshold - prepare))
    return Marks(threshold, target, prepare, overshoot=overshoot)


def background_on(config: Config) -> bool:
    """Whether the Config prepares summaries in the background (``prepare_threshold`` not 0)."""
    return config.prepare_threshold is None or config.prepare_threshold > 0


def should_compact(marks: Marks, estimate: int) -> bool:
    """Whether an estimate is at or over the high mark (equality compacts)."""
    return estimate >= marks.threshold


def prepare_due(marks: Marks, estimate: int) -> bool:
    """Whether a summary should be prepared in the background at this estimate."""
    return 0 < marks.prepare <= estimate


def extend_due(marks: Marks, activated: int, estimate: int) -> bool:
    """Whether the delta of a summary prepared ahead should be prepared now: ``activated`` is
    the view that summary gives activated (its fact block included), ``estimate`` the view now.

    A one-mark Config extends when the activated view reaches the prepare point, as it always
    did. With two marks, a prepared summary is activated at the threshold only while it
    :func:`absorbs` the growth; the history grows both views alike, so the one it will give
    when the view now reaches the threshold is ``activated + threshold - estimate``, plus what
    the step that reaches it passes it by (``Marks.overshoot``: a whole tool result at its
    truncation limit, at most the room between the prepare point and the threshold; a quarter
    of that room for a schema-4 Config). Its delta is due as soon as that passes the limit of
    :func:`absorbs` (at once, when the prepared cut fell short of its aim), and never while it
    does not: no summariser call is spent on a summary that will not be needed.
    """
    if marks.one_mark or not marks.prepare:
        return prepare_due(marks, activated)
    # The step that reaches the threshold passes it by up to its own size.
    overshoot = marks.overshoot
    if overshoot is None:
        overshoot = (marks.threshold - marks.prepare) // 4
    at_threshold = activated + max(0, marks.threshold - estimate) + overshoot
    return not absorbs(marks, at_threshold)


def ready_in_time(room: int, grown: int, seconds: float, summary_seconds: float) -> bool:
    """Whether a summary started now can be ready before the threshold: the session grew
    ``grown`` tokens in ``seconds`` of wall time (since its last checkpoint), its last summary
    took ``summary_seconds``, and ``room`` tokens are left below the threshold. Unknown rates
    (no checkpoint yet, no time, no growth) say yes.

    A summary that cannot be ready is not prepared: at the threshold the agent would wait for it
    anyway, and it takes a summariser (a call, and a place in the pool) that a compaction in the
    foreground then waits for too.
    """
    if grown <= 0 or seconds <= 0 or summary_seconds <= 0:
        return True
    return grown / seconds * summary_seconds <= room


def absorbs(marks: Marks, tokens: int) -> bool:
    """Whether a view of ``tokens`` after activating a prepared summary is good enough to
    activate it without waiting: below the threshold (one mark), or no further above the target
    than half the gap between the marks, so the next compaction is at least that far."""
    if marks.one_mark:
        return not should_compact(marks, tokens)
    return tokens <= marks.target + (marks.threshold - marks.target) // 2
