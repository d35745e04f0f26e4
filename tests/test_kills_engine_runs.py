"""The engine's run plumbing at the edges the mutation pass found untested (issue 26,
item 5): batch export and finish, the output layout, the checks before a run writes,
the row stream's sampling and batching, and the writer's stop.

Expected values come from SPEC §7/§12/§17, the README ("Inputs", "What it writes",
"Batch inference", "--sample-percent P --seed N keeps each row with probability P%") and
the docstrings' contracts, worked out by hand.
"""

from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path

import pytest

from tests.fixtures_runs import HAND_CONFIG, HAND_ROWS, row, write_jsonl
from tests.test_writer_routing import make_writer
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import ConfigError
from trajectory_compressor.core.extractive import ExtractiveSummarizer
from trajectory_compressor.dialects.sharegpt import SHAREGPT
from trajectory_compressor.engine import batch
from trajectory_compressor.engine.batch import export_batch, finish_batch
from trajectory_compressor.engine.job import compress_dataset
from trajectory_compressor.engine.layout import plan_layout
from trajectory_compressor.engine.lock import OutputLocked, output_lock
from trajectory_compressor.engine.options import RunOptions
from trajectory_compressor.engine.paths import (
    Written,
    check_existing,
    check_writes,
    input_id,
    run_record,
)
from trajectory_compressor.engine.stream import RowStream
from trajectory_compressor.formats.base import InputFile, temp_path
from trajectory_compressor.formats.hf import StreamShard
from trajectory_compressor.formats.registry import discover_inputs


def batch_config() -> CompressionConfig:
    return CompressionConfig(**HAND_CONFIG, summarization_model="fake-model")


# --- batch: phase 1 ------------------------------------------------------------------------

def test_the_export_counts_unreadable_rows_as_rejected(tmp_path):
    """Two unreadable rows (not JSON; a turn without its text) besides the five readable
    ones: the manifest's ``rows_rejected`` says 2, ``rows`` 5."""
    src = write_jsonl(tmp_path / "in.jsonl",
                      [*HAND_ROWS, {"id": "bad", "conversations": [{"from": "human"}]}],
                      extra_lines=("not json",))
    done = export_batch(str(src), None, batch_config(), tmp_path / "batch")
    assert (done.rows, done.rows_rejected) == (5, 2)
    stats = json.loads(done.manifest.read_text())["stats"]
    assert (stats["rows"], stats["rows_rejected"]) == (5, 2)


def test_every_request_file_is_made_durable_before_it_is_renamed(tmp_path, monkeypatch):
    """Each request file is fsynced (`AtomicFile.flush`), the ones closed early to start
    the next file too: an export the machine loses power after leaves whole files."""
    src = write_jsonl(tmp_path / "in.jsonl",
                      [{**r, "id": f"{r['id']}-{k}"} for k in range(3) for r in HAND_ROWS[1:2]]
                      + [row(f"other-{k}", "SHGTGTGTGTGT", [10, 5, 5, 5, 40 + k, 40, 40, 40,
                                                             5, 5, 5, 5]) for k in (1, 2)])
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    folder = tmp_path / "batch"
    done = export_batch(str(src), None, batch_config(), folder,
                        limits=batch.BatchLimits(max_requests=1))
    assert len(done.files) == 3  # three distinct regions, one request a file
    for f in done.files:
        assert str(temp_path(folder / f.name)) in synced, f.name


def test_an_existing_request_file_that_is_a_folder_is_refused_before_anything(tmp_path):
    """SPEC §12: every request file an export may replace is checked first; a folder
    named like one is refused, and nothing is written."""
    src = write_jsonl(tmp_path / "in.jsonl", HAND_ROWS)
    folder = tmp_path / "batch"
    (folder / "requests-00001.jsonl").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"requests-00001\.jsonl \(the batch request file\) "
                                          "is a folder"):
        export_batch(str(src), None, batch_config(), folder)
    assert sorted(p.name for p in folder.iterdir()) == ["requests-00001.jsonl"]


def test_a_new_export_deletes_only_request_files_the_old_manifest_listed(tmp_path):
    """The previous export's request files that this one does not write go; a file the
    old manifest names that is no request file (``notes.jsonl``) stays."""
    src = write_jsonl(tmp_path / "in.jsonl", HAND_ROWS)
    folder = tmp_path / "batch"
    export_batch(str(src), None, batch_config(), folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"] += [{"name": "requests-00002.jsonl"}, {"name": "notes.jsonl"},
                          {"name": "requests-00003.txt"}]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    for name in ("requests-00002.jsonl", "notes.jsonl", "requests-00003.txt"):
        (folder / name).write_text("{}\n")
    again = export_batch(str(src), None, batch_config(), folder)
    assert [f.name for f in again.files] == ["requests-00001.jsonl"]
    assert sorted(p.name for p in folder.iterdir()) == [
        "manifest.json", "notes.jsonl", "requests-00001.jsonl", "requests-00003.txt"]


# --- batch: phase 2 ------------------------------------------------------------------------

def test_phase_2_refuses_while_an_export_holds_the_folder(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", HAND_ROWS)
    folder = tmp_path / "batch"
    folder.mkdir()
    with output_lock(batch._batch_lock(folder), folder / "manifest.json"), \
            pytest.raises(OutputLocked, match="is being written by another run"):
        finish_batch(str(src), None, batch_config(), folder, [str(tmp_path / "r.jsonl")])


def test_a_manifest_without_its_run_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"manifest\.json does not say which run it was "
                                          "exported for"):
        batch._check_same_run({"version": 1}, {}, tmp_path)


def test_a_changed_setting_is_named_with_both_values_clipped_at_60_characters(tmp_path):
    """A value's repr over 60 characters is cut to 59 and an ellipsis, old and new."""
    now = {"inputs": [], "config": {"summarization_model": "b" * 59}}
    then = {"inputs": [], "config": {"summarization_model": "a" * 59}}
    with pytest.raises(ConfigError) as caught:
        batch._check_same_run({"run": then}, now, tmp_path)
    said = str(caught.value)
    # repr adds two quotes: 61 characters, one over the limit.
    assert f"is '{'b' * 58}… but was '{'a' * 58}… when the requests" in said


def test_a_results_file_named_without_a_pattern_is_taken(tmp_path):
    a = tmp_path / "out.jsonl"
    a.write_text("")
    assert batch._result_paths([str(a)]) == [a]


# --- the output layout ---------------------------------------------------------------------

def folder_of_inputs(tmp_path: Path, *names: str) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    for name in names:
        write_jsonl(data / name, HAND_ROWS[:1])
    return data


def test_a_folder_output_that_is_a_file_is_refused(tmp_path):
    data = folder_of_inputs(tmp_path, "a.jsonl")
    (tmp_path / "out").write_text("")
    with pytest.raises(ConfigError, match="is a file; give a folder for a folder input"):
        plan_layout(str(data), discover_inputs(str(data)), str(tmp_path / "out"),
                    CompressionConfig(), single_file=False)


def test_two_inputs_with_one_output_name_are_refused(tmp_path):
    """``a.jsonl`` and ``a.json`` both give ``a.jsonl`` with ``--output-format jsonl``:
    one would overwrite the other."""
    data = folder_of_inputs(tmp_path, "a.jsonl")
    (data / "a.json").write_text(json.dumps(HAND_ROWS[:1]), encoding="utf-8")
    inputs = discover_inputs(str(data))
    assert len(inputs) == 2
    with pytest.raises(ConfigError, match="would write the same output file"):
        plan_layout(str(data), inputs, str(tmp_path / "out"),
                    CompressionConfig(output_format="jsonl"), single_file=False)


def test_a_folder_outputs_sidecars_are_named_after_the_whole_folder_name(tmp_path):
    """README: a folder ``runs/`` gives ``runs_compressed/`` and ``runs_compressed_
    metrics.json`` beside it; a folder named ``out.jsonl`` is still a folder, its name
    is not cut at the dot."""
    data = folder_of_inputs(tmp_path, "a.jsonl")
    layout = plan_layout(str(data), discover_inputs(str(data)), str(tmp_path / "out.jsonl"),
                         CompressionConfig(), single_file=False)
    assert layout.metrics == tmp_path / "out.jsonl_metrics.json"
    assert layout.rejects == tmp_path / "out.jsonl_rejects.jsonl"


# --- what a run writes, checked first (SPEC §7, §12) --------------------------------------

def test_a_fifo_where_a_file_is_written_is_named_a_fifo(tmp_path):
    fifo = tmp_path / "out.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match=r"is a FIFO \(named pipe\), not a regular file"):
        check_writes([], [Written(fifo, "output")])


def test_a_streamed_shard_is_named_by_its_label():
    shard = StreamShard("org/ds", "train", None, 0, 2)
    source = InputFile(Path(shard.label), "hf", name="train-00000-of-00002", stream=shard)
    assert input_id(source) == "org/ds [train, shard 1/2]"


def layout_with_record(tmp_path: Path, record: dict) -> tuple[list[InputFile], object]:
    src = write_jsonl(tmp_path / "in.jsonl", HAND_ROWS[:1])
    inputs = discover_inputs(str(src))
    layout = plan_layout(str(src), inputs, str(tmp_path / "out.jsonl"), CompressionConfig(),
                         single_file=True)
    layout.metrics.write_text(json.dumps({"run": record}))
    return inputs, layout


def test_an_output_the_recorded_run_did_not_write_is_refused(tmp_path):
    config = CompressionConfig()
    probe_inputs, probe_layout = layout_with_record(tmp_path, {})
    record = run_record(probe_inputs, probe_layout, config, None, 42)
    inputs, layout = layout_with_record(tmp_path, {**record, "outputs": {}})
    (tmp_path / "out.jsonl").write_text("{}\n")
    with pytest.raises(ConfigError, match=r"out\.jsonl already exists and the run recorded "
                                          r"in .*out_metrics\.json did not write it"):
        check_existing(inputs, layout, config, record)


def test_sidecars_of_a_run_over_another_input_are_refused(tmp_path):
    """Only the metrics file is there, from a run over ``other.jsonl`` with the same
    settings: this run over ``in.jsonl`` would replace it."""
    config = CompressionConfig()
    probe_inputs, probe_layout = layout_with_record(tmp_path, {})
    record = run_record(probe_inputs, probe_layout, config, None, 42)
    other = str(tmp_path / "other.jsonl")
    inputs, layout = layout_with_record(tmp_path, {**record, "inputs": [other],
                                                   "outputs": {}})
    with pytest.raises(ConfigError, match=f"belongs to the run over the input {other}; this "
                                          "run over .*in.jsonl would replace it"):
        check_existing(inputs, layout, config, record)


# --- compress_dataset ------------------------------------------------------------------------

def test_five_side_files_are_all_named_without_an_ellipsis(tmp_path, counter, capsys):
    """README "Inputs": up to five side files are named; exactly five need no "...". """
    data = tmp_path / "data"
    data.mkdir()
    write_jsonl(data / "a.jsonl", HAND_ROWS)
    record = json.dumps({"run": {"settings_fingerprint": "f"}})
    for name in ("r0_metrics.json", "r1_metrics.json"):
        (data / name).write_text(record, encoding="utf-8")
    for name in ("r0_over_limit.jsonl", "r0_rejects.jsonl", "r1_rejects.jsonl"):
        (data / name).write_text("", encoding="utf-8")
    compress_dataset(str(data), str(tmp_path / "out"), CompressionConfig(**HAND_CONFIG),
                     summarizer=ExtractiveSummarizer(counter.count),
                     options=RunOptions(quiet=False))
    err = " ".join(capsys.readouterr().err.split())
    assert (f"note: 5 files in {data} passed over: side files of an earlier run "
            "(r0_metrics.json, r0_over_limit.jsonl, r0_rejects.jsonl, r1_metrics.json, "
            "r1_rejects.jsonl)") in err


def test_a_dataset_card_the_tool_did_not_write_is_never_replaced(tmp_path, counter):
    """README: a ``README.md`` dataset card goes beside split shards; one that is not
    ours is refused before anything is written (``--overwrite`` aside)."""
    data = tmp_path / "data"
    data.mkdir()
    write_jsonl(data / "train-00000-of-00001.jsonl", HAND_ROWS)
    out = tmp_path / "out"
    out.mkdir()
    (out / "README.md").write_text("# my notes\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="was not written by trajectory-compressor"):
        compress_dataset(str(data), str(out), CompressionConfig(**HAND_CONFIG),
                         summarizer=ExtractiveSummarizer(counter.count))
    assert (out / "README.md").read_text(encoding="utf-8") == "# my notes\n"
    assert sorted(p.name for p in out.iterdir()) == ["README.md"]


# --- the row stream --------------------------------------------------------------------------

def same_rows(tmp_path: Path, n: int) -> InputFile:
    src = write_jsonl(tmp_path / "in.jsonl", [HAND_ROWS[0]] * n)
    return discover_inputs(str(src))[0]


def test_a_batch_closes_at_the_first_row_that_reaches_batch_chars(tmp_path):
    """Six rows of one size s, ``batch_chars`` 2s + 1: each batch needs three rows to
    reach it (2s falls one short), so two batches of three."""
    source = same_rows(tmp_path, 6)
    size = next(RowStream(SHAREGPT).batches(source))[0].size
    assert size > 1
    stream = RowStream(SHAREGPT, batch_chars=2 * size + 1)
    assert [len(b) for b in stream.batches(source)] == [3, 3]


def test_replay_makes_the_draws_a_resumed_run_skips(tmp_path):
    """A stream that replays the first three draws keeps, of rows 4-8, the rows a stream
    reading all eight keeps, with the same draw counts."""
    source = same_rows(tmp_path, 8)
    whole = RowStream(SHAREGPT, sample_percent=50, seed=7)
    kept = [(e.record.position, e.draws) for b in whole.batches(source) for e in b]
    resumed = RowStream(SHAREGPT, sample_percent=50, seed=7)
    resumed.replay(3)
    again = [(e.record.position, e.draws) for b in resumed.batches(source, skip=3) for e in b]
    assert again == [k for k in kept if k[0] > 3]
    # By hand: rows 4-8 are kept where the seeded draws 4-8 fall below 0.5.
    draws = random.Random(7)
    expected = [(n, n) for n in range(1, 9) if draws.random() < 0.5]
    assert kept == expected


def test_a_row_is_kept_only_when_its_draw_is_below_p(tmp_path):
    """Kept with probability P: a uniform draw in [0, 1) below P/100. A P whose P/100 is
    exactly the first draw does not keep the first row."""
    source = same_rows(tmp_path, 3)
    for seed in range(50):
        draws = random.Random(seed)
        first = draws.random()
        p = first * 100
        for _ in range(4):
            if p / 100 == first:
                break
            p = math.nextafter(p, math.inf if p / 100 < first else -math.inf)
        if p / 100 == first:
            break
    else:
        pytest.fail("no P found with P/100 equal to a first draw")
    rest = [draws.random() for _ in range(2)]
    expected = [n for n, d in zip((2, 3), rest, strict=True) if d < first]
    stream = RowStream(SHAREGPT, sample_percent=p, seed=seed)
    assert [e.record.position for b in stream.batches(source) for e in b] == expected


# --- the writer's stop -----------------------------------------------------------------------

def open_paths() -> list[str]:
    fds = Path("/proc/self/fd")
    found = []
    for fd in fds.iterdir():
        try:
            found.append(os.readlink(fd))
        except OSError:
            continue
    return found


def test_a_stopped_run_closes_the_files_it_keeps_for_a_resume(tmp_path):
    """`stop` with a checkpoint keeps the temporary files, closed: nothing of the run
    stays open in the process (a library caller goes on after an interrupt)."""
    from tests.test_writer_routing import record, result

    writer = make_writer(tmp_path)
    data = {"id": "a", "conversations": [{"from": "human", "value": "hi"}]}
    writer.write(record(1, data), result(data), draws=1)
    writer.write(record(2, data), result(data, over=True, reason="r"), draws=2)
    writer.reject(record(3, raw=b"{x"), "bad", draws=3)
    assert writer.stop() is True
    kept = [temp_path(tmp_path / n) for n in ("out.jsonl", "out_over_limit.jsonl",
                                              "out_rejects.jsonl")]
    assert all(p.exists() for p in kept)
    still_open = open_paths()
    assert not [p for p in kept if str(p) in still_open]


def test_the_export_counts_rows_the_chat_template_refuses_as_rejected(tmp_path):
    """Counted through a chat template that refuses one row: that row is rejected, as
    `compress` rejects it; the five others are rows."""
    template = tmp_path / "strict.jinja"
    template.write_text("{% for m in messages %}{% if m.content == 'boom' %}"
                        "{{ raise_exception('no boom') }}{% endif %}"
                        "{{ m.role }} {{ m.content }}\n{% endfor %}", encoding="utf-8")
    boom = {"id": "boom", "conversations": [{"from": "human", "value": "boom"},
                                            {"from": "gpt", "value": "ok"}]}
    src = write_jsonl(tmp_path / "in.jsonl", [*HAND_ROWS, boom])
    config = batch_config().replace(token_counting="chat_template",
                                    chat_template=str(template))
    done = export_batch(str(src), None, config, tmp_path / "batch")
    assert (done.rows, done.rows_rejected) == (5, 1)


def test_a_checkpoint_of_format_1_loads_and_saving_writes_format_1(tmp_path):
    """The checkpoint format this release writes is version 1: a checkpoint an
    interrupted run wrote (here by hand) resumes, and one saved now says version 1."""
    from trajectory_compressor.engine.checkpoint import Checkpoint

    path = tmp_path / ".out.checkpoint.json"
    path.write_text(json.dumps({"version": 1, "inputs": [], "settings": {"config": {}},
                                "skip": 7, "draws": 3}), encoding="utf-8")
    loaded = Checkpoint.load(path)
    assert (loaded.skip, loaded.draws, loaded.file_index) == (7, 3, 0)
    loaded.save(path)
    assert json.loads(path.read_text(encoding="utf-8"))["version"] == 1
