"""Fidelity of a summary (§15): the items extracted from a region, matching, the aggregate.

Expected values are worked out by hand from the rules in the module docstring.
"""

from __future__ import annotations

import json
import unicodedata

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.property_budget import examples
from trajectory_compressor.core.fidelity import (
    _CONTROL,
    Fidelity,
    aggregate_fidelity,
    extract_items,
    measure_fidelity,
    normalize,
)


@pytest.mark.parametrize(("text", "item"), [
    ("Edit /etc/nginx/nginx.conf now", "/etc/nginx/nginx.conf"),
    ("open src/app/main.py please", "src/app/main.py"),
    ("then ./run.sh again", "./run.sh"),
    ("see config.yaml.", "config.yaml"),
    ("copy ~/.bashrc", "~/.bashrc"),
    ("set it in .env", ".env"),
    ("the Dockerfile", "Dockerfile"),
    ("at src/app.py:42", "src/app.py"),
    ("docs at https://example.com/docs?page=2.", "https://example.com/docs?page=2"),
    ("calls getUserById", "getUserById"),
    ("the user_id column", "user_id"),
    ("raise MAX_RETRIES", "MAX_RETRIES"),
    ("use os.path.join here", "os.path.join"),
    ("FAILED tests/test_x.py::test_parse", "test_parse"),
    ("pass --min-fidelity", "--min-fidelity"),
    ("export $HOME", "$HOME"),
    ("commit a3f9c2e1 landed", "a3f9c2e1"),
    ("see PR-1234", "PR-1234"),
    ("request req_8f2k failed", "req_8f2k"),
    ("trace 123e4567-e89b-12d3-a456-426614174000", "123e4567-e89b-12d3-a456-426614174000"),
    ("fixes #4321", "#4321"),
    ("upgrade to 3.11.4", "3.11.4"),
    ("db at 10.0.0.12", "10.0.0.12"),
    ("on localhost:8080", "localhost:8080"),
    ("mail ops@example.com", "ops@example.com"),
    ("used 512 MB", "512 MB"),
    ("took 30s", "30s"),
    ("in 200 ms", "200 ms"),
    ("hit 99.5% CPU", "99.5%"),
    ("3 failed, 42 passed", "42 passed"),
    ("a KeyError", "KeyError"),
    ("got ConnectionRefusedError", "ConnectionRefusedError"),
    ("OSError happened", "OSError"),
    ("ValueError: invalid literal for int() with base 10",
     "invalid literal for int() with base 10"),
    ("fatal: not a git repository", "not a git repository"),
    ('set "max retries" to five', "max retries"),
    ("run `make build` first", "make build"),
])
def test_finds_each_kind(text: str, item: str) -> None:
    assert item in extract_items([text])


@pytest.mark.parametrize("text", [
    "1. First step\n2) Second step\n3 - third step\n  10. tenth",
    "the and of to in it is was for with",
    "The server restarted after the deployment finished, then Python ran again.",
    "In 2024 we shipped 12 of 15 things on 2024-01-15 at 12:30.",
    "e.g. and/or w/ TCP/IP, HTTP, JSON and URLs",
    'Is this a "fix" or a "hack"?',
    "Listening on port 8080",
    "the 1st and 2nd try",
    "well-known multi-turn long-running",
    "quoted stop-words: `the` and `with`",
    '{"id":7,"ok":true}',  # `":7,"` is the seam between two JSON strings, not a quote
    '[{"x": "ok"}, {"y": "no"}]',  # nor is `}, {` between two objects
    "score a1+b2 or c3&d4",
])
def test_finds_nothing_in_plain_prose(text: str) -> None:
    assert extract_items([text]) == []


def test_a_small_region_item_by_item() -> None:
    region = [
        "1. Read /etc/hosts and the config.yaml file.\n2) Then fix the bug.",
        '<tool_call>{"name": "read_file", "arguments": {"path": "src/app/main.py", '
        '"limit": 20}}</tool_call>',
        '<tool_response>{"error": "KeyError: \'user_id\'", "exit_code": 1}</tool_response>',
        "The request took 200 ms in 2024 and used the server.",
    ]
    assert extract_items(region) == [
        "/etc/hosts", "config.yaml", "read_file", "src/app/main.py", "KeyError", "user_id",
        "200 ms"]


def test_tool_call_name_arguments_and_command() -> None:
    text = ('<tool_call>{"name": "run_shell", "arguments": {"command": '
            '"pytest -x tests/test_api.py", "timeout": 300, "verbose": true, "retries": 2}}'
            "</tool_call>")
    # The whole short command, the path inside it, the 3-digit integer; not the bool or 2.
    assert extract_items([text]) == [
        "run_shell", "pytest -x tests/test_api.py", "tests/test_api.py", "300"]


def test_a_long_command_counts_by_its_first_word_and_its_items() -> None:
    command = ("python -m pytest tests/test_api.py --maxfail=1 --durations=10 "
               "--cov=trajectory_compressor -q")
    assert len(command) > 80
    text = f'<tool_call>{{"name": "bash", "arguments": {{"cmd": "{command}"}}}}</tool_call>'
    assert extract_items([text]) == [
        "bash", "python", "tests/test_api.py", "--maxfail", "--durations", "--cov",
        "trajectory_compressor"]


def test_openai_shaped_call_with_arguments_as_a_json_string() -> None:
    text = ('<tool_call>{"function": {"name": "web_search", "arguments": '
            '"{\\"query\\": \\"nginx 502 bad gateway\\"}"}}</tool_call>')
    assert extract_items([text]) == ["web_search", "nginx 502 bad gateway"]


def test_a_call_that_is_not_json_is_read_as_text() -> None:
    text = '<tool_call>{"name": read_file, path: /tmp/x.log}</tool_call>'
    assert extract_items([text]) == ["read_file", "/tmp/x.log"]


def test_a_json_tool_response_gives_its_values_not_its_keys() -> None:
    text = ('<tool_response>{"stdout": "wrote build/out.bin", "exit_code": 0, '
            '"elapsed_ms": 1234}</tool_response>')
    assert extract_items([text]) == ["build/out.bin"]


def _nested_response(stdout: str) -> str:
    """A Hermes tool turn whose content is itself the JSON text of an object (JSON in a
    JSON string: every line break is `\\n` in the text, and a quote `\\\"`)."""
    inner = json.dumps({"stdout": stdout, "exit_code": 1})
    return "<tool_response>\n" + json.dumps({"name": "terminal", "content": inner}) + \
        "\n</tool_response>"


def test_json_inside_a_json_string_is_read_decoded() -> None:
    text = _nested_response('ok\nTraceback (most recent call last):\n'
                            '  File "pyproject.toml", line 385, in run\nKeyError: \'model\'')
    items = extract_items([text])
    assert "pyproject.toml" in items and "KeyError" in items
    # Never an escape glued to an item: `\npyproject` read as `npyproject`, `toml\`.
    assert not [i for i in items if i.startswith("n") and i[1:] in items]
    assert not [i for i in items if "\\" in i]


def test_the_tail_is_searched_decoded_too() -> None:
    region = [_nested_response('built\nsrc/app/models/user.py changed')]
    tail = [_nested_response('again\nsrc/app/models/user.py failed')]  # `\nsrc/...` raw
    fidelity = measure_fidelity(region, tail, "It changed src/app/models/user.py.")
    assert fidelity.tail_items == 1 and fidelity.tail_kept == 1


def test_quoted_text_does_not_run_across_a_tag_or_lose_its_url() -> None:
    # Found by hypothesis: `"}}` and `{"` around blanked tags once read as one quote.
    calls = ('<tool_response><tool_call>{"name": "_", "arguments": {"path": ""}}</tool_call>'
             '<tool_call>{"name": "_"}</tool_call>')
    assert extract_items([calls]) == []
    assert extract_items(['"see https://example.com/x now"']) == [
        "see https://example.com/x now", "https://example.com/x"]


def test_the_pieces_of_a_url_are_not_items_too() -> None:
    assert extract_items(["see https://ci.example.com/run?job=a3f9c2e1"]) == [
        "https://ci.example.com/run?job=a3f9c2e1"]


def test_a_token_longer_than_256_characters_is_a_blob() -> None:
    assert extract_items(["a1" * 128]) == ["a1" * 128]
    assert extract_items(["a1" * 129]) == []


def test_decomposed_accents_are_composed_before_reading() -> None:
    region = ["use re\u0301sume\u0301_id, took 5s\u0301"]
    # `5ś` is no number with a unit; the identifier is read in its composed spelling.
    assert extract_items(region) == ["r\u00e9sum\u00e9_id"]
    assert measure_fidelity(region, [], region[0]).ratio == 1.0


def test_error_message_is_clipped_at_a_word_boundary() -> None:
    text = ("ValueError: alpha bravo charlie delta echo foxtrot golf hotel india juliet "
            "kilo lima")
    # "… india" ends at character 55; adding " juliet" would pass 60.
    assert extract_items([text]) == [
        "ValueError", "alpha bravo charlie delta echo foxtrot golf hotel india"]


def test_duplicates_keep_their_first_spelling() -> None:
    assert extract_items(["MAX_RETRIES is max_retries", "512 MB vs 512MB"]) == [
        "MAX_RETRIES", "512 MB"]


def test_item_count_is_capped_at_200() -> None:
    text = " ".join(f"var_{i}" for i in range(250))
    assert extract_items([text]) == [f"var_{i}" for i in range(200)]


def test_normalize() -> None:
    assert normalize("KeyError") == "keyerror"
    assert normalize("512 MB") == normalize("512MB") == "512mb"
    assert normalize("  Foo \n  Bar. ") == "foo bar"
    assert normalize("'user_id'") == "user_id"


@pytest.mark.parametrize(("region", "summary", "kept"), [
    ("KeyError on user_id", "a KEYERROR for User_ID", 2),
    ("KeyError: 'user_id'", 'a KeyError for "user_id"', 2),
    ("fatal: not a git repository", "FATAL:  Not a  git\nrepository", 1),
    ("512 MB and 30s", "512mb then 30 s", 2),
    # Glued to a letter or digit is another word; a bare file name is not the path.
    ("took 30s for user_id", "took 130s for user_ids", 0),
    ("edit src/app/main.py", "edited main.py", 0),
])
def test_summary_matching(region: str, summary: str, kept: int) -> None:
    assert measure_fidelity([region], [], summary).kept == kept


def test_items_the_tail_mentions_again_are_counted_and_listed_first() -> None:
    region = ["Edited src/app/main.py and config.yaml; commit a3f9c2e1 broke MAX_RETRIES."]
    tail = ["Now reopen config.yaml", "and revert A3F9C2E1"]
    summary = "Changed src/app/main.py and config.yaml."
    fidelity = measure_fidelity(region, tail, summary)
    assert fidelity == Fidelity(items=4, kept=2, tail_items=2, tail_kept=1,
                                missing=("a3f9c2e1", "MAX_RETRIES"))
    assert fidelity.to_dict() == {"items": 4, "kept": 2, "ratio": 0.5, "tail_items": 2,
                                  "tail_kept": 1, "missing": ["a3f9c2e1", "MAX_RETRIES"],
                                  # issue 23's keys: no own text apart, nothing invented
                                  "model_ratio": 0.5, "invented": 0, "invented_items": []}


def test_ratio_is_rounded_in_the_dict() -> None:
    fidelity = measure_fidelity(["a3f9c2e1 b4e8d1f2 c5d7e3a4"], [], "kept b4e8d1f2")
    assert fidelity.kept == 1
    assert fidelity.to_dict()["ratio"] == 0.3333


def test_no_items_is_full_fidelity() -> None:
    fidelity = measure_fidelity(["Then we fixed the bug."], ["ok"], "")
    assert fidelity.ratio == 1.0
    assert fidelity.to_dict() == {"items": 0, "kept": 0, "ratio": 1.0, "tail_items": 0,
                                  "tail_kept": 0, "missing": [], "model_ratio": 1.0,
                                  "invented": 0, "invented_items": []}


def test_missing_lists_tail_items_first_and_shows_20() -> None:
    region = [" ".join(f"var_{i}" for i in range(30))]
    tail = ["var_25 var_26 var_27 var_28 var_29"]  # `var_2` is not in `var_25`
    fidelity = measure_fidelity(region, tail, "")
    assert (fidelity.items, fidelity.kept, fidelity.tail_items) == (30, 0, 5)
    assert len(fidelity.missing) == 30
    assert fidelity.to_dict()["missing"] == (
        ["var_25", "var_26", "var_27", "var_28", "var_29"] + [f"var_{i}" for i in range(15)])


def test_aggregate() -> None:
    rows = [Fidelity(4, 4, 0, 0, ()), Fidelity(4, 2, 2, 1, ()), Fidelity(4, 1, 1, 1, ()),
            Fidelity(2, 0, 0, 0, ())]
    # Ratios 1, .5, .25, 0; tail ratios .5 and 1 over the two rows with tail items.
    assert aggregate_fidelity(rows) == {
        "count": 4, "mean_ratio": 0.4375, "min_ratio": 0.0, "p10_ratio": 0.0,
        "median_ratio": 0.375, "tail_rows": 2, "mean_tail_ratio": 0.75}


def test_aggregate_p10_is_nearest_rank() -> None:
    rows = [Fidelity(10, k, 0, 0, ()) for k in range(1, 11)]
    # 10 ratios .1, …, 1: rank ceil(1.0) = 1 is 0.1; the median is (.5 + .6) / 2.
    result = aggregate_fidelity(rows)
    assert (result["p10_ratio"], result["median_ratio"], result["tail_rows"]) == (0.1, 0.55, 0)
    assert result["mean_tail_ratio"] is None


def test_aggregate_of_nothing() -> None:
    assert aggregate_fidelity([]) == {
        "count": 0, "mean_ratio": None, "min_ratio": None, "p10_ratio": None,
        "median_ratio": None, "tail_rows": 0, "mean_tail_ratio": None}


def test_a_megabyte_of_adversarial_text_completes() -> None:
    pieces = ["1,111,", '"a', "KeyError: x ", "a-", "<tool_call>", "http://", "a/", "`",
              "1 ", "<tool_response>[", "aB_1.-/ ", "a:1"]
    text = "".join(piece * (100_000 // len(piece)) for piece in pieces)
    assert len(text) > 1_000_000
    items = extract_items([text])
    assert len(items) <= 200
    measure_fidelity([text], [text], text)


_FRAGMENTS = [
    " ", "\n", ". ", "1. ", "/etc/nginx/nginx.conf", "src/app/main.py", "config.yaml",
    "https://example.com/a?b=1", "KeyError: 'user_id'", "error: boom here", "512 MB", "30s",
    "a3f9c2e1", "PR-1234", '"max retries"', "`make build`", "MAX_RETRIES", "os.path.join",
    "localhost:8080", "<tool_response>", "</tool_response>", "<tool_call>", "</tool_call>",
    '<tool_response>{"stdout": "KeyError: boom in app.py"}</tool_response>',
]


def _json_safe(value: str) -> bool:
    # `json.dumps` escapes these, and the raw text would then differ from the value.
    return not any(c in unicodedata.normalize("NFKC", value) for c in '"\\')


_values = st.one_of(
    st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=30).filter(_json_safe),
    st.integers(-10**6, 10**6), st.booleans())
_calls = st.builds(
    lambda name, args: "<tool_call>" + json.dumps(
        {"name": name, "arguments": args}, ensure_ascii=False) + "</tool_call>",
    st.from_regex(r"[a-z_]{1,12}", fullmatch=True),
    st.dictionaries(st.sampled_from(["path", "command", "query", "port"]), _values,
                    max_size=3))
_texts = st.lists(st.one_of(st.text(max_size=40), st.sampled_from(_FRAGMENTS), _calls),
                  max_size=8).map("".join)


@settings(max_examples=examples(300), deadline=None)
@given(region=st.lists(_texts, max_size=4), tail=st.lists(_texts, max_size=2),
       summary=_texts)
def test_counts_are_consistent_and_the_region_itself_keeps_everything(
        region: list[str], tail: list[str], summary: str) -> None:
    fidelity = measure_fidelity(region, tail, summary)
    assert 0 <= fidelity.kept <= fidelity.items
    assert 0 <= fidelity.tail_kept <= fidelity.tail_items <= fidelity.items
    assert len(fidelity.missing) == fidelity.items - fidelity.kept
    assert 0.0 <= fidelity.ratio <= 1.0
    # Items are read from the pieces between tool tags, each as a terminal shows it;
    # matching reads the whole text so. With a control that moves the cursor (a carriage
    # return, a backspace, a CSI) the screen can run one piece over another, even over a
    # tag ('<tool_call>..</tool_call>\r<tool_call>..'), and the two readings differ: a
    # known limit, noted in issue 40's closing note. Terminal text is tested on its own
    # (tests/test_terminal_view.py, the terminal samples).
    assume(not any(_CONTROL.search(text) for text in region))
    assert measure_fidelity(region, tail, "\n".join(region)).ratio == 1.0

