"""The hypothesis profile `make test` and CI use is reproducible; `make fuzz` searches."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

SEARCHING = os.environ.get("HYPOTHESIS_PROFILE") in ("fuzz", "long")


@pytest.mark.skipif(SEARCHING, reason="the search profiles draw a fresh seed on purpose")
def test_the_default_profile_is_derandomized_and_keeps_no_database() -> None:
    """Same examples on every run and machine: seeded from the test, no example database."""
    assert settings.default.derandomize is True
    assert settings.default.database is None


@pytest.mark.skipif(SEARCHING, reason="the search profiles draw a fresh seed on purpose")
def test_two_runs_of_a_property_draw_the_same_examples() -> None:
    """A property run twice in one process sees the same inputs, in the same order."""

    def run_once() -> list[tuple[str, int]]:
        seen: list[tuple[str, int]] = []

        @settings(max_examples=30)
        @given(st.text(), st.integers())
        def draw(text: str, number: int) -> None:
            seen.append((text, number))

        draw()
        return seen

    runs = [run_once(), run_once()]
    assert runs[0] == runs[1] and len(set(runs[0])) > 10


def test_the_fuzz_profile_searches_with_a_fresh_seed() -> None:
    """`make fuzz` draws many examples, randomly, and keeps its finds for the next run."""
    fuzz = settings.get_profile("fuzz")
    assert fuzz.derandomize is False and fuzz.max_examples >= 1000
    assert fuzz.database is not None
