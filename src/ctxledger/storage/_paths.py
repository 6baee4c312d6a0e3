"""Checking the folder of an LMDB log before anything is created there."""

from __future__ import annotations

import os

from ctxledger.errors import InvalidArgumentError

__all__ = ["check_folder"]


def check_folder(path: object, name: str = "path") -> str:
    """Return ``path`` as a string if it can name the folder of an LMDB log.

    Runs before the folder is resolved or created, so that a bad path creates nothing (an
    empty path would otherwise name the current folder, and LMDB would refuse a path it cannot
    encode only after the folder and its writer lock were made).

    Raises:
        InvalidArgumentError: ``path`` is not a ``str`` or ``os.PathLike[str]``, is empty,
            holds a NUL character, or is not valid UTF-8 (a lone surrogate, as undecodable
            bytes of a command-line argument become); its ``argument`` is ``name``.
    """
    try:
        folder = os.fspath(path)  # type: ignore[call-overload]
    except TypeError:
        folder = None
    if not isinstance(folder, str):
        raise InvalidArgumentError(
            name, f"expected a folder (a str or os.PathLike), got {type(path).__name__}"
        )
    if not folder:
        raise InvalidArgumentError(name, "must not be empty (name '.' for the current folder)")
    if "\x00" in folder:
        raise InvalidArgumentError(name, f"{folder!r:.80} holds a NUL character")
    if not folder.isascii():
        try:
            folder.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidArgumentError(
                name,
                f"{folder!r:.80} is not valid UTF-8 ({folder[exc.start]!r} at index {exc.start})",
            ) from None
    return folder
