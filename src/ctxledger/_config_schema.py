"""The recorded versions of a :class:`~ctxledger.config.Config` and the derived shares of each.

A recorded Config carries ``schema_version``; one recorded before the field existed is brought
up by :func:`upcast_config` (the event codec calls it). :data:`SHARES` keeps the derived shares
of every two-mark schema, so a Config recorded with one replays as it was served. Every name is
importable from :mod:`ctxledger.config` too (this module is private).
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = [
    "CONFIG_SCHEMA",
    "DEFAULT_CALIBRATE_AFTER_REPORTS",
    "DEFAULT_COMPACTION_TARGET",
    "DEFAULT_SUMMARY_RESULT_CHARS",
    "LEGACY_SCHEMA",
    "MARKS_SCHEMA",
    "PREPARE_SHARE",
    "SHARES",
    "TARGET_GAP",
    "VIEW_HASH_SCHEMA",
    "Shares",
    "derived_target",
    "upcast_config",
]

#: The schema of a Config built now (the two-mark policy, its shares as of :data:`SHARES` 5,
#: views hashed with ``view_hash`` version 2).
CONFIG_SCHEMA = 6
#: The first schema of the two marks (its derived shares are kept for Configs recorded with it).
MARKS_SCHEMA = 4
#: The first schema whose views are hashed with version 2 of
#: :func:`ctxledger.domain.view_hash` (the messages' count last, so a step hashes only what it
#: adds); a Config of an older schema keeps version 1, so its recorded views verify.
VIEW_HASH_SCHEMA = 6
#: What a recorded Config without ``schema_version`` is upcast to: the one-mark policy of every
#: release before the two marks, with its floor guard and gain rule.
LEGACY_SCHEMA = 3
#: ``Config.calibrate_after_reports``'s default.
DEFAULT_CALIBRATE_AFTER_REPORTS = 3
#: ``Config.summary_result_chars``'s default (chosen by ``bench/quality.py``, issue 17).
DEFAULT_SUMMARY_RESULT_CHARS = 1_000
#: The derived low mark stays this share of the window below the threshold (or at half of it).
TARGET_GAP = 0.2


class Shares(NamedTuple):
    """The derived sizes of one two-mark schema, as shares (see :data:`SHARES`).

    Attributes:
        target: The low mark when ``compaction_target`` is derived and the threshold leaves
            room for it, a share of the window.
        prepare: The derived prepare point: this share of the way from the target up to the
            threshold.
        summary: The summary's room, a share of the target.
        facts: The fact block's room, a share of the target.
        request: The kept first request is shown whole up to this share of the target, and
            truncated (head, tail, a marker naming its seq) above it.
        request_last: The fact block lists the kept request's lines after every other fact
            (the view shows its head and tail, the marker names its seq: a recall away), not
            with the other user request lines before the paths.
        group_paths: The fact block lists the paths of one message on one line (a listing's
            paths take the room of their text, not of a line each).
        block_gives_way: A summary prepared ahead is activated with a shorter fact block when
            that lets it absorb the growth, rather than the agent waiting at the threshold for
            a summary made then (the block's facts are in the log, a recall away).
        result_step: A summary prepared ahead is judged to absorb the growth only if it
            also absorbs a step that passes the threshold by a whole tool result at its
            truncation limit (at most the prepare point's distance below the threshold), not
            by a quarter of that distance: one long file read is such a step.
    """

    target: float
    prepare: float
    summary: float
    facts: float
    request: float
    request_last: bool
    group_paths: bool
    block_gives_way: bool
    result_step: bool


#: The derived shares per schema. A recorded Config keeps its schema's, so the views it served
#: replay unchanged. Schema 4 as the two marks were first released; schema 5 chosen by
#: ``bench/quality.py`` and ``bench/bench_background.py`` (bench/README_quality.md, "Two marks"):
#: a lower target, a kept request sized by what it costs the next compaction, and a prepare
#: point and absorb rule that leave room for one long tool result (the zero-wait share); schema
#: 6 keeps schema 5's (it changed how views are hashed, see :data:`VIEW_HASH_SCHEMA`).
SHARES: dict[int, Shares] = {
    MARKS_SCHEMA: Shares(
        target=0.5,
        prepare=0.25,
        summary=0.15,
        facts=0.35,
        request=0.5,
        request_last=False,
        group_paths=False,
        block_gives_way=False,
        result_step=False,
    ),
    5: Shares(
        target=0.45,
        prepare=0.1,
        summary=0.15,
        facts=0.35,
        request=0.1,
        request_last=True,
        group_paths=True,
        block_gives_way=True,
        result_step=True,
    ),
}
SHARES[VIEW_HASH_SCHEMA] = SHARES[5]
#: The low mark when ``compaction_target`` is derived (this schema's, see :data:`SHARES`).
DEFAULT_COMPACTION_TARGET = SHARES[CONFIG_SCHEMA].target
#: The derived prepare point's share of the way from the target up to the threshold.
PREPARE_SHARE = SHARES[CONFIG_SCHEMA].prepare

# Fields the one-mark releases added after 0.1.0, with what a Config recorded without them meant
# (the decoding default of those releases). Fields of this schema map to "one mark".
_LEGACY_MISSING: dict[str, Any] = {
    "prepare_threshold": 0.0,
    "fact_index_chars": 0,
    "max_total_tokens": 0,
    "calibrate_after_reports": 0,
    "min_compaction_gain_tokens": 0,
    "floor_guard": False,
    "summary_result_chars": 0,
    "max_tool_result_chars": 0,
    "summary_max_chars": 0,
    "summary_chunk_chars": 0,
    "compaction_target": 0.0,
}


def upcast_config(raw: dict[str, Any]) -> dict[str, Any]:
    """Bring the raw map of a recorded Config up to the current schema (before decoding).

    A map that carries ``schema_version`` is current. One without it was written by a release
    before the two marks: the fields those releases added after 0.1.0 that it lacks take the
    values their decoding gave them (off), and ``schema_version`` becomes :data:`LEGACY_SCHEMA`
    with ``compaction_target`` 0 (no low mark), so the views it served replay unchanged.
    """
    if "schema_version" in raw:
        return raw
    return {**_LEGACY_MISSING, **raw, "schema_version": LEGACY_SCHEMA}


def derived_target(threshold: float, schema: int = CONFIG_SCHEMA) -> float:
    """The low mark ``compaction_target=None`` gives for a threshold (a share of the window)
    under a two-mark ``schema``: ``min(target share, max(threshold - 0.2, threshold / 2))``."""
    # Rounded: 0.7 - 0.2 is 0.49999999999999994 in floats, and a mark must not lose a token.
    ceiling = SHARES[schema].target
    return round(min(ceiling, max(threshold - TARGET_GAP, threshold / 2)), 9)
