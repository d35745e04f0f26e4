"""Resume checkpoints: what a resume must match (the fingerprints), and the file itself.

`test_resume.py` interrupts real runs; these tests check the refusals one by one, fast,
including the one a real run cannot show cheaply: another ``--seed`` with the same
``--sample-percent`` draws other rows, so it must not resume.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import ResumeError
from trajectory_compressor.engine.checkpoint import (
    VERSION,
    Checkpoint,
    check_resumable,
    input_fingerprint,
    settings_fingerprint,
)
from trajectory_compressor.formats.base import InputFile

OUTPUTS = {Path("/data/in.jsonl"): Path("/data/out.jsonl")}


def settings(config: CompressionConfig | None = None, sample: float | None = None,
             seed: int = 42, outputs: dict[Path, Path] | None = None) -> dict:
    return settings_fingerprint(config or CompressionConfig(), outputs or OUTPUTS, sample, seed)


def checkpoint_of(inputs: list[dict], saved: dict) -> Checkpoint:
    return Checkpoint(inputs=inputs, settings=saved)


def refusal(old: dict, new: dict, inputs: tuple[list, list] = ([], [])) -> str:
    with pytest.raises(ResumeError) as info:
        check_resumable(checkpoint_of(inputs[0], old), inputs[1], new)
    return str(info.value)


def test_the_same_settings_resume() -> None:
    check_resumable(checkpoint_of([], settings(sample=30, seed=7)), [],
                    settings(sample=30, seed=7))


def test_another_seed_with_the_same_sample_percent_is_refused() -> None:
    message = refusal(settings(sample=30, seed=7), settings(sample=30, seed=8))
    assert message.startswith("cannot resume: --sample-percent/--seed differ")
    assert message.endswith("run without --resume to start over")


def test_another_sample_percent_is_refused() -> None:
    assert "--sample-percent/--seed" in refusal(settings(sample=30), settings(sample=31))
    assert "--sample-percent/--seed" in refusal(settings(sample=None), settings(sample=30))


def test_the_seed_does_not_matter_without_sampling() -> None:
    # Nothing is drawn: the output is the same whatever the seed.
    assert settings(seed=1) == settings(seed=2)
    check_resumable(checkpoint_of([], settings(seed=1)), [], settings(seed=2))


def test_a_setting_that_shapes_the_rows_is_refused_by_name() -> None:
    old = settings(CompressionConfig(target_max_tokens=500, summary_target_tokens=100))
    new = settings(CompressionConfig(target_max_tokens=600, summary_target_tokens=100))
    assert refusal(old, new) == (
        "cannot resume: the setting compression.target_max_tokens is 600 but was 500 in "
        "the interrupted run; run without --resume to start over")
    notice = settings(CompressionConfig(add_summary_notice=False))
    assert "output.add_summary_notice is False but was True" in refusal(settings(), notice)


@pytest.mark.parametrize("knob", [
    {"num_workers": 9}, {"max_concurrent_requests": 3}, {"request_timeout": 9.0},
    {"batch_rows": 7}, {"window_rows": 5}, {"window_mb": 1.5}, {"checkpoint_rows": 3},
    {"checkpoint_seconds": 2.0}, {"cache_enabled": False}, {"cache_path": "/tmp/c.sqlite"},
    {"metrics_enabled": False}, {"max_retries": 9}, {"retry_delay": 0.5},
    {"allow_fallback": True}, {"allow_insecure_http": True},
])
def test_settings_that_do_not_shape_the_rows_may_change(knob: dict) -> None:
    check_resumable(checkpoint_of([], settings()), [],
                    settings(CompressionConfig(**knob)))


def test_credentials_in_urls_are_not_stored_and_do_not_block_a_resume() -> None:
    old = settings(CompressionConfig(base_url="https://user:one@host/v1"))
    new = settings(CompressionConfig(base_url="https://user:two@host/v1"))
    assert old["config"]["base_url"] == "https://host/v1"
    check_resumable(checkpoint_of([], old), [], new)


def test_other_outputs_are_refused() -> None:
    other = {Path("/data/in.jsonl"): Path("/data/elsewhere.jsonl")}
    assert refusal(settings(), settings(outputs=other)) == (
        "cannot resume: the output paths differ from the interrupted run's; run without "
        "--resume to start over")


def test_inputs_that_changed_are_refused(tmp_path: Path) -> None:
    a = tmp_path / "a.jsonl"
    a.write_text('{"x": 1}\n')
    before = input_fingerprint([InputFile(a, "jsonl")])
    assert before == [{"path": str(a.resolve()), "format": "jsonl", "size": 9,
                       "mtime_ns": a.stat().st_mtime_ns}]
    check_resumable(checkpoint_of(before, settings()), before, settings())
    a.write_text('{"x": 2}\n')  # same size
    os.utime(a, ns=(1, 1))
    after = input_fingerprint([InputFile(a, "jsonl")])
    message = refusal(settings(), settings(), (before, after))
    assert message.startswith(f"cannot resume: the input {a.resolve()} is not the one")
    message = refusal(settings(), settings(), (before, before + before))
    assert message.startswith("cannot resume: the interrupted run read 1 input files and "
                              "this one reads 2")


def test_a_checkpoint_reads_back_as_written(tmp_path: Path) -> None:
    path = tmp_path / ".out.checkpoint.json"
    saved = Checkpoint(inputs=[{"path": "/a", "size": 1}], settings=settings(sample=5.0),
                       file_index=2, skip=17, output={"parts": 3}, over_limit=120,
                       rejects=44, draws=9, metrics={"total_trajectories": 16}, elapsed=1.5,
                       started="2025-01-01T00:00:00")
    saved.save(path)
    assert Checkpoint.load(path) == saved


def test_a_checkpoint_of_another_version_or_unreadable_is_refused(tmp_path: Path) -> None:
    path = tmp_path / ".out.checkpoint.json"
    Checkpoint(inputs=[], settings={}, version=VERSION + 1).save(path)
    with pytest.raises(ResumeError, match="written by an incompatible version"):
        Checkpoint.load(path)
    path.write_text("{not json")
    with pytest.raises(ResumeError, match="is unreadable"):
        Checkpoint.load(path)
    path.write_text(f'{{"version": {VERSION}, "surprise": 1}}')
    with pytest.raises(ResumeError, match="is unreadable"):
        Checkpoint.load(path)


def test_a_stream_shard_is_identified_by_its_dataset_split_and_shard(tmp_path: Path) -> None:
    from trajectory_compressor.formats.hf import StreamShard

    shard = StreamShard("org/data", "train", None, 0, 2)
    source = InputFile(tmp_path / "never-read", "hf", stream=shard)  # no file behind it
    assert input_fingerprint([source]) == [{"stream": {
        "dataset": "org/data", "split": "train", "data_files": None, "index": 0, "shards": 2}}]
    other = InputFile(tmp_path / "never-read", "hf",
                      stream=StreamShard("org/data", "train", None, 1, 2))
    message = refusal(settings(), settings(),
                      (input_fingerprint([source]), input_fingerprint([other])))
    assert message.startswith("cannot resume: the input org/data is not the one")


def test_a_checkpoint_with_only_its_fingerprints_starts_at_the_beginning(tmp_path: Path) -> None:
    path = tmp_path / ".out.checkpoint.json"
    path.write_text(f'{{"inputs": [], "settings": {{}}, "version": {VERSION}}}')
    loaded = Checkpoint.load(path)
    assert (loaded.file_index, loaded.skip, loaded.over_limit, loaded.rejects,
            loaded.draws, loaded.output, loaded.metrics, loaded.elapsed) == (
        0, 0, 0, 0, 0, None, {}, 0.0)


def test_a_long_setting_is_quoted_cut_to_60_characters() -> None:
    old = settings(CompressionConfig(summary_notice_text="a" * 100))
    new = settings(CompressionConfig(summary_notice_text="b" * 100))
    # repr: a quote and 100 letters; cut to 59 characters and an ellipsis.
    assert refusal(old, new) == (
        "cannot resume: the setting output.summary_notice_text is '" + "b" * 58 + "… but "
        "was '" + "a" * 58 + "… in the interrupted run; run without --resume to start over")


def test_another_tokenizer_identity_is_refused() -> None:
    # The engine adds the tokenizer's identity (files, counting mode, template) to the
    # settings: counts from other files or another mode would plan other regions.
    old = {**settings(), "tokenizer": {"name": "deepseek-v4", "counting": "turns"}}
    same = {**settings(), "tokenizer": {"name": "deepseek-v4", "counting": "turns"}}
    other = {**settings(), "tokenizer": {"name": "deepseek-v4", "counting": "chat_template"}}
    check_resumable(checkpoint_of([], old), [], same)
    assert refusal(old, other) == (
        "cannot resume: the tokenizer's files, the counting mode or the chat template "
        "differ from the interrupted run's; run without --resume to start over")
