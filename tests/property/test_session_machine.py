"""The stateful SessionMachine over a real LMDB host, with the default and a user-style policy.

Budget: the loaded Hypothesis profile decides the number of examples ("ci": 25, and 60 steps
each, so the file stays well under a minute on 2 cores; "dev": 60 x 60; "long": 2000 x 80).
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import settings

from ctxledger import Config, Message
from ctxledger.testing import SessionMachine, digest_summarizer

# Examples come from the loaded profile; a soak ("long") also runs longer examples. An example
# of a machine drives a real host through 60 steps (~0.4 s): the random search ("fuzz", 1,000
# examples of each property) runs 200 of each machine, so that `make fuzz` ends in minutes.
_PROFILE = settings.get_current_profile_name()
_STEPS = 80 if _PROFILE == "long" else 60
_EXAMPLES = {"max_examples": 200} if _PROFILE == "fuzz" else {}


class WordTokenizer:
    """A user's tokenizer: one token per whitespace-separated word (and per call name/argument)."""

    def count_text(self, text: str) -> int:
        """Words in ``text``."""
        return len(text.split())

    def count_message(self, message: Message) -> int:
        """Words of the content, plus one per tool-call name and per argument word."""
        calls = sum(1 + len(call.arguments.split()) for call in message.tool_calls)
        return self.count_text(message.content) + calls

    def count_messages(self, messages: Sequence[Message]) -> int:
        """The sum over ``messages``."""
        return sum(self.count_message(message) for message in messages)


WordMachine = SessionMachine.configured(
    name="WordMachine",
    config=Config(
        context_window=400,
        compression_threshold=0.6,
        min_retain_rounds=2,
        micro_batch=1,
        micro_keep_recent=3,
        max_reactive_retries=2,
        snapshot_interval=5,
    ),
    summarizer=digest_summarizer,
    tokenizer=WordTokenizer(),
    sessions=1,
    max_active_sessions=1,
    durability="sync",
    result_sizes=(0, 30, 400, 3000, 12000),
)


def _budgeted(test_case: type) -> type:
    test_case.settings = settings(  # type: ignore[attr-defined]
        test_case.settings,  # type: ignore[attr-defined]
        stateful_step_count=_STEPS,
        **_EXAMPLES,
    )
    return test_case


TestSessionMachine = _budgeted(SessionMachine.TestCase)
TestSessionMachine.__doc__ = "The default machine: char tokenizer, extractive summariser."
TestWordTokenizerMachine = _budgeted(WordMachine.TestCase)
TestWordTokenizerMachine.__doc__ = "A user's policy: word tokenizer, micro_batch=1, sync LMDB."


def test_configured_rejects_unknown_settings() -> None:
    """configured() names a misspelt setting instead of ignoring it."""
    try:
        SessionMachine.configured(window=100)
    except TypeError as exc:
        assert "window" in str(exc)
    else:
        raise AssertionError("an unknown setting was accepted")
