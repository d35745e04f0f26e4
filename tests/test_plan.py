"""The planner against the reference's documented cases and, by property, its behaviour."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.property_budget import examples
from tests.reference_planner import reference_region
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.plan import (
    HEAD_ALONE,
    NO_CLEAN_CUT,
    NO_MIDDLE,
    PROTECTED_HEAD,
    SMALL_REGION,
    compressible_middle,
    plan_trajectory,
    protected_indices,
    snap_boundary,
)

ROLE = {"S": "system", "H": "human", "G": "gpt", "T": "tool"}


def roles(spec: str) -> list[str]:
    return [ROLE[c] for c in spec]


CFG = CompressionConfig(target_max_tokens=1000, summary_target_tokens=100)


def test_protected_indices_of_a_plain_trajectory():
    r = roles("SHGTGTGTGTGT")
    assert protected_indices(r, CFG) == {0, 1, 2, 3, 8, 9, 10, 11}
    middle = compressible_middle(r, CFG)
    assert (middle.start, middle.end) == (4, 8)


def test_no_system_turn():
    r = roles("HGTGTGTGTGT")
    assert protected_indices(r, CFG) == {0, 1, 2, 7, 8, 9, 10}
    assert compressible_middle(r, CFG).start == 3


def test_protect_first_system_off_still_protects_the_rest():
    cfg = CompressionConfig(target_max_tokens=1000, summary_target_tokens=100,
                            protect_first_system=False)
    r = roles("SHGTGTGTGTGT")
    assert protected_indices(r, cfg) == {1, 2, 3, 8, 9, 10, 11}
    # The system turn lies before max(head) and is therefore still outside the middle.
    assert compressible_middle(r, cfg).start == 4


def test_only_tail_protection_makes_the_middle_start_at_zero():
    cfg = CompressionConfig(target_max_tokens=1000, summary_target_tokens=100,
                            protect_first_system=False, protect_first_human=False,
                            protect_first_gpt=False, protect_first_tool=False)
    assert compressible_middle(roles("SHGTGTGTGT"), cfg).start == 0


def test_start_snaps_forward_off_tool_turns():
    # First tool (3) is protected; 4 and 5 are further answers of the same gpt turn.
    r = roles("SHGTTTGTGTGTGTGTGT")
    tokens = [10] * len(r)
    tokens[6:12] = [400] * 6
    plan = plan_trajectory(r, tokens, CFG)
    assert plan.region is not None
    assert plan.region.start == 6
    assert r[plan.region.start] != "tool"


def test_snap_backward_when_nothing_clean_lies_ahead():
    # From 5 up to the limit 7 every turn is a tool turn: go back to the gpt turn at 4.
    r = roles("SHGTGTTTT")
    assert snap_boundary(r, 5, 4, 7) == 4
    # Forward is preferred when a clean turn exists ahead.
    assert snap_boundary(roles("SHGTGTTGT"), 5, 4, 8) == 7


def test_end_snaps_forward_past_the_tool_answers_of_a_large_gpt_turn():
    # Accumulation reaches the need at the big gpt turn 6; its tool answers 7, 8 follow.
    r = roles("SHGTGTGTTGTGTGTGT")
    tokens = [10] * len(r)
    tokens[6] = 3000
    plan = plan_trajectory(r, tokens, CFG)
    assert plan.region is not None
    assert plan.region.end == 9, "the region must not end between a gpt turn and its tools"
    assert reference_region(r, tokens, 1000, 100) == (plan.region.start, plan.region.end)


def test_net_savings_guard_refuses_a_tiny_middle():
    r = roles("SHGTGTGTGT")
    # Head 0-3 holds 530 tokens (under the target 1,000): the middle's 60 are the reason.
    tokens = [500, 10, 10, 10, 50, 10, 500, 500, 500, 500]
    plan = plan_trajectory(r, tokens, CFG)
    assert plan.action == "over_limit"
    assert plan.region is None
    assert plan.reason == SMALL_REGION


def test_a_middle_that_cannot_be_cut_without_splitting_a_tool_pair():
    # Middle [4, 6) = gpt, tool; the tail starts with further tool answers of that gpt.
    r = roles("SHGTGTTTGT")
    tokens = [200] * 4 + [300] * 6  # head 800, under the target
    plan = plan_trajectory(r, tokens, CFG)
    assert (plan.action, plan.reason) == ("over_limit", NO_CLEAN_CUT)
    assert (plan.middle.start, plan.middle.end) == (4, 6)
    assert reference_region(r, tokens, 1000, 100) is None


def test_no_middle_at_all():
    # Head 0-1 (800 tokens, under the target), tail 2-3.
    plan = plan_trajectory(roles("SHGT"), [400, 400, 600, 600], CFG)
    assert (plan.action, plan.reason) == ("over_limit", NO_MIDDLE)


def test_a_head_over_the_target_on_its_own_is_the_reason_whatever_else_holds():
    # The three rows above with a head of more than 1,000 tokens: a middle too small, one
    # that cannot be cut, none at all. The region chosen does not change, the reason does.
    small = plan_trajectory(roles("SHGTGTGTGT"), [1000, 10, 10, 10, 50, 10, 500, 500, 500,
                                                  500], CFG)
    assert (small.action, small.region, small.head_tokens) == ("over_limit", None, 1030)
    uncut = plan_trajectory(roles("SHGTGTTTGT"), [300] * 10, CFG)
    nothing = plan_trajectory(roles("SHGT"), [600] * 4, CFG)
    for plan in (small, uncut, nothing):
        assert plan.reason == HEAD_ALONE
    # The middle is still summarized when it can be (the reference's region): head 1,200 +
    # tail 40 + summary 100 > 1,000 would have been "head and tail, the head larger".
    summarized = plan_trajectory(roles("SHGTGTGTGTGT"), [300] * 4 + [500] * 4 + [10] * 4, CFG)
    assert summarized.action == "compress" and summarized.region is not None
    assert (summarized.region.start, summarized.region.end) == (4, 8)
    assert summarized.reason == HEAD_ALONE
    # Exactly at the target is not over it: the head and tail are the reason then.
    at = plan_trajectory(roles("SHGTGTGTGTGT"), [250] * 4 + [500] * 4 + [10] * 4, CFG)
    assert at.head_tokens == 1000 and at.reason == PROTECTED_HEAD


def test_under_target_is_skipped():
    plan = plan_trajectory(roles("SHGTGT"), [100] * 6, CFG)
    assert plan.action == "skip" and plan.region is None


def test_greedy_takes_just_enough():
    r = roles("SHGTGTGTGTGTGTGTGT")
    tokens = [100] * len(r)  # total 1800, need 1800 - 1000 + 100 = 900
    plan = plan_trajectory(r, tokens, CFG)
    assert plan.region is not None
    assert plan.region.start == 4
    assert plan.region_tokens >= 900
    assert sum(tokens[plan.region.start:plan.region.end - 1]) < 900 or \
        r[plan.region.end - 1] == "tool"


# --- property tests ---------------------------------------------------------------


@st.composite
def trajectories(draw):
    """Well-formed role sequences (tool turns always follow a gpt or tool turn) + counts."""
    out = []
    if draw(st.booleans()):
        out.append("system")
    out.append("human")
    for _ in range(draw(st.integers(0, 25))):
        kind = draw(st.sampled_from(["call", "call", "call", "say", "human"]))
        if kind == "human":
            out.append("human")
        else:
            out.append("gpt")
            if kind == "call":
                out.extend(["tool"] * draw(st.integers(1, 3)))
    tokens = draw(st.lists(st.integers(0, 800), min_size=len(out), max_size=len(out)))
    return out, tokens


configs = st.builds(
    lambda target, summary, last_n, flags: CompressionConfig(
        target_max_tokens=target, summary_target_tokens=min(summary, target - 1),
        protect_last_n_turns=last_n, protect_first_system=flags[0],
        protect_first_human=flags[1], protect_first_gpt=flags[2], protect_first_tool=flags[3]),
    st.integers(200, 6000), st.integers(1, 600), st.integers(0, 6),
    st.tuples(st.booleans(), st.booleans(), st.booleans(), st.booleans()),
)


@settings(max_examples=examples(600), deadline=None)
@given(trajectories(), configs)
def test_region_matches_the_reference(traj, cfg):
    r, tokens = traj
    plan = plan_trajectory(r, tokens, cfg)
    expected = reference_region(
        r, tokens, cfg.target_max_tokens, cfg.summary_target_tokens,
        (cfg.protect_first_system, cfg.protect_first_human, cfg.protect_first_gpt,
         cfg.protect_first_tool), cfg.protect_last_n_turns)
    got = None if plan.region is None else (plan.region.start, plan.region.end)
    assert got == expected


@settings(max_examples=examples(600), deadline=None)
@given(trajectories(), configs)
def test_region_invariants(traj, cfg):
    r, tokens = traj
    plan = plan_trajectory(r, tokens, cfg)
    assert plan.total_tokens == sum(tokens)
    if plan.region is None:
        return
    region, middle = plan.region, plan.middle
    assert middle.start <= region.start < region.end <= middle.end
    assert r[region.start] != "tool"
    assert region.end == len(r) or r[region.end] != "tool"
    protected = protected_indices(r, cfg)
    assert not protected & set(range(region.start, region.end))
    assert plan.region_tokens == sum(tokens[region.start:region.end])
    assert plan.region_tokens > cfg.summary_target_tokens
