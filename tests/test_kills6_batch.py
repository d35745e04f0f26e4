"""Round 6 of the mutation kills (issue 26, item 5) in `engine/batch.py`: phase 1 (the
batch export) and what it leaves on disk.

From SPEC §12 and §17, README "Batch inference" and "Every path any command writes is
checked first", and the docstrings of `export_batch`, `RequestFiles` and `_check_batch_writes`:
requests the summary cache (beside the output, or ``cache_path``) already answers are left
out; the export's temporary request files and its ``.batch.lock`` are checked before anything
is written; request files appear only on commit, and a failed or discarded export leaves no
temporary file and no open file behind; tool outputs are distilled before the requests are
made, as an online run does (§18); the manifest says which run it was exported for.

Expected values are worked out by hand on "word" rows (``words(n)`` is ``n`` tokens with the
bundled tokenizer) or taken from an online run against the loopback fake server.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path

import pytest

from tests.fake_llm_server import FakeLLMServer, default_reply
from tests.fixtures_runs import row, words, write_jsonl
from tests.open_files import open_files_under
from tests.test_batch import answer, request_files
from tests.test_kills5_engine import batch_config, sources, two_to_summarize
from trajectory_compressor.core.errors import ConfigError
from trajectory_compressor.counting.identity import tokenizer_identity
from trajectory_compressor.engine import batch
from trajectory_compressor.engine.batch import (
    BatchLimits,
    RequestFiles,
    export_batch,
    finish_batch,
)
from trajectory_compressor.engine.options import RunOptions
from trajectory_compressor.formats.registry import discover_inputs
from trajectory_compressor.summarizers.cache import SummaryCache


def line(n: int) -> bytes:
    return f'{{"n": {n:05d}}}\n'.encode()


# The summary cache an export consults (README: "requests the summary cache already answers
# are left out"; phase 2 stores results "in the summary cache (beside the output, or
# --cache-path)").


def exported_then_finished(src: str, out: Path, config, folder: Path) -> None:
    """Phase 1 then phase 2 with every request answered: the cache holds both summaries."""
    assert export_batch(src, str(out), config, folder).stats.requests == 2
    answer(request_files(folder), folder / "results.jsonl")
    report, _ = finish_batch(src, str(out), config, folder, [str(folder / "results.jsonl")])
    assert (report.accepted, report.missing) == (2, 0)


def test_an_export_leaves_out_what_the_cache_beside_the_output_answers(tmp_path):
    """A single input file: phase 2 stored both summaries in the cache beside the output
    (``out_summary_cache.sqlite``, the file an online run into ``out.jsonl`` uses), and the
    rows got them; exporting the same run again then asks for nothing. With ``--no-cache``
    no cache leaves a request out."""
    src = two_to_summarize(tmp_path / "in.jsonl")
    out = tmp_path / "run" / "out.jsonl"
    exported_then_finished(str(src), out, batch_config(), tmp_path / "b1")
    assert sources(out) == {"a": "llm", "short": None, "b": "llm"}
    assert (tmp_path / "run" / "out_summary_cache.sqlite").is_file()

    again = export_batch(str(src), str(out), batch_config(), tmp_path / "b2")
    assert (again.stats.requests, again.stats.cached) == (0, 2)
    assert again.files == []
    uncached = export_batch(str(src), str(out), batch_config(cache_enabled=False),
                            tmp_path / "b3")
    assert (uncached.stats.requests, uncached.stats.cached) == (2, 0)


def test_an_export_consults_the_configured_cache_path(tmp_path):
    """``summarization.cache_path`` names the cache whatever the output: phase 2 of one run
    fills it, and an export of another output with the same cache path asks for nothing;
    nothing is stored beside the output."""
    src = two_to_summarize(tmp_path / "in.jsonl")
    shared = tmp_path / "shared.sqlite"
    config = batch_config(cache_path=str(shared))
    exported_then_finished(str(src), tmp_path / "one" / "out.jsonl", config, tmp_path / "b1")
    assert shared.is_file()
    assert not (tmp_path / "one" / "out_summary_cache.sqlite").exists()
    assert sources(tmp_path / "one" / "out.jsonl") == {"a": "llm", "short": None, "b": "llm"}

    other = export_batch(str(src), str(tmp_path / "two" / "out.jsonl"), config, tmp_path / "b2")
    assert (other.stats.requests, other.stats.cached) == (0, 2)


def test_a_folder_input_uses_the_output_folders_cache(tmp_path):
    """A folder input writes a folder output, its cache with it: phase 2 stores the results
    where the run reads them (both rows get the batch's summaries), and an export again
    finds both there."""
    data = tmp_path / "data"
    data.mkdir()
    two_to_summarize(data / "in.jsonl")
    out = tmp_path / "outdir"
    exported_then_finished(str(data), out, batch_config(), tmp_path / "b1")
    assert sources(out / "in.jsonl") == {"a": "llm", "short": None, "b": "llm"}
    again = export_batch(str(data), str(out), batch_config(), tmp_path / "b2")
    assert (again.stats.requests, again.stats.cached) == (0, 2)


# What an export checks before it writes (SPEC §12: "every path a run writes (batch files
# ...) is checked ... before anything is written"; a temporary file is written in place).


def test_a_temporary_request_file_that_is_a_link_is_refused(tmp_path):
    """`_check_batch_writes`: the folder's ``.requests-*.jsonl.partial`` are temporary
    request files an export may replace or delete; a symbolic link there is refused before
    anything is written (the link and what it names are kept)."""
    src = two_to_summarize(tmp_path / "in.jsonl")
    folder = tmp_path / "batch"
    folder.mkdir()
    mine = tmp_path / "mine.txt"
    mine.write_text("mine", encoding="utf-8")
    link = folder / ".requests-00001.jsonl.partial"
    link.symlink_to(mine)
    with pytest.raises(ConfigError, match=r"\(the temporary batch request file\) is a "
                                          r"symbolic link"):
        export_batch(str(src), None, batch_config(), folder)
    assert link.is_symlink() and mine.read_text(encoding="utf-8") == "mine"
    assert sorted(p.name for p in folder.iterdir()) == [link.name]


def test_a_batch_lock_that_is_a_link_is_refused(tmp_path):
    """The export's ``.batch.lock`` (README: "A batch export holds .batch.lock in its
    --batch-dir") is opened and written in place: a link there is refused, and the file it
    names is not created."""
    src = two_to_summarize(tmp_path / "in.jsonl")
    folder = tmp_path / "batch"
    folder.mkdir()
    elsewhere = tmp_path / "elsewhere.lock"
    (folder / ".batch.lock").symlink_to(elsewhere)
    with pytest.raises(ConfigError, match=r"\(the lock file of the batch folder\) is a "
                                          r"symbolic link"):
        export_batch(str(src), None, batch_config(), folder)
    assert not elsewhere.exists()
    assert sorted(p.name for p in folder.iterdir()) == [".batch.lock"]


# Request files: written under temporary names, one open at a time, nothing left behind.


def test_request_files_are_closed_as_the_next_one_starts(tmp_path):
    """`RequestFiles`: a new file starts whenever the next line would pass a limit; the
    full one is done then, so an export holds one request file open, however many it
    writes; after `commit` none."""
    files = RequestFiles(tmp_path, BatchLimits(max_requests=1, max_bytes=1000))
    for n in range(4):
        files.add(line(n))
        assert open_files_under(tmp_path) == [str((tmp_path / f".requests-{n + 1:05d}"
                                                    ".jsonl.partial").resolve())]
    assert [f.requests for f in files.commit()] == [1, 1, 1, 1]
    assert open_files_under(tmp_path) == []
    assert [(tmp_path / f"requests-{n + 1:05d}.jsonl").read_bytes() for n in range(4)] == [
        line(n) for n in range(4)]


def test_discard_deletes_every_temporary_file_and_closes_it(tmp_path):
    """`RequestFiles.discard`: "Delete what was written (the final names are never
    touched)": no ``.partial`` file stays, none stays open, an earlier export's request file
    is kept."""
    (tmp_path / "requests-00001.jsonl").write_bytes(b"earlier\n")
    files = RequestFiles(tmp_path, BatchLimits(max_requests=2, max_bytes=1000))
    for n in range(5):
        files.add(line(n))
    assert len(list(tmp_path.glob(".requests-*.jsonl.partial"))) == 3
    files.discard()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["requests-00001.jsonl"]
    assert (tmp_path / "requests-00001.jsonl").read_bytes() == b"earlier\n"
    assert open_files_under(tmp_path) == []


def uneven_requests(path: Path) -> Path:
    """Two rows to summarize whose requests differ in size: row "a"'s middle is 160 tokens,
    row "z"'s 4 x 200 (a much longer prompt)."""
    return write_jsonl(path, [
        row("a", "SHGTGTGTGTGT", [10, 5, 5, 5, 40, 40, 40, 40, 5, 5, 5, 5]),
        row("z", "SHGTGTGTGTGT", [10, 5, 5, 5, 200, 200, 200, 200, 5, 5, 5, 5])])


def test_an_export_that_fails_midway_leaves_the_previous_one_and_nothing_open(tmp_path):
    """README: "an interrupted export leaves the previous one as it was". A byte limit the
    first request fits exactly and the second passes: the export stops with the
    configuration error after it wrote the first file under its temporary name; the
    folder then holds the previous export only, and neither a request file nor the summary
    cache it consulted stays open."""
    src = uneven_requests(tmp_path / "in.jsonl")
    cache = tmp_path / "cache.sqlite"
    SummaryCache(cache, tokenizer_identity(batch_config())).close()
    config = batch_config(cache_path=str(cache))
    folder = tmp_path / "batch"
    export_batch(str(src), None, config, folder)
    [first, second] = request_files(folder)[0].read_bytes().splitlines(keepends=True)
    assert len(first) < len(second)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    with pytest.raises(ConfigError, match="over the limit of") as caught:
        export_batch(str(src), None, config, folder, limits=BatchLimits(10, len(first)))
    assert f"{len(second):,} bytes" in str(caught.value)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    # (While the error is held, so is the export's frame: what it did not close is open.)
    assert open_files_under(tmp_path) == []


def test_an_export_after_a_request_file_was_deleted_by_hand(tmp_path):
    """An export deletes the files of the previous export it does not write again; one
    the user deleted already is no error."""
    src = two_to_summarize(tmp_path / "in.jsonl")
    folder = tmp_path / "batch"
    export_batch(str(src), None, batch_config(), folder, limits=BatchLimits(1, 10**6))
    assert sorted(p.name for p in folder.iterdir()) == [
        "manifest.json", "requests-00001.jsonl", "requests-00002.jsonl"]
    (folder / "requests-00002.jsonl").unlink()
    again = export_batch(str(src), None, batch_config(), folder)
    assert [(f.name, f.requests) for f in again.files] == [("requests-00001.jsonl", 2)]
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", "requests-00001.jsonl"]


# The requests are the online run's (README: "body is byte for byte the chat-completions
# body the openai backend would send", "custom_id the request's summary-cache key"; §18:
# "the summary cache keys on the distilled text").


def test_tool_outputs_are_distilled_before_the_requests_are_made(tmp_path):
    """``compression.distill: safe``: a tool output of twelve identical progress lines is
    distilled before planning, in the export as online: the exported bodies and keys are
    the online run's, and no prompt holds the twelve lines."""
    from trajectory_compressor.engine.job import compress_dataset

    repeated = "\n".join(["progress 50% done"] * 12)
    rows = []
    for name, size in (("a", 40), ("b", 41)):
        r = row(name, "SHGTGTGTGTGT", [10, 5, 5, 5, size, size, size, size, 5, 5, 5, 5])
        r["conversations"][5]["value"] = repeated + "\n" + words(30)
        rows.append(r)
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    config = batch_config(distill="safe")
    bodies: list[dict] = []

    def reply(data: dict) -> str:
        bodies.append(data)
        return default_reply(data)

    online = tmp_path / "online" / "out.jsonl"
    with FakeLLMServer(reply=reply).in_thread() as server:
        compress_dataset(str(src), str(online), config.replace(base_url=server.url))
    assert len(bodies) == 2
    folder = tmp_path / "batch"
    exported = export_batch(str(src), None, config, folder)
    assert exported.stats.requests == 2
    lines = [json.loads(x) for f in request_files(folder) for x in f.read_text().splitlines()]
    key = lambda b: json.dumps(b, sort_keys=True)  # noqa: E731
    assert sorted(key(x["body"]) for x in lines) == sorted(key(b) for b in bodies)
    with sqlite3.connect(online.with_name("out_summary_cache.sqlite")) as db:
        online_keys = {k for (k,) in db.execute("SELECT key FROM summaries")}
    assert {x["custom_id"] for x in lines} == online_keys
    prompts = [m["content"] for x in lines for m in x["body"]["messages"]]
    assert any("progress 50% done" in p for p in prompts)
    assert not any(repeated in p for p in prompts)


# The manifest: which run the requests were exported for.


def test_the_manifest_is_format_1_and_fingerprints_the_run(tmp_path):
    """The manifest this release writes is version 1 of its format (README); its
    ``fingerprint`` names the run: the same for the same run, another for other settings."""
    src = two_to_summarize(tmp_path / "in.jsonl")
    folder = tmp_path / "batch"

    def manifest() -> dict:
        return json.loads((folder / "manifest.json").read_text(encoding="utf-8"))

    export_batch(str(src), None, batch_config(), folder)
    first = manifest()
    assert (first["format"], first["version"]) == ("trajectory-compressor batch requests", 1)
    assert isinstance(first["fingerprint"], str)
    int(first["fingerprint"], 16)  # hex digits
    export_batch(str(src), None, batch_config(), folder)
    assert manifest()["fingerprint"] == first["fingerprint"]
    export_batch(str(src), None, batch_config(distill="safe"), folder)
    assert manifest()["fingerprint"] != first["fingerprint"]


def test_the_batch_folder_and_its_missing_parents_are_created(tmp_path):
    """README: under ``--batch-dir``, "the folder (and any missing parent) is created"."""
    src = two_to_summarize(tmp_path / "in.jsonl")
    folder = tmp_path / "runs" / "2026" / "batch"
    exported = export_batch(str(src), None, batch_config(), folder)
    assert exported.folder == folder and exported.stats.requests == 2
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", "requests-00001.jsonl"]


def test_the_seed_is_part_of_the_run_only_with_a_sample(tmp_path):
    """`batch_fingerprint`: "the sample" decides the requests. With ``--sample-percent`` the
    seed picks the rows, so phase 2 with another seed is refused; without a sample the seed
    picks nothing, and another seed is the same run."""
    src = two_to_summarize(tmp_path / "in.jsonl")
    folder = tmp_path / "batch"
    export_batch(str(src), None, batch_config(), folder, sample_percent=50, seed=1)
    (folder / "r.jsonl").write_text("", encoding="utf-8")
    with pytest.raises(ConfigError, match="--sample-percent/--seed differ"):
        finish_batch(str(src), None, batch_config(), folder, [str(folder / "r.jsonl")],
                     sample_percent=50, seed=2)
    assert not (tmp_path / "in_compressed.jsonl").exists()

    inputs = discover_inputs(str(src))
    config = batch_config()
    unsampled = [batch.batch_fingerprint(inputs, config, RunOptions(seed=seed))
                 for seed in (1, 2)]
    assert unsampled[0] == unsampled[1]
    assert unsampled[0]["sample"] == {"sample_percent": None, "seed": None}
    sampled = [batch.batch_fingerprint(inputs, config, RunOptions(sample_percent=50, seed=s))
               for s in (1, 2)]
    assert sampled[0]["sample"] == {"sample_percent": 50, "seed": 1}
    assert sampled[0] != sampled[1]


def test_batch_limits_stay_as_validated():
    """`BatchLimits` checks its values when made; it is frozen, so limits an export was
    given cannot become invalid afterwards (and equal limits are one hashable value)."""
    limits = BatchLimits(max_requests=3, max_bytes=100)
    with pytest.raises(dataclasses.FrozenInstanceError):
        limits.max_requests = 0  # type: ignore[misc]
    assert limits.max_requests == 3
    assert {limits, BatchLimits(3, 100)} == {BatchLimits(3, 100)}
