"""`validate`'s counts and problems on hand-made output rows (``words(n)`` is ``n``
tokens with the bundled tokenizer; the default counting sums the turns)."""

from __future__ import annotations

from tests.fixtures_runs import row, write_jsonl
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.engine.validate import Validation, validate_output

# -- validate's counts ----------------------------------------------------------------------

def validated(tmp_path, rows: list[dict], target: int, counter) -> tuple[Validation, list]:
    out = write_jsonl(tmp_path / "out.jsonl", rows)
    found = Validation()
    problems = list(validate_output(str(out), CompressionConfig(target_max_tokens=target,
                                                                summary_target_tokens=10),
                                    found, counter))
    return found, problems


def test_validate_counts_the_rows_whose_metrics_record_an_error(tmp_path, counter):
    failed = {**row("bad", "SHG", [10, 10, 10]),
              "compression_metrics": {"error": "the summarizer failed", "still_over_limit": True}}
    fine = {**row("ok", "SHG", [10, 10, 10]), "compression_metrics": {"error": None}}
    found, problems = validated(tmp_path, [failed, fine, failed], 100, counter)
    assert (found.rows, found.failed, found.problems, problems) == (3, 2, 0, [])


def test_a_row_exactly_at_the_target_is_within_it(tmp_path, counter):
    """30 tokens against a target of 30 fits (over means more than the target); 31 does
    not."""
    at = row("at", "SHG", [10, 10, 10])
    over = row("over", "SHG", [10, 10, 11])
    found, problems = validated(tmp_path, [at, over], 30, counter)
    assert (found.rows, found.over_limit) == (2, 1)
    assert [p.location for p in problems] == [f"{tmp_path / 'out.jsonl'}:2"]
