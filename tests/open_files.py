"""The files this process holds open, from ``/proc/self/fd`` (Linux): what the tests of
closing and discarding outputs look at."""

from __future__ import annotations

import os
from pathlib import Path


def open_files_under(folder: Path) -> list[str]:
    """The files under ``folder`` this process holds open (deleted ones included)."""
    root = str(folder.resolve())
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the descriptor listdir itself used, closed by now
            continue
        if target.startswith(root + os.sep):
            found.append(target)
    return found
