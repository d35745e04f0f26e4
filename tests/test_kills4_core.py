"""The core at its documented edges, round 4 (issue 26, item 5): core/fidelity.py,
core/remedies.py and core/summary.py.

Expected values are worked out by hand from the modules' docstrings, README ("Summary
fidelity", "What would fix it") and SPEC §4/§15: fidelity items of tool calls and of JSON
read inside JSON strings (`JSON_DEPTH` levels), a fidelity record read back; the remedy
search (which family alone, which combination, its preference order, the search by halves
of a long ladder) answered by an oracle written here; the references line of a summary
within its budget. Token counts are characters or words where a count is needed, so each
limit is worked out by hand. Fast and in-process.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.fidelity import (
    _BLOCK_CHARS,
    JSON_DEPTH,
    Fidelity,
    aggregate_fidelity,
    decoded_strings,
    extract_items,
    measure_fidelity,
)
from trajectory_compressor.core.metrics import TrajectoryMetrics
from trajectory_compressor.core.remedies import Entry, Remedy, ladders, what_would_fix
from trajectory_compressor.core.summary import (
    Summary,
    SummaryFailed,
    SummaryRequest,
    SummaryUsage,
    add_references,
    bound_summary,
    render_turns,
)

PREFIX = "[CONTEXT SUMMARY]:"


def chars(text: str) -> int:
    return len(text)


# -- core/fidelity.py ---------------------------------------------------------------------

def test_a_tool_call_whose_name_is_no_string_still_gives_its_arguments():
    # The tool name is an item when it is a short string; a row's JSON is data, so a name
    # that is a number (or a list) is no item and does not stop the arguments being read.
    for name in (42, ["f"], None):
        call = json.dumps({"name": name, "arguments": {"path": "config.yaml"}})
        assert extract_items([f"<tool_call>\n{call}\n</tool_call>"]) == ["config.yaml"]


def test_a_tool_name_over_80_characters_is_no_item():
    long_name = "run_" + "x" * 77  # 81 characters
    at_limit = "run_" + "x" * 76  # 80
    for name, items in ((long_name, []), (at_limit, [at_limit])):
        call = json.dumps({"name": name, "arguments": {}})
        assert extract_items([f"<tool_call>{call}</tool_call>"]) == items


def _nested_json(levels: int, leaf: dict) -> str:
    """JSON text holding, ``levels`` strings deep, the JSON text of ``leaf``: each level
    a one-key object whose value is the next level's JSON text."""
    text = json.dumps(leaf)
    for key in reversed("abcdefgh"[:levels]):
        text = json.dumps({key: text})
    return text


def _nested(levels: int, leaf: dict) -> str:
    """A tool response of `_nested_json`."""
    return f"<tool_response>{_nested_json(levels, leaf)}</tool_response>"


def test_json_inside_json_strings_is_read_json_depth_levels_deep():
    # A JSON response contributes its values, not its keys; a string holding JSON text is
    # read as that value, JSON_DEPTH (4) levels deep. Below that the string is text, and
    # its key reads as an identifier like any other in prose.
    assert JSON_DEPTH == 4
    leaf = {"user_id": "x"}
    assert extract_items([_nested(JSON_DEPTH, leaf)]) == []
    assert extract_items([_nested(JSON_DEPTH + 1, leaf)]) == ["user_id"]


def test_string_arguments_of_a_call_are_read_as_the_object_they_hold():
    # The OpenAI shape: "arguments" is the JSON text of an object. That object is the
    # arguments, as if written inline: JSON inside its strings is read JSON_DEPTH levels
    # below it, as in a call whose arguments are an object.
    leaf = {"user_id": "x"}
    inline = json.dumps({"name": "run", "arguments": json.loads(_nested_json(JSON_DEPTH, leaf))})
    as_text = json.dumps({"function": {"name": "run",
                                       "arguments": _nested_json(JSON_DEPTH, leaf)}})
    for call in (inline, as_text):
        assert extract_items([f"<tool_call>{call}</tool_call>"]) == ["run"]


def test_arguments_that_are_no_strings_give_only_their_long_integers():
    # Integer arguments of three digits or more are items (ports, PIDs); floats, nulls
    # and booleans are not, and do not stop the other arguments being read.
    call = json.dumps({"name": "run", "arguments": {
        "ratio": 0.5, "x": None, "deep": [1.5, None, True], "path": "a.py", "port": 8080}})
    assert extract_items([f"<tool_call>{call}</tool_call>"]) == ["run", "a.py", "8080"]


def test_a_tool_response_in_plain_text_gives_its_items():
    # A response that is not JSON is prose or output: its items are those of free text.
    response = "<tool_response>\nWrote /tmp/out.csv (512 MB)\n</tool_response>"
    assert extract_items([response]) == ["/tmp/out.csv", "512 MB"]
    assert extract_items(["<tool_response>[1, 2</tool_response>"]) == []


def test_a_long_text_gives_the_items_of_every_block():
    # Free text over 64 KiB is read a block of lines at a time: the items are the same as
    # read at once, the first block's and the last one's alike.
    line = "the quick brown fox jumps over the lazy dog again\n"  # no item in it
    filler = line * (_BLOCK_CHARS // len(line) + 10)
    assert len(filler) > _BLOCK_CHARS
    text = "see config.yaml\n" + filler + "then last.py and " + "\n" + filler + "docs/"
    assert extract_items([text]) == ["config.yaml", "last.py", "docs/"]


def test_a_two_character_variable_is_an_item():
    # `$VARS` are identifiers: `$X` is one (a token of two characters may be an item).
    assert extract_items(["set $X to 3"]) == ["$X"]


def test_dates_and_doubled_slashes_are_no_paths():
    # Dates do not count (no letter); a path has no "//" (that is a URL's or a typo).
    assert extract_items(["released 12/05/2024 and 10/20/30"]) == []
    assert extract_items(["path src//main.py"]) == []


def test_a_file_name_is_made_of_path_characters_only():
    # `src/app.py:42`: the parts of a token joined by colons may be items. "file:notes.txt"
    # is no file name (a colon is no path character); its part "notes.txt" is one.
    assert extract_items(["open file:notes.txt now"]) == ["notes.txt"]


def test_a_fidelity_is_a_frozen_value():
    # A row's fidelity is a value: the compressor derives the shown one with
    # `dataclasses.replace`, never by changing it in place.
    fidelity = Fidelity(4, 2, 1, 1, ("a.py", "b.py"))
    assert hash(fidelity) == hash(Fidelity(4, 2, 1, 1, ("a.py", "b.py")))
    with pytest.raises(dataclasses.FrozenInstanceError):
        fidelity.kept = 3  # type: ignore[misc]


def test_a_short_string_argument_of_three_characters_is_an_item():
    # "every short string argument" of a call: "dev" names the environment deployed to.
    call = json.dumps({"name": "deploy", "arguments": {"env": "dev"}})
    assert extract_items([f"<tool_call>{call}</tool_call>"]) == ["deploy", "dev"]


def test_an_error_message_of_three_characters_is_an_item():
    assert extract_items(["fatal: EOF"]) == ["EOF"]


def test_an_error_message_is_clipped_to_60_characters_at_a_word_boundary():
    # The docstring: the rest of the line, clipped to 60 characters at a word boundary.
    # Here a word ends exactly at 60: the item is those 60 characters.
    first = " ".join(["abcdefghi"] * 5 + ["abcdefghij"])
    assert len(first) == 60
    assert extract_items([f"error: {first} more here"]) == [first]
    # A word ending at 61 does not fit: the clip ends at the word before (49).
    longer = " ".join(["abcdefghi"] * 5 + ["abcdefghijk"])
    assert len(longer) == 61
    assert extract_items([f"error: {longer} more here"]) == [longer[:49]]


def test_a_handle_and_a_one_letter_extension_are_no_items():
    # Neither is an identifier of the kinds listed: "@alice" is no e-mail address, and
    # a dot and one letter (".a", ".o") is too short for a dotfile (`.env`, `.gitignore`).
    assert extract_items(["ping @alice about it"]) == []
    assert extract_items(["the .a files and .o files"]) == []
    assert extract_items(["mail ops@example.com and keep .env"]) == ["ops@example.com",
                                                                     ".env"]


def test_strings_in_json_lists_are_decoded_for_matching():
    # decoded_strings: the strings (keys and values) of a call's JSON, lists' too.
    call = '<tool_call>{"name": "f", "arguments": {"files": ["x.py", "y\\nz.py"]}}</tool_call>'
    assert {"x.py", "y\nz.py", "files", "f"} <= set(decoded_strings(call))


def test_the_fidelity_section_s_ratios_have_4_decimals():
    # README: the metrics file's fidelity section gives the mean, min, p10 and median
    # ratio and the mean tail ratio, with 4 decimals. Ratios 1/3, 1/3, 2/3; tail 1/3, 2/3.
    section = aggregate_fidelity([Fidelity(3, 1, 3, 1, ()), Fidelity(3, 1, 0, 0, ()),
                                  Fidelity(3, 2, 3, 2, ())])
    assert section == {"count": 3, "mean_ratio": 0.4444, "min_ratio": 0.3333,
                       "p10_ratio": 0.3333, "median_ratio": 0.3333, "tail_rows": 2,
                       "mean_tail_ratio": 0.5}
    assert aggregate_fidelity([Fidelity(3, 2, 3, 1, ())])["mean_tail_ratio"] == 0.3333


def test_a_block_boundary_cuts_no_item():
    # The block ends at the first line break at or after 64 KiB; the next block begins
    # with the next line, whole. Here that line is the first of fifty identifiers.
    line = "the quick brown fox jumps over the lazy dog again\n"  # 50 characters
    filler = line * 1311  # 65,550: the last line break (65,549) is the first >= 65,536
    assert filler.rfind("\n", 0, len(filler) - 1) < _BLOCK_CHARS <= len(filler) - 1
    names = [f"key_name_{i}" for i in range(50)]
    assert extract_items([filler + "\n".join(names)]) == names
    # The line that ends the first block ends with an identifier: kept whole too.
    last = "and then the final line names final_key\n"  # 40 characters
    head = line * 1310 + last  # line breaks at 65,499 and 65,539
    assert head.rfind("\n", 0, len(head) - 1) < _BLOCK_CHARS <= len(head) - 1
    assert extract_items([head + "\n".join(names)]) == ["final_key", *names]


def test_the_items_of_a_huge_output_are_not_all_held_at_once():
    # _free_text_items' docstring: a caller that stops at MAX_ITEMS never holds the items
    # of a huge tool output at once; the first 200 come from the first 64 KiB block.
    import tracemalloc

    text = "".join(f"var_{i}\n" for i in range(200_000))  # 2 MB, 200,000 identifiers
    tracemalloc.start()
    try:
        items = extract_items([text])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert items == [f"var_{i}" for i in range(200)]
    assert peak < 8_000_000, peak


def test_a_long_argument_that_is_no_command_gives_no_first_word():
    # Only a command/cmd argument too long to count whole counts by its first word; a
    # long prose argument gives the items inside it, here none.
    call = json.dumps({"name": "write", "arguments": {"content": "hello " * 20}})
    assert extract_items([f"<tool_call>{call}</tool_call>"]) == ["write"]
    run = json.dumps({"name": "shell", "arguments": {"command": "pytest " + "-q " * 30}})
    assert extract_items([f"<tool_call>{run}</tool_call>"]) == ["shell", "pytest"]


def test_strings_in_json_lists_of_a_response_are_items():
    response = json.dumps({"files": ["a.py", "b.py"], "n": {"deep": ["c.py"]}})
    assert extract_items([f"<tool_response>{response}</tool_response>"]) == [
        "a.py", "b.py", "c.py"]


def test_the_parts_of_a_colon_joined_token_keep_their_places():
    # Items are ordered by where they start: the part after a colon starts there.
    assert extract_items(["see a.py xxxxxxxxxx:c.py"]) == ["a.py", "c.py"]
    # "KeyError:app.py missing": the error type, the message after the colon, then the
    # file name, which starts where the message does (a message comes first at a place).
    assert extract_items(["KeyError:app.py missing"]) == ["KeyError", "app.py missing",
                                                          "app.py"]


def test_short_ids_dotted_names_and_dotfiles_are_items():
    # IDs of letters and digits ("md5", "x86"), a dotted name whose parts are longer
    # than one letter ("np.ma", not "e.g"), a dotfile of two letters (".vs", Visual
    # Studio's folder).
    assert extract_items(["uses md5 and x86"]) == ["md5", "x86"]
    assert extract_items(["see np.ma here, e.g. there"]) == ["np.ma"]
    assert extract_items(["deleted the .vs folder"]) == [".vs"]


def test_json_numbers_and_literals_are_decoded_too():
    # decoded_strings: the keys and values of the JSON; a value that is no string reads
    # as its JSON text (1e3 as 1000.0), null as nothing.
    decoded = list(decoded_strings('{"port": 8080, "ok": true, "x": null, "r": 1e3}'))
    assert sorted(decoded) == sorted(["port", "ok", "x", "r", "8080", "true", "1000.0"])


def test_a_url_comes_before_the_message_that_starts_with_it():
    # Items are ordered by where they start; a URL and the error message that begins with
    # it start at one place, and the URL (the narrower fact) comes first.
    assert extract_items(["error: https://example.com/api is down"]) == [
        "https://example.com/api", "https://example.com/api is down"]


def test_a_path_whose_parts_are_two_letters_is_a_path():
    # "~/" and "./" paths; a part of two letters is enough ("/a" alone is not).
    assert extract_items(["cd ~/go and run"]) == ["~/go"]
    assert extract_items(["open ./db now"]) == ["./db"]


def test_a_camel_case_name_with_a_numeral_that_is_no_digit_is_an_item():
    # camelCase names are identifiers. "௰" (Tamil ten) is a word character but neither a
    # letter nor a decimal digit, and NFKC leaves it: the name is still camelCase.
    assert extract_items(["see fooBar\u0bf0 here"]) == ["fooBar\u0bf0"]


def test_an_item_after_a_colon_starts_after_it():
    # "-30s" (an ID) starts at the "-" right after the colon, the number with a unit
    # "30s" one character later: in that order.
    assert extract_items(["delta:-30s now"]) == ["-30s", "30s"]


def test_a_dot_and_a_letter_begin_a_dotfile():
    assert extract_items(["see .x-config here"]) == [".x-config"]


def test_an_item_glued_to_a_digit_on_its_left_is_not_found():
    # The module docstring's own example: "30s" is not found in "130s".
    assert measure_fidelity(["took 30s"], [], "130s").kept == 0
    assert measure_fidelity(["took 30s"], [], "x 30s").kept == 1


def test_a_message_comes_before_the_file_name_it_starts_with():
    # At one place, the message (what went wrong) comes before the token item.
    assert extract_items(["error: config.yaml missing"]) == ["config.yaml missing",
                                                            "config.yaml"]


def test_p10_is_the_nearest_rank_10th_percentile():
    # Nearest rank: the ceil(0.1 x N)-th smallest. Twenty ratios 1/20 .. 20/20: the 2nd.
    rows = [Fidelity(20, k, 0, 0, ()) for k in range(1, 21)]
    assert aggregate_fidelity(rows)["p10_ratio"] == 0.1
    assert aggregate_fidelity(rows[:10])["p10_ratio"] == 0.05  # ceil(1) = the 1st
    assert aggregate_fidelity(rows[:11])["p10_ratio"] == 0.1  # ceil(1.1) = the 2nd


def test_a_fidelity_record_lists_up_to_10_invented_items():
    # README "Invented facts": invented_items lists up to 10 (invented counts them all).
    claims = tuple(f"claim_{i}" for i in range(12))
    record = Fidelity(4, 2, 0, 0, (), claims, 12).to_dict()
    assert record["invented"] == 12
    assert record["invented_items"] == list(claims[:10])


def test_an_error_message_is_one_line_without_its_closing_punctuation():
    # The message as a reader would repeat it: spaces collapsed, the full stop dropped,
    # and a quoted name (`KeyError: 'user_id'`) unquoted.
    assert extract_items(["error: disk   full."]) == ["disk full"]
    assert extract_items(["KeyError: 'user_id'."]) == ["KeyError", "user_id"]


def test_a_run_of_underscores_is_no_identifier():
    assert extract_items(["a ___ line"]) == []


def test_a_file_name_with_a_known_extension_is_an_item():
    # "bare file names with a known extension": also with a hyphen in the name.
    assert extract_items(["open my-notes.txt"]) == ["my-notes.txt"]


def test_a_model_ratio_outside_0_to_1_reads_as_the_ratio():
    # `model_ratio` is a recall: a record whose value is no share (1.5, -0.5, true) says
    # nothing about the summarizer's own text, which then reads as `ratio` (kept / items).
    record = Fidelity(4, 2, 0, 0, ()).to_dict()
    for bad in (1.5, 2, -0.5, True, "0.25"):
        back = Fidelity.from_dict({**record, "model_ratio": bad})
        assert back is not None
        assert back.model_ratio == 0.5
    # A share is read: a quarter of 4 items is 1 kept by the model's own text.
    assert Fidelity.from_dict({**record, "model_ratio": 0.25}).model_ratio == 0.25
    assert Fidelity.from_dict({**record, "model_ratio": 1}).model_ratio == 1.0


def test_the_model_ratio_is_rounded_to_4_decimals_like_the_ratio():
    # README "Summary fidelity": ratios in the record have 4 decimals (1/3 -> 0.3333).
    fidelity = Fidelity(3, 2, 0, 0, (), model_kept=1)
    assert fidelity.to_dict()["model_ratio"] == 0.3333
    assert fidelity.to_dict()["ratio"] == 0.6667


def test_items_before_a_tool_call_in_the_same_turn_count():
    # Items are taken from the whole turn: its prose before a <tool_call> as well as the
    # call's name and arguments, in the order they appear.
    turn = ('Edit config.yaml first\n<tool_call>{"name": "run_tests", "arguments": '
            '{"path": "tests/unit/"}}</tool_call> then check ~/logs/app.log')
    assert extract_items([turn]) == ["config.yaml", "run_tests", "tests/unit/",
                                     "~/logs/app.log"]


def test_an_error_message_starting_with_a_number_is_found_as_written():
    # The message after "error:" is an item; it begins with a number but is no "number
    # with a unit", so it keeps its space and the summary that repeats it keeps it.
    region = ["error: 2 files could not be read"]
    assert extract_items(region) == ["2 files could not be read", "2 files"]
    kept = measure_fidelity(region, [], "Error: 2 files could not be read.")
    assert (kept.items, kept.kept, kept.missing) == (2, 2, ())


def test_only_a_number_with_a_unit_matches_with_a_space_inserted():
    # "A number with a unit matches with or without the space": a hash that begins with
    # a digit is no such thing; "3 a7f9c2" is not "3a7f9c2".
    region = ["pushed commit 3a7f9c2 today"]
    assert extract_items(region) == ["3a7f9c2"]
    assert measure_fidelity(region, [], "pushed 3 a7f9c2").missing == ("3a7f9c2",)
    assert measure_fidelity(["took 30s"], [], "took 30 s").kept == 1


def test_an_item_whose_edge_is_no_word_character_may_be_glued_there():
    # Not glued to a letter, digit or underscore "where its own edge is one": "#1234"
    # begins with "#", so "PR#1234" keeps it; its end is a digit, so "#12345" does not.
    region = ["see #1234 for it"]
    assert extract_items(region) == ["#1234"]
    assert measure_fidelity(region, [], "fixed in PR#1234").kept == 1
    assert measure_fidelity(region, [], "fixed in #12345").kept == 0


# -- core/summary.py ----------------------------------------------------------------------

def test_a_cut_summary_names_only_the_references_that_fit_after_the_cut():
    text = f"{PREFIX} First part. Second part is long."  # 51 characters
    long_item = "b" * 12 + ".py"  # 15 characters
    # Budget 60: the text leaves no room (51 + 17 > 60), so it is cut to leave a quarter
    # (15): "…First part." (30). Then "\nReferences: a.py" (47) fits; "; " and the long
    # item (47 + 17 = 64) do not.
    out, cut = add_references(text, ["a.py", long_item], 60, chars)
    assert (out, cut) == (f"{PREFIX} First part.\nReferences: a.py", True)
    assert len(out) <= 60


def test_a_summary_request_is_a_frozen_value():
    # A request is shared by the backend's queue, its cache key and the row's repair (a
    # new request made with `dataclasses.replace`); no one may change it in place.
    request = SummaryRequest(turns=[{"from": "gpt", "value": "x"}], first_index=3,
                             target_tokens=10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.first_index = 4  # type: ignore[misc]
    again = dataclasses.replace(request, target_tokens=20)
    assert (request.target_tokens, again.target_tokens) == (10, 20)


# -- core/remedies.py ---------------------------------------------------------------------

def _two_rows_fixed_from(threshold: int):
    """An oracle for a target ladder alone: both examined rows come under at a target of
    ``threshold`` or more, none below."""

    def fits(question: tuple[Remedy, ...]) -> frozenset[int]:
        target = dict(with_remedies_changes(question)).get("target_max_tokens", 1000)
        return frozenset({0, 1}) if target >= threshold else frozenset()

    return fits


def with_remedies_changes(question: tuple[Remedy, ...]) -> list[tuple[str, object]]:
    return [change for remedy in question for change in remedy.changes]


ONLY_TARGET = CompressionConfig(target_max_tokens=1000, summary_target_tokens=1,
                                protect_last_n_turns=0, protect_first_system=False,
                                protect_first_human=False, protect_first_gpt=False,
                                protect_first_tool=False,
                                over_limit_strategy="elide_tool_outputs")


def test_a_long_target_ladder_finds_its_mildest_rung_wherever_it_is():
    # Nine rungs (more than `_LINEAR`, 8: searched by halves). Wherever the rows start to
    # come under, the entry is that rung: the mildest that brings as many under as the
    # strongest does.
    counts = [1010 + 10 * k for k in range(9)]
    rungs = ladders(ONLY_TARGET, rows_after=counts)
    assert set(rungs) == {"target"} and len(rungs["target"]) == 9
    for k, threshold in enumerate(counts):
        asked: list[frozenset[Remedy]] = []
        oracle = _two_rows_fixed_from(threshold)

        def fits(question, oracle=oracle, asked=asked):
            asked.append(frozenset(question))
            return oracle(question)

        fixes = what_would_fix(2, rungs, fits)
        [entry] = fixes.alone
        assert (entry.command, entry.count) == (f"--target-max-tokens {threshold}", 2), k
        assert len(asked) == len(set(asked)) < 9  # by halves, each question once


def _by_family(fixed: dict[str, frozenset[int]]):
    """An oracle: each remedy brings under the rows given for its family, whatever its
    rung; remedies together bring under the union of theirs."""

    def fits(question: tuple[Remedy, ...]) -> frozenset[int]:
        return frozenset().union(*(fixed.get(r.family, frozenset()) for r in question))

    return fits


def test_two_families_are_also_tried_together():
    # `Fixes.together`: every family at its strongest, None only with fewer than two.
    config = ONLY_TARGET.replace(protect_last_n_turns=1, summary_target_tokens=200)
    rungs = ladders(config)
    assert set(rungs) == {"protect_last", "summary"}
    fixes = what_would_fix(3, rungs, _by_family({"protect_last": frozenset({0}),
                                                 "summary": frozenset({1})}))
    assert fixes.together is not None
    assert fixes.together.command == ("--summary-target-tokens 25 "
                                      "--protect-last-n-turns 0")
    assert fixes.together.fixed == frozenset({0, 1})
    one = what_would_fix(3, ladders(ONLY_TARGET.replace(summary_target_tokens=200)),
                         _by_family({"summary": frozenset({1})}))
    assert one.together is None


def test_of_two_families_that_bring_as_many_under_the_preferred_one_is_best():
    # PREFERENCE: of combinations of one size that bring as many rows under, the one
    # that loses the least is kept: the second pass before a smaller summary, and one
    # family is fewer than two that bring no more.
    config = ONLY_TARGET.replace(over_limit_strategy="keep", summary_target_tokens=200)
    rungs = ladders(config)
    assert set(rungs) == {"elide", "summary"}
    same = frozenset({0})
    fixes = what_would_fix(2, rungs, _by_family({"elide": same, "summary": same}))
    assert fixes.best is not None
    assert fixes.best.command == "--over-limit-strategy elide_tool_outputs"
    assert fixes.best.fixed == same


def test_a_table_no_search_filled_allowed_no_combination(tmp_path):
    # `report` on a run whose tokenizer is gone examines no row: its table says so, and
    # that no combination of remedies was searched (max_combination 0), none found.
    from trajectory_compressor.inspect.run_fixes import run_fixes

    config = CompressionConfig(tokenizer_name=str(tmp_path / "gone"))
    table = run_fixes(tmp_path / "out.jsonl", [], config, []).to_dict()
    assert table["max_combination"] == 0
    assert (table["best"], table["together"], table["alone"]) == (None, None, [])


def test_a_combination_holds_at_most_three_remedies():
    # README "What would fix it": "together" is the fewest remedies (at most 3). Four
    # families each bring one row of four under: three together bring three, and all four
    # (the "together" line) bring more, which the table says.
    config = ONLY_TARGET.replace(protect_last_n_turns=1, summary_target_tokens=200,
                                 over_limit_strategy="keep", protect_first_tool=True)
    rungs = ladders(config)
    assert set(rungs) == {"protect_last", "first_tool", "elide", "summary"}
    fixes = what_would_fix(4, rungs, _by_family({
        "protect_last": frozenset({0}), "first_tool": frozenset({1}),
        "elide": frozenset({2}), "summary": frozenset({3})}))
    assert fixes.searched == 3
    assert fixes.best is not None and len(fixes.best.remedies) == 3
    assert fixes.best.count == 3
    assert fixes.together is not None and fixes.together.count == 4 and fixes.capped


def _recording(oracle):
    asked: list[tuple[Remedy, ...]] = []

    def fits(question: tuple[Remedy, ...]) -> frozenset[int]:
        asked.append(question)
        return oracle(question)

    return fits, asked


THREE_FAMILIES = ONLY_TARGET.replace(protect_last_n_turns=1, summary_target_tokens=200,
                                     over_limit_strategy="keep")


def test_once_one_remedy_brings_every_row_under_no_pair_is_asked():
    # README: the work is bounded. Each question re-plans every examined row (with an
    # LLM, awaiting summaries), so once a combination brings all rows under, no larger one
    # is tried: the best is that one remedy.
    rungs = ladders(THREE_FAMILIES)
    assert set(rungs) == {"protect_last", "elide", "summary"}
    fits, asked = _recording(_by_family({"elide": frozenset({0, 1})}))
    fixes = what_would_fix(2, rungs, fits)
    assert fixes.best is not None
    assert fixes.best.command == "--over-limit-strategy elide_tool_outputs"
    assert [q for q in asked if len(q) == 2] == []
    assert len(asked) == len({frozenset(q) for q in asked})


def test_once_a_pair_brings_every_row_under_no_other_pair_is_asked():
    # Pairs are tried in PREFERENCE order (second pass, summary, last turns): the first,
    # the second pass with a smaller summary, brings both rows under, so no pair with
    # fewer protected last turns is asked (only the mildest summary that keeps both).
    rungs = ladders(THREE_FAMILIES)
    fits, asked = _recording(_by_family({"elide": frozenset({0}),
                                         "summary": frozenset({1})}))
    fixes = what_would_fix(2, rungs, fits)
    assert fixes.best is not None
    assert fixes.best.command == ("--over-limit-strategy elide_tool_outputs "
                                  "--summary-target-tokens 100")
    pairs = [{r.family for r in q} for q in asked if len(q) == 2]
    assert pairs and all(p == {"elide", "summary"} for p in pairs)


def test_a_ladder_of_eight_rungs_is_searched_whole():
    # Module docstring: alone, each family's mildest rung that brings as many rows under
    # as ANY rung of it does; ladders longer than eight are searched by halves, eight are
    # asked rung by rung. Here the third rung brings two rows under, every other one.
    counts = [1010 + 10 * k for k in range(8)]
    rungs = ladders(ONLY_TARGET, rows_after=counts)
    assert len(rungs["target"]) == 8

    def fits(question: tuple[Remedy, ...]) -> frozenset[int]:
        target = dict(with_remedies_changes(question))["target_max_tokens"]
        return frozenset({0, 1}) if target == 1030 else frozenset({0})

    [entry] = what_would_fix(2, rungs, fits).alone
    assert (entry.command, entry.count) == ("--target-max-tokens 1030", 2)


def test_an_entry_is_a_frozen_value():
    # Entries are the search's answers, shared by the table's lines and the rows' fixed_by:
    # values, usable in sets, never changed in place.
    remedy = ladders(THREE_FAMILIES)["elide"][0]
    entry = Entry((remedy,), frozenset({0}))
    assert len({entry, Entry((remedy,), frozenset({0}))}) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.fixed = frozenset()  # type: ignore[misc]


def _commands(rungs: list[Remedy]) -> list[str]:
    return [r.command for r in rungs]


def test_every_rung_changes_the_config():
    # `ladders`: each family's rungs that change the config. One protected last turn:
    # only 0 is fewer. A summary of 8: a half, a quarter and an eighth (1) are all
    # smaller and positive. The target's rungs: the rows' counts ABOVE the target; a row
    # counted at the target exactly gives none (it would change nothing).
    rungs = ladders(ONLY_TARGET.replace(protect_last_n_turns=1, summary_target_tokens=8),
                    rows_after=[1000, 1200], rows_before=[1000, 1300])
    assert _commands(rungs["protect_last"]) == ["--protect-last-n-turns 0"]
    assert _commands(rungs["summary"]) == [f"--summary-target-tokens {s}" for s in (4, 2, 1)]
    assert _commands(rungs["target"]) == ["--target-max-tokens 1200",
                                          "--target-max-tokens 1300"]
    for family, ladder in rungs.items():
        for rung in ladder:
            assert rung.apply(ONLY_TARGET.replace(protect_last_n_turns=1,
                                                  summary_target_tokens=8)) != \
                ONLY_TARGET.replace(protect_last_n_turns=1, summary_target_tokens=8), family


def test_a_short_ladder_finds_its_mildest_rung_wherever_it_is():
    # The summary's three rungs (100, 50, 25), asked one by one: wherever the rows start
    # to come under, the entry is the mildest rung that brings them.
    config = ONLY_TARGET.replace(summary_target_tokens=200)
    rungs = ladders(config)
    assert _commands(rungs["summary"]) == [f"--summary-target-tokens {s}" for s in
                                           (100, 50, 25)]
    for size in (100, 50, 25):
        def fits(question: tuple[Remedy, ...], size=size) -> frozenset[int]:
            summary = dict(with_remedies_changes(question))["summary_target_tokens"]
            return frozenset({0}) if summary <= size else frozenset()

        [entry] = what_would_fix(1, rungs, fits).alone
        assert (entry.command, entry.count) == (f"--summary-target-tokens {size}", 1)


# -- core/summary.py: the interface ---------------------------------------------------------

def test_an_extractive_summary_within_its_budget_is_not_marked_cut():
    # `Summary.truncated`: the summary was cut at a sentence boundary to fit its budget.
    # The extractive summarizer builds its text within the budget: nothing was cut.
    import asyncio

    from trajectory_compressor.core.extractive import ExtractiveSummarizer

    request = SummaryRequest(turns=[{"from": "gpt", "value": "Edited config.yaml."},
                                    {"from": "tool", "value": "ok"}],
                             first_index=2, target_tokens=50)
    summary = asyncio.run(ExtractiveSummarizer(lambda t: len(t.split())).summarize(request))
    assert summary.text.startswith(PREFIX) and summary.source == "extractive"
    assert summary.truncated is False
    assert Summary("x", "llm").truncated is False


def test_a_failed_summary_says_why_and_what_it_cost():
    usage = SummaryUsage(api_calls=3, errors=3)
    failed = SummaryFailed("3 attempts timed out", usage)
    assert str(failed) == "3 attempts timed out"
    assert failed.reason == "3 attempts timed out"
    assert failed.usage is usage


def test_the_base_summarizer_has_no_summary_and_no_counters():
    import asyncio

    from trajectory_compressor.core.summary import Summarizer

    base = Summarizer()
    assert base.live_counters() == {}
    request = SummaryRequest(turns=[], first_index=0, target_tokens=10)
    with pytest.raises(NotImplementedError):
        asyncio.run(base.summarize(request))


def test_a_rendered_region_at_its_bound_is_whole():
    # `render_turns`: the whole is bounded by ``max_chars``; a region of exactly that many
    # characters is within it and keeps every character (no omission marker).
    request = SummaryRequest(turns=[{"from": "gpt", "value": "x" * 20}], first_index=4,
                             target_tokens=10)
    whole = "[Turn 4 - GPT]:\n" + "x" * 20  # 36 characters; 36 * 3 // 4 + 36 // 4 = 36
    assert render_turns(request, 36) == whole
    request = SummaryRequest(turns=[{"from": "gpt", "value": "x" * 21}], first_index=4,
                             target_tokens=10)  # 37: 27 + 9 = 36 would drop one
    assert render_turns(request, 37) == whole + "x"
    assert "omitted" in render_turns(request, 36)


def test_references_never_cut_a_summary_that_has_no_sentence_end_to_cut_at():
    # The summary leaves no room for its references (49 + 17 > 60) and could be cut to a
    # quarter of the budget (45), but it has no sentence end: it is left whole, without
    # references (bound_summary finds no cut).
    text = f"{PREFIX} " + "x" * 30  # 49 characters
    assert add_references(text, ["a.py"], 60, chars) == (text, False)


def test_references_never_cut_a_summary_down_to_its_bare_prefix():
    # The only place to cut is the line break right after the prefix: a summary of nothing
    # but "[CONTEXT SUMMARY]:" is no summary, so it stays whole (39 + 17 > 40: no room).
    text = f"{PREFIX}\n" + "y" * 20  # 39 characters
    assert add_references(text, ["a.py"], 40, chars) == (text, False)


def test_a_summary_s_commit_hook_is_not_part_of_its_value():
    # `Summary.commit` is a backend's hook that stores the summary in its cache: two
    # summaries with the same text, source and cost are the same summary whichever
    # backend (if any) would store them, and a summary's repr shows its content only.
    stored: list[Summary] = []
    hooked = Summary("[CONTEXT SUMMARY]: done", "llm", commit=stored.append)
    assert hooked == Summary("[CONTEXT SUMMARY]: done", "llm")
    assert "commit" not in repr(hooked) and "append" not in repr(hooked)
    assert hooked.commit is not None
    hooked.commit(hooked)
    assert stored == [hooked]


def words(text: str) -> int:
    return len(text.split())


def test_a_small_budget_leaves_a_quarter_rounded_down_for_references():
    # Counted in words: the references line "References: a.py" is two. Budget 7: a
    # quarter is 1 (7 // 4, at least 1), so the summary may be cut to 6 words; its last
    # sentence end within 6 is after "d." (6 words), and 6 + 2 > 7: no item would fit
    # after the cut either, so the summary stays whole and names none.
    text = f"{PREFIX} A b. C d. E."  # 7 words
    assert words(text) == 7
    assert add_references(text, ["a.py"], 7, words) == (text, False)
    # Budget 8: a quarter is 2, the cut to 6 words ("…C d.") leaves room for the line.
    assert add_references(f"{PREFIX} A b. C d. E. F.", ["a.py"], 8, words) == (
        f"{PREFIX} A b. C d.\nReferences: a.py", True)


def test_a_long_text_whose_count_is_exactly_the_limit_is_kept():
    # bound_summary: (text, False) when the text is within target x tolerance. A text
    # longer than the window looked at first (20 x 16 = 320 characters) whose count is
    # exactly the limit (20 words: the window holds all 20, the last one cut) is kept.
    text = "Aa " * 19 + "b" * 300  # 357 characters, 20 words
    assert (len(text), words(text), words(text[:320])) == (357, 20, 20)
    assert bound_summary(text, 20, 1.0, words) == (text, False)


def test_references_name_the_one_item_of_three_that_fits():
    text = f"{PREFIX} Done."  # 24 characters
    # "\nReferences: a.py" makes 41, "; b.py" 47, "; c.py" 53: at 46 only a.py fits.
    assert add_references(text, ["a.py", "b.py", "c.py"], 46, chars) == (
        f"{text}\nReferences: a.py", False)
    assert add_references(text, ["a.py", "b.py", "c.py"], 52, chars) == (
        f"{text}\nReferences: a.py; b.py", False)


@pytest.mark.parametrize("flag", [True, False])
def test_a_boolean_invented_count_reads_back_as_none_invented(flag):
    """As the other counts of the record, ``invented`` is a whole number: a JSON ``true``
    or ``false`` (a hand-edited or foreign record) is not one, and reads as 0."""
    from trajectory_compressor.core.fidelity import Fidelity

    record = {"items": 4, "kept": 2, "tail_items": 0, "tail_kept": 0, "invented": flag}
    read = Fidelity.from_dict(record)
    assert read is not None
    assert read.invented == 0 and type(read.invented) is int
    assert read.to_dict()["invented"] == 0


def _distilled(before: int, after: int, rules: dict[str, tuple[int, int]]) -> TrajectoryMetrics:
    from trajectory_compressor.core.distill_row import DistillStats, RuleSaving

    stats = DistillStats("safe", tokens_before=before, tokens_after=after, turns=1,
                         rules={name: RuleSaving(b, a, 1) for name, (b, a) in rules.items()})
    return TrajectoryMetrics(original_tokens=before, compressed_tokens=after, distill=stats)


def test_the_metrics_files_distill_section_by_hand():
    """SPEC §18: the tool turns distilling changed, their tokens before and after, what
    it saved (before - after) and what each rule saved, over the rows."""
    from trajectory_compressor.core.metrics import AggregateMetrics

    total = AggregateMetrics()
    total.add(_distilled(1000, 400, {"json_compact": (1000, 700), "ansi": (700, 400)}))
    total.add(_distilled(300, 250, {"json_compact": (300, 250)}))
    assert total.to_dict()["distill"] == {
        "rows": 2, "turns": 2, "tokens_before": 1300, "tokens_after": 650,
        "tokens_saved": 650, "saved_by_rule": {"ansi": 300, "json_compact": 350}}


def test_a_checkpoint_snapshot_is_not_changed_by_later_rows():
    import json

    from trajectory_compressor.core.metrics import AggregateMetrics, aggregate_state

    total = AggregateMetrics()
    total.add(_distilled(1000, 400, {"json_compact": (1000, 400)}))
    state = aggregate_state(total)
    frozen = json.dumps(state, sort_keys=True)
    total.add(_distilled(500, 100, {"json_compact": (500, 100)}))
    assert json.dumps(state, sort_keys=True) == frozen


def test_times_are_compared_in_seconds_exactly():
    """README: a quantity is stated when the row gives the same one in any unit of its
    kind, to the precision written: 90 minutes are 5,400 s, 2.0000 hours 7,200 s,
    3.00000 days 259,200 s and 2.000000 weeks 1,209,600 s, each to the second."""
    from trajectory_compressor.core.invented import InventedCheck

    check = InventedCheck(["The job ran 90 minutes, then slept 2.0000 hours; it retried for "
                           "3.00000 days and the lease lasts 2.000000 weeks."])
    for said in ("5400s", "7200s", "259200s", "1209600s"):
        assert check.invented(f"it took {said} in all") == [], said
    for said in ("5401s", "7201s", "259201s", "1209601s"):  # a second off: not stated
        assert check.invented(f"it took {said} in all") == [said], said
