"""Reading a run's sidecar files bounded (§12): the metrics file, the checkpoint, the
over-limit and rejects files are regular files of a known size, or refused.

A sidecar is opened without blocking and checked before a byte is read: a FIFO, a device
(a link to ``/dev/zero``) or a folder is refused, and so is a file over its cap; a JSON
lines sidecar is read a line at a time, each line within its cap. The caps (docs/guarantees.md,
"Sidecars are read bounded"): `METRICS_CAP` for a metrics file, `CHECKPOINT_CAP` for a checkpoint,
`LINE_CAP` for one line of an over-limit or rejects file (an over-limit line may hold a
whole trajectory, as large as any input row).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

METRICS_CAP = 64 << 20  # a metrics file is a few KiB; per-row metrics go into the rows
CHECKPOINT_CAP = 256 << 20  # one entry per input file, whatever the rows
LINE_CAP = 1 << 30  # one over-limit or rejects line: a whole trajectory at most


class SidecarUnreadable(ValueError):
    """A sidecar that is not a regular file, or is larger than its cap (the message says
    which, naming the file)."""


def read_bounded(path: Path, what: str, cap: int) -> bytes:
    """The bytes of the sidecar ``path`` (a ``what``: "metrics file", ...);
    `FileNotFoundError` when it is missing, `SidecarUnreadable` when it is no regular file
    or holds more than ``cap`` bytes."""
    fd = _open(path, what)
    try:
        size = os.fstat(fd).st_size
        if size > cap:
            raise SidecarUnreadable(_too_big(path, what, size, cap))
        chunks, total = [], 0
        while chunk := os.read(fd, min(1 << 20, cap + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > cap:  # grew while being read
                raise SidecarUnreadable(_too_big(path, what, total, cap))
        return b"".join(chunks)
    finally:
        os.close(fd)


def bounded_lines(path: Path, what: str, cap: int | None = None
                  ) -> Iterator[tuple[int, bytes]]:
    """``(line number, line)`` of the JSON lines sidecar ``path``, each line within
    ``cap`` bytes (`LINE_CAP` by default; `SidecarUnreadable` past it, or when ``path``
    is no regular file)."""
    cap = LINE_CAP if cap is None else cap
    fd = _open(path, what)
    with os.fdopen(fd, "rb") as f:
        number = 0
        while line := f.readline(cap + 1):
            number += 1
            if len(line) > cap:
                raise SidecarUnreadable(f"{path}:{number}: a line of the {what} is over "
                                        f"{_size(cap)}, the cap of one line; it is not one "
                                        "compress wrote")
            yield number, line


def _open(path: Path, what: str) -> int:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise SidecarUnreadable(f"the {what} {path} is {file_kind(mode)}, not a regular file; "
                                    "a sidecar is a file compress wrote (remove it, or give "
                                    "the output of a run)")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _too_big(path: Path, what: str, size: int, cap: int) -> str:
    return (f"the {what} {path} holds {_size(size)}, over the cap of {_size(cap)} for a "
            f"{what}; it is not one compress wrote")


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}".replace(".0 ", " ")
    return f"{n} bytes"


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, in words ("a FIFO (named pipe)")."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"
