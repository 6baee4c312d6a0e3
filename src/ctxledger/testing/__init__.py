"""Tools for property-testing what a model is shown, under your own policy.

* :func:`check_view_invariants` raises ``AssertionError`` naming a broken view invariant and
  the seq (split tool call, lost message, over-window view, altered history, ...);
  :func:`check_floor_refusal` checks that a refused step (``ContextOverflowError``) had to be.
* :func:`messages` and :func:`conversations` are Hypothesis strategies for valid, tool-paired
  conversations (they need the ``hypothesis`` test extra, imported on first use).
* :class:`SessionMachine` is a Hypothesis state machine over a real LMDB host, checked against a
  plain-Python model; ``SessionMachine.configured(config=..., summarizer=..., tokenizer=...)``
  returns a machine whose ``.TestCase`` pytest collects (needs ``hypothesis`` too).
* :class:`DomainSession` drives a session through the pure domain with an in-memory event list:
  it has every command of :class:`ctxledger.Session` (same names, arguments, answers and
  errors) and calls the same domain functions as the host, so it records the same events;
  ``DomainSession.from_events(events).restart()`` runs what a host does first with a session it
  finds in a log after a restart; :func:`digest_summarizer` is a small deterministic summariser
  for tests.
* The promises of the two-mark policy (DESIGN §2): :func:`run_policy` replays a conversation
  under a Config, :func:`check_policy_run`, :func:`check_lower_threshold` and
  :func:`check_unreached` check them, and :class:`PolicyMachine` (needs ``hypothesis``) checks
  them over generated sessions under a family of marks
  (``PolicyMachine.configured(window=..., settings=...)``).

* :class:`EventLogContract` is the storage contract suite as a pytest base class: subclass it
  with a ``make_log(self, tmp_path)`` and every case runs against your own backend (needs
  ``pytest``, imported on first use).

* :mod:`ctxledger.testing.processes` (import it by name) owns the child processes of crash
  tests: ``child_process`` kills, reaps and closes the pipes of a child however its block ends,
  ``complete_lines`` drops a line torn by SIGKILL.

``import ctxledger`` never imports this module.
"""

from __future__ import annotations

from typing import Any

from ctxledger.testing.driver import DomainSession, digest_summarizer
from ctxledger.testing.invariants import (
    check_floor_refusal,
    check_view_invariants,
    is_truncation_of,
)
from ctxledger.testing.policy import (
    PolicyRun,
    PolicyStep,
    check_lower_threshold,
    check_policy_run,
    check_unreached,
    family,
    run_policy,
)

__all__ = [
    "DomainSession",
    "EventLogContract",
    "PolicyMachine",
    "PolicyRun",
    "PolicyStep",
    "SessionMachine",
    "check_floor_refusal",
    "check_lower_threshold",
    "check_policy_run",
    "check_unreached",
    "check_view_invariants",
    "conversations",
    "digest_summarizer",
    "family",
    "is_truncation_of",
    "messages",
    "run_policy",
    "texts",
]

_STRATEGIES = ("conversations", "messages", "texts")
_CONTRACT = ("contract", "_contract_reads", "_contract_support", "_contract_writes")


def __getattr__(name: str) -> Any:
    # The strategies import hypothesis, a test extra: load them only when asked for.
    if name in _STRATEGIES:
        from ctxledger.testing import strategies

        return getattr(strategies, name)
    if name == "EventLogContract":
        import pytest  # a test extra, like hypothesis: only for the one who asks

        # Before the import: pytest then rewrites the suite's asserts to explain failures.
        pytest.register_assert_rewrite(*(f"ctxledger.testing.{name}" for name in _CONTRACT))
        from ctxledger.testing.contract import EventLogContract

        return EventLogContract
    if name == "SessionMachine":
        from ctxledger.testing.machine import SessionMachine

        return SessionMachine
    if name == "PolicyMachine":
        from ctxledger.testing.policy_machine import PolicyMachine

        return PolicyMachine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
