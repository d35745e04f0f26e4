"""Kill tests for `app/` modules (issue 40 item 8), the second set: what they print or
decide, word for word, on hand-made inputs (`app.fixes`, `app.time_estimate`,
`app.analysis`, `app.batch`)."""

from __future__ import annotations

from typing import cast

import pytest

from trajectory_compressor.app.fixes import _units, _wrapped, fix_lines, head_help
from trajectory_compressor.core.counted import counted
from trajectory_compressor.core.remedies import Entry, Fixes, Remedy
from trajectory_compressor.engine.projection import CountedRow
from trajectory_compressor.engine.replan import OverRow, OverRows, WhatWouldFix

# --- app.fixes: the "What would fix it" block --------------------------------------------


def _remedy(family: str, *flags: str) -> Remedy:
    return Remedy(family, flags, ())


def _entry(fixed: range | list[int], *remedies: Remedy) -> Entry:
    return Entry(remedies, frozenset(fixed))


def _over(examined: int, **counts) -> OverRows:
    # fix_lines reads how many rows were examined, never their counts.
    rows = [OverRow(f"in.jsonl:{i}", i, "over", 900, cast(CountedRow, None))
            for i in range(examined)]
    return OverRows(rows=rows, **counts)


LAST = _remedy("protect_last", "--protect-last-n-turns", "2")
FIRST = _remedy("first_tool", "--no-protect-first-tool")
ELIDE = _remedy("elide", "--over-limit-strategy", "elide_tool_outputs")
SUMMARY = _remedy("summary", "--summary-target-tokens", "100")
TARGET = _remedy("target", "--target-max-tokens", "9000")
STRATEGY = _remedy("strategy", "--strategy", "hybrid")
KEEP = _remedy("mask_keep_last", "--mask-keep-last", "0")


def test_fix_lines_word_for_word_with_every_part():
    fixes = Fixes(12, alone=[_entry(range(12), LAST), _entry([0], TARGET), _entry([], FIRST),
                             _entry([], ELIDE), _entry([], SUMMARY)],
                  best=_entry(range(3), LAST, STRATEGY, KEEP, ELIDE),
                  together=_entry(range(5), LAST, STRATEGY, KEEP, ELIDE, SUMMARY), searched=3)
    not_examined = [(f"in.jsonl:{i}", "its input is gone") for i in range(5)]
    w = WhatWouldFix(_over(12, over=18, failed=1, not_examined=not_examined), fixes, False,
                     1234, 5000, head_help={0: [FIRST, TARGET], 3: [LAST, FIRST]})
    assert fix_lines(w, True) == [
        "What would fix it at target 5,000: 18 rows still over the limit",
        "  (each re-planned as compress would; summaries projected at 1,234 tokens)",
        "  (the first 12 of them examined)",
        "  (1 failed row not among them: no remedy is about a failure)",
        "  not examined: in.jsonl:0: its input is gone",
        "  not examined: in.jsonl:1: its input is gone",
        "  not examined: in.jsonl:2: its input is gone",
        "  ... 2 more not examined",
        "  flags                                              rows brought under",
        "  --protect-last-n-turns 2                                     12 of 12",
        "  --target-max-tokens 9000 (if your context allows)             1 of 12",
        "  no effect alone: --no-protect-first-tool,",
        "    --over-limit-strategy elide_tool_outputs, --summary-target-tokens 100",
        "  together, the fewest flags that bring the most under (3 of 12):",
        "    --protect-last-n-turns 2 --strategy hybrid --mask-keep-last 0",
        "      --over-limit-strategy elide_tool_outputs",
        "  (no 3 of them together bring more; all 5 bring 5 under)",
        "  2 of them: the protected head alone is over the target; only",
        "    --no-protect-first-tool or --protect-last-n-turns 2 or a larger target can",
        "    help",
    ]
    # Without a target label (the default) the title names no target.
    assert fix_lines(w)[0] == "What would fix it: 18 rows still over the limit"


def test_fix_lines_small_cases():
    # Nothing over the limit: no block at all.
    assert fix_lines(WhatWouldFix(OverRows(), Fixes(0), True, 200, 1000)) == []
    # Over, none examined (every one not examined): the head and why, nothing else;
    # exactly three not examined says no "more".
    gone = [("a.jsonl:1", "gone"), ("a.jsonl:2", "gone"), ("a.jsonl:3", "gone")]
    w = WhatWouldFix(_over(0, over=3, not_examined=gone), Fixes(0), True, 200, 1000)
    assert fix_lines(w) == [
        "What would fix it: 3 rows still over the limit",
        "  (each re-planned as compress would; extractive summaries: exact)",
        "  not examined: a.jsonl:1: gone",
        "  not examined: a.jsonl:2: gone",
        "  not examined: a.jsonl:3: gone",
    ]
    # Four not examined: three named, one more counted.
    w = WhatWouldFix(_over(0, over=4, not_examined=[*gone, ("a.jsonl:4", "gone")]), Fixes(0),
                     True, 200, 1000)
    assert fix_lines(w)[-2:] == ["  not examined: a.jsonl:3: gone", "  ... 1 more not examined"]
    # One row, examined, nothing helps: no table, no "no effect" line, the no-change line.
    w = WhatWouldFix(_over(1, over=1, failed=2), Fixes(1), True, 200, 1000)
    assert fix_lines(w) == [
        "What would fix it: 1 row still over the limit",
        "  (each re-planned as compress would; extractive summaries: exact)",
        "  (2 failed rows not among them: no remedy is about a failure)",
        "  no change within the target brings any of them under",
    ]
    # One useless remedy alone, a best one, every family together no better (not capped):
    # no "(no N of them together ...)" line.
    fixes = Fixes(2, alone=[_entry([0, 1], TARGET), _entry([], SUMMARY)],
                  best=_entry([0, 1], TARGET), together=_entry([0, 1], TARGET, SUMMARY),
                  searched=3)
    w = WhatWouldFix(_over(2, over=2), fixes, True, 200, 1000, head_help={1: [TARGET]})
    assert fix_lines(w) == [
        "What would fix it: 2 rows still over the limit",
        "  (each re-planned as compress would; extractive summaries: exact)",
        "  flags                                              rows brought under",
        "  --target-max-tokens 9000 (if your context allows)              2 of 2",
        "  no effect alone: --summary-target-tokens 100",
        "  together, the fewest flags that bring the most under (2 of 2):",
        "    --target-max-tokens 9000",
        "  1 of them: the protected head alone is over the target; only a larger target",
        "    can help",
    ]
    assert head_help(w) == "a larger target"


def test_counted_says_one_in_the_singular_and_any_other_count_in_the_plural():
    assert [counted(n, "row") for n in (0, 1, 2)] == ["0 rows", "1 row", "2 rows"]
    assert counted(1234, "failed row") == "1,234 failed rows"
    assert counted(1, "summary", "summaries") == "1 summary"
    assert counted(3, "summary", "summaries") == "3 summaries"
    assert counted(-1, "row") == "-1 rows"


def test_fix_lines_right_align_counts_and_shrink_a_long_flag():
    long = _remedy("summary", "--summary-target-tokens", "9" * 80)
    fixes = Fixes(12, alone=[_entry([1], LAST), _entry(range(12), long)])
    w = WhatWouldFix(_over(12, over=12), fixes, True, 200, 1000)
    lines = fix_lines(w)
    table = lines[2:5]
    assert all(len(line) <= 80 for line in lines)
    assert table[0].endswith("  rows brought under") and len(table[0]) == 80
    assert table[1].startswith("  --protect-last-n-turns 2 ")
    assert table[1].endswith("   1 of 12") and table[2].endswith("  12 of 12")
    assert table[2].startswith("  --summary-target-tokens 9999")


def test_units_break_between_units_at_80_columns():
    # 40 + 1 + 39 = 80 columns: one line; one more and the unit goes to the next line.
    assert _units(["a" * 40, "b" * 39], "", "  ") == ["a" * 40 + " " + "b" * 39]
    assert _units(["a" * 40, "b" * 40], "", "  ") == ["a" * 40, "  " + "b" * 40]
    # A unit longer than a line is never split, and never leaves a blank line before it.
    assert _units(["x" * 90], "  ", "    ") == ["  " + "x" * 90]
    assert _units(["x" * 90, "y"], "  ", "    ") == ["  " + "x" * 90, "    y"]
    assert _units([], "  ", "    ") == ["  "]


def test_wrapped_at_80_columns_keeping_words_and_hyphens_whole():
    assert _wrapped("a" * 39 + " " + "b" * 39, "  ", "    ") == ["  " + "a" * 39,
                                                               "    " + "b" * 39]
    assert _wrapped("a" * 38 + " " + "b" * 39, "  ", "    ") == ["  " + "a" * 38 + " " + "b" * 39]
    assert _wrapped("a" * 70 + " bbbb-cccc-dddd", "  ", "    ") == ["  " + "a" * 70,
                                                                   "    bbbb-cccc-dddd"]
    assert _wrapped("x" * 100 + " y", "  ", "    ") == ["  " + "x" * 100, "    y"]


# --- app.time_estimate: the dry run's estimate ------------------------------------------

def _targets() -> list:
    from trajectory_compressor.inspect.estimate import TargetTime

    # local + wait: 1.5 + 62 = 63.5 s; 0.25 + 0.004; 12.345 + 0; 100 + 4000 = 4100 s.
    return [TargetTime(1000, 3, 1.5, 4, 62.0, 3600.0), TargetTime(2000, 2, 0.25, 2, 0.004),
            TargetTime(4000, 0, 12.345, 0, 0.0, 7260.0),
            TargetTime(8000, 1, 100.0, 12345, 4000.0, 40.0)]


def test_duration_at_its_edges():
    from trajectory_compressor.app.time_estimate import duration

    assert duration(None) == "-" and duration(0) == "0.00 s"
    assert duration(0.994) == "0.99 s" and duration(0.995) == "1.0 s"
    assert duration(59.94) == "59.9 s" and duration(59.95) == "1 min 00 s"
    assert duration(61.5) == "1 min 02 s" and duration(3599.4) == "59 min 59 s"
    assert duration(3599.5) == "1 h 00 min" and duration(3600) == "1 h 00 min"
    assert duration(7260) == "2 h 01 min" and duration(3600 * 1000 + 1799) == "1,000 h 30 min"


def test_time_lines_measured_word_for_word():
    from trajectory_compressor.app.time_estimate import time_lines
    from trajectory_compressor.inspect.estimate import TimeEstimate

    targets = _targets()
    assert time_lines(TimeEstimate("extractive", "measured", 1234, 2.0, targets[:2])) == [
        "Time compress would take: an estimate (extractive summaries)",
        "  work timed here on 1,234 rows as analyze read them, summaries included",
        "  target_max_tokens                           1,000        2,000",
        "  rows summarized (extractive)                    3            2",
        "  estimated total                        1 min 04 s       0.25 s",
    ]
    # Four targets: three side by side, then the fourth; a sample adds the whole input.
    assert time_lines(TimeEstimate("extractive", "measured", 1234, 2.0, targets,
                                   whole_input_records=56789)) == [
        "Time compress would take: an estimate (extractive summaries)",
        "  work timed here on the 1,234 rows of the sample, summaries included",
        "  target_max_tokens                           1,000        2,000        4,000",
        "  rows summarized (extractive)                    3            2            0",
        "  estimated total                        1 min 04 s       0.25 s       12.3 s",
        "  whole input (56,789 rows)              1 h 00 min            -   2 h 01 min",
        "  target_max_tokens                           8,000",
        "  rows summarized (extractive)                    1",
        "  estimated total                        1 h 08 min",
        "  whole input (56,789 rows)                  40.0 s",
    ]
    # Every line within 80 columns: a long summarizer name is clipped.
    long = time_lines(TimeEstimate("x" * 80, "measured", 1, 0.0, []))
    assert long == ["Time compress would take: an estimate (" + "x" * 40 + "…",
                    "  work timed here on 1 rows as analyze read them, summaries included"]


def test_time_lines_probed_word_for_word():
    from trajectory_compressor.app.time_estimate import time_lines
    from trajectory_compressor.inspect.estimate import Probe, TimeEstimate

    probe = Probe(3, (0.21, 0.26, 0.25), ("timeout",), 0.5)
    assert time_lines(TimeEstimate("openai", "probed", 12, 2.0, _targets()[:3],
                                   seconds_per_call=1.23456, concurrency=1,
                                   requests_per_second=2.0, probe=probe)) == [
        "Time compress would take: an estimate (openai summaries)",
        "  work timed here on 12 rows as analyze read them;",
        "  1.23 s per call, measured by --probe (3 requests: 0.21 s to 0.26 s, 1 failed)",
        "  starting the summarizer: 0.50 s (once a run)",
        "  1 call at once, at most 120 a minute (the endpoints' rpm)",
        "  target_max_tokens                           1,000        2,000        4,000",
        "  local work (read, count, assemble)          1.5 s       0.25 s       12.3 s",
        "  summary calls                                   4            2            0",
        "  waiting for them                       1 min 02 s       0.00 s       0.00 s",
        "  estimated total                        1 min 04 s       0.25 s       12.3 s",
    ]
    # One call, no failure, a start under half a second (an HTTP session): not said.
    one = Probe(1, (0.3,), (), 0.49)
    assert time_lines(TimeEstimate("local", "probed", 12, 2.0, _targets()[:1],
                                   seconds_per_call=1234.5, concurrency=8, probe=one))[:4] == [
        "Time compress would take: an estimate (local summaries)",
        "  work timed here on 12 rows as analyze read them;",
        "  1,234.50 s per call, measured by --probe (1 request: 0.30 s)",
        "  8 calls at once",
    ]
    # Two calls of the same duration: one figure, "requests".
    two = Probe(2, (0.3, 0.3), ("a", "b"), 0.0)
    assert time_lines(TimeEstimate("local", "probed", 12, 2.0, [], seconds_per_call=0.3,
                                   concurrency=2, probe=two))[2] == (
        "  0.30 s per call, measured by --probe (2 requests: 0.30 s, 2 failed)")


def test_time_lines_assumed_and_batch_window_word_for_word():
    from trajectory_compressor.app.time_estimate import time_lines
    from trajectory_compressor.inspect.estimate import Probe, TimeEstimate

    target = _targets()[:1]
    assert time_lines(TimeEstimate("openai", "assumed", 12, 2.0, target, seconds_per_call=2.0,
                                   concurrency=16, whole_input_records=99)) == [
        "Time compress would take: an estimate (openai summaries)",
        "  work timed here on the 12 rows of the sample;",
        "  2.00 s per call assumed (--seconds-per-call)",
        "  16 calls at once",
        "  target_max_tokens                           1,000",
        "  local work (read, count, assemble)          1.5 s",
        "  summary calls                                   4",
        "  waiting for them                       1 min 02 s",
        "  estimated total                        1 min 04 s",
        "  whole input (99 rows)                  1 h 00 min",
        "  --probe N times N real requests instead (each costs what a run's does)",
    ]
    # A probe that sent nothing: said, and no advice to probe.
    assert time_lines(TimeEstimate("openai", "assumed", 12, 2.0, target, seconds_per_call=2.0,
                                   concurrency=16, probe=Probe(0, (), (), 0.0))) == [
        "Time compress would take: an estimate (openai summaries)",
        "  work timed here on 12 rows as analyze read them;",
        "  2.00 s per call assumed (--seconds-per-call)",
        "  --probe sent nothing: no row needs a summary at the first target",
        "  16 calls at once",
        "  target_max_tokens                           1,000",
        "  local work (read, count, assemble)          1.5 s",
        "  summary calls                                   4",
        "  waiting for them                       1 min 02 s",
        "  estimated total                        1 min 04 s",
    ]
    assert time_lines(TimeEstimate("openai", "batch_window", 12, 2.0, _targets()[:2],
                                   whole_input_records=99)) == [
        "Time compress would take: an estimate (openai summaries)",
        "  work timed here on the 12 rows of the sample;",
        "  the requests wait for the provider's batch",
        "  target_max_tokens                           1,000        2,000",
        "  local work (read, count, assemble)          1.5 s       0.25 s",
        "  summary calls                                   4            2",
        "  plus the provider's batch window (up to 24 h with the OpenAI Batch API)",
    ]


# --- app.analysis: the dry run as text --------------------------------------------------


def _analysis(tmp_path, monkeypatch, counter, summarizer: str, targets: list[int], **config):
    """The real dry run of the hand rows (`tests.fixtures_runs`) at ``targets``, read by a
    relative name (the text names it), with what varies from run to run fixed: no time
    estimate, 1.5 s CPU for each target's remedies."""
    from tests.fixtures_runs import HAND_CONFIG, HAND_ROWS, write_jsonl
    from trajectory_compressor.core.config import CompressionConfig
    from trajectory_compressor.inspect.analyze import analyze

    write_jsonl(tmp_path / "hand.jsonl", HAND_ROWS, extra_lines=("{oops",))
    monkeypatch.chdir(tmp_path)
    a = analyze("hand.jsonl", CompressionConfig(summarizer=summarizer, **HAND_CONFIG, **config),
                targets=targets, counter=counter)
    a.time = None
    for t in a.targets:
        t.fixes_cpu_seconds = 1.5
    return a


# What every dry run of the hand rows prints first: the input, its reject, the counts.
_HAND_HEAD = [
    'Dry run: no LLM call, nothing written',
    '  input   hand.jsonl',
    '  rows    5, rejected 1',
    '',
    'Rejected rows: 1',
    '  hand.jsonl:6: invalid JSON: unexpected character, expected a string key: line…',
    '',
    'Tokens per row',
    '  min  p50  p90  p99  max',
    '   35  195  265  265  265',
    '',
    '    25 - 50 |############################## 1',
    '    50 - 75 |                               0',
    '   75 - 100 |                               0',
    '  100 - 125 |############################## 1  <- target 100',
    '  125 - 150 |                               0',
]


def test_format_analysis_extractive_at_four_targets_word_for_word(tmp_path, monkeypatch,
                                                                  counter):
    from trajectory_compressor.app.analysis import format_analysis
    from trajectory_compressor.inspect.analyze import Prices

    # The figures at target 100 are test_analyze's hand-computed ones (skip 1, compress 2,
    # over 3 with one of each reason, 580 tokens after of 820); three targets side by
    # side, the fourth alone; no strategy block for it (no row over 300); the remedies
    # only where rows stay over; the cost at $2,500/M in: 346 * 2500 / 1e6 + 40 / 1e6.
    a = _analysis(tmp_path, monkeypatch, counter, "extractive", [100, 150, 200, 300])
    assert format_analysis(a, Prices(2500, 1)).splitlines() == [
            *_HAND_HEAD,
            '  150 - 175 |                               0  <- target 150',
            '  175 - 200 |############################## 1',
            '  200 - 225 |############################## 1  <- target 200',
            '  225 - 250 |                               0',
            '  250 - 275 |############################## 1',
            '',
            'What compress would do (extractive summaries: exact)',
            '  target_max_tokens                             100          150          200',
            '  would skip (under the target)                   1            2            3',
            '  would compress                                  2            2            2',
            '  would stay over the limit                       3            2            0',
            '    no compressible middle                        1            0            0',
            '    middle too small to help                      1            1            0',
            '    head+tail > target (tail)                     1            1            0',
            '  tokens after                                  580          660          660',
            '  compression ratio                          0.7073       0.8049       0.8049',
            '  fidelity, extractive: mean / p10      1.00 / 1.00  1.00 / 1.00  1.00 / 1.00',
            '    items the tail needs, kept                    -            -            -',
            '    rows with invented facts                      0            0            0',
            '',
            'LLM summarization (projected: 1 call per compressed row, 20-token summaries)',
            '  (--summarizer extractive makes no call; this is what an LLM would use)',
            '  calls                                           2            2            2',
            '  input tokens (region text only)               346          249          249',
            '  output tokens                                  40           40           40',
            '  cost, USD ($2500/M in, $1/M out)             0.87         0.62         0.62',
            '',
            'What compress would do (extractive summaries: exact)',
            '  target_max_tokens                             300',
            '  would skip (under the target)                   5',
            '  would compress                                  0',
            '  would stay over the limit                       0',
            '  tokens after                                  820',
            '  compression ratio                          1.0000',
            '',
            'LLM summarization (projected: 1 call per compressed row, 20-token summaries)',
            '  (--summarizer extractive makes no call; this is what an LLM would use)',
            '  calls                                           0',
            '  input tokens (region text only)                 0',
            '  output tokens                                   0',
            '  cost, USD ($2500/M in, $1/M out)             0.00',
            '',
            'Strategies on the rows over the target (exact; --strategy)',
            '  target_max_tokens                             100          150          200',
            '  rows over the target                            4            3            2',
            '  summarize',
            '    rows under / still over                   1 / 3        1 / 2        2 / 0',
            '    summaries (LLM calls)                         2            2            2',
            '    tokens after                                545          505          310',
            '    assistant tokens kept                     56.2%        67.7%        54.5%',
            '  mask',
            '    rows under / still over                   0 / 4        0 / 3        0 / 2',
            '    summaries (LLM calls)                         0            0            0',
            '    tokens after                                785          665          470',
            '    assistant tokens kept                    100.0%       100.0%       100.0%',
            '  hybrid',
            '    rows under / still over                   1 / 3        1 / 2        2 / 0',
            '    summaries (LLM calls)                         2            2            2',
            '    tokens after                                545          505          310',
            '    assistant tokens kept                     56.2%        67.7%        54.5%',
            '  target 100: summarize keeps the most training signal at the fewest calls:',
            '  56% of the assistant tokens, 2 summaries, 3 rows still over (mask: 100%, 0',
            '  summaries, 4 over; hybrid: 56%, 2 summaries, 3 over)',
            '  target 150: summarize keeps the most training signal at the fewest calls:',
            '  68% of the assistant tokens, 2 summaries, 2 rows still over (mask: 100%, 0',
            '  summaries, 3 over; hybrid: 68%, 2 summaries, 2 over)',
            '  target 200: summarize keeps the most training signal at the fewest calls:',
            '  55% of the assistant tokens, 2 summaries, 0 rows still over (mask: 100%, 0',
            '  summaries, 2 over; hybrid: 55%, 2 summaries, 0 over)',
            '',
            'What would fix it at target 100: 3 rows still over the limit',
            '  (each re-planned as compress would; extractive summaries: exact)',
            '  flags                                             rows brought under',
            '  --protect-last-n-turns 0                                      2 of 3',
            '  --target-max-tokens 195 (if your context allows)              3 of 3',
            '  no effect alone: --no-protect-first-system, --no-protect-first-human,',
            '    --no-protect-first-gpt, --no-protect-first-tool,',
            '    --over-limit-strategy elide_tool_outputs, --summary-target-tokens 2',
            '  together, the fewest flags that bring the most under (3 of 3):',
            '    --protect-last-n-turns 0 --no-protect-first-human',
            '  (re-planned 3 of the rows over the limit in 1.5 s CPU)',
            '',
            'What would fix it at target 150: 2 rows still over the limit',
            '  (each re-planned as compress would; extractive summaries: exact)',
            '  flags                                             rows brought under',
            '  --protect-last-n-turns 2                                      2 of 2',
            '  --summary-target-tokens 5                                     1 of 2',
            '  --target-max-tokens 195 (if your context allows)              2 of 2',
            '  no effect alone: --no-protect-first-system, --no-protect-first-human,',
            '    --no-protect-first-gpt, --no-protect-first-tool,',
            '    --over-limit-strategy elide_tool_outputs',
            '  together, the fewest flags that bring the most under (2 of 2):',
            '    --protect-last-n-turns 2',
            '  (re-planned 2 of the rows over the limit in 1.5 s CPU)',
            '',
            'Distill: tool outputs hold 325 tokens; 4 rows are over 100',
            '  level                saves  of tool   rows that would need no summary',
            '  --distill safe         115    35.4%   0',
            '  --distill all          115    35.4%   0',
            '  safe by rule: same_output 115',
            '  all by rule: same_output 115',
    ]


def test_format_analysis_projected_word_for_word(tmp_path, monkeypatch, counter):
    from trajectory_compressor.app.analysis import format_analysis
    from trajectory_compressor.inspect.analyze import Prices

    # An LLM summarizer: projected, with the extractive outcome beside it; the cost label
    # of exactly 36 columns is kept (346 * 1000 / 1e6 + 40 * 20000 / 1e6 = 1.146).
    a = _analysis(tmp_path, monkeypatch, counter, "openai", [100, 250])
    assert format_analysis(a, Prices(1000, 20000)).splitlines() == [
            *_HAND_HEAD,
            '  150 - 175 |                               0',
            '  175 - 200 |############################## 1',
            '  200 - 225 |############################## 1',
            '  225 - 250 |                               0',
            '  250 - 275 |############################## 1  <- target 250',
            '',
            'What compress would do (openai: projected, 20-token summaries)',
            '  target_max_tokens                             100          250',
            '  would skip (under the target)                   1            4',
            '  would compress                                  2            1',
            '  would stay over the limit                       3            0',
            '    no compressible middle                        1            0',
            '    middle too small to help                      1            0',
            '    head+tail > target (tail)                     1            0',
            '  would stay over (extractive, exact)             3            0',
            '  tokens after                                  580          780',
            '  compression ratio                          0.7073       0.9512',
            '  fidelity, extractive: mean / p10      1.00 / 1.00  1.00 / 1.00',
            '    items the tail needs, kept                    -            -',
            '    rows with invented facts                      0            0',
            '',
            'LLM summarization (projected: 1 call per compressed row, 20-token summaries)',
            '  calls                                           2            1',
            '  input tokens (region text only)               346           76',
            '  output tokens                                  40           20',
            '  cost, USD ($1000/M in, $20000/M out)         1.15         0.48',
            '',
            'Strategies on the rows over the target (projected; --strategy)',
            '  target_max_tokens                             100          250',
            '  rows over the target                            4            1',
            '  summarize',
            '    rows under / still over                   1 / 3        1 / 0',
            '    summaries (LLM calls)                         2            1',
            '    tokens after                                545          225',
            '    assistant tokens kept                     56.2%        76.0%',
            '  mask',
            '    rows under / still over                   0 / 4        0 / 1',
            '    summaries (LLM calls)                         0            0',
            '    tokens after                                785          265',
            '    assistant tokens kept                    100.0%       100.0%',
            '  hybrid',
            '    rows under / still over                   1 / 3        1 / 0',
            '    summaries (LLM calls)                         2            1',
            '    tokens after                                545          225',
            '    assistant tokens kept                     56.2%        76.0%',
            '  target 100: summarize keeps the most training signal at the fewest calls:',
            '  56% of the assistant tokens, 2 summaries, 3 rows still over (mask: 100%, 0',
            '  summaries, 4 over; hybrid: 56%, 2 summaries, 3 over)',
            '  target 250: summarize keeps the most training signal at the fewest calls:',
            '  76% of the assistant tokens, 1 summary, 0 rows still over (mask: 100%, 0',
            '  summaries, 1 over; hybrid: 76%, 1 summary, 0 over)',
            '',
            'What would fix it at target 100: 3 rows still over the limit',
            '  (each re-planned as compress would; summaries projected at 20 tokens)',
            '  flags                                             rows brought under',
            '  --protect-last-n-turns 0                                      2 of 3',
            '  --target-max-tokens 195 (if your context allows)              3 of 3',
            '  no effect alone: --no-protect-first-system, --no-protect-first-human,',
            '    --no-protect-first-gpt, --no-protect-first-tool,',
            '    --over-limit-strategy elide_tool_outputs, --summary-target-tokens 2',
            '  together, the fewest flags that bring the most under (3 of 3):',
            '    --protect-last-n-turns 0 --no-protect-first-human',
            '  (re-planned 3 of the rows over the limit in 1.5 s CPU)',
            '',
            'Distill: tool outputs hold 325 tokens; 4 rows are over 100',
            '  level                saves  of tool   rows that would need no summary',
            '  --distill safe         115    35.4%   0',
            '  --distill all          115    35.4%   0',
            '  safe by rule: same_output 115',
            '  all by rule: same_output 115',
    ]


def _block(text: str, title: str) -> list[str]:
    """The lines of the block of ``text`` whose first line starts with ``title``."""
    (block,) = [b for b in text.split("\n\n") if b.startswith(title)]
    return block.splitlines()


def test_format_analysis_windows_block(tmp_path, monkeypatch, counter):
    from trajectory_compressor.app.analysis import format_analysis

    # Windows at 100 (four rows over it) and 250 (one: 2 windows, 2.0 per row); none at
    # 300, which is left out of the block.
    a = _analysis(tmp_path, monkeypatch, counter, "extractive", [100, 250, 300],
                  output_mode="windows")
    assert _block(format_analysis(a), "Windows output") == [
        "Windows output (rows over the target become windows that each fit)",
        "  target 100: 4 rows -> 13 windows (3.2 per row), 7 summaries,",
        "    320 of 320 assistant tokens trained (100%); rows out 14",
        "    1 window over the target; the others train 310 (97%)",
        "  target 250: 1 row -> 2 windows (2.0 per row), 1 summary,",
        "    125 of 125 assistant tokens trained (100%); rows out 6",
    ]
    assert ("LLM summarization (projected: 1 call per window summary, 20-token summaries)"
            in format_analysis(a).splitlines())


def test_format_analysis_one_target_with_the_gap_a_probe_and_a_long_cost_label(
        tmp_path, monkeypatch, counter):
    from trajectory_compressor.app.analysis import format_analysis
    from trajectory_compressor.inspect.analyze import CountingGap, Prices
    from trajectory_compressor.inspect.estimate import Probe, TargetTime, TimeEstimate

    a = _analysis(tmp_path, monkeypatch, counter, "extractive", [100])
    # Template minus turns: 20, -20, 0, 80. At 100: (90, 110) under by the turns, over by
    # the template. At 200: (150, 230) that way, (210, 190) the other.
    a.gap = CountingGap([100, 200, 10**18])
    for turns, template in ((90, 110), (210, 190), (95, 95), (150, 230)):
        a.gap.add(turns, template)
    a.time = TimeEstimate("openai", "probed", 5, 0.1, [TargetTime(100, 2, 0.5, 2, 1.0)],
                          seconds_per_call=0.5, concurrency=1,
                          probe=Probe(2, (0.5, 0.5), (), 0.0))
    # "cost, USD ($1000/M in, $200000/M out)" is 37 columns: the label is cut short.
    text = format_analysis(a, Prices(1000, 200000))
    lines = text.splitlines()
    assert lines[:3] == ["Dry run: nothing written; --probe sent 2 summary requests",
                         "  input   hand.jsonl", "  rows    5, rejected 1"]
    assert "  cost, USD                                    8.35" in lines
    assert _block(text, "Strategies")[-3:] == [
        "  summarize keeps the most training signal at the fewest calls: 56% of the",
        "  assistant tokens, 2 summaries, 3 rows still over (mask: 100%, 0 summaries, 4",
        "  over; hybrid: 56%, 2 summaries, 3 over)"]
    assert _block(text, "What would fix it")[:2] == [
        "What would fix it: 3 rows still over the limit",
        "  (each re-planned as compress would; extractive summaries: exact)"]
    gap = _block(text, "Counting")
    assert gap[:7] == [
        "Counting: chat-template length minus the per-turn sum, per row",
        "  min  p50  p90  p99  max",
        "  -20    0   80   80   80",
        "  target 100: 1 row under it by the per-turn sum is over it",
        "  by the template; 0 the other way round",
        "  target 200: 1 row under it by the per-turn sum is over it",
        "  by the template; 1 the other way round"]
    # A line too long for 80 columns is cut with an ellipsis.
    assert gap[7] == ("  target 1,000,000,000,000,000,000: 0 rows under it by the per-turn sum "
                      "are ove…")
    assert text.endswith("\n\n" + "\n".join([
        "Time compress would take: an estimate (openai summaries)",
        "  work timed here on 5 rows as analyze read them;",
        "  0.50 s per call, measured by --probe (2 requests: 0.50 s)",
        "  1 call at once",
        "  target_max_tokens                             100",
        "  local work (read, count, assemble)         0.50 s",
        "  summary calls                                   2",
        "  waiting for them                            1.0 s",
        "  estimated total                             1.5 s"]))


def test_format_analysis_edges(tmp_path, monkeypatch, counter):
    from trajectory_compressor.app.analysis import format_analysis, strategy_block
    from trajectory_compressor.core.config import CompressionConfig
    from trajectory_compressor.inspect.analyze import CountingGap, TargetAnalysis, analyze
    from trajectory_compressor.inspect.distill_preview import DistillPreview

    # Two targets in one bin of the histogram: one mark naming both.
    a = _analysis(tmp_path, monkeypatch, counter, "extractive", [100, 110])
    assert [line for line in format_analysis(a).splitlines() if "<-" in line] == [
        "  100 - 125 |############################## 1  <- target 100, 110"]
    # A distill preview that met no tool output, and a counting gap of no row: no block.
    assert "\nDistill: " in format_analysis(a)
    a.distill = DistillPreview(100)
    a.gap = CountingGap([100])
    assert "\nDistill: " not in format_analysis(a) and "\nCounting: " not in format_analysis(a)
    # No target with rows over it: no strategy block (an empty list of lines).
    assert strategy_block([TargetAnalysis(CompressionConfig())]) == []
    # No rows: rejected ones are listed, then said apart; none at all, said on one line.
    (tmp_path / "bad.jsonl").write_text("{oops\n", encoding="utf-8")
    (tmp_path / "empty.jsonl").write_text("", encoding="utf-8")
    config = CompressionConfig(summarizer="extractive", target_max_tokens=100,
                               summary_target_tokens=20)
    assert format_analysis(analyze("bad.jsonl", config, counter=counter)).splitlines() == [
        "Dry run: no LLM call, nothing written",
        "  input   bad.jsonl",
        "  rows    0, rejected 1",
        "",
        "Rejected rows: 1",
        "  bad.jsonl:1: invalid JSON: unexpected character, expected a string key: line …",
        "",
        "No rows to analyze."]
    assert format_analysis(analyze("empty.jsonl", config, counter=counter)).splitlines() == [
        "Dry run: no LLM call, nothing written",
        "  input   empty.jsonl",
        "  rows    0, rejected 0",
        "  no rows to analyze"]
    # A long input name keeps its end.
    deep = tmp_path / ("d" * 80)
    deep.mkdir()
    (deep / "empty.jsonl").write_text("", encoding="utf-8")
    name = str(deep / "empty.jsonl")
    assert format_analysis(analyze(name, config, counter=counter)).splitlines()[1] == \
        "  input   …" + name[-69:]


# --- app.batch: the two phases of --summarizer batch -------------------------------------


def test_format_export_word_for_word():
    from pathlib import Path

    from trajectory_compressor.app.batch import format_export
    from trajectory_compressor.engine.batch import BatchFile, ExportResult
    from trajectory_compressor.inspect.analyze import Prices
    from trajectory_compressor.summarizers.batch import ExportStats

    # A folder and a model with a space: quoted for the shell. The cost at most:
    # 2.5 M in at $1.25 + 0.6 M out at $10 = $9.125.
    folder = Path("/data/my batch")
    stats = ExportStats(summaries=1234, requests=1200, duplicates=30, cached=4,
                        prompt_tokens=2_500_000, max_output_tokens=600_000)
    files = [BatchFile("requests-00001.jsonl", 1000, 150_000_000),
             BatchFile("requests-00002.jsonl", 200, 25_050_000)]
    export = ExportResult(folder, folder / "manifest.json", "gpt-4o mini", files, stats,
                          rows=56789, rows_rejected=3)
    assert format_export(export, Prices(1.25, 10)).splitlines() == [
        'Batch requests written: 1,200 in 2 files under /data/my batch (model gpt-4o mini)',
        '  rows                 56,789   rejected 3',
        ("  to summarize          1,234   sharing another row's request 30, already in the "
         'summary cache 4'),
        '  requests-00001.jsonl        1,000 requests     150.0 MB',
        '  requests-00002.jsonl          200 requests      25.1 MB',
        "  input tokens      2,500,000   (the prompts, counted with the run's tokenizer)",
        '  output tokens       600,000   (at most: max_tokens)',
        '  projected cost   $     9.12   at most, at $1.25 in / $10 out per million tokens',
        '  manifest         /data/my batch/manifest.json',
        '',
        'Next: have every request file answered, then run the same command again with',
        ("--batch-results '/data/my batch/results-*.jsonl' (output and error files; repeat the "
         'flag or use a pattern).'),
        '  OpenAI Batch API (about half the online price, within 24 h), for each file:',
        ('    curl https://api.openai.com/v1/files -H "Authorization: Bearer $OPENAI_API_KEY" '
         "-F purpose=batch -F file=@'/data/my batch/requests-00001.jsonl'"),
        ('    curl https://api.openai.com/v1/batches -H "Authorization: Bearer $OPENAI_API_KEY" '
         '-H \'Content-Type: application/json\' -d \'{"input_file_id": "FILE_ID", "endpoint": '
         '"/v1/chat/completions", "completion_window": "24h"}\''),
        ('    curl https://api.openai.com/v1/files/OUTPUT_FILE_ID/content -H "Authorization: '
         'Bearer $OPENAI_API_KEY" > \'/data/my batch/results-00001.jsonl\''),
        "    (and the same for the batch's error_file_id, if it has one)",
        '  vLLM on your own GPUs (no server needed), for each file:',
        ("    vllm run-batch -i '/data/my batch/requests-00001.jsonl' -o '/data/my "
         "batch/results-00001.jsonl' --model 'gpt-4o mini'"),
    ]
    one = ExportResult(Path("b"), Path("b/manifest.json"), "m",
                       [BatchFile("requests-00001.jsonl", 1, 999)],
                       ExportStats(1, 1, 0, 0, 10, 20), rows=1)
    assert format_export(one).splitlines() == [
        'Batch requests written: 1 in 1 file under b (model m)',
        '  rows                      1   rejected 0',
        ("  to summarize              1   sharing another row's request 0, already in the "
         'summary cache 0'),
        '  requests-00001.jsonl            1 requests       0.0 MB',
        "  input tokens             10   (the prompts, counted with the run's tokenizer)",
        '  output tokens            20   (at most: max_tokens)',
        '  manifest         b/manifest.json',
        '',
        'Next: have every request file answered, then run the same command again with',
        ("--batch-results 'b/results-*.jsonl' (output and error files; repeat the flag or use a "
         'pattern).'),
        '  OpenAI Batch API (about half the online price, within 24 h), for each file:',
        ('    curl https://api.openai.com/v1/files -H "Authorization: Bearer $OPENAI_API_KEY" '
         '-F purpose=batch -F file=@b/requests-00001.jsonl'),
        ('    curl https://api.openai.com/v1/batches -H "Authorization: Bearer $OPENAI_API_KEY" '
         '-H \'Content-Type: application/json\' -d \'{"input_file_id": "FILE_ID", "endpoint": '
         '"/v1/chat/completions", "completion_window": "24h"}\''),
        ('    curl https://api.openai.com/v1/files/OUTPUT_FILE_ID/content -H "Authorization: '
         'Bearer $OPENAI_API_KEY" > b/results-00001.jsonl'),
        "    (and the same for the batch's error_file_id, if it has one)",
        '  vLLM on your own GPUs (no server needed), for each file:',
        '    vllm run-batch -i b/requests-00001.jsonl -o b/results-00001.jsonl --model m',
    ]
    none = ExportResult(Path("b"), Path("b/manifest.json"), "m", [], ExportStats(), rows=0)
    assert format_export(none).splitlines() == [
        'Batch requests written: 0 in 0 files under b (model m)',
        '  rows                      0   rejected 0',
        ("  to summarize              0   sharing another row's request 0, already in the "
         'summary cache 0'),
        "  input tokens              0   (the prompts, counted with the run's tokenizer)",
        '  output tokens             0   (at most: max_tokens)',
        '  manifest         b/manifest.json',
        '',
        ('Nothing to send: run the same command with --batch-results and no file, or compress '
         'without --summarizer batch.'),
    ]


def test_format_import_word_for_word():
    from collections import Counter
    from pathlib import Path

    from trajectory_compressor.app.batch import format_import
    from trajectory_compressor.summarizers.batch import ImportReport

    report = ImportReport([Path("a"), Path("b")], lines=1500, accepted=1400,
                          failed=Counter({"expired": 3, "http_500": 1200}),
                          unreadable=["b:7: not JSON", "b:9: x"], unknown=1001, missing=2000)
    head = [
        ('Batch results: 1,500 lines in 2 files; 1,400 summaries accepted, 1,203 failed '
         '(http_500 1,200, expired 3)'),
        '  2,000 exported requests have no result',
        '  1,001 results answer requests this export does not hold (loaded into the cache anyway)',
        '  2 lines unreadable, the first: b:7: not JSON',
    ]
    assert format_import(report, online=False).splitlines() == [*head,
        ('  rows whose request failed or has no result get the extractive fallback '
         '(summary_source "fallback"); give --base-url to send them online instead')]
    assert format_import(report, online=True).splitlines() == [*head,
        '  rows whose request failed or has no result go to the configured endpoints']
    # All answered: one line. A failure alone, or a missing result alone, says where.
    clean = ImportReport([Path("a")], lines=1, accepted=1, missing=0)
    assert format_import(clean, online=False) == (
        'Batch results: 1 line in 1 file; 1 summary accepted, 0 failed')
    failed = ImportReport([Path("a")], lines=1, failed=Counter({"x": 1}))
    assert format_import(failed, online=True).splitlines() == [
        'Batch results: 1 line in 1 file; 0 summaries accepted, 1 failed (x 1)',
        '  rows whose request failed or has no result go to the configured endpoints',
    ]
    assert format_import(ImportReport([], missing=1), online=True).splitlines() == [
        'Batch results: 0 lines in 0 files; 0 summaries accepted, 0 failed',
        '  1 exported request has no result',
        '  rows whose request failed or has no result go to the configured endpoints',
    ]


def test_batch_input_runs_both_phases_and_prints_unless_quiet(tmp_path, capsys):
    from tests.test_batch import answer, request_files
    from tests.test_kills5_engine import batch_config, two_to_summarize
    from trajectory_compressor.app.batch import batch_input
    from trajectory_compressor.engine.batch import BatchLimits
    from trajectory_compressor.engine.options import RunOptions
    from trajectory_compressor.inspect.analyze import Prices

    src = str(two_to_summarize(tmp_path / "in.jsonl"))
    folder, out = tmp_path / "batch", str(tmp_path / "out.jsonl")
    config = batch_config(summarizer="batch")
    loud = RunOptions(quiet=False)
    # Phase 1: two requests in one file, said on stdout with the cost at most.
    assert batch_input(src, out, config, loud, batch_dir=str(folder), results=None,
                       limits=BatchLimits(), prices=Prices(1000, 2000)) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[0] == f"Batch requests written: 2 in 1 file under {folder} (model fake-model)"
    assert said[6].startswith("  projected cost   $     1.30   at most, at $1000 in")
    assert request_files(folder) == [folder / "requests-00001.jsonl"]
    # Quiet: the same files written, nothing said.
    quiet_folder = tmp_path / "quiet"
    assert batch_input(src, out, config, RunOptions(), batch_dir=str(quiet_folder),
                       results=None, limits=BatchLimits()) == 0
    assert capsys.readouterr().out == ""
    assert request_files(quiet_folder) == [quiet_folder / "requests-00001.jsonl"]
    # Phase 2, one request unanswered: what the results held, then the run's summary.
    results = folder / "results.jsonl"
    answer(request_files(folder), results, missing=(1,))
    assert batch_input(src, out, config, loud, batch_dir=str(folder), results=[str(results)],
                       limits=BatchLimits()) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[:4] == [
        "Batch results: 1 line in 1 file; 1 summary accepted, 0 failed",
        "  1 exported request has no result",
        "  rows whose request failed or has no result get the extractive fallback "
        "(summary_source \"fallback\"); give --base-url to send them online instead",
        "Trajectory compression finished"]
    assert "  summaries                 2  llm=1 fallback=1" in said
    # Quiet, from the cache phase 2 filled: nothing said, the same exit code.
    assert batch_input(src, str(tmp_path / "again.jsonl"), config, RunOptions(),
                       batch_dir=str(folder), results=[str(results)],
                       limits=BatchLimits()) == 0
    assert capsys.readouterr().out == ""


def test_batch_input_refuses_what_does_not_go_with_it(tmp_path):

    from tests.test_kills5_engine import batch_config
    from trajectory_compressor.app.batch import batch_input
    from trajectory_compressor.core.errors import ConfigError
    from trajectory_compressor.engine.batch import BatchLimits
    from trajectory_compressor.engine.options import RunOptions
    from trajectory_compressor.inspect.analyze import Prices

    src, out, folder = str(tmp_path / "in.jsonl"), str(tmp_path / "out.jsonl"), str(tmp_path)
    cases = [
        (batch_config(), folder, None, None, "go with --summarizer batch"),
        (batch_config(summarizer="batch", engine="ray"), folder, None, None,
         "runs on the local engine"),
        (batch_config(summarizer="batch"), None, None, None, "needs --batch-dir DIR"),
        (batch_config(summarizer="batch"), folder, ["r.jsonl"], Prices(1, 2),
         "give them without --batch-results"),
    ]
    for config, batch_dir, results, prices, said in cases:
        with pytest.raises(ConfigError, match=said):
            batch_input(src, out, config, RunOptions(), batch_dir=batch_dir, results=results,
                        limits=BatchLimits(), prices=prices)
    assert not (tmp_path / "manifest.json").exists()
