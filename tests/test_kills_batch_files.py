"""Phase 1's request files at the provider's limits (issue 26, item 5).

From engine/batch.py's documentation, SPEC §17 and README "Batch inference": request lines
are split into ``requests-00001.jsonl``, ``requests-00002.jsonl``, ... so that no file holds
more than ``--batch-max-requests`` lines or ``--batch-max-bytes`` bytes (a file may hold
exactly the limit); a single line over the byte limit is a configuration error; files
appear under their names only on commit; ``--batch-results`` takes files or glob patterns.
"""

from __future__ import annotations

import pytest

from trajectory_compressor.core.errors import ConfigError
from trajectory_compressor.engine import batch
from trajectory_compressor.engine.batch import BatchLimits, RequestFiles


def line(n: int, size: int = 10) -> bytes:
    text = f"{n}".rjust(size - 1, "x") + "\n"
    return text.encode()


def test_a_file_holds_exactly_max_requests_lines(tmp_path):
    files = RequestFiles(tmp_path, BatchLimits(max_requests=2, max_bytes=10_000))
    for n in range(5):
        files.add(line(n))
    written = files.commit()
    assert [(f.name, f.requests, f.bytes) for f in written] == [
        ("requests-00001.jsonl", 2, 20), ("requests-00002.jsonl", 2, 20),
        ("requests-00003.jsonl", 1, 10)]
    assert (tmp_path / "requests-00001.jsonl").read_bytes() == line(0) + line(1)
    assert (tmp_path / "requests-00003.jsonl").read_bytes() == line(4)


def test_a_file_holds_exactly_max_bytes(tmp_path):
    files = RequestFiles(tmp_path, BatchLimits(max_requests=100, max_bytes=30))
    for n in range(4):
        files.add(line(n))  # 10 bytes each: 30 fit, the 4th starts a new file
    assert [(f.requests, f.bytes) for f in files.commit()] == [(3, 30), (1, 10)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["requests-00001.jsonl",
                                                          "requests-00002.jsonl"]


def test_a_line_over_the_byte_limit_is_a_config_error_and_one_at_it_fits(tmp_path):
    files = RequestFiles(tmp_path, BatchLimits(max_requests=5, max_bytes=10))
    files.add(line(1, size=10))
    with pytest.raises(ConfigError, match="11 bytes, over the limit of 10 bytes"):
        files.add(line(2, size=11))
    assert [(f.requests, f.bytes) for f in files.commit()] == [(1, 10)]


def test_nothing_appears_before_commit_and_discard_leaves_nothing(tmp_path):
    files = RequestFiles(tmp_path, BatchLimits(max_requests=1, max_bytes=100))
    files.add(line(1))
    files.add(line(2))
    assert not (tmp_path / "requests-00001.jsonl").exists()
    files.discard()
    assert not any(p.name.startswith("requests-") and p.name.endswith(".jsonl")
                   for p in tmp_path.iterdir())


def test_limits_must_be_positive():
    with pytest.raises(ConfigError, match="--batch-max-requests must be >= 1, got 0"):
        BatchLimits(max_requests=0)
    with pytest.raises(ConfigError, match="--batch-max-bytes must be >= 1, got 0"):
        BatchLimits(max_bytes=0)
    BatchLimits(max_requests=1, max_bytes=1)
    assert (BatchLimits().max_requests, BatchLimits().max_bytes) == (50_000, 200_000_000)


def test_results_are_files_or_globs_each_once(tmp_path):
    a, b = tmp_path / "out-1.jsonl", tmp_path / "out-2.jsonl"
    a.write_text("")
    b.write_text("")
    paths = batch._result_paths([str(a), str(tmp_path / "out-*.jsonl")])
    assert paths == [a, b]
    with pytest.raises(ConfigError, match="batch results file not found"):
        batch._result_paths([str(tmp_path / "none-*.jsonl")])
    with pytest.raises(ConfigError, match="not found"):
        batch._result_paths([str(tmp_path / "gone.jsonl")])
    with pytest.raises(ConfigError, match="--batch-results"):
        batch._result_paths([])


def test_the_batch_folder_may_not_lie_in_the_input_folder(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    with pytest.raises(ConfigError, match="lies in the input folder"):
        batch._batch_folder(data / "batch", str(data))
    with pytest.raises(ConfigError, match="lies in the input folder"):
        batch._batch_folder(data, str(data))
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="is a file"):
        batch._batch_folder(tmp_path / "file", str(data))
    assert batch._batch_folder(tmp_path / "b", str(data)).is_dir()
