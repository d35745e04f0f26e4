"""A `--resume` continues only from a cut it can trust (SPEC §7, `engine/resume_guard.py`),
checked in this process (issue 26, item 5: the guard ran only in runs killed in a
subprocess).

What is expected comes from the module's docstrings: the consumed bytes are the inputs
before the cut whole and the first ``skip`` lines of the cut's own input (a JSON array or
Parquet file is read whole, so hashed whole); a resume hashes the same bytes again and
refuses when they differ, and bytes after the cut are not its business. A checkpoint is
data from disk: counters of the wrong type or out of range, metrics that count fewer
rows than the non-blank lines before the cut, digests that are not a list of strings or
cover another number of lines than ``skip``: each is refused with a sentence that names
the file and says to run without --resume.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from trajectory_compressor.core.errors import ResumeError
from trajectory_compressor.engine.checkpoint import Checkpoint
from trajectory_compressor.engine.resume_guard import ConsumedDigest, check_checkpoint
from trajectory_compressor.formats.base import InputFile

RESTART = "run without --resume to start over"


def line(i: int) -> str:
    return json.dumps({"id": f"r{i}", "conversations": [
        {"from": "human", "value": f"question {i}"}, {"from": "gpt", "value": f"answer {i}"}]})


def jsonl(path: Path, first: int, n: int, blank_after: int | None = None) -> InputFile:
    lines = [line(first + i) for i in range(n)]
    if blank_after is not None:
        lines.insert(blank_after, "")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return InputFile(path, "jsonl")


def poke(path: Path, old: str, new: str) -> None:
    """Change bytes in place, keeping the size (the edit path, size and mtime miss)."""
    assert len(old) == len(new)
    data = path.read_text(encoding="utf-8")
    assert data.count(old) == 1
    path.write_text(data.replace(old, new), encoding="utf-8")


def cut(file_index: int, skip: int, consumed, **fields) -> Checkpoint:
    return Checkpoint(**{"inputs": [], "settings": {}, "file_index": file_index,
                         "skip": skip, "consumed": consumed, **fields})


@pytest.fixture
def two(tmp_path):
    """Two JSONL inputs: a.jsonl (3 rows), b.jsonl (4 rows)."""
    return [jsonl(tmp_path / "a.jsonl", 0, 3), jsonl(tmp_path / "b.jsonl", 3, 4)]


def digests(inputs: list[InputFile], file_index: int, skip: int) -> list[str]:
    """The digests a fresh run would record at this cut."""
    digest = ConsumedDigest(inputs)
    try:
        return digest.at(file_index, skip)
    finally:
        digest.close()


def resume(checkpoint: Checkpoint, inputs: list[InputFile], sampled: bool = False,
           path: Path = Path("/runs/.out.checkpoint.json")) -> None:
    digest = ConsumedDigest(inputs)
    try:
        check_checkpoint(checkpoint, path, inputs, digest, sampled=sampled)
    finally:
        digest.close()


def test_the_bytes_before_the_cut_decide_and_those_after_it_do_not(two):
    run = ConsumedDigest(two)
    recorded = run.at(1, 2)  # a.jsonl whole, the first 2 lines of b.jsonl
    run.close()
    metrics = {"total_trajectories": 4, "rows_rejected": 1}  # 3 + 2 rows before the cut
    resume(cut(1, 2, recorded, metrics=metrics), two)
    poke(two[1].path, "answer 6", "ANSWER 6")  # b's 4th row: after the cut
    resume(cut(1, 2, recorded, metrics=metrics), two)
    for where, old, new in ((1, "answer 4", "ANSWER 4"), (0, "question 0", "QUESTION 0")):
        poke(two[where].path, old, new)
        with pytest.raises(ResumeError) as info:
            resume(cut(1, 2, recorded, metrics=metrics), two)
        assert str(info.value) == (
            f"cannot resume: the input {two[where].path} changed in the part the interrupted "
            f"run had already read (its bytes differ, though its size and modification time "
            f"do not); {RESTART}")
        poke(two[where].path, new, old)
    resume(cut(1, 2, recorded, metrics=metrics), two)


def test_a_checkpoint_without_digests_is_checked_on_its_counters_only(two):
    # A checkpoint with no digests (an older one) cannot compare bytes.
    poke(two[0].path, "question 0", "QUESTION 0")
    resume(cut(1, 2, [], metrics={"total_trajectories": 5}), two)


def test_metrics_that_count_fewer_rows_than_the_lines_before_the_cut_are_refused(two):
    path = Path("/runs/.out.checkpoint.json")
    for metrics, handled in (({"total_trajectories": 4}, 4), ({}, 0),
                             ({"rows_rejected": 1}, 1)):
        with pytest.raises(ResumeError) as info:
            resume(cut(1, 2, [], metrics=metrics), two, path=path)
        assert str(info.value) == (
            f"cannot resume: the checkpoint {path} is damaged (its metrics count {handled:,} "
            f"rows before the cut, the inputs hold 5 there); {RESTART}")
    # A sampled run handles fewer rows than it reads: not a sign of damage.
    resume(cut(1, 2, [], metrics={"total_trajectories": 1}), two, sampled=True)
    resume(cut(1, 2, [], metrics={"total_trajectories": 3, "rows_rejected": 2}), two)


def test_blank_lines_are_no_rows(tmp_path):
    inputs = [jsonl(tmp_path / "a.jsonl", 0, 3, blank_after=1)]
    digest = ConsumedDigest(inputs)
    digest.at(0, 4)  # 4 lines: 3 rows and a blank one
    assert digest.rows_before(0) == 3
    digest.close()
    resume(cut(0, 4, [], metrics={"total_trajectories": 3}), inputs)


@pytest.mark.parametrize("fields, what", [
    ({"metrics": []}, "its metrics or settings are not a mapping"),
    ({"settings": None}, "its metrics or settings are not a mapping"),
    ({"elapsed": -1.0}, "elapsed is -1.0"),
    ({"elapsed": "1"}, "elapsed is '1'"),
    ({"metrics": {"total_trajectories": -1}}, "metrics total_trajectories is -1"),
    ({"metrics": {"total_trajectories": 5, "rows_rejected": True}},
     "metrics rows_rejected is True"),
    ({"metrics": {"total_trajectories": 2.5}}, "metrics total_trajectories is 2.5"),
    ({"consumed": "3:abc"}, "its digests of the inputs are not a list of strings"),
    ({"consumed": [1]}, "its digests of the inputs are not a list of strings"),
    ({"skip": -1}, "skip is -1, not a whole number >= 0"),
    ({"file_index": True}, "file_index is True, not a whole number >= 0"),
    ({"over_limit": "12"}, "over_limit is '12', not a whole number >= 0"),
    ({"rejects": 1.0}, "rejects is 1.0, not a whole number >= 0"),
    ({"draws": None}, "draws is None, not a whole number >= 0"),
    ({"file_index": 3}, "file_index 3 is past the 2 inputs"),
])
def test_damaged_fields_are_refused(two, fields, what):
    path = Path("/runs/.out.checkpoint.json")
    fields = {"inputs": [], "settings": {}, "file_index": 1, "skip": 2, "consumed": [],
              "metrics": {"total_trajectories": 5}, **fields}
    checkpoint = Checkpoint(**fields)
    with pytest.raises(ResumeError) as info:
        resume(checkpoint, two, path=path)
    assert str(info.value) == f"cannot resume: the checkpoint {path} is damaged ({what}); {RESTART}"


def test_a_skip_other_than_the_lines_its_digest_covers_is_refused(two):
    path = Path("/runs/.out.checkpoint.json")
    run = ConsumedDigest(two)
    recorded = run.at(0, 3)  # covers 3 lines of a.jsonl
    run.close()
    resume(cut(0, 3, recorded, metrics={"total_trajectories": 3}), two, path=path)
    with pytest.raises(ResumeError) as info:
        resume(cut(0, 2, recorded, metrics={"total_trajectories": 3}), two, path=path)
    assert str(info.value) == (f"cannot resume: the checkpoint {path} is damaged (skip is 2 "
                               f"but its digest covers 3 lines); {RESTART}")


def test_digests_that_stop_before_the_cuts_input_are_compared_as_far_as_they_go(two):
    # Only a.jsonl's digest (3 lines, whole): nothing says how much of b.jsonl was read.
    run = ConsumedDigest(two)
    recorded = run.at(1, 1)[:1]
    run.close()
    resume(cut(1, 1, recorded, metrics={"total_trajectories": 4}), two)
    poke(two[0].path, "question 1", "QUESTION 1")
    with pytest.raises(ResumeError, match="changed in the part"):
        resume(cut(1, 1, recorded, metrics={"total_trajectories": 4}), two)


def test_a_file_shorter_than_the_cut_is_refused(two):
    digest = ConsumedDigest(two)
    with pytest.raises(ResumeError) as info:
        digest.at(0, 10)
    digest.close()
    assert str(info.value) == (f"cannot resume: the checkpoint says 10 lines of {two[0].path} "
                               f"were read, but it has 3; {RESTART}")


def test_one_digest_per_input_up_to_the_cut_each_finished_one_hashed_once(two):
    fds = len(os.listdir("/proc/self/fd"))
    digest = ConsumedDigest(two)
    first = digest.at(0, 2)
    assert len(first) == 1  # nothing of b.jsonl is consumed at a cut in a.jsonl
    later = digest.at(1, 1)
    assert len(later) == 2 and later[0] != first[0]  # a.jsonl now whole
    # The finished input is closed; the cut's own stays open for the next checkpoint.
    assert len(os.listdir("/proc/self/fd")) == fds + 1
    again = digest.at(1, 3)
    assert again[0] == later[0]  # a finished input's digest does not change
    assert all(isinstance(d, str) and d for d in again)
    digest.close()
    assert len(os.listdir("/proc/self/fd")) == fds
    # The same cuts read afresh give the same digests.
    assert digests(two, 1, 1) == later
    assert digests(two, 1, 3) == again


def test_a_cut_before_the_last_one_hashed_is_hashed_again_from_the_start(two):
    digest = ConsumedDigest(two)
    digest.at(0, 3)
    earlier = digest.at(0, 2)
    digest.close()
    assert digests(two, 0, 2) == earlier
    assert earlier != digests(two, 0, 3)


def test_an_input_read_whole_is_hashed_whole(tmp_path):
    # A JSON array's skip counts rows, not lines: the whole file is what the run consumed,
    # so an edit anywhere in it is caught, also past the row the cut names.
    path = tmp_path / "a.json"
    rows = [json.loads(line(i)) for i in range(3)]
    path.write_text("[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n]\n", encoding="utf-8")
    inputs = [InputFile(path, "json")]
    run = ConsumedDigest(inputs)
    recorded = run.at(0, 1)
    assert run.at(0, 2) == recorded  # read whole once: the same at every cut
    assert run.rows_before(0) is None  # its rows are not counted by lines
    run.close()
    resume(cut(0, 1, recorded, metrics={"total_trajectories": 1}), inputs)
    poke(path, "answer 2", "ANSWER 2")
    with pytest.raises(ResumeError, match="changed in the part"):
        resume(cut(0, 1, recorded, metrics={"total_trajectories": 1}), inputs)


def test_only_plain_jsonl_rows_are_counted_before_the_cut(tmp_path):
    path = tmp_path / "a.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("".join(line(i) + "\n" for i in range(3)))
    inputs = [InputFile(path, "jsonl.gz")]
    digest = ConsumedDigest(inputs)
    digest.at(0, 2)
    assert digest.rows_before(0) is None
    digest.close()
    # So its metrics are not held to its lines; its consumed lines are still compared.
    recorded = digests(inputs, 0, 2)
    resume(cut(0, 2, recorded, metrics={"total_trajectories": 0}), inputs)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("".join(line(i).replace("question 1", "QUESTION 1") + "\n" for i in range(3)))
    with pytest.raises(ResumeError, match="changed in the part"):
        resume(cut(0, 2, recorded, metrics={"total_trajectories": 0}), inputs)


def test_a_cut_after_every_input_reads_nothing_again(two):
    # Every input finished (file_index == the number of inputs): nothing is compared.
    poke(two[0].path, "question 0", "QUESTION 0")
    resume(cut(2, 0, ["0:x", "0:y"], metrics={}), two)


def test_a_checkpoint_whose_digests_are_null_is_checked_on_its_counters_only(two):
    resume(cut(1, 2, None, metrics={"total_trajectories": 5}), two)


def test_inputs_that_are_not_local_files_get_an_empty_digest(two, tmp_path):
    shard = InputFile(tmp_path / "shard-0", "hf", stream={"dataset": "org/data", "shard": 0})
    digest = ConsumedDigest([shard, *two])
    found = digest.at(2, 1)
    digest.close()
    assert found[0] == "" and len(found) == 3
    assert found[1:] == digests(two, 1, 1)


def test_an_input_that_cannot_be_read_whole_gets_an_empty_digest(tmp_path):
    assert digests([InputFile(tmp_path / "gone.json", "json")], 0, 1) == [""]


def test_rows_are_counted_up_to_the_input_asked_for(two, tmp_path):
    array = tmp_path / "c.json"
    array.write_text("[]\n", encoding="utf-8")
    digest = ConsumedDigest([*two, InputFile(array, "json")])
    digest.at(1, 2)
    assert digest.rows_before(0) == 3  # a.jsonl
    assert digest.rows_before(1) == 5  # and the 2 lines of b.jsonl before the cut
    assert digest.rows_before(2) is None  # a JSON array's rows are not counted by lines
    digest.close()


def test_closing_the_digest_closes_the_files_it_kept_open(two):
    import warnings

    digest = ConsumedDigest(two)
    digest.at(1, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        digest.close()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []
