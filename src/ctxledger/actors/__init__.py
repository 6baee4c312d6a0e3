"""The live runtime: :class:`Host`, :class:`Session` and the per-role actors behind them.

The three names are imported on first use (PEP 562), so that importing one of the actors'
modules (a summary worker process imports :mod:`ctxledger.actors.summary_process`) does not
load the whole host.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctxledger._lazy import lazy_exports

if TYPE_CHECKING:  # what each name is, for type checkers and readers
    from ctxledger.actors.host import Host
    from ctxledger.actors.options import HostOptions
    from ctxledger.actors.session import Session

__all__ = ["Host", "HostOptions", "Session"]

#: The module each public name is imported from.
_HOMES = {
    "Host": "ctxledger.actors.host",
    "HostOptions": "ctxledger.actors.options",
    "Session": "ctxledger.actors.session",
}


if not TYPE_CHECKING:  # type checkers see the imports above, and no name of any other kind
    __getattr__, __dir__ = lazy_exports(__name__, _HOMES)
