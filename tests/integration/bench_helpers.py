"""Loading and running the scripts of bench/ from the tests (bench/ is not a package)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load_bench(name: str) -> ModuleType:
    """bench/<name>.py as a module; bench/ is on the path while it loads (the scripts import
    their neighbours, such as peers.py and bench_args.py, by name)."""
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module


def run_bench(script: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run bench/<script> with ``args`` in bench/ (output captured, the exit code not checked)."""
    return subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        cwd=BENCH,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
