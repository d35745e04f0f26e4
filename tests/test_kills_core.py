"""The core, unit by unit (issue 26, item 5: mutants of core/, dialects/ and app/gates.py
that the other tests let through).

Expected values are worked out by hand from the modules' documented contracts (their
docstrings, README and SPEC): the elision pass of `core.elide` (README "A second pass"),
the gates' line (README "CI gates"), the error hierarchy, the local model catalogue, the
metrics' distributions, the dialects (OpenAI's rule that a ``tool`` message answers the
``tool_calls`` of the assistant message right before it). Counting is by words where a
count is needed (a stand-in tokenizer whose counts are checked by eye). Fast and
in-process.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import sys

import pytest

from tests.fixtures_runs import count_words
from trajectory_compressor.app.gates import GATE_EXIT, Gate, GateResult, finish
from trajectory_compressor.core.conversation import json_type
from trajectory_compressor.core.distill import blobs, distill_text, long_lines, rules_for
from trajectory_compressor.core.distill_row import (
    DistillStats,
    RuleSaving,
    _shares,
    distill_turns,
)
from trajectory_compressor.core.elide import (
    LINE_CHARS,
    MIN_STRING_CHARS,
    MIN_TOKENS,
    Elision,
    elide_tool_outputs,
    eligible_turns,
    marker,
    shorten,
)
from trajectory_compressor.core.errors import CompressorError, RowError, one_line_error
from trajectory_compressor.core.fidelity import (
    JSON_DEPTH,
    Fidelity,
    decoded_strings,
    measure_fidelity,
    normalize_text,
)
from trajectory_compressor.core.local_models import LOCAL_MODELS, LocalModel
from trajectory_compressor.core.metrics import Distribution
from trajectory_compressor.core.plan import Region
from trajectory_compressor.dialects.openai import sharegpt_to_openai
from trajectory_compressor.dialects.sharegpt import ShareGPTVariant


def _shorten_json(value, budget: int):
    text = json.dumps(value)
    tokens = count_words([text])[0]
    out = shorten(text, tokens, budget, count_words)
    assert count_words([out])[0] <= budget
    return json.loads(out)


# -- core/elide.py: the array stage -------------------------------------------------------

def _item(i: int) -> dict:
    # {"id": 0, "text": "a b c d e f g h"}: 11 words, 35 characters; no string of 80+
    # characters, so the string stage leaves it alone.
    return {"id": i, "text": "a b c d e f g h"}


def test_one_item_from_the_very_middle_of_an_array_gives_way():
    # Seven items of 11 words (77 words). One item replaced by the marker string
    # "[... 11 tokens elided ...]" (5 words) saves 6: a budget of 71 needs exactly one
    # item to go, and the docstring says it comes from the middle: index 3 of 0..6.
    items = [_item(i) for i in range(7)]
    out = _shorten_json(items, 71)
    assert len(out) == 7
    assert out[:3] == items[:3] and out[4:] == items[4:]
    assert out[3] == marker(11)


def test_a_longer_run_grows_from_the_middle_on_both_sides():
    # Nine items (99 words); three must go (each goes for 11 words, the marker adds 5:
    # 99 - 33 + 5 = 71 <= 75 while two would leave 99 - 22 + 5 = 82). Grown from the
    # middle item 4, one on each side: items 3, 4 and 5.
    items = [_item(i) for i in range(9)]
    out = _shorten_json(items, 75)
    assert out[:3] == items[:3] and out[-3:] == items[-3:]
    assert out[3] == marker(33) and len(out) == 7


def test_an_array_of_three_items_loses_its_middle_one_before_anything_goes_whole():
    # 17 words: {"log":  ["start",  14 words  "end"]}. Replacing the middle item by the
    # marker (5 words) gives 8 <= 10; the array itself stays, with its first and last.
    middle = " ".join(["w"] * 14)
    out = _shorten_json({"log": ["start", middle, "end"]}, 10)
    assert out == {"log": ["start", marker(14), "end"]}


def test_an_array_that_cannot_shrink_is_left_for_the_next_one():
    # "a" is the longest array (343 characters) but its only removable item is the short
    # number 1: the marker is longer, so "a" can give nothing; "b" (301 characters, seven
    # items of 10 words) then loses its middle item: 81 words - 10 + 5 = 76.
    side = {"p": "x" * 75, "q": "x" * 75}
    a = [side, 1, dict(side)]
    b = [" ".join(["abc"] * 10) for _ in range(7)]
    out = _shorten_json({"a": a, "b": b}, 76)
    assert out["a"] == a
    assert out["b"][:3] == b[:3] and out["b"][4:] == b[4:]
    assert out["b"][3] == marker(10)


def test_an_inner_object_goes_whole_when_strings_and_arrays_cannot_give_enough():
    # No long string, no array: the smallest inner object whose removal is enough becomes
    # the marker string. 70 words; "env" (60 words) as the marker (5) leaves 15, while
    # "tags" (6 words) could never give the 55 missing.
    env = {f"k{i}": i for i in range(30)}
    tags = {"a": 1, "b": 2, "c": 3}
    out = _shorten_json({"env": env, "tags": tags, "id": 7}, 15)
    assert out == {"env": marker(60), "tags": tags, "id": 7}
    # Two objects each enough on its own: the smaller one goes. 184 words, 40 to go:
    # "mid" (60 words) as the marker leaves 129; "big" (120 words) stays.
    big = {f"k{i}": i for i in range(60)}
    mid = {f"m{i}": i for i in range(30)}
    out = _shorten_json({"big": big, "mid": mid, "id": 7}, 144)
    assert out == {"big": big, "mid": marker(60), "id": 7}


def test_an_array_of_strings_keeps_its_items_while_strings_can_give_enough():
    # 70 strings of 100 words: about 6,030 words to go, which 64 strings cut to their
    # marker (95 words each) give with a 64th cut part way; no item of the array goes.
    # The ten shorter strings ("s0w0 ..." to "s9w0 ...") sit in the middle: the longest
    # are cut first, so six of them are left whole, the array's middle item among them.
    words = [" ".join(f"s{i}w{j}" for j in range(100)) for i in range(70)]
    items = words[10:40] + words[:10] + words[40:]
    out = _shorten_json(items, 7000 - 6030)
    assert out[35] == items[35]
    assert len(out) == 70 and sum(x in items for x in out) == 6
    assert all(x == items[i] or "tokens elided" in x for i, x in enumerate(out))


def test_an_elision_is_a_value():
    elision = Elision(3, 900, 120)
    with pytest.raises(dataclasses.FrozenInstanceError):
        elision.tokens_after = 1  # type: ignore[misc]
    assert {elision: "x"}[Elision(3, 900, 120)] == "x"
    assert elision.to_dict() == {"turn": 3, "tokens_before": 900, "tokens_after": 120}


# -- core/elide.py: what is eligible, what is left alone -----------------------------------

def _lines(n: int) -> list[str]:
    """``n`` lines of exactly 10 words each."""
    return [f"line{i} " + " ".join(["w"] * 9) for i in range(n)]


def test_a_tool_output_of_exactly_min_tokens_is_shortened():
    # "tool outputs shorter than MIN_TOKENS are left alone": one of exactly 64 words is not
    # shorter, so it gives the 20 words asked; one of 63 is left alone.
    assert MIN_TOKENS == 64
    text = "\n".join([*_lines(6), "end of the output"])  # 60 + 4 words
    [(turn, short, elision)] = elide_tool_outputs([text], [0], 20, count_words)
    assert (turn, elision.tokens_before) == (0, 64)
    assert elision.tokens_after == count_words([short])[0] <= 44
    [(_, short, elision)] = elide_tool_outputs([text], [0], 1, count_words)
    assert count_words([short])[0] == elision.tokens_after <= 63
    shorter = "\n".join([*_lines(6), "end of output"])  # 63 words
    assert elide_tool_outputs([shorter], [0], 20, count_words) == []


def test_a_first_line_longer_than_line_chars_is_cut_inside():
    # A first line of LINE_CHARS characters is kept whole (the line cut); one character
    # more and the text is cut the same way inside it (its start kept, not all of it).
    assert LINE_CHARS == 500
    rest = [*_lines(5), "end"]
    for length, whole in ((500, True), (501, False)):
        text = "\n".join(["x" * length, *rest])  # 1 + 50 + 1 words
        out = shorten(text, 52, 30, count_words)
        first = out.split("\n")[0]
        assert (first == "x" * length) is whole
        assert first.startswith("xxxx") and count_words([out])[0] <= 30
        # The same for the last line.
        text = "\n".join(["start", *_lines(5), "y" * length])
        out = shorten(text, 52, 30, count_words)
        last = out.split("\n")[-1]
        assert (last == "y" * length) is whole and count_words([out])[0] <= 30


def test_a_json_string_of_min_string_chars_is_shortened():
    # Strings of MIN_STRING_CHARS characters or more are cut as plain text: here the one
    # string (80 characters, 27 words) must give 10 of the 30 words.
    assert MIN_STRING_CHARS == 80
    text = " ".join(["ab"] * 27)
    assert len(text) == 80
    out = _shorten_json({"out": text, "code": 0}, 20)
    assert out["code"] == 0 and "tokens elided" in out["out"]
    assert out["out"].startswith("ab ab")


def test_the_tail_s_tool_turns_stay_protected_after_a_summary():
    # Before: head 0-3, middle [4, 8) = gpt tool gpt tool, tail 8-9 = tool gpt. A summary
    # replaced [4, 6): turns 6.. moved up one, so the middle is [4, 7) and the tail's tool
    # turn (now 7) is still protected: only the middle's tool (now 6) is eligible.
    after = ["system", "human", "gpt", "tool", "human", "gpt", "tool", "tool", "gpt"]
    assert eligible_turns(after, Region(4, 8), Region(4, 6), 4) == [6]


def test_when_nothing_fits_only_the_first_and_last_lines_stay():
    # First and last lines (10 words each) and the marker (5 words) are 25 words, one more
    # than the budget of 24: the budget allows no line between them, so none is kept, not
    # even the blank lines (which cost no words) around the one line of words that goes.
    first, last = _lines(2)
    middle = [""] * 100 + ["middle " + " ".join(["w"] * 9)] + [""] * 100
    text = "\n".join([first, *middle, last])
    assert count_words([text])[0] == 30
    assert shorten(text, 30, 24, count_words) == "\n".join([first, marker(10), last])


def test_a_region_without_a_summary_placed_moves_nothing():
    # The middle moves up only when a summary replaced the region and sits in the row.
    roles = ["system", "human", "gpt", "tool", "gpt", "tool", "gpt", "tool", "tool", "gpt"]
    assert eligible_turns(roles, Region(4, 8)) == [5, 7]
    assert eligible_turns(roles, Region(4, 8), Region(4, 6), None) == [5, 7]


def test_an_output_that_cannot_get_shorter_is_not_listed():
    # A flat one-line JSON object of 32 numbers (64 words): no string to cut, no array to
    # lose items, no inner array or object to go whole: nothing is shorter, so nothing is
    # elided. (An array of 64 numbers could: six middle numbers as the 5-word marker.)
    text = json.dumps({f"k{i}": i for i in range(32)})
    assert count_words([text])[0] == 64
    assert elide_tool_outputs([text], [0], 1, count_words) == []


def test_a_two_line_text_is_cut_inside():
    # Fewer than three lines: cut inside the text (its start and its end kept around the
    # marker), within the budget.
    one, two = " ".join(["a"] * 50), " ".join(["b"] * 50)
    out = shorten(one + "\n" + two, 100, 40, count_words)
    assert count_words([out])[0] <= 40 and "tokens elided" in out
    assert out.startswith("a a a") and out.endswith("b b b")


def test_lines_are_kept_from_both_ends_of_the_middle():
    # Ten lines of 10 words, a budget of 60: the first and last lines, the marker (5) and
    # three whole lines (10 + 10 + 5 + 30 = 55 words; a fourth would make 65), from both
    # ends of the rest: the line after the first and the line before the last stay.
    text = "\n".join(_lines(10))
    kept = shorten(text, 100, 60, count_words).split("\n")
    assert kept[0] == _lines(1)[0] and kept[-1] == _lines(10)[-1]
    assert _lines(2)[1] in kept and _lines(10)[8] in kept
    assert len(kept) == 6 and count_words(["\n".join(kept)])[0] == 55


def test_json_after_a_line_that_is_no_tag_is_plain_text():
    # JSON counts as JSON alone or between two tag lines; after "Output:" it is a line of
    # plain text, which the line cut replaces whole by the marker.
    body = json.dumps({"files": [f"src/module_{i}.py" for i in range(40)]})
    text = "Output:\n" + body + "\ndone"
    tokens = count_words([text])[0]
    assert shorten(text, tokens, 20, count_words) == (
        "Output:\n" + marker(count_words([body])[0]) + "\ndone")


def test_json_with_raw_non_ascii_text_keeps_it_raw():
    # Its own style: a body that writes "café" raw (even beside a \\u escape) is written
    # back raw, not as \\u00e9.
    log = "\n".join(_lines(20))
    text = '{"name": "café", "sym": "\\u2603", "log": ' + json.dumps(log) + "}"
    tokens = count_words([text])[0]
    out = shorten(text, tokens, tokens - 100, count_words)
    assert '"name": "café"' in out and json.loads(out)["sym"] == "\u2603"


def test_json_keeps_its_separators_and_escapes():
    # Written back in its own style: a one-key object with ": " keeps it; an ASCII body
    # that spells "é" as \\u00e9 keeps spelling it so.
    log = " ".join(f"w{i}" for i in range(200))
    out = shorten(json.dumps({"log": log}), 200, 120, count_words)
    assert out.startswith('{"log": "w0 w1') and count_words([out])[0] <= 120
    text = json.dumps({"name": "café", "log": log})  # ensure_ascii: caf\\u00e9
    out = shorten(text, 202, 120, count_words)
    assert out.startswith('{"name": "caf\\u00e9", "log": "w0 w1')


def test_strings_are_cut_only_until_the_text_fits():
    # The longest string (one line of 400 words) can give all that is asked alone (100 to
    # 149 words): the shorter one (120 words) stays whole.
    stdout = " ".join(f"out{i}" for i in range(400))
    stderr = " ".join(f"err{i}" for i in range(120))
    value = {"stdout": stdout, "stderr": stderr}
    tokens = count_words([json.dumps(value)])[0]
    for less in range(100, 150):
        out = _shorten_json(value, tokens - less)
        assert out["stderr"] == stderr and out["stdout"] != stdout


def test_a_string_that_gives_nothing_more_leaves_the_cut_to_the_next():
    # Multi-line strings: a line's break is a word boundary in the text but not in its
    # JSON spelling ("...w\\nline1"), so a cut can fall a few words short and cutting the
    # same string again gives nothing more; the next string then gives the rest. Every
    # budget from 100 to 149 words under the text's count is met.
    stdout, stderr = "\n".join(_lines(40)), "\n".join(_lines(12))
    value = {"stdout": stdout, "stderr": stderr}
    tokens = count_words([json.dumps(value)])[0]
    for less in range(100, 150):
        out = _shorten_json(value, tokens - less)  # within the budget, valid JSON
        assert out["stdout"] != stdout


def test_a_line_that_fits_stays_even_when_every_line_would_fit_the_first_guess():
    # First and last lines of 250 words (499 characters each), two lines of 8 words
    # between them: 516 words. A budget of 513 allows one of the two lines and the marker
    # (250 + 8 + 5 + 250), not both (521).
    edge = " ".join(["w"] * 250)
    one, two = " ".join(["a"] * 8), " ".join(["b"] * 8)
    text = "\n".join([edge, one, two, edge])
    out = shorten(text, 516, 513, count_words).split("\n")
    assert out[0] == edge and out[-1] == edge and len(out) == 4
    assert out[1:3] in ([one, marker(8)], [marker(8), two])


def test_one_line_between_dense_first_and_last_lines_goes():
    # 250 + 8 + 250 words; a budget of 505 is met by the marker in place of the one line
    # between (250 + 5 + 250).
    edge = " ".join(["w"] * 250)
    one = " ".join(["a"] * 8)
    out = shorten("\n".join([edge, one, edge]), 508, 505, count_words)
    assert out == "\n".join([edge, marker(8), edge])


def test_one_line_is_cut_inside_two_thirds_from_its_start():
    # A single line of 200 words: characters kept from each end, two thirds from the
    # start, around the marker, on the one line; when only the marker fits, the marker.
    text = " ".join(f"{i:03d}" for i in range(200))
    out = shorten(text, 200, 50, count_words)
    assert "\n" not in out and count_words([out])[0] <= 50
    head, tail = out.split(" [... ")[0].split(), out.split(" elided ...] ")[1].split()
    assert head[0] == "000" and tail[-1] == "199"
    assert 0.6 <= len(head) / (len(head) + len(tail)) <= 0.72
    assert shorten(text, 200, 5, count_words) == marker(200)


def test_an_output_within_its_budget_is_returned_as_it_is():
    # "cut to at most budget tokens": one already within it is not touched, byte for byte
    # (a JSON text keeps its own spacing, plain text all its lines).
    plain = "\n".join(_lines(10))
    assert shorten(plain, 100, 100, count_words) == plain
    assert shorten(plain, 100, 150, count_words) == plain
    spaced = '{"a":  1,\n "b": [1,2,  3]}'
    assert shorten(spaced, 5, 5, count_words) == spaced


# -- core/distill.py (README "Distill") ----------------------------------------------------

def test_only_lines_over_1000_characters_are_cut():
    # "lines over 1,000 characters keep 400 at each end around [… N chars cut …]".
    over, at, short = "a" * 1001, "b" * 1000, "c" * 900
    assert long_lines("\n".join([over, at, short])) == "\n".join(
        ["a" * 400 + "[… 201 chars cut …]" + "a" * 400, at, short])
    assert long_lines(at) == at


def test_runs_of_64_base64_characters_are_blobs_and_long_words_are_not():
    # "base64/hex runs of 64+ characters become [blob N chars sha256:xxxxxxxx]"; a long
    # word (letters only) is no blob.
    blob64, blob63 = ("ab12" * 16), ("ab12" * 16)[:63]
    out = blobs(f"key {blob64} end")
    assert out.startswith("key [blob 64 chars sha256:") and out.endswith("] end")
    assert blobs(f"key {blob63} end") == f"key {blob63} end"
    word = "a" * 70
    assert blobs(f"see {word}") == f"see {word}"


def test_level_all_rewrites_the_json_rules_left_in_turn():
    # Rules run in order on what the one before left: a laid-out JSON document is
    # compacted (json), then its base64 run becomes a blob marker (blobs); a one-line
    # document longer than 1,000 characters is data, not a line to cut; a JSON array of
    # same-keyed objects becomes columns and rows, its strings as written.
    blob = "ab12" * 20
    laid_out = json.dumps({"id": 7, "data": blob}, indent=2)
    final = distill_text(laid_out, "all")[-1][1]
    assert "\n" not in final and final.startswith('{"id":7,"data":"[blob 80 chars sha256:')
    document = json.dumps({"log": "x y " * 400})
    assert distill_text(document, "all") == []
    names = ["café", "thé", "crème", "brûlée", "naïve", "déjà"]
    table = json.dumps({"données": [{"name": n, "année": i} for i, n in enumerate(names)]},
                       ensure_ascii=False)
    rows = ",".join(f'["{n}",{i}]' for i, n in enumerate(names))
    assert distill_text(table, "all")[-1][1] == (
        '{"données":{"columns":["name","année"],"rows":[' + rows + "]}}")
    # A JSON string on one line is no document of objects: a long one is cut like text.
    text = '"' + "a" * 1500 + '"'
    assert "chars cut" in distill_text(text, "all")[-1][1]


def test_level_off_runs_no_rule():
    assert rules_for("off") == ()
    assert distill_text("\x1b[31mred\x1b[0m", "off") == []


# -- core/distill_row.py -------------------------------------------------------------------

SAME_1 = "⟪same as tool output #1 above⟫"


def test_an_identical_output_of_64_characters_becomes_a_reference():
    # "one identical to an earlier output (after its rules, 64+ characters) becomes a
    # reference": 64 characters (32 words) do, 63 do not.
    long = " ".join(["x"] * 31) + " yy"
    short = long[:-1]
    assert (len(long), len(short)) == (64, 63)
    out, stats = distill_turns([long, None, long], "safe", count_words)
    assert out == [long, None, SAME_1] and stats.turns == 1
    out, _ = distill_turns([short, None, short], "safe", count_words)
    assert out == [short, None, short]


def test_level_off_changes_nothing_not_even_repeated_outputs():
    text = " ".join(["x"] * 40)
    out, stats = distill_turns([text, text], "off", count_words)
    assert out == [text, text]
    assert stats.to_dict() == {"level": "off", "tokens_before": 0, "tokens_after": 0,
                               "turns": 0, "rules": {}}


def test_an_unchanged_content_of_a_turn_stays_as_written():
    # Two responses in one turn; only the second's content has escapes to drop. The first
    # is written back byte for byte, its "\\/" included (a re-encoding would write "/").
    first = ('<tool_response>\n{"tool_call_id": "c1", "name": "read", '
             '"content": "see a\\/b for the path"}\n</tool_response>')
    second = ('<tool_response>\n{"tool_call_id": "c2", "name": "run", '
              '"content": "\\u001b[31mred\\u001b[0m done"}\n</tool_response>')
    [out], stats = distill_turns([first + "\n" + second], "safe", count_words)
    assert out == first + "\n" + second.replace("\\u001b[31mred\\u001b[0m", "red")
    assert stats.turns == 1


def test_a_body_whose_last_content_is_no_string_is_an_output_as_a_whole():
    # json.loads keeps the last "content" (5): the body is no object with a string
    # content, so it is one output as written; its escapes are text, not control
    # characters, so nothing changes.
    body = '{"content": "\\u001b[31mred\\u001b[0m", "content": 5}'
    turn = "<tool_response>\n" + body + "\n</tool_response>"
    out, stats = distill_turns([turn], "safe", count_words)
    assert out == [turn] and stats.turns == 0


def test_a_content_after_a_spaced_comma_is_still_the_output():
    # Only the string of the body's "content" is rewritten (README "Hermes <tool_response>
    # bodies"), wherever JSON allows whitespace: here before the comma.
    turn = ('<tool_response>\n{"tool_call_id": "c1" , "name": "run" ,\n "content": '
            '"\\u001b[1mbold\\u001b[0m text"}\n</tool_response>')
    [out], _ = distill_turns([turn], "safe", count_words)
    assert out == turn.replace("\\u001b[1mbold\\u001b[0m", "bold")
    compact = ('<tool_response>\n{"tool_call_id":"c1","content":"\\u001b[1mbold\\u001b[0m '
               'text"}\n</tool_response>')
    [out], _ = distill_turns([compact], "safe", count_words)
    assert out == compact.replace("\\u001b[1mbold\\u001b[0m", "bold")


def test_a_content_after_a_number_is_still_the_output():
    turn = ('<tool_response>\n{"exit": 0, "took": [1.5, {"s": 2}], "content": '
            '"\\u001b[1mbold\\u001b[0m text"}\n</tool_response>')
    [out], _ = distill_turns([turn], "safe", count_words)
    assert out == turn.replace("\\u001b[1mbold\\u001b[0m", "bold")


def test_a_tag_inside_an_output_does_not_start_another_one():
    # The body runs from an opening tag to the first closing one; an opening tag inside
    # it is text. Only the escape goes.
    for turn in ("<tool_response>\nsee <tool_response> \x1b[0mok\n</tool_response>",
                 "<tool_response>\n\x1b[0m<tool_response>\n</tool_response>"):
        [out], _ = distill_turns([turn], "safe", count_words)
        assert out == turn.replace("\x1b[0m", "")


def test_a_turn_that_counts_the_same_tokens_is_still_distilled():
    # "never makes a turn count more tokens (a turn that would is left as it was)": one
    # that counts the same is shorter in characters and is written distilled.
    turn = "\x1b[31mred\x1b[0m done"
    [out], stats = distill_turns([turn], "safe", count_words)
    assert out == "red done"
    assert (stats.turns, stats.tokens_before, stats.tokens_after) == (1, 2, 2)


def test_each_rule_starts_where_the_one_before_it_ended():
    # Two rules on one turn (control, then repeats): the turn's saving is shared between
    # them, and the second starts from the count the first ended at.
    turn = "\n".join(["\x1b[32mbuild started\x1b[0m"] + ["compiling module"] * 10 + ["done"])
    [out], stats = distill_turns([turn], "safe", count_words)
    assert out != turn
    control, repeats = stats.rules["control"], stats.rules["repeats"]
    assert control.tokens_before == stats.tokens_before
    assert repeats.tokens_before == control.tokens_after
    assert repeats.tokens_after == stats.tokens_after
    assert control.tokens_before >= control.tokens_after >= repeats.tokens_after
    # The saving (23 - 6 words: "⟪×10⟫ compiling module" is 3) shared by characters
    # removed, largest remainder first: control removed the two escapes (9 characters),
    # repeats the rest.
    assert (stats.tokens_before, stats.tokens_after) == (23, 6)
    after_control = turn.replace("\x1b[32m", "").replace("\x1b[0m", "")
    by_control, by_repeats = len(turn) - len(after_control), len(after_control) - len(out)
    assert by_control == 9
    saving = 17
    shares = [saving * by_control // (by_control + by_repeats),
              saving * by_repeats // (by_control + by_repeats)]
    if sum(shares) < saving:  # one left over: to the larger remainder
        rests = [saving * by_control % (by_control + by_repeats),
                 saving * by_repeats % (by_control + by_repeats)]
        shares[rests.index(max(rests))] += 1
    assert control.tokens_before - control.tokens_after == shares[0]
    assert repeats.tokens_before - repeats.tokens_after == shares[1]


def test_a_saving_is_shared_by_largest_remainders():
    # 7 in proportion to 2, 3, 5: 1.4, 2.1, 3.5; the floors 1, 2, 3 leave 1, which goes
    # to the largest remainder (0.5, the third). In proportion to 0 and 1: all to the 1.
    assert _shares(7, [2, 3, 5]) == [1, 2, 4]
    assert _shares(5, [0, 1]) == [0, 5]
    assert sorted(_shares(10, [1, 1, 1])) == [3, 3, 4]


def test_distill_stats_add_up():
    a = DistillStats("safe", 100, 60, 2, {"control": RuleSaving(100, 80, 2)})
    b = DistillStats("safe", 50, 45, 1, {"control": RuleSaving(50, 48, 1),
                                          "repeats": RuleSaving(48, 45, 1)})
    a.add(b)
    assert (a.tokens_before, a.tokens_after, a.turns, a.saved) == (150, 105, 3, 45)
    assert a.rules == {"control": RuleSaving(150, 128, 3), "repeats": RuleSaving(48, 45, 1)}


def test_distill_stats_read_back_only_from_an_object_with_a_level():
    stats = DistillStats("all", 10, 4, 1, {"table": RuleSaving(10, 4, 1)})
    assert DistillStats.from_dict(stats.to_dict()) == stats
    for bad in (None, [], "safe", {"tokens_before": 3}, {"level": 2}):
        assert DistillStats.from_dict(bad) is None
    assert DistillStats.from_dict({"level": "safe", "rules": None}) == DistillStats("safe")
    assert DistillStats.from_dict({"level": "safe"}) == DistillStats("safe", 0, 0, 0, {})
    assert DistillStats.from_dict({"level": "safe", "rules": {"json": {}}}) == DistillStats(
        "safe", rules={"json": RuleSaving(0, 0, 0)})
    assert DistillStats.from_dict({"level": "safe", "rules": ["x"]}) == DistillStats("safe")


# -- core/fidelity.py ----------------------------------------------------------------------

def test_a_long_text_is_normalized_whole():
    # Past 64 KiB the text goes a block at a time; the result is still every word,
    # case-folded, one space between words, none cut at a block's edge.
    words = [f"Word{i}" for i in range(20_000)]  # about 150,000 characters
    text = "  ".join(words) + "\n"
    assert len(text) > 1 << 16
    assert normalize_text(text) == " ".join(w.casefold() for w in words)


PROSE = "the cat sat on the mat and then the dog ran in the park all day long so very fast"


def test_a_string_argument_of_up_to_80_characters_is_an_item():
    # "every short string argument (<= 80 chars) of a <tool_call>" (ordinary words: no
    # item inside it).
    def items(text: str) -> tuple[str, ...]:
        call = {"name": "write_note", "arguments": {"text": text}}
        return measure_fidelity(["<tool_call>\n" + json.dumps(call) + "\n</tool_call>"],
                                [], "").missing
    assert items(PROSE[:80]) == ("write_note", PROSE[:80])
    assert items(PROSE[:81]) == ("write_note",)


def test_an_error_message_is_clipped_to_60_characters_at_a_word_boundary():
    # "the rest of the line after SomeError: ..., clipped to 60 characters at a word
    # boundary": 60 characters stay whole; of 61, the last word (cut at 60) goes.
    at60 = PROSE[:59] + "y"  # "... in the park ally"
    over = at60 + "s"
    assert (len(at60), len(over)) == (60, 61)
    assert measure_fidelity([f"ValueError: {at60}"], [], "").missing == ("ValueError", at60)
    assert measure_fidelity([f"ValueError: {over}"], [], "").missing == (
        "ValueError", over.rsplit(" ", 1)[0])


def test_json_inside_json_strings_is_read_to_json_depth():
    # JSON_DEPTH (4): how deep JSON inside a JSON string is read. An object whose text is
    # a string inside an object ... four strings deep gives its key; five deep does not.
    def nested(levels: int) -> str:
        text = json.dumps({"deep_key": 1})
        for _ in range(levels):
            text = json.dumps({"v": text})
        return text
    assert JSON_DEPTH == 4
    assert "deep_key" in list(decoded_strings(nested(4)))
    assert "deep_key" not in list(decoded_strings(nested(5)))


def test_a_token_longer_than_256_characters_is_a_blob_not_an_item():
    # A snake_case name is an item; a run of more than 256 characters without a
    # delimiter is taken for a blob (fidelity._TOKEN_CHARS) and gives none.
    name = "ab_" * 85 + "c"
    assert len(name) == 256
    assert measure_fidelity([f"see {name} here"], [], "").missing == (name,)
    assert measure_fidelity([f"see {name}d here"], [], "").missing == ()


def test_a_fidelity_record_reads_back_only_whole():
    record = Fidelity(40, 31, 9, 9, ("KeyError", "src/app.py")).to_dict()
    assert Fidelity.from_dict(record) == Fidelity(40, 31, 9, 9, ("KeyError", "src/app.py"))
    for bad in (None, [], "x", {"items": 40, "kept": 31}, {**record, "tail_kept": True},
                {**record, "items": "40"}):
        assert Fidelity.from_dict(bad) is None
    # A count of invented claims that is no count reads as none.
    for invented in (-3, "2", 1.5, None):
        assert Fidelity.from_dict({**record, "invented": invented}).invented == 0
    assert Fidelity.from_dict({**record, "invented": 2}).invented == 2


# -- app/gates.py ---------------------------------------------------------------------------

def test_a_share_of_exactly_a_tenth_of_a_percent_shows_one_decimal():
    # Shares are shown with one decimal (3.5%, 1.0%, 100.0%); two only where one would
    # read 0.0% (0.05%). 1 row of 1,000 is 0.1%, which one decimal shows exactly.
    assert GateResult(Gate("failed", 0, False), 1, 1000).line() == (
        "gate failed: failed rows 1 (0.1%) > 0")


def test_gate_lines_follow_the_command_s_output_in_one_log(tmp_path, monkeypatch):
    # `cmd > log 2>&1`: stdout and stderr are two buffered streams on one file. When
    # `finish` returns, the log holds the command's own output, then the gate line.
    log = tmp_path / "log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    out = io.TextIOWrapper(io.BufferedWriter(io.FileIO(os.dup(fd), "w"), 8192))
    err = io.TextIOWrapper(io.BufferedWriter(io.FileIO(os.dup(fd), "w"), 8192))
    os.close(fd)
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    try:
        out.write("wrote 10 rows\n")
        code = finish([GateResult(Gate("over_limit", 0, False), 1, 10)], 0)
        assert log.read_text() == (
            "wrote 10 rows\ngate failed: over-limit rows 1 (10.0%) > 0\n")
        assert code == GATE_EXIT
    finally:
        monkeypatch.undo()
        out.close()
        err.close()


def test_report_shares_are_rounded_as_the_metrics_ratios_are():
    # report --json: the share as a number of 4 decimals, the precision SPEC gives the
    # metrics' ratios (1 of 3 rows is 33.3333...%).
    result = GateResult(Gate("failed", 50, True), 1, 3)
    assert result.to_dict()["share_percent"] == 33.3333
    assert GateResult(Gate("failed", 50, True), 2, 3).to_dict()["share_percent"] == 66.6667


# -- core/errors.py, core/local_models.py, core/conversation.py ---------------------------

def test_a_row_error_reads_as_its_reason():
    error = RowError("row 3: 'conversations' is a JSON string, expected a list")
    assert isinstance(error, CompressorError)
    assert str(error) == error.reason
    assert one_line_error(error) == (
        "RowError: row 3: 'conversations' is a JSON string, expected a list")


def test_catalogue_entries_are_immutable_values():
    model = LOCAL_MODELS["smollm2-135m"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        model.module = "elsewhere"  # type: ignore[misc]
    assert {model: 1}[LocalModel(model.name, model.title, model.module,
                                 model.requirement)] == 1


def test_a_value_of_no_json_type_is_named_by_its_python_type():
    assert [json_type(v) for v in (None, True, 1, 1.5, "s", [], {})] == [
        "null", "boolean", "number", "number", "string", "array", "object"]
    assert json_type(b"\x00") == "bytes"
    assert json_type((1, 2)) == "tuple"


# -- core/metrics.py: the bucketed distribution ---------------------------------------------

def test_bucketed_ones_stay_in_the_bin_of_one():
    # Past EXACT_CAP values the distribution keeps log buckets (±1%): a value of 1 is
    # still 1 (never 0), so a histogram with edges 0, 1, 2 puts the ones in [1, 2).
    d = Distribution()
    zeros = 1000
    ones = Distribution.EXACT_CAP + 1 - zeros
    for _ in range(zeros):
        d.add(0)
    for _ in range(ones):
        d.add(1)
    assert d.histogram([0, 1, 2]) == [zeros, ones]
    assert d.quantile(0.5) == 1 and d.quantile(0.001) == 0


# -- dialects -------------------------------------------------------------------------------

def test_a_tool_turn_after_a_user_turn_answers_no_earlier_call():
    # OpenAI: a tool message answers the tool_calls of the assistant message just before
    # it. A user turn in between closes them: the late response gets an id of its own.
    call = '<tool_call>\n{"name": "search", "arguments": {"q": "x"}}\n</tool_call>'
    response = '<tool_response>\n{"name": "search", "content": "found"}\n</tool_response>'
    turns = [{"from": "human", "value": "find x"}, {"from": "gpt", "value": call},
             {"from": "human", "value": "never mind"}, {"from": "tool", "value": response}]
    messages = sharegpt_to_openai(turns)
    [call_id] = [c["id"] for c in messages[1]["tool_calls"]]
    assert messages[3]["role"] == "tool"
    assert messages[3]["tool_call_id"] != call_id


def test_a_variant_row_without_its_messages_column_holds_no_text():
    variant = ShareGPTVariant()
    assert variant.text_chars({"other": "x"}) == 0
    assert variant.text_chars({"conversations": None, "system": "s"}) == 0
    assert variant.text_chars({"conversations": [{"from": "human", "value": "abc"}],
                               "system": "s"}) == 4
