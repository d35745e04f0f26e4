"""Kill tests for small `app/` modules (issue 40 item 8): what they print or decide, word
for word, on hand-made metrics (`app.strategy_text`, `app.no_llm`)."""

from __future__ import annotations

from trajectory_compressor.app.no_llm import never_answered
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
