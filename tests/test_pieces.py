"""Long texts counted in pieces (`counting.pieces`): cuts no token spans, so the pieces'
counts add up to the whole text's count, in the memory of one piece (issue 24 item 8)."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.property_budget import examples
from trajectory_compressor.core import fidelity
from trajectory_compressor.counting import pieces as pieces_module
from trajectory_compressor.counting import tokens
from trajectory_compressor.counting.pieces import (
    Tiler,
    pieces,
    pieces_add_up,
    safe_cut,
    tiles_add_up,
)


@pytest.mark.parametrize(("text", "at", "expected"), [
    ("abc123", 3, True),      # letter | digit run
    ("123abc", 3, True),      # digit run | letter
    ("a 12", 2, True),        # space | digit run
    ("12.5", 2, True),        # digit | '.'
    ("1234", 2, False),       # inside a digit run: groups of three start at its start
    ("x١٢", 1, False),        # Arabic-Indic digits are not ASCII: no rule covers them
    ("a\nb", 2, True),        # after a line break, before a letter
    ("a\n#", 2, True),        # ... before punctuation
    ("a\n\nb", 2, False),     # between two line breaks: one whitespace run
    ("a\n b", 2, False),      # before a space: the space may join the line break
    ("word word", 4, True),   # word | space word
    ("word  word", 4, False), # two spaces: the first may join the word before
    ("word 1", 4, False),     # space before a digit: not the word rule
    ("w. word", 2, False),    # after punctuation
    ("ab", 0, False),         # never at the ends
    ("ab", 2, False),
])
def test_safe_cuts_by_hand(text, at, expected):
    assert safe_cut(text, at) is expected


def test_pieces_rejoin_to_the_text_and_cut_only_where_safe():
    text = "".join(f"line {i} of the log says ok\n" for i in range(500))
    parts = list(pieces(text, 300))
    assert "".join(parts) == text
    assert len(parts) > 20
    at = 0
    for part in parts[:-1]:
        at += len(part)
        assert safe_cut(text, at)
        assert len(part) <= 2 * 300


def test_a_short_text_is_one_piece_and_a_text_without_cuts_stays_whole():
    assert list(pieces("short", 300)) == ["short"]
    no_cut = "x" * 2_000  # one letter run: no safe cut anywhere
    assert list(pieces(no_cut, 300)) == [no_cut]


_ALPHABET = (string.ascii_letters + string.digits + " \n\t.,:;/\\-_()[]{}\"'=<>|#$%"
             + "éü中文😀\u00a0")


@settings(max_examples=examples(200), deadline=None)
@given(st.text(alphabet=_ALPHABET, min_size=0, max_size=3_000),
       st.integers(min_value=8, max_value=400))
def test_piece_counts_add_up_to_the_whole_with_the_bundled_tokenizer(counter, text, size):
    # The oracle is the tokenizer itself on the whole text.
    whole = len(counter.tokenizer.encode(text, add_special_tokens=False)) if text else 0
    parts = list(pieces(text, size))
    counted = sum(len(counter.tokenizer.encode(p, add_special_tokens=False)) for p in parts if p)
    assert counted == whole


def test_the_bundled_tokenizer_passes_its_own_check(counter):
    assert pieces_add_up(counter._encode_slice)


def test_a_tokenizer_whose_counts_do_not_add_up_fails_the_check():
    # A tokenizer that adds a token to every text (a prefix, a BOS it cannot be told to
    # leave out): its pieces would count one token per piece too many.
    assert not pieces_add_up(lambda texts: [len(t.split()) + 1 for t in texts])
    # One that splits words at no boundary the rules know (a count per character pair).
    assert not pieces_add_up(lambda texts: [(len(t) + 1) // 2 for t in texts])


def test_a_long_text_is_counted_in_pieces_with_the_whole_text_s_count(counter, monkeypatch):
    monkeypatch.setattr(tokens, "ENCODE_CHARS", 4_096)
    fresh = tokens.TokenCounter(counter.tokenizer, memo_size=0)
    text = "".join(f"2024-11-23 12:{i % 60:02d} step {i} loss=0.{i:04d} /data/shard-{i}.bin\n"
                   for i in range(1_500))  # about 90,000 characters: 22 pieces' worth
    assert len(text) > 8 * 4_096
    calls: list[int] = []
    real = fresh._encode_texts

    def recorded(texts):
        calls.append(max(len(t) for t in texts))
        return real(texts)

    monkeypatch.setattr(fresh, "_encode_texts", recorded)
    assert fresh.count(text) == len(counter.tokenizer.encode(text, add_special_tokens=False))
    assert calls and max(calls[1:]) <= 2 * 4_096 // tokens.PIECES_PER_CALL  # calls[0]: probe


def test_a_tokenizer_that_fails_the_check_counts_long_texts_whole(counter, monkeypatch):
    monkeypatch.setattr(tokens, "ENCODE_CHARS", 4_096)
    monkeypatch.setattr(tokens, "pieces_add_up", lambda count_many: False)
    fresh = tokens.TokenCounter(counter.tokenizer, memo_size=0)
    text = "word " * 5_000
    seen: list[int] = []
    real = fresh._encode_texts
    monkeypatch.setattr(fresh, "_encode_texts",
                        lambda texts: seen.append(len(texts[0])) or real(texts))
    assert fresh.count(text) == len(counter.tokenizer.encode(text, add_special_tokens=False))
    assert seen == [len(text)]


def test_the_probe_holds_every_kind_of_cut():
    cuts = {(pieces_module.PROBE[at - 1], pieces_module.PROBE[at])
            for at in range(1, len(pieces_module.PROBE)) if safe_cut(pieces_module.PROBE, at)}
    kinds = {("digit", "other") if a.isdigit() else ("other", "digit") if b.isdigit()
             else ("newline", "text") if a == "\n" else ("word", "space") for a, b in cuts}
    assert kinds == {("digit", "other"), ("other", "digit"), ("newline", "text"),
                     ("word", "space")}


# The fidelity extractor reads a long text a block at a time; the blocks must not change
# what it finds (blocks end at line breaks / white space, and no pattern crosses them).

def test_normalized_long_text_equals_the_one_pass_normalization(monkeypatch):
    monkeypatch.setattr(fidelity, "_BLOCK_CHARS", 64)
    text = "".join(f"Line {i}:\tＦＵＬＬＷＩＤＴＨ ‘quoted’  path/to/file_{i}.py \u00a0 end\n"
                   for i in range(200))
    import unicodedata
    expected_words = unicodedata.normalize("NFKC", text).casefold()
    expected_words = expected_words.translate(fidelity._QUOTE_CHARS)
    assert fidelity.normalize_text(text) == " ".join(expected_words.split())


def test_items_of_a_long_text_equal_those_found_in_one_pass(monkeypatch):
    text = "".join(f"Traceback line {i}: File \"/srv/app/mod_{i}.py\", line {i * 7}, in run\n"
                   f"KeyError: 'key_{i}' at https://example.com/api/v{i}/items 12.{i}ms\n"
                   for i in range(300))
    whole = list(fidelity._block_items(text))
    monkeypatch.setattr(fidelity, "_BLOCK_CHARS", 100)
    assert list(fidelity._free_text_items(text)) == whole
    assert len(whole) > 300


# Tiles (`counting.pieces.tiles`): how `TokenCounter.count_pairs` counts a turn from its
# distilled form and the pieces that differ. The oracle is the tokenizer on the whole text.

def _tokens(counter, text):
    return len(counter.tokenizer.encode(text, add_special_tokens=False)) if text else 0


@pytest.mark.parametrize(("text", "expected"), [
    ("word word", ["word", " word"]),                  # a letter run ends before a space
    ("abc123def", ["abc", "123", "def"]),              # digit runs stand alone
    ("x=1.5", ["x", "=1", ".5"]),                      # punctuation stays with what follows
    ("café ok. x", ["café ok", ". x"]),                # no end next to a non-ASCII letter
    ("a\u0301b c", ["a\u0301b", " c"]),                # ... nor before a combining mark
    ("1²3 x", ["1²3", " x"]),                          # ... nor next to a non-ASCII digit
    ("end.\n", ["end", ".\n"]),                        # trailing punctuation: the last tile
    ("say <think>hi</think> ok", ["say <think>hi</think> ok"]),  # an added token: whole
    ("<|EOT|>x y", ["<|EOT|>x y"]),
    ("<｜User｜>x y", ["<｜User｜>x", " y"]),            # no tile could end inside that one
])
def test_tiles_by_hand(counter, text, expected):
    tiler = counter._tiler()
    assert tiler is not None
    assert tiler(text) == expected


_TILE_ALPHABET = st.one_of(st.sampled_from(list(_ALPHABET + "\r\\\x1b\u27ea\u27eb\u00d7")),
                           st.sampled_from(["<think>", "</think>", "<|EOT|>", "<｜/table>｜",
                                            "<dsml:", "<｜User｜>", "\\n", "\\u001b[0m"]))


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(_TILE_ALPHABET, max_size=400).map("".join))
def test_tile_counts_add_up_to_the_whole_with_the_bundled_tokenizer(counter, text):
    parts = counter._tiler()(text)
    assert "".join(parts) == text
    assert sum(_tokens(counter, p) for p in parts) == _tokens(counter, text)


def test_count_pairs_equals_counting_both_texts_whole(counter):
    log = "".join(f"\x1b[32m2024-11-23 12:{i:02d} step {i} ok\x1b[0m\n" for i in range(60))
    pairs = [(log, log.replace("\x1b[32m", "").replace("\x1b[0m", "")),  # a few tiles differ
             ("<think>a b</think>" * 3, "⟪×3⟫ <think>a b</think>"),
             ("short", "a wholly different text, longer than the first")]  # counted whole
    fresh = tokens.TokenCounter(counter.tokenizer)
    assert fresh.count_pairs(pairs) == [(_tokens(counter, a), _tokens(counter, b))
                                        for a, b in pairs]
    # The tiles' counts come from their own memo: a second call agrees.
    assert fresh.count_pairs(pairs) == fresh.count_pairs(pairs[::-1])[::-1]


def test_count_pairs_encodes_the_edit_not_the_original(counter, monkeypatch):
    fresh = tokens.TokenCounter(counter.tokenizer)
    fresh._tiler()  # its probe checked before the calls are recorded
    before = "".join(f"line {i} of a long log that stays as it was\n" for i in range(300))
    after = "⟪×2⟫ dropped\n" + before[: len(before) // 2]
    seen: list[str] = []
    real = fresh._encode_texts
    monkeypatch.setattr(fresh, "_encode_texts", lambda texts: seen.extend(texts) or real(texts))
    [(n_before, n_after)] = fresh.count_pairs([(before, after)])
    assert (n_before, n_after) == (_tokens(counter, before), _tokens(counter, after))
    assert before not in seen and sum(map(len, seen)) < len(before)


def test_a_single_word_added_token_turns_tiles_off():
    # Its match depends on its neighbours: a cut next to it could change whether it is one.
    assert Tiler.of([("<x>", True)]) is None
    assert Tiler.of([("<x>", False)]) is not None


def test_a_tokenizer_whose_counts_do_not_add_up_over_tiles_fails_the_check(counter):
    assert not tiles_add_up(lambda texts: [len(t.split()) + 1 for t in texts], Tiler())
    assert tiles_add_up(counter._encode_slice, Tiler())


def test_a_tokenizer_without_tiles_counts_pairs_whole(counter, monkeypatch):
    monkeypatch.setattr(tokens, "tiles_add_up", lambda count_many, tiler: False)
    fresh = tokens.TokenCounter(counter.tokenizer)
    before, after = "a b c " * 50, "a b c " * 20
    seen: list[str] = []
    real = fresh._encode_texts
    monkeypatch.setattr(fresh, "_encode_texts", lambda texts: seen.extend(texts) or real(texts))
    assert fresh.count_pairs([(before, after)]) == [(_tokens(counter, before),
                                                     _tokens(counter, after))]
    assert before in seen
