"""Long texts counted in pieces: the whole text's count, in the memory of one piece.

A tokenizer's encoding holds hundreds of bytes per token until it is counted: one 60 MB
tool output (23 million tokens) took 8.7 GB. A text longer than a piece is cut where no
token can span the cut, so the pieces' counts add up to the whole text's:

- before an ASCII digit run or after one (the other side an ASCII non-digit): the
  bundled tokenizer's first pre-tokenizer isolates digit runs, so their edges are hard
  boundaries; groups of three digits start at the run's start, which the cut keeps;
- right after a line break followed by a letter, digit or punctuation mark: no
  pre-token holds a line break followed by more (whitespace runs end before it);
- between a letter and a space followed by a letter (`word| word`): a letter run ends
  at the space, and the space opens the next word's token on both sides of the cut.

BPE merges never cross pre-tokens, and the bundled tokenizer has no normalizer. Other
tokenizers need not split there (a normalizer that strips, a prefix added to every
text, a pre-token `` 123``): `pieces_add_up` tries every kind of cut on a probe text with
the tokenizer itself, and a tokenizer that fails counts long texts whole.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Callable, Iterable, Iterator
from itertools import pairwise
from typing import Any

_DIGITS = frozenset(string.digits)
_ASCII = frozenset(chr(c) for c in range(128))
_PUNCTUATION = frozenset(string.punctuation)


def safe_cut(text: str, at: int) -> bool:
    """Whether ``text`` may be cut before ``text[at]`` (see the module's rules)."""
    if not 0 < at < len(text):
        return False
    before, after = text[at - 1], text[at]
    if (before in _DIGITS) != (after in _DIGITS):
        return before in _ASCII and after in _ASCII
    if before == "\n":
        return after.isalnum() or after in _PUNCTUATION
    return (after == " " and before.isalpha() and at + 1 < len(text)
            and text[at + 1].isalpha())


def pieces(text: str, size: int, veto: Callable[[str, int], bool] | None = None
           ) -> Iterator[str]:
    """``text`` in pieces of about ``size`` characters (at most twice that unless no
    cut is found), each cut a `safe_cut` that ``veto`` (if given) does not refuse; one
    piece when ``text`` is not longer."""
    def allowed(at: int) -> bool:
        return safe_cut(text, at) and (veto is None or not veto(text, at))

    start = 0
    while len(text) - start > size:
        cut = _cut_near(allowed, len(text), start + size, start + size // 2, start + 2 * size)
        if cut is None:
            break
        yield text[start:cut]
        start = cut
    yield text[start:]


def _cut_near(allowed: Callable[[int], bool], length: int, aim: int, low: int,
              high: int) -> int | None:
    """The allowed cut nearest ``aim`` looking back to ``low``, else on to ``high``, else
    anywhere after ``aim``."""
    for at in range(aim, low, -1):
        if allowed(at):
            return at
    for at in range(aim + 1, min(high, length)):
        if allowed(at):
            return at
    for at in range(high, length):
        if allowed(at):
            return at
    return None


# Every kind of cut, next to what could break it in other tokenizers: a space before a
# digit, digits inside words, several line breaks, indentation, CJK, marks, emoji.
PROBE = "\n".join([
    "Traceback (most recent call last): File \"/srv/app/main.py\", line 1234, in run",
    "2024-11-23T10:16:02.554Z ERROR worker-2 job 7781 failed: code=503 took 12.5ms",
    "{\"id\": 42, \"values\": [1, 22, 333, 4444, 55555], \"name\": \"a1b2c3\"}",
    "    indented line with words and 9 numbers 10,000,000 and x86_64 v1.2.3",
    "",
    "\ttabbed\tcolumns\t100\t200",
    "中文字符 テスト カタカナ 2024年11月 mixed ascii words",
    "naïve café résumé e\u0301 combining marks, emoji 😀 ok!",
    "$ pip install -r requirements.txt && pytest -q  # 17 passed, 2 failed",
    "--- a/file.py\n+++ b/file.py\n@@ -1,3 +1,4 @@",
    "ends with spaces   ",
    "  leading spaces then text",
    "UPPER lower MiXeD 0x1F 1e-9 -42 +7 3.14159",
])


def pieces_add_up(count_many: Callable[[list[str]], list[int]]) -> bool:
    """Whether a tokenizer's counts of `PROBE` cut at every `safe_cut` add up to the
    whole text's count (its own check that counting long texts in pieces is exact)."""
    cuts = [at for at in range(1, len(PROBE)) if safe_cut(PROBE, at)]
    bounds = [0, *cuts, len(PROBE)]
    parts = [PROBE[a:b] for a, b in pairwise(bounds)]
    counts = count_many([PROBE, *parts])
    return counts[0] == sum(counts[1:])


# -- tiles: where a text's edits can be counted alone ---------------------------------
#
# A text cut into tiles, each ending after an ASCII letter run before any other ASCII
# character, or after an ASCII digit run before an ASCII non-digit. The bundled
# tokenizer's pre-tokens holding a letter end at the letter run's end (`[A-Za-z]+` and
# `[\p{L}\p{M}]+` are the only ones that hold letters, and take them last), and its
# first pre-tokenizer isolates digit runs; what starts a pre-token depends only on the
# text after it, so no pre-token spans such a cut. Added tokens (``<think>``) are
# matched before any pre-tokenizer: a text holding one that such a cut could split is
# one tile. Two similar texts then differ in a few tiles, and one's count is the
# other's plus theirs (`TokenCounter.count_pairs`).

_RUN = r"(?:[A-Za-z]++|[0-9]++)"
_TILE = re.compile(rf"[^0-9A-Za-z]*+{_RUN}(?:[^\x00-\x7f]++[^0-9A-Za-z]*+{_RUN})*+"
                   rf"(?![^\x00-\x7f])|[\s\S]+")


# Where a tile may end: after an ASCII letter before another ASCII character than a
# letter, after an ASCII digit before an ASCII non-digit.
_TILE_END = re.compile(r"[A-Za-z](?=[\x00-\x40\x5b-\x60\x7b-\x7f])|[0-9](?=[\x00-\x2f\x3a-\x7f])")


class Tiler:
    """Cuts texts into tiles for a tokenizer whose added tokens are ``atoms`` (those a
    tile could end inside); `Tiler.of` builds one from all of its added tokens."""

    def __init__(self, atoms: Iterable[str] = ()) -> None:
        pattern = _any_of(atoms)
        self._atoms = re.compile(pattern) if pattern else None

    @classmethod
    def of(cls, added: Iterable[tuple[str, bool]]) -> Tiler | None:
        """For added tokens as (content, whether it matches only as a single word); None
        when there is a single-word one (its match depends on its neighbours)."""
        atoms: list[str] = []
        for content, single_word in added:
            if single_word:
                return None
            if _TILE_END.search(content):
                atoms.append(content)
        return cls(atoms)

    def __call__(self, text: str) -> list[str]:
        """``text`` as tiles that join to it."""
        if self._atoms is not None and self._atoms.search(text):
            return [text]
        return _TILE.findall(text)


def _any_of(words: Iterable[str]) -> str:
    """A pattern that finds any of ``words`` (a trie: quick to build and to search)."""
    trie: dict[str, Any] = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def branch(node: dict[str, Any]) -> str:
        if "" in node:
            return ""  # a word ends here: a shorter one is enough to find
        alternatives = [re.escape(char) + branch(child) for char, child in sorted(node.items())]
        return alternatives[0] if len(alternatives) == 1 else f"(?:{'|'.join(alternatives)})"

    return branch(trie) if trie else ""


def tiles_add_up(count_many: Callable[[list[str]], list[int]], tiler: Tiler) -> bool:
    """Whether a tokenizer's counts of `PROBE` (as it is and JSON-escaped, as a tool
    output sits in a Hermes turn) add up over their tiles."""
    probes = [PROBE, json.dumps(PROBE)]
    parts = [tiler(probe) for probe in probes]
    counts = iter(count_many([*probes, *(t for p in parts for t in p)]))
    wholes = [next(counts) for _ in probes]
    return all(whole == sum(next(counts) for _ in part)
               for whole, part in zip(wholes, parts, strict=True))
