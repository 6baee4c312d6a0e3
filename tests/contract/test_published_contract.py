"""``ctxledger.testing.EventLogContract`` as a third party uses it: in a project of its own.

Each case writes a test module into an empty folder and runs pytest on it in a child process,
as a backend author would: the README's example passes, and a backend that breaks the contract
fails it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"

_BROKEN = '''
from ctxledger.storage import MemoryEventLog
from ctxledger.testing import EventLogContract


class ForgetfulLog(MemoryEventLog):
    """Drops the last event of every read: a broken backend."""

    def read(self, session_id, from_seq=1, to_seq=None, *, limit=None):
        return super().read(session_id, from_seq, to_seq, limit=limit)[:-1]


class TestForgetfulLog(EventLogContract):
    def make_log(self, tmp_path):
        return ForgetfulLog()
'''


def run_pytest(folder: Path, source: str) -> subprocess.CompletedProcess[str]:
    """Run pytest on ``source`` (as ``test_mine.py``) in ``folder``, as its own project."""
    (folder / "test_mine.py").write_text(source)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_mine.py"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def readme_example() -> str:
    """The README's example of a backend's own contract test."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text("utf-8"), re.DOTALL)
    (example,) = [block for block in blocks if "EventLogContract" in block]
    return str(example)


def test_the_readme_example_runs_every_case_against_a_backend(tmp_path: Path) -> None:
    """The README's subclass passes every case but those of the hooks it leaves undefined."""
    done = run_pytest(tmp_path, readme_example())
    assert done.returncode == 0, done.stdout + done.stderr
    passed = int(re.search(r"(\d+) passed", done.stdout).group(1))  # type: ignore[union-attr]
    skipped = int(re.search(r"(\d+) skipped", done.stdout).group(1))  # type: ignore[union-attr]
    assert passed >= 60 and skipped == 4  # three restart cases, one damaged snapshot


def test_a_backend_that_breaks_the_contract_fails_it(tmp_path: Path) -> None:
    """A log that loses events on read fails the suite, with pytest's explanation of the assert."""
    done = run_pytest(tmp_path, _BROKEN)
    assert done.returncode == 1
    failed = int(re.search(r"(\d+) failed", done.stdout).group(1))  # type: ignore[union-attr]
    assert failed >= 10
    assert "TestForgetfulLog::test_read_returns_what_append_recorded" in done.stdout
    assert "Right contains one more item" in done.stdout  # asserts rewritten: explained
