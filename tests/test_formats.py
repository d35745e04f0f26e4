"""Every input and output format end to end: the CLI as a subprocess on real files."""

from __future__ import annotations

import fcntl
import gzip
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.cli_helpers import ROOT, read_jsonl, run_cli
from tests.datagen import rows, write_jsonl, write_parquet

# Small generated rows: one in three is over this target and gets a summary.
SMALL = ("--summarizer", "extractive", "--target-max-tokens", "500",
         "--summary-target-tokens", "60")


def _ids(rows_out: list) -> list:
    return [r["id"] for r in rows_out]


def _present(turns: list) -> list:
    """Turns without null keys (Parquet turns carry every key of the turn struct)."""
    return [{k: v for k, v in t.items() if v is not None} for t in turns]


def _check_rows(rows_in: list, rows_out: list) -> None:
    """Same rows, same order, other fields kept, metrics on the rows over the target."""
    assert _ids(rows_out) == _ids(rows_in)
    compressed = 0
    for before, after in zip(rows_in, rows_out, strict=True):
        assert after["reward"] == before["reward"] and after["metadata"] == before["metadata"]
        metrics = after.get("compression_metrics")
        if metrics is None:
            assert _present(after["conversations"]) == _present(before["conversations"])
            continue
        compressed += metrics["was_compressed"]
        if metrics["was_compressed"]:
            assert any(t["value"].startswith("[CONTEXT SUMMARY]:")
                       for t in after["conversations"])
    assert compressed > 0


def test_jsonl_gz_round_trip(tmp_path):
    src = tmp_path / "in.jsonl.gz"
    with gzip.open(src, "wt", encoding="utf-8") as f:
        for row in rows(60):
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    proc = run_cli("compress", str(src), *SMALL, "--quiet")
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "in_compressed.jsonl.gz"
    with gzip.open(out, "rt", encoding="utf-8") as f:
        rows_out = [json.loads(line) for line in f]
    _check_rows(list(rows(60)), rows_out)


def test_parquet_round_trip_keeps_types_and_order(tmp_path):
    src = write_parquet(tmp_path / "in.parquet", 90, row_group_rows=25)
    proc = run_cli("compress", str(src), *SMALL, "--quiet")
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "in_compressed.parquet"
    table = pq.read_table(out)
    schema_in = pq.read_schema(src)
    for field in schema_in:
        assert table.schema.field(field.name).type == field.type
    assert table.schema.names == [*schema_in.names, "compression_metrics"]
    _check_rows(pq.read_table(src).to_pylist(), table.to_pylist())
    metrics = json.loads((tmp_path / "in_compressed_metrics.json").read_text())
    assert metrics["summary"]["total_trajectories"] == 90


def test_output_format_converts_both_ways(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", 45)
    proc = run_cli("compress", str(src), *SMALL, "--quiet", "--output-format", "parquet")
    assert proc.returncode == 0, proc.stderr
    as_parquet = tmp_path / "in_compressed.parquet"
    rows_parquet = pq.read_table(as_parquet).to_pylist()
    _check_rows(read_jsonl(src), rows_parquet)
    back = tmp_path / "back.jsonl"
    proc = run_cli("compress", str(as_parquet), "-o", str(back), "--quiet",
                   "--output-format", "jsonl", "--summarizer", "extractive",
                   "--target-max-tokens", "100000")
    assert proc.returncode == 0, proc.stderr
    # Parquet has no "absent": turns without a weight come back with "weight": null.
    assert read_jsonl(back) == rows_parquet
    proc = run_cli("compress", str(src), "-o", str(tmp_path / "x.jsonl"),
                   "--output-format", "parquet", *SMALL)
    assert proc.returncode == 2 and "named .jsonl" in proc.stderr


def test_folder_of_mixed_formats_gives_one_output_per_file(tmp_path):
    src = tmp_path / "runs"
    src.mkdir()
    write_jsonl(src / "a.jsonl", 20)
    write_parquet(src / "b.parquet", 15)
    proc = run_cli("compress", str(src), *SMALL, "--quiet")
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "runs_compressed"
    assert sorted(p.name for p in out.iterdir()) == ["a.jsonl", "b.parquet"]
    assert len(read_jsonl(out / "a.jsonl")) == 20
    assert pq.read_table(out / "b.parquet").num_rows == 15


def test_parquet_with_another_schema_in_the_folder_is_rejected_row_by_row(tmp_path):
    src = tmp_path / "shards"
    src.mkdir()
    write_parquet(src / "a.parquet", 12)
    pq.write_table(pa.table({"id": ["x", "y"], "prompt": ["p", "q"]}), src / "b.parquet")
    write_parquet(src / "c.parquet", 7)
    proc = run_cli("compress", str(src), *SMALL, "--quiet")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert f"{src / 'b.parquet'} row 0: no column of the file's schema is a list of turns" \
        in proc.stderr
    assert proc.stderr.count("b.parquet") == 1  # said once for the file, not per row
    rejects = read_jsonl(tmp_path / "shards_compressed_rejects.jsonl")
    assert [(r["file"], r["row"]) for r in rejects] == [(str(src / "b.parquet"), 0),
                                                        (str(src / "b.parquet"), 1)]
    out = tmp_path / "shards_compressed"
    assert pq.read_table(out / "a.parquet").num_rows == 12
    assert pq.read_table(out / "c.parquet").num_rows == 7
    metrics = json.loads((tmp_path / "shards_compressed_metrics.json").read_text())
    assert metrics["summary"]["rows_rejected"] == 2
    assert metrics["summary"]["total_trajectories"] == 19

    proc = run_cli("compress", str(src), *SMALL, "--quiet", "--strict", "-o",
                   str(tmp_path / "strict"))
    assert proc.returncode == 1 and "b.parquet row 0" in proc.stderr
    assert not (tmp_path / "strict").exists() or not any((tmp_path / "strict").iterdir())
    assert not list(tmp_path.glob("strict_*")) and not list(tmp_path.glob(".strict*"))


def test_empty_files_are_reported_and_the_run_goes_on(tmp_path):
    src = tmp_path / "runs"
    src.mkdir()
    (src / "empty.jsonl").write_bytes(b"")
    (src / "blank.jsonl").write_bytes(b"\n\n")
    write_jsonl(src / "full.jsonl", 5)
    proc = run_cli("compress", str(src), *SMALL, "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert f"{src / 'empty.jsonl'}: file is empty (no rows)" in proc.stderr
    rejects = read_jsonl(tmp_path / "runs_compressed_rejects.jsonl")
    assert sorted(r["file"] for r in rejects) == [str(src / "blank.jsonl"),
                                                  str(src / "empty.jsonl")]
    assert all(r["rows"] == 0 for r in rejects)
    assert len(read_jsonl(tmp_path / "runs_compressed" / "full.jsonl")) == 5
    proc = run_cli("compress", str(src / "empty.jsonl"), *SMALL, "--strict")
    assert proc.returncode == 1 and "file is empty" in proc.stderr
    assert not (src / "empty_compressed.jsonl").exists()


def test_a_10_mb_turn_is_compressed_like_any_other(tmp_path):
    row = next(rows(1, start=0))
    big = "\n".join(f"line {i}: " + "result value ok " * 8 for i in range(75_000))
    assert len(big) > 10_000_000
    assert row["conversations"][5]["from"] == "tool"  # in the middle: not protected
    row["conversations"][5]["value"] = "<tool_response>\n" + big + "\n</tool_response>"
    src = tmp_path / "big.jsonl"
    with src.open("w", encoding="utf-8") as f:
        f.write(json.dumps(next(rows(1, start=1))) + "\n")
        f.write(json.dumps(row) + "\n")
    proc = run_cli("compress", str(src), "--summarizer", "extractive", "--quiet",
                   "--target-max-tokens", "2000", "--summary-target-tokens", "200")
    assert proc.returncode == 0, proc.stderr
    small, done = read_jsonl(tmp_path / "big_compressed.jsonl")
    assert small["id"] == "row-000001"
    m = done["compression_metrics"]
    assert m["was_compressed"] and m["original_tokens"] > 2_000_000
    assert m["compressed_tokens"] < 3000
    assert all(len(t["value"]) < 100_000 for t in done["conversations"])


def test_save_over_limit_false_moves_the_rows_themselves(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", 60)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("processing:\n  save_over_limit: false\n")
    for name, extra in (("keep", ()), ("move", ("--config", str(cfg)))):
        proc = run_cli("compress", str(src), "-o", str(tmp_path / f"{name}.jsonl"), *SMALL,
                       "--quiet", *extra)
        assert proc.returncode == 0, proc.stderr
    kept = read_jsonl(tmp_path / "keep.jsonl")
    moved = read_jsonl(tmp_path / "move.jsonl")
    over_kept = read_jsonl(tmp_path / "keep_over_limit.jsonl")
    over_moved = read_jsonl(tmp_path / "move_over_limit.jsonl")
    assert len(kept) == 60 and over_kept and all("row" not in e for e in over_kept)
    assert [e["line"] for e in over_moved] == [e["line"] for e in over_kept]
    assert len(moved) + len(over_moved) == 60
    by_id = {r["id"]: r for r in kept}
    for entry in over_moved:
        assert entry["trajectory"] == by_id[entry["id"]]  # the row itself, as it would be
        assert entry["trajectory"]["compression_metrics"]["still_over_limit"]
    assert _ids(moved) == [r["id"] for r in kept if r["id"] not in
                           {e["id"] for e in over_moved}]


def test_summary_fits_80_columns(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", 30)
    proc = run_cli("compress", "in.jsonl", *SMALL, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "Trajectory compression finished"
    assert all(len(line) <= 80 for line in lines), lines
    assert "  output           in_compressed.jsonl" in lines
    assert src.exists()


def _bar_text(src) -> str:
    """What `compress src` draws on a terminal (a pty 250 columns wide)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 250, 0, 0))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "trajectory_compressor", "compress",
                             str(src), *SMALL], stderr=follower, stdout=subprocess.DEVNULL,
                            env=env, cwd=ROOT)
    os.close(follower)
    output = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    assert proc.wait(timeout=120) == 0
    os.close(leader)
    return output.decode("utf-8", errors="replace")


def test_progress_bar_on_a_terminal_with_live_counters(tmp_path):
    src = write_parquet(tmp_path / "in.parquet", 40)
    text = _bar_text(src)
    assert "40/40" in text  # the total comes from the Parquet footer
    for counter in ("compressed=", "skipped=", "over_limit=", "failed=", "api_calls=",
                    "in_flight="):
        assert counter in text
    quiet = run_cli("compress", str(src), *SMALL, "-o", str(tmp_path / "q.parquet"))
    assert "row/s" not in quiet.stderr  # not a terminal: no bar


def test_a_json_array_gets_a_total_and_an_eta(tmp_path):
    """The array's elements are counted before the run (issue 25): 37 rows, one of them
    a string full of brackets, commas and escaped quotes, then 3 JSON lines after it."""
    src = tmp_path / "in.json"
    data = list(rows(37))
    data[5]["note"] = '], [{"x": "\\"}, {,'
    src.write_text(json.dumps(data) + "\n" + "\n".join(json.dumps(r) for r in rows(3)))
    text = _bar_text(src)
    assert "40/40" in text
    # tqdm shows elapsed<remaining only when it knows the total.
    assert re.search(r"\d+/40 \[\d\d:\d\d<\d\d:\d\d", text), text[-500:]


@pytest.mark.parametrize("content", [b"", b"PAR1garbage"])
def test_unreadable_parquet_file_is_rejected_with_its_name(tmp_path, content):
    src = tmp_path / "bad.parquet"
    src.write_bytes(content)
    proc = run_cli("compress", str(src), *SMALL, "--quiet")
    assert proc.returncode == 1
    assert f"{src}: not a readable Parquet file" in proc.stderr
    assert "Traceback" not in proc.stderr
    rejects = read_jsonl(tmp_path / "bad_compressed_rejects.jsonl")
    assert rejects[0]["file"] == str(src)


def test_parquet_columns_of_every_kind_survive_both_output_formats(tmp_path):
    import datetime
    import decimal

    data = list(rows(6))
    table = pa.Table.from_pylist(data).append_column(
        "blob", pa.array([bytes([i, 255]) for i in range(6)], pa.binary())
    ).append_column(
        "price", pa.array([decimal.Decimal(f"{i}.25") for i in range(6)], pa.decimal128(9, 2))
    ).append_column(
        "at", pa.array([datetime.datetime(2024, 1, i + 1) for i in range(6)],
                       pa.timestamp("ms"))
    ).append_column("small", pa.array(range(6), pa.int32()))
    src = tmp_path / "typed.parquet"
    pq.write_table(table, src)
    proc = run_cli("compress", str(src), *SMALL, "--quiet")
    assert proc.returncode == 0, proc.stderr
    out = pq.read_table(tmp_path / "typed_compressed.parquet")
    for name in ("blob", "price", "at", "small"):
        assert out.schema.field(name).type == table.schema.field(name).type
        assert out[name].to_pylist() == table[name].to_pylist()
    # Its sidecars are the Parquet run's (same stem, other settings): replaced on request.
    proc = run_cli("compress", str(src), *SMALL, "--quiet", "--output-format", "jsonl",
                   "--overwrite")
    assert proc.returncode == 0, proc.stderr
    back = read_jsonl(tmp_path / "typed_compressed.jsonl")
    assert [r["price"] for r in back] == [f"{i}.25" for i in range(6)]
    assert back[0]["at"].startswith("2024-01-01") and back[2]["small"] == 2
