"""The live runtime: :class:`Host`, :class:`Session` and the per-role actors behind them."""

from ctxledger.runtime.host import Host
from ctxledger.runtime.options import HostOptions
from ctxledger.runtime.session import Session

__all__ = ["Host", "HostOptions", "Session"]
