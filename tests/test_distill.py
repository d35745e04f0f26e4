"""Distill rules (§18, `core.distill`, `core.distill_row`, `core.distill_notation`): each
rule on hand-written outputs with the distilled text worked out by hand, the hostile
cases of issue 38 as regressions, and the property that makes `safe` lossless:
``expand(distill(x)) == terminal_view(x)``, for single outputs and for whole rows."""

from __future__ import annotations

import json
import re

import pytest
from conftest import SAMPLES
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.distill import (
    RowMemory,
    blobs,
    distill,
    distill_output,
    distill_text,
    long_lines,
    table,
)
from trajectory_compressor.core.distill_notation import (
    NotationError,
    expand,
    expand_outputs,
    layout_json,
)
from trajectory_compressor.core.distill_row import (
    DistillStats,
    _reads_as_itself,
    distill_turns,
    tool_outputs,
    verify_turns,
)
from trajectory_compressor.core.errors import ConfigError
from trajectory_compressor.core.terminal_view import terminal_view


def row_distilled(outputs: list[str], level: str = "safe") -> list[str]:
    memory = RowMemory()
    out = []
    for text in outputs:
        stages = distill_output(text, level, memory)
        out.append(stages[-1][1] if stages else text)
    return out


# rules, by hand


def test_control_and_redraws_leave_what_the_terminal_shows():
    text = "\x1b[1m\x1b[31mFAILED\x1b[0m tests/test_api.py::test_get\x1b[K\n\x1b]0;t\x07ok\x00"
    assert distill(text) == "FAILED tests/test_api.py::test_get\nok"
    assert distill("10%\r50%\r100%\nnext") == "100%\nnext"
    assert distill("one\r\ntwo\r\n") == "one\ntwo\n"
    stages = distill_text("\x1b[32m10%\x1b[0m\r100%", "safe")
    assert [rule for rule, _ in stages] == ["control", "redraws"]


def test_identical_runs_are_one_line_with_a_count():
    line = 'Waiting for deployment "api" rollout to finish: 1 of 3 updated replicas...'
    assert distill("start\n" + "\n".join([line] * 6) + "\ndone") == \
        f"start\n⟪×6⟫ {line}\ndone"


def test_lines_differing_in_numbers_list_every_number():
    text = "\n".join(f"attempt {k}/60: Connection refused on localhost" for k in range(1, 9))
    assert distill(text) == \
        "⟪×8⟫ attempt {1,2,3,4,5,6,7,8}/60: Connection refused on localhost"
    # a version and a clock are one number each
    text = "\n".join(f"pkg v1.2.{k} eta 0:00:0{k} ready" for k in (3, 4, 5))
    assert distill(text) == "⟪×3⟫ pkg v{1.2.3,1.2.4,1.2.5} eta {0:00:03,0:00:04,0:00:05} ready"


def test_braces_and_backslashes_in_a_folded_line_are_escaped():
    text = "\n".join([r"   Compiling foo {x} C:\build"] * 4)
    out = distill(text)
    assert out == r"⟪×4⟫    Compiling foo \{x\} C:\\build"
    assert expand(out) == text


def test_a_text_line_that_looks_like_notation_is_escaped():
    text = "⟪×3⟫ hi\n\\⟪x⟫\n" + "\n".join(["repeated line of text here"] * 3)
    out = distill(text)
    assert out == "\\⟪×3⟫ hi\n\\\\⟪x⟫\n⟪×3⟫ repeated line of text here"
    assert expand(out) == text


def test_standard_json_layout_is_compacted_under_a_header_and_laid_out_again():
    doc = {"b": 1.5, "a": [1, {}, [], "x, y: z"], "s": 'caf\u00e9 "q"', "n": None}
    for indent in (2, 4):
        text = json.dumps(doc, indent=indent) + "\n"
        out = distill(text)
        assert out == f"⟪json indent {indent}⟫\n" + json.dumps(doc, separators=(",", ":")) + "\n"
        assert expand(out) == text
    # numbers as written, which a parse and dump would change
    text = '{\n  "version": 1.50,\n  "weight": 1e3,\n  "when": [\n    "now"\n  ]\n}'
    assert distill(text) == '⟪json indent 2⟫\n{"version":1.50,"weight":1e3,"when":["now"]}'
    # any other layout is not reconstructible from the compact form: left as it is
    assert distill('{"a": 1,\n "b": 2}') == '{"a": 1,\n "b": 2}'
    assert distill('{"a": 1, "b": [1, 2]}') == '{"a": 1, "b": [1, 2]}'
    assert layout_json('{"a":[]}', 2) == '{\n  "a": []\n}'


def test_file_views_already_shown_become_line_ranges():
    words = ["alpha", "beta", "gamma", "delta", "epsilon"]
    view = "\n".join(f"{n}:    {words[n % 5]}_{n} = compute({n}, {words[n % 3]!r})"
                     for n in range(1, 41))
    first = "[File: /repo/app.py (40 lines total)]\n" + view
    again = "[File: /repo/app.py (40 lines total)]\n" + "\n".join(view.split("\n")[9:30])
    out = row_distilled([first, again])
    assert out[0] == first
    assert out[1] == "[File: /repo/app.py (40 lines total)]\n" \
        "⟪file lines 10-30 as in tool output #1⟫"
    assert expand_outputs(out) == [first, again]


def test_cat_n_views_and_other_blocks_are_referenced():
    cat = "\n".join(f"{n:6d}\tline {n} of the module text" for n in range(1, 21))
    listing = "\n".join(f"-rw-r--r-- 1 root root {n * 100} Nov 28 file_{n}.py" for n in range(8))
    outs = [cat, listing, "$ cat -n a.py\n" + "\n".join(cat.split("\n")[4:12]),
            "$ ls -l\n" + listing + "\ntotal 8"]
    out = row_distilled(outs)
    assert out[2] == "$ cat -n a.py\n⟪file lines 5-12 as in tool output #1⟫"
    assert out[3] == "$ ls -l\n⟪lines 1-8 of tool output #2⟫\ntotal 8"
    assert expand_outputs(out) == outs


def test_a_constant_column_of_a_table_is_a_note():
    names = ["app.py", "models", "README.md", "setup.cfg", "tests", "utils.py"]
    perms = ["-rw-r--r--", "drwxr-xr-x", "-rw-r--r--", "-rw-r--r--", "drwxr-xr-x", "-rwx------"]
    text = "total 48\n" + "\n".join(f"{p}  1 agent staff {n * 113:6d} Nov 2 {x}"
                                     for n, (p, x) in enumerate(zip(perms, names, strict=True)))
    assert distill(text) == (
        'total 48\n⟪next 6 lines have " 1 agent staff" at column 11⟫\n'
        "-rw-r--r--       0 Nov 2 app.py\ndrwxr-xr-x     113 Nov 2 models\n"
        "-rw-r--r--     226 Nov 2 README.md\n-rw-r--r--     339 Nov 2 setup.cfg\n"
        "drwxr-xr-x     452 Nov 2 tests\n-rwx------     565 Nov 2 utils.py")
    assert expand(distill(text)) == text
    with pytest.raises(NotationError):
        expand('⟪next 3 lines have " x" at column 1⟫\na\nb')


def test_an_output_seen_before_is_a_reference():
    body = "def handle(request):\n    return request.app.state.pool.fetch(key)\n" * 3
    assert row_distilled([body, "x", body])[2] == "⟪same as tool output #1 above⟫"
    short = "x" * 63
    assert row_distilled([short, short]) == [short, short]


def test_references_that_name_nothing_do_not_read_back():
    with pytest.raises(NotationError):
        expand("⟪same as tool output #2 above⟫", ["one"])
    with pytest.raises(NotationError):
        expand("⟪lines 3-9 of tool output #1⟫", ["a\nb\nc"])
    with pytest.raises(NotationError):
        expand("⟪×3⟫ n {1,2}")
    with pytest.raises(NotationError):
        expand("⟪something else⟫")


# the hostile cases of issue 38


@pytest.mark.parametrize(("text", "distilled"), [
    ("Exit status 0\nExit status 0\nExit status 1\nExit status 0\nExit status 0",
     "⟪×5⟫ Exit status {0,0,1,0,0}"),
    ("\n".join(f"GET /api/v1/items/{k} {500 if k == 4 else 200} 12ms" for k in range(7)),
     "⟪×7⟫ GET /api/v1/items/{0,1,2,3,4,5,6} {200,200,200,200,500,200,200} 12ms"),
    ("Waiting: 1 of 3 updated replicas are available...\n" * 3
     + "Waiting: 2 of 3 updated replicas are available...\n" * 3,
     "⟪×3⟫ Waiting: 1 of 3 updated replicas are available...\n"
     "⟪×3⟫ Waiting: 2 of 3 updated replicas are available...\n"),
    ("100%|██████████| 3/3 [00:01<00:00, 2.1it/s] eta 0:00:07\r\x1b[Keta 0:00:00\n",
     "eta 0:00:00\n"),
    ("   Building [=====>    ] 3/19: rand, chrono\r\x1b[K   Compiling rand v0.8.5\n"
     "   Building [======>   ] 4/19: chrono\r\x1b[K   Compiling chrono v0.4.31\n",
     "   Compiling rand v0.8.5\n   Compiling chrono v0.4.31\n"),
])
def test_hostile_cases_keep_every_number(text, distilled):
    assert distill(text) == distilled
    assert expand(distilled) == terminal_view(text)


def test_psql_tables_and_diffs_keep_every_row():
    psql = (" id |  name  | created    \n----+--------+------------\n"
            + "\n".join(f"  {k} | user_{k} | 2024-01-{k:02d}" for k in range(1, 8))
            + "\n(7 rows)")
    out = distill(psql)
    assert expand(out) == psql
    for k in range(1, 8):
        assert f"2024-01-{k:02d}" in out or f"{k:02d}" in out
    diff = "@@ -1,4 +1,4 @@\n-    retries = 3\n+    retries = 5\n     timeout = 30\n-x = 1\n+x = 2"
    assert distill(diff) == diff


def test_a_bare_cr_file_keeps_every_record():
    text = "name,size\rone,1\rtwo,22\rthree,333\r"
    assert distill(text) == "name,size\none,1\ntwo,22\nthree,333\n"


def test_all_keeps_digests_that_name_things_and_the_punctuation_around_a_blob():
    digest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    for text in (f"image sha256:{digest} pulled", f"alpine@sha256:{digest}",
                 f"containerd://{digest}", f'{{"checksum": "{digest}"}}',
                 f"digest: {digest}", f'"id":"{digest}"', f"layer_id={digest}",
                 f"md5:{digest[:32]} ok", f"commit@{digest[:40]}"):
        assert blobs(text) == text
    blob = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA" * 2
    out = blobs(f"data=//{blob}// end")
    assert re.fullmatch(r"data=//\[blob 144 chars sha256:[0-9a-f]{8}\]// end", out)
    assert blobs("-" * 100) == "-" * 100
    # a hex run of a hash length with nothing naming it is still a blob
    assert blobs(f"dump {digest} end").startswith("dump [blob 64 chars")


def test_all_keeps_its_lossy_rules():
    text = json.dumps({"items": [{"name": "web-1", "cpu": 0.50}, {"name": "web-2", "cpu": 2}]})
    assert table(text) == '{"items":{"columns":["name","cpu"],"rows":[["web-1",0.5],["web-2",2]]}}'
    line = "a" * 500 + "b" * 600 + "c" * 500
    assert long_lines(line) == "a" * 400 + "[… 800 chars cut …]" + "c" * 400
    assert distill("x" * 2000, "safe") == "x" * 2000
    assert distill("x" * 2000, "all") != "x" * 2000


# the row stage


def counts(texts: list[str]) -> list[int]:
    return [len(t) // 4 + 1 for t in texts]


def hermes(content: str, call_id: str = "call_1") -> str:
    return ("<tool_response>\n" + json.dumps({"tool_call_id": call_id, "name": "terminal",
                                              "content": content}) + "\n</tool_response>")


def test_hermes_wrapper_is_kept_and_only_the_content_rewritten():
    text = hermes("\x1b[32mPASSED\x1b[0m tests/test_a.py\n" + "step 1\r" * 3 + "done")
    out, stats = distill_turns([text], "safe", counts)
    assert out[0] == ('<tool_response>\n{"tool_call_id": "call_1", "name": "terminal", '
                      '"content": "PASSED tests/test_a.py\\ndone 1"}\n</tool_response>')
    assert stats.turns == 1 and set(stats.rules) == {"control", "redraws"}
    assert verify_turns([text], out) is None


def test_a_row_reads_back_and_a_tampered_one_does_not():
    body = "def handle(request):\n    return request.app.state.pool.fetch(key)\n" * 3
    texts = [hermes(body, "c1"), None, hermes(body, "c2")]
    out, stats = distill_turns(texts, "safe", counts)
    assert out[2] == hermes("⟪same as tool output #1 above⟫", "c2").replace(
        "\\u27ea", "⟪").replace("\\u27eb", "⟫")  # the marks as themselves
    assert stats.rules["same_output"].turns == 1
    assert verify_turns(texts, out) is None
    assert tool_outputs(out) == [body, "⟪same as tool output #1 above⟫"]
    bad = [out[0], None, hermes("⟪same as tool output #2 above⟫", "c2")]  # no #2 before
    assert "does not read back" in (verify_turns(texts, bad) or "")
    worse = [out[0], None, hermes(body + "x", "c2")]
    assert "other than the terminal showed" in (verify_turns(texts, worse) or "")


def test_rule_tokens_add_up_to_the_turn_totals():
    text = "\x1b[31mE\x1b[0m " + "\n".join(["same line here, long enough"] * 10)
    out, stats = distill_turns([text, None], "safe", counts)
    assert stats.tokens_before == counts([text])[0]
    assert stats.tokens_after == counts([out[0] or ""])[0]
    steps = sum(s.tokens_before - s.tokens_after for s in stats.rules.values())
    assert steps == stats.saved > 0
    assert DistillStats.from_dict(json.loads(json.dumps(stats.to_dict()))) == stats


def test_a_turn_that_would_count_more_tokens_is_left_alone():
    text = "\x1b[31mx\x1b[0m"
    out, stats = distill_turns([text], "safe", lambda ts: [10 - len(t) for t in ts])
    assert out == [text] and stats.turns == 0
    assert distill_turns([text], "off", counts) == ([text], DistillStats("off"))


def test_config_names_the_valid_levels():
    with pytest.raises(ConfigError, match=r"compression\.distill must be one of off, safe, all"):
        CompressionConfig().replace(distill="lossless")
    assert CompressionConfig.from_dict({"compression": {"distill": False}}).distill == "off"
    assert CompressionConfig.from_dict({"compression": {"distill": "all"}}).distill == "all"


# the property: safe is lossless

SPINNER = st.sampled_from(["|", "/", "-", "\\"]).map(lambda c: c + "\r")
PROGRESS = st.integers(0, 100).map(
    lambda p: f"[{'#' * (p // 10):<10}] {p}% eta 0:00:{p % 60:02d}\r")
TABLE_ROW = st.tuples(st.integers(0, 3), st.sampled_from([200, 200, 200, 500])).map(
    lambda t: f"GET /api/items/{t[0]} {t[1]} 12ms\n")
DIFF = st.sampled_from(["-    retries = 3\n", "+    retries = 5\n", "     timeout = 30\n",
                        "@@ -1,4 +1,4 @@\n"])
LS_ROW = st.tuples(st.sampled_from(["-rw-r--r--", "drwxr-xr-x"]), st.integers(0, 99999),
                   st.sampled_from(["a.py", "models", "README.md", "⟪x", "{y}"])).map(
    lambda t: f"{t[0]}  1 agent staff {t[1]:6d} Nov 28 11:55 {t[2]}\n")
JSON_DOC = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from(["a", "x, y", "{", "⟪"]),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(["k", "id", "n"]), inner, max_size=3),
    max_leaves=6).map(lambda v: json.dumps(v, indent=2) + "\n")
FRAGMENT = st.sampled_from([
    "\x1b[32m", "\x1b[0m", "\x1b[K", "\x1b[2K", "\x1b[1K", "\x1b[4G", "\x1b]0;t\x07", "\r",
    "\n", "\r\n", "\b", "\t", " ", "ok", "FAILED", "Exit status 0\n", "Exit status 1\n",
    "tests/test_api.py", "42", "3.14", "{", "}", "\\", "⟪", "⟫", "⟪×2⟫ ", "⟪json indent 2⟫\n",
    "⟪same as tool output #1 above⟫", "Compiling foo v1.0\n", "x" * 70,
]) | SPINNER | PROGRESS | TABLE_ROW | DIFF | JSON_DOC | LS_ROW
STREAMS = st.lists(FRAGMENT, max_size=40).map("".join) | st.text(max_size=200)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(STREAMS)
@example("Exit status 0\nExit status 0\nExit status 1\nExit status 0\nExit status 0\n")
@example("eta 0:00:07\r\x1b[Keta 0:00:00")
@example("⟪×2⟫ a\n⟪×2⟫ a\n⟪×2⟫ a\n")
def test_safe_reads_back_as_the_terminal_showed_it(text):
    distilled = distill(text)
    assert expand(distilled) == terminal_view(text)
    assert distill(distilled) == distilled or expand(distill(distilled)) == distilled


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(STREAMS | st.sampled_from([
    "\n".join(f"{n}:line {n} of the file, some code" for n in range(1, 30)),
    "\n".join(f"{n}:line {n} of the file, some code" for n in range(5, 20)),
    "\n".join(f"{n:6d}\tline {n} of the file, some code" for n in range(3, 12)),
    "On branch main\nChanges not staged for commit:\n\tmodified:   a.py\n\tmodified:   b.py\n",
]), min_size=1, max_size=5))
def test_a_row_of_outputs_reads_back_as_the_terminal_showed_it(outputs):
    assert expand_outputs(row_distilled(outputs)) == [terminal_view(t) for t in outputs]
    texts = [hermes(t, f"c{i}") if i % 2 else t for i, t in enumerate(outputs)]
    out, _ = distill_turns(texts, "safe", counts)
    assert verify_turns(texts, out) is None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(STREAMS, min_size=1, max_size=4), st.sampled_from(["safe", "all"]))
def test_turns_never_grow_in_tokens(counter, texts, level):
    wrapped = [hermes(t, f"c{i}") if i % 2 else t for i, t in enumerate(texts)]
    out, _stats = distill_turns(wrapped, level, counter.count_many)
    for before, after in zip(wrapped, out, strict=True):
        # but for a turn whose own lines look like notation: escaped, it may grow
        assert counter.count(after or "") <= counter.count(before) \
            or not _reads_as_itself(before)


# realistic logs


def tool_turns(path):
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [[t["value"] for t in row["conversations"] if t["from"] == "tool"] for row in rows]


def test_safe_reads_back_every_realistic_terminal_log(counter):
    checked = saved = 0
    for texts in tool_turns(SAMPLES / "terminal_hermes.jsonl"):
        out, stats = distill_turns(texts, "safe", counter.count_many)
        saved += stats.saved
        assert verify_turns(texts, out) is None
        checked += len(texts)
    assert checked > 100 and saved > 0


def test_the_notation_is_written_as_itself_inside_a_hermes_body():
    # An ASCII-only body stays ASCII-only but for the notation's marks: "\u27ea" spelled
    # out would cost several tokens a mark.
    text = hermes("caf\u00e9\n" + "\n".join(["waiting for the job to finish"] * 6))
    out, _ = distill_turns([text], "safe", counts)
    assert '"content": "café\\n⟪×6⟫ waiting for the job to finish"' in (out[0] or "")
    assert verify_turns([text], out) is None
