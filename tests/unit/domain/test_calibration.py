"""The self-calibrating estimate: convergence on a known tokenizer, exact replay, the gates."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ctxledger import Config, Message
from ctxledger.domain import (
    CalibratedTokenizer,
    CharTokenizer,
    build_view,
    calibrate,
    message_chars,
    session_tokenizer,
)
from ctxledger.events import TokenizerCalibrated, ViewServed
from ctxledger.testing import DomainSession

from .builders import step

_PIECES = re.compile(r"[^\W\d_]{1,3}|\d|[^\w\s]")


def true_tokens(messages: Sequence[Message]) -> int:
    """A deterministic synthetic tokenizer: words in pieces of up to 3 letters (dense, like
    code), each digit and punctuation mark a token, plus 3 tokens of framing per message."""
    total = 0
    for message in messages:
        text = message.content + "".join(c.name + c.arguments for c in message.tool_calls)
        total += len(_PIECES.findall(text)) + 3
    return total


def _drive(session: DomainSession, steps: int) -> None:
    session.append(Message.system("You are a careful agent working on a Python repository."))
    session.append(Message.user("Please make the date parser accept ISO 8601 durations."))
    for n in range(steps):
        output = (
            f"tests/test_parse.py::test_duration_{n} FAILED\n"
            + "E   AssertionError: assert parse('P1D') == timedelta(days=1)\n" * (1 + n % 4)
            + "Considering the remaining configuration, everything else looks consistent; "
            * (3 + n % 5)
        )
        session.append_many(step(f"c{n}", output, text=f"Step {n}: run the failing test."))
        view = session.step()
        session.record_usage(true_tokens(view.messages), 40)


def test_calibration_converges_conservatively_on_a_known_tokenizer() -> None:
    """After enough paired reports the ratio is close to the true one, never above it by much."""
    config = Config(context_window=400_000, calibrate_after_reports=3, micro_keep_recent=1000)
    session = DomainSession(config)
    _drive(session, 30)
    calibration = session.state.accounting.calibration
    assert calibration is not None and calibration.samples == 30
    views = [e for e in session.events if isinstance(e, ViewServed)]
    last = session.views[-1]
    true_ratio = sum(message_chars(m) for m in last.messages) / true_tokens(last.messages)
    # The provider counts framing the view's characters do not show: the learnt ratio is at or
    # below the view's own ratio (conservative), and within 15 % of it.
    assert 0.85 * true_ratio <= calibration.chars_per_token <= true_ratio * 1.01
    assert calibration.chars_per_token != 3.0
    # The estimate of the last view is within 15 % of the true count; // 3 was not.
    error = abs(last.estimated_tokens - true_tokens(last.messages)) / true_tokens(last.messages)
    fixed = sum(message_chars(m) for m in last.messages) // 3
    fixed_error = abs(fixed - true_tokens(last.messages)) / true_tokens(last.messages)
    assert error < 0.15 < fixed_error
    assert views[-1].view_chars == sum(message_chars(m) for m in last.messages)


def test_calibration_waits_for_enough_reports() -> None:
    """Before ``calibrate_after_reports`` paired reports the default // 3 counts."""
    session = DomainSession(Config(context_window=400_000, calibrate_after_reports=5))
    _drive(session, 4)
    assert session.state.accounting.calibration is not None
    assert session.state.accounting.calibration.samples == 4
    assert session_tokenizer(session.state, CharTokenizer()).__class__ is CharTokenizer
    session.append(Message.user("go on"))
    view = session.step()
    assert view.view_tokens == sum(message_chars(m) for m in view.messages) // 3
    session.record_usage(true_tokens(view.messages))
    assert isinstance(session_tokenizer(session.state, CharTokenizer()), CalibratedTokenizer)


def test_replay_reproduces_every_estimate() -> None:
    """Folding the recorded events rebuilds every served view's hash and estimate."""
    session = DomainSession(Config(context_window=2_500, calibrate_after_reports=2))
    _drive(session, 40)
    assert any(isinstance(e, TokenizerCalibrated) for e in session.events)
    assert session.state.compactions_started > 0  # the estimate drove real compactions
    replayed = session.replay()
    assert replayed == session.state
    checked = 0
    for index, event in enumerate(session.events):
        if isinstance(event, ViewServed):
            state = session.replay(session.events[:index])
            view = build_view(state, tokenizer=CharTokenizer())
            assert (view.view_hash, view.estimated_tokens) == (
                event.view_hash,
                event.estimated_tokens,
            )
            checked += 1
    assert checked == 40


def test_off_for_old_configs_and_custom_tokenizers() -> None:
    """A recorded Config without the field (0) never calibrates; a custom tokenizer is kept."""
    old = DomainSession(Config(context_window=400_000, calibrate_after_reports=0))
    _drive(old, 6)
    assert old.state.accounting.calibration is None
    assert not any(isinstance(e, TokenizerCalibrated) for e in old.events)
    custom = CharTokenizer(4)
    calibrated = DomainSession(Config(context_window=400_000, calibrate_after_reports=1))
    _drive(calibrated, 3)
    assert session_tokenizer(calibrated.state, custom) is custom


def test_a_report_pairs_with_its_view_once() -> None:
    """A second report for the same view, or one for a newer message, adds no sample."""
    session = DomainSession(Config(context_window=400_000, calibrate_after_reports=1))
    _drive(session, 2)
    session.record_usage(500)
    session.append(Message.user("more"))
    session.record_usage(600)
    assert session.state.accounting.calibration is not None
    assert session.state.accounting.calibration.samples == 2


def test_calibrate_fits_the_slope_not_the_fixed_part() -> None:
    """Samples on a line tokens = chars / 2.5 + 500 give 2.5 chars per token (the intercept is
    the fixed part of every prompt); a ratio needs views of varied size and stays in [1, 3]."""
    calibration = None
    for chars in (4_000, 8_000, 12_000, 16_000, 20_000):
        calibration = calibrate(calibration, chars, chars * 2 // 5 + 500)
    assert calibration is not None and calibration.chars_per_token == 2.5
    sparse = None
    for chars in (4_000, 8_000, 12_000):
        sparse = calibrate(sparse, chars, chars // 4)
    assert sparse is not None and sparse.chars_per_token == 3.0  # never fewer tokens than // 3
    same = None
    for _ in range(5):
        same = calibrate(same, 10_000, 3_000)
    assert same is not None and same.chars_per_token == 0.0  # views of one size: undetermined
    noisy = None
    for chars, tokens in ((4_000, 2_000), (8_000, 3_300), (12_000, 5_600), (16_000, 6_200)):
        noisy = calibrate(noisy, chars, tokens)
    assert noisy is not None
    assert 2.5 < noisy.chars_per_token < 3.0  # the least-squares slope, rounded down
    dense = None
    for chars in (1_000, 2_000, 3_000):
        dense = calibrate(dense, chars, chars * 2)
    assert dense is not None and dense.chars_per_token == 1.0


def test_tokens_of_chars_is_what_the_built_in_estimators_count() -> None:
    """A step counts its view's characters once: for the built-in estimators the tokens are
    derived from them, equal to counting the messages; any other tokenizer counts."""
    from ctxledger import ToolCall
    from ctxledger.domain import CharTokenizer
    from ctxledger.domain.calibration import CalibratedTokenizer, tokens_of_chars, view_chars

    messages = [
        Message.user("é" * 37),
        Message.assistant("x" * 5, [ToolCall("c1", "bash", '{"command": "ls -la"}')]),
        Message.tool("y" * 1001, "c1", "bash"),
    ]
    chars = view_chars(messages)
    for tokenizer in (CharTokenizer(), CharTokenizer(4), CalibratedTokenizer(2.347)):
        for pending in ("", "z" * 17):
            shown = [*messages, Message.user(pending)] if pending else messages
            assert tokens_of_chars(tokenizer, chars + len(pending)) == tokenizer.count_messages(
                shown
            )

    class Mine(CharTokenizer):
        def count_messages(self, messages: Sequence[Message]) -> int:
            return 7

    assert tokens_of_chars(Mine(), chars) is None
