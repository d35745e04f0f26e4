"""Every summary is bounded, and a compressed row is never longer than the original (§12).

The unit tests count words (a count a reader can check by eye); the end-to-end tests run
the real CLI against a loopback server that ignores ``max_tokens``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.cli_helpers import read_jsonl, run_cli
from tests.fake_llm_server import FakeLLMServer
from trajectory_compressor.core import reasons
from trajectory_compressor.core.conversation import SUMMARY_PREFIX
from trajectory_compressor.core.summary import bound_summary, summary_limit


def words(text: str) -> int:
    return len(text.split())


# -- the rule, on words -------------------------------------------------------------------

def test_a_summary_within_target_times_tolerance_is_kept_as_it_is():
    text = "One two three. Four five six. Seven eight nine ten."  # 10 words
    assert bound_summary(text, 5, 2.0, words) == (text, False)  # limit 10
    assert summary_limit(5, 2.0) == 10 and summary_limit(5, 1.0) == 5
    assert summary_limit(5, 1.5) == 7  # floor(7.5)


def test_a_longer_one_is_cut_at_the_last_sentence_end_within_the_target():
    text = "One two three. Four five six. Seven eight nine ten."
    # limit 8 < 10 words: cut to the target of 4 -> "One two three." (3 words; 6 > 4).
    assert bound_summary(text, 4, 2.0, words) == ("One two three.", True)
    # target 6 -> both first sentences (6 words).
    assert bound_summary(text, 6, 1.0, words) == ("One two three. Four five six.", True)
    # Line breaks end a sentence too (lists); quotes and brackets stay with their stop.
    assert bound_summary("Did a\nDid b c\nDid d e f", 4, 1.0, words) == ("Did a", True)
    assert bound_summary('He said "ok." Then more words came here', 3, 1.0, words) == \
        ('He said "ok."', True)


def test_one_that_cannot_be_cut_sensibly_is_refused():
    # No sentence end at all.
    assert bound_summary("aaaa bbbb cccc dddd eeee ffff gggg hhhh iiii", 4, 2.0, words) is None
    # The only cut keeps 1 word of a 4-word budget: less than half of it.
    assert bound_summary("One. Two three four five six seven eight nine", 4, 2.0,
                         words) is None
    # "3.5" and "e.g." inside a sentence are not ends of sentences.
    assert bound_summary("Version 3.5 e.g.foo was used by the tool today", 4, 2.0,
                         words) is None


def test_a_runaway_text_is_never_tokenized_whole():
    seen: list[int] = []

    def counting(text: str) -> int:
        seen.append(len(text))
        return words(text)

    text = "Word word. " * 200_000  # 2.2 MB
    cut, truncated = bound_summary(text, 10, 2.0, counting)
    assert truncated and cut == "Word word. " * 4 + "Word word." and words(cut) == 10
    # Limit 20 tokens: at most 20 x 16 characters are ever counted.
    assert max(seen) <= 320


# -- end to end ---------------------------------------------------------------------------

SENTENCE = "The assistant ran the tests and they passed."  # 9 tokens
# Rows of the sample: 0 is under the target (1,880 tokens); 1, 7 and 16 are compressed
# with regions of 10,347, 3,591 and 24,626 tokens; 43 and 46 have regions of only 2,743
# and 2,663 tokens.
ROWS = (0, 1, 7, 16)


def write_rows(sample: Path, target: Path, indexes: tuple[int, ...]) -> list[bytes]:
    lines = sample.read_bytes().splitlines(keepends=True)
    chosen = [lines[i] for i in indexes]
    target.write_bytes(b"".join(chosen))
    return chosen


def summary_of(row: dict) -> str:
    [summary] = [t["value"] for t in row["conversations"]
                 if t["value"].startswith(SUMMARY_PREFIX)]
    return summary


def test_a_server_ignoring_max_tokens_cannot_bloat_a_row(tmp_path, sample_jsonl, counter):
    source = tmp_path / "in.jsonl"
    lines = write_rows(sample_jsonl, source, ROWS)
    out = tmp_path / "out.jsonl"
    huge = (SENTENCE + " ") * 45_000  # 2 MB, with a sentence end every 45 characters
    with FakeLLMServer(reply=lambda data: huge).in_thread() as server:
        # (no references line: the summary is the reply's sentences and nothing else)
        proc = run_cli("compress", str(source), "-o", str(out), "--base-url", server.url,
                       "--model", "fake-model", "--summary-references", "off", "--quiet")
        requests = server.requests
    assert proc.returncode == 0, proc.stderr
    assert requests == 3  # each summary accepted at once, cut
    assert out.read_bytes().splitlines(keepends=True)[0] == lines[0]
    rows = read_jsonl(out)
    for row in rows[1:]:
        m = row["compression_metrics"]
        assert m["summary_source"] == "llm" and m["summary_truncated"] is True
        assert m["compressed_tokens"] < m["original_tokens"]
        summary = summary_of(row)
        # Whole sentences, within the 750-token target.
        assert re.fullmatch(re.escape(SUMMARY_PREFIX) + r"( " + re.escape(SENTENCE) + ")+",
                            summary)
        assert counter.count(summary) <= 750
        assert summary.count(SENTENCE) >= 375 // 9  # at least half the budget
    keys = list(rows[1]["compression_metrics"])
    assert keys[keys.index("summary_source") + 1:] == [
        "summary_truncated", "fidelity",
        # the strategy's keys (§19), last
        "strategy_used", "masked_turns", "masked_tokens", "assistant_tokens_kept"]
    assert out.stat().st_size < source.stat().st_size
    metrics = json.loads((tmp_path / "out_metrics.json").read_text())
    assert metrics["summarization"]["summaries_truncated"] == 3
    assert metrics["summarization"]["errors_by_kind"] == {}


def test_a_summary_that_cannot_be_cut_is_refused_retried_then_falls_back(tmp_path,
                                                                        sample_jsonl):
    source = tmp_path / "in.jsonl"
    write_rows(sample_jsonl, source, ROWS)
    config = tmp_path / "fast.yaml"
    config.write_text("summarization:\n  retry_delay: 0.01\n")
    out = tmp_path / "out.jsonl"
    with FakeLLMServer(reply=lambda data: "x" * 2_000_000).in_thread() as server:
        proc = run_cli("compress", str(source), "-o", str(out), "--config", str(config),
                       "--base-url", server.url, "--model", "fake-model", "--quiet")
        requests = server.requests
    # No summary came from the LLM: written, then exit 2 (issue 36, README "Loud failures").
    assert proc.returncode == 2, proc.stderr
    assert requests == 9  # 3 rows x 3 attempts
    for row in read_jsonl(out)[1:]:
        m = row["compression_metrics"]
        assert (m["summary_source"], m["summarization_api_calls"],
                m["summarization_errors"]) == ("fallback", 3, 3)
        assert "x" * 100 not in summary_of(row)
    metrics = json.loads((tmp_path / "out_metrics.json").read_text())
    assert metrics["summarization"]["errors_by_kind"] == {"too_long": 9}
    lines = proc.stderr.splitlines()
    assert lines[:-1] == [
        f"warning: {server.url}: the summary is far longer than asked (2,000,000 characters) "
        "and has no sentence end to cut it at (the first 'too_long' failure from this "
        "endpoint; later ones are counted in the metrics file under "
        "summarization.errors_by_kind)"]
    assert lines[-1].startswith("error: no summary came from the LLM: all 3 summaries asked "
                                "of it fell back to extractive ones, and none of the 9 "
                                "requests sent succeeded (failures by kind: too_long 9)")


def test_a_summary_longer_than_the_turns_it_replaces_leaves_the_row_unchanged(
        tmp_path, sample_jsonl):
    source = tmp_path / "in.jsonl"
    lines = write_rows(sample_jsonl, source, (1, 7, 43, 46))
    out = tmp_path / "out.jsonl"
    long_reply = "The assistant ran a command. " * 1000  # 6,005 tokens with the prefix
    with FakeLLMServer(reply=lambda data: long_reply).in_thread() as server:
        # Tolerance 100: the 750-token target allows 75,000 tokens, so nothing is cut.
        proc = run_cli("compress", str(source), "-o", str(out), "--base-url", server.url,
                       "--model", "fake-model", "--summary-tolerance", "100", "--quiet")
    assert proc.returncode == 1, proc.stderr  # rows flagged as failed
    rows = read_jsonl(out)
    # Row 1's region (10,347 tokens) is longer than the summary: compressed as usual.
    assert rows[0]["compression_metrics"]["summary_source"] == "llm"
    assert "summary_truncated" not in rows[0]["compression_metrics"]
    # The others' regions (3,591, 2,743, 2,663 tokens) are shorter: written as they were.
    for row, line in zip(rows[1:], lines[1:], strict=True):
        original = json.loads(line)
        m = row.pop("compression_metrics")
        assert row == original
        assert m["was_compressed"] is False and m["summarization_api_calls"] == 1
        assert m["compressed_tokens"] == m["original_tokens"]
        assert m["error"].startswith(reasons.SUMMARY_GREW.text)
        assert m["error"].endswith("tokens); row left unchanged")
    # All four stay over the 15,250-token target: row 1 because its 6,005-token summary
    # is more than the planner allowed for.
    over = read_jsonl(tmp_path / "out_over_limit.jsonl")
    assert [reasons.reason_of(e["reason"]) for e in over] == \
        [reasons.SUMMARY_OVERRAN] + [reasons.SUMMARY_GREW] * 3


@pytest.mark.parametrize("value", ["0.5", "nan"])
def test_a_tolerance_below_one_is_a_usage_error(tmp_path, sample_jsonl, value):
    proc = run_cli("compress", str(sample_jsonl), "-o", str(tmp_path / "o.jsonl"),
                   "--summarizer", "extractive", "--summary-tolerance", value)
    assert proc.returncode == 2
    assert "summarization.summary_tolerance must be >= 1" in proc.stderr
    assert not (tmp_path / "o.jsonl").exists()
