"""A package's public names imported on first use (PEP 562).

``ctxledger``, ``ctxledger.actors`` and ``ctxledger.summarizers`` re-export names from their
modules; importing them all when the package is imported cost ~0.3 s, paid by every
command-line verb and by each summary worker process, which use a few. Each of these packages
instead declares where its names live and gets its ``__getattr__`` and ``__dir__`` here: a
name is imported from its module on first use, and is a plain attribute of the package after.
A submodule is an attribute too, imported on first use, as it was once the package had
imported everything (``import ctxledger; ctxledger.storage.open_log(...)``). A public name that
is also a submodule's (``ctxledger.domain.decide``, the function and its module) stays the
name's value when the submodule is imported: the import system sets each submodule as an
attribute of its package, which the package's eager imports once overwrote at once.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, homes: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose name ``n`` lives in module
    ``homes[n]``; the package's own submodules no longer shadow its names (see above)."""

    class LazyPackage(types.ModuleType):
        def __setattr__(self, name: str, value: object) -> None:
            if name in homes and isinstance(value, types.ModuleType):
                return  # the submodule is found in sys.modules all the same
            super().__setattr__(name, value)

    sys.modules[package].__class__ = LazyPackage

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        namespace = vars(sys.modules[package])
        if home is not None:
            value = getattr(importlib.import_module(home), name)
        elif not name.startswith("__") and importlib.util.find_spec(f"{package}.{name}"):
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *homes})

    return __getattr__, __dir__
