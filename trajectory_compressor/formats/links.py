"""Symbolic link loops, named for what they are (§12): a link that leads back to itself
(``a -> b -> a``) is neither missing nor dangling, and a message says so."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from ..core.errors import ConfigError

LOOP = "a symbolic link loop (following its links leads back to it)"


def is_link_loop(path: Path | str) -> bool:
    """Whether following ``path``'s links never ends (ELOOP)."""
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def resolve(path: Path, what: str = "") -> Path:
    """``path.resolve()``, or `ConfigError` naming ``path`` (``what``: what it is for) as
    a symbolic link loop where Python would raise a bare `RuntimeError`."""
    try:
        return path.resolve()
    except (RuntimeError, OSError) as exc:
        if isinstance(exc, RuntimeError) or getattr(exc, "errno", None) == errno.ELOOP:
            label = f" ({what})" if what else ""
            raise ConfigError(f"{path}{label} is {LOOP}; remove the link or point it at a "
                              "file") from None
        raise
