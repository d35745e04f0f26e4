"""Control characters in a model's reply (issue 36): stored by one documented rule,
and spelled out by `report --show`.

The rule (`core.summary.drop_controls`): a terminal escape sequence goes whole, CR LF
becomes LF and a lone CR a line break, every other C0/C1 control and DEL is dropped,
line breaks and tabs stay; bidi marks are text and stay, and `report --show` prints them
as ``\\u202e``."""

from __future__ import annotations

import pytest

from tests.cli_helpers import invoke_cli, read_jsonl
from tests.fake_llm_server import FakeLLMServer
from tests.test_loud_failures import compress, config, three_rows
from trajectory_compressor.core.summary import drop_controls, finish_summary_text

REPLY = ("The \u202eagent\u202c \x1b[31mfixed\x1b[0m the parser\x07.\r\nIt ran the tests\x00 again;"
         "\x1b]0;pwned\x07 all passed\x7f.\rDone \u202eevil\u202c here\x85.\tEnd")
STORED = ("The \u202eagent\u202c fixed the parser.\nIt ran the tests again; all passed.\nDone "
          "\u202eevil\u202c here.\tEnd")


@pytest.mark.parametrize(("raw", "kept"), [
    (REPLY, STORED),
    ("line\r\nline\rline", "line\nline\nline"),
    ("\x1b[1;32mgreen\x1b[m and \x9b2Jcleared", "green and cleared"),
    ("a\x00b\x01c\x1fd\x7fe\x80f\x9fg", "abcdefg"),
    ("tabs\tand\nbreaks stay", "tabs\tand\nbreaks stay"),
    ("\x1b]unterminated: only the ESC goes", "]unterminated: only the ESC goes"),
])
def test_the_rule_by_hand(raw, kept):
    assert drop_controls(raw) == kept
    assert drop_controls(kept) == kept  # idempotent
    assert finish_summary_text(raw) == "[CONTEXT SUMMARY]: " + kept


def test_a_reply_with_controls_is_stored_clean_and_shown_spelled_out(tmp_path, sample_jsonl):
    source, out = three_rows(sample_jsonl, tmp_path), tmp_path / "out.jsonl"
    with FakeLLMServer(reply=lambda _data: REPLY).in_thread() as server:
        proc = compress(source, out, config(tmp_path), server.url, "--model", "m", "--quiet")
    assert proc.returncode == 0, proc.stderr
    rows = read_jsonl(out)
    summaries = [t["value"] for r in rows for t in r["conversations"]
                 if t["value"].startswith("[CONTEXT SUMMARY]:")]
    # (a References: line follows the model's text: summary_references tail)
    assert [s.split("\nReferences:")[0] for s in summaries] == ["[CONTEXT SUMMARY]: " + STORED] * 3
    shown = invoke_cli("report", str(out), "--show", "0")
    assert shown.returncode == 0, shown.stderr
    [line] = [x for x in shown.stdout.splitlines() if "[CONTEXT SUMMARY]:" in x]
    assert "[CONTEXT SUMMARY]: The \\u202eagent\\u202c fixed" in line
    assert "\u202e" not in shown.stdout
    assert "\x1b" not in shown.stdout
