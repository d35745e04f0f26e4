"""Deleting a live run's lock never corrupts its output (issue 36, item 2).

The trial deleted the lock of a running `compress`; a second run got in, both wrote one
fixed temporary file, and the committed output had 32 lines for 20 rows and the other
run's metrics. Now every run writes temporary files of its own (a new inode, never one
another run has open) and checks at each checkpoint and at its commit that the lock is
still its own; one that lost it exits 2 without renaming or removing anything.

Real processes: run A is slowed by the fake LLM server (its latency, or a reply held
back), its lock is deleted at one stage or another, run B (another input, so a mix would
show in the ids) runs into the same output. The output must then be exactly B's complete
output, with B's metrics.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.cli_helpers import ROOT, read_jsonl, run_cli
from tests.fake_llm_server import FakeLLMServer
from tests.fixtures_runs import long_hermes_row

KEY = "sk-lock-9f3c1e7a5b2d4c6e8a0bSECRET"
KEY_ENV = "TC_TEST_LOCK_KEY"
SIZES = ("--target-max-tokens", "150", "--summary-target-tokens", "10", "--no-cache")
SHORT = [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]
NEVER = "Never delete the lock file of a live run"


class HeldServer(FakeLLMServer):
    """Holds every chat request (counted as it arrives) until ``release`` is set."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.release = threading.Event()

    async def _answer(self, request):
        held_until = time.monotonic() + 300  # bounded: a failed test never sets it
        while not self.release.is_set() and time.monotonic() < held_until:
            await asyncio.sleep(0.01)
        return await super()._answer(request)


def _start_a(src: Path, out: Path, url: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), KEY_ENV: KEY}
    return subprocess.Popen(
        [sys.executable, "-m", "trajectory_compressor", "compress", str(src), "-o", str(out),
         "--base-url", url, "--model", "fake-model", "--api-key-env", KEY_ENV,
         "--max-concurrent-requests", "1", *SIZES, "--quiet"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait(proc: subprocess.Popen, ready, limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while not ready():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the run never reached the stage"
        time.sleep(0.02)


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _b_rows() -> list[dict]:
    # B's rows: some to compress, some short, one bad line (so B has rejects too).
    return [long_hermes_row(f"b{i}") if i % 2 else {"id": f"b{i}", "conversations": SHORT}
            for i in range(25)]


def _run_b(src: Path, out: Path) -> subprocess.CompletedProcess:
    return run_cli("compress", str(src), "-o", str(out), "--summarizer", "extractive",
                   *SIZES, "--overwrite", "--quiet")


def _assert_only_b(tmp_path: Path, out: Path, b_src: Path) -> None:
    """The output and every sidecar are B's complete, whole output: byte for byte what
    B writes alone into a fresh folder (the oracle), with B's metrics."""
    if out.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(out).to_pylist()
    else:
        lines = out.read_bytes().split(b"\n")
        assert lines[-1] == b""
        rows = [json.loads(line) for line in lines[:-1]]  # a torn line would not parse
    assert [r["id"] for r in rows] == [f"b{i}" for i in range(25)]
    alone = tmp_path / "alone"
    alone.mkdir()
    assert _run_b(b_src, alone / out.name).returncode == 1
    for name in (out.name, "out_over_limit.jsonl", "out_rejects.jsonl"):
        assert (tmp_path / name).read_bytes() == (alone / name).read_bytes(), name
    metrics = json.loads((tmp_path / "out_metrics.json").read_text())
    assert metrics["run"]["inputs"] == [str(b_src.resolve())]
    assert metrics["summary"]["total_trajectories"] == 25
    expected = json.loads((alone / "out_metrics.json").read_text())
    assert metrics["summary"] == expected["summary"]
    rejects = read_jsonl(tmp_path / "out_rejects.jsonl")
    assert [(Path(r["file"]), r["line"]) for r in rejects] == [(b_src, 26)]
    # Nothing of either run is left half-done: no lock, checkpoint or temporary file.
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(["a.jsonl", "b.jsonl", "alone", out.name, "out_metrics.json",
                           "out_over_limit.jsonl", "out_rejects.jsonl"]), left


def _b_input(tmp_path: Path) -> Path:
    src = _write(tmp_path / "b.jsonl", _b_rows())
    with src.open("a", encoding="utf-8") as f:
        f.write("{not json\n")
    return src


def test_a_run_whose_lock_was_deleted_mid_run_leaves_the_output_to_the_second(tmp_path):
    # Stage: A is half way through its rows (every row waits for its summary) when its
    # lock goes; A sees it at its next row (within `writer.LOCK_CHECK_SECONDS`) and stops
    # without touching a file by name; B runs whole and commits.
    a_src = _write(tmp_path / "a.jsonl", [long_hermes_row(f"a{i}") for i in range(40)])
    b_src = _b_input(tmp_path)
    out = tmp_path / "out.jsonl"
    lock = tmp_path / ".out.lock"
    with FakeLLMServer(api_key=KEY, latency=0.3).in_thread() as server:
        a = _start_a(a_src, out, server.url)
        _wait(a, lambda: server.requests >= 3)
        lock.unlink()
        b = _run_b(b_src, out)
        assert b.returncode == 1, b.stderr  # its one bad line
        _, a_err = a.communicate(timeout=300)
    assert a.returncode == 2, a_err
    assert NEVER in a_err and str(lock) in a_err and "Traceback" not in a_err
    _assert_only_b(tmp_path, out, b_src)


@pytest.mark.parametrize("container", ["jsonl", "parquet"])
def test_a_lock_deleted_just_before_the_commit_leaves_the_output_to_the_second(tmp_path,
                                                                            container):
    # Stage: every row of A but its last is written, with its rejects entries and its
    # over-limit file open; A waits for the last row's summary when its lock goes. B
    # starts after, commits first; A gets its summary and refuses before it writes the
    # row (the lock is checked before a row after a wait). Variant: a Parquet output,
    # whose parts folder has fixed names.
    rows: list[dict] = [{"id": f"a{i}", "conversations": SHORT} for i in range(30)]
    a_src = _write(tmp_path / "a.jsonl", [*rows, long_hermes_row("a-last")])
    with a_src.open("r+", encoding="utf-8") as f:  # two bad lines among A's rows
        text = f.read().splitlines()
        text[3] = text[7] = "[broken"
        f.seek(0)
        f.write("\n".join(text) + "\n")
        f.truncate()
    b_src = _b_input(tmp_path)
    out = tmp_path / f"out.{container}"
    lock = tmp_path / ".out.lock"
    # A's summary is held until B has committed (a fixed latency would race B's run,
    # which takes a cold start and more on a loaded machine).
    with HeldServer(api_key=KEY).in_thread() as server:
        a = _start_a(a_src, out, server.url)
        _wait(a, lambda: server.requests >= 1)
        time.sleep(0.5)
        lock.unlink()
        b = _run_b(b_src, out)
        assert b.returncode == 1, b.stderr
        assert a.poll() is None, "A ended before B committed: the stage was missed"
        server.release.set()
        _, a_err = a.communicate(timeout=300)
    assert a.returncode == 2, a_err
    assert NEVER in a_err and "Traceback" not in a_err
    _assert_only_b(tmp_path, out, b_src)


@pytest.mark.parametrize("second", ["none", "after"])
def test_a_run_that_lost_its_lock_commits_nothing_and_removes_nothing(tmp_path, second):
    # Variant without a run in between: nobody took the output, and still A commits
    # nothing (it cannot know); its files stay for --resume. With "after", B starts once
    # A has refused, and writes its output whole over A's leftovers.
    a_src = _write(tmp_path / "a.jsonl", [long_hermes_row(f"a{i}") for i in range(6)])
    out = tmp_path / "out.jsonl"
    lock = tmp_path / ".out.lock"
    with FakeLLMServer(api_key=KEY, latency=0.5).in_thread() as server:
        a = _start_a(a_src, out, server.url)
        _wait(a, lambda: server.requests >= 1)
        lock.unlink()
        _, a_err = a.communicate(timeout=300)
    assert a.returncode == 2, a_err
    assert NEVER in a_err
    assert not out.exists() and not (tmp_path / "out_metrics.json").exists()
    assert (tmp_path / ".out.jsonl.partial").exists()  # kept, never removed by name
    if second == "after":
        b_src = _b_input(tmp_path)
        b = _run_b(b_src, out)
        assert b.returncode == 1, b.stderr
        _assert_only_b(tmp_path, out, b_src)


# The pieces, in this process.

def test_a_lock_replaced_by_another_run_is_lost_and_never_removed(tmp_path):
    from trajectory_compressor.engine.lock import LockLost, check_held, lost, output_lock

    lock, out = tmp_path / ".out.lock", tmp_path / "out.jsonl"
    with output_lock(lock, out):
        check_held(lock, out)  # its own: no error
        assert not lost(lock)
        content = lock.read_bytes()
        lock.unlink()
        lock.write_bytes(content)  # same content, another inode: not its own either
        assert lost(lock)
        with pytest.raises(LockLost, match=NEVER):
            check_held(lock, out)
        lock.write_bytes(b'{"pid": 1, "host": "another run"}\n')
    # Leaving the block removed nothing: the file there is not this run's.
    assert lock.read_bytes() == b'{"pid": 1, "host": "another run"}\n'
    check_held(lock, out)  # a lock this process does not hold is not checked


def test_a_new_temporary_file_never_writes_into_one_another_run_has_open(tmp_path):
    from trajectory_compressor.formats.base import AtomicFile, temp_path, write_atomic

    final = tmp_path / "out.jsonl"
    first = AtomicFile(final)
    first.write(b'{"run": "A"}\n')
    first.flush()
    second = AtomicFile(final)  # the same name: a new file, A's is unlinked, not truncated
    second.write(b'{"run": "B"}\n')
    first.write(b'{"run": "A", "late": true}\n')
    first.flush()
    second.commit()
    assert final.read_bytes() == b'{"run": "B"}\n'
    assert not temp_path(final).exists()
    first.close_keep()
    # Files written in one go take a name of their own: none is left behind.
    write_atomic(tmp_path / "m.json", b"{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json", "out.jsonl"]
