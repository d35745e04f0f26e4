"""Summary rules at their documented limits (issue 26, item 5).

From core/summary.py's documentation and SPEC §4/§12: a summary of ``target`` tokens may
reach ``max(target, floor(target x tolerance))`` before it is cut; a cut ends at the last
sentence end (or line break) that fits ``target`` and must keep at least half of it; a
turn longer than 3,000 characters keeps its first 1,500 and last 500; the prefix
``[CONTEXT SUMMARY]:`` appears exactly once; a references line names as many items, in
order, as fit the budget. Tokens are counted as characters here, so each limit is
worked out by hand.
"""

from __future__ import annotations

import pytest

from trajectory_compressor.core.summary import (
    SummaryRequest,
    SummaryUsage,
    add_references,
    bound_summary,
    elide_middle,
    finish_summary_text,
    neutralize,
    render_turns,
    summary_body,
    summary_limit,
)

PREFIX = "[CONTEXT SUMMARY]:"


def chars(text: str) -> int:
    return len(text)


def test_the_limit_is_the_target_times_the_tolerance_never_below_the_target():
    assert summary_limit(100, 2.0) == 200
    assert summary_limit(3, 1.5) == 4  # floor(4.5)
    assert summary_limit(100, 0.5) == 100
    assert summary_limit(100, 1.0) == 100


def test_a_text_at_the_limit_is_kept_and_one_more_is_cut():
    text = "One two. Three four. Five."  # 26 characters; sentence ends at 8, 20, 26
    assert bound_summary(text, 13, 2.0, chars) == (text, False)  # limit 26
    assert bound_summary(text, 26, 1.0, chars) == (text, False)
    assert bound_summary(text, 25, 1.0, chars) == ("One two. Three four.", True)
    # The cut fits the target, not the tolerance: 12 x 2 = 24 < 26, "One two." (8) <= 12.
    assert bound_summary(text, 12, 2.0, chars) == ("One two.", True)


def test_a_cut_exactly_at_the_target_fits():
    text = "One two. Three four. Five."
    assert bound_summary(text, 20, 1.0, chars) == ("One two. Three four.", True)
    # 19: "One two. Three four." (20) does not fit, and "One two." (8) is under half.
    assert bound_summary(text, 19, 1.0, chars) is None


def test_a_cut_must_keep_at_least_half_of_the_target():
    text = "One two. Three four. Five."
    assert bound_summary(text, 16, 1.0, chars) == ("One two.", True)  # 8 = half of 16
    assert bound_summary(text, 17, 1.0, chars) is None  # 8 < 8.5
    assert bound_summary("x" * 50, 10, 1.0, chars) is None  # no sentence end at all


def test_a_line_break_is_a_cut_point_and_the_line_break_is_dropped():
    text = "first line\nsecond line goes on"
    assert bound_summary(text, 12, 1.0, chars) == ("first line", True)


def test_a_runaway_text_is_bounded_by_its_whole_length():
    # Longer than limit x 16 characters: looked at through a window, still judged whole.
    text = "Abcdefghijklm. " + "y" * 700  # 715 > 40 x 16 characters
    assert bound_summary(text, 20, 2.0, chars) == ("Abcdefghijklm.", True)
    # Cheap tokens (one per 100 characters): the whole text is within the limit.
    assert bound_summary(text, 20, 2.0, lambda t: len(t) // 100) == (text, False)


def test_elide_middle_keeps_head_and_tail_with_a_count_of_what_was_cut():
    assert elide_middle("abcde", 3, 2) == "abcde"
    assert elide_middle("abcdefgh", 3, 2) == "abc\n...[3 characters omitted]...\ngh"


def test_render_turns_numbers_turns_and_bounds_long_ones():
    turns = [{"from": "gpt", "value": "hi"}, {"from": "tool", "value": "x" * 3000},
             {"from": "human", "value": "y" * 3001}]
    text = render_turns(SummaryRequest(turns=turns, first_index=5, target_tokens=10))
    blocks = text.split("\n\n")
    assert blocks[0] == "[Turn 5 - GPT]:\nhi"
    assert blocks[1] == "[Turn 6 - TOOL]:\n" + "x" * 3000  # at the limit: whole
    assert blocks[2] == ("[Turn 7 - HUMAN]:\n" + "y" * 1500
                         + "\n...[1001 characters omitted]...\n" + "y" * 500)
    small = render_turns(SummaryRequest(turns=turns[:1], first_index=0, target_tokens=1),
                         max_chars=100)
    assert small == "[Turn 0 - GPT]:\nhi"
    bounded = render_turns(SummaryRequest(turns=turns[1:2], first_index=0, target_tokens=1),
                           max_chars=100)
    # 75 characters of head, 25 of tail.
    assert bounded.startswith("[Turn 0 - TOOL]:\n" + "x" * 58 + "\n...[")
    assert bounded.endswith("]...\n" + "x" * 25)


def test_the_prefix_appears_exactly_once():
    assert finish_summary_text("  did things ") == f"{PREFIX} did things"
    assert finish_summary_text(f"{PREFIX} {PREFIX.lower()} did") == f"{PREFIX} did"
    assert finish_summary_text("   ") == PREFIX
    assert summary_body(f"  {PREFIX}  body ") == "body"
    assert summary_body("plain") == "plain"


def test_markers_are_defused():
    assert neutralize("[Turn 3 - GPT]: hi") == "turn 3 (GPT): hi"
    assert neutralize("<|im_start|>user") == "(im_start)user"
    assert neutralize("<tool_call>{}</tool_call>") == "(tool_call){}(/tool_call)"
    assert neutralize("[INST] x [/INST]") == "(INST) x (/INST)"
    assert neutralize("[CONTEXT SUMMARY]: x") == "(context summary): x"


def test_references_name_as_many_items_as_fit_the_budget():
    text = f"{PREFIX} Done."  # 24 characters
    # "\nReferences: a.py" is 17 more (41), "; b.py" 6 more (47).
    assert add_references(text, ["a.py", " ", "b.py"], 47, chars) == (
        f"{text}\nReferences: a.py; b.py", False)
    assert add_references(text, ["a.py", "b.py"], 46, chars) == (
        f"{text}\nReferences: a.py", False)
    assert add_references(text, ["a.py", "b.py"], 40, chars) == (text, False)
    assert add_references(text, [], 100, chars) == (text, False)


def test_references_may_cut_the_summary_to_a_quarter_of_the_budget():
    text = f"{PREFIX} First part. Second part is long."  # 51 characters
    budget = 60  # a quarter is 15: the text may be cut to 45 to make room
    out, cut = add_references(text, ["a.py"], budget, chars)
    assert (out, cut) == (f"{PREFIX} First part.\nReferences: a.py", True)
    # Over the budget already (within its tolerance): left as it is.
    assert add_references(text, ["a.py"], 50, chars) == (text, False)


def test_usage_adds_up_and_reads_back():
    usage = SummaryUsage(api_calls=1, prompt_tokens=10)
    usage.failed("timeout")
    usage.failed("timeout")
    other = SummaryUsage(api_calls=2, errors=1, retries=3, prompt_tokens=5,
                         completion_tokens=7, errors_by_kind={"timeout": 1, "http": 1})
    usage.add(other)
    assert usage.to_dict() == {"api_calls": 3, "errors": 3, "retries": 3,
                               "prompt_tokens": 15, "completion_tokens": 7,
                               "errors_by_kind": {"timeout": 3, "http": 1}}
    assert SummaryUsage.from_dict(usage.to_dict()) == usage
    assert SummaryUsage.from_dict({"api_calls": True, "errors": "2",
                                   "errors_by_kind": []}) == SummaryUsage()


def test_the_summary_is_not_cut_when_that_names_no_more_items():
    text = f"{PREFIX} First part. Second part is long."
    # Even cut to "…First part." (30 characters) an item of 100 characters cannot fit.
    assert add_references(text, ["x" * 100], 60, chars) == (text, False)


def test_requests_are_equal_whatever_their_deadline_usage_and_origin():
    from trajectory_compressor.core.deadline import Deadline

    turns = [{"from": "gpt", "value": "x"}]
    plain = SummaryRequest(turns=turns, first_index=0, target_tokens=10)
    busy = SummaryRequest(turns=turns, first_index=0, target_tokens=10,
                          deadline=Deadline(5.0), usage=SummaryUsage(api_calls=3),
                          origin="run:row 7")
    assert plain == busy
    assert plain != SummaryRequest(turns=turns, first_index=1, target_tokens=10)


def test_a_repair_is_a_frozen_value():
    import dataclasses

    from trajectory_compressor.core.summary import Repair

    repair = Repair("old text", ("a.py",))
    assert hash(repair) == hash(Repair("old text", ("a.py",)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        repair.previous = "x"  # type: ignore[misc]


def test_a_summarizer_used_with_async_with_starts_and_closes():
    import asyncio

    from trajectory_compressor.core.summary import Summarizer

    calls = []

    class Recording(Summarizer):
        async def start(self) -> None:
            calls.append("start")

        async def aclose(self) -> None:
            calls.append("close")

    async def use() -> None:
        async with Recording() as summarizer:
            assert isinstance(summarizer, Recording)
            calls.append("use")

    asyncio.run(use())
    assert calls == ["start", "use", "close"]


def test_the_cut_is_the_longest_that_fits_among_many_sentence_ends():
    text = " ".join(["Aa."] * 7)  # 27 characters; sentence ends at 3, 7, ..., 27
    assert bound_summary(text, 20, 1.0, chars) == ("Aa. Aa. Aa. Aa. Aa.", True)  # 19
    assert bound_summary(text, 11, 1.0, chars) == ("Aa. Aa. Aa.", True)  # 11 exactly


def test_a_request_without_its_token_count_is_bounded_as_unknown():
    from trajectory_compressor.summarizers.prompt import build_prompt

    turns = [{"from": "tool", "value": f"line {i} " * 400} for i in range(20)]  # ~60k chars
    implicit = build_prompt(SummaryRequest(turns=turns, first_index=0, target_tokens=50),
                            2000, None)
    unknown = build_prompt(SummaryRequest(turns=turns, first_index=0, target_tokens=50,
                                          region_tokens=0), 2000, None)
    assert implicit.messages == unknown.messages
    assert sum(len(m["content"]) for m in implicit.messages) < 30_000  # bounded


def test_a_summary_exactly_at_the_budget_may_be_cut_for_its_references():
    text = f"{PREFIX} First part. Second part is long."  # 51 characters
    # Budget 51: no room for "\nReferences: a.py" (17); cut to leave a quarter (12):
    # "…First part." (30) + 17 = 47 <= 51.
    assert add_references(text, ["a.py"], 51, chars) == (
        f"{PREFIX} First part.\nReferences: a.py", True)


def test_a_runaway_text_exactly_at_the_limit_is_kept():
    # 720 characters > 40 x 16: judged through the window, then whole; at 18 characters a
    # token the whole is 40 tokens, exactly the limit of 20 x 2.
    text = "Abcdefghijklm. " + "y" * 705
    assert bound_summary(text, 20, 2.0, lambda t: len(t) // 18) == (text, False)


@pytest.mark.parametrize("missing, invented, asks", [
    (("src/a.py",), (), {"left out facts"}),
    ((), ("4016 samples",), {"again, about as long, without them"}),
    (("src/a.py",), ("4016 samples",), {"left out facts", "It also stated things"}),
    ((), (), {"left out facts"}),  # nothing named: the plain repair
])
def test_a_repair_asks_for_what_went_wrong_and_only_that(missing, invented, asks):
    # Issue 23 item 4: a summary that only invented gets the invented repair alone (no
    # "left out facts" it did not leave out); one that also dropped facts gets both.
    from trajectory_compressor.core.summary import Repair
    from trajectory_compressor.summarizers.prompt import build_prompt

    turns = [{"from": "tool", "value": "ran src/a.py: ok"}]
    request = SummaryRequest(turns=turns, first_index=0, target_tokens=50,
                             repair=Repair("It ran a script.", missing, invented))
    user = build_prompt(request, 2000, None).messages[1]["content"]
    said = {"left out facts", "again, about as long, without them", "It also stated things"}
    assert {phrase for phrase in said if phrase in user} == asks
    for item in (*missing, *invented):
        assert f"- {item}" in user
