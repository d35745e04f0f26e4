"""Hostile inputs and runs against the readers and writers (issue 24, hardening round 2).

One test per class of failure, each on a variant of the reported case, through the real
CLI on real files. Expected rows are written out by hand from the inputs below.
Invariants held (README, "Bad input"): every input row ends in the output or the rejects,
with a location; no traceback; one run per output; numbers keep their text.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.cli_helpers import ROOT, invoke_cli, read_jsonl, run_cli
from tests.fixtures_runs import long_hermes_row

SMALL = ("--summarizer", "extractive", "--target-max-tokens", "150",
         "--summary-target-tokens", "10", "--no-cache")
CONV = [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]


def _row(row_id: str, **extra: object) -> dict:
    return {"id": row_id, **extra, "conversations": CONV}


def _ok(result: subprocess.CompletedProcess, code: int) -> None:
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == code, result.stderr


def _rows(path: Path) -> list:
    if path.suffix == ".parquet":
        return pq.read_table(path).to_pylist()
    if path.suffix == ".json":
        return json.loads(path.read_text(encoding="utf-8"))
    return read_jsonl(path)


# 1. Nothing after a .json file's first array is dropped.

def test_everything_after_the_first_array_is_read_or_a_located_reject(tmp_path):
    # Two arrays (cat a.json b.json), a pretty-printed object, a garbage line in the
    # middle, then JSON lines: 6 rows kept, the garbage line rejected at its row number.
    text = (json.dumps([_row("a1"), _row("a2")]) + "\n"
            + json.dumps([_row("b1")], indent=2) + "\n"
            + json.dumps(_row("c1"), indent=2) + "\n"
            + "this is not json\n"
            + json.dumps(_row("d1")) + "\n" + json.dumps(_row("d2")) + "\n")
    src = tmp_path / "cat.json"
    src.write_text(text, encoding="utf-8")
    out = tmp_path / "out.json"
    result = invoke_cli("compress", str(src), "-o", str(out), *SMALL)
    _ok(result, 1)  # a reject: exit 1, everything else written
    assert [r["id"] for r in _rows(out)] == ["a1", "a2", "b1", "c1", "d1", "d2"]
    rejects = read_jsonl(tmp_path / "out_rejects.jsonl")
    assert [(r["row"], r["preview"]) for r in rejects] == [(4, "this is not json")]
    assert "after the JSON array" in rejects[0]["error"]


def test_an_unterminated_object_after_the_array_is_a_located_reject(tmp_path):
    src = tmp_path / "tail.json"
    src.write_text(json.dumps([_row("a")]) + '\n{"id": "b", "conversations": [',
                   encoding="utf-8")
    out = tmp_path / "out.jsonl"
    result = invoke_cli("compress", str(src), "-o", str(out), *SMALL)
    _ok(result, 1)
    assert [r["id"] for r in read_jsonl(out)] == ["a"]
    [reject] = read_jsonl(tmp_path / "out_rejects.jsonl")
    assert reject["row"] == 1 and "truncated" in reject["error"]


BOM = "\ufeff"


@pytest.mark.parametrize("source", ["json", "jsonl", "jsonl.gz"])
def test_files_saved_with_a_byte_order_mark_are_read_whole_and_written_as_json(tmp_path,
                                                                              source):
    # Windows editors start a file with a UTF-8 BOM; `cat` of two such files puts the
    # second one mid-file. Each row is read (not one reject for the whole file) and the
    # .json output is strict JSON (a BOM copied inside the array is not).
    if source == "json":
        text = (BOM + json.dumps([_row("a1"), _row("a2")]) + "\n"
                + BOM + json.dumps([_row("b1")], indent=1) + "\n")
    else:
        text = (BOM + json.dumps(_row("a1")) + "\n" + json.dumps(_row("a2")) + "\n"
                + BOM + json.dumps(_row("b1")) + "\n")
    src = tmp_path / f"bom.{source}"
    data = text.encode("utf-8")
    src.write_bytes(gzip.compress(data) if source.endswith(".gz") else data)
    out = tmp_path / "out.json"
    result = invoke_cli("compress", str(src), "-o", str(out), *SMALL)
    _ok(result, 0)
    assert [r["id"] for r in json.loads(out.read_bytes().decode("utf-8"))] == ["a1", "a2", "b1"]
    assert BOM.encode("utf-8") not in out.read_bytes()


def test_a_utf16_line_is_a_reject_never_copied_into_the_output(tmp_path):
    # UTF-16 (PowerShell's `>`) is not JSON's encoding; Python's json would guess it and
    # the row was written back byte for byte: a UTF-16 line inside a UTF-8 file.
    src = tmp_path / "mixed.jsonl"
    src.write_bytes(json.dumps(_row("u8")).encode("utf-8") + b"\n"
                    + json.dumps(_row("u16")).encode("utf-16-le") + b"\n")
    out = tmp_path / "out.jsonl"
    result = invoke_cli("compress", str(src), "-o", str(out), *SMALL)
    _ok(result, 1)
    assert [json.loads(line.decode("utf-8"))["id"] for line in out.read_bytes().splitlines()] \
        == ["u8"]
    [reject] = read_jsonl(tmp_path / "out_rejects.jsonl")
    assert reject["line"] == 2 and "invalid JSON" in reject["error"]


@pytest.mark.parametrize("damage", ["second stream appended", "garbage appended",
                                    "cut in the middle"])
def test_an_arrow_shard_with_bytes_past_its_stream_or_cut_short_is_a_located_reject(
        tmp_path, damage):
    # The JSON rule for every reader: a save_to_disk shard's bytes after its stream's end
    # (cat of two shards, or garbage) were ignored with exit 0, and a cut shard stopped the
    # whole run (exit 4, nothing written). The other shard's rows are written either way.
    import datasets

    folder = tmp_path / "ds"
    datasets.Dataset.from_list([_row(f"r{i}") for i in range(6)]).save_to_disk(
        str(folder), num_shards=2)
    other = tmp_path / "other"
    datasets.Dataset.from_list([_row("x0"), _row("x1")]).save_to_disk(str(other))
    first = folder / "data-00000-of-00002.arrow"
    data = first.read_bytes()
    if damage == "second stream appended":
        data += (other / "data-00000-of-00001.arrow").read_bytes()
    elif damage == "garbage appended":
        data += b"\x00garbage"
    else:
        data = data[:len(data) - 20]
    first.write_bytes(data)
    out = tmp_path / "out"
    result = invoke_cli("compress", str(folder), "-o", str(out), *SMALL)
    _ok(result, 1)
    assert [r["id"] for r in _rows(out / "train-00001-of-00002.parquet")] == ["r3", "r4", "r5"]
    kept = _rows(out / "train-00000-of-00002.parquet")
    [reject] = read_jsonl(tmp_path / "out_rejects.jsonl")
    assert reject["file"] == str(first) and reject["row"] == len(kept)
    if damage == "cut in the middle":
        assert "breaks off after" in reject["error"]
    else:
        assert [r["id"] for r in kept] == ["r0", "r1", "r2"]
        assert "after the end of the Arrow stream" in reject["error"]


def test_a_broken_object_among_the_json_lines_after_an_array_is_one_line_rejected(tmp_path):
    # A variant of the unterminated object at the end: here JSON lines follow it. Its
    # braces never closed (or closed over the next lines), and every line after it went
    # into its one reject; as in JSONL, only its own line is a reject.
    good = [json.dumps(_row(f"j{i}")) for i in range(3)]
    pretty = json.dumps(_row("p"), indent=2)
    for broken in ('{"id": "x", "conversations": [', '{"id": "y", "conversations": [}', "{{{{"):
        src = tmp_path / "after.json"
        src.write_text(json.dumps([_row("a")]) + "\n" + broken + "\n" + good[0] + "\n"
                       + pretty + "\n" + "\n".join(good[1:]) + "\n", encoding="utf-8")
        out = tmp_path / "out.jsonl"
        result = invoke_cli("compress", str(src), "-o", str(out), *SMALL, "--overwrite")
        _ok(result, 1)
        assert [r["id"] for r in read_jsonl(out)] == ["a", "j0", "p", "j1", "j2"]
        [reject] = read_jsonl(tmp_path / "out_rejects.jsonl")
        assert reject["row"] == 1 and reject["preview"] == broken
        assert "reading goes on at the next" in reject["error"]


# 2. One run per output at a time.

def _start(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "trajectory_compressor", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_second_run_into_the_same_output_is_refused_and_the_first_is_whole(tmp_path):
    # Variant: the two runs read different inputs (a file and a folder-free .json), so a
    # mix of the two would show in the ids.
    first = tmp_path / "first.jsonl"
    first.write_text("".join(json.dumps(_row(f"f{i}", pad="x" * 20000)) + "\n"
                             for i in range(1500)), encoding="utf-8")
    second = tmp_path / "second.json"
    second.write_text(json.dumps([_row(f"s{i}") for i in range(50)]), encoding="utf-8")
    out = tmp_path / "shared.jsonl"
    lock = tmp_path / ".shared.lock"
    proc = _start("compress", str(first), "-o", str(out), *SMALL, "--quiet")
    deadline = time.monotonic() + 120
    while not (lock.exists() and lock.stat().st_size):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    # The first run stands still (alive, holding its lock) while the second tries: the
    # overlap does not hang on the first's remaining seconds outlasting the second's cold
    # start (they ended 1.2 s apart in a run here at a load of 7).
    proc.send_signal(signal.SIGSTOP)
    try:
        loser = run_cli("compress", str(second), "-o", str(out), *SMALL, "--overwrite")
    finally:
        proc.send_signal(signal.SIGCONT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    _ok(loser, 2)
    assert f"pid {proc.pid}" in loser.stderr and str(lock.name) in loser.stderr
    ids = [r["id"] for r in read_jsonl(out)]
    assert ids == [f"f{i}" for i in range(1500)]
    metrics = json.loads((tmp_path / "shared_metrics.json").read_text())
    assert metrics["run"]["inputs"] == [str(first.resolve())]
    assert read_jsonl(tmp_path / "shared_rejects.jsonl") == []
    assert not lock.exists()


@pytest.mark.parametrize("holder", ["dead pid", "other host"])
def test_a_lock_left_by_a_dead_run_is_taken_over(tmp_path, holder):
    # Nobody holds its flock: a run that died here, or one on another host that shares
    # this folder (its pid says nothing here; the kernel's lock says it is gone).
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(_row("a")) + "\n", encoding="utf-8")
    lock = tmp_path / ".out.lock"
    lock.write_text(json.dumps({"pid": dead.pid, "host": os.uname().nodename}
                               if holder == "dead pid" else {"pid": 1, "host": "elsewhere"}),
                    encoding="utf-8")
    result = run_cli("compress", str(src), "-o", str(tmp_path / "out.jsonl"), *SMALL)
    _ok(result, 0)
    assert [r["id"] for r in read_jsonl(tmp_path / "out.jsonl")] == ["a"]
    assert not lock.exists()


def _hold_lock(lock: Path, output: Path) -> subprocess.Popen:
    """Another process holding ``lock`` as a run writing ``output`` does, until killed."""
    code = ("import sys; from pathlib import Path; "
            "from trajectory_compressor.engine.lock import output_lock\n"
            "with output_lock(Path(sys.argv[1]), Path(sys.argv[2])):\n"
            "    print('held', flush=True); sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code, str(lock), str(output)],
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


@pytest.mark.parametrize("holder", ["folder run", "file run", "folder run by a link"])
def test_a_folder_run_and_a_file_run_into_its_folder_exclude_each_other(tmp_path, holder):
    # The trial's two runs named one output; here a folder run's output folder holds the
    # file another run names (outdir/a.jsonl), each way round, and a folder named through
    # a symbolic link. Both would write outdir/.a.jsonl.partial: the second refuses.
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "a.jsonl").write_text(json.dumps(_row("d1")) + "\n", encoding="utf-8")
    single = tmp_path / "b.jsonl"
    single.write_text(json.dumps(_row("b1")) + "\n", encoding="utf-8")
    outdir = tmp_path / "outdir"
    outdir.mkdir()
    (tmp_path / "outlink").symlink_to(outdir)
    if holder == "folder run":
        lock, args = tmp_path / ".outdir.lock", (str(single), "-o", str(outdir / "a.jsonl"))
    elif holder == "file run":
        lock, args = outdir / ".a.lock", (str(folder), "-o", str(outdir))
    else:
        lock, args = tmp_path / ".outdir.lock", (str(folder), "-o", str(tmp_path / "outlink"))
    held = _hold_lock(lock, outdir)
    try:
        result = invoke_cli("compress", *args, *SMALL, "--overwrite")
    finally:
        held.kill()
        held.wait()
    _ok(result, 2)
    assert f"pid {held.pid}" in result.stderr and lock.name in result.stderr
    assert sorted(p.name for p in outdir.iterdir()) == [lock.name] * (lock.parent == outdir)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["d", "b.jsonl", "outdir", "outlink"] + [lock.name] * (lock.parent == tmp_path))


def test_a_second_batch_export_into_one_folder_is_refused_and_so_is_its_finish(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(long_hermes_row(f"r{i}")) + "\n" for i in range(3)),
                   encoding="utf-8")
    folder = tmp_path / "batch"
    folder.mkdir()
    batch = ("--summarizer", "batch", "--model", "m", "--batch-dir", str(folder),
             "--target-max-tokens", "150", "--summary-target-tokens", "10")
    held = _hold_lock(folder / ".batch.lock", folder / "manifest.json")
    try:
        export = invoke_cli("compress", str(src), *batch)
        results = tmp_path / "results.jsonl"
        results.write_text("", encoding="utf-8")
        finish = invoke_cli("compress", str(src), *batch, "--batch-results", str(results))
    finally:
        held.kill()
        held.wait()
    for result in (export, finish):
        _ok(result, 2)
        assert f"pid {held.pid}" in result.stderr and "--batch-dir" in result.stderr
    assert sorted(p.name for p in folder.iterdir()) == [".batch.lock"]
    # Once the other export is gone, the folder is this one's.
    _ok(invoke_cli("compress", str(src), *batch), 0)
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json",
                                                        "requests-00001.jsonl"]


# 3. A deeply nested row is one reject, on every container.

@pytest.mark.parametrize("container", ["jsonl", "json", "parquet"])
def test_deeply_nested_rows_are_located_rejects_and_the_run_goes_on(tmp_path, container):
    # Variant: nested objects (not arrays) 2,000 deep in a .json array input, and arrays
    # 100,000 deep; a row 200 deep (inside the 256 limit) is kept.
    def nested(depth: int) -> str:
        return '{"a":' * depth + "1" + "}" * depth

    elements = [json.dumps(_row("ok1")),
                f'{{"id":"deep","conversations":{json.dumps(CONV)},"x":{nested(2000)}}}',
                '{{"id":"deeper","conversations":{},"x":{}}}'.format(json.dumps(CONV),
                                                               "[" * 100000 + "]" * 100000),
                f'{{"id":"fine","conversations":{json.dumps(CONV)},"x":{nested(20)}}}',
                json.dumps(_row("ok2"))]
    src = tmp_path / "deep.json"
    src.write_text("[" + ",\n".join(elements) + "]", encoding="utf-8")
    out = tmp_path / f"out.{container}"
    result = run_cli("compress", str(src), "-o", str(out), *SMALL)
    _ok(result, 1)
    assert [r["id"] for r in _rows(out)] == ["ok1", "fine", "ok2"]
    rejects = read_jsonl(tmp_path / "out_rejects.jsonl")  # one sidecar rule (issue 40)
    assert [r["row"] for r in rejects] == [1, 2]
    assert all("levels deep" in r["error"] for r in rejects)


def test_a_row_within_the_depth_limit_but_past_parquets_is_a_parquet_reject(tmp_path):
    deep = "[" * 200 + "]" * 200  # JSON holds it; a Parquet schema 200 lists deep cannot
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(_row("a")) + "\n"
                   + f'{{"id":"d","conversations":{json.dumps(CONV)},"x":{deep}}}\n'
                   + json.dumps(_row("b")) + "\n", encoding="utf-8")
    for container, ids in (("jsonl", ["a", "d", "b"]), ("parquet", ["a", "b"])):
        out = tmp_path / f"out.{container}"
        result = run_cli("compress", str(src), "-o", str(out), *SMALL, "--overwrite")
        _ok(result, 0 if container == "jsonl" else 1)
        assert [r["id"] for r in _rows(out)] == ids
    [reject] = read_jsonl(tmp_path / "out_rejects.jsonl")
    assert reject["line"] == 2 and "Parquet" in reject["error"]


# 4. One odd row never decides a file's dialect.

def test_a_hermes_row_with_a_tools_column_keeps_the_file_hermes(tmp_path):
    # Variant: the odd Hermes row has a system column (not tools) and comes first; an
    # OpenAI row and a LLaMA-Factory row among them are rejected, each with its reason.
    rows = [long_hermes_row("h0", system="be brief"), long_hermes_row("h1"), long_hermes_row("h2"),
            {"id": "o", "messages": [{"role": "user", "content": "hi"}]},
            {"id": "v", "conversations": [{"from": "user", "value": "q"},
                                          {"from": "assistant", "value": "a"}]}]
    src = tmp_path / "mixed.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "out.jsonl"
    result = invoke_cli("compress", str(src), "-o", str(out), *SMALL)
    _ok(result, 1)
    written = read_jsonl(out)
    assert [r["id"] for r in written] == ["h0", "h1", "h2"]
    for row in written:
        assert row["compression_metrics"]["was_compressed"] is True
        # Hermes' summary is its own human turn (README, Formats), never inside a tool turn.
        summaries = [t for t in row["conversations"] if "[CONTEXT SUMMARY]" in t["value"]]
        assert len(summaries) == 1 and summaries[0]["from"] == "human"
        assert summaries[0]["value"].startswith("[CONTEXT SUMMARY]:")
    rejects = read_jsonl(tmp_path / "out_rejects.jsonl")
    assert [r["line"] for r in rejects] == [4, 5]
    assert "OpenAI messages" in rejects[0]["error"]
    assert "LLaMA-Factory" in rejects[1]["error"]


def test_an_empty_messages_list_among_sharegpt_rows_rejects_only_that_row(tmp_path):
    rows = [_row("a"), {"id": "m", "messages": []}, _row("b"), _row("c")]
    src = tmp_path / "in.json"
    src.write_text(json.dumps(rows), encoding="utf-8")
    out = tmp_path / "out.parquet"
    result = invoke_cli("compress", str(src), "-o", str(out), *SMALL)
    _ok(result, 1)
    assert [r["id"] for r in _rows(out)] == ["a", "b", "c"]
    [reject] = read_jsonl(tmp_path / "out_rejects.jsonl")
    assert reject["row"] == 1


def test_an_openai_file_with_one_sharegpt_row_stays_openai(tmp_path):
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    rows = [_row("s0"), {"id": "o1", "messages": msgs}, {"id": "o2", "messages": msgs}]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "out.jsonl"
    result = invoke_cli("compress", str(src), "-o", str(out), *SMALL)
    _ok(result, 1)
    assert [r["id"] for r in read_jsonl(out)] == ["o1", "o2"]
    [reject] = read_jsonl(tmp_path / "out_rejects.jsonl")
    assert reject["line"] == 1 and "ShareGPT" in reject["error"]


def test_rows_of_no_dialect_before_the_good_ones_leave_the_vote_to_the_good_ones(tmp_path):
    # 40 elements that are no conversation (a row without turns, null, a string, a number)
    # filled the first 32 rows: nobody voted, the default (Hermes) won, and its row check
    # rejected every OpenAI row after them "as detected by the majority".
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    noise = [{"id": "n"}, None, "text", 7] * 10
    rows = [*noise, *({"id": f"o{i}", "messages": msgs} for i in range(3)), _row("h")]
    src = tmp_path / "late.json"
    src.write_text(json.dumps(rows), encoding="utf-8")
    out = tmp_path / "out.jsonl"
    result = invoke_cli("compress", str(src), "-o", str(out), *SMALL)
    _ok(result, 1)
    assert [r["id"] for r in read_jsonl(out)] == ["o0", "o1", "o2"]
    rejects = read_jsonl(tmp_path / "out_rejects.jsonl")
    assert [r["row"] for r in rejects] == [*range(40), 43]
    assert "detected as OpenAI messages" in rejects[-1]["error"]


def _long_row(dialect: str, row_id: str) -> dict:
    """`long_hermes_row`'s length (over the 150-token target) in another dialect:
    a system turn, then user and assistant turns in turn."""
    texts = [f"turn {i} " + " ".join(f"w{i}" for i in range(5)) for i in range(14)]
    if dialect == "openai":
        return {"id": row_id, "messages": [{"role": "system", "content": texts[0]}] + [
            {"role": "user" if i % 2 else "assistant", "content": t}
            for i, t in enumerate(texts[1:], start=1)]}
    return {"id": row_id, "system": texts[0], "tools": "[]", "conversations": [
        {"from": "user" if i % 2 else "assistant", "value": t}
        for i, t in enumerate(texts[1:], start=1)]}


@pytest.mark.parametrize("container", ["parquet", "save_to_disk"])
@pytest.mark.parametrize("dialect", ["openai", "sharegpt-variant"])
def test_a_parquet_or_arrow_file_of_another_dialect_is_read_by_its_rows(tmp_path, dialect,
                                                                        container):
    # The container decided the dialect: a Parquet file (or save_to_disk shard) without a
    # Hermes `conversations` column of from/value structs was rejected whole, so the
    # tool's own OpenAI Parquet output could not be compressed again.
    import datasets

    rows = [_long_row(dialect, f"r{i}") for i in range(3)]
    src = tmp_path / ("in.parquet" if container == "parquet" else "in")
    if container == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), src)
    else:
        datasets.Dataset.from_list(rows).save_to_disk(str(src))
    out = tmp_path / ("out.parquet" if container == "parquet" else "out")
    result = invoke_cli("compress", str(src), "-o", str(out), *SMALL)
    _ok(result, 0)
    written = _rows(out if container == "parquet" else out / "train-00000-of-00001.parquet")
    assert [r["id"] for r in written] == ["r0", "r1", "r2"]
    for row in written:
        assert row["compression_metrics"]["was_compressed"] is True
        if dialect == "openai":  # the summary is a user message (README, Formats)
            [summary] = [m for m in row["messages"] if "[CONTEXT SUMMARY]" in m["content"]]
            assert summary["role"] == "user"
        else:  # appended to the user-side turn before the summarized pairs
            [summary] = [t for t in row["conversations"] if "[CONTEXT SUMMARY]" in t["value"]]
            assert summary["from"] == "user" and "\n\n[CONTEXT SUMMARY]: " in summary["value"]


# 6. Exact numbers.

NUMBERS = '"big":-1E+400,"tiny":2.5e-999,"pad":1.50,"int":123456789012345678901234567890'


@pytest.mark.parametrize("container", ["jsonl", "json"])
def test_numbers_keep_their_text_unchanged_and_stay_json_when_compressed(tmp_path,
                                                                         container):
    short = f'{{"id":"s",{NUMBERS},"conversations":{json.dumps(CONV)}}}'
    long_row = long_hermes_row("l")
    long_text = '{{"id":"l",{},"conversations":{}}}'.format(NUMBERS,
                                                       json.dumps(long_row["conversations"]))
    src = tmp_path / "in.json"
    src.write_text("[" + short + ",\n" + long_text + "]", encoding="utf-8")
    out = tmp_path / f"out.{container}"
    result = invoke_cli("compress", str(src), "-o", str(out), *SMALL)
    _ok(result, 0)
    text = out.read_text(encoding="utf-8")
    assert short in text  # the unchanged row, byte for byte
    # Every line is strict JSON (no Infinity/NaN), and the compressed row says -1E+400.
    strict = json.loads(text if container == "json" else "[" + ",".join(
        text.splitlines()) + "]", parse_constant=lambda name: pytest.fail(name))
    assert strict[1]["compression_metrics"]["was_compressed"] is True
    assert '"big":-1E+400' in text.splitlines()[-2 if container == "json" else -1]
    assert '"tiny":2.5e-999' in text.splitlines()[-2 if container == "json" else -1]


def test_an_out_of_range_number_is_a_parquet_reject(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(_row("a", v=1.0)) + "\n"
                   + f'{{"id":"b","v":1e400,"conversations":{json.dumps(CONV)}}}\n'
                   + json.dumps(_row("c", v=2.0)) + "\n", encoding="utf-8")
    out = tmp_path / "out.parquet"
    result = invoke_cli("compress", str(src), "-o", str(out), *SMALL)
    _ok(result, 1)
    assert [r["id"] for r in _rows(out)] == ["a", "c"]
    [reject] = read_jsonl(tmp_path / "out_rejects.jsonl")
    assert reject["line"] == 2 and "1e400" in reject["error"]


def test_an_integer_past_64_bits_is_a_parquet_reject_that_says_so(tmp_path):
    # JSON integers have no size; Parquet's have 64 bits. Variant of 1e400: a .json input,
    # the integer nested in a turn.
    big = 2**64
    rows = [_row("a"), {"id": "b", "conversations": [{"from": "human", "value": "q",
                                                      "n": big}, CONV[1]]}, _row("c")]
    src = tmp_path / "in.json"
    src.write_text(json.dumps(rows), encoding="utf-8")
    for container, ids in (("jsonl", ["a", "b", "c"]), ("parquet", ["a", "c"])):
        out = tmp_path / f"out.{container}"
        result = invoke_cli("compress", str(src), "-o", str(out), *SMALL, "--overwrite")
        _ok(result, 1 if container == "parquet" else 0)
        assert [r["id"] for r in _rows(out)] == ids
    assert _rows(tmp_path / "out.jsonl")[1]["conversations"][0]["n"] == big
    [reject] = read_jsonl(tmp_path / "out_rejects.jsonl")  # the Parquet run's
    assert reject["row"] == 1 and f"the integer {big} is out of the range" in reject["error"]


# 7. A Parquet output whose column changes type at one row.

def test_a_nested_field_changing_type_in_a_parquet_output_rejects_that_row(tmp_path):
    # Variant: the field is nested (meta.score), int in the rows before and after it.
    rows = [_row(f"r{i}", meta={"score": i}) for i in range(5)]
    rows.insert(3, _row("odd", meta={"score": "high"}))
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "out.parquet"
    result = invoke_cli("compress", str(src), "-o", str(out), *SMALL)
    _ok(result, 1)
    table = _rows(out)
    assert [r["id"] for r in table] == ["r0", "r1", "r2", "r3", "r4"]
    assert [r["meta"]["score"] for r in table] == [0, 1, 2, 3, 4]
    [reject] = read_jsonl(tmp_path / "out_rejects.jsonl")
    assert reject["line"] == 4 and "another type" in reject["error"]
