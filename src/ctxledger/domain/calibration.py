"""The self-calibrating estimate: the default tokenizer learns a session's characters per token.

Each usage report is paired with the view it measured (the last ``ViewServed``, which records the
view's characters): ``view_chars / prompt_tokens`` is one sample of the session's ratio. The
running statistic (a least-squares line of tokens against characters, whose intercept absorbs
what every prompt holds besides the view: tool schemas, framing) is recorded as a
``TokenizerCalibrated`` event with the report, so the fold (and so replay, time travel, verify
and what-if) takes the figures as recorded instead of recomputing them. The ratio in use is
conservative: it is never above the default's 3 (calibration makes the estimate count more
tokens for dense text, never fewer for sparse text), the fixed part is left to the provider's
own figure (which the estimate already uses while it is current), the ratio is rounded down,
and it needs views of varied sizes.

Once ``Config.calibrate_after_reports`` samples were taken, :func:`session_tokenizer` replaces
the default ``chars // 3`` (:class:`~ctxledger.domain.tokenizer.CharTokenizer` with 3) by
:class:`CalibratedTokenizer`; any other tokenizer is used as given.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

from ctxledger.domain.state import SessionState
from ctxledger.domain.tokenizer import CharTokenizer, Tokenizer, message_chars
from ctxledger.domain.usage import Calibration
from ctxledger.events.types import Event, TokenizerCalibrated, UsageReported
from ctxledger.messages import Message

__all__ = [
    "MAX_CHARS_PER_TOKEN",
    "MIN_SPREAD",
    "CalibratedTokenizer",
    "calibrate",
    "session_tokenizer",
    "tokens_of_chars",
    "usage_events",
    "view_chars",
]

#: The learnt ratio is never above the default's: calibration only ever makes the estimate count
#: more tokens than ``chars // 3`` (for denser text), never fewer, so it never weakens the guard
#: of the window (a session whose reports imply sparser text keeps ``// 3``).
MAX_CHARS_PER_TOKEN = 3.0

#: The views' characters must vary by at least this share of their mean (standard deviation)
#: before a slope is trusted.
MIN_SPREAD = 0.05


class CalibratedTokenizer:
    """``chars * 1000 // round(chars_per_token * 1000)``: the default estimate, calibrated.

    Integer arithmetic on the ratio in thousandths, so every platform counts the same.
    """

    __slots__ = ("_milli", "chars_per_token")

    def __init__(self, chars_per_token: float) -> None:
        """Create the estimator for ``chars_per_token`` (at least 1)."""
        if not chars_per_token >= 1:
            raise ValueError(f"chars_per_token must be >= 1, got {chars_per_token!r}")
        self.chars_per_token = chars_per_token
        self._milli = round(chars_per_token * 1000)

    def count_text(self, text: str) -> int:
        """Return the tokens of ``text``."""
        return len(text) * 1000 // self._milli

    def count_message(self, message: Message) -> int:
        """Return the tokens of one message (content, tool-call names and arguments)."""
        return message_chars(message) * 1000 // self._milli

    def count_messages(self, messages: Sequence[Message]) -> int:
        """Return the tokens of a prompt: its total characters, divided once."""
        return sum(message_chars(message) for message in messages) * 1000 // self._milli

    def __repr__(self) -> str:
        return f"CalibratedTokenizer(chars_per_token={self.chars_per_token})"


def view_chars(messages: Sequence[Message]) -> int:
    """The characters the default tokenizer counts in a view's messages."""
    return sum(message_chars(message) for message in messages)


def tokens_of_chars(tokenizer: Tokenizer, chars: int) -> int | None:
    """What ``tokenizer.count_messages`` gives for messages of ``chars`` characters (see
    :func:`view_chars`) when it is one of the built-in estimators, which count characters;
    ``None`` for any other tokenizer (subclasses included), which must count the messages."""
    kind = type(tokenizer)
    if kind is CharTokenizer:
        return chars // cast(CharTokenizer, tokenizer).chars_per_token
    if kind is CalibratedTokenizer:
        return chars * 1000 // cast(CalibratedTokenizer, tokenizer)._milli
    return None


def calibrate(previous: Calibration | None, chars: int, tokens: int) -> Calibration:
    """Return the calibration with one more sample (a view of ``chars`` measured as ``tokens``).

    A least-squares line of tokens against characters, kept as running moments (Welford):
    its slope is the tokens per character of the session's text, apart from the fixed part of
    every prompt (tool schemas, framing), which the intercept absorbs. The ratio in use is the
    reciprocal of the slope, rounded down to thousandths (so it errs towards more tokens) and
    within [1, 3], determined only once at least three views whose sizes vary by at least
    :data:`MIN_SPREAD` of their mean were paired.
    """
    before = previous or Calibration()
    samples = before.samples + 1
    dx = chars - before.mean_chars
    dy = tokens - before.mean_tokens
    mean_chars = before.mean_chars + dx / samples
    mean_tokens = before.mean_tokens + dy / samples
    m2_chars = before.m2_chars + dx * (chars - mean_chars)
    m2_tokens = before.m2_tokens + dy * (tokens - mean_tokens)
    co_moment = before.co_moment + dx * (tokens - mean_tokens)
    ratio = 0.0
    if samples >= 3 and m2_chars > 0 and co_moment > 0:
        spread = math.sqrt(m2_chars / (samples - 1))
        if spread >= MIN_SPREAD * mean_chars:
            # Rounded down: a ratio learnt from reports that were themselves shaped by the
            # estimate (a provider figure derived from it) stays where it is, never drifts.
            ratio = math.floor(m2_chars / co_moment * 1000 + 1e-6) / 1000
            ratio = min(max(1.0, ratio), MAX_CHARS_PER_TOKEN)
    return Calibration(
        samples=samples,
        mean_chars=mean_chars,
        mean_tokens=mean_tokens,
        m2_chars=m2_chars,
        m2_tokens=m2_tokens,
        co_moment=co_moment,
        chars_per_token=ratio,
    )


def usage_events(state: SessionState, usage: UsageReported) -> list[Event]:
    """The events that record ``usage``: the report, and a calibration step when it pairs.

    A report pairs with the last served view when it was measured on it (same newest seq, the
    view's characters recorded, not paired before) and calibration is on for the session.
    """
    events: list[Event] = [usage]
    accounting = state.accounting
    if (
        state.config.calibrate_after_reports > 0
        and usage.prompt_tokens > 0
        and accounting.view_chars > 0
        and usage.through_seq == accounting.view_seq == state.last_view_seq
        and accounting.paired_seq != accounting.view_seq
    ):
        new = calibrate(accounting.calibration, accounting.view_chars, usage.prompt_tokens)
        events.append(
            TokenizerCalibrated(
                samples=new.samples,
                mean_chars=new.mean_chars,
                mean_tokens=new.mean_tokens,
                m2_chars=new.m2_chars,
                m2_tokens=new.m2_tokens,
                co_moment=new.co_moment,
                chars_per_token=new.chars_per_token,
            )
        )
    return events


def session_tokenizer(state: SessionState, tokenizer: Tokenizer) -> Tokenizer:
    """The tokenizer that counts for ``state``: the calibrated one where it applies.

    It applies when ``tokenizer`` is the default ``chars // 3`` and the session has paired at
    least ``Config.calibrate_after_reports`` (> 0) reports. Idempotent.
    """
    calibration = state.accounting.calibration
    needed = state.config.calibrate_after_reports
    if (
        calibration is None
        or needed <= 0
        or calibration.samples < needed
        or calibration.chars_per_token < 1
        or type(tokenizer) is not CharTokenizer
        or tokenizer.chars_per_token != 3
    ):
        return tokenizer
    memo = state.tokenizer_memo
    if memo is not None and memo[0] is calibration:
        calibrated: Tokenizer = memo[1]
        return calibrated
    calibrated = CalibratedTokenizer(calibration.chars_per_token)
    state.tokenizer_memo = (calibration, calibrated)
    return calibrated
