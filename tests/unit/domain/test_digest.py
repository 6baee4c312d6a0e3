"""What the summariser is given (Config.summary_result_chars): cut, facts kept, no repeats."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from ctxledger import Config, Message, ToolCall
from ctxledger.domain import CompactionPlan, _compaction_plan, _fact_extract, plan_compaction
from ctxledger.domain.compaction import input_hash
from ctxledger.domain.digest import summary_input
from ctxledger.domain.facts import extract_facts
from ctxledger.domain.tokenizer import message_chars

from .builders import session


def _numbered(*messages: Message) -> list[Message]:
    """Give messages seqs 1.. as history does."""
    return [msgspec.structs.replace(m, seq=n) for n, m in enumerate(messages, 1)]


LOG = (
    "collecting ...\n"
    + "tests/test_a.py::test_ok PASSED\n" * 200
    + "E   AssertionError: assert parse('P1D') == timedelta(days=1)\n"
    + "see src/pkg/durations.py for the parser\n"
    + "tests/test_b.py::test_ok PASSED\n" * 200
)


def test_zero_gives_every_message_raw() -> None:
    """limit 0 (a recorded Config without the field): the input is the messages themselves."""
    messages = _numbered(Message.user("go"), Message.tool(LOG, "c1", "bash"))
    assert summary_input(messages, 0) == tuple(messages)


def test_an_oversize_result_is_head_tail_and_the_facts_of_its_middle() -> None:
    """The middle's error line and path survive as lines; the input shrinks to about the limit."""
    call = ToolCall("c1", "bash", '{"command": "pytest -x"}')
    messages = _numbered(Message.assistant("", [call]), Message.tool(LOG, "c1", "bash"))
    given = summary_input(messages, 1000)
    cut = given[1].content
    assert len(cut) < 1000 + 400 < len(LOG)
    assert cut.startswith(LOG[:500]) and cut.endswith(LOG[-500:])
    # The error line stands on a line of its own (whitespace collapsed, as facts are).
    assert "E AssertionError: assert parse('P1D') == timedelta(days=1)" in cut.splitlines()
    assert "src/pkg/durations.py" in cut
    original = {(f.kind, f.text) for f in extract_facts(messages) if f.kind in ("error", "path")}
    kept = {(f.kind, f.text) for f in extract_facts(given) if f.kind in ("error", "path")}
    assert original <= kept


def test_no_text_is_given_twice() -> None:
    """A repeated output is given as a reference to the first; user messages are never replaced."""
    long = "x = 1\n" * 100
    messages = _numbered(
        Message.user("please " * 50),
        Message.tool(long, "c1", "read"),
        Message.tool(long, "c2", "read"),
        Message.user("please " * 50),
    )
    given = summary_input(messages, 5000)
    assert given[1].content == long
    assert given[2].content == "[same content as message #2, not repeated]"
    assert given[3].content == messages[3].content


def test_long_call_arguments_keep_their_keys_and_stay_json() -> None:
    """A long argument string is cut; the JSON keys (the command) stay."""
    arguments = json.dumps({"command": "cat > a.py <<EOF\n" + "print(1)\n" * 500 + "EOF"})
    messages = _numbered(Message.assistant("", [ToolCall("c1", "bash", arguments)]))
    given = summary_input(messages, 600)
    value = json.loads(given[0].tool_calls[0].arguments)
    assert value["command"].startswith("cat > a.py <<EOF") and value["command"].endswith("EOF")
    assert len(given[0].tool_calls[0].arguments) < 800


def _test_runs() -> list[Message]:
    """A request, then six test runs whose output is :data:`LOG`."""
    messages = [Message.user("fix it")]
    for n in range(6):
        call = ToolCall(f"c{n}", "bash", '{"command": "pytest"}')
        messages += [Message.assistant(f"run {n}", [call]), Message.tool(LOG, f"c{n}", "bash")]
    return messages


def test_plans_give_the_cut_input_only_under_a_new_config() -> None:
    """A Config built now cuts the summariser's input; one with the field at 0 does not."""
    messages = _test_runs()
    new = session(*messages, context_window=8_000, min_retain_rounds=0)
    old = session(*messages, context_window=8_000, min_retain_rounds=0, summary_result_chars=0)
    assert Config().summary_result_chars > 0
    plans = [plan_compaction(s.state, tokenizer=s.tokenizer, trigger="manual") for s in (new, old)]
    cut, raw = (plan.input_chars for plan in plans)  # type: ignore[union-attr]
    assert cut < raw / 3
    assert plans[1].messages == tuple(old.state.history[: len(plans[1].messages)])  # type: ignore[union-attr]


def _long_plan() -> CompactionPlan:
    built = session(*_test_runs(), context_window=8_000, min_retain_rounds=0)
    plan = plan_compaction(built.state, tokenizer=built.tokenizer, trigger="manual")
    assert isinstance(plan, CompactionPlan)
    return plan


def test_a_plan_makes_the_summariser_input_on_first_use(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planning does not digest the covered messages (the host plans on the history actor, the
    summariser's thread makes the input); the first use does, once, with the values it had when
    planning made it: the digest of the covered messages and the address of that input."""
    made: list[int] = []
    real = _compaction_plan.summary_input

    def counted(messages: Any, limit: int) -> tuple[Message, ...]:
        made.append(len(messages))
        return real(messages, limit)

    monkeypatch.setattr(_compaction_plan, "summary_input", counted)
    plan = _long_plan()
    assert made == []
    given = summary_input(plan.covered, plan.result_chars)
    assert plan.result_chars == Config().summary_result_chars
    assert plan.messages == given and plan.messages != plan.covered
    address = input_hash(given, plan.previous_summary, plan.focus, plan.max_chars)
    assert plan.input_hash == address
    assert plan.input_chars == sum(message_chars(m) for m in given) + len(plan.focus or "")
    assert made == [len(plan.covered)]  # made once, kept


def test_a_copied_plan_with_other_inputs_makes_its_own() -> None:
    """A plan copied with another focus, room or limit gives its own input and address, never
    the cached one; the cache is not part of a plan's value."""
    plan = _long_plan()
    first = plan.input_hash
    fresh = _long_plan()
    assert fresh == plan  # one made its input, the other did not
    focused = msgspec.structs.replace(plan, focus="the parser")
    assert focused.given is plan.given
    assert focused.input_hash == input_hash(
        plan.messages, plan.previous_summary, "the parser", plan.max_chars
    )
    assert focused.input_hash != first
    raw = msgspec.structs.replace(plan, result_chars=0)
    assert raw.messages == plan.covered
    assert plan.input_hash == first


def test_the_digest_keeps_no_middle_in_the_facts_memo(monkeypatch: pytest.MonkeyPatch) -> None:
    """The middles the digest reads facts from are made for that one reading: they are not kept
    in extract_facts' memo (they would push out the facts of messages that live on, and live
    on in it themselves), and reading without keeping gives the same facts."""
    monkeypatch.setattr(_fact_extract, "_memo", _fact_extract._Memo())
    call = ToolCall("c1", "bash", '{"command": "pytest -x"}')
    messages = _numbered(Message.assistant("", [call]), Message.tool(LOG, "c1", "bash"))
    given = summary_input(messages, 1000)
    assert given[1].content != LOG  # the output was cut: its middle's facts were read
    assert _fact_extract._memo.entries == {}
    unkept = extract_facts(messages, keep=False)
    assert _fact_extract._memo.entries == {}
    assert unkept == extract_facts(messages)
    assert len(_fact_extract._memo.entries) == 2
