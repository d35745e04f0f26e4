"""Issue 40 item 4: the extractive summary and the fidelity measure read tool outputs as a
terminal showed them (`core.terminal_view`), whether or not distill is on: no escape
fragments (``1msrc/native/image.c``, ``35mwarning``, ``0m``) in any summary or item.

The oracle is independent of the renderer: every SGR sequence of a row's raw tool text
with the word glued after it (what a summary that keeps the bytes after ESC shows) is a
fragment, and none may appear in a summary or among the measured items."""

from __future__ import annotations

import json
import re

import pytest

from tests.cli_helpers import run_cli
from tests.test_distill_pipeline import read_rows, subset
from trajectory_compressor.core.fidelity import extract_items

SGR = re.compile(r"\x1b\[([0-9;]*)m([^\s\x1b]*)")
CONDENSED = "were condensed"


def fragments(text: str) -> set[str]:
    """Each colour code of ``text`` as ESC-less text would show it: ``1msrc/a.c``, ``0m``."""
    return {f"{code}m{word}" for code, word in SGR.findall(text) if code or word}


def words(text: str) -> set[str]:
    return set(re.findall(r"[^\s;,()'\"`]+", text))


def test_items_are_what_the_terminal_showed():
    text = "\x1b[1msrc/native/image.c\x1b[0m:12: \x1b[35mwarning\x1b[0m: unused `buf_len`"
    items = extract_items([text])
    assert "src/native/image.c:12" in items or "src/native/image.c" in items
    assert not {i for i in items if re.search(r"\d+m", i)}
    assert extract_items(["eta 0:00:07\r\x1b[Keta 0:00:00 done at /srv/app/run.log"]) == \
        extract_items(["eta 0:00:00 done at /srv/app/run.log"])


@pytest.mark.parametrize("name", ["terminal_hermes.jsonl", "terminal_openai.jsonl",
                                  "terminal_llamafactory.json"])
@pytest.mark.parametrize("level", ["off", "safe"])
def test_no_summary_holds_an_escape_fragment(tmp_path, name, level):
    src = subset(name, tmp_path, 8)
    out = tmp_path / "out" / f"run{src.suffix}"
    proc = run_cli("compress", str(src), "-o", str(out), "--summarizer", "extractive",
                   "--target-max-tokens", "4000", "--distill", level, "--quiet")
    assert proc.returncode == 0, proc.stderr
    summaries = coloured = 0
    for given, written in zip(read_rows(src), read_rows(out), strict=True):
        # Hermes holds the output as JSON text ("\\u001b"), the others the character.
        raw = json.dumps(given, ensure_ascii=False).replace("\\\\u001b", "\x1b")
        planted = fragments(raw.replace("\\u001b", "\x1b"))
        coloured += bool(planted)
        text = json.dumps(written, ensure_ascii=False)
        for found in re.findall(r"Turns \d+-\d+ \(\d+ turns\) were condensed[^\"]*", text):
            summaries += 1
            assert "\\u001b" not in found and "\x1b" not in found
            assert not planted & words(found.replace("\\n", "\n"))
        missing = (written.get("compression_metrics") or {}).get("fidelity", {})
        assert not planted & set(missing.get("missing", []))
    assert summaries > 0 and coloured > 0
