"""One run per output (SPEC §7, `engine/lock.py`), in this process (issue 26, item 5: the
refusals ran only in tests that start a second process, so the mutation runner's map had
no test for them).

``flock`` locks belong to an open file description, not to a process: this process opening
the lock file a second time is refused by its own first lock as another process would be
(flock(2): "these descriptors are treated independently by flock()"). The lock module's
docstring gives the rest: the holder's pid and host are in the file; where ``flock`` does
not work (some network file systems), a lock naming a live process on this host, or a run
on another host, holds, and one naming a dead pid is stale and taken over.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import socket
import time
from pathlib import Path

import pytest

from trajectory_compressor.engine import lock as lock_module
from trajectory_compressor.engine.lock import OutputLocked, output_lock, probe

HOST = socket.gethostname()
# Above the largest pid_max Linux allows (2**22): no process has it, here or anywhere.
DEAD_PID = 2**22 + 1
STARTED = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4}"


def refusal(output: Path, path: Path, who: str) -> str:
    """The refusal of SPEC §7 as a pattern: the output, the holder, the lock file, what to do."""
    return (f"^{re.escape(str(output))} is being written by another run \\({who}; lock file "
            f"{re.escape(str(path))}\\); wait for it to finish, or choose another output "
            f"\\(-o\\)$")


def holder_file(path: Path, **holder: object) -> Path:
    path.write_text(json.dumps(holder) + "\n", encoding="utf-8")
    return path


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def no_flock(monkeypatch):
    """A file system where ``flock`` is not supported (ENOLCK, as some NFS mounts say)."""
    def unsupported(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))
    monkeypatch.setattr(lock_module.fcntl, "flock", unsupported)


def test_a_second_run_into_a_held_output_is_refused_naming_the_holder(tmp_path):
    path, output = tmp_path / ".out.lock", tmp_path / "out.jsonl"
    with output_lock(path, output):
        written = json.loads(path.read_text(encoding="utf-8"))
        assert written["pid"] == os.getpid() and written["host"] == HOST
        assert written["output"] == str(output)
        with pytest.raises(OutputLocked) as info, output_lock(path, output):
            pytest.fail("two runs held one output")
        who = f"pid {os.getpid()} on {re.escape(HOST)}, started {STARTED}"
        assert re.match(refusal(output, path, who), str(info.value)), str(info.value)
        # The refused attempt leaves the holder's lock as it was.
        assert json.loads(path.read_text(encoding="utf-8")) == written
    assert not path.exists()
    with output_lock(path, output):  # released: the next run takes it
        assert path.exists()


def test_probe_refuses_a_held_neighbour_and_passes_free_or_missing_ones(tmp_path):
    output = tmp_path / "out.jsonl"
    held, free, missing = tmp_path / ".held.lock", tmp_path / ".free.lock", tmp_path / ".no.lock"
    # A free lock file (nobody holds its flock) naming a live process of this host: the
    # kernel's lock says its run is gone (a killed run's file is stale by construction).
    holder_file(free, pid=1, host=HOST, started="2026-01-01T00:00:00+0000")
    (tmp_path / ".dir.lock").mkdir()  # not a regular file: nobody's lock
    before = open_fds()
    probe([free, missing, tmp_path / ".dir.lock"], output)
    with output_lock(held, tmp_path / "other.jsonl"):
        with pytest.raises(OutputLocked) as info:
            probe([free, held], output)
        assert re.match(refusal(output, held, f"pid {os.getpid()} on {re.escape(HOST)}, "
                                f"started {STARTED}"), str(info.value)), str(info.value)
        assert held.exists()  # probing takes no lock and removes nothing
    assert open_fds() == before
    probe([free, held, missing], output)  # released


def test_a_lock_file_replaced_while_taking_it_is_taken_again(tmp_path, monkeypatch):
    # The holder finished and removed its file between this run's open and its flock:
    # the run must lock the file now at the name, not the removed one.
    path, output = tmp_path / ".out.lock", tmp_path / "out.jsonl"
    real_flock = lock_module._flock
    calls = []

    def holder_finishes_first(fd: int) -> bool | None:
        calls.append(fd)
        if len(calls) == 1:
            path.unlink()
        return real_flock(fd)

    monkeypatch.setattr(lock_module, "_flock", holder_finishes_first)
    before = open_fds()
    with output_lock(path, output):
        assert len(calls) == 2
        assert json.loads(path.read_text(encoding="utf-8"))["pid"] == os.getpid()
        assert open_fds() == before + 1  # the lock's own descriptor only
        monkeypatch.setattr(lock_module, "_flock", real_flock)
        with pytest.raises(OutputLocked):  # and it is the lock at the name
            probe([path], output)
    assert open_fds() == before
    assert not path.exists()


# -- where flock does not work: the pid and host decide ---------------------------------------


@pytest.mark.parametrize("holder, who", [
    ({"pid": 1, "host": HOST, "started": "2026-01-02T03:04:05+0000"},
     f"pid 1 on {HOST}, started 2026-01-02T03:04:05+0000"),
    ({"pid": DEAD_PID, "host": "elsewhere", "started": "2026-01-02T03:04:05+0000"},
     f"pid {DEAD_PID} on elsewhere, started 2026-01-02T03:04:05+0000"),
])
def test_without_flock_a_live_holder_or_another_hosts_run_keeps_the_lock(tmp_path, no_flock,
                                                                          holder, who):
    path, output = tmp_path / ".out.lock", tmp_path / "out.jsonl"
    holder_file(path, **holder)
    before = open_fds()
    with pytest.raises(OutputLocked) as info, output_lock(path, output):
        pytest.fail("a live run's lock was taken")
    assert re.match(refusal(output, path, re.escape(who)), str(info.value)), str(info.value)
    with pytest.raises(OutputLocked):
        probe([path], output)
    assert json.loads(path.read_text(encoding="utf-8")) == holder
    assert open_fds() == before


@pytest.mark.parametrize("holder", [
    {"pid": DEAD_PID, "host": HOST},  # its run died
    {"pid": os.getpid(), "host": HOST},  # its pid is now this run's (a reused pid)
    {},  # nobody named
])
def test_without_flock_a_stale_lock_is_taken_over(tmp_path, no_flock, holder):
    path, output = tmp_path / ".out.lock", tmp_path / "out.jsonl"
    holder_file(path, **holder)
    probe([path], output)
    with output_lock(path, output):
        written = json.loads(path.read_text(encoding="utf-8"))
        assert (written["pid"], written["host"], written["output"]) == (
            os.getpid(), HOST, str(output))
    assert not path.exists()


def test_without_flock_a_process_this_user_may_not_signal_is_alive(tmp_path):
    # kill(pid, 0) fails with EPERM for a live process of another user: it holds the lock.
    # As root every process may be signalled, so the check runs under another user id
    # (the real one too: kill(2) compares it; the saved one stays root to come back).
    path = holder_file(tmp_path / ".out.lock", pid=1, host=HOST)
    fd = os.open(path, os.O_RDONLY)
    try:
        with contextlib.ExitStack() as stack:
            if os.geteuid() == 0:
                os.setresuid(65534, 65534, 0)
                stack.callback(os.setresuid, 0, 0, 0)
            with pytest.raises(PermissionError):
                os.kill(1, 0)
            assert lock_module._held_by_live_process(fd) is True
    finally:
        os.close(fd)


def test_a_holder_that_has_not_written_its_name_yet_is_waited_for(tmp_path, no_flock):
    # An empty lock file is read again for a moment (its holder writes just after it
    # locks); one still empty names nobody: without flock it is stale and taken over.
    path, output = tmp_path / ".out.lock", tmp_path / "out.jsonl"
    path.write_bytes(b"")
    start = time.monotonic()
    with output_lock(path, output):
        assert json.loads(path.read_text(encoding="utf-8"))["pid"] == os.getpid()
    assert time.monotonic() - start >= 0.1


def test_the_lock_file_is_the_hidden_stem_lock_beside_the_outputs(tmp_path):
    # Module docstring: the lock is ``.<output stem>.lock`` beside the sidecars.
    assert lock_module.lock_path(tmp_path / "runs" / "data_compressed") == (
        tmp_path / "runs" / ".data_compressed.lock")


def test_the_lock_is_taken_in_a_folder_that_does_not_exist_yet(tmp_path):
    path = tmp_path / "new" / "deeper" / ".out.lock"
    with output_lock(path, tmp_path / "new" / "deeper" / "out.jsonl"):
        assert json.loads(path.read_text(encoding="utf-8"))["pid"] == os.getpid()
        # A data file: nobody's program, readable by the runs that check it.
        assert os.stat(path).st_mode & 0o111 == 0
        assert os.stat(path).st_mode & 0o400
    assert not path.exists() and path.parent.is_dir()


def test_a_lock_file_that_keeps_changing_is_refused_after_a_while(tmp_path, monkeypatch):
    path, output = tmp_path / ".out.lock", tmp_path / "out.jsonl"
    real_flock = lock_module._flock

    def always_replaced(fd: int) -> bool | None:
        path.unlink()
        return real_flock(fd)

    monkeypatch.setattr(lock_module, "_flock", always_replaced)
    before = open_fds()
    with pytest.raises(OutputLocked) as info, output_lock(path, output):
        pytest.fail("a lock that was never held was taken")
    assert str(info.value) == f"cannot take the lock {path} for {output}: it keeps changing"
    assert open_fds() == before


def test_a_stale_holders_longer_name_is_replaced_whole(tmp_path):
    # The kernel's lock is free: the file is a dead run's; this run's name replaces it.
    path, output = tmp_path / ".out.lock", tmp_path / "o.jsonl"
    holder_file(path, pid=DEAD_PID, host=HOST, output="x" * 500, started="long ago")
    with output_lock(path, output):
        written = json.loads(path.read_text(encoding="utf-8"))
        assert set(written) == {"pid", "host", "started", "output"}
        assert (written["pid"], written["output"]) == (os.getpid(), str(output))
        assert re.fullmatch(STARTED, written["started"])


def test_without_flock_a_lock_file_of_garbage_names_nobody(tmp_path, no_flock):
    path, output = tmp_path / ".out.lock", tmp_path / "out.jsonl"
    path.write_bytes(b"\x00garbage{")
    with output_lock(path, output):
        assert json.loads(path.read_text(encoding="utf-8"))["pid"] == os.getpid()


def test_a_directory_named_like_a_lock_is_nobodys_lock_even_when_flocked(tmp_path):
    import fcntl

    folder = tmp_path / ".out.lock"
    folder.mkdir()
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # some other tool's lock on a folder
        probe([folder], tmp_path / "out.jsonl")
    finally:
        os.close(fd)


def test_an_io_error_of_flock_is_not_taken_for_a_lock(tmp_path, monkeypatch):
    # Only the errors that say "flock is not supported here" fall back on the pid and host.
    def broken(fd: int, operation: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(lock_module.fcntl, "flock", broken)
    path = tmp_path / ".out.lock"
    with pytest.raises(OSError) as info, output_lock(path, tmp_path / "out.jsonl"):
        pytest.fail("locked without a lock")
    assert info.value.errno == errno.EIO and not isinstance(info.value, OutputLocked)
