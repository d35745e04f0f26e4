"""Tests written to kill mutants left by the fifteenth coverage-guided pass (issue 40,
item 8) over modules no run had reached on their current code: the terminal renderer,
distill's references, masking, the local llama.cpp server, token pairs and committed
outputs. In process, on hand-made input, but for two tests that start a process (a
stand-in server program, a sleeping child), which the heavy tier runs.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

from tests.test_kills4_local_server import PROGRAM, Program
from trajectory_compressor.core.distill_refs import _resolved, resolve_references
from trajectory_compressor.core.distill_row import outputs_of
from trajectory_compressor.core.mask import (
    MAX_ARGS_CHARS,
    MAX_ERROR_CHARS,
    MAX_PLACEHOLDER_CHARS,
    Call,
    CountMany,
    MaskedTurn,
    Masker,
    Masking,
    _call_text,
    _clip,
    calls_of,
    error_line,
    mask_row,
    output_calls,
    placeholder,
)
from trajectory_compressor.core.plan import Region
from trajectory_compressor.core.terminal_view import is_bare_cr_file, strip_inert, terminal_view
from trajectory_compressor.counting.tokens import TokenCounter
from trajectory_compressor.engine.committed import (
    file_digest,
    row_count_disagreement,
    sidecar_disagreements,
)
from trajectory_compressor.summarizers.local_server import (
    PORTABLE_REBUILD,
    LocalServer,
    LocalServerError,
    _signal_group,
    advice,
)

# --- core/terminal_view.py ----------------------------------------------------------


def test_crlf_is_a_line_end_before_bare_crs_are_judged() -> None:
    # Read as "line1\nline2\rline3": after the first CR no line feed, so a file.
    assert terminal_view("line1\r\nline2\rline3") == "line1\nline2\nline3"


def test_an_erase_to_the_cursor_leaves_no_trailing_spaces() -> None:
    assert terminal_view("abc\x1b[1K") == ""
    assert terminal_view("abcdef\x1b[1K") == ""
    # Cells 0-2 erased, the cursor stays at 2.
    assert terminal_view("abcdef\r\x1b[2C\x1b[1Kxy") == "  xyef"


def test_cursor_back_stops_at_column_zero() -> None:
    assert terminal_view("ab\x1b[5Dc") == "cb"
    assert terminal_view("ab\x08\x08\x08c") == "cb"


@pytest.mark.parametrize("text", [
    "a\x1bb\rc",          # an escape: never a file
    "abc",                # no CR at all
    "a\rb\nc",            # a line feed after the first CR
    "abc\r",              # one record
    "|\r/\r-\r\\",        # a spinner
    "ab\rcd\ref",         # records of two characters are a spinner too
    "10%\r20%",           # a counter
    " \rabc",             # one record with text
    "foo\rfoo bar\rbaz",  # one grown pair in three records: a redraw
    "abc\rabcd",          # grown
])
def test_not_a_bare_cr_file(text: str) -> None:
    assert is_bare_cr_file(text) is False


@pytest.mark.parametrize("text", [
    "\rabc\rdef",               # a CR first
    "abc\rdef\rghi",            # records of three characters are text
    "one\rone two\rthree\rfour",  # one grown pair in four records: still a file
])
def test_a_bare_cr_file(text: str) -> None:
    assert is_bare_cr_file(text) is True


def test_strip_inert_drops_colours_and_keeps_moves() -> None:
    assert strip_inert("\x1b[31mred\x1b[0m") == "red"
    assert strip_inert("a\x1b[31m\rb\x1b[K\x07") == "a\rb\x1b[K"


# --- core/distill_refs.py -----------------------------------------------------------

RUN2 = "⟪×2⟫ a"  # distilled "a\na": its text is not what it reads as
JSON2 = '⟪json indent 2⟫\n{"a":1}'


def _same(k: int) -> str:
    return f"⟪same as tool output #{k} above⟫"


def _hermes(*contents: str) -> str:
    return "\n".join(f'<tool_response>\n{json.dumps({"name": "t", "content": c})}\n'
                     "</tool_response>" for c in contents)


def test_a_reference_whose_referent_was_summarized_is_its_text() -> None:
    # Every written tool text holds a reference (none would return the texts as they are).
    out = resolve_references(["Y", None, _same(1)], [None, _same(1)], [None, 2])
    assert out == [None, "Y"]


def test_a_reference_to_the_first_output_is_its_distilled_text() -> None:
    out = resolve_references([RUN2, None, _same(1)], [None, _same(1)], [None, 2])
    assert out == [None, RUN2]


def test_a_reference_inside_an_output_is_the_referents_distilled_text() -> None:
    out = resolve_references([RUN2, None, "head\n" + _same(1)], [None, "head\n" + _same(1)],
                             [None, 2])
    assert out == [None, "head\n" + RUN2]
    # The same with a JSON layout last in the row (only the referent's head counts).
    source = [RUN2, None, "head\n" + _same(1), None, JSON2]
    out = resolve_references(source, [None, "head\n" + _same(1), None, JSON2], [None, 2, 3, 4])
    assert out == [None, "head\n" + RUN2, None, JSON2]


def test_a_json_layout_is_written_whole_only_for_a_whole_output() -> None:
    out = resolve_references([JSON2, None, _same(1)], [None, _same(1)], [None, 2])
    assert out == [None, JSON2]
    out = resolve_references([JSON2, None, "head\n" + _same(1)], [None, "head\n" + _same(1)],
                             [None, 2])
    assert out == [None, 'head\n{\n  "a": 1\n}']


def test_a_json_layout_output_is_left_as_it_is() -> None:
    text = "⟪json indent 2⟫\n" + _same(1)
    assert _resolved(text, {1: 7}, ["x"], ["x"]) == text


def test_outputs_after_a_multi_output_turn_are_renumbered() -> None:
    source = ["X", None, _hermes("A", "B"), None, _same(3)]
    written = [None, _hermes("A", "B"), None, _same(3)]
    out = resolve_references(source, written, [None, 2, 3, 4])
    assert out == [None, written[1], None, _same(2)]


def test_a_row_that_does_not_read_back_is_left_as_written() -> None:
    assert resolve_references([_same(3)], [_same(3)], [0]) == [_same(3)]


def test_written_texts_and_origins_must_pair_up() -> None:
    with pytest.raises(ValueError):
        resolve_references(["X", None, _same(1)], [_same(1)], [2, 0])


def test_a_range_that_reads_nothing_is_kept_as_written() -> None:
    line = "⟪lines 5-9 of tool output #1⟫"
    assert resolve_references(["a\nb", None, "c"], [None, line], [None, 2]) == [None, line]


def test_a_new_turn_is_not_resolved() -> None:
    assert resolve_references(["X", None, "Y"], [_same(1), "Y"], [None, 2]) == [_same(1), "Y"]


# --- core/mask.py -------------------------------------------------------------------


def _fixed(n: int) -> CountMany:
    """A count of ``n`` tokens for every text (a counter a test can reason about)."""
    return lambda texts: [n] * len(texts)


def _head_length(d: int) -> int:
    """Characters before the closing bracket of a lone output stating exit code 1…1 (d)."""
    return len(placeholder(None, "exit code " + "1" * d, 5, [])) - 1


def _with_head(length: int) -> str:
    """An output whose placeholder head (all but the named items and "]") has ``length``
    characters: its exit code's digits make up the length."""
    d = length - _head_length(1) + 1
    assert _head_length(d) == length
    return "exit code " + "1" * d


def test_the_cap_values() -> None:
    assert (MAX_PLACEHOLDER_CHARS, MAX_ARGS_CHARS, MAX_ERROR_CHARS) == (600, 160, 120)
    assert len(_call_text(Call("t", {"x": "a" * 500}))) == 160
    assert len(error_line("Error: " + "x" * 500) or "") == 120


def test_a_huge_head_is_cut_to_the_cap() -> None:
    text = placeholder(None, "exit code " + "9" * 700, 5, [])
    assert len(text) == 600 and text.endswith("9]")


def test_an_item_that_fits_to_the_character_is_shown() -> None:
    room = 100
    output = _with_head(600 - 1 - room)
    item = "x" * (room - len("; named later: ") - 2)  # quoted: two characters more
    text = placeholder(None, output, 5, [item])
    assert text.endswith(f'; named later: "{item}"]') and len(text) == 600
    longer = placeholder(None, output, 5, [item + "y"])
    assert longer.endswith("; named later: +1 more]")


def test_two_items_that_fit_to_the_character_are_both_shown() -> None:
    room = 100
    output = _with_head(600 - 1 - room)
    first = "a" * 10
    second = "b" * (room - len("; named later: ") - len(first) - 2 - len(", ") - 2)
    assert placeholder(None, output, 5, [first, second]).endswith(
        f'; named later: "{first}", "{second}"]')
    assert placeholder(None, output, 5, [first, second + "c"]).endswith(
        f'; named later: "{first}" (+1 more)]')


def test_the_count_of_items_not_shown_is_written_only_where_it_fits() -> None:
    note = "; named later: +1 more"
    fits = placeholder(None, _with_head(600 - 1 - len(note)), 5, ["z" * 200])
    assert fits.endswith(note + "]") and len(fits) == 600
    tight = placeholder(None, _with_head(600 - len(note)), 5, ["z" * 200])
    assert "named later" not in tight and len(tight) == 600 - len(note) + 1


def test_clip() -> None:
    assert _clip("abc", 3) == "abc"
    assert _clip("abcd", 3) == "ab…"


def test_call_text_keeps_non_ascii_arguments() -> None:
    assert _call_text(Call("t", {"a": "é"})) == 't {"a": "é"}'
    assert _call_text(Call("t", "é")) == 't "é"'


def test_an_error_on_a_numbered_file_view_line_is_code() -> None:
    assert error_line("  3|  raise TimeoutError('timed out')") is None
    assert error_line("12: Permission denied") is None
    assert error_line("Permission denied") == "Permission denied"


def test_calls_of_reads_the_openai_shape_and_string_arguments() -> None:
    body = json.dumps({"function": {"name": "f", "arguments": json.dumps({"a": 1})}})
    assert calls_of(body) == [Call("f", {"a": 1})]
    assert calls_of(json.dumps({"name": "g", "arguments": {"b": 2}})) == [Call("g", {"b": 2})]
    assert calls_of(json.dumps({"name": "h", "arguments": "not json"})) == [
        Call("h", "not json")]


def _calls(*names: str) -> str:
    """An assistant turn calling each named tool with no arguments, in Hermes tags."""
    return "".join(f"<tool_call>{json.dumps({'name': n, 'arguments': {}})}</tool_call>"
                   for n in names)


def test_output_calls_pairs_outputs_with_calls_in_order() -> None:
    calls = _calls("a", "b")
    two = ('<tool_response>{"content": "1"}</tool_response>'
           '<tool_response>{"content": "2"}</tool_response>')
    assert output_calls(["gpt", "tool"], [calls, two]) == {
        1: [Call("a", {}), Call("b", {})]}
    # A tool turn before any call, and calls a user turn came between.
    assert output_calls(["tool"], ["x"]) == {0: [None]}
    assert output_calls(["gpt", "human", "tool"], [calls, "go on", "x"]) == {2: [None]}
    with pytest.raises(ValueError):
        output_calls(["gpt"], [])


def test_records_are_frozen_and_a_masked_turn_reads_as_a_dict() -> None:
    turn = MaskedTurn(1, 2, 3)
    assert turn.to_dict() == {"turn": 1, "tokens_before": 2, "tokens_after": 3}
    for record, field in ((turn, "turn"), (Masking((), ()), "texts"), (Call("a", 1), "name")):
        with pytest.raises(FrozenInstanceError):
            setattr(record, field, None)


def test_no_masking_when_no_placeholder_is_shorter() -> None:
    roles, texts = ["gpt", "tool", "gpt"], ["", "some output", "done"]
    # The placeholder counts as many tokens as the output: nothing is saved.
    assert mask_row(roles, texts, [0, 50, 5], Region(0, 3), 10, 0, [], _fixed(50)) is None
    masked = mask_row(roles, texts, [0, 50, 5], Region(0, 3), 10, 0, [], _fixed(49))
    assert masked is not None and masked.saved == 1
    with pytest.raises(ValueError):  # a counter that answers for more texts than asked
        mask_row(roles, texts, [0, 50, 5], Region(0, 3), 10, 0, [],
                 lambda texts: [1] * (len(texts) + 1))


def test_a_tool_turn_of_two_outputs_counts_each_and_keeps_excluded_ones() -> None:
    calls = _calls("keep", "drop")
    two = ('<tool_response>{"name": "keep", "content": "first output"}</tool_response>'
           '<tool_response>{"name": "drop", "content": "second output"}</tool_response>')
    masker = Masker(["gpt", "tool"], [calls, two], ["keep"], _fixed(7))
    text = masker.text(1, 100)
    assert text is not None
    assert outputs_of(text) == ["first output",
                                "[tool output masked: drop; 1 line, 7 tokens]"]
    one = '<tool_response>{"name": "keep", "content": "only"}</tool_response>'
    assert Masker(["gpt", "tool"], [calls, one], ["keep"], _fixed(7)).text(1, 100) is None


# --- summarizers/local_server.py ----------------------------------------------------


def test_advice_is_for_an_illegal_instruction_only() -> None:
    sigill = advice(-signal.SIGILL)
    assert sigill.startswith(": the llama.cpp build uses CPU instructions this machine refuses")
    assert sigill.endswith(f"rebuild it portably with {PORTABLE_REBUILD}")
    for status in (None, 0, 1, signal.SIGILL, -signal.SIGSEGV, -signal.SIGKILL):
        assert advice(status) == ""


def test_the_alias_names_this_process_and_eight_hex_digits() -> None:
    server = LocalServer(Path("m.gguf"), n_ctx=512, threads=1)
    assert re.fullmatch(rf"trajectory-compressor-{os.getpid()}-[0-9a-f]{{8}}", server.alias)


def test_a_closed_log_reads_as_no_tail() -> None:
    server = LocalServer(Path("m.gguf"), n_ctx=512, threads=1)
    with tempfile.TemporaryFile() as log:
        log.write(b"a line\n")
    server._log = log  # closed: its file number is gone
    assert server.log_tail() == ""


def test_a_server_answering_under_another_name_times_out(tmp_path: Path) -> None:
    class Stranger(Program):
        def command(self, port: int) -> list[str]:
            return [sys.executable, "-c", PROGRAM, "someone-else", str(port), "serve",
                    str(self.folder)]

    server = Stranger(tmp_path, "serve", startup_timeout=0.5)
    begun = time.monotonic()
    with pytest.raises(LocalServerError, match=r"did not answer within 0\.5s"):
        asyncio.run(server.start())
    assert time.monotonic() - begun >= 0.5
    assert server.process is None  # stopped


def test_a_process_outside_a_group_of_its_own_is_signalled_itself() -> None:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _signal_group(process, signal.SIGTERM)  # no group with its id: the process itself
        assert process.wait(10) == -signal.SIGTERM
    finally:
        process.kill()
        process.wait()


# --- counting/tokens.py -------------------------------------------------------------


def test_count_pairs_stays_exact_when_its_tile_memo_fills(counter: TokenCounter) -> None:
    """A full tile memo is cleared and every tile of the call counted again, those it held
    among them (they are looked up right after)."""
    def whole(text: str) -> int:
        return len(counter.tokenizer.encode(text, add_special_tokens=False))

    def pair(i: int) -> tuple[str, str]:
        lines = "".join(f"\x1b[3{i % 8}mline {n} of part {i}\x1b[0m\n" for n in range(6))
        return lines, lines.replace(f"\x1b[3{i % 8}m", "").replace("\x1b[0m", "")

    fresh = TokenCounter(counter.tokenizer, memo_size=8)
    for start in range(4):
        pairs = [pair(i) for i in range(start, start + 3)]
        assert fresh.count_pairs(pairs) == [(whole(a), whole(b)) for a, b in pairs]


# --- engine/committed.py ------------------------------------------------------------


def test_a_file_digest_is_its_bytes_and_sha256(tmp_path: Path) -> None:
    data = b"x" * ((1 << 20) + 5)  # more than one read
    (tmp_path / "one.jsonl").write_bytes(data)
    assert file_digest(tmp_path / "one.jsonl") == {
        "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def test_a_folder_digest_names_its_files_in_order(tmp_path: Path) -> None:
    folder = tmp_path / "out"
    (folder / "sub").mkdir(parents=True)
    (folder / "b.parquet").write_bytes(b"bb")
    (folder / "sub" / "a.parquet").write_bytes(b"a")
    expected = hashlib.sha256(b"b.parquet\0bb" + b"sub/a.parquet\0a").hexdigest()
    assert file_digest(folder) == {"bytes": 3, "sha256": expected}


def test_sidecar_disagreements_name_each_kind(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text("row\n")
    sidecar = tmp_path / "out_metrics.json"
    assert sidecar_disagreements(out, None, sidecar) == []
    assert sidecar_disagreements(out, {"committed": {"files": []}}, sidecar) == []
    # Another run's outputs: up to two named, then "...".
    names: dict[str, dict[str, int]] = {str(tmp_path / f"{c}.jsonl"): {} for c in "abc"}
    for count, tail in ((2, ""), (3, ", ...")):
        run = {"run": {"outputs": dict(list(names.items())[:count])}}
        shown = ", ".join(sorted(names)[:2]) + tail
        assert sidecar_disagreements(out, run, sidecar) == [
            f"the metrics file out_metrics.json beside it is another run's: it records the "
            f"outputs {shown}, not {out}; its figures are not this output's"]
    gone = str(tmp_path / "out.jsonl" / "part-1.parquet")
    files = {str(out.resolve()): "not a dict", gone: {}}
    assert sidecar_disagreements(out, {"committed": {"files": files}}, sidecar) == [
        f"{gone} was committed by the run recorded in out_metrics.json but is gone"]


def test_row_count_disagreement_reads_committed_then_summary() -> None:
    sidecar = Path("x_metrics.json")
    assert row_count_disagreement(3, None, sidecar) is None
    assert row_count_disagreement(3, {"committed": {"rows": 3}}, sidecar) is None
    assert row_count_disagreement(2, {"committed": {"rows": 3}}, sidecar) == (
        "1 row fewer than its run wrote (2 now, 3 recorded in x_metrics.json): rows were "
        "dropped")
    assert row_count_disagreement(2, {"committed": {"rows": "3"},
                                      "summary": {"total_trajectories": 1}}, sidecar) == (
        "1 row more than its run wrote (2 now, 1 recorded in x_metrics.json): rows were "
        "duplicated or added")
    assert row_count_disagreement(2, {"summary": {"total_trajectories": 2}}, sidecar) is None
    assert row_count_disagreement(2, {"summary": None}, sidecar) is None
