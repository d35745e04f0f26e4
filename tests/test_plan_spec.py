"""The planner against an oracle written from SPEC §3 (`spec_planner`), plus worked examples.

The strategies aim at the edges a random corpus rarely reaches: a region whose tokens
equal ``summary_target_tokens`` (the guard is ``<=``: no summary), a total equal to the
target (skip), every combination of the ``protect_first_*`` flags, ``protect_last_n_turns``
from 0 to past the length, runs of tool turns at the boundaries, trajectories that start
with tool turns, empty and single-turn trajectories.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from tests.spec_planner import (
    NO_SAVING,
    ROLES,
    SKIP,
    Verdict,
    clean,
    middle,
    nearest_clean_ahead,
    protected_indices,
    snap,
    spec_plan,
)
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.plan import Plan, plan_trajectory

FLAG_NAMES = ("protect_first_system", "protect_first_human", "protect_first_gpt",
              "protect_first_tool")
ALL_FLAGS = [dict(zip(FLAG_NAMES, combo, strict=True))
             for combo in itertools.product((False, True), repeat=4)]
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.filter_too_much])


def run_planner(roles: Sequence[str], tokens: Sequence[int], **knobs: Any) -> Plan:
    return plan_trajectory(list(roles), list(tokens), CompressionConfig(**knobs))


def assert_agrees(plan: Plan, verdict: Verdict, roles: Sequence[str],
                  tokens: Sequence[int], knobs: dict[str, Any]) -> None:
    where = f"roles={list(roles)} tokens={list(tokens)} {knobs} oracle={verdict}"
    assert plan.total_tokens == verdict.total, where
    if verdict.reason == SKIP:
        assert plan.action == "skip", where
    elif verdict.compress:
        assert plan.action == "compress", where
        assert plan.region is not None, where
        assert (plan.region.start, plan.region.end) == (verdict.start, verdict.end), where
        assert plan.region_tokens == verdict.region_tokens, where
    else:
        assert plan.action not in ("skip", "compress"), where


# --- strategies ---------------------------------------------------------------------

def _segment() -> st.SearchStrategy[list[str]]:
    """A piece of a conversation: a lone turn, a gpt turn with its tool answers, or a run
    of tool turns with nothing before them (so a trajectory may start with tools)."""
    lone = st.sampled_from(ROLES).map(lambda r: [r])
    call = st.integers(0, 4).map(lambda k: ["gpt"] + ["tool"] * k)
    tools = st.integers(1, 4).map(lambda k: ["tool"] * k)
    return st.one_of(lone, call, tools)


role_lists = st.one_of(
    st.lists(st.sampled_from(ROLES), max_size=14),
    st.lists(_segment(), max_size=6).map(lambda segs: [r for s in segs for r in s]),
)


@st.composite
def trajectories(draw: st.DrawFn) -> tuple[list[str], list[int]]:
    roles = draw(role_lists)
    tokens = draw(st.lists(st.integers(0, 40), min_size=len(roles), max_size=len(roles)))
    return roles, tokens


@st.composite
def budgets(draw: st.DrawFn, tokens: Sequence[int]) -> tuple[int, int]:
    """(target_max_tokens, summary_target_tokens) biased to the values where decisions
    flip: sums of contiguous runs of turns (so a region can equal the summary target)
    and totals equal to the target."""
    n, total = len(tokens), sum(tokens)
    sums = sorted({sum(tokens[a:b]) for a in range(n) for b in range(a + 1, n + 1)} | {1})
    # Summary targets mostly leave room for a target below the total.
    near = sorted({v for s in sums for d in (-1, 0, 1) if 0 < (v := s + d) < total - 1})
    summary = draw(st.one_of(st.sampled_from(near or [1]), st.integers(1, max(1, total // 2))))
    # The config requires 0 < summary < target; most targets fall below the total.
    edges = [t for t in (total - 1, total, total + 1) if t > summary]
    overage = [t for s in sums for d in (-1, 0, 1) if (t := total - s + d) > summary]
    target = draw(st.one_of(
        st.sampled_from(edges or [summary + 1]),
        st.sampled_from(overage or [summary + 1]),
        st.sampled_from(overage or [summary + 1]),
        st.integers(summary + 1, max(summary + 1, total - 1)),
    ))
    return target, summary


# --- the planner against the oracle --------------------------------------------------

@pytest.mark.parametrize("flags", ALL_FLAGS, ids=lambda f: "".join(
    name[len("protect_first_")].upper() if on else "-" for name, on in f.items()))
@SETTINGS
@given(data=st.data())
def test_planner_matches_spec_oracle(flags: dict[str, bool], data: st.DataObject) -> None:
    roles, tokens = data.draw(trajectories())
    last_n = data.draw(st.integers(0, len(roles) + 2))
    target, summary = data.draw(budgets(tokens))
    knobs: dict[str, Any] = dict(flags, protect_last_n_turns=last_n, target_max_tokens=target,
                 summary_target_tokens=summary)
    verdict = spec_plan(roles, tokens, **knobs)
    event(f"oracle: {verdict.reason or 'compress'}")
    if verdict.reason == NO_SAVING and verdict.region_tokens == summary:
        event("region tokens == summary_target_tokens")
    assert_agrees(run_planner(roles, tokens, **knobs), verdict, roles, tokens, knobs)


@SETTINGS
@given(data=st.data())
def test_region_equal_to_summary_target_is_not_summarized(data: st.DataObject) -> None:
    """A middle too small for ``needed``: the region is the whole (snapped) middle, and a
    summary target equal to its tokens must stop the summary; one less must not."""
    roles, tokens = data.draw(trajectories())
    flags = data.draw(st.sampled_from(ALL_FLAGS))
    last_n = data.draw(st.integers(0, len(roles) + 2))
    lo, hi = middle(roles, protected_indices(
        roles, first={name.removeprefix("protect_first_"): on for name, on in flags.items()},
        last_n=last_n))
    start = nearest_clean_ahead(roles, lo, hi) if lo < hi else None
    assume(start is not None and start < hi)
    assert start is not None
    end = snap(roles, hi, start, hi)
    region = sum(tokens[start:end])
    total = sum(tokens)
    assume(region >= 2 and total >= region + 2)
    target = data.draw(st.integers(region + 1, total - 1))
    base: dict[str, Any] = dict(flags, protect_last_n_turns=last_n, target_max_tokens=target)

    equal = dict(base, summary_target_tokens=region)
    verdict = spec_plan(roles, tokens, **equal)
    assert verdict.reason == NO_SAVING and verdict.region_tokens == region
    plan = run_planner(roles, tokens, **equal)
    assert plan.action not in ("skip", "compress"), (roles, tokens, equal)

    smaller = dict(base, summary_target_tokens=region - 1)
    assert_agrees(run_planner(roles, tokens, **smaller), spec_plan(roles, tokens, **smaller),
                  roles, tokens, smaller)


@SETTINGS
@given(trajectories(), st.data())
def test_total_equal_to_target_is_skipped(traj: tuple[list[str], list[int]],
                                          data: st.DataObject) -> None:
    roles, tokens = traj
    total = sum(tokens)
    assume(total >= 2)
    summary = data.draw(st.integers(1, total - 1))
    knobs = dict(target_max_tokens=total, summary_target_tokens=summary,
                 protect_last_n_turns=data.draw(st.integers(0, len(roles) + 2)))
    assert run_planner(roles, tokens, **knobs).action == "skip"
    over = dict(knobs, target_max_tokens=total - 1, summary_target_tokens=min(summary, total - 2))
    assume(over["summary_target_tokens"] >= 1)
    assert run_planner(roles, tokens, **over).action != "skip"


@SETTINGS
@given(trajectories(), st.data())
def test_a_compressed_region_respects_the_spec(traj: tuple[list[str], list[int]],
                                               data: st.DataObject) -> None:
    """Invariants of §3 checked directly, whatever the oracle says."""
    roles, tokens = traj
    flags = data.draw(st.sampled_from(ALL_FLAGS))
    last_n = data.draw(st.integers(0, len(roles) + 2))
    target, summary = data.draw(budgets(tokens))
    plan = run_planner(roles, tokens, **flags, protect_last_n_turns=last_n,
                       target_max_tokens=target, summary_target_tokens=summary)
    assume(plan.action == "compress")
    assert plan.region is not None
    start, end = plan.region.start, plan.region.end
    protected = protected_indices(
        roles, first={k.removeprefix("protect_first_"): v for k, v in flags.items()},
        last_n=last_n)
    assert start < end
    assert not protected & set(range(start, end))
    assert clean(roles, start) and clean(roles, end)
    assert plan.region_tokens == sum(tokens[start:end]) > summary


@pytest.mark.parametrize("roles", [[], ["system"], ["tool"], ["gpt"], ["human"]])
@pytest.mark.parametrize("last_n", [0, 1, 2])
def test_empty_and_single_turn_trajectories(roles: list[str], last_n: int) -> None:
    tokens = [50] * len(roles)
    knobs: dict[str, Any] = dict(
        target_max_tokens=10, summary_target_tokens=5, protect_last_n_turns=last_n,
        protect_first_system=False, protect_first_human=False, protect_first_gpt=False,
        protect_first_tool=False)
    plan = run_planner(roles, tokens, **knobs)
    if not roles:
        assert plan.action == "skip"  # 0 tokens <= 10
    else:
        # One turn of 50 > 10. With nothing protected, n // 2 == 0 puts nothing in the
        # head, the middle is [0, 1) when last_n == 0; a tool turn cannot start a region.
        verdict = spec_plan(roles, tokens, **knobs)
        assert_agrees(plan, verdict, roles, tokens, knobs)
        expect_compress = last_n == 0 and roles != ["tool"]
        assert (plan.action == "compress") is expect_compress


# --- worked by hand ------------------------------------------------------------------

S, H, G, T = "system", "human", "gpt", "tool"
DEFAULTS = dict(protect_first_system=True, protect_first_human=True, protect_first_gpt=True,
                protect_first_tool=True, protect_last_n_turns=2)


def test_guard_equality_by_hand() -> None:
    # n = 8, n // 2 = 4. Protected: first system 0, human 1, gpt 2, tool 3; last two 6, 7.
    # Head {0,1,2,3}, tail {6,7}: the middle is [4, 6) = gpt 30 + human 20 = 50 tokens.
    # total = 4*10 + 30 + 20 + 2*10 = 110 > target 100.
    roles = [S, H, G, T, G, H, G, H]
    tokens = [10, 10, 10, 10, 30, 20, 10, 10]
    # summary 50: needed = 110 - 100 + 50 = 60 > 50, so the whole middle [4, 6) is taken;
    # its 50 tokens are <= 50: a summary would save nothing. No summary.
    plan = run_planner(roles, tokens, **DEFAULTS, target_max_tokens=100, summary_target_tokens=50)
    assert plan.action not in ("skip", "compress")
    # summary 49: needed = 59 > 50, whole middle again; 50 > 49: compress [4, 6).
    plan = run_planner(roles, tokens, **DEFAULTS, target_max_tokens=100, summary_target_tokens=49)
    assert plan.action == "compress" and plan.region is not None
    assert (plan.region.start, plan.region.end, plan.region_tokens) == (4, 6, 50)


def test_start_snaps_forward_off_tool_turns_by_hand() -> None:
    # n = 10, n // 2 = 5. Protected head {0,1,2,3} (the first tool is 3), tail {8, 9}.
    # The middle is [4, 8); turn 4 is a second tool answer to gpt 2, so the start moves
    # forward to 5 (gpt).
    roles = [S, H, G, T, T, G, T, H, G, H]
    tokens = [5, 5, 5, 5, 40, 20, 30, 20, 5, 5]
    # total = 20 + 40 + 20 + 30 + 20 + 10 = 140; needed = 140 - 100 + 20 = 60.
    # From 5: 20, 50, 70 >= 60 at turn 7, so the end is 8 (gpt, clean): region [5, 8), 70.
    # (Without the snap the region would start at 4: 40, 60 -> end 6, a tool turn.)
    plan = run_planner(roles, tokens, **DEFAULTS, target_max_tokens=100, summary_target_tokens=20)
    assert plan.action == "compress" and plan.region is not None
    assert (plan.region.start, plan.region.end, plan.region_tokens) == (5, 8, 70)


def test_end_snaps_forward_by_hand() -> None:
    # n = 12, n // 2 = 6. Head {0,1,2,3}, tail {10, 11}: the middle is [4, 10).
    roles = [S, H, G, T, H, G, T, T, G, H, G, H]
    tokens = [5, 5, 5, 5, 10, 20, 30, 30, 10, 10, 5, 5]
    # total = 20 + 110 + 10 = 140; needed = 140 - 100 + 20 = 60.
    # From 4: 10, 30, 60 >= 60 at turn 6, so the end would be 7: a tool answering gpt 5.
    # Forward: 7 is a tool, 8 is gpt -> region [4, 8) = 10 + 20 + 30 + 30 = 90.
    plan = run_planner(roles, tokens, **DEFAULTS, target_max_tokens=100, summary_target_tokens=20)
    assert plan.action == "compress" and plan.region is not None
    assert (plan.region.start, plan.region.end, plan.region_tokens) == (4, 8, 90)


def test_end_snaps_backward_when_nothing_clean_ahead_by_hand() -> None:
    # n = 10, n // 2 = 5. Head {0,1,2,3}, tail {8, 9}: the middle is [4, 8) and the tail
    # starts with a tool turn (8), so ending the region at 8 would split gpt 5 from it.
    roles = [S, H, G, T, H, G, T, T, T, H]
    tokens = [5, 5, 5, 5, 30, 10, 20, 20, 5, 5]
    # total = 20 + 80 + 10 = 110 > 80; needed = 110 - 80 + 20 = 50.
    # From 4: 30, 40, 60 >= 50 at turn 6 -> end 7 (tool). Ahead within the middle: 7 tool,
    # 8 (the middle's end) tool: nothing clean. Backward: 6 tool, 5 gpt -> end 5.
    # Region [4, 5) = 30 tokens > 20: compress.
    plan = run_planner(roles, tokens, **DEFAULTS, target_max_tokens=80, summary_target_tokens=20)
    assert plan.action == "compress" and plan.region is not None
    assert (plan.region.start, plan.region.end, plan.region_tokens) == (4, 5, 30)


def test_middle_of_only_tool_turns_is_not_summarized_by_hand() -> None:
    # n = 8, n // 2 = 4. Head {0,1,2,3}, tail {6, 7}: the middle [4, 6) is two more tool
    # answers to gpt 2. The start cannot move forward onto a clean turn inside the middle
    # and backward is the protected head: nothing to summarize, although 200 > 100.
    roles = [S, H, G, T, T, T, H, G]
    tokens = [10, 10, 10, 10, 70, 70, 10, 10]
    plan = run_planner(roles, tokens, **DEFAULTS, target_max_tokens=100, summary_target_tokens=20)
    assert plan.action not in ("skip", "compress")
