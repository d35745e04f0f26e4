"""Round 6 of the mutation kills (issue 26, item 5) in `engine/paths.py`: what a run
writes is checked before any byte is written (SPEC §7/§12, README "Nothing is ever
written over an input or over another run's output"), and who wrote an existing output.

Through the real CLI in this process where the refusal is what a user sees; the library
functions directly where a contract of their own is tested (`check_existing`'s ``resume``,
`check_written_file`, `settings_digest`, `input_id`). Expected messages are the README's
and the module's wording, worked out by hand for each path.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.cli_helpers import invoke_cli
from tests.fixtures_runs import row, write_jsonl
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import ConfigError
from trajectory_compressor.engine.layout import plan_layout
from trajectory_compressor.engine.paths import (
    Written,
    check_existing,
    check_written_file,
    input_id,
    run_record,
    settings_digest,
)
from trajectory_compressor.formats.base import InputFile
from trajectory_compressor.formats.registry import discover_inputs

EXTRACTIVE = ("--summarizer", "extractive")
# An LLM backend (so the summary cache is used) on a loopback port no test listens on:
# the refusals come before any request.
NOWHERE = ("--summarizer", "openai", "--base-url", "http://127.0.0.1:9/v1", "--model", "m")
CHOOSE = "choose another output (-o), --cache-path or output.output_suffix"
ROWS = [row("a", "SHGT", [5, 5, 5, 5]), row("b", "SHGT", [5, 5, 5, 5])]


def refused(folder: Path, *args: str) -> str:
    """The one-line error of a compress run in ``folder`` that must exit 2."""
    run = invoke_cli("compress", *args, cwd=folder)
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert run.stderr.startswith("error: ") and run.stderr.count("\n") == 1, run.stderr
    return run.stderr.strip()


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# --- every sidecar is checked against the inputs (README: "the sidecars, the checkpoint,
# the summary cache") -------------------------------------------------------------------

def test_an_input_named_like_the_over_limit_file_is_refused(tmp_path):
    """``-o data.jsonl`` writes ``data_over_limit.jsonl`` (SPEC §7): that is the input. The
    two paths are spelled alike, so the message adds no "(the same file ...)"."""
    write_jsonl(tmp_path / "data_over_limit.jsonl", ROWS)
    before = (tmp_path / "data_over_limit.jsonl").read_bytes()
    assert refused(tmp_path, "data_over_limit.jsonl", "-o", "data.jsonl", *EXTRACTIVE) == (
        "error: data_over_limit.jsonl (the over-limit file) would overwrite the input "
        f"data_over_limit.jsonl; nothing was written; {CHOOSE}")
    assert names(tmp_path) == ["data_over_limit.jsonl"]
    assert (tmp_path / "data_over_limit.jsonl").read_bytes() == before


def test_an_input_named_like_the_checkpoint_is_refused(tmp_path):
    """The checkpoint of ``-o data.jsonl`` is ``.data.checkpoint.json`` beside it: a `.json`
    array input of that name would be written over."""
    src = tmp_path / ".data.checkpoint.json"
    src.write_text(json.dumps(ROWS), encoding="utf-8")
    assert refused(tmp_path, ".data.checkpoint.json", "-o", "data.jsonl", *EXTRACTIVE) == (
        "error: .data.checkpoint.json (the checkpoint) would overwrite the input "
        f".data.checkpoint.json; nothing was written; {CHOOSE}")
    assert names(tmp_path) == [".data.checkpoint.json"]
    assert json.loads(src.read_text(encoding="utf-8")) == ROWS


def test_a_dataset_card_that_is_a_folder_is_refused_even_with_overwrite(tmp_path):
    """Split shards get a ``README.md`` card beside them (README "Outputs"); ``--overwrite``
    replaces a card, but a folder there is never a file to replace."""
    data = tmp_path / "data"
    data.mkdir()
    write_jsonl(data / "train-00000-of-00001.jsonl", ROWS)
    (tmp_path / "out" / "README.md").mkdir(parents=True)
    assert refused(tmp_path, "data", "-o", "out", *EXTRACTIVE, "--overwrite") == (
        "error: out/README.md (the dataset card (the splits, for datasets.load_dataset)) is a "
        "folder; a file is written there")
    assert names(tmp_path / "out") == ["README.md"]
    assert names(tmp_path / "out" / "README.md") == []


@pytest.mark.parametrize("side", ["-wal", "-shm", "-journal"])
def test_the_files_sqlite_keeps_beside_the_cache_are_checked_too(tmp_path, side):
    """SQLite writes ``<cache>-wal``, ``-shm`` or ``-journal`` beside an open database: a
    folder of such a name would take the cache's writes."""
    write_jsonl(tmp_path / "in.jsonl", ROWS)
    (tmp_path / f"out_summary_cache.sqlite{side}").mkdir()
    assert refused(tmp_path, "in.jsonl", "-o", "out.jsonl", *NOWHERE) == (
        f"error: out_summary_cache.sqlite{side} (the summary cache) is a folder; a file is "
        "written there")
    assert names(tmp_path) == ["in.jsonl", f"out_summary_cache.sqlite{side}"]


def test_an_extractive_run_writes_no_cache_so_none_is_checked(tmp_path):
    """README: the cache holds LLM summaries (``openai`` and ``local``): an extractive run
    opens none, so a folder where the cache would be is no reason to refuse it."""
    write_jsonl(tmp_path / "in.jsonl", ROWS)
    (tmp_path / "out_summary_cache.sqlite").mkdir()
    run = invoke_cli("compress", "in.jsonl", "-o", "out.jsonl", *EXTRACTIVE, "--quiet",
                     cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert [json.loads(line)["id"] for line in
            (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()] == ["a", "b"]
    assert names(tmp_path / "out_summary_cache.sqlite") == []


def test_a_cache_name_too_long_for_the_file_system_is_a_usage_error(tmp_path):
    """A name over the file system's limit (255 bytes) cannot be created: exit 2 (SPEC §7,
    a usage error) naming the cache, nothing written; not an I/O error (exit 4) while the
    paths are checked."""
    write_jsonl(tmp_path / "in.jsonl", ROWS)
    cache = "c" * 300 + ".sqlite"
    message = refused(tmp_path, "in.jsonl", "-o", "out.jsonl", *NOWHERE, "--cache-path", cache)
    assert message.startswith(f"error: cannot use the summary cache {cache}: "), message
    assert message.endswith("; choose another file with --cache-path or turn the cache off "
                            "with --no-cache")
    assert names(tmp_path) == ["in.jsonl"]


# --- an existing output: replaced by a rerun or a resume of its own run ------------------

def foreign_output(tmp_path: Path) -> tuple[list[InputFile], object, CompressionConfig, dict]:
    """``out.jsonl`` exists with no metrics file beside it: no run of this tool wrote it."""
    src = write_jsonl(tmp_path / "in.jsonl", ROWS)
    inputs = discover_inputs(str(src))
    config = CompressionConfig(summarizer="extractive")
    layout = plan_layout(str(src), inputs, str(tmp_path / "out.jsonl"), config,
                         single_file=True)
    (tmp_path / "out.jsonl").write_text("{}\n", encoding="utf-8")
    return inputs, layout, config, run_record(inputs, layout, config, None, 42)


def test_a_checkpoint_alone_does_not_make_a_run_a_resume(tmp_path):
    """Only ``--resume`` continues a run (``resume`` is off unless given): a checkpoint
    beside a foreign output does not let a fresh run replace it."""
    inputs, layout, config, record = foreign_output(tmp_path)
    layout.checkpoint.write_text("{}", encoding="utf-8")
    for call in ({}, {"resume": False}):
        with pytest.raises(ConfigError, match=r"out\.jsonl already exists, and there is no "
                                              r"metrics file .*out_metrics\.json beside it"):
            check_existing(inputs, layout, config, record, **call)
    check_existing(inputs, layout, config, record, resume=True)  # the checkpoint decides


def test_a_resume_without_a_checkpoint_is_checked_like_a_fresh_run(tmp_path):
    """``--resume`` with nothing to resume starts fresh: the foreign output is refused."""
    inputs, layout, config, record = foreign_output(tmp_path)
    with pytest.raises(ConfigError, match=r"out\.jsonl already exists, and there is no "):
        check_existing(inputs, layout, config, record, resume=True)
    check_existing(inputs, layout, config, record, overwrite=True)


def test_a_written_path_is_a_value():
    written = Written(Path("out.jsonl"), "output")
    assert written.kind == "file"
    assert {written, Written(Path("out.jsonl"), "output", "file")} == {written}
    with pytest.raises(dataclasses.FrozenInstanceError):
        written.kind = "temp"  # type: ignore[misc]


def test_an_input_stream_without_a_label_is_named_by_its_path():
    """`input_id`: a stream's ``label`` when it has one (even where its path differs), else
    the input's path as given."""
    assert input_id(InputFile(Path("org/ds/train"), "hf", stream=object())) == "org/ds/train"
    labelled = SimpleNamespace(label="org/ds [train, shard 1/1]")
    assert input_id(InputFile(Path("elsewhere"), "hf", stream=labelled)) == \
        "org/ds [train, shard 1/1]"


# --- the settings' fingerprint -------------------------------------------------------------

def test_the_seed_is_part_of_the_fingerprint_only_with_a_sample():
    """README: ``--sample-percent P --seed N`` keeps each row with probability P%: the seed
    picks the rows only when there is a sample."""
    config = CompressionConfig()
    assert settings_digest(config, None, 1) == settings_digest(config, None, 2)
    assert settings_digest(config, 50.0, 1) != settings_digest(config, 50.0, 2)
    assert settings_digest(config, 50.0, 1) != settings_digest(config, None, 1)


def test_a_setting_that_is_not_ascii_has_a_fingerprint():
    """A notice text in any language is a setting like another: hashed, not an error."""
    config = CompressionConfig(summary_notice_text="\n\nRésumé des réponses précédentes…")
    digest = settings_digest(config, None, 42)
    assert len(digest) == 64 and set(digest) <= set("0123456789abcdef")
    assert digest != settings_digest(CompressionConfig(), None, 42)


def test_the_fingerprint_does_not_depend_on_the_order_the_settings_are_listed_in():
    """A fingerprint of the settings (README "Outputs"): the same settings listed in
    another order (another version's field order) are the same settings."""
    config = CompressionConfig()
    settings = config.fingerprint_dict()
    reordered = CompressionConfig()
    reordered.fingerprint_dict = lambda: dict(reversed(settings.items()))  # type: ignore
    assert list(reordered.fingerprint_dict()) != list(settings)
    assert settings_digest(reordered, None, 42) == settings_digest(config, None, 42)


# --- a single file another command writes (analyze --json, report --html) ----------------

def test_a_page_for_a_dataset_that_is_no_local_path_is_checked_alone(tmp_path):
    """An input that names no local file (a hub name, say) has no file to protect: the
    page is checked for itself, and a folder can take it."""
    check_written_file(tmp_path / "page.html", str(tmp_path / "gone.jsonl"), "--html file")
    with pytest.raises(ConfigError, match=r"page\.html \(the --html file\) is a folder"):
        (tmp_path / "page.html").mkdir()
        check_written_file(tmp_path / "page.html", str(tmp_path / "gone.jsonl"),
                           "--html file")


def test_a_protected_file_is_never_written_over(tmp_path):
    """``protected``: a run's own inputs (from its metrics), which the spec may not name."""
    kept = write_jsonl(tmp_path / "in.jsonl", ROWS)
    with pytest.raises(ConfigError, match=r"in\.jsonl \(the --html file\) would overwrite "
                                          r"the input .*in\.jsonl; nothing was written; "
                                          r"choose another name for the --html file"):
        check_written_file(kept, str(tmp_path / "gone.jsonl"), "--html file",
                           protected=[kept])


def test_a_glob_with_every_pattern_character_is_expanded(tmp_path):
    """A glob spelled with ``[``, ``?`` and ``*`` names the files it matches."""
    src = write_jsonl(tmp_path / "ab.jsonl", ROWS)
    spec = str(tmp_path / "[a]?*.jsonl")
    with pytest.raises(ConfigError, match=r"ab\.jsonl \(the --json file\) would overwrite "
                                          r"the input"):
        check_written_file(src, spec, "--json file")
    check_written_file(tmp_path / "report.json", spec, "--json file")
