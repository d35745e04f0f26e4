"""One run per output at a time: an exclusive lock file beside the output (§7).

The lock is ``.<output stem>.lock`` beside the sidecars. A run holds an advisory
``flock`` on it for its whole life and writes its pid and host into it, so a second run
into the same output refuses at once (exit 2) naming the holder. The kernel drops the
``flock`` when its holder dies, so a lock left by a killed run is stale by construction
and is taken over; where ``flock`` does not work (some network file systems) the pid and
host decide: a lock naming a pid that is no longer alive on this host is stale.

A run checks that its lock is still its own (`check_held`: the same file, by device and
inode, with the same content) before each checkpoint and before it commits. Deleting a
live run's lock lets a second run in; the first then refuses to commit (`LockLost`, exit
2) and touches no file by name again, so the output is the second run's alone.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError

_CHOOSE = "choose another output (-o)"


class OutputLocked(ConfigError):
    """Another run holds the output (exit code 2)."""


class LockLost(ConfigError):
    """This run's lock file was deleted or replaced while it ran (exit code 2)."""


# The locks this process holds: path -> (device, inode, content written into it).
_HELD: dict[str, tuple[int, int, bytes]] = {}


def lock_path(stem_path: Path) -> Path:
    """The lock file of the outputs whose sidecars start with ``stem_path``."""
    return stem_path.with_name(f".{stem_path.name}.lock")


@contextlib.contextmanager
def output_lock(path: Path, output: Path, choose: str = _CHOOSE) -> Iterator[None]:
    """Hold the lock ``path`` for ``output`` while the block runs; `OutputLocked` if
    another live run holds it (``choose`` ends the message: what to do instead)."""
    fd, content = _acquire(path, output, choose)
    st = os.fstat(fd)
    key = str(path.absolute())
    _HELD[key] = (st.st_dev, st.st_ino, content)
    try:
        yield
    finally:
        _HELD.pop(key, None)
        # Unlinked before it is released (a run waiting on this inode re-checks the name),
        # and only while it is still this run's: another run's lock is never removed.
        if _still_own(path, (st.st_dev, st.st_ino, content)):
            with contextlib.suppress(OSError):
                path.unlink()
        os.close(fd)


def check_held(path: Path, output: Path | str) -> None:
    """Raise `LockLost` when this process took the lock ``path`` and it is no longer the
    same file with the same content (someone deleted it; another run may hold a new one).
    A lock this process never took (a library caller without one) is not checked."""
    held = _HELD.get(str(path.absolute()))
    if held is None or _still_own(path, held):
        return
    raise LockLost(
        f"the lock file {path} of this run was deleted or replaced while it was writing "
        f"{output}, so another run may be writing there now; nothing of this run was "
        "committed and no file was renamed or removed (its temporary files and checkpoint "
        "are left as they are). Never delete the lock file of a live run: a lock left by a "
        "run that died is taken over by the next run on its own. Check what the other run "
        "wrote, then rerun (or --resume) when no other run is writing")


def lost(path: Path) -> bool:
    """Whether this process took the lock ``path`` and has lost it since."""
    held = _HELD.get(str(path.absolute()))
    return held is not None and not _still_own(path, held)


def _still_own(path: Path, held: tuple[int, int, bytes]) -> bool:
    device, inode, content = held
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        return (st.st_dev, st.st_ino) == (device, inode) and \
            os.pread(fd, len(content) + 1, 0) == content
    finally:
        os.close(fd)


def probe(paths: list[Path], output: Path, choose: str = _CHOOSE) -> None:
    """Raise `OutputLocked` when a live run holds any lock in ``paths`` (the other runs
    that could write ``output``'s files); the locks are not taken.

    Called while holding this run's own lock: of two runs that each hold one lock and
    probe the other's, at least one sees the other.
    """
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except OSError:
            continue  # no lock file there: nobody holds it
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue
            locked = _flock(fd)
            if locked is False or (locked is None and _held_by_live_process(fd)):
                raise OutputLocked(_refusal(path, output, fd, choose))
        finally:
            os.close(fd)  # releases the flock taken to test it


def _acquire(path: Path, output: Path, choose: str) -> tuple[int, bytes]:
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(50):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            locked = _flock(fd)
            if locked is False or (locked is None and _held_by_live_process(fd)):
                raise OutputLocked(_refusal(path, output, fd, choose))
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # its holder finished and removed it meanwhile: try again
                os.close(fd)
                continue
            holder = {"pid": os.getpid(), "host": socket.gethostname(),
                      "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "output": str(output)}
            content = json.dumps(holder).encode("utf-8") + b"\n"
            os.ftruncate(fd, 0)
            os.pwrite(fd, content, 0)
            return fd, content
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
    raise OutputLocked(f"cannot take the lock {path} for {output}: it keeps changing")


def _flock(fd: int) -> bool | None:
    """True: locked; False: another process holds it; None: flock is not supported."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            return None
        raise
    return True


def _holder(fd: int) -> dict[str, Any]:
    # The holder writes its name just after it locks: wait a moment for it.
    for _ in range(20):
        try:
            data = json.loads(os.pread(fd, 4096, 0) or b"null")
        except ValueError:
            data = None
        if isinstance(data, dict):
            return data
        time.sleep(0.01)
    return {}


def _held_by_live_process(fd: int) -> bool:
    """Without flock: does the lock name a live process (or one on another host)?"""
    holder = _holder(fd)
    pid = holder.get("pid")
    if not isinstance(pid, int) or holder.get("host") != socket.gethostname():
        return bool(holder)  # another host's run, which cannot be checked from here
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False  # stale: its run died
    except PermissionError:
        return True
    return pid != os.getpid()


def _refusal(path: Path, output: Path, fd: int, choose: str) -> str:
    holder = _holder(fd)
    who = (f"pid {holder.get('pid')} on {holder.get('host')}, started "
           f"{holder.get('started')}" if holder else "another process")
    return (f"{output} is being written by another run ({who}; lock file {path}); wait "
            f"for it to finish, or {choose}")
