"""ctxledger.testing stays out of the runtime import graph; hypothesis loads only on demand."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
import ctxledger
assert "ctxledger.testing" not in sys.modules, "import ctxledger imported ctxledger.testing"
assert "hypothesis" not in sys.modules, "import ctxledger imported hypothesis"
import ctxledger.testing
assert "hypothesis" not in sys.modules, "the invariant checker needs no hypothesis"
ctxledger.testing.conversations
assert "hypothesis" in sys.modules
"""


def test_import_graph() -> None:
    """`import ctxledger` loads neither ctxledger.testing nor hypothesis; strategies load it."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, done.stderr
