"""Round 5 of the mutation kills (issue 26, item 5) in `engine/`: lines that only the
subprocess CLI tests ran, or error paths no test ran, now run in this process.

`engine/batch.py`: phase 2 (`finish_batch`) end to end through the library API, its
refusals (SPEC §17, README "Batch mode"), `has_endpoint` as its docstring and
`finish_batch`'s state it; `engine/paths.py`: the refusals of SPEC §12 (what a run writes
is no input, no special file, no other written path); `engine/analyze.py`: the counting
gap and a row the count refuses; `engine/compressor.py`: `RowResult.reason`, a backend that
fails without saying how, `compress_row`'s `RowError`.

Expected values come from SPEC, the README and the docstrings, or are worked out by hand
on "word" rows (``words(n)`` is ``n`` tokens with the bundled tokenizer).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
from pathlib import Path
from typing import Any

import pytest

from tests.cli_helpers import invoke_cli
from tests.fake_llm_server import FakeLLMServer
from tests.fixtures_runs import row, write_jsonl
from tests.test_batch import answer, request_files
from trajectory_compressor.core.config import DEFAULT_BASE_URL, CompressionConfig, EndpointConfig
from trajectory_compressor.core.errors import ConfigError
from trajectory_compressor.engine import batch
from trajectory_compressor.engine.batch import export_batch, finish_batch, has_endpoint

# target 100, summary 20, last 4 turns protected, no notice (tests/fixtures_runs.HAND_CONFIG).
HAND = {"target_max_tokens": 100, "summary_target_tokens": 20, "add_summary_notice": False}
FITS = ("SHGTGTGTGTGT", [10, 5, 5, 5, 40, 40, 40, 40, 5, 5, 5, 5])


def batch_config(**more: Any) -> CompressionConfig:
    return CompressionConfig(**HAND, summarization_model="fake-model", **more)


def two_to_summarize(path: Path) -> Path:
    """Two rows whose middles (different texts) are summarized, and one under the target:
    two requests."""
    roles, sizes = FITS
    other = [*sizes[:4], 41, 41, 41, 41, *sizes[8:]]
    return write_jsonl(path, [row("a", roles, sizes), row("short", "SHGT", [5, 5, 5, 5]),
                              row("b", roles, other)])


def sources(out: Path) -> dict[str, str | None]:
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    return {r["id"]: r.get("compression_metrics", {}).get("summary_source") for r in rows}


def metrics_of(out: Path) -> dict:
    return json.loads(out.with_name(out.stem + "_metrics.json").read_text(encoding="utf-8"))


# engine/batch.py: phase 2


def test_phase_2_uses_the_batch_results_and_falls_back_for_a_missing_one(tmp_path):
    """README "Batch mode": phase 2 loads the results into the summary cache and runs the
    compression; a request without a result gets the extractive fallback
    (``summary_source: "fallback"``, the error counted as ``batch_missing``) when no
    endpoint is configured."""
    src = two_to_summarize(tmp_path / "in.jsonl")
    folder, out = tmp_path / "batch", tmp_path / "out.jsonl"
    exported = export_batch(str(src), str(out), batch_config(), folder)
    assert exported.stats.requests == 2
    results = folder / "results.jsonl"
    ids = answer(request_files(folder), results, missing=(1,))
    assert len(ids) == 2
    report, result = finish_batch(str(src), str(out), batch_config(), folder, [str(results)])
    assert (report.lines, report.accepted, report.missing) == (1, 1, 1)
    by_id = sources(out)
    assert by_id["short"] is None  # under the target: written as read
    assert sorted([by_id["a"], by_id["b"]]) == ["fallback", "llm"]
    assert result.metrics.trajectories_compressed == 2
    summary = metrics_of(out)["summarization"]
    assert summary["errors_by_kind"] == {"batch_missing": 1}
    assert summary["summaries_by_source"]["llm"] == summary["summaries_by_source"][
        "fallback"] == 1


def test_phase_2_sends_the_unanswered_request_to_the_configured_endpoint(tmp_path):
    """`finish_batch`: with an endpoint (here ``summarization.base_url`` other than the
    default provider's), the request the batch did not answer goes there, and its row
    gets that endpoint's summary."""
    src = two_to_summarize(tmp_path / "in.jsonl")
    folder, out = tmp_path / "batch", tmp_path / "out.jsonl"
    export_batch(str(src), str(out), batch_config(), folder)
    results = folder / "results.jsonl"
    answer(request_files(folder), results, missing=(0,))
    with FakeLLMServer().in_thread() as server:
        report, _ = finish_batch(str(src), str(out), batch_config(base_url=server.url),
                                 folder, [str(results)])
        assert server.requests == 1
    assert (report.accepted, report.missing) == (1, 1)
    assert sources(out) == {"a": "llm", "short": None, "b": "llm"}
    assert metrics_of(out)["summarization"]["summaries_by_source"]["llm"] == 2


def test_phase_2_refuses_without_the_cache_or_on_another_engine(tmp_path):
    """`finish_batch`: the results are loaded into the summary cache (so not with
    ``--no-cache``), and batch mode runs on the local engine; nothing is written."""
    src = two_to_summarize(tmp_path / "in.jsonl")
    folder = tmp_path / "batch"
    export_batch(str(src), None, batch_config(), folder)
    (folder / "r.jsonl").write_text("", encoding="utf-8")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(ConfigError, match="without --no-cache"):
        finish_batch(str(src), None, batch_config(cache_enabled=False), folder,
                     [str(folder / "r.jsonl")])
    with pytest.raises(ConfigError, match="runs on the local engine"):
        finish_batch(str(src), None, batch_config(engine="ray"), folder,
                     [str(folder / "r.jsonl")])
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("manifest", [None, "not json", {"version": 99}])
def test_phase_2_refuses_a_missing_or_unreadable_manifest(tmp_path, manifest):
    src = two_to_summarize(tmp_path / "in.jsonl")
    folder = tmp_path / "batch"
    folder.mkdir()
    if manifest is not None:
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        (folder / "manifest.json").write_text(text, encoding="utf-8")
    (folder / "r.jsonl").write_text("", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        finish_batch(str(src), None, batch_config(), folder, [str(folder / "r.jsonl")])
    assert str(caught.value).startswith(f"{folder / 'manifest.json'} is missing or unreadable")


def test_phase_2_refuses_inputs_changed_since_the_export(tmp_path):
    """README "Batch mode": phase 2 refuses a run whose inputs differ from the export's."""
    src = two_to_summarize(tmp_path / "in.jsonl")
    folder = tmp_path / "batch"
    export_batch(str(src), None, batch_config(), folder)
    (folder / "r.jsonl").write_text("", encoding="utf-8")
    with src.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row("c", "SHGT", [5, 5, 5, 5])) + "\n")
    with pytest.raises(ConfigError, match="the inputs are not the ones the requests in"):
        finish_batch(str(src), None, batch_config(), folder, [str(folder / "r.jsonl")])
    assert not (tmp_path / "in_compressed.jsonl").exists()


def test_phase_2_refuses_a_tokenizer_changed_since_the_export(tmp_path, monkeypatch):
    """The same tokenizer folder whose files changed (the settings are the same): the
    counts, and so the requests, may differ; phase 2 refuses."""
    from trajectory_compressor.counting.tokens import bundled_tokenizer_dir

    tokenizer = tmp_path / "tok"
    shutil.copytree(bundled_tokenizer_dir(), tokenizer)
    src = two_to_summarize(tmp_path / "in.jsonl")
    folder = tmp_path / "batch"
    config = batch_config(tokenizer_name=str(tokenizer))
    export_batch(str(src), None, config, folder)
    (folder / "r.jsonl").write_text("", encoding="utf-8")
    settings = tokenizer / "tokenizer_config.json"
    settings.write_text(settings.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="the tokenizer is not the one the requests in"):
        finish_batch(str(src), None, config, folder, [str(folder / "r.jsonl")])


def test_has_endpoint_names_each_way_of_configuring_one():
    """`finish_batch`'s docstring: ``--base-url``, ``summarization.endpoints``, or a
    ``summarization.base_url`` other than the default provider's."""
    assert has_endpoint(batch_config()) is False
    assert has_endpoint(batch_config(base_url=DEFAULT_BASE_URL + "/")) is False
    assert has_endpoint(batch_config(base_url="http://127.0.0.1:9/v1")) is True
    one = EndpointConfig("http://127.0.0.1:9/v1", "fake-model", None)
    assert has_endpoint(batch_config(endpoints=[one])) is True


def test_export_without_the_cache_exports_every_request_and_clears_stale_partials(tmp_path):
    """Phase 1 with ``--no-cache``: no cache leaves a request out, so both are exported;
    an interrupted export's temporary request file (``.requests-*.jsonl.partial``) is
    deleted, the folder then holds the manifest and the request file only."""
    src = two_to_summarize(tmp_path / "in.jsonl")
    folder = tmp_path / "batch"
    folder.mkdir()
    (folder / ".requests-00007.jsonl.partial").write_text('{"half": ', encoding="utf-8")
    exported = export_batch(str(src), None, batch_config(cache_enabled=False), folder)
    assert exported.stats.requests == 2
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", "requests-00001.jsonl"]


def test_export_counts_a_row_that_cannot_be_planned_as_rejected(tmp_path, monkeypatch):
    """Phase 1 walks the rows as the pipeline does: a row whose planning raises is
    rejected (the manifest's ``stats.rows_rejected``) and the others are exported."""
    from trajectory_compressor.engine.compressor import TrajectoryCompressor

    class Unplannable(TrajectoryCompressor):
        def plan(self, turns: Any, turn_tokens: Any = None, dialect: Any = None,
                 distilled: Any = None) -> Any:
            if len(turns) > 4 and turns[4]["value"].count("word") == 41:  # row "b"
                raise ValueError("no plan for this row")
            return super().plan(turns, turn_tokens, dialect, distilled)

    monkeypatch.setattr(batch, "TrajectoryCompressor", Unplannable)
    src = two_to_summarize(tmp_path / "in.jsonl")
    folder = tmp_path / "batch"
    exported = export_batch(str(src), None, batch_config(), folder)
    assert (exported.rows_rejected, exported.stats.requests) == (1, 1)
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["stats"]["rows_rejected"] == 1
