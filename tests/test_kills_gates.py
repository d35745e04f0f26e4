"""CI gates at their documented limits, in-process (issue 26, item 5).

From app/gates.py and README "CI gates": a gate fails when the count is *greater* than the
number, or its share greater than the percentage (so a count equal to the limit passes);
over-limit and failed shares are of the run's rows, rejected shares of every row read;
one ``gate failed: over-limit rows 7 (3.5%) > 1%`` line per failed gate on stderr; exit
code 3 when a gate failed, else the command's own code.
"""

from __future__ import annotations

import pytest

from trajectory_compressor.app.gates import (
    GATE_EXIT,
    Counts,
    Gate,
    GateResult,
    apply_gates,
    counts_of,
    evaluate,
    parse_gate,
    parse_gates,
)
from trajectory_compressor.core.errors import ConfigError


def test_a_count_equal_to_the_limit_passes_and_one_more_fails():
    gate = parse_gate("over_limit", "7")
    assert GateResult(gate, 7, 200).passed
    assert not GateResult(gate, 8, 200).passed
    share = parse_gate("failed", "1%")
    assert GateResult(share, 2, 200).passed  # exactly 1%
    assert not GateResult(share, 3, 200).passed  # 1.5%
    assert GateResult(parse_gate("failed", "0"), 0, 0).passed
    assert GateResult(parse_gate("failed", "0%"), 0, 0).share == 0.0


def test_parsing_numbers_and_percentages():
    assert parse_gate("failed", " 25 ") == Gate("failed", 25.0, False)
    assert parse_gate("rejected", "0.5%") == Gate("rejected", 0.5, True)
    assert parse_gate("rejected", ".5%") == Gate("rejected", 0.5, True)
    assert parse_gate("rejected", "100%") == Gate("rejected", 100.0, True)
    for bad in ("x", "-1", "1.5", "101%", "", "5%%"):
        with pytest.raises(ConfigError, match="--max-rejected"):
            parse_gate("rejected", bad)
    assert parse_gates(None, "1", None) == [Gate("failed", 1.0, False)]
    assert [g.what for g in parse_gates("1", "2", "3%")] == ["over_limit", "failed",
                                                             "rejected"]
    assert parse_gates() == []


def test_shares_are_of_the_rows_and_rejected_of_every_row_read():
    counts = Counts(rows=200, over_limit=7, failed=2, rejected=50)
    gates = parse_gates("1%", "1", "20%")
    results = evaluate(gates, counts)
    assert [(r.count, r.total) for r in results] == [(7, 200), (2, 200), (50, 250)]
    assert [r.passed for r in results] == [False, False, True]  # 3.5% > 1%, 2 > 1, 20%
    assert results[0].line() == "gate failed: over-limit rows 7 (3.5%) > 1%"
    assert results[1].line() == "gate failed: failed rows 2 (1.0%) > 1"
    assert GateResult(Gate("rejected", 0, False), 1, 2000).line() == (
        "gate failed: rejected rows 1 (0.05%) > 0")
    assert GateResult(Gate("rejected", 0, False), 1234, 1234).line() == (
        "gate failed: rejected rows 1,234 (100.0%) > 0")
    assert results[2].to_dict() == {"gate": "max-rejected", "limit": "20%", "count": 50,
                                    "total": 250, "share_percent": 20.0, "passed": True}


def test_exit_code_three_wins_over_the_command_s_own(capsys):
    counts = Counts(rows=10, over_limit=1, failed=0, rejected=0)
    assert apply_gates(parse_gates("0"), counts, 1) == GATE_EXIT == 3
    assert capsys.readouterr().err == "gate failed: over-limit rows 1 (10.0%) > 0\n"
    assert apply_gates(parse_gates("1"), counts, 1) == 1
    assert apply_gates(parse_gates("1"), counts, 0) == 0
    assert capsys.readouterr().err == ""


def test_counts_from_the_metrics_summary():
    metrics = {"summary": {"total_trajectories": 9, "trajectories_still_over_limit": 3,
                           "trajectories_failed": 1, "rows_rejected": 2}}
    assert counts_of(metrics) == Counts(9, 3, 1, 2)
    assert counts_of({}) == Counts(0, 0, 0, 0)


def test_gates_counts_and_results_are_frozen_values():
    import dataclasses

    gate = parse_gate("failed", "2")
    counts = Counts(10, 1, 2, 3)
    result = GateResult(gate, 2, 10)
    for value, again in ((gate, parse_gate("failed", "2")), (counts, Counts(10, 1, 2, 3)),
                         (result, GateResult(parse_gate("failed", "2"), 2, 10))):
        assert value == again and hash(value) == hash(again)
        with pytest.raises(dataclasses.FrozenInstanceError):
            value.what = "x"  # type: ignore[misc, union-attr]
