"""Kill tests for `app/` modules (issue 40 item 8): what they print or decide, word for
word, on hand-made inputs (`app.strategy_text`, `app.no_llm`, `app.gates`,
`app.textfmt`, `app.flags`)."""

from __future__ import annotations

from trajectory_compressor.app.no_llm import never_answered
from trajectory_compressor.app.options import Budget
from trajectory_compressor.app.strategy_text import strategy_lines


def test_strategy_lines_word_for_word():
    assert strategy_lines(None) == [] and strategy_lines({"rows_by_strategy": {}}) == []
    lines = strategy_lines({
        "rows_by_strategy": {"mask": 3, "mask+summarize": 1200}, "masked_turns": 1234,
        "masked_tokens": 56789, "masked_rows": 4, "assistant_tokens_kept": 0.98765,
        "assistant_tokens_before": 43210})
    assert lines == [
        "  strategy         rows over the target: mask 3, mask+summarize 1,200",
        "  masked               56,789   tokens off 1,234 tool turns of 4 rows",
        "  assistant kept        98.8%   of 43,210 assistant tokens of the rows over",
    ]
    # No masking, no kept share (a metrics file of a run before strategies): one line.
    assert strategy_lines({"rows_by_strategy": {"summarize": 2}, "masked_turns": 0,
                           "assistant_tokens_kept": "n/a"}) == [
        "  strategy         rows over the target: summarize 2"]
    # A kept share of exactly 1 (an int) and missing counts.
    assert strategy_lines({"rows_by_strategy": {"none": 1}, "masked_turns": 2,
                           "assistant_tokens_kept": 1}) == [
        "  strategy         rows over the target: none 1",
        "  masked                    0   tokens off 2 tool turns of 0 rows",
        "  assistant kept       100.0%   of 0 assistant tokens of the rows over"]


def test_strategy_lines_wrap_at_78_columns_under_the_label():
    rows = {f"strategy-{i}": i for i in range(12)}
    lines = strategy_lines({"rows_by_strategy": rows})
    assert len(lines) > 1 and all(len(line) <= 78 for line in lines)
    assert lines[0].startswith("  strategy         rows over the target: strategy-0 0,")
    assert all(line.startswith(" " * 19) and not line.startswith(" " * 20)
               for line in lines[1:])
    assert " ".join(line.strip() for line in lines).endswith("strategy-11 11")


def _metrics(sources: dict, calls: int, errors: int, kinds: dict | None = None) -> dict:
    return {"summarization": {"summaries_by_source": sources, "total_api_calls": calls,
                              "total_errors": errors, "errors_by_kind": kinds or {}}}


def test_never_answered_word_for_word():
    one = never_answered(_metrics({"fallback": 1}, 1, 1, {"http_5xx": 1}))
    assert one == (
        "no summary came from the LLM: the summary asked of it fell back to extractive "
        "ones, and none of the 1 request sent succeeded (failures by kind: http_5xx 1); "
        "the outputs are written, each such row marked summary_source \"fallback\"; fix "
        "the endpoint (the warnings above say how it failed), or pass --allow-fallback "
        "to accept a run without LLM summaries")
    many = never_answered(_metrics({"fallback": 1500}, 4500, 4500,
                                   {"timeout": 1000, "http_429": 3500}))
    assert many is not None and many.startswith(
        "no summary came from the LLM: all 1,500 summaries asked of it fell back to "
        "extractive ones, and none of the 4,500 requests sent succeeded (failures by "
        "kind: http_429 3,500, timeout 1,000); ")
    # No request sent at all (every row fell back before): said, with no kinds.
    none_sent = never_answered(_metrics({"fallback": 2}, 0, 0))
    assert none_sent is not None
    assert "none of the 0 requests sent succeeded; the outputs" in none_sent


def test_never_answered_only_when_nothing_came_from_the_llm():
    assert never_answered({}) is None
    assert never_answered(_metrics({}, 3, 3)) is None  # no fallback: nothing to say
    assert never_answered(_metrics({"fallback": 2, "llm": 1}, 3, 2)) is None
    assert never_answered(_metrics({"fallback": 2, "cache": 1}, 2, 2)) is None
    # One request succeeded (its summary then refused by the fidelity bar, say).
    assert never_answered(_metrics({"fallback": 2}, 3, 2)) is None
    assert never_answered(_metrics({"fallback": 2}, 2, 2)) is not None
    # More errors than calls (retries counted apart) still means none succeeded.
    assert never_answered(_metrics({"fallback": 2}, 2, 5)) is not None
    # The extractive summarizer's own summaries are not the LLM's.
    assert never_answered(_metrics({"fallback": 1, "extractive": 4}, 1, 1)) is not None


def test_never_answered_reads_missing_counts_as_zero():
    sources = {"summaries_by_source": {"fallback": 2}}
    # No count of calls or errors recorded: no request was sent, none succeeded.
    said = never_answered({"summarization": dict(sources)})
    assert said is not None and "none of the 0 requests sent succeeded" in said
    # One call and no error recorded: it succeeded.
    assert never_answered({"summarization": {**sources, "total_api_calls": 1}}) is None


def test_the_no_llm_exit_code_is_the_documented_2():
    from trajectory_compressor.app.cli import EXIT_CODES
    from trajectory_compressor.app.no_llm import NO_LLM_EXIT

    assert NO_LLM_EXIT == 2 and "\n  2    usage or configuration error" in EXIT_CODES


def test_the_fallback_share_gate_counts_fallbacks_of_the_summaries_asked():
    from trajectory_compressor.app.gates import Counts, GateResult, counts_of, parse_gate

    counts = Counts(rows=10, over_limit=1, failed=2, rejected=3, fallbacks=4, summaries=50)
    assert counts.of("fallback_share") == (4, 50)
    assert counts.of("rejected") == (3, 13) and counts.of("over_limit") == (1, 10)
    gate = parse_gate("fallback_share", "5%")
    assert not GateResult(gate, *counts.of("fallback_share")).passed  # 8% > 5%
    assert GateResult(gate, 2, 50).passed  # 4%
    # From a metrics file: fallbacks of the summaries asked of the LLM (extractive ones
    # are not asked of it).
    metrics = {"summary": {"total_trajectories": 9},
               "summarization": {"summaries_by_source": {
                   "llm": 5, "cache": 2, "fallback": 3, "extractive": 40}}}
    assert counts_of(metrics).of("fallback_share") == (3, 10)


def test_gate_lines_and_the_exit_code(capsys):
    from trajectory_compressor.app.gates import (
        GATE_EXIT,
        Counts,
        GateResult,
        apply_gates,
        parse_gate,
    )

    assert GATE_EXIT == 3
    counts = Counts(rows=2000, over_limit=1, failed=0, rejected=0, fallbacks=1, summaries=1)
    gates = [parse_gate("over_limit", "0%"), parse_gate("failed", "0"),
             parse_gate("fallback_share", "0")]
    assert apply_gates(gates, counts, 1) == GATE_EXIT
    err = capsys.readouterr().err
    # A share under 0.1% gets two decimals, and no gate passes quietly on stderr.
    assert err == ("gate failed: over-limit rows 1 (0.05%) > 0%\n"
                   "gate failed: fallback summaries 1 (100.0%) > 0\n")
    assert apply_gates(gates[1:2], counts, 1) == 1 and capsys.readouterr().err == ""
    # 0.1% exactly has one decimal; no rows at all is 0%.
    assert GateResult(parse_gate("failed", "0"), 1, 1000).line() == \
        "gate failed: failed rows 1 (0.1%) > 0"
    assert GateResult(parse_gate("failed", "0"), 0, 0).line() == \
        "gate failed: failed rows 0 (0%) > 0"


def test_gate_results_flush_the_commands_output_first(capfd):
    import sys

    from trajectory_compressor.app.gates import Counts, apply_gates, parse_gate

    sys.stdout.write("the command's summary")  # no newline: only a flush writes it
    sys.stderr.write("before")
    code = apply_gates([parse_gate("failed", "0")], Counts(1, 0, 1, 0), 0)
    out, err = capfd.readouterr()
    assert code == 3 and out == "the command's summary"
    assert err == "beforegate failed: failed rows 1 (100.0%) > 0\n"


def test_gate_results_as_json_and_finish_defaults_to_exit_0():
    from trajectory_compressor.app.gates import GateResult, finish, parse_gate

    result = GateResult(parse_gate("max_over_limit"[4:], "1%"), 1, 3)
    assert result.to_dict() == {"gate": "max-over-limit", "limit": "1%", "count": 1,
                                "total": 3, "share_percent": 33.3333, "passed": False}
    assert finish([GateResult(parse_gate("failed", "5"), 1, 3)]) == 0


def test_a_gate_line_comes_after_the_commands_output_on_one_stream(tmp_path):
    """stdout and stderr into one file (a CI log): the command's summary, still in
    stdout's buffer, is written before the gate's line."""
    import subprocess
    import sys
    from pathlib import Path

    from trajectory_compressor.app import gates

    root = Path(gates.__file__).resolve().parents[2]  # the package as imported here
    code = ("import sys\n"
            "from trajectory_compressor.app.gates import Counts, apply_gates, parse_gate\n"
            "sys.stdout.write('summary of the run\\n')\n"
            "sys.exit(apply_gates([parse_gate('failed', '0')], Counts(1, 0, 1, 0), 0))\n")
    log = tmp_path / "ci.log"
    with log.open("wb") as sink:
        done = subprocess.run([sys.executable, "-c", code], stdout=sink, stderr=sink,
                              env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
                              timeout=120)
    assert done.returncode == 3
    assert log.read_text() == ("summary of the run\n"
                               "gate failed: failed rows 1 (100.0%) > 0\n")


# --- app/textfmt.py: the plain-text helpers, line for line ----------------------------

def test_reject_lines_word_for_word():
    from trajectory_compressor.app.textfmt import reject_lines

    assert reject_lines([], 0, None) == [] and reject_lines([("a", "b")], -1, "r") == []
    first = [("data/in.jsonl:3", "not JSON: Expecting value"),
             ("data/in.jsonl:9", "a role that is not text")]
    assert reject_lines(first, 2, "out_rejects.jsonl") == [
        "Rejected rows: 2",
        "  data/in.jsonl:3: not JSON: Expecting value",
        "  data/in.jsonl:9: a role that is not text"]
    assert reject_lines(first[:1], 1234, None) == [
        "Rejected rows: 1,234",
        "  data/in.jsonl:3: not JSON: Expecting value",
        "  … and 1,233 more; compress lists every one in <output stem>_rejects.jsonl"]
    assert reject_lines(first[:1], 3, "runs/out_rejects.jsonl")[-1] == \
        "  … and 2 more; see runs/out_rejects.jsonl"
    # Long paths lose their start, long reasons their end; every line within the width.
    where = "/very/long/folder/" * 6 + "in.jsonl:77"
    why = "reason " * 30
    path = "/p/" * 40 + "x_rejects.jsonl"
    lines = reject_lines([(where, why)], 5, path, width=60)
    assert all(len(line) <= 60 for line in lines)
    assert lines[1] == "  …" + where[-(30 - 1):] + ": " + why[:60 - 34 - 1] + "…"
    more = "  … and 4 more; "
    assert lines[2] == more + "see " + "…" + path[-(60 - len(more) - 4 - 1):]
    assert len(lines[2]) == 60


def test_table_lines_exactly():
    from trajectory_compressor.app.textfmt import Column, table

    cols = [Column("id"), Column("tokens", right=True)]
    assert table(cols, [["a", "1,234"], ["bb", "5"]]) == [
        "  id  tokens", "  a    1,234", "  bb       5"]
    assert table(cols, [["a", "1"]], indent=0) == ["id  tokens", "a        1"]
    # A column's max_width clips its cells; the header alone sets a floor of 8 for shrinking.
    capped = [Column("text", max_width=5), Column("n", right=True)]
    assert table(capped, [["abcdefgh", "1"]]) == ["  text   n", "  abcd…  1"]
    wide = [Column("name", flex=True, priority=1), Column("why", flex=True),
            Column("n", right=True)]
    rows = [["n" * 30, "w" * 30, "7"]]
    got = table(wide, rows, width=40)
    # 2 + 30 + 30 + 1 + 2 gaps of 2 = 67: 27 columns come off "why" first (priority 0),
    # down to its floor of 8, then 5 off "name": 2 + 25 + 2 + 8 + 2 + 1 = 40.
    assert got == ["  name" + " " * 21 + "  why       n",
                   "  " + "n" * 24 + "…  " + "w" * 7 + "…  7"]
    assert all(len(line) <= 40 for line in got)
    # Nothing flexible: the line is clipped at the width, with an ellipsis.
    fixed = table([Column("x"), Column("y")], [["x" * 50, "y" * 50]], width=40)
    assert [len(line) for line in fixed] == [40, 40]
    assert fixed[1] == "  " + "x" * 37 + "…"
    # A flexible column at its floor (8, or its header) does not shrink further.
    floor = table([Column("header-ten", flex=True), Column("y")],
                  [["h" * 12, "y" * 40]], width=30)
    assert floor[1].startswith("  " + "h" * 9 + "…  ")


def test_histogram_lines_exactly():
    from trajectory_compressor.app.textfmt import histogram_lines

    lines = histogram_lines([0, 10, 100, 1000], [3, 0, 1], marks={2: "target"},
                            bar_width=6)
    assert lines == ["       0 - 10 |###### 3",
                     "     10 - 100 |       0",
                     "  100 - 1,000 |##     1  target"]
    # Bars round up: 1 of 10 on 4 columns is one mark; counts align right.
    assert histogram_lines([0, 1, 2], [10, 1], bar_width=4) == [
        "  0 - 1 |#### 10", "  1 - 2 |#     1"]
    assert histogram_lines([0, 1], [0], indent=0, bar_width=3) == ["0 - 1 |    0"]


def test_clip_pad_and_widths_at_their_edges():
    from trajectory_compressor.app.textfmt import (
        char_width,
        clip,
        display_width,
        first_line,
        num,
        one_line,
        pad,
    )

    assert clip("abcdef", 6) == "abcdef" and clip("abcdef", 5) == "abcd…"
    assert clip("abcdef", 5, left=True) == "…cdef" and clip("abc", 0) == ""
    assert clip("abc", -3) == "" and clip("ab", 1) == "…"
    assert clip("漢字かな", 5) == "漢字…" and clip("漢字かな", 5, left=True) == "…かな"
    assert display_width("漢a\u0301\u200b") == 3  # wide, plain, combining, format
    assert char_width("\u0488") == 0  # an enclosing mark (Me)
    assert pad("ab", 4) == "ab  " and pad("ab", 4, right=True) == "  ab"
    assert pad("abcdef", 3) == "abcdef"
    assert num(None) == "-" and num(1234567) == "1,234,567" and num(2.5) == "2.50"
    assert num(1234.5) == "1,234.50"
    assert one_line("a\x1b[31mb\x1bZ\tc\n\nd ") == "ab c d"
    assert first_line("<think>\n\n  next line  \nlast") == "next line"
    assert first_line("<tool_response>\n</tool_response>") == "<tool_response>"
    assert first_line("") == ""


def test_reason_labels_and_order():
    from trajectory_compressor.app.textfmt import reason_order, short_reason
    from trajectory_compressor.core import reasons

    first, last = reasons.OVER_LIMIT[0], reasons.OVER_LIMIT[-1]
    assert reason_order(first.text) == (0, "")
    assert reason_order(last.code) == (len(reasons.OVER_LIMIT) - 1, "")
    assert reason_order("zzz went wrong") == (len(reasons.OVER_LIMIT), "zzz went wrong")
    assert sorted(["b failed", last.text, "a failed", first.text], key=reason_order) == [
        first.text, last.text, "a failed", "b failed"]
    assert short_reason("") == "over the target"
    assert short_reason("boom\nand more " * 5) == "failed: boom and more boom and …"
    assert len(short_reason("x" * 100)) == 32


def test_textfmt_defaults_and_small_cases():
    import dataclasses

    import pytest

    from trajectory_compressor.app.textfmt import (
        Column,
        histogram_lines,
        one_line,
        reject_lines,
    )

    assert one_line("a\x00b\x7fc") == "a b c"  # control characters are spaces
    [line] = histogram_lines([0, 5], [2])
    assert line == "  0 - 5 |" + "#" * 30 + " 2"  # 30 columns of bar by default
    long = [("x" * 200, "y" * 200)]
    assert max(len(line) for line in reject_lines(long, 1, None)) == 80
    assert reject_lines([("in.jsonl:1", "bad")], 1, None) == [
        "Rejected rows: 1", "  in.jsonl:1: bad"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        Column("x").header = "y"  # type: ignore[misc]


# --- app/flags.py: option groups and how --help shows them ----------------------------

def test_option_groups_by_their_flag_names():
    from trajectory_compressor.app.options import Reading

    budget = Budget(target_max_tokens=4000, summary_target_tokens=None,
                    tokenizer_name="tok")
    assert budget.by_flag() == {"--target-max-tokens": 4000,
                                "--summary-target-tokens": None, "--tokenizer": "tok"}
    assert budget.values() == {"target_max_tokens": 4000, "summary_target_tokens": None,
                               "tokenizer_name": "tok"} == budget.overrides()
    assert list(Reading().by_flag()) == ["--format", "--token-counting", "--chat-template"]


def test_an_option_named_in_its_declarations_or_with_a_slash():
    from typing import Annotated

    import typer

    from trajectory_compressor.app.flags import _option_name

    assert _option_name(Annotated[int, typer.Option("-n", "--rows")]) == "--rows"
    assert _option_name(Annotated[bool, typer.Option("--on/--off")]) == "--on"
    assert _option_name(Annotated[int, typer.Option("--only")]) == "--only"


def test_spread_flags_gives_typer_each_option_and_the_command_its_group():
    from typing import get_type_hints

    from trajectory_compressor.app.flags import spread_flags

    seen = []

    def command(name: str, *, budget: Budget, last: int = 1) -> str:
        seen.append((name, budget, last))
        return "done"

    spread = spread_flags(command)
    hints = get_type_hints(spread, include_extras=True)
    assert list(hints) == ["name", "target_max_tokens", "summary_target_tokens",
                           "tokenizer_name", "last"]
    # Each option keeps its typer.Option (the name typer shows), not just its type.
    assert hints["target_max_tokens"].__metadata__[0].default == "--target-max-tokens"
    assert spread(name="x", target_max_tokens=5, summary_target_tokens=None,
                  tokenizer_name=None, last=2) == "done"
    assert seen == [("x", Budget(target_max_tokens=5), 2)]


def test_help_shows_flags_without_a_bool_type_and_fills_its_placeholders():
    from tests.cli_helpers import invoke_cli
    from trajectory_compressor.app.cli import HELP_NOW

    for args in (("--help",), ("compress", "--help"), ("analyze", "--help")):
        shown = invoke_cli(*args, env={"COLUMNS": "200"})
        assert shown.returncode == 0 and "<bool>" not in shown.stdout
    compress = invoke_cli("compress", "--help", env={"COLUMNS": "200"}).stdout
    # Options that take a value keep their type.
    assert "--target-max-tokens" in compress and "<int>" in compress
    assert HELP_NOW not in compress and "Here and now:" in compress
    assert "--allow-fallback" in compress and "--version" in invoke_cli("--help").stdout


# --- app/timeline.py: a row's turns by part (report --show) ------------------------------

ROLES = ["system", "human", "gpt", "tool", "gpt", "tool", "gpt", "tool", "gpt", "tool", "gpt"]
TOKENS = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110]


def _turns() -> list[dict]:
    return [{"from": r, "value": f"<think>\n{r} {i} says\nmore"} for i, r in enumerate(ROLES)]


def test_an_unchanged_row_re_planned_line_for_line():
    from trajectory_compressor.app.timeline import build_timeline, format_timeline
    from trajectory_compressor.core.config import CompressionConfig

    # Head: the first system, human, gpt and tool turns (0-3); tail: the last 4 (7-10);
    # 660 > 600: the planner's region is turns 4-5 (110 tokens for a 20-token summary).
    config = CompressionConfig(target_max_tokens=600, summary_target_tokens=20)
    timeline = build_timeline(_turns(), TOKENS, None, config)
    assert not timeline.compressed and (timeline.middle.start, timeline.middle.end) == (4, 7)
    assert format_timeline(timeline, ["Title"]) == [
        "Title", "",
        "     #   orig  role       tokens  first line",
        "  -- protected head: 4 turns, 100 tokens",
        "     0      0  system         10  system 0 says",
        "     1      1  human          20  human 1 says",
        "     2      2  gpt            30  gpt 2 says",
        "     3      3  tool           40  tool 3 says",
        "  -- region chosen for a summary (not summarized): 2 turns, 110 tokens",
        "     4      4  gpt            50  gpt 4 says",
        "     5      5  tool           60  tool 5 says",
        "  -- compressible middle (kept): 1 turn, 70 tokens",
        "     6      6  gpt            70  gpt 6 says",
        "  -- protected tail: 4 turns, 380 tokens",
        "     7      7  tool           80  tool 7 says",
        "     8      8  gpt            90  gpt 8 says",
        "     9      9  tool          100  tool 9 says",
        "    10     10  gpt           110  gpt 10 says",
        "",
        "  head 100 + region 110 + middle 70 + tail 380 = 660 tokens",
        "  target 600: over by 60",
        "  protected head+tail alone: 480 tokens, within the target"]
    tight = build_timeline(_turns(), TOKENS, None, config.replace(target_max_tokens=480))
    assert format_timeline(tight, [])[-1] == \
        "  protected head+tail alone: 480 tokens, within the target"
    tighter = build_timeline(_turns(), TOKENS, None, config.replace(target_max_tokens=479))
    assert format_timeline(tighter, [])[-1] == \
        "  protected head+tail alone: 480 tokens, over the target"


def test_a_compressed_row_read_as_written():
    from trajectory_compressor.app.timeline import build_timeline, format_timeline
    from trajectory_compressor.core.config import CompressionConfig
    from trajectory_compressor.core.metrics import TrajectoryMetrics

    config = CompressionConfig(target_max_tokens=600, summary_target_tokens=20)
    metrics = TrajectoryMetrics(original_tokens=660, was_compressed=True, original_turns=11)
    metrics.turns_compressed_start_idx, metrics.turns_compressed_end_idx = 4, 7
    turns = _turns()
    written = [*turns[:4], {"from": "human", "value": "[CONTEXT SUMMARY]: did things"},
               *turns[7:]]
    counts = [10, 20, 30, 40, 25, 80, 90, 100, 110]
    timeline = build_timeline(written, counts, metrics, config)
    assert timeline.compressed
    assert [(t.index, t.start, t.end, t.part) for t in timeline.turns] == [
        (0, 0, 1, "head"), (1, 1, 2, "head"), (2, 2, 3, "head"), (3, 3, 4, "head"),
        (4, 4, 7, "summary"), (5, 7, 8, "tail"), (6, 8, 9, "tail"), (7, 9, 10, "tail"),
        (8, 10, 11, "tail")]
    lines = format_timeline(timeline, ["T"])
    assert lines[8:10] == [
        "  -- summarized region: original turns 4-6 (3 turns) -> summary of 25 tokens",
        "     4    4-6  human          25  [CONTEXT SUMMARY]: did things"]
    assert lines[-3:] == ["  head 100 + summary 25 + tail 380 = 505 tokens",
                          "  target 600: within, 95 to spare",
                          "  protected head+tail alone: 480 tokens, within the target"]
    data = timeline.to_dict()
    assert data["tokens_by_part"] == {"head": 100, "summary": 25, "tail": 380}
    assert data["turns"][4] == {"index": 4, "original_start": 4, "original_end": 7,
                                "role": "human", "tokens": 25, "part": "summary",
                                "first_line": "[CONTEXT SUMMARY]: did things"}
    assert (data["total_tokens"], data["compressed"], data["target_max_tokens"]) == \
        (505, True, 600)
    assert data["compressible_middle"] == {"start_idx": 4, "end_idx": 7}
    # Metrics that do not describe the turns as written (one turn missing, no summary
    # at the start, a region past the end): the row is re-planned as unchanged.
    for bad in (written[:-1], [*written[:4], turns[4], *written[5:]]):
        assert not build_timeline(bad, counts[:len(bad)], metrics, config).compressed
    metrics.turns_compressed_start_idx = 9
    assert not build_timeline(written, counts, metrics, config).compressed


def test_timeline_clips_roles_and_first_lines():
    from trajectory_compressor.app.timeline import build_timeline, format_timeline
    from trajectory_compressor.core.config import CompressionConfig

    turns = [{"from": "system", "value": "s"}, {"from": "assistant_x", "value": "w" * 300}]
    timeline = build_timeline(turns, [1, 2], None, CompressionConfig())
    assert timeline.to_dict()["turns"][1]["first_line"] == "w" * 199 + "…"
    line = next(line for line in format_timeline(timeline, []) if "assist" in line)
    assert line.startswith("     1      1  assist…         2  www") and len(line) == 80


def test_timeline_edges():
    import dataclasses

    import pytest

    from trajectory_compressor.app.timeline import TimelineTurn, build_timeline, format_timeline
    from trajectory_compressor.core.config import CompressionConfig

    config = CompressionConfig(target_max_tokens=660, summary_target_tokens=20)
    # At the target exactly: within, nothing to spare; one over: over by 1.
    assert format_timeline(build_timeline(_turns(), TOKENS, None, config), [])[-2] == \
        "  target 660: within, 0 to spare"
    over = config.replace(target_max_tokens=659)
    assert format_timeline(build_timeline(_turns(), TOKENS, None, over), [])[-2] == \
        "  target 659: over by 1"
    # Under the target: no region; the middle starts at turn 4, which is middle.
    under = build_timeline(_turns(), TOKENS, None, config.replace(target_max_tokens=10000))
    assert [t.part for t in under.turns] == ["head"] * 4 + ["middle"] * 3 + ["tail"] * 4
    # Nothing protected: no head or tail part, and none of their tokens.
    bare = config.replace(protect_first_system=False, protect_first_human=False,
                          protect_first_gpt=False, protect_first_tool=False,
                          protect_last_n_turns=0, target_max_tokens=10000)
    open_row = build_timeline(_turns(), TOKENS, None, bare)
    assert {t.part for t in open_row.turns} == {"middle"} and open_row.protected_tokens == 0
    assert format_timeline(open_row, [])[-1] == \
        "  protected head+tail alone: 0 tokens, within the target"
    with pytest.raises(dataclasses.FrozenInstanceError):
        open_row.turns[0].part = "head"  # type: ignore[misc]
    assert isinstance(open_row.turns[0], TimelineTurn)


# --- app/options.py: what the option groups give the run ---------------------------------

def test_data_files_as_datasets_takes_them(tmp_path):
    import pytest

    from trajectory_compressor.app.options import _data_files
    from trajectory_compressor.core.errors import ConfigError

    assert _data_files(None) is None and _data_files([]) is None
    assert _data_files(["logs/*.jsonl"]) == "logs/*.jsonl"  # one pattern: a string
    assert _data_files(["a.jsonl", "b.jsonl"]) == ["a.jsonl", "b.jsonl"]
    assert _data_files(["train=a*.jsonl", "test=b.jsonl", "train=c.jsonl"]) == {
        "train": ["a*.jsonl", "c.jsonl"], "test": ["b.jsonl"]}
    # Not a split: no identifier before '=' ('=x', '1st=x', 'a-b=x'), or an existing file
    # whose name holds '='.
    named = tmp_path / "k=v.jsonl"
    named.write_text("{}\n")
    assert _data_files(["=x.jsonl"]) == "=x.jsonl"
    assert _data_files(["1st=x.jsonl", "a-b=y"]) == ["1st=x.jsonl", "a-b=y"]
    assert _data_files([str(named)]) == str(named)
    with pytest.raises(ConfigError, match=r"^--data-files: give every pattern as "
                       r"SPLIT=PATTERN, or none$"):
        _data_files(["train=a.jsonl", "b.jsonl"])
    with pytest.raises(ConfigError, match="SPLIT=PATTERN"):
        _data_files(["b.jsonl", "train=a.jsonl"])


def test_rows_options_bound_the_sample_and_keep_the_run_keywords():
    import pytest

    from trajectory_compressor.app.options import Rows, Run
    from trajectory_compressor.core.errors import ConfigError
    from trajectory_compressor.engine.options import RunOptions

    # No flag given: the library's defaults, but for the progress a terminal user sees.
    assert Rows().options(**Run().values()) == RunOptions(quiet=False)
    assert Rows().options().seed == 42 and Rows().options().sample_percent is None
    for bad in (0, -1, 100.5, 1000):
        with pytest.raises(ConfigError, match=rf"^--sample-percent must be in \(0, 100\], "
                           rf"got {bad:g}$"):
            Rows(sample_percent=bad).options()
    for good in (100, 0.001, 50):
        assert Rows(sample_percent=good).options().sample_percent == good
    got = Rows(sample_percent=10, seed=7, split="train",
               data_files=["train=a.jsonl"]).options(strict=True, resume=True)
    assert got == RunOptions(sample_percent=10, seed=7, split="train",
                             data_files={"train": ["a.jsonl"]}, strict=True, resume=True)


def test_group_overrides_by_config_field():
    from trajectory_compressor.app.options import (
        Allowances,
        Cache,
        Engine,
        Strategy,
        SummarizerRows,
        config_overrides,
    )

    assert Strategy(mask_exclude_tools=" read_file, ,grep,").overrides() == {
        "strategy": None, "mask_keep_last": None, "mask_exclude_tools": ["read_file", "grep"]}
    assert Strategy(strategy="mask", mask_keep_last=0).overrides() == {
        "strategy": "mask", "mask_keep_last": 0, "mask_exclude_tools": None}
    assert Strategy(mask_exclude_tools="").overrides()["mask_exclude_tools"] == []
    # A path of this run, not a setting; the other groups by their config fields.
    assert config_overrides(SummarizerRows(emit_summarizer_rows="s.jsonl")) == {}
    assert config_overrides(Allowances(), Cache()) == {
        "allow_fallback": None, "allow_insecure_http": None, "cache_enabled": None,
        "cache_path": None}
    assert config_overrides(Allowances(allow_fallback=True), Cache(no_cache=True)) == {
        "allow_fallback": True, "allow_insecure_http": None, "cache_enabled": False,
        "cache_path": None}
    assert Engine(engine="ray", ray_address="auto", ray_actors=3).overrides() == {
        "checkpoint_rows": None, "engine": "ray", "ray_actors": 3}


def test_the_flags_that_refuse_unless_told_default_to_refusing():
    from trajectory_compressor.app.options import Allowances, Cache, Run

    assert Allowances().values() == {"allow_fallback": False, "allow_insecure_http": False}
    assert Allowances(allow_insecure_http=True).overrides() == {
        "allow_fallback": None, "allow_insecure_http": True}
    assert Run().values() == {"resume": False, "overwrite": False, "strict": False,
                              "quiet": False}
    assert Cache().values() == {"no_cache": False, "cache_path": None}


def test_batch_flags_name_a_batch_and_its_limits():
    from trajectory_compressor.app.options import Batch
    from trajectory_compressor.engine.batch import BatchLimits

    assert not Batch().given and not Batch(batch_results=[]).given
    assert Batch(batch_dir="b").given and Batch(batch_results=["out.jsonl"]).given
    assert Batch(batch_dir="b", batch_results=["o"]).given
    # The flags' defaults are the engine's (the OpenAI Batch API's limits).
    assert Batch().limits() == BatchLimits()
    assert Batch(batch_max_requests=3, batch_max_bytes=1000).limits() == BatchLimits(3, 1000)


def test_the_ray_address_is_set_where_ray_reads_it(monkeypatch):
    import os

    from trajectory_compressor.app.options import Engine

    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    Engine().join()  # no address given: the environment's stays
    assert os.environ["RAY_ADDRESS"] == "10.0.0.1:6379"
    Engine(ray_address="auto").join()
    assert os.environ["RAY_ADDRESS"] == "auto"


def test_help_shows_no_default_for_the_switches_and_the_input():
    from tests.cli_helpers import invoke_cli

    shown = invoke_cli("compress", "--help", env={"COLUMNS": "250"}).stdout
    panel = shown.split("Protected turns")[1]
    switches = [line for line in panel.splitlines() if "--protect-first-" in line]
    assert len(switches) == 4 and not any("default" in line for line in switches)
    assert "[default: 42]" in shown and "[default: 50000]" in shown
    inputs = [line for line in shown.splitlines() if "datasets streaming" in line]
    assert len(inputs) == 1 and "[required]" in inputs[0] and "default" not in inputs[0]


def test_a_docstring_reflowed_for_help():
    from trajectory_compressor.app.flags import reflowed

    assert reflowed(None) is None
    doc = """Check every row;
    exit 1 on a problem.

        Rules: roles known;   every call
    answered.
    """
    assert reflowed(doc) == ("Check every row; exit 1 on a problem.\n\n"
                             "Rules: roles known; every call answered.")
