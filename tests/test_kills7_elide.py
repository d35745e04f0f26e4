"""Round 7 of the mutation kills for `core.elide` (issue 26, item 5): the plain cuts'
building blocks (which lines and characters a cut keeps, what the marker counts), the
first guess of a plain cut and its corrections, the JSON stages' bookkeeping.

Counts are words (a stand-in tokenizer whose counts are worked out by eye) or, where the
test is about a count that does not add up over parts, four characters a token rounded
up. Every expected value is worked out by hand in the comments, from the docstrings.
"""

from __future__ import annotations

import json

from tests.fixtures_runs import count_words
from trajectory_compressor.core.elide import (
    _CharCut,
    _cut_items,
    _LineCut,
    marker,
    shorten,
)


def kept_by(cutter: _LineCut | _CharCut, keep: int) -> tuple[str, str]:
    """``(the text removed, the kept text around the marker "@")``."""
    removed, with_marker = cutter.make(keep)
    return removed, with_marker("@")


# -- _LineCut.make: whole lines from the start into two thirds, then from the end ----------

def _nine(tag: str) -> str:
    """A line of nine characters: ten with its line break."""
    return tag * 9


EIGHT = [_nine(c) for c in "abcdefgh"]  # eight middle lines of ten characters each


def test_a_line_cut_fills_two_thirds_from_the_start_then_the_rest_from_the_end():
    cut = _LineCut(["first", *EIGHT, "last"])
    assert cut.chars == 80
    # keep 60: two thirds is 40, exactly four lines (10 each) from the start; then lines
    # from the end while all kept stay within 60: two more (50, then exactly 60).
    removed, text = kept_by(cut, 60)
    assert removed == "\n".join(EIGHT[4:6])
    assert text == "\n".join(["first", *EIGHT[:4], "@", *EIGHT[6:], "last"])
    # keep 59: two thirds is 39, three lines from the start (a fourth would make 40);
    # from the end two more (40, 50; a third would make 60 > 59).
    removed, text = kept_by(cut, 59)
    assert text == "\n".join(["first", *EIGHT[:3], "@", *EIGHT[6:], "last"])
    assert removed == "\n".join(EIGHT[3:6])
    # keep 45: two thirds is 30, three lines; from the end one (40; a second makes 50).
    removed, text = kept_by(cut, 45)
    assert text == "\n".join(["first", *EIGHT[:3], "@", EIGHT[7], "last"])
    assert removed == "\n".join(EIGHT[3:7])


def test_a_line_cut_from_the_end_weighs_each_line_it_keeps():
    # Middle lines of 10, 10, 20, 20 and 10 characters (with their breaks). keep 45:
    # two thirds is 30: "a" and "b" (20; "c" would make 40). From the end "e" (30), then
    # "d" would make 50 > 45: it stops, and "c" and "d" go.
    mid = [_nine("a"), _nine("b"), "c" * 19, "d" * 19, _nine("e")]
    removed, text = kept_by(_LineCut(["first", *mid, "last"]), 45)
    assert removed == "\n".join(mid[2:4])
    assert text == "\n".join(["first", *mid[:2], "@", mid[4], "last"])


def test_a_line_cut_that_could_keep_every_line_still_leaves_one_out():
    # "Something must go": keep 200 holds all eight lines (80) in two thirds (133): the
    # last line taken from the start goes back.
    cut = _LineCut(["first", *EIGHT, "last"])
    removed, text = kept_by(cut, 200)
    assert removed == EIGHT[7]
    assert text == "\n".join(["first", *EIGHT[:7], "@", "last"])
    # keep 95: six lines from the start (60 <= 63), then two from the end (70, 80) and
    # nothing is left between them: the sixth line from the start goes back (it took
    # more lines than the end did).
    removed, text = kept_by(cut, 95)
    assert removed == EIGHT[5]
    assert text == "\n".join(["first", *EIGHT[:5], "@", *EIGHT[6:], "last"])
    # Two middle lines, keep 20: one from the start (10 <= 13), one from the end (20):
    # as many from each end, so the one from the end goes back.
    removed, text = kept_by(_LineCut(["first", "x" * 9, "y" * 9, "last"]), 20)
    assert removed == "y" * 9
    assert text == "\n".join(["first", "x" * 9, "@", "last"])
    # Four middle lines, keep 40: two from the start (20 <= 26), two from the end (30,
    # 40): as many from each end, so the second one from the end goes back.
    removed, text = kept_by(_LineCut(["first", *EIGHT[:4], "last"]), 40)
    assert removed == EIGHT[2]
    assert text == "\n".join(["first", *EIGHT[:2], "@", EIGHT[3], "last"])


def test_a_line_cut_counts_each_line_it_takes_from_the_end_once():
    # Middle lines of 60, 10, 10, 10 and 30 characters, keep 100: two thirds is 66, the
    # first line only (60; 70 would not fit). From the end "e" (90) and "d" (100), "c"
    # would make 110: "b" and "c" go.
    mid = ["a" * 59, _nine("b"), _nine("c"), _nine("d"), "e" * 29]
    removed, text = kept_by(_LineCut(["first", *mid, "last"]), 100)
    assert removed == "\n".join(mid[1:3])
    assert text == "\n".join(["first", mid[0], "@", *mid[3:], "last"])


# -- _CharCut.make: characters from each end, two thirds from the start, never all ----------

def test_a_character_cut_keeps_two_thirds_from_the_start_and_never_the_whole_text():
    cut = _CharCut("abcdefghij")
    # keep 6: 4 from the start, 2 from the end.
    removed, text = kept_by(cut, 6)
    assert (removed, text) == ("efgh", "abcd @ ij")
    # keep 10 or more: at most 9 of the 10 characters (one must go): 6 and 3.
    for keep in (9, 10, 11, 100):
        removed, text = kept_by(cut, keep)
        assert (removed, text) == ("g", "abcdef @ hij")


# -- _cut_items: a run from the middle, at least `chars` characters, never the ends ---------

def test_a_run_of_items_grows_from_the_middle_until_it_has_enough_characters():
    items = list(range(10, 19))  # nine items, each 4 characters as written ("10" and ", ")
    # Exactly 4 characters: the middle item alone (index 4) is enough.
    out, chars = _cut_items(items, 4, count_words, json.dumps)
    assert (out, chars) == ([10, 11, 12, 13, marker(1), 15, 16, 17, 18], 4)
    # 5 characters: one item is 4, not enough: the run grows by one, on the left (it
    # alternates sides, right first): items 3 and 4 ("[13, 14]": 2 words).
    out, chars = _cut_items(items, 5, count_words, json.dumps)
    assert (out, chars) == ([10, 11, 12, marker(2), 15, 16, 17, 18], 8)


def test_a_run_of_items_stops_short_of_the_first_and_the_last():
    # Five items: however many characters are asked for, the first and the last stay:
    # items 1 to 3 ("[11, 12, 13]": 3 words) go.
    out, chars = _cut_items([10, 11, 12, 13, 14], 1000, count_words, json.dumps)
    assert (out, chars) == ([10, marker(3), 14], 12)


def test_a_run_of_items_has_at_least_one_item():
    out, chars = _cut_items([10, 11, 12, 13, 14], 0, count_words, json.dumps)
    assert (out, chars) == ([10, 11, marker(1), 13, 14], 4)


# -- _cut through shorten: the first guess and its corrections find the most that fits -----

def _ten_word_lines(n: int) -> str:
    return "\n".join(f"line{i} " + " ".join(["w"] * 9) for i in range(n))


def test_a_plain_cut_keeps_as_many_whole_lines_as_the_budget_allows():
    # n lines of 10 words: the first and last (20 words) stay, the marker is 5 words
    # ("[... 30 tokens elided ...]"), so k kept middle lines make 25 + 10 k words: the
    # most within a budget b is k = (b - 25) // 10 (and at least one line goes).
    for lines, budget, k in ((5, 46, 2), (8, 44, 1), (11, 44, 1), (13, 36, 1), (10, 75, 5)):
        text = _ten_word_lines(lines)
        out = shorten(text, 10 * lines, budget, count_words)
        kept = out.split("\n")
        assert count_words([out])[0] == 25 + 10 * k, (lines, budget)
        assert kept[0] == text.split("\n")[0] and kept[-1] == text.split("\n")[-1]
        assert sum("tokens elided" in line for line in kept) == 1
        assert [line for line in kept if "elided" in line] == [marker(10 * (lines - 2 - k))]


def _big_line() -> str:
    """A first or last line of 240 words (479 characters: under LINE_CHARS)."""
    return " ".join(["a"] * 240)


def test_empty_middle_lines_leave_out_nothing_the_marker_says_so():
    # The middle is empty lines only: whatever the budget, the shortest the rules allow
    # is the first and last lines around the marker, and what went (empty lines) counts
    # 0 tokens. Budget 0: the first guess keeps nothing. Budget 22: the first guess keeps
    # one empty line (4 characters over 480 tokens is under the floor of 0.1 a token:
    # int(10 * 0.1) = 1 character), 485 words is over, the correction goes to nothing.
    # Budget 442: eight guesses keep an empty line or more and are all over: nothing.
    big = _big_line()
    for empties, budget in ((1, 0), (4, 22), (1, 442)):
        text = "\n".join([big, *[""] * empties, big])
        out = shorten(text, 480, budget, count_words)
        assert out == "\n".join([big, marker(0), big]), (empties, budget)


def test_a_budget_with_no_room_beside_the_marker_keeps_nothing_else():
    # One line of 20 words (a character cut): a budget of 6 leaves no room beside the
    # marker's own (about 12 tokens in the first guess): only the marker is left.
    text = " ".join(f"w{i}" for i in range(20))
    assert shorten(text, 20, 6, count_words) == marker(20)


def test_a_plain_cut_guesses_eight_times_then_keeps_nothing():
    # 200 + 200 words around eight lines "b c d e f g" (6 words, 12 characters each with
    # the break): 448 words, 96 middle characters, 0.214 a token. Budget 435: the guesses
    # keep 90, 86, 82, 80, 78, 76, 74 and 72 characters, each 7 or 6 lines (447 or 441
    # words, over); after the eighth the cut keeps nothing (405 words), having asked the
    # counter twice a guess (what went, the candidate) and once for the last marker.
    big = " ".join(["a"] * 200)
    text = "\n".join([big, *["b c d e f g"] * 8, big])
    calls = []

    def counting(texts: list[str]) -> list[int]:
        calls.append(len(texts))
        return count_words(texts)

    out = shorten(text, 448, 435, counting)
    assert out == "\n".join([big, marker(48), big])
    assert len(calls) == 8 * 2 + 1


# -- the JSON stages: at most _ROUNDS cuts each ---------------------------------------------

def _sixty_five_strings() -> list[str]:
    """65 strings of 20 words ("s7w0 s7w1 ..."): s10 to s64 are longer than s0 to s9."""
    return [" ".join(f"s{i}w{j}" for j in range(20)) for i in range(65)]


def test_strings_cut_to_exactly_the_budget_leave_the_arrays_alone():
    # 1,300 words. Each string cut to its marker (5 words) gives 15: the longest go first
    # (s10 to s64, then nine of s0 to s9), 64 cuts make 1,300 - 960 = 340: exactly the
    # budget, so no item of the array goes, and one of the short ten stays whole.
    items = _sixty_five_strings()
    out = json.loads(shorten(json.dumps(items), 1300, 340, count_words))
    assert len(out) == 65 and out[10:] == [marker(20)] * 55
    [whole] = [i for i in range(10) if out[i] == items[i]]
    assert out[:10] == [items[i] if i == whole else marker(20) for i in range(10)]


def test_no_more_than_sixty_four_strings_are_cut():
    # Budget 325 would need all 65 strings cut, but the string stage makes 64 cuts at
    # most: one string stays whole, and the array then loses items from its middle.
    items = _sixty_five_strings()
    out = json.loads(shorten(json.dumps(items), 1300, 325, count_words))
    assert sum(item in out for item in items) == 1 and len(out) < 65
    assert count_words([json.dumps(out)])[0] <= 325


# -- the string stage: a string picked again is cut from its original, with less room ------

def count_quarters(texts: list[str]) -> list[int]:
    """Four characters a token, rounded up: a count that does not add up over parts."""
    return [(len(t) + 3) // 4 for t in texts]


def test_a_string_whose_cut_leaves_the_row_over_is_cut_again_within_the_budget():
    # {"k": "line 0: \nline 1: ab\n..."}: the string's cut is measured alone, and the
    # characters around it ({"k": "" }) round up with it: the first cut can leave the row
    # a token over. The string (now under MIN_STRING_CHARS, but cut before) is picked
    # again, cut from its original with a budget one token smaller, and the row fits.
    for lines, budget in ((13, 18), (14, 19), (14, 22), (17, 17), (19, 22)):
        text = json.dumps({"k": "\n".join(f"line {i}: " + "ab" * (i % 5)
                                          for i in range(lines))})
        out = shorten(text, count_quarters([text])[0], budget, count_quarters)
        assert count_quarters([out])[0] <= budget, (lines, budget)
        first, *_, last = json.loads(out)["k"].split("\n")
        assert (first, last) == ("line 0: ", f"line {lines - 1}: " + "ab" * ((lines - 1) % 5))


def test_a_cut_string_is_measured_as_the_json_writes_it():
    # Ten lines "a w w w w w w w w z" (10 words). In the JSON the line breaks are "\n"
    # escapes, which join the last word of a line and the first of the next: the string
    # as written is 10 * 10 - 9 = 91 words, the row 92. Budget 30: the first and last
    # lines stay (here 21 words with the marker's 5 and the two words around the string)
    # and the eight lines between go: as written, 8 * 10 - 7 = 73 words.
    line = "a w w w w w w w w z"
    text = json.dumps({"k": "\n".join([line] * 10)})
    assert count_words([text])[0] == 92
    out = json.loads(shorten(text, 92, 30, count_words))
    assert out == {"k": "\n".join([line, marker(73), line])}


# -- the array stage and the whole containers -------------------------------------------------

def test_an_array_loses_just_enough_items_from_its_middle():
    # Four strings of 11 words (21 characters: under MIN_STRING_CHARS, left whole): 44
    # words, budget 33. One item for the marker (5 words) leaves 38, over; two leave
    # 11 + 5 + 11 = 27: items 1 and 2 go, the marker counting their 22 words.
    item = " ".join(["a"] * 11)
    out = json.loads(shorten(json.dumps([item] * 4), 44, 33, count_words))
    assert out == [item, marker(22), item]


def test_a_whole_object_is_counted_as_the_text_writes_it():
    # count: characters. {"a": {"b": "üü…"}, "id": 1} (30 "ü", a string too short to cut,
    # no array): 55 characters, budget 50. The inner object goes whole, and its marker
    # counts it as the text has it, "ü" as itself: {"b": "…"} is 7 + 30 + 2 = 39.
    def count_chars(texts: list[str]) -> list[int]:
        return [len(t) for t in texts]

    text = json.dumps({"a": {"b": "ü" * 30}, "id": 1}, ensure_ascii=False)
    assert len(text) == 55
    out = shorten(text, 55, 50, count_chars)
    assert json.loads(out) == {"a": marker(39), "id": 1}
    assert "ü" not in out and "\\u" not in out


def test_when_everything_is_missing_the_container_as_long_as_the_text_goes():
    # {"x":{"y":[10,...,17]}} written compactly is one word, 37 characters; a budget of 0
    # misses all 37. No array item can go (a marker is longer than what it replaces). Of
    # the inner containers, written with spaces, "x" is 39 characters (enough) and "y" 32
    # (not): "x" goes whole, its marker counting its 9 words ('{"y":' and 8 numbers).
    text = json.dumps({"x": {"y": list(range(10, 18))}}, separators=(",", ":"))
    assert (len(text), count_words([text])[0]) == (37, 1)
    out = shorten(text, 1, 0, count_words)
    assert json.loads(out) == {"x": marker(9)}


# -- what the budget counts is tokens: a cut that saves tokens is kept ------------------------

def test_a_string_cut_that_saves_tokens_but_no_characters_is_kept():
    # {"k": "a a ... a"} (50 one-letter words): 51 words. Budget 49: the string may keep
    # 48; the cut keeps 36 words around a marker of 14 ("[... 14 tokens elided ...]" is
    # as long as the 28 characters it replaces, but 5 words for 14). The row fits.
    text = json.dumps({"k": " ".join(["a"] * 50)})
    out = shorten(text, 51, 49, count_words)
    assert count_words([out])[0] <= 49
    kept = json.loads(out)["k"]
    assert kept.startswith("a a ") and kept.endswith(" a") and "tokens elided" in kept


def test_an_array_gives_one_more_item_each_time_it_is_picked_again():
    # Seven strings of 11 words (77 words). Each item in the run saves 11 words, the one
    # marker costs 5: k items leave 77 - 11 k + 5. For every budget from 27 (all five
    # middle items gone) to 76 the array gives just enough: the smallest k that fits,
    # its first and last items always kept. (The marker, 26 characters and quotes, is
    # longer than one item, 21: measured in characters the first item could not go; and
    # a run asked for a few characters more than it already had came out the same, so
    # the array stopped short.)
    item = " ".join(["a"] * 11)
    text = json.dumps([item] * 7)
    for budget in range(27, 77):
        k = max(-(-(82 - budget) // 11), 1)
        out = json.loads(shorten(text, 77, budget, count_words))
        assert count_words([json.dumps(out)])[0] == 82 - 11 * k, budget
        assert out[0] == out[-1] == item and len(out) == 7 - k + 1


def test_an_array_of_objects_loses_items_from_its_middle_before_any_object_goes_whole():
    # Four objects of 14 words (56): budget 45. One item leaves 47, two leave 33: items 1
    # and 2 go; no object is replaced whole (the first and the last stay as they were).
    items = [{"id": i, "t": " ".join(["a"] * 11)} for i in range(4)]
    out = json.loads(shorten(json.dumps(items), 56, 45, count_words))
    assert out == [items[0], marker(28), items[3]]
