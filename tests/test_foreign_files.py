"""A file the user names is replaced only when this tool wrote it (issue 36, item 3).

`report --html PATH` overwrote the run's own input when its metrics were disabled or
deleted, and any other `.jsonl` when they were there. Now `report --html`, `analyze
--json` and a batch export replace an existing file only when they recognise it as their
own (the page's marker, the analysis' keys, the manifest's format and its list of request
files), or with `--overwrite`. Each case checks the bytes of the file named are the same
after the refusal.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.cli_helpers import invoke_cli
from tests.fixtures_runs import long_hermes_row
from trajectory_compressor.engine.ours import HTML_MARKER

SMALL = ("--summarizer", "extractive", "--target-max-tokens", "150",
         "--summary-target-tokens", "10", "--no-cache")


def _run(tmp_path: Path, metrics: bool = True) -> tuple[Path, Path]:
    """A finished run: its input and output (metrics disabled when ``metrics`` is False)."""
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(long_hermes_row(f"r{i}")) + "\n" for i in range(3)),
                   encoding="utf-8")
    out = tmp_path / "out.jsonl"
    args = ["compress", str(src), "-o", str(out), *SMALL]
    if not metrics:
        config = tmp_path / "nometrics.yaml"
        config.write_text("metrics:\n  enabled: false\n", encoding="utf-8")
        args += ["--config", str(config)]
    result = invoke_cli(*args)
    assert result.returncode == 0, result.stderr
    return src, out


def _refused(result, path: Path) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert str(path) in result.stderr and "--overwrite" in result.stderr


def _page(path: Path) -> bool:
    return HTML_MARKER.encode() in path.read_bytes()[:4096]


@pytest.mark.parametrize("target", ["other jsonl", "parquet", "foreign html", "input"])
def test_report_html_never_replaces_a_file_it_did_not_write(tmp_path: Path, target: str):
    src, out = _run(tmp_path)
    if target == "other jsonl":
        path = tmp_path / "dataset.jsonl"
        path.write_text('{"id": "keep me"}\n', encoding="utf-8")
    elif target == "parquet":
        path = tmp_path / "dataset.parquet"
        pq.write_table(pa.Table.from_pylist([{"id": "keep me"}]), path)
    elif target == "foreign html":
        path = tmp_path / "index.html"
        path.write_text("<!DOCTYPE html><html><head><title>mine</title></head></html>",
                        encoding="utf-8")
    else:
        path = src
    before = path.read_bytes()
    result = invoke_cli("report", str(out), "--html", str(path))
    assert result.returncode == 2, result.stderr
    assert path.read_bytes() == before
    if target != "input":  # the run's input is refused by the older rule, named as input
        _refused(result, path)
        forced = invoke_cli("report", str(out), "--html", str(path), "--overwrite")
        assert forced.returncode == 0, forced.stderr
        assert _page(path)
    else:
        assert "would overwrite the input" in result.stderr


@pytest.mark.parametrize("metrics", ["disabled", "deleted"])
def test_without_metrics_the_run_input_is_still_never_replaced(tmp_path: Path, metrics: str):
    # The trial's case: nothing says which file was the input, so only the marker rule
    # protects it.
    src, out = _run(tmp_path, metrics=metrics != "disabled")
    if metrics == "deleted":
        (tmp_path / "out_metrics.json").unlink()
    assert not (tmp_path / "out_metrics.json").exists()
    before = src.read_bytes()
    result = invoke_cli("report", str(out), "--html", str(src))
    _refused(result, src)
    assert src.read_bytes() == before
    # A page of ours in that place is replaced without the flag.
    page = tmp_path / "page.html"
    assert invoke_cli("report", str(out), "--html", str(page)).returncode == 0
    first = page.read_bytes()
    page.write_bytes(first.replace(b"</footer>", b" edited</footer>"))
    again = invoke_cli("report", str(out), "--html", str(page))
    assert again.returncode == 0, again.stderr
    assert page.read_bytes() == first


def test_a_symbolic_link_to_a_dataset_is_kept_and_so_is_the_dataset(tmp_path: Path):
    _, out = _run(tmp_path)
    dataset = tmp_path / "data.jsonl"
    dataset.write_text('{"id": "keep me"}\n', encoding="utf-8")
    link = tmp_path / "report.html"
    link.symlink_to(dataset)
    result = invoke_cli("report", str(out), "--html", str(link))
    _refused(result, link)
    assert link.is_symlink() and dataset.read_text() == '{"id": "keep me"}\n'
    # With --overwrite the link gives way to the page; the file it named stays.
    forced = invoke_cli("report", str(out), "--html", str(link), "--overwrite")
    assert forced.returncode == 0, forced.stderr
    assert not link.is_symlink() and _page(link)
    assert dataset.read_text() == '{"id": "keep me"}\n'
    # A link to a page of ours is a link too: kept without the flag.
    other = tmp_path / "again.html"
    other.symlink_to(link)
    _refused(invoke_cli("report", str(out), "--html", str(other)), other)


@pytest.mark.parametrize("target", ["jsonl", "other json"])
def test_analyze_json_replaces_only_an_analysis(tmp_path: Path, target: str):
    src, _ = _run(tmp_path)
    path = tmp_path / ("rows.jsonl" if target == "jsonl" else "settings.json")
    path.write_text('{"id": "keep me"}\n' if target == "jsonl" else '{"rows": 3}',
                    encoding="utf-8")
    before = path.read_bytes()
    args = ("analyze", str(src), "--target-max-tokens", "150", "--summary-target-tokens",
            "10", "--json")
    result = invoke_cli(*args, str(path))
    _refused(result, path)
    assert path.read_bytes() == before
    forced = invoke_cli(*args, str(path), "--overwrite")
    assert forced.returncode == 0, forced.stderr
    assert json.loads(path.read_text())["rows"] == 3
    # Its own analysis is replaced by the next one without the flag.
    again = invoke_cli(*args, str(path))
    assert again.returncode == 0, again.stderr


@pytest.mark.parametrize("foreign", ["manifest.json", "requests-00001.jsonl"])
def test_a_batch_export_keeps_files_it_did_not_write(tmp_path: Path, foreign: str):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(long_hermes_row(f"r{i}")) + "\n" for i in range(3)),
                   encoding="utf-8")
    folder = tmp_path / "batch"
    folder.mkdir()
    path = folder / foreign
    path.write_text('{"id": "keep me"}\n', encoding="utf-8")
    batch = ("compress", str(src), "--summarizer", "batch", "--model", "m", "--batch-dir",
             str(folder), "--target-max-tokens", "150", "--summary-target-tokens", "10")
    result = invoke_cli(*batch)
    _refused(result, path)
    assert sorted(os.listdir(folder)) == [foreign]
    assert path.read_text() == '{"id": "keep me"}\n'
    forced = invoke_cli(*batch, "--overwrite")
    assert forced.returncode == 0, forced.stderr
    manifest = json.loads((folder / "manifest.json").read_text())
    assert [f["name"] for f in manifest["files"]] == ["requests-00001.jsonl"]
    # The next export replaces the files of this one without the flag.
    assert invoke_cli(*batch).returncode == 0


def test_a_cache_path_naming_another_programs_database_is_never_written(tmp_path: Path):
    import sqlite3

    from trajectory_compressor.core.errors import ConfigError
    from trajectory_compressor.summarizers.cache import SummaryCache

    path = tmp_path / "app.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE accounts (name TEXT)")
    db.execute("INSERT INTO accounts VALUES ('keep me')")
    db.commit()
    db.close()
    before = path.read_bytes()
    with pytest.raises(ConfigError, match="SQLite database of something else"):
        SummaryCache(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.sqlite"]
    # A cache of ours (or an empty file, a new cache) opens as before.
    SummaryCache(tmp_path / "new.sqlite").close()
    SummaryCache(tmp_path / "new.sqlite").close()
