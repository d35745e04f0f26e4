"""Windows output (§20, issue 39): the pure planner (`core.windows`), its invariants, the
parity of each window's context with the live compressor's boundary logic, and the
training marks of each dialect (`dialects.training`).

The hand-worked plan below is computed on paper from the rules in `core.windows`'
docstring; the invariants hold for any row (hypothesis); the parity test runs the live
compressor's own `tail_start`/`boundaries` (`live.boundaries`) on the same history.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.plan import ALTERNATING, ANY_BUT_TOOL, Region
from trajectory_compressor.core.windows import (
    WindowLimits,
    clean_ends,
    essential_head,
    head_end,
    plan_windows,
    trailing_outputs,
    window_turns,
)
from trajectory_compressor.dialects import dialect_for
from trajectory_compressor.dialects.openai import sharegpt_to_openai
from trajectory_compressor.dialects.training import is_marked, not_trained, window_id
from trajectory_compressor.live import boundaries as live

ROLE = {"S": "system", "H": "human", "G": "gpt", "T": "tool"}


def roles_of(spec: str) -> list[str]:
    return [ROLE[c] for c in spec]


def test_hand_worked_plan():
    # S H G T | G T G T G T G, 120 tokens; target 60, a summary adds 10; head = turns
    # 0-3 (20 tokens); live tail budget int(60 x 0.2) = 12, ceiling 18.
    roles = roles_of("SHGTGTGTGTG")
    tokens = [5, 5, 5, 5, 10, 20, 10, 20, 10, 20, 10]
    windows = plan_windows(roles, tokens, 4, WindowLimits(60, 10), ANY_BUT_TOOL)
    got = [(w.train.start, w.train.end, w.context, w.summarized, w.tokens,
            w.trained_assistant_tokens) for w in windows]
    assert got == [
        # 0-5 is 50 tokens; turn 6 with its answer would make 80.
        (0, 6, 0, None, 50, 15),
        # head 20 + summary 10 + turns 6-7 (30) = 60: the live tail (turns 4-5) leaves
        # no room for them, so the context is shortened to nothing.
        (6, 8, 6, Region(4, 6), 60, 10),
        (8, 10, 8, Region(4, 8), 60, 10),
        # The last turn: the live tail from turn 6 (50 tokens) does not leave room.
        (10, 11, 10, Region(4, 10), 40, 10),
    ]
    assert all(not w.over for w in windows)
    assert sum(w.trained_assistant_tokens for w in windows) == 5 + 10 + 10 + 10 + 10


def test_context_kept_when_it_fits():
    # S H G T then five gpt/tool pairs and a last gpt turn, 110 tokens; target 100.
    roles = roles_of("SHGTGTGTGTGTG")
    tokens = [5, 5, 5, 5, 10, 10, 10, 10, 10, 10, 10, 10, 10]
    windows = plan_windows(roles, tokens, 4, WindowLimits(100, 10), ANY_BUT_TOOL)
    # Window 1: turns 0-11 hold 100 tokens and end before a gpt turn.
    assert windows[0].train == Region(0, 12)
    # The live tail of history 0-11, budget 20 (ceiling 30): turns 11, 10, 9 (three
    # turns), starting on tool turn 9, moved back onto its call, turn 8. Head 20 +
    # summary 10 + context 8-11 (40) + turn 12 (10) = 80: it fits, so it is kept.
    second = windows[1]
    assert (second.summarized, second.context, second.train) == \
        (Region(4, 8), 8, Region(12, 13))
    assert second.tokens == 80 and not second.shrunk
    assert len(windows) == 2


def test_single_window_when_nothing_helps():
    # The head alone is over the target: one window, over, with a located reason.
    windows = plan_windows(roles_of("SHGTG"), [50, 50, 5, 5, 5], 4, WindowLimits(60, 10),
                           ANY_BUT_TOOL)
    assert len(windows) == 2 or windows[0].over
    assert "over the target 60" in windows[0].over


def test_alternating_rows_end_on_the_assistant_side():
    # LLaMA-Factory rows pair user and assistant sides: a window ends before a user-side
    # turn (human or observation), and the turn after the summary is an assistant turn.
    roles = roles_of("HGTGTGTGTG")
    assert clean_ends(roles, ALTERNATING) == [True, False, True, False, True, False, True,
                                              False, True, False, True]
    tokens = [5, 10, 20, 10, 20, 10, 20, 10, 20, 10]
    windows = plan_windows(roles, tokens, 3, WindowLimits(60, 10), ALTERNATING)
    assert len(windows) >= 2
    for w in windows:
        assert w.train.end == len(roles) or roles[w.train.end] in ("human", "tool")
        if w.number > 1:
            first = w.context if w.context < w.train.start else w.train.start
            assert roles[first] == "gpt"


@st.composite
def trajectories(draw):
    """Agent rows: system, task, then gpt turns each followed by 0-2 tool turns."""
    roles = ["system", "human"]
    for _ in range(draw(st.integers(2, 25))):
        roles.append("gpt")
        roles += ["tool"] * draw(st.integers(0, 2))
        if draw(st.integers(0, 9)) == 0:
            roles.append("human")
    tokens = draw(st.lists(st.integers(1, 400), min_size=len(roles), max_size=len(roles)))
    return roles, tokens


@settings(max_examples=80, deadline=None)
@given(trajectories(), st.integers(200, 3000), st.integers(1, 150), st.booleans(),
       st.booleans(), st.sampled_from([None, 1, 30]))
def test_invariants(row, target, summary, may_cut, may_drop_head, placeholder):
    roles, tokens = row
    masked_tokens = None if placeholder is None else (lambda i: placeholder)
    config = CompressionConfig(target_max_tokens=max(target, summary + 1))
    from trajectory_compressor.core.plan import compressible_middle

    head = head_end(roles, compressible_middle(roles, config).start)
    least = max(1, summary // 4) if may_cut else None
    limits = WindowLimits(target, summary, min_summary=least)
    least_head = essential_head(roles, head) if may_drop_head else None
    windows = plan_windows(roles, tokens, head, limits, ANY_BUT_TOOL, least_head,
                           masked_tokens)
    n = len(roles)
    # Every turn trained in exactly one window, in input order.
    trained = [i for w in windows for i in range(w.train.start, w.train.end)]
    assert trained == list(range(n))
    assert [w.number for w in windows] == list(range(1, len(windows) + 1))
    assistant = sum(t for r, t in zip(roles, tokens, strict=True) if r == "gpt")
    assert sum(w.trained_assistant_tokens for w in windows) == assistant
    for w in windows:
        # Never split a call from its results: no window stops before a tool turn, and
        # none opens (after its head and summary) on one.
        assert w.train.end == n or roles[w.train.end] != "tool"
        if w.number > 1:
            assert roles[min(w.context, w.train.start)] != "tool"
            assert w.head <= w.context <= w.train.start
            # The whole head, or the least head only for a window the whole one leaves
            # over the target.
            assert w.head == head or (w.head == least_head and not w.over)
            if w.over and least_head is not None and least_head < head:
                assert "keeping only turns" in w.over
        # The planned size is what the window holds (the summary at its allowance).
        held = sum(tokens[i] for i in w.source_turns) + (w.summary_tokens if w.summarized
                                                          else 0)
        assert held - w.masked_saving == w.tokens
        # Masked: only the tool turns that end what the window trains, only where the
        # window fits with them masked and would not without.
        if w.masked:
            assert masked_tokens is not None and not w.over
            tail = trailing_outputs(roles, w.train)
            assert set(w.masked) == {i for i in tail if tokens[i] > placeholder}
            assert all(roles[i] == "tool" for i in tail)
            assert tail[0] == w.train.start or roles[tail[0] - 1] == "gpt"
            assert w.masked_saving == sum(tokens[i] - placeholder for i in w.masked) > 0
            assert held > target
        else:
            assert w.masked_saving == 0
        if not w.summarized:
            assert w.summary_tokens == 0
        elif least is None:
            assert w.summary_tokens == summary
        else:  # cut only as far as the least summary, and only for a window that fits
            assert least <= w.summary_tokens <= summary
            assert w.summary_tokens == summary or not w.over
        # Within the target, or a located reason.
        assert (w.tokens <= target) == (not w.over)


@settings(max_examples=60, deadline=None)
@given(trajectories(), st.integers(400, 3000))
def test_context_is_the_live_compressors(row, target):
    """Each window's context is the live compressor's protected tail for the same
    history, when it leaves room for a new turn (otherwise it is shortened: `shrunk`).

    The threshold maps as `core.windows` says: the live compressor compacts a prompt of
    ``threshold x context_length`` tokens; a window ends when its next turn would pass
    the target, so ``context_length = target``, ``threshold = 1``, and the live tail
    budget is ``int(target x 0.2)`` (its default ``target_ratio``). Its head is the
    window's head (``protect_first_n`` = the head's end: tool results are pushed past).
    """
    roles, tokens = row
    turns = [{"from": r, "value": f"t{i}"} for i, r in enumerate(roles)]
    for i, turn in enumerate(turns):  # one Hermes response per tool turn: one message
        if turn["from"] == "tool":
            body = '{"tool_call_id": "c' + str(i) + '", "name": "x", "content": "r"}'
            turn["value"] = f"<tool_response>\n{body}\n</tool_response>"
        elif turn["from"] == "gpt":
            turn["value"] = 'a\n<tool_call>\n{"name": "x", "arguments": {}}\n</tool_call>'
    messages = sharegpt_to_openai(turns)
    assert len(messages) == len(turns)
    head = head_end(roles, 3)
    limits = WindowLimits(target, 50)
    for w in plan_windows(roles, tokens, head, limits, ANY_BUT_TOOL)[1:]:
        history, counts = messages[:w.train.start], tokens[:w.train.start]
        tail = live.tail_start(history, counts, head, limits.tail_budget)
        if not w.shrunk:
            assert w.context == tail
            user = live.latest_user_index(history)
            if w.context - head >= live.MIN_MIDDLE and (user is None or user < head):
                # The whole layout: the one the live compressor compacts to (a later user
                # message would make it keep that message out of the summary; windows
                # summarize it like any other turn, see docs/strategies.md, windows).
                assert live.boundaries(history, counts, head, limits.tail_budget) == \
                    (head, w.context)
        else:
            assert w.context != tail


def test_window_turns_marks_and_summary():
    turns = [{"from": r, "value": f"{r} {i}"} for i, r in enumerate(roles_of("SHGTGTG"))]
    plan = plan_windows([t["from"] for t in turns], [10] * 7, 3, WindowLimits(45, 5),
                        ANY_BUT_TOOL)
    second = plan[1]
    out, at, trained = window_turns(turns, second, "[CONTEXT SUMMARY]: s", " (notice)")
    assert at == second.head
    assert out[at] == {"from": "human", "value": "[CONTEXT SUMMARY]: s"}
    assert out[0]["value"] == "system 0 (notice)" and turns[0]["value"] == "system 0"
    assert trained == [False] * (len(out) - second.train.turns) + [True] * second.train.turns


def test_marks_in_each_dialect():
    config = CompressionConfig()
    openai = dialect_for(config, "openai")
    row = {"id": 7, "messages": [{"role": "user", "content": "q"},
                                 {"role": "assistant", "content": "a", "name": "n"}]}
    turn = openai.turns(row)[1]
    written = openai.with_turns(row, [openai.turns(row)[0], not_trained(openai, row, turn)])
    assert written["messages"][1] == {"role": "assistant", "content": "a", "name": "n",
                                      "weight": 0}
    assert row["messages"][1] == {"role": "assistant", "content": "a", "name": "n"}
    assert is_marked(openai, written["messages"][1])
    # LLaMA-Factory's loss_weight, where the row spells weights that way.
    lf = {"messages": [{"role": "user", "content": "q", "loss_weight": 0.0},
                       {"role": "assistant", "content": "a", "loss_weight": 1.0}]}
    t = openai.turns(lf)
    out = openai.with_turns(lf, [t[0], not_trained(openai, lf, t[1])])
    assert out["messages"][1] == {"role": "assistant", "content": "a", "loss_weight": 0,
                                  "weight": 0}
    variant = dialect_for(config, "sharegpt-variant")
    sg = {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}],
          "system": "s"}
    t = variant.turns(sg)
    out = variant.with_turns(sg, [t[0], t[1], not_trained(variant, sg, t[2])])
    assert out["conversations"][1] == {"from": "gpt", "value": "a", "train": False}
    assert out["system"] == "s"
    hermes = dialect_for(config, "sharegpt")
    h = {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]}
    t = hermes.turns(h)
    out = hermes.with_turns(h, [t[0], not_trained(hermes, h, t[1])])
    assert out["conversations"][1] == {"from": "gpt", "value": "a", "train": False}
    assert window_id({"id": 7}, 2) == {"id": "7#w2"}
    assert window_id({"uuid": "u"}, 1) == {"uuid": "u#w1"}
    assert window_id({"x": 1}, 1) == {}


def test_a_shorter_summary_rather_than_a_window_over():
    # Head 0-3 (40 tokens), turns 0-5 fill window 1 (80 = the target). Window 2 must hold
    # turn 6 (35): head 40 + summary 20 + 35 = 95 > 80; the room left is 80 - 40 - 35 = 5,
    # not under the least summary (5): the summary's budget is cut to 5 and it fits.
    roles = roles_of("SHGTGTG")
    tokens = [10, 10, 10, 10, 10, 30, 35]
    cut = plan_windows(roles, tokens, 4, WindowLimits(80, 20, min_summary=5), ANY_BUT_TOOL)
    assert [(w.train, w.summary_tokens, w.tokens, w.over) for w in cut] == [
        (Region(0, 6), 0, 80, ""), (Region(6, 7), 5, 80, "")]
    kept = plan_windows(roles, tokens, 4, WindowLimits(80, 20), ANY_BUT_TOOL)
    assert kept[1].summary_tokens == 20 and kept[1].tokens == 95 and kept[1].over
    # Under the least summary: the window stays over, with its full summary.
    over = plan_windows(roles, tokens, 4, WindowLimits(80, 20, min_summary=6), ANY_BUT_TOOL)
    assert over[1].summary_tokens == 20 and over[1].over


def test_the_least_head_when_the_whole_head_leaves_no_room():
    # S H G T | G T G, 130 tokens; target 100, summary 20 (least 5); head 0-3 (70
    # tokens), least head 0-1 (system and task, 50). Window 1: turns 0-3 (70; with turns
    # 4-5 it would be 110). Window 2 must hold turns 4-5 (40): 70 + 40 = 110 with the
    # whole head and no summary; with the least head, 50 + 40 leaves room 10 for a
    # summary of turns 2-3: 100. Window 3, turn 6 (20): the whole head 70 + 20 leaves
    # room 10 for a summary of turns 4-5: 100, so the whole head is kept.
    roles = roles_of("SHGTGTG")
    tokens = [30, 20, 10, 10, 10, 30, 20]
    assert essential_head(roles, 4) == 2
    limits = WindowLimits(100, 20, min_summary=5)
    windows = plan_windows(roles, tokens, 4, limits, ANY_BUT_TOOL, least_head=2)
    assert [(w.head, w.summarized, w.context, w.train, w.summary_tokens, w.tokens, w.over)
            for w in windows] == [
        (0, None, 0, Region(0, 4), 0, 70, ""),
        (2, Region(2, 4), 4, Region(4, 6), 10, 100, ""),
        (4, Region(4, 6), 6, Region(6, 7), 10, 100, ""),
    ]
    out, at, trained = window_turns([{"from": r, "value": str(i)} for i, r in
                                     enumerate(roles)], windows[1], "s", "")
    assert [t["value"] for t in out] == ["0", "1", "s", "4", "5"] and at == 2
    assert trained == [False, False, False, True, True]
    # Without a least head, window 2 is over, and says where and by how much.
    whole = plan_windows(roles, tokens, 4, limits, ANY_BUT_TOOL)
    assert whole[1].tokens == 110 and whole[1].over == (
        "turns 4-5 (40 tokens) after the protected head (turns 0-3, 70 tokens) make 110, "
        "over the target 100")
    # A least head that does not help either: the window keeps the whole head, and its
    # reason says what the least head would hold (room 10 is under the least summary
    # 15, so the whole summary: 50 + 20 + 40 = 110).
    tight = plan_windows(roles, tokens, 4, WindowLimits(100, 20, min_summary=15),
                         ANY_BUT_TOOL, least_head=2)
    assert tight[1].head == 4 and tight[1].over.endswith(
        "; keeping only turns 0-1 of the head (50 tokens) it would hold 110")


def test_a_window_ending_on_an_output_too_long_to_fit_holds_it_masked():
    # S H G T | G T G T G, target 100, summary 20 (least 5); head 0-3 (40 tokens). Window
    # 1: turns 0-3 (40; turns 4-5 would make 160). Window 2 must train turns 4-5: the
    # head 40 + 10 + 110 = 160 is over; with turn 5 masked (8 tokens) it holds 58, and
    # with turn 4 as its own start no summary is needed. Window 3 trains turns 6-8: turn
    # 5 (110) cannot be context, so turns 4-5 are summarized: 40 + 20 + 30 = 90.
    roles = roles_of("SHGTGTGTG")
    tokens = [10, 10, 10, 10, 10, 110, 10, 10, 10]
    limits = WindowLimits(100, 20, min_summary=5)
    windows = plan_windows(roles, tokens, 4, limits, ANY_BUT_TOOL,
                           masked_tokens=lambda i: 8)
    assert [(w.train, w.summarized, w.masked, w.masked_saving, w.tokens, w.over)
            for w in windows] == [
        (Region(0, 4), None, (), 0, 40, ""),
        (Region(4, 6), None, (5,), 102, 58, ""),
        (Region(6, 9), Region(4, 6), (), 0, 90, ""),
    ]
    turns = [{"from": r, "value": str(i)} for i, r in enumerate(roles)]
    out, at, trained = window_turns(turns, windows[1], None, "", {5: "[masked]"})
    assert [t["value"] for t in out] == ["0", "1", "2", "3", "4", "[masked]"] and at is None
    assert trained == [False] * 4 + [True, True]
    assert turns[5]["value"] == "5"  # the input untouched
    # No placeholder shorter than the output (None): the window stays over, and says so.
    plain = plan_windows(roles, tokens, 4, limits, ANY_BUT_TOOL,
                         masked_tokens=lambda i: None)
    assert plain[1].masked == () and plain[1].tokens == 160 and plain[1].over
    # Window 1 ending on such an output (a head whose first result is too long) too.
    first = plan_windows(roles_of("SHGTGTG"), [10, 10, 10, 150, 10, 10, 10], 4, limits,
                         ANY_BUT_TOOL, masked_tokens=lambda i: 8)
    assert (first[0].train, first[0].masked, first[0].tokens, first[0].over) == (
        Region(0, 4), (3,), 38, "")


def test_a_turn_over_the_target_alone_is_named():
    # S H G T G T G, target 100: the task (turn 1, 120 tokens) is over by itself; every
    # window holds it (it is in the least head), and each says so after its reason.
    roles = roles_of("SHGTGTG")
    tokens = [10, 120, 10, 10, 10, 10, 10]
    windows = plan_windows(roles, tokens, 4, WindowLimits(100, 20, min_summary=5),
                           ANY_BUT_TOOL, least_head=2, masked_tokens=lambda i: 1)
    assert len(windows) >= 2 and all(w.over for w in windows)
    assert all(w.over.endswith("; turn 1 alone holds 120 tokens, over the target")
               for w in windows)
    # A window over for the sum of its turns names none.
    fits_alone = plan_windows(roles, [10, 90, 10, 10, 10, 10, 10], 4, WindowLimits(100, 20),
                              ANY_BUT_TOOL)
    assert any(w.over for w in fits_alone)
    assert not any("alone" in w.over for w in fits_alone)
