"""`counting/tokens.py` unit by unit (issue 26, item 5, round 6): the counter's
statistics, its memo's generations, how a batch is sliced and a long text is cut into
tokenizer calls, the offline load, and the fallback for a batch the tokenizer refuses.

Expected values come from the module's comments and docstrings (`ENCODE_CHARS`:
"Characters encoded per tokenizer call", 2 ** 20; `PIECES_PER_CALL`: "A long text's
pieces encoded per call", 4; the memo "holds at most ``2 * memo_size`` entries, and the
new texts of one call"), from BENCHMARKS.md (the memo: "two generations of at most
65,536 entries"; "`encoded_texts` still counts each copy that missed the memo") and the
README ("A text the tokenizer cannot encode never gets a guessed count"; "a lone
surrogate ... is counted as U+FFFD"), worked out by hand.

Real components: the bundled DeepSeek tokenizer (its `tokenizers` backend), behind a
recording wrapper where the test is about which texts reach the tokenizer in which call.
A line of 64 hyphens and a line break is 2 tokens (a hyphen run is one pre-token, so
counts of such lines add up) and cheap to encode: a megabyte of it takes a fifth of a
second.
"""

from __future__ import annotations

from typing import Any

import pytest

from trajectory_compressor.counting import tokens as tokens_module
from trajectory_compressor.counting.tokens import (
    BPE_CACHE_WORDS,
    TokenCounter,
    load_bundled_backend,
    load_tokenizer,
)

LINE = "-" * 64 + "\n"  # 65 characters, 2 tokens


@pytest.fixture(scope="module")
def backend() -> Any:
    return load_bundled_backend()


class _Recording:
    """The bundled backend, recording the lengths of the texts of every call."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.calls: list[list[int]] = []
        self.texts: list[list[str]] = []

    def encode_batch_fast(self, texts: list[str], add_special_tokens: bool) -> Any:
        self.calls.append([len(t) for t in texts])
        self.texts.append(list(texts))
        return self.backend.encode_batch_fast(texts, add_special_tokens=add_special_tokens)

    encode_batch = encode_batch_fast


def test_a_line_of_hyphens_is_two_tokens(backend: Any) -> None:
    # The premise of the hand-worked counts below.
    counter = TokenCounter(backend=backend)
    assert counter.count_many([LINE, LINE * 3]) == [2, 6]


# -- the counter's statistics -----------------------------------------------------------------


def test_a_new_counter_has_encoded_nothing_and_hit_nothing(backend: Any) -> None:
    counter = TokenCounter(backend=backend)
    assert (counter.encoded_texts, counter.memo_hits, counter.memo_entries) == (0, 0, 0)


def test_each_copy_that_missed_the_memo_is_an_encoded_text_the_others_are_hits(
        backend: Any) -> None:
    counter = TokenCounter(backend=backend)
    # alpha twice and beta: three copies not in the memo when asked for, no hit.
    counter.count_many(["alpha", "beta", "alpha"])
    assert (counter.encoded_texts, counter.memo_hits) == (3, 0)
    # alpha is remembered (a hit), gamma is new (encoded).
    counter.count_many(["alpha", "gamma"])
    assert (counter.encoded_texts, counter.memo_hits) == (4, 1)
    # All remembered: two more hits, nothing encoded.
    counter.count_many(["beta", "gamma"])
    assert (counter.encoded_texts, counter.memo_hits) == (4, 3)


def test_an_empty_text_is_zero_tokens_without_asking_the_tokenizer(backend: Any) -> None:
    record = _Recording(backend)
    counter = TokenCounter(backend=record)
    assert counter.count_many(["", LINE, ""]) == [0, 2, 0]
    assert record.texts == [[LINE]]
    assert counter.encoded_texts == 1


# -- the memo's generations -------------------------------------------------------------------


def test_the_default_memo_retires_a_generation_past_65536_entries(backend: Any) -> None:
    # BENCHMARKS.md: two generations of at most 65,536 entries. A call's new texts go into
    # the current generation; once it holds more than 65,536 it becomes the old one, and
    # the old one before it is forgotten. 65,537 texts, then 65,537 others: the first
    # call's texts are retired, then forgotten when the second's are retired.
    counter = TokenCounter(backend=backend)
    first = [f"a{i}" for i in range(65_537)]
    second = [f"b{i}" for i in range(65_537)]
    counter.count_many(first)
    assert counter.memo_entries == 65_537
    counter.count_many(second)
    assert counter.memo_entries == 65_537  # the first call's texts are forgotten
    assert counter.memo_entries <= 2 * 65_536


def test_a_call_with_more_new_texts_than_a_generation_holds_is_kept_whole(
        backend: Any) -> None:
    # TokenCounter: at most 2 * memo_size entries, and the new texts of one call. With
    # memo_size 4: ten new texts are retired as one generation of ten; three more are the
    # current one (13 = 2 * 4 + 5 < 2 * 4 + 10); three more retire the ten.
    counter = TokenCounter(backend=backend, memo_size=4)
    counter.count_many([f"t{i}" for i in range(10)])
    assert counter.memo_entries == 10
    counter.count_many([f"u{i}" for i in range(3)])
    assert counter.memo_entries == 13
    counter.count_many([f"v{i}" for i in range(3)])
    assert counter.memo_entries == 6
    # The ten are forgotten: counting them again encodes them again.
    encoded = counter.encoded_texts
    counter.count_many([f"t{i}" for i in range(10)])
    assert counter.encoded_texts == encoded + 10


# -- the backend's own cache ------------------------------------------------------------------


class _Model:
    """A BPE model's cache control, recording the sizes it is set to."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def _resize_cache(self, words: int) -> None:
        self.sizes.append(words)


class _WithModel(_Recording):
    def __init__(self, backend: Any) -> None:
        super().__init__(backend)
        self.model = _Model()


def test_the_bpe_cache_is_made_smaller_once_when_the_model_can(backend: Any) -> None:
    # tokens.py: a BPE model caches up to 10,000 words by default; the counter sets it to
    # BPE_CACHE_WORDS (2,048) so that memory does not follow the amount of text seen.
    record = _WithModel(backend)
    counter = TokenCounter(backend=record)
    assert BPE_CACHE_WORDS == 2048
    assert record.model.sizes == [2048]
    assert counter.count(LINE) == 2


# -- loading ----------------------------------------------------------------------------------


def test_a_counter_is_named_after_its_tokenizer(backend: Any) -> None:
    assert TokenCounter.load().name == "deepseek-v4"
    assert TokenCounter(backend=backend, name="my-model").name == "my-model"
    assert TokenCounter(backend=backend).name == ""


def test_the_bundled_tokenizer_loads_without_transformers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # load_bundled_backend: the bundled tokenizer's `tokenizers` object is loaded directly,
    # skipping about a second of importing transformers; only other tokenizers go through
    # it (load_tokenizer).
    def through_transformers(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the bundled tokenizer went through transformers")

    monkeypatch.setattr(tokens_module, "load_tokenizer", through_transformers)
    counter = TokenCounter.load()
    assert counter.count(LINE) == 2


@pytest.mark.parametrize("before", [False, True])
def test_the_hub_offline_setting_is_put_back_after_a_load(
        before: bool, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # load_tokenizer makes huggingface_hub believe it is offline for the load only: the
    # process's own setting is as it was afterwards, when the load failed too.
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", before)
    with pytest.raises(tokens_module.TokenizerError):
        load_tokenizer(str(tmp_path / "no-such-folder"))
    assert constants.HF_HUB_OFFLINE is before


def test_a_tokenizer_is_asked_for_local_files_only(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # load_tokenizer: "never fetched from a hub". Two guards: transformers is told to use
    # local files only, and huggingface_hub believes it is offline during the load; the
    # first must hold on its own (a transformers release that stops forcing
    # local_files_only in offline mode would otherwise ask the hub).
    from transformers import AutoTokenizer

    asked: list[dict[str, Any]] = []
    load = AutoTokenizer.from_pretrained

    def recording(*args: Any, **kwargs: Any) -> Any:
        asked.append(kwargs)
        return load(*args, **kwargs)

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", recording)
    with pytest.raises(tokens_module.TokenizerError):
        load_tokenizer(str(tmp_path / "no-such-folder"))
    assert asked == [{"local_files_only": True, "trust_remote_code": False}]


# -- slices of a batch ------------------------------------------------------------------------


def test_a_batch_is_encoded_in_slices_of_at_most_2_to_the_20_characters(backend: Any) -> None:
    # ENCODE_CHARS = 1 << 20 characters per call, filled up to exactly that: texts of
    # 2 ** 19 characters go two to a call, a third in the next. 8,065 lines of 65
    # characters and 63 more make 2 ** 19 = 524,288.
    half = LINE * 8065 + "-" * 63
    assert len(half) == 2 ** 19
    record = _Recording(backend)
    counter = TokenCounter(backend=record)
    # Distinct texts, or the memo would encode one copy only.
    texts = [half, "=" + half[1:], "+" + half[1:]]
    counts = counter.count_many(texts)
    assert record.calls == [[2 ** 19, 2 ** 19], [2 ** 19]]
    assert counts == [TokenCounter(backend=backend).count(t) for t in texts]


# -- a long text in pieces --------------------------------------------------------------------


def test_a_long_text_is_cut_into_pieces_encoded_four_to_a_call(backend: Any) -> None:
    # A text over ENCODE_CHARS (2 ** 20) is cut into pieces of about 2 ** 20 / 4 = 262,144
    # characters (PIECES_PER_CALL = 4), each cut at the allowed cut nearest that size
    # looking back: in lines of 65 characters, after a line break (before a hyphen,
    # counting.pieces), so at multiples of 65: 262,144 = 4,032 x 65 + 64, a piece is
    # 262,080 characters. 16,132 lines are 1,048,580 characters: four pieces (1,048,320)
    # and 260 left. The four go in one call, the rest in the next, after the probe call
    # that checks the tokenizer's counts add up.
    record = _Recording(backend)
    counter = TokenCounter(backend=record)
    text = LINE * 16_132
    assert len(text) == 1_048_580 > 2 ** 20
    assert counter.count(text) == 16_132 * 2
    assert record.calls[1:] == [[262_080] * 4, [260]]


# -- a batch the tokenizer refuses ------------------------------------------------------------


class _Short:
    """A backend that leaves out the last text's encoding."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def encode_batch_fast(self, texts: list[str], add_special_tokens: bool) -> Any:
        return self.backend.encode_batch_fast(texts, add_special_tokens=add_special_tokens)[:-1]

    encode_batch = encode_batch_fast


def test_a_backend_that_answers_for_fewer_texts_is_an_error_not_a_zero(backend: Any) -> None:
    # README: a text the tokenizer cannot encode never gets a guessed count; a count of 0
    # for the text a backend left out would be one.
    counter = TokenCounter(backend=_Short(backend))
    with pytest.raises(ValueError):
        counter.count_many(["alpha", "beta"])


def test_after_a_refused_batch_each_text_is_encoded_once_alone(backend: Any) -> None:
    # "one bad text must not cost the whole batch": the batch with a lone surrogate fails;
    # then each text is encoded alone, once, and the bad one once more with U+FFFD (README:
    # counted as U+FFFD).
    record = _Recording(backend)
    counter = TokenCounter(backend=record)
    counts = counter.count_many([LINE, "x\ud800", LINE * 2])
    assert counts == [2, counter.count("x\ufffd"), 4]
    assert record.texts[:5] == [[LINE, "x\ud800", LINE * 2], [LINE], ["x\ud800"],
                                ["x\ufffd"], [LINE * 2]]
