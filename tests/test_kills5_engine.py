"""Round 5 of the mutation kills (issue 26, item 5) in `engine/`: lines that only the
subprocess CLI tests ran, or error paths no test ran, now run in this process.

`engine/batch.py`: phase 2 (`finish_batch`) end to end through the library API, its
refusals (SPEC §17, README "Batch inference"), `has_endpoint` as its docstring and
`finish_batch`'s state it; `engine/paths.py`: the refusals of SPEC §12 (what a run writes
is no input, no special file, no other written path); `inspect/analyze.py`: the counting
gap and a row the count refuses; `engine/compressor.py`: `RowResult.reason`, a backend that
fails without saying how, `compress_row`'s `RowError`.

Expected values come from SPEC, the README and the docstrings, or are worked out by hand
on "word" rows (``words(n)`` is ``n`` tokens with the bundled tokenizer).
"""

from __future__ import annotations

import json
import os
import socket
import stat
from pathlib import Path
from typing import Any

import pytest

from tests.cli_helpers import invoke_cli
from tests.fake_llm_server import FakeLLMServer
from tests.fixtures_runs import row, words, write_jsonl
from tests.test_batch import answer, request_files
from trajectory_compressor.core.config import DEFAULT_BASE_URL, CompressionConfig, EndpointConfig
from trajectory_compressor.core.errors import ConfigError
from trajectory_compressor.core.summary import (
    Summarizer,
    Summary,
    SummaryFailed,
    SummaryRequest,
    SummaryUsage,
)
from trajectory_compressor.engine import batch
from trajectory_compressor.engine.batch import export_batch, finish_batch, has_endpoint
from trajectory_compressor.engine.compressor import TrajectoryCompressor

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
    """README "Batch inference": phase 2 loads the results into the summary cache and runs the
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


@pytest.mark.parametrize("name", ["trajectories.jsonl", "trajectories.parquet",
                                  "openai_messages.jsonl", "llamafactory_sharegpt.json",
                                  "llamafactory_messages.jsonl"])
def test_batch_mode_writes_what_an_online_run_writes_in_every_dialect_and_container(
        tmp_path, name):
    """README "Batch inference": phase 2's output is what an online run that received the same
    summaries writes; the exported requests are the ones the online run sends. Each
    sample's first three rows in its own container (the Hermes, OpenAI and both
    LLaMA-Factory dialects; JSONL, a .json array, Parquet), the provider answering each
    request as the loopback server answers it."""
    from tests.sample_files import sample_head
    from trajectory_compressor.engine.job import compress_dataset

    src = sample_head(name, tmp_path, 3)
    config = CompressionConfig(target_max_tokens=4000, summary_target_tokens=200,
                               summarization_model="fake-model")
    suffix = Path(name).suffix
    online = tmp_path / "online" / f"out{suffix}"
    with FakeLLMServer().in_thread() as server:
        reference = compress_dataset(str(src), str(online), config.replace(base_url=server.url))
        sent = server.requests
    folder, out = tmp_path / "batch", tmp_path / "run" / f"out{suffix}"
    exported = export_batch(str(src), str(out), config, folder)
    assert exported.stats.requests == sent >= 1
    answer(request_files(folder), folder / "results.jsonl")
    report, result = finish_batch(str(src), str(out), config, folder,
                                  [str(folder / "results.jsonl")])
    assert (report.accepted, report.missing) == (sent, 0)
    assert result.metrics.trajectories_compressed >= 1
    assert out.read_bytes() == online.read_bytes()
    # (The metrics file's name depends on the container: the layout says where it is.)
    ours, theirs = (json.loads(r.layout.metrics.read_text(encoding="utf-8"))
                    for r in (result, reference))
    assert ours["summarization"] == theirs["summarization"]


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


@pytest.mark.quick  # names the "ray" engine (a heavy name to the sorter) and starts none
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
    """README "Batch inference": phase 2 refuses a run whose inputs differ from the export's."""
    src = two_to_summarize(tmp_path / "in.jsonl")
    folder = tmp_path / "batch"
    export_batch(str(src), None, batch_config(), folder)
    (folder / "r.jsonl").write_text("", encoding="utf-8")
    with src.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row("c", "SHGT", [5, 5, 5, 5])) + "\n")
    with pytest.raises(ConfigError, match="the inputs are not the ones the requests in"):
        finish_batch(str(src), None, batch_config(), folder, [str(folder / "r.jsonl")])
    assert not (tmp_path / "in_compressed.jsonl").exists()


def test_phase_2_refuses_a_tokenizer_changed_since_the_export(tmp_path):
    """The same tokenizer name whose files changed since the export (the manifest's
    ``run.tokenizer`` records another hash of them; the settings are the same): the
    counts, and so the requests, may differ, so phase 2 refuses."""
    src = two_to_summarize(tmp_path / "in.jsonl")
    folder = tmp_path / "batch"
    export_batch(str(src), None, batch_config(), folder)
    (folder / "r.jsonl").write_text("", encoding="utf-8")
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    recorded = manifest["run"]["tokenizer"]
    assert recorded["name"] == batch_config().tokenizer_name
    recorded["files_sha256"] = "0" * len(recorded["files_sha256"])
    path.write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(ConfigError, match="the tokenizer is not the one the requests in"):
        finish_batch(str(src), None, batch_config(), folder, [str(folder / "r.jsonl")])


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


# engine/paths.py: what a run writes is checked first (README "Nothing is ever written over
# an input": a clash, an output that is a device, FIFO or folder, or a folder that cannot
# be written is a usage error, exit 2, naming the paths)

EXTRACTIVE = ("--summarizer", "extractive")
# An endpoint on the loopback no test listens on: the run stops before any request.
NOWHERE = ("--base-url", "http://127.0.0.1:9/v1", "--model", "fake-model")


def short_rows(folder: Path) -> Path:
    return write_jsonl(folder / "in.jsonl", [row("a", "SHGT", [5, 5, 5, 5]),
                                             row("b", "SHGT", [5, 5, 5, 5])])


def refused(folder: Path, *args: str) -> str:
    """The one-line error of a compress run in ``folder`` that must exit 2."""
    run = invoke_cli("compress", *args, cwd=folder)
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert run.stderr.startswith("error: ") and run.stderr.count("\n") == 1, run.stderr
    return run.stderr.strip()


def test_an_output_spelled_another_way_is_the_same_file_as_the_input(tmp_path):
    """`sub/../in.jsonl` is `in.jsonl`: no link, the same file spelled two ways."""
    short_rows(tmp_path)
    (tmp_path / "sub").mkdir()
    assert refused(tmp_path, "in.jsonl", "-o", "sub/../in.jsonl", *EXTRACTIVE) == (
        "error: sub/../in.jsonl (the output of in.jsonl) would overwrite the input in.jsonl "
        "(the same file); nothing was written; choose another output (-o), --cache-path or "
        "output.output_suffix")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "sub"]


def test_an_output_that_is_a_socket_is_named_for_what_it_is(tmp_path, monkeypatch):
    short_rows(tmp_path)
    monkeypatch.chdir(tmp_path)  # a socket's path must be short: bind it by a relative one
    with socket.socket(socket.AF_UNIX) as server:
        server.bind("out.jsonl")
        message = refused(tmp_path, "in.jsonl", "-o", "out.jsonl", *EXTRACTIVE)
    assert message.startswith("error: out.jsonl (the output of in.jsonl) is a socket, not a "
                              "regular file")


def test_the_kind_of_each_special_file_is_named():
    """What the refusal calls a path that is no regular file (`bounded.file_kind`): a
    character or block device, a FIFO, a socket, and "a special file" for any other type
    (none other on Linux; a door or a whiteout elsewhere)."""
    from trajectory_compressor.formats.bounded import file_kind as _kind_name

    assert _kind_name(stat.S_IFCHR | 0o600) == "a character device"
    assert _kind_name(stat.S_IFBLK | 0o600) == "a block device"
    assert _kind_name(stat.S_IFIFO | 0o600) == "a FIFO (named pipe)"
    assert _kind_name(stat.S_IFSOCK | 0o600) == "a socket"
    assert _kind_name(0o600) == "a special file"


def test_a_temporary_file_that_is_a_symbolic_link_is_refused(tmp_path):
    """A temporary file is written in place: through a link it would write elsewhere."""
    short_rows(tmp_path)
    (tmp_path / ".out.jsonl.partial").symlink_to(tmp_path / "elsewhere.jsonl")
    assert refused(tmp_path, "in.jsonl", "-o", "out.jsonl", *EXTRACTIVE) == (
        "error: .out.jsonl.partial (the temporary file of the output of in.jsonl) is a "
        "symbolic link; the run writes it in place, so remove the link first")
    assert not (tmp_path / "elsewhere.jsonl").exists()


def test_a_parquet_output_whose_parts_folder_is_a_file_is_refused(tmp_path):
    """A Parquet output is written in parts in ``.<name>.parts`` (`formats.parquet.parts_dir`),
    a folder the run creates and deletes: a file there is not replaced."""
    short_rows(tmp_path)
    (tmp_path / ".out.parquet.parts").write_text("mine", encoding="utf-8")
    assert refused(tmp_path, "in.jsonl", "-o", "out.parquet", *EXTRACTIVE) == (
        "error: .out.parquet.parts (the parts folder of the output of in.jsonl) exists and "
        "is not a folder; remove it")
    assert (tmp_path / ".out.parquet.parts").read_text(encoding="utf-8") == "mine"


def test_a_cache_inside_the_parquet_parts_folder_is_refused(tmp_path):
    """The parts folder is deleted when the output is complete: a summary cache in it
    would go with it."""
    short_rows(tmp_path)
    message = refused(tmp_path, "in.jsonl", "-o", "out.parquet", *NOWHERE,
                      "--cache-path", ".out.parquet.parts/cache.sqlite")
    assert message == (
        "error: .out.parquet.parts/cache.sqlite (the summary cache) lies in .out.parquet.parts "
        "(the parts folder of the output of in.jsonl); choose another output (-o), "
        "--cache-path or output.output_suffix")


def test_a_cache_that_is_the_metrics_file_is_refused(tmp_path):
    short_rows(tmp_path)
    message = refused(tmp_path, "in.jsonl", "-o", "out.jsonl", *NOWHERE,
                      "--cache-path", "out_metrics.json")
    assert message == (
        "error: out_metrics.json (the summary cache) and out_metrics.json (the metrics file) "
        "are the same file; choose another output (-o), --cache-path or output.output_suffix")


def test_an_output_in_a_folder_that_cannot_be_written_is_refused(tmp_path, monkeypatch):
    """A folder without write permission. (As root, access() grants everything: there the
    folder's mode is what an ordinary user's access() would answer from.)"""
    short_rows(tmp_path)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    if os.geteuid() == 0:
        real = os.access

        def access(path: Any, mode: int, **keywords: Any) -> bool:
            if Path(path) == locked:
                return not mode & os.W_OK
            return real(path, mode, **keywords)

        monkeypatch.setattr(os, "access", access)
    try:
        message = refused(tmp_path, "in.jsonl", "-o", "locked/out.jsonl", *EXTRACTIVE)
    finally:
        locked.chmod(0o755)
    # (The first path checked is the run's lock file beside the output.)
    assert message.startswith("error: cannot write ") and message.endswith(
        f": permission denied (the folder {locked.resolve()} is not writable)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "locked"]
    assert not list(locked.iterdir())


def test_a_rerun_with_another_sample_is_refused_without_naming_a_setting(tmp_path):
    """The settings' fingerprint holds the sample: a rerun with ``--sample-percent`` is
    "other settings", though no setting of the metrics file's ``settings`` changed (so
    the message names none)."""
    short_rows(tmp_path)
    first = invoke_cli("compress", "in.jsonl", "-o", "out.jsonl", *EXTRACTIVE, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert refused(tmp_path, "in.jsonl", "-o", "out.jsonl", *EXTRACTIVE,
                   "--sample-percent", "50") == (
        "error: out.jsonl was written from the same input with other settings; pass "
        "--overwrite to replace it, or choose another output (-o)")


def test_the_first_difference_of_an_unreadable_metrics_file_is_nothing(tmp_path):
    """`paths._first_difference`: `` (section.key was X, now Y)``, or an empty string when
    the metrics file cannot say (gone, or not JSON)."""
    from trajectory_compressor.engine.paths import _first_difference

    config = CompressionConfig(**HAND)
    assert _first_difference(tmp_path / "gone.json", config) == ""
    (tmp_path / "bad.json").write_text("{", encoding="utf-8")
    assert _first_difference(tmp_path / "bad.json", config) == ""


def test_an_output_the_recorded_run_did_not_write_is_refused(tmp_path):
    """A metrics file whose ``run.outputs`` is no mapping names no output: an existing
    output is not that run's, and is kept."""
    short_rows(tmp_path)
    first = invoke_cli("compress", "in.jsonl", "-o", "out.jsonl", *EXTRACTIVE, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    metrics = tmp_path / "out_metrics.json"
    data = json.loads(metrics.read_text(encoding="utf-8"))
    data["run"]["outputs"] = ["out.jsonl"]
    metrics.write_text(json.dumps(data), encoding="utf-8")
    assert refused(tmp_path, "in.jsonl", "-o", "out.jsonl", *EXTRACTIVE) == (
        "error: out.jsonl already exists and the run recorded in out_metrics.json did not "
        "write it; pass --overwrite to replace it, or choose another output (-o)")


@pytest.mark.parametrize("metrics", [None, [], {"run": None}, {"run": {"inputs": "in.jsonl"}},
                                     {"run": {}}])
def test_recorded_inputs_of_metrics_that_name_none_is_an_empty_list(metrics):
    from trajectory_compressor.engine.paths import recorded_inputs

    assert recorded_inputs(metrics) == []


# inspect/analyze.py and engine/compressor.py: the chat template's count, a backend's
# failures, RowResult.reason

# ChatML-like blocks (the markers are plain text for the bundled vocabulary); a message
# holding REFUSE makes the template raise, as real templates do for what they cannot take.
REFUSING_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if 'REFUSE' in m.content -%}{{ raise_exception('no REFUSE here') }}{%- endif -%}"
    "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{%- endfor -%}")


def template_file(folder: Path) -> Path:
    path = folder / "chatml.jinja"
    path.write_text(REFUSING_TEMPLATE, encoding="utf-8")
    return path


def refused_row(row_id: str) -> dict:
    data = row(row_id, "SHGT", [5, 5, 5, 5])
    data["conversations"][1]["value"] = "REFUSE " + data["conversations"][1]["value"]
    return data


def test_analyze_reports_the_counting_gap_of_every_row(tmp_path, counter):
    """README "analyze": with a chat template to compare with (here ``chat_template``,
    counting per turn), the JSON's ``counting_gap`` covers every row; each block's
    markers cost tokens the per-turn sum leaves out, so the template's count is higher."""
    from trajectory_compressor.inspect.analyze import analyze

    src = write_jsonl(tmp_path / "in.jsonl", [row("a", "SHGT", [5, 5, 5, 5]),
                                              row("b", *FITS)])
    config = CompressionConfig(**HAND, summarizer="extractive",
                               chat_template=str(template_file(tmp_path)))
    gap = analyze(str(src), config, counter=counter).to_dict()["counting_gap"]
    assert gap["rows"] == 2
    # Four blocks in "a": at least "<|im_start|>" and "<|im_end|>" (2+ tokens each) per turn.
    assert gap["template_minus_turns"]["min"] >= 4 * 2


def test_analyze_rejects_a_row_the_chat_template_cannot_count(tmp_path, counter):
    """Counting with the chat template, a row it refuses is a rejected row (its location
    and why), and the others are analysed."""
    from trajectory_compressor.inspect.analyze import analyze

    src = write_jsonl(tmp_path / "in.jsonl", [row("a", "SHGT", [5, 5, 5, 5]),
                                              refused_row("b"), row("c", *FITS)])
    config = CompressionConfig(**HAND, summarizer="extractive", token_counting="chat_template",
                               chat_template=str(template_file(tmp_path)))
    data = analyze(str(src), config, counter=counter).to_dict()
    assert (data["rows"], data["rows_rejected"]) == (2, 1)
    [reject] = data["first_rejects"]
    location, reason = reject["location"], reject["error"]
    assert location == f"{src}:2"
    assert reason.startswith("cannot count the row with the chat template:")
    assert "no REFUSE here" in reason


def test_compress_row_raises_row_error_for_a_row_the_template_cannot_count(tmp_path, counter):
    """`TrajectoryCompressor.compress_row`: "Raises `RowError` for a malformed row"; a row
    the chat template refuses cannot be counted, so it is one."""
    import asyncio

    from trajectory_compressor.core.errors import RowError
    from trajectory_compressor.core.extractive import ExtractiveSummarizer

    config = CompressionConfig(**HAND, summarizer="extractive", token_counting="chat_template",
                               chat_template=str(template_file(tmp_path)))
    compressor = TrajectoryCompressor(config, summarizer=ExtractiveSummarizer(counter.count),
                                      counter=counter)
    with pytest.raises(RowError, match="cannot count the row with the chat template"):
        asyncio.run(compressor.compress_row(refused_row("b")))


class Silent(Summarizer):
    """Fails without saying how: no call, no error counted."""

    async def summarize(self, request: SummaryRequest) -> Summary:
        raise SummaryFailed("gone", SummaryUsage())


class Forgetful(Summarizer):
    """Answers with a summary that keeps none of the region's facts."""

    async def summarize(self, request: SummaryRequest) -> Summary:
        return Summary("The agent worked for a while.", "llm")


def test_a_backend_that_fails_without_saying_how_counts_one_other_error(counter):
    """A failed summary falls back to the extractive one, and the row's metrics count
    the failure: a backend that counted no error of its own is one ``other`` error."""
    import asyncio

    c = TrajectoryCompressor(CompressionConfig(**HAND, summarizer="extractive"),
                             summarizer=Silent(), counter=counter)
    result = asyncio.run(c.compress_row(row("b", *FITS)))
    m = result.metrics
    assert m.summary_source == "fallback" and m.was_compressed
    assert (m.summarization_errors, m.errors_by_kind) == (1, {"other": 1})


def test_a_row_left_uncompressed_for_low_fidelity_gives_that_reason(counter):
    """`RowResult.reason` ("why the row ... is still over the limit"): a summary under
    ``min_fidelity`` with ``on_low_fidelity: uncompressed`` leaves the row as it was, over
    the target, for the low-fidelity reason (its text in `core.reasons`); the plan itself
    had a summary that fits."""
    import asyncio

    from trajectory_compressor.core import reasons

    turns = [{"from": r, "value": v} for r, v in [
        ("system", words(10)), ("human", words(5)), ("gpt", words(5)), ("tool", words(5)),
        *[(r, f"open /repo/module_{k}.py " + words(35))
          for k, r in enumerate(["gpt", "tool", "gpt", "tool"])],
        ("gpt", words(5)), ("tool", words(5)), ("gpt", words(5)), ("tool", words(5))]]
    data = {"id": "r", "conversations": turns}
    config = CompressionConfig(**HAND, summarizer="extractive", min_fidelity=0.5,
                               on_low_fidelity="uncompressed", summary_references="off")
    result = asyncio.run(TrajectoryCompressor(config, summarizer=Forgetful(), counter=counter)
                         .compress_row(data))
    assert result.plan.action == "compress" and result.plan.reason == ""
    assert result.metrics.low_fidelity and not result.metrics.was_compressed
    assert result.metrics.still_over_limit
    assert result.reason == reasons.LOW_FIDELITY.text
    assert result.why is not None and result.why.code == "low_fidelity"
