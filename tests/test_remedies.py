"""What would fix the rows still over the limit (issue 25): the remedies, their search, and
the table `analyze` and `report` print, on rows whose outcome under each remedy is worked
out by hand (`tests/remedy_rows.py`) in every dialect and container.

The pure search is tested against an oracle written here (which rows each setting brings
under, as a rule per row); the re-planning against the hand-worked rows, and against what
`compress` then really does with the flags the table proposes.
"""

from __future__ import annotations

import json

import pytest

from tests import remedy_rows as hand
from tests.fixtures_runs import compress_run
from trajectory_compressor.app.fixes import fix_lines
from trajectory_compressor.app.report import find_fixes, load_report
from trajectory_compressor.app.textfmt import display_width
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.remedies import (
    Remedy,
    head_alone_over,
    ladders,
    shrinking_head,
    what_would_fix,
    with_remedies,
)
from trajectory_compressor.engine.layout import finished_layout
from trajectory_compressor.inspect.analyze import analyze

# --- the pure part ------------------------------------------------------------------------


def flags(rungs: list[Remedy]) -> list[str]:
    return [r.command for r in rungs]


def test_each_family_is_a_ladder_from_the_mildest_change():
    config = CompressionConfig(target_max_tokens=1000, summary_target_tokens=200)
    found = ladders(config, rows_after=[1125, 1223, 1053], rows_before=[1575, 1473, 1053])
    assert flags(found["protect_last"]) == [f"--protect-last-n-turns {k}" for k in (3, 2, 1, 0)]
    for role in ("system", "human", "gpt", "tool"):
        assert flags(found[f"first_{role}"]) == [f"--no-protect-first-{role}"]
    assert flags(found["elide"]) == ["--over-limit-strategy elide_tool_outputs"]
    assert flags(found["summary"]) == [f"--summary-target-tokens {s}" for s in (100, 50, 25)]
    # The rows' counts above the target, smallest first (1053 once).
    assert flags(found["target"]) == [f"--target-max-tokens {t}"
                                      for t in (1053, 1125, 1223, 1473, 1575)]
    # Each rung sets what its flag sets.
    changed = with_remedies(config, [found["protect_last"][1], found["first_tool"][0],
                                     found["elide"][0], found["summary"][2]])
    assert (changed.protect_last_n_turns, changed.protect_first_tool,
            changed.over_limit_strategy, changed.summary_target_tokens) == (
        2, False, "elide_tool_outputs", 25)
    assert changed.protect_first_human and changed.target_max_tokens == 1000


def test_a_family_already_at_its_strongest_is_not_offered():
    config = CompressionConfig(target_max_tokens=1000, summary_target_tokens=1,
                               protect_last_n_turns=0, protect_first_tool=False,
                               over_limit_strategy="elide_tool_outputs")
    found = ladders(config)
    assert set(found) == {"first_system", "first_human", "first_gpt"}
    # Twenty protected turns: a ladder of six rungs, not twenty.
    many = ladders(CompressionConfig(protect_last_n_turns=20))["protect_last"]
    assert flags(many) == [f"--protect-last-n-turns {k}" for k in (19, 18, 10, 5, 1, 0)]


def test_the_head_alone_over_the_target():
    roles = ["system", "human", "gpt", "tool", "gpt", "tool", "gpt", "tool"]
    config = CompressionConfig(target_max_tokens=100, summary_target_tokens=10)
    # Head 0-3 (the first of each role; the last four start at 4): 40 + 30 + 20 + 11 = 101.
    assert head_alone_over(roles, [40, 30, 20, 11, 1, 1, 1, 1], config)
    assert not head_alone_over(roles, [40, 30, 20, 10, 1, 1, 1, 1], config)  # 100: not over
    # The first tool turn unprotected: the head is 0-2, 90 tokens.
    assert not head_alone_over(roles, [40, 30, 20, 11, 1, 1, 1, 1],
                               config.replace(protect_first_tool=False))


def test_only_what_shrinks_the_head_can_help_a_row_whose_head_alone_is_over():
    roles = ["system", "human", "gpt", "tool", "gpt", "tool", "gpt", "tool"]
    config = CompressionConfig(target_max_tokens=100, summary_target_tokens=10)
    tokens = [40, 30, 20, 11, 1, 1, 1, 1]  # head 0-3: 101
    rungs = ladders(config, [104], [104])
    # The first system, human or gpt turn unprotected: the head still ends at turn 3. The
    # last turns protected (4-7) are all in the tail. The summary and the second pass
    # never touch the head.
    assert flags(shrinking_head(roles, tokens, config, rungs)) == [
        "--no-protect-first-tool", "--target-max-tokens 104"]
    # Six turns, the first gpt turn not protected: the last four (2-5) reach into the head
    # (indices below 6 // 2), so turn 2 is protected as one of them; with three, it is not.
    short = ["system", "human", "gpt", "human", "gpt", "human"]
    config = config.replace(protect_first_gpt=False)
    assert head_alone_over(short, [30, 30, 50, 1, 1, 1], config)
    assert flags(shrinking_head(short, [30, 30, 50, 1, 1, 1], config,
                                ladders(config, [113]))) == [
        "--protect-last-n-turns 3", "--target-max-tokens 113"]


def oracle(question: tuple[Remedy, ...]) -> frozenset[int]:
    """Three rows, as `remedy_rows` works them out: 0 (tail) fits with at most two of the
    last turns protected; 1 (head) only with its first tool turn unprotected and the
    second pass; 2 (elide) with the second pass, a summary of 100 or less, or at most two
    of the last turns protected. A larger target fits each at or above its count."""
    s = {"last": 4, "tool": True, "elide": False, "summary": 200, "target": 1000}
    for r in question:
        for key, value in r.changes:
            s[{"protect_last_n_turns": "last", "protect_first_tool": "tool",
               "over_limit_strategy": "elide", "summary_target_tokens": "summary",
               "target_max_tokens": "target"}.get(key, key)] = value
    elide = s["elide"] == "elide_tool_outputs"
    fits = {0: s["last"] <= 2 or s["target"] >= 1125,
            1: (not s["tool"] and elide) or s["target"] >= 1223,
            2: elide or s["summary"] <= 100 or s["last"] <= 2 or s["target"] >= 1053}
    return frozenset(i for i, ok in fits.items() if ok)


def test_the_search_finds_each_remedy_alone_and_the_fewest_together():
    config = CompressionConfig(target_max_tokens=1000, summary_target_tokens=200)
    rungs = ladders(config, [1125, 1223, 1053], [1575, 1473, 1053])
    asked: list[frozenset[Remedy]] = []

    def fits(question: tuple[Remedy, ...]) -> frozenset[int]:
        asked.append(frozenset(question))
        return oracle(question)

    fixes = what_would_fix(3, rungs, fits)
    alone = {e.remedies[0].family: (e.command, e.count) for e in fixes.alone}
    assert alone == {
        "protect_last": ("--protect-last-n-turns 2", 2),
        "first_system": ("--no-protect-first-system", 0),
        "first_human": ("--no-protect-first-human", 0),
        "first_gpt": ("--no-protect-first-gpt", 0),
        "first_tool": ("--no-protect-first-tool", 0),
        "elide": ("--over-limit-strategy elide_tool_outputs", 1),
        "summary": ("--summary-target-tokens 100", 1),
        # The smallest rung at which all three fit: 1223 (row 1's).
        "target": ("--target-max-tokens 1223", 3),
    }
    assert [e.command for e in fixes.helping] == [
        "--protect-last-n-turns 2", "--over-limit-strategy elide_tool_outputs",
        "--summary-target-tokens 100", "--target-max-tokens 1223"]
    # Row 1 needs two families, row 0 a third: three together, each at its mildest.
    assert fixes.best is not None and fixes.best.count == 3
    assert fixes.best.command == ("--protect-last-n-turns 2 --no-protect-first-tool "
                                  "--over-limit-strategy elide_tool_outputs")
    assert fixes.together is not None and fixes.together.count == 3 and not fixes.capped
    assert len(asked) == len(set(asked))  # each question once


def test_a_bound_on_the_combination_is_said():
    rungs = ladders(CompressionConfig(target_max_tokens=1000, summary_target_tokens=200))
    fixes = what_would_fix(3, rungs, oracle, max_combination=2)
    assert fixes.best is not None and fixes.best.count == 2 and fixes.searched == 2
    assert fixes.together is not None and fixes.together.count == 3 and fixes.capped


def test_when_nothing_helps():
    rungs = ladders(CompressionConfig(target_max_tokens=1000, summary_target_tokens=200))
    fixes = what_would_fix(2, rungs, lambda question: frozenset())
    assert fixes.best is None and fixes.helping == []
    # A family that helps at no rung is named by its strongest one.
    assert fixes.useless[0].command == "--protect-last-n-turns 0"


# --- the hand-worked rows in every dialect and container -----------------------------------

CORPORA = [pytest.param(d, c, id=f"{d}-{c}") for d, c in hand.CORPORA]
ALONE = {  # family: (flags, rows brought under of the three), worked out in remedy_rows
    "protect_last": ("--protect-last-n-turns 2", 2),
    "first_system": ("--no-protect-first-system", 0),
    "first_human": ("--no-protect-first-human", 0),
    "first_gpt": ("--no-protect-first-gpt", 0),
    "first_tool": ("--no-protect-first-tool", 0),
    "elide": ("--over-limit-strategy elide_tool_outputs", 1),
    "summary": ("--summary-target-tokens 100", 1),
}
BEST = ("--protect-last-n-turns 2 --no-protect-first-tool "
        "--over-limit-strategy elide_tool_outputs")
REASONS = {"protected_tail_over_target": 1, "protected_head_alone_over_target": 1,
           "region_too_small": 1}
FIXED_BY = {"tail": ["--protect-last-n-turns 2"], "head": [],
            "elide": ["--protect-last-n-turns 2", "--over-limit-strategy elide_tool_outputs",
                      "--summary-target-tokens 100"]}


@pytest.fixture
def settings(tmp_path):
    return CompressionConfig.from_yaml(hand.write_settings(tmp_path))


def test_the_hand_counts_hold(counter):
    assert counter.count(hand.GPT_TEXT) == counter.count(hand.FUNCTION_CALL) == hand.GPT
    assert counter.count(hand.block(14)) == 153 and counter.count(hand.block(59)) == 648
    for row_id, system, human, outputs in hand.ROWS:
        total = counter.count(system) + counter.count(human) + sum(
            hand.GPT + counter.count(o) for o in outputs)
        assert total == hand.TOTALS[row_id]


def check_table(data: dict, over: int = 3) -> None:
    """The remedies of the three hand rows, as worked out in `remedy_rows`."""
    assert (data["rows_over"], data["rows_examined"], data["rows_failed"]) == (over, over, 0)
    alone = {e["families"][0]: (e["flags"], e["rows_under"]) for e in data["alone"]}
    target = alone.pop("target")
    assert alone == ALONE
    assert target[1] == 3 and target[0].startswith("--target-max-tokens ")
    assert data["best"] == {"flags": BEST, "families": ["protect_last", "first_tool", "elide"],
                            "rows_under": 3}
    assert data["protected_head_alone_over_target"] == 1 and data["exact"] is True
    fixed_by = {r["id"]: [f for f in r["fixed_by"] if not f.startswith("--target")]
                for r in data["rows"]}
    assert fixed_by == FIXED_BY
    # The head row: only un-protecting its first tool turn shrinks its head (1,073) under
    # the target (to 425: the system, human and first assistant turns), or a target of
    # at least 1,073. Not the summary, the second pass or fewer last turns.
    helping = {r["id"]: r.get("only_these_can_help") for r in data["rows"]}
    assert helping["tail"] is None and helping["elide"] is None
    first, larger = helping["head"]
    assert first == "--no-protect-first-tool"
    assert larger.startswith("--target-max-tokens ") and int(larger.split()[-1]) >= 1073
    assert [r["reason"] for r in data["rows"]] == [
        "protected_tail_over_target", "protected_head_alone_over_target", "region_too_small"]


@pytest.mark.parametrize(("dialect", "container"), CORPORA)
def test_analyze_proposes_what_compress_then_does(dialect, container, tmp_path, counter,
                                                  settings):
    src = hand.write_corpus(tmp_path, dialect, container)
    a = analyze(str(src), settings, counter=counter)
    assert (a.rows, a.rejected) == (5, 0)
    (t,) = a.targets
    assert t.metrics.trajectories_still_over_limit == 3 and dict(t.reasons) == REASONS
    assert t.fixes is not None
    data = t.fixes.to_dict()
    check_table(data)
    assert [r["id"] for r in data["rows"]] == list(hand.OVER)
    text = "\n".join(fix_lines(t.fixes))
    assert "  --protect-last-n-turns 2" in text and "2 of 3" in text
    words = " ".join(text.split())
    assert BEST in words
    assert ("1 of them: the protected head alone is over the target; only "
            "--no-protect-first-tool or a larger target can help") in words
    assert "--summary-target-tokens 100 1 of 3" in words
    for line in text.splitlines():
        assert display_width(line) <= 80, line
    # What compress then does: each proposal, run for real.
    runs = {"": 3, "elide": 2, "best": 0, "last2": 1, "summary": 2, "target": 0}
    target = int(next(e["flags"] for e in data["alone"]
                      if e["families"] == ["target"]).split()[-1])
    changed = {"": settings,
               "elide": settings.replace(over_limit_strategy="elide_tool_outputs"),
               "best": settings.replace(protect_last_n_turns=2, protect_first_tool=False,
                                        over_limit_strategy="elide_tool_outputs"),
               "last2": settings.replace(protect_last_n_turns=2),
               "summary": settings.replace(summary_target_tokens=100),
               "target": settings.replace(target_max_tokens=target)}
    for name, expected in runs.items():
        out = tmp_path / f"out_{name or 'plain'}.{container}"
        result = compress_run(src, out, changed[name], counter, detect=True)
        assert result.metrics.trajectories_still_over_limit == expected, name
        assert result.metrics.trajectories_failed == 0
    # The rows are read as counted by hand.
    plain = tmp_path / f"out_plain.{container}"
    entries = [json.loads(line) for line in
               finished_layout(plain).over_limit.read_text().splitlines()]
    assert {e["id"]: e["metrics"]["original_tokens"] for e in entries} == {
        k: hand.TOTALS[k] for k in hand.OVER}
    # With the second pass already on, the elide row fits; the others need the rest.
    with_pass = analyze(str(src), changed["elide"], counter=counter).targets[0]
    assert dict(with_pass.reasons) == {"protected_tail_over_target": 1,
                                       "protected_head_alone_over_target": 1}
    assert with_pass.fixes is not None
    second = with_pass.fixes.to_dict()
    alone = {e["families"][0]: (e["flags"], e["rows_under"]) for e in second["alone"]}
    assert "elide" not in alone
    assert alone["protect_last"] == ("--protect-last-n-turns 2", 1)
    assert alone["first_tool"] == ("--no-protect-first-tool", 1)
    assert alone["summary"] == ("--summary-target-tokens 25", 0)
    assert second["best"]["flags"] == "--protect-last-n-turns 2 --no-protect-first-tool"
    assert second["best"]["rows_under"] == 2
    # report on the plain run: the same table, the rows read back from the output (no
    # summary) and from the input (summarized).
    report = load_report(plain)
    fixes = find_fixes(report, settings, counter)
    assert fixes is not None
    again = fixes.to_dict()
    assert again["not_examined"] == []
    check_table(again)
    assert again["alone"] == data["alone"] and again["best"] == data["best"]


# --- analyze's prediction against compress, on realistic corpora ----------------------------

SAMPLES = [("trajectories.jsonl", 20), ("trajectories.parquet", 20),
           ("openai_messages.jsonl", None), ("llamafactory_sharegpt.json", None),
           ("llamafactory_messages.jsonl", None)]


def generated_with_parallel_calls(path):
    """Generated Hermes rows whose calls are often answered by two tool turns, so that the
    protected tail can start on a tool turn and the middle's outputs outlast the summary."""
    from tests.fixtures_runs import generated_rows, write_jsonl

    return write_jsonl(path, generated_rows(3, 25) + generated_rows(4, 25))


@pytest.mark.parametrize(("name", "sample"),
                         [pytest.param(n, s, id=n) for n, s in SAMPLES]
                         + [pytest.param("generated", None, id="generated")])
def test_analyze_predicts_what_compress_leaves_over_with_and_without_the_second_pass(
        name, sample, tmp_path, counter):
    from tests.cli_helpers import ROOT
    from trajectory_compressor.engine.local import RunOptions

    if name == "generated":
        src = generated_with_parallel_calls(tmp_path / "gen.jsonl")
        base = CompressionConfig(summarizer="extractive", target_max_tokens=600,
                                 summary_target_tokens=120)
    else:
        src = ROOT / "data_samples" / name
        base = CompressionConfig(summarizer="extractive", target_max_tokens=4000,
                                 summary_target_tokens=200)
    options = RunOptions(sample_percent=sample, quiet=True)
    elided = checked = 0
    for strategy in ("keep", "elide_tool_outputs"):
        config = base.replace(over_limit_strategy=strategy)
        (t,) = analyze(str(src), config, counter=counter, sample_percent=sample).targets
        out = tmp_path / f"{strategy}_{src.name}"
        run = compress_run(src, out, config, counter, options=options, detect=True)
        m = run.metrics
        assert t.metrics.trajectories_still_over_limit == m.trajectories_still_over_limit
        assert t.metrics.rows_elided == m.rows_elided
        assert dict(t.reasons) == m.reasons
        elided += m.rows_elided
        if t.fixes is None or t.fixes.fixes.best is None:
            continue
        # The best combination, run for real, leaves over exactly the rows it does not
        # bring under.
        best = t.fixes.fixes.best
        fixed = with_remedies(config, best.remedies)
        again = compress_run(src, tmp_path / f"best_{strategy}_{src.name}", fixed, counter,
                             options=options, detect=True)
        assert again.metrics.trajectories_still_over_limit == \
            m.trajectories_still_over_limit - best.count, best.command
        checked += 1
    assert checked, "some rows must stay over, and some remedy bring some under"
    if name == "generated":
        assert elided, "the corpus must make the second pass matter"


def test_the_projection_for_an_llm_applies_the_second_pass_too(tmp_path, counter, settings):
    # Projected summaries are exactly 200 tokens. With the first tool turn unprotected and
    # the second pass: "head" is 1,473 - 250 + 200 = 1,423, over by 423, and its 648-token
    # turn 3 can give them; "elide" gets no summary and its turn 5 gives 53; "tail" keeps
    # 1,575 - 450 + 200 = 1,325 and its only tool output outside the region (turn 3, 50
    # tokens) is too short to cut.
    src = hand.write_corpus(tmp_path, "hermes", "jsonl")
    config = settings.replace(summarizer="openai", protect_first_tool=False,
                              over_limit_strategy="elide_tool_outputs")
    (t,) = analyze(str(src), config, counter=counter).targets
    assert not t.exact
    assert (t.llm.trajectories_still_over_limit, t.llm.rows_elided) == (1, 2)
    assert t.llm.reasons == {"protected_tail_over_target": 1}
    (kept,) = analyze(str(src), config.replace(over_limit_strategy="keep"),
                      counter=counter).targets
    assert (kept.llm.trajectories_still_over_limit, kept.llm.rows_elided) == (3, 0)
    # The remedies then project too: the tail row needs at most two of its last turns
    # protected (region 4-10: 1,575 - 925 + 200 = 850).
    assert t.fixes is not None and not t.fixes.exact
    assert t.fixes.fixes.best is not None
    assert t.fixes.fixes.best.command == "--protect-last-n-turns 2"
    assert t.fixes.fixes.best.count == 1


def test_the_text_names_rows_it_did_not_examine_and_failed_rows():
    from trajectory_compressor.core.remedies import Fixes
    from trajectory_compressor.engine.replan import OverRows, WhatWouldFix

    over = OverRows(over=1, failed=2, not_examined=[("in.jsonl:4", "its input is gone")])
    lines = fix_lines(WhatWouldFix(over, Fixes(0), False, 200, 1000))
    assert lines == [
        "What would fix it: 1 row still over the limit",
        "  (each re-planned as compress would; summaries projected at 200 tokens)",
        "  (2 failed rows not among them: no remedy is about a failure)",
        "  not examined: in.jsonl:4: its input is gone",
    ]
    assert fix_lines(WhatWouldFix(OverRows(), Fixes(0), True, 200, 1000)) == []
