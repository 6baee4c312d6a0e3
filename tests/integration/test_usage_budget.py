"""Provider usage, per-session totals and the token cap over a real LMDB host."""

from __future__ import annotations

import asyncio
import importlib
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest

from ctxledger import (
    BudgetExceededError,
    Config,
    CtxLedgerError,
    Host,
    InvalidUsageError,
    Message,
    Pricing,
    Remask,
    ToolCall,
    UsageTotals,
)
from ctxledger.config import upcast_config
from ctxledger.domain import CharTokenizer
from ctxledger.events import BudgetExhausted, TokenizerCalibrated, UsageReported, ViewServed
from ctxledger.replay import verify, view_at, what_if
from ctxledger.storage import LmdbEventLog


@dataclass
class Details:
    """Shaped like OpenAI's ``prompt_tokens_details``."""

    cached_tokens: int | None


@dataclass
class OpenAIUsage:
    """Shaped like ``openai.types.CompletionUsage``."""

    prompt_tokens: int
    completion_tokens: int
    prompt_tokens_details: Details | None = None


@dataclass
class AnthropicUsage:
    """Shaped like ``anthropic.types.Usage``."""

    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None


def _events(path: Path, session_id: str) -> list[object]:
    with LmdbEventLog.open(path, readonly=True) as log:
        return [record.event for record in log.read(session_id)]


def test_record_usage_takes_both_providers_shapes(tmp_path: Path) -> None:
    """Dicts and SDK-like objects of both providers are recorded with their cache figures."""
    with Host.open(tmp_path / "log") as host:
        session = host.session("s")
        session.append(Message.user("hello"))
        session.record_usage(OpenAIUsage(1000, 50, Details(cached_tokens=600)))
        session.record_usage({"prompt_tokens": 1100, "completion_tokens": 40})
        session.record_usage(AnthropicUsage(20, 70, 900, 300))
        session.record_usage(
            {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 1500}
        )
        session.record_usage(500, 9, cached_tokens=100)
        assert session.usage() == UsageTotals(
            input_tokens=1000 + 1100 + 1220 + 1510 + 500,
            cached_tokens=600 + 900 + 100,
            cache_write_tokens=300 + 1500,
            output_tokens=50 + 40 + 70 + 5 + 9,
            calls=5,
        )
    reports = [e for e in _events(tmp_path / "log", "s") if isinstance(e, UsageReported)]
    assert [(e.prompt_tokens, e.cached_tokens, e.cache_write_tokens) for e in reports] == [
        (1000, 600, 0),
        (1100, 0, 0),
        (1220, 900, 300),
        (1510, 0, 1500),
        (500, 100, 0),
    ]


def test_async_twin_takes_an_object(tmp_path: Path) -> None:
    """arecord_usage reads the same shapes on an event loop."""

    async def run(host: Host) -> UsageTotals:
        session = await host.asession("a")
        await session.aappend(Message.user("hi"))
        await session.arecord_usage(AnthropicUsage(5, 7, 11, None))
        return session.usage()

    with Host.open(tmp_path / "log") as host:
        totals = asyncio.run(run(host))
    assert totals == UsageTotals(input_tokens=16, cached_tokens=11, output_tokens=7, calls=1)


def test_bad_usage_records_nothing(tmp_path: Path) -> None:
    """A usage object of neither shape, or a bad count, is refused before anything is written."""
    with Host.open(tmp_path / "log") as host:
        session = host.session("s")
        session.append(Message.user("hi"))
        before = len(_events_live(host, "s"))
        for bad in ({"tokens": 3}, {"prompt_tokens": -4}, object()):
            with pytest.raises(InvalidUsageError):
                session.record_usage(bad)
        with pytest.raises(InvalidUsageError, match="not both"):
            session.record_usage({"prompt_tokens": 3}, 4)
        with pytest.raises(ValueError, match="completion_tokens"):
            session.record_usage(10, -1)
        assert len(_events_live(host, "s")) == before
        assert session.usage() == UsageTotals()


def _events_live(host: Host, session_id: str) -> list[object]:
    return [record.event for record in host.log.read(session_id)]


def _step(session: object, n: int) -> None:
    session.append(Message.user(f"question {n}"))  # type: ignore[attr-defined]
    session.prepare_step()  # type: ignore[attr-defined]
    session.append(Message.assistant(f"answer {n}"))  # type: ignore[attr-defined]
    session.record_usage(400, 100)  # type: ignore[attr-defined]


def test_cap_stops_the_session_once_and_holds_across_a_restart(tmp_path: Path) -> None:
    """At the cap prepare_step raises, BudgetExhausted is recorded once, a reopen keeps it."""
    capped = Config(max_total_tokens=1_500)
    path = tmp_path / "log"
    with Host.open(path) as host:
        session = host.session("s", config=capped)
        for n in range(3):
            _step(session, n)  # 500 tokens each: 1,500 after three
        session.append(Message.user("one more"))
        with pytest.raises(BudgetExceededError) as raised:
            session.prepare_step()
        assert (raised.value.cap, raised.value.total) == (1_500, 1_500)
        assert "1,500" in str(raised.value) and "max_total_tokens" in str(raised.value)
        assert isinstance(raised.value, CtxLedgerError)
        with pytest.raises(BudgetExceededError):
            session.prepare_step()
    exhausted = [e for e in _events(path, "s") if isinstance(e, BudgetExhausted)]
    assert exhausted == [BudgetExhausted(cap=1_500, total=1_500)]
    with Host.open(path) as host:
        session = host.session("s")
        with pytest.raises(BudgetExceededError):
            session.prepare_step()
        assert session.usage().total_tokens == 1_500
        # A higher cap lets the session go on, until it is reached in turn.
        session = host.session("s", config=capped.replace(max_total_tokens=2_000))
        view = session.prepare_step()
        assert view.through_seq == len(session.history())
        session.record_usage(400, 100)
        with pytest.raises(BudgetExceededError) as raised:
            session.prepare_step()
        assert (raised.value.cap, raised.value.total) == (2_000, 2_000)
        host.session("s", config=capped.replace(max_total_tokens=0)).prepare_step()
    exhausted = [e for e in _events(path, "s") if isinstance(e, BudgetExhausted)]
    assert [e.cap for e in exhausted] == [1_500, 2_000]
    assert verify(path).ok


def test_no_cap_by_default(tmp_path: Path) -> None:
    """A Config built now has no cap: usage alone never stops a session."""
    assert Config().max_total_tokens == 0
    with Host.open(tmp_path / "log") as host:
        session = host.session("s")
        session.append(Message.user("hi"))
        session.record_usage(10_000_000, 1_000_000)
        session.prepare_step()


def test_cost_and_the_checkpoints_effect(tmp_path: Path) -> None:
    """Session.cost prices the reported usage; a checkpoint records the prefix it keeps."""
    pricing = Pricing(3.0, 0.3, 3.75, 15.0)
    with Host.open(tmp_path / "log") as host:
        session = host.session(
            "s", config=Config(context_window=2_000, min_retain_rounds=1, keep_first_request=False)
        )
        session.append(Message.system("You are terse. " * 20))
        for n in range(4):
            session.append(Message.user(f"question {n} " + "x" * 400))
            session.append(Message.assistant(f"answer {n} " + "y" * 400))
        session.record_usage(AnthropicUsage(100, 50, 900, 200))
        assert session.cost(pricing) == pytest.approx(
            (100 * 3.0 + 900 * 0.3 + 200 * 3.75 + 50 * 15.0) / 1e6
        )
        assert session.cost(pricing.uncached()) == pytest.approx((1200 * 3.0 + 50 * 15.0) / 1e6)
        result = session.compact()
        assert result.compacted
        checkpoint = session.checkpoints()[-1]
        assert checkpoint.prefix_kept_tokens == len("You are terse. " * 20) // 3
        assert checkpoint.tokens_saved == checkpoint.tokens_before - checkpoint.tokens_after > 0
        with pytest.raises(TypeError):
            session.cost("anthropic-sonnet")  # type: ignore[arg-type]


def _tool_step(session: object, n: int, chars: int = 900) -> None:
    call = ToolCall(f"c{n}", "read_file", f'{{"path": "f{n}.py"}}')
    session.append_many(  # type: ignore[attr-defined]
        [Message.assistant(f"reading f{n}.py", [call]), Message.tool(f"{n}" * chars, call.id)]
    )
    session.prepare_step()  # type: ignore[attr-defined]


def _read_files(path: Path, results: int, *, gain: int, system: str = "") -> None:
    """A session that reads ``results`` files of 900 characters, a step each; 2 kept whole,
    masked by 2."""
    fields = {"context_window": 100_000, "micro_keep_recent": 2, "micro_batch": 2}
    # The gain rule is a one-mark Config's (schema 3, as recorded before the two marks).
    config = (
        msgspec.convert(upcast_config({**fields, "min_compaction_gain_tokens": gain}), Config)
        if gain
        else Config(**fields)
    )
    with Host.open(path) as host:
        session = host.session("s", config=config)
        if system:
            session.append(Message.system(system))
        session.append(Message.user("Read the files."))
        for n in range(results):
            _tool_step(session, n)


def test_a_remask_records_its_effect_on_the_next_calls(tmp_path: Path) -> None:
    """A view that masks results the previous view showed records how many, where the cached
    prefix ends and the tokens saved; replay derives the same figures, and Pricing weighs them."""
    path = tmp_path / "log"
    _read_files(path, 6, gain=0, system="You read files.")
    served = [e for e in _events(path, "s") if isinstance(e, ViewServed)]
    remasks = [(index, e.remask) for index, e in enumerate(served) if e.remask is not None]
    # 6 results, 2 kept whole, masked by 2: the boundary moved at the 4th and the 6th result.
    assert [index for index, _ in remasks] == [3, 5]
    for index, remask in remasks:
        assert isinstance(remask, Remask)
        assert remask.results == 2
        assert remask.tokens_after == served[index].estimated_tokens
        # Two 900-character results became placeholders "[Previous: used read_file]".
        per_result = 900 - len("[Previous: used read_file]")
        assert remask.tokens_saved == pytest.approx(2 * per_result / 3, abs=2)
    first = remasks[0][1]
    assert first.first_seq == 4  # system 1, user 2, call 3, result 4
    view = view_at(path, "s", served[remasks[0][0]].through_seq)
    assert [m.seq for m in view.messages[:4]] == [1, 2, 3, 4]
    assert first.prefix_kept_tokens == CharTokenizer().count_messages(view.messages[:3])
    second = remasks[1][1]
    assert second.first_seq == 8 and second.prefix_kept_tokens > first.prefix_kept_tokens
    pricing = Pricing.preset("anthropic-sonnet")
    assert pricing.compaction_effect(first, calls=1) > 0  # the rewrite costs more at first
    assert pricing.compaction_effect(first, calls=50) < 0  # and pays over enough calls
    report = verify(path)
    assert report.ok and report.views_checked == len(served)


def test_verify_reports_a_remask_that_does_not_rebuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recorded re-mask is derived again by verify; a different derivation is a mismatch."""
    path = tmp_path / "log"
    _read_files(path, 6, gain=0)
    assert verify(path).ok
    # The module that holds verify's per-session checks (not the function).
    verifying = importlib.import_module("ctxledger.replay.checks")
    monkeypatch.setattr(verifying, "remask_of", lambda state, view, tokenizer: None)
    report = verify(path)
    assert [m.kind for m in report.mismatches] == ["remask", "remask"]
    assert report.mismatches[0].expected.startswith("Remask(results=2")
    assert report.mismatches[0].actual == "None"


def test_under_the_gain_rule_each_recorded_remask_saves_the_gain(tmp_path: Path) -> None:
    """Under the gain rule the boundary waits until a re-mask saves enough: every recorded
    re-mask saves at least the gain, and the small batches it held back are masked together."""
    path = tmp_path / "log"
    # Two 900-character results save about 580 tokens: held back until four save 1,160.
    _read_files(path, 10, gain=700)
    remasks = [e.remask for e in _events(path, "s") if isinstance(e, ViewServed) and e.remask]
    assert [remask.results for remask in remasks] == [4, 4]
    assert all(remask.tokens_saved >= 700 for remask in remasks)
    assert verify(path).ok


def test_what_if_reports_cost_with_and_without_caching(tmp_path: Path) -> None:
    """what_if prices each policy's calls: caching serves the shared heads, the summariser pays."""
    path = tmp_path / "log"
    # No background compaction: what what_if re-decides does not depend on the log's timing.
    config = Config(context_window=3_000, min_retain_rounds=1, prepare_threshold=0.0)
    with Host.open(path) as host:
        session = host.session("s", config=config)
        session.append(Message.system("You are terse. " * 40))
        for n in range(12):
            session.append(Message.user(f"question {n} " + "x" * 600))
            session.prepare_step()
            session.append(Message.assistant(f"answer {n} " + "y" * 1_500))
    pricing = Pricing.preset("anthropic-sonnet")
    report = what_if(path, "s", config)
    assert report.compactions > 0 and not any(step.refused for step in report.steps)
    assert 0 < report.cached_tokens < report.prompt_tokens
    assert report.summarizer_input_tokens > 0
    cached, uncached = report.cost(pricing), report.cost(pricing, caching=False)
    assert cached < uncached
    summariser = report.summarizer_input_tokens * pricing.input / 1e6
    assert uncached == pytest.approx(report.prompt_tokens * pricing.input / 1e6 + summariser)
    raw = what_if(path, "s", config.replace(summary_result_chars=0))
    assert raw.summarizer_input_tokens > report.summarizer_input_tokens  # long answers are cut


def test_calibrated_estimates_replay_exactly_across_a_restart(tmp_path: Path) -> None:
    """A host session calibrates from its reports; verify and time travel rebuild every served
    view's hash and estimate after a restart, and the calibration survives it."""
    path = tmp_path / "log"
    config = Config(context_window=6_000, min_retain_rounds=1, calibrate_after_reports=2)
    with Host.open(path) as host:
        session = host.session("s", config=config)
        session.append(Message.system("You are terse."))
        for n in range(16):
            session.append(Message.user(f"step {n}: " + "f(x) = [1, 2]; " * (20 + 15 * (n % 4))))
            view = session.prepare_step()
            chars = sum(len(m.content) for m in view.messages)
            session.record_usage(chars * 2 // 5 + 120)  # 2.5 chars per token, 120 fixed
            session.append(Message.assistant(f"ok {n}"))
        session.wait_background()
    with LmdbEventLog.open(path, readonly=True) as log:
        events = [record.event for record in log.read("s")]
    calibrations = [e for e in events if isinstance(e, TokenizerCalibrated)]
    assert calibrations and calibrations[-1].chars_per_token == pytest.approx(2.5, abs=0.01)
    assert verify(path).ok
    last_at: dict[int, ViewServed] = {}
    for event in events:
        if isinstance(event, ViewServed):
            last_at[event.through_seq] = event
    for seq, served in last_at.items():
        rebuilt = view_at(path, "s", seq)
        assert (rebuilt.view_hash, rebuilt.estimated_tokens) == (
            served.view_hash,
            served.estimated_tokens,
        ), seq
    with Host.open(path) as host:
        session = host.session("s")
        session.append(Message.user("after the restart " + "z" * 300))
        view = session.prepare_step()
        milli = round(calibrations[-1].chars_per_token * 1000)
        assert view.view_tokens == sum(len(m.content) for m in view.messages) * 1000 // milli


def test_the_cap_raises_on_an_event_loop_too(tmp_path: Path) -> None:
    """aprepare_step raises BudgetExceededError at the cap, like prepare_step."""

    async def run(host: Host) -> None:
        session = await host.asession("a", config=Config(max_total_tokens=100))
        await session.aappend(Message.user("hi"))
        await session.arecord_usage(90, 10)
        with pytest.raises(BudgetExceededError, match="max_total_tokens=100"):
            await session.aprepare_step()

    with Host.open(tmp_path / "log") as host:
        asyncio.run(run(host))
