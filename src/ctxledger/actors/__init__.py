"""The live runtime: :class:`Host`, :class:`Session` and the per-role actors behind them."""

from ctxledger.actors.host import Host
from ctxledger.actors.options import HostOptions
from ctxledger.actors.session import Session

__all__ = ["Host", "HostOptions", "Session"]
