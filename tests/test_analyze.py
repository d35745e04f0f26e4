"""`analyze`: hand-computed figures, and predictions equal to what `compress` then does."""

from __future__ import annotations

import json
import re

import pytest

from tests.cli_helpers import invoke_cli
from tests.fixtures_runs import (
    HAND_CONFIG,
    HAND_ROWS,
    compress_run,
    generated_rows,
    words,
    write_jsonl,
)
from trajectory_compressor.app.analysis import format_analysis
from trajectory_compressor.app.textfmt import display_width
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import ConfigError
from trajectory_compressor.engine.local import RunOptions
from trajectory_compressor.inspect.analyze import Prices, analyze

# Everything `compress` reports except wall-clock times.
SECTIONS = ("summary", "tokens", "turns", "averages", "summarization", "usage", "distributions")


def assert_fits_80_columns(text: str) -> None:
    assert "\x1b" not in text
    for line in text.splitlines():
        assert display_width(line) <= 80, line


def without_processing(d: dict) -> dict:
    return {k: d[k] for k in SECTIONS}


@pytest.fixture
def hand_input(tmp_path, counter):
    for n in (1, 5, 10, 30, 40, 50):
        assert counter.count(words(n)) == n
    return write_jsonl(tmp_path / "hand.jsonl", HAND_ROWS, extra_lines=("{oops",))


def test_hand_computed_figures(hand_input, counter):
    config = CompressionConfig(summarizer="extractive", **HAND_CONFIG)
    a = analyze(str(hand_input), config, counter=counter)
    assert (a.rows, a.rejected) == (5, 1)
    # Totals per row: 35, 205, 265, 120, 195 (nearest-rank quantiles).
    assert a.tokens.summary() == {"min": 35, "median": 195, "p90": 265, "p99": 265,
                                  "max": 265}
    edges, counts = a.histogram()
    assert edges == list(range(25, 276, 25))
    assert counts == [1, 0, 0, 1, 0, 0, 1, 1, 0, 1]
    (t,) = a.targets
    m = t.metrics
    assert t.exact and m is t.extractive
    assert (m.trajectories_skipped_under_target, m.trajectories_compressed,
            m.trajectories_still_over_limit, m.rows_rejected) == (1, 2, 3, 1)
    assert dict(t.reasons) == m.reasons == {
        "protected_tail_over_target": 1, "nothing_compressible": 1, "region_too_small": 1}
    assert m.total_summarization_calls == 0 and m.summaries_by_source["extractive"] == 2
    # LLM projection: "fits" keeps 45 + 20, "big-tail" keeps 145 + 20; the rest unchanged.
    llm = t.llm
    assert llm.total_tokens_after == 35 + 65 + 165 + 120 + 195
    assert llm.trajectories_still_over_limit == 3
    assert llm.total_summarization_calls == 2 and llm.completion_tokens == 40
    # Input: the regions (160 + 120 tokens of text) plus a short "[Turn i - GPT]:" header
    # per turn.
    assert 280 < llm.prompt_tokens <= 280 + 8 * 10
    # Extractive summaries fit the 20-token budget.
    assert 35 + 45 + 145 + 120 + 195 < m.total_tokens_after <= 580
    cost = Prices(1.0, 2.0).cost(llm.prompt_tokens, 40)
    assert cost == pytest.approx((llm.prompt_tokens + 80) / 1e6)
    text = format_analysis(a, Prices(1.0, 2.0))
    assert_fits_80_columns(text)
    assert "rows    5, rejected 1" in text
    assert "no compressible middle" in text and "middle too small to help" in text


def test_projection_for_an_llm_summarizer_says_so(hand_input, counter):
    config = CompressionConfig(summarizer="openai", **HAND_CONFIG)
    a = analyze(str(hand_input), config, counter=counter)
    (t,) = a.targets
    assert not t.exact and t.metrics is t.llm
    assert t.metrics.summaries_by_source["llm"] == 2
    text = format_analysis(a)
    assert "openai: projected, 20-token summaries" in text
    assert "would stay over (extractive, exact)" in text
    data = a.to_dict()["targets"][0]
    assert data["exact"] is False
    assert data["metrics"]["summary"]["trajectories_still_over_limit"] == 3
    assert data["metrics"]["tokens"]["total_after"] == 580
    assert data["metrics"]["usage"]["completion_tokens"] == 40


def test_predictions_equal_a_real_run_at_each_target(tmp_path, counter):
    src = write_jsonl(tmp_path / "gen.jsonl", generated_rows(1) + generated_rows(2))
    base = CompressionConfig(summarizer="extractive", summary_target_tokens=120)
    targets = [600, 1200, 2500]
    together = analyze(str(src), base, targets=targets, counter=counter)
    compressed_any = over_any = 0
    for target, t in zip(targets, together.targets, strict=True):
        config = base.replace(target_max_tokens=target)
        alone = analyze(str(src), config, counter=counter).targets[0]
        run = compress_run(src, tmp_path / f"out_{target}.jsonl", config, counter)
        expected = without_processing(run.metrics.to_dict())
        assert without_processing(t.metrics.to_dict()) == expected
        assert without_processing(alone.metrics.to_dict()) == expected
        over = [json.loads(line) for line in
                (tmp_path / f"out_{target}_over_limit.jsonl").read_text().splitlines()]
        reasons: dict[str, int] = {}
        for entry in over:
            reasons[entry["reason"]] = reasons.get(entry["reason"], 0) + 1
        assert dict(t.reasons) == reasons
        compressed_any += run.metrics.trajectories_compressed
        over_any += run.metrics.trajectories_still_over_limit
    assert compressed_any and over_any, "the fixture must exercise both outcomes"
    # Rows the planner expected to fit but that the notice pushed over: only exact
    # summaries and notice counts can predict those.
    assert any("summary_too_long" in t.reasons for t in together.targets)


def test_sampling_keeps_the_rows_compress_keeps(tmp_path, counter):
    src = write_jsonl(tmp_path / "gen.jsonl", generated_rows(3, n=60), extra_lines=("[1]",))
    config = CompressionConfig(summarizer="extractive", summary_target_tokens=120,
                               target_max_tokens=1000)
    a = analyze(str(src), config, sample_percent=40, seed=5, counter=counter)
    run = compress_run(src, tmp_path / "o.jsonl", config, counter,
                       options=RunOptions(sample_percent=40, seed=5, quiet=True))
    assert 10 < a.rows < 50
    assert (a.rows, a.rejected) == (run.metrics.total_trajectories, run.metrics.rows_rejected)
    assert without_processing(a.targets[0].metrics.to_dict()) == \
        without_processing(run.metrics.to_dict())


@pytest.fixture
def sample_head(sample_jsonl, tmp_path):
    """The sample's first 20 rows (1,880 to 51,627 tokens): under and over each target
    below, at a fifth of the cost of all fifty."""
    src = tmp_path / "sample_head.jsonl"
    src.write_text("".join(sample_jsonl.read_text().splitlines(keepends=True)[:20]))
    return src


def test_sample_data_in_process_at_several_targets(sample_head, tmp_path, counter):
    base = CompressionConfig(summarizer="extractive")
    targets = [8192, 32768]  # the default 15,250 is checked through the CLI below
    a = analyze(str(sample_head), base, targets=targets, counter=counter)
    for target, t in zip(targets, a.targets, strict=True):
        run = compress_run(sample_head, tmp_path / f"s{target}.jsonl",
                           base.replace(target_max_tokens=target), counter)
        assert without_processing(t.metrics.to_dict()) == \
            without_processing(run.metrics.to_dict())


def test_a_target_not_above_the_summary_is_a_config_error(hand_input, counter):
    with pytest.raises(ConfigError, match="smaller than"):
        analyze(str(hand_input), CompressionConfig(summarizer="extractive", **HAND_CONFIG),
                targets=[100, 20], counter=counter)


def test_cli_on_the_sample_predicts_what_compress_does(tmp_path, sample_head):
    report = tmp_path / "analysis.json"
    proc = invoke_cli("analyze", str(sample_head), "--summarizer", "extractive",
                   "--json", str(report), "--price-in", "0.5", "--price-out", "1.5")
    assert proc.returncode == 0, proc.stderr
    assert_fits_80_columns(proc.stdout)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["analysis.json", sample_head.name]
    out = tmp_path / "out.jsonl"
    proc2 = invoke_cli("compress", str(sample_head), "-o", str(out), "--summarizer",
                    "extractive", "--quiet")
    assert proc2.returncode == 0, proc2.stderr
    actual = json.loads((tmp_path / "out_metrics.json").read_text())
    predicted = json.loads(report.read_text())
    (t,) = predicted["targets"]
    assert t["exact"] is True
    assert without_processing(t["metrics"]) == without_processing(actual)
    for section in ("fidelity", "over_limit"):  # the sections added since, when present
        if section in actual:
            assert t["metrics"][section] == actual[section], section
    s = actual["summary"]
    figures = {line.split("  ")[1].strip(): line.split()[-1] for line in
               proc.stdout.splitlines() if line.startswith("  would ")}
    assert figures == {
        "would skip (under the target)": f"{s['trajectories_skipped_under_target']:,}",
        "would compress": f"{s['trajectories_compressed']:,}",
        "would stay over the limit": f"{s['trajectories_still_over_limit']:,}",
    }
    calls = s["trajectories_compressed"]
    llm = t["llm"]
    assert llm["summarization_calls"] == calls and llm["output_tokens"] == 750 * calls
    assert llm["cost_usd"] == pytest.approx(
        (llm["input_tokens"] * 0.5 + llm["output_tokens"] * 1.5) / 1e6, abs=1e-4)
    assert f"{llm['input_tokens']:,}" in proc.stdout


def test_cli_targets_and_dry_run_print_the_same_analysis(tmp_path, hand_input):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("compression:\n  target_max_tokens: 100\n  summary_target_tokens: 20\n"
                   "output:\n  add_summary_notice: false\n"
                   "summarization:\n  backend: extractive\n")
    proc = invoke_cli("analyze", str(hand_input), "--config", str(cfg),
                   "--targets", "100,150,200,250", "--json", "-")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    got = [(t["target_max_tokens"], t["metrics"]["summary"]["trajectories_skipped_under_target"],
            t["metrics"]["summary"]["trajectories_still_over_limit"]) for t in data["targets"]]
    # Totals 35, 120, 195, 205, 265: skipped when <= target.
    assert [(g[0], g[1]) for g in got] == [(100, 1), (150, 2), (200, 3), (250, 4)]
    dry = invoke_cli("compress", str(hand_input), "--config", str(cfg), "--dry-run")
    ana = invoke_cli("analyze", str(hand_input), "--config", str(cfg))
    assert dry.returncode == ana.returncode == 0
    # The same analysis, but for the figures measured each run: the time estimate and the
    # CPU the remedies' search took (0.0 s in one run, 0.1 s in the other under load).
    mark = "\nTime compress would take"
    assert mark in dry.stdout and mark in ana.stdout
    cpu = re.compile(r"in \d+\.\d s CPU\)")
    assert cpu.search(ana.stdout), ana.stdout
    assert (cpu.sub("in <cpu> s CPU)", dry.stdout.split(mark)[0])
            == cpu.sub("in <cpu> s CPU)", ana.stdout.split(mark)[0]))
    assert "would compress" in ana.stdout
    assert_fits_80_columns(ana.stdout)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml", "hand.jsonl"]


def test_cli_usage_errors_exit_2(tmp_path, hand_input):
    cases = [
        (("analyze", str(tmp_path / "missing.jsonl")), "input not found"),
        (("analyze", str(hand_input), "--targets", "8k,16k"), "--targets"),
        (("analyze", str(hand_input), "--targets", "500,900", "--target-max-tokens", "900"),
         "either"),
        (("analyze", str(hand_input), "--targets", "500", "--summary-target-tokens", "600"),
         "smaller than"),
        (("analyze", str(hand_input), "--price-in", "-1"), "--price-in"),
        (("analyze", str(hand_input), "--json", str(tmp_path / "no" / "a.json")),
         "does not exist"),
    ]
    for args, needle in cases:
        proc = invoke_cli(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert needle in proc.stderr and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


def test_analyze_lists_the_first_rejects_and_counts_the_rest(tmp_path, hand_input):
    bad = [f'{{"id": {i}}}' for i in range(7)]
    src = write_jsonl(tmp_path / "mixed.jsonl", HAND_ROWS[:2], extra_lines=("{oops", *bad))
    proc = invoke_cli("analyze", "mixed.jsonl", "--summarizer", "extractive", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr  # some rows were analyzed
    assert_fits_80_columns(proc.stdout)
    lines = proc.stdout.splitlines()
    start = lines.index("Rejected rows: 8")
    assert lines[start + 1].startswith("  mixed.jsonl:3: invalid JSON")
    assert lines[start + 2:start + 7] == [
        f"  mixed.jsonl:{n}: row has no 'conversations' field" for n in range(4, 8)] + [
        "  … and 3 more; compress lists every one in <output stem>_rejects.jsonl"]
    data = json.loads(invoke_cli("analyze", str(src), "--summarizer", "extractive",
                              "--json", "-").stdout)
    assert data["rows_rejected"] == 8 and len(data["first_rejects"]) == 5
    assert data["first_rejects"][1] == {"location": f"{src}:4",
                                        "error": "row has no 'conversations' field"}


def test_analyze_exits_1_when_every_row_is_rejected(tmp_path):
    src = write_jsonl(tmp_path / "wrong.jsonl", [{"messages_": []}, {"id": 2}])
    for extra in ((), ("--json", "-")):
        proc = invoke_cli("analyze", str(src), "--summarizer", "extractive", *extra)
        assert proc.returncode == 1, proc.stderr
        assert proc.stderr.splitlines()[-1] == (
            f"error: all 2 rows were rejected, nothing to analyze (the first: {src}:1: "
            "row has no 'conversations' field)")
        assert "Traceback" not in proc.stderr
    dry = invoke_cli("compress", str(src), "--summarizer", "extractive", "--dry-run")
    assert dry.returncode == 1 and "Rejected rows: 2" in dry.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wrong.jsonl"]


def test_protected_turn_flags_reach_the_analysis(hand_input):
    def figures(*flags):
        proc = invoke_cli("analyze", str(hand_input), "--summarizer", "extractive",
                       "--target-max-tokens", "100", "--summary-target-tokens", "20",
                       "--json", "-", *flags)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)["targets"][0]["over_limit_reasons"]

    # "no-middle" (SHGT) has every turn protected as its role's first; unprotected, its
    # first turn alone makes room.
    assert figures().get("nothing_compressible") == 1
    assert "nothing_compressible" not in figures(
        "--protect-last-n-turns", "0", "--no-protect-first-system", "--no-protect-first-human",
        "--no-protect-first-gpt", "--no-protect-first-tool")
