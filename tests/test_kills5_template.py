"""Round 5 of the mutation kills (issue 26, item 5): `counting/template.py`, the survivors
of a whole-module pass whose covering tests were the slow ones of test_template_counting.py.

Expected values come from the module docstring (the anchor and block-start algorithm; the
shares add up to ``apply_chat_template``'s exact total; the generation prompt goes to the
head), the docstrings and comments of the functions (`_header_start`, `_marker_tokens`,
`_plain_backend`, `require_jinja2`, the constants' comments) and transformers' documented
``apply_chat_template``, worked out by hand.

Real components, and fast: a transformers fast tokenizer built in memory on a `tokenizers`
WordLevel model that makes one token of every character (every block's count is then its
length in characters, and any cut adds up), with ``<|endoftext|>`` (the EOS of GPT-2 and
Qwen) as its one added token; chat templates written for each test. The pure functions of
the block search (`_pieces`, `_block_starts`, `_header_start`) are called on texts written
out by hand, where each expected cut is counted character by character in the docstring.
"""

from __future__ import annotations

import hashlib
import sys
import types
from typing import Any

import pytest

from trajectory_compressor.counting import template as template_module
from trajectory_compressor.counting.template import (
    SEARCH_ALLOWANCE,
    ChatTemplateError,
    TemplateCounter,
    _block_starts,
    _header_start,
    _marker_tokens,
    _pieces,
    _plain_backend,
    _special_veto,
)

EOS = "<|endoftext|>"


def _char_tokenizer(cls: Any = None) -> Any:
    """A transformers fast tokenizer: one token per character, ``EOS`` one added token."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    return (cls or PreTrainedTokenizerFast)(tokenizer_object=raw, eos_token=EOS)


@pytest.fixture(scope="module")
def chars() -> Any:
    tok = _char_tokenizer()
    assert tok("ab" + EOS, add_special_tokens=False)["input_ids"] == [0, 0, 1]  # as said
    return tok


def _counter(tok: Any, template: str, **kwargs: Any) -> TemplateCounter:
    return TemplateCounter(tok, template, **kwargs)


# -- the message's own text (anchors) --------------------------------------------------------


def test_a_message_s_own_text_ends_with_its_tool_calls_names_and_string_arguments():
    """Module docstring, 1.: a message's own text is its content "then its tool calls'
    names and string arguments", OpenAI's nested ``function`` or a flat call alike;
    arguments given as an object are not text of the message, and what is not a call
    (not a dict, a ``function`` that is not a dict) adds nothing."""
    message = {"role": "assistant", "content": "Checking both.", "tool_calls": [
        "not a call",
        {"id": "c1", "type": "function",
         "function": {"name": "terminal", "arguments": '{"command": "ls -la"}'}},
        {"name": "read_file", "arguments": {"path": "a.py"}},
        {"id": "c3", "function": "grep"},
    ]}
    assert _pieces(message) == ["Checking both.", "terminal", '{"command": "ls -la"}',
                                "read_file"]
    only_calls = {"role": "assistant", "content": None,
                  "tool_calls": [{"function": {"name": "terminal", "arguments": "{}"}}]}
    assert _pieces(only_calls) == ["terminal", "{}"]


def test_a_message_s_own_text_starts_with_its_reasoning():
    """Module docstring, 1.: a message's own text is its reasoning, then its content; the
    reasoning is under the first of the keys transformers reads (``reasoning_content``,
    ``thinking``, ``reasoning``) that holds one."""
    assert _pieces({"role": "assistant", "reasoning_content": "Let me think.",
                    "content": "Done."}) == ["Let me think.", "Done."]
    assert _pieces({"role": "assistant", "reasoning_content": None, "thinking": "Hmm.",
                    "content": "Done."}) == ["Hmm.", "Done."]
    assert _pieces({"role": "assistant", "content": "Done."}) == ["Done."]


def test_the_first_message_is_searched_for_from_the_start_of_the_rendering():
    """A template that writes the first message's text at the very start: it is found at
    0, and the next block starts after the white space that closes it (docstring, 2.).
    "Alpha\\n" is 6 characters."""
    text = "Alpha\nBravo"
    messages = [{"role": "user", "content": "Alpha"}, {"role": "assistant", "content": "Bravo"}]
    assert _block_starts(text, messages, len(text), SEARCH_ALLOWANCE, [], "") == [0, 6]


def test_the_search_window_before_any_anchor_is_the_messages_text_plus_the_allowance():
    """Docstring, 1.: a search looks "only as far as the text of the messages since the
    last anchor plus an allowance". Here the first message (empty) has no anchor, so the
    second's search runs from 0 to 0 + 5 ("Bravo") + the allowance. The text is
    "assistant\\n" twice (0-9, 10-19) then "Bravo" at 20-25: with an allowance of 20 the
    window is [0, 25) and holds it, the block starting at the last mention of its role
    before it (the line at 10); with 19 it does not (window [0, 24)): no anchor, and the
    block starts at the first mention of the role (docstring, 3.), at 0."""
    text = "assistant\nassistant\nBravo"
    messages = [{"role": "user", "content": ""}, {"role": "assistant", "content": "Bravo"}]
    assert _block_starts(text, messages, len(text), 20, [], "") == [0, 10]
    assert _block_starts(text, messages, len(text), 19, [], "") == [0, 0]


# -- block starts --------------------------------------------------------------------------


def test_a_message_without_an_anchor_looks_for_its_header_only_up_to_the_next_anchor():
    """Docstring, 3.: a message with no anchor starts at the first mention of a role
    after the previous block; that mention must lie before the next message's anchor
    (between two anchors lie the end of one block and the header of the next). Here the
    template dropped the empty assistant turn: between "Alpha" (0-5) and "Bravo" (7-12)
    lies only "\\n\\n", which names no role, so its block starts after that white space,
    at 7, and is empty; the "assistant" at 13 is the fourth message's header ("Charlie"
    at 24), which starts there (its line)."""
    text = "Alpha\n\nBravo\nassistant: Charlie"
    messages = [{"role": "user", "content": "Alpha"}, {"role": "assistant", "content": ""},
                {"role": "user", "content": "Bravo"},
                {"role": "assistant", "content": "Charlie"}]
    assert text.index("Bravo") == 7 and text.index("assistant") == 13
    assert _block_starts(text, messages, len(text), SEARCH_ALLOWANCE, [], "") == [0, 7, 7, 13]


def test_the_last_anchor_bounds_the_search_of_the_message_before_it():
    """As above, the message without an anchor next to last: its header is looked for
    only up to the last message's anchor ("Bravo", 7-12), so the "assistant" after it
    (at 13) is not its header: its block starts after the white space at 7 and is
    empty, and "Bravo"'s block starts there too."""
    text = "Alpha\n\nBravo\nassistant"
    messages = [{"role": "user", "content": "Alpha"}, {"role": "assistant", "content": ""},
                {"role": "user", "content": "Bravo"}]
    assert _block_starts(text, messages, len(text), SEARCH_ALLOWANCE, [], "") == [0, 7, 7]


def test_a_last_message_without_an_anchor_looks_for_its_header_up_to_the_tail():
    """The last message, empty (no anchor): no anchor follows it, so its header is looked
    for up to the tail (within its text plus the allowance): the "assistant" line at 6."""
    text = "Alpha\nassistant\n"
    messages = [{"role": "user", "content": "Alpha"}, {"role": "assistant", "content": ""}]
    assert _block_starts(text, messages, len(text), SEARCH_ALLOWANCE, [], "") == [0, 6]


def test_the_next_anchor_bounds_the_search_from_its_start_not_its_end():
    """As above: the header of a message without an anchor lies before the next
    message's anchor, not within it. "Bravo is the assistant" (7-29) names a role in the
    user's own text; the empty assistant turn between gets only the white space (7), and
    the user's block starts there too."""
    text = "Alpha\n\nBravo is the assistant\n"
    messages = [{"role": "user", "content": "Alpha"}, {"role": "assistant", "content": ""},
                {"role": "user", "content": "Bravo is the assistant"}]
    assert _block_starts(text, messages, len(text), SEARCH_ALLOWANCE, [], "") == [0, 7, 7]


def test_two_messages_without_anchors_are_both_bound_by_the_next_anchor():
    """Two empty assistant turns the template dropped, then "Bravo" (7-12): each looks for
    its header only up to "Bravo" (docstring, 3.), so neither takes the "assistant" after
    it (13); both blocks are empty, at 7."""
    text = "Alpha\n\nBravo\nassistant"
    messages = [{"role": "user", "content": "Alpha"}, {"role": "assistant", "content": ""},
                {"role": "assistant", "content": ""}, {"role": "user", "content": "Bravo"}]
    assert _block_starts(text, messages, len(text), SEARCH_ALLOWANCE, [], "") == [0, 7, 7, 7]


def test_each_block_starts_after_the_previous_message_s_text():
    """Three blocks with no role named: each starts after what closes the previous one
    (docstring, 2.), i.e. after the previous message's own text and its line break:
    "Alpha\\n" (0-6), "Bravo\\n" (6-12), "Charlie" (12-)."""
    text = "Alpha\nBravo\nCharlie"
    messages = [{"role": "user", "content": "Alpha"}, {"role": "assistant", "content": "Bravo"},
                {"role": "assistant", "content": "Charlie"}]
    assert _block_starts(text, messages, len(text), SEARCH_ALLOWANCE, [], "") == [0, 6, 12]


def test_a_header_taken_by_a_message_without_an_anchor_is_not_taken_again():
    """An empty assistant message (no anchor) takes the first mention of its role after
    the previous block, the line "assistant" at 6 (docstring, 3.); the next assistant
    message's block starts after that header, past the white space closing it, at 16,
    and not at the same header again."""
    text = "Alpha\nassistant\nCharlie"
    messages = [{"role": "user", "content": "Alpha"}, {"role": "assistant", "content": ""},
                {"role": "assistant", "content": "Charlie"}]
    assert text.index("Charlie") == 16
    assert _block_starts(text, messages, len(text), SEARCH_ALLOWANCE, [], "") == [0, 6, 16]


def test_a_header_tag_before_the_role_name_starts_the_block():
    """Docstring, 2.: the block starts at the tag holding the role name
    (``<|start_header_id|>user``), here a tag that is no added token of the tokenizer:
    "Alpha\\n" is 0-6, "xx" 6-8, the tag "<|turn|>" 8-16, "user" 16-20."""
    text = "Alpha\nxx<|turn|>user\nBravo"
    assert _header_start(text, 5, text.index("Bravo"), "user", [], "", last=True) == (8, 20)


def test_a_role_name_inside_a_tag_starts_the_block_at_the_tag():
    """Docstring, 2.: a role written inside a tag (``<｜User｜>``) that is no added token:
    the block starts at its "<" (8), the name "User" spans 10-14."""
    text = "Alpha\nxx<｜User｜>Bravo"
    assert _header_start(text, 5, text.index("Bravo"), "user", [], "", last=True) == (8, 14)


def test_an_added_token_that_is_only_the_role_name_does_not_hide_the_header_tag():
    """Docstring, 2.: the block starts at the special token, tag or line holding the
    role name. An added token that is the name itself (a vocabulary with a "user"
    token, which a template writing ``role == 'user'`` contains) holds nothing more: the
    header tag before it, "<|turn|>" at 8, starts the block, as without that token."""
    text = "Alpha\nxx<|turn|>user\nBravo"
    hi = text.index("Bravo")
    assert _header_start(text, 5, hi, "user", ["user"], "", last=True) == (8, 20)


def test_a_special_token_before_the_role_name_counts_only_within_the_search():
    """`_header_start` looks in text[lo:hi]: a special token before the role name that
    begins before ``lo`` (inside the previous message's text, which ends with it here:
    "Alpha <|im_start|>", 0-18) is not this block's start; the block starts at the name,
    at 18 (no line break, no tag within the search)."""
    text = "Alpha <|im_start|>user\nBravo"
    hi = text.index("Bravo")
    assert _header_start(text, 18, hi, "user", ["<|im_start|>"], "", last=True) == (18, 22)


def test_a_special_token_holding_the_role_name_after_one_character_starts_the_block():
    """Docstring, 2.: the block starts at the special token holding the role name, here
    an added token "[user]" (at 8, the name at 9-13), not at the line (6)."""
    text = "Alpha\nxx[user]Bravo"
    hi = text.index("Bravo")
    assert _header_start(text, 5, hi, "user", ["[user]"], "", last=True) == (8, 13)


def test_a_header_on_the_rendering_s_first_line_break_starts_after_it():
    """The line holding the role name starts after the line break before it, also the
    one at 0: "\nxx user" names "user" at 4-8 on the line that starts at 1."""
    text = "\nxx user\nBravo"
    assert _header_start(text, 0, text.index("Bravo"), "user", [], "", last=True) == (1, 8)


def test_the_longest_header_tag_the_pattern_accepts_is_found_before_the_role():
    """Docstring, 2.: the block starts at the tag holding the role name. `_TAG_BEFORE`
    accepts a tag of up to 50 characters (``<`` + 48 + ``>``, ``<|`` + 46 + ``|>`` or
    ``<｜`` + 46 + ``｜>``); one of 50 and one of 49 right before "user" start the block
    (at 8, after "xx"), not the line (at 6)."""
    for tag in ("<" + "h" * 48 + ">", "<|" + "h" * 46 + "|>", "<｜" + "h" * 46 + "｜>",
                "<" + "h" * 47 + ">"):
        text = "Alpha\nxx" + tag + "user\nBravo"
        hi = text.index("Bravo")
        assert _header_start(text, 5, hi, "user", [], "", last=True) == (8, 8 + len(tag) + 4)


def test_an_eos_that_is_no_closing_tag_is_skipped_before_a_block_with_no_header():
    """Docstring, 2.: with no role named, the block starts after what closes the previous
    one, EOS first: ``<|endoftext|>`` (13 characters, 5-18) reads as no end-of-turn tag
    (its "end" runs on into "oftext"), yet it is the tokenizer's EOS."""
    # Only an EOS that is there is skipped: here the line break closes the block.
    assert _header_start("Alpha\nBravo", 5, 6, "assistant", [], EOS, last=True) == (6, 5)
    text = "Alpha" + EOS + "Bravo"
    assert _header_start(text, 5, 18, "assistant", [], EOS, last=True) == (18, 5)
    assert _header_start(text, 5, 18, "assistant", [], "", last=True) == (5, 5)


def test_the_tokenizer_s_eos_ends_a_turn_in_the_per_message_counts(chars):
    """A template that ends every turn with the EOS and names no role: each message's
    block is its text and its EOS (one token a character, one for the EOS: 6 each), as
    the shares of ``apply_chat_template``'s total (12)."""
    counter = _counter(chars, "{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}")
    messages = [{"role": "user", "content": "Alpha"}, {"role": "assistant", "content": "Bravo"}]
    assert counter.count_total(messages) == 12
    assert counter.count_messages(messages) == [6, 6]


# -- the generation prompt -------------------------------------------------------------------

PROMPT_UNLESS_ANSWERED = (
    "{% for m in messages %}[{{ m.role }}]{{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt and messages[-1].role != 'assistant' %}[assistant]{% endif %}")


def test_a_generation_prompt_the_template_left_out_takes_nothing_from_the_last_message(chars):
    """A template that writes the generation prompt ("[assistant]", 11 characters) only
    after a turn that awaits an answer. The prompt goes to the head (docstring); a row
    ending with the assistant's turn has none, and its last message keeps its whole
    block: "[user]Alpha\\n" is 12 tokens, "[assistant]Bravo is the answer\\n" 31."""
    counter = _counter(chars, PROMPT_UNLESS_ANSWERED, add_generation_prompt=True)
    answered = [{"role": "user", "content": "Alpha"},
                {"role": "assistant", "content": "Bravo is the answer"}]
    assert counter.count_total(answered) == 43
    assert counter.count_messages(answered) == [12, 31]
    assert counter.count_messages(answered[:1]) == [12 + 11]


# -- the search allowance and tools ------------------------------------------------------


def _two_blocks(gap: int) -> tuple[str, list[dict[str, str]]]:
    """"Alpha" ends at 10; "Bravo" lies ``gap`` characters past it, its role named right
    after "Alpha" (line at 11) and again on the line just before it (at 10 + gap - 10)."""
    messages = [{"role": "user", "content": "Alpha"}, {"role": "assistant", "content": "Bravo"}]
    between = "\nassistant\n" + "." * (gap - 22) + "\nassistant\n"
    assert len(between) == gap
    return "user\nAlpha" + between + "Bravo\n" + "." * 100, messages


def test_an_empty_tools_list_widens_the_search_no_more_than_no_tools(chars):
    """transformers passes ``tools=[]`` to the template, where it is false like no tools
    (``{% if tools %}``): no tools block, so no room added to the search. "Bravo" 4,097
    characters past "Alpha" lies beyond 4,096 (`SEARCH_ALLOWANCE`) as without tools: no
    anchor, and its block starts at the first mention of its role (the line at 11)."""
    counter = _counter(chars, "{{ messages }}")
    text, messages = _two_blocks(4097)
    assert counter.block_starts(text, messages, None) == ([0, 11], len(text))
    assert counter.block_starts(text, messages, []) == ([0, 11], len(text))
    near, _ = _two_blocks(4096)
    assert counter.block_starts(near, messages, []) == ([0, 4096], len(near))


@pytest.mark.parametrize("name, room", [("function", 4140), ("función", 4138)])
def test_tools_widen_the_search_by_twice_their_json(chars, name, room):
    """Comment of `SEARCH_ALLOWANCE`: the room is 4,096 characters plus twice the tools'
    JSON (a template may write it indented). ``[{"type": "function"}]`` is 22 characters
    (counted: brackets 2, braces 2, "type" 6, colon and space 2, "function" 10), so the
    room is 4,096 + 44 = 4,140: "Bravo" 4,140 characters past "Alpha" is found (its
    block starts on the line before it, at 4,140), 4,141 past is not (the line at 11).
    The JSON is measured as transformers' ``tojson`` writes it, non-ASCII characters as
    they are (``ensure_ascii=False``): ``[{"type": "función"}]`` is 21 characters, so
    the room is 4,096 + 42 = 4,138."""
    counter = _counter(chars, "{{ messages }}")
    tools = [{"type": name}]
    near, messages = _two_blocks(room)
    assert counter.block_starts(near, messages, tools) == ([0, room], len(near))
    far, _ = _two_blocks(room + 1)
    assert counter.block_starts(far, messages, tools) == ([0, 11], len(far))


TOOLS_BETWEEN_TURNS = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>\n"
    "{% if loop.first and tools %}## Tools\n{{ tools | tojson }}\n{% endif %}{% endfor %}")


def test_a_long_tools_block_between_two_turns_is_searched_past(chars):
    """Comment of `SEARCH_ALLOWANCE`: the allowance is room for the template's own text
    between two messages, a tools block among it. A template that writes the tools after
    the system turn, their JSON longer than 4,096 characters: the user's text is found
    past them all the same, and each block starts at the tag holding its role name
    (docstring, 2.), so the tools go to the head (docstring: the tools block goes to the
    first message); the shares are the blocks' lengths (one token a character)."""
    tools = [{"type": "function", "function": {
        "name": "calendar", "description": "Reads a date. " + "d" * 5000}}]
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Which day is it?"},
                {"role": "assistant", "content": "Tuesday."}]
    counter = _counter(chars, TOOLS_BETWEEN_TURNS)
    text = counter.render(messages, tools)
    user, assistant = text.index("<user>"), text.index("<assistant>")
    assert text.index("## Tools") < user and user - text.index("## Tools") > 5000
    assert counter.block_starts(text, messages, tools) == ([0, user, assistant], len(text))
    assert counter.count_messages(messages, tools) == [
        user, assistant - user, len(text) - assistant]
    assert assistant - user == len("<user>Which day is it?</user>\n")


# -- tokenizing ------------------------------------------------------------------------------


def test_a_tokenizer_class_with_its_own_call_is_counted_through_it():
    """`_plain_backend`: a class that overrides the encoding path (to pre-process text)
    is used through its own ``__call__``: totals and per-message counts come from it (one
    token a character: "<a>Alpha\\n" 9, "<b>Bravo\\n" 9)."""
    from transformers import PreTrainedTokenizerFast

    class Preprocessing(PreTrainedTokenizerFast):
        calls = 0

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            type(self).calls += 1
            return super().__call__(*args, **kwargs)

    tok = _char_tokenizer(Preprocessing)
    counter = _counter(tok, "{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}")
    assert _plain_backend(tok) is None
    messages = [{"role": "a", "content": "Alpha"}, {"role": "b", "content": "Bravo"}]
    assert counter.count_total(messages) == 18
    assert counter.count_messages(messages) == [9, 9]
    assert Preprocessing.calls == 2


def test_a_plain_fast_tokenizer_is_encoded_by_its_backend_not_its_python_call(monkeypatch):
    """Module docstring: a rendering is tokenized by "the fast backend's ``encode_batch``"
    (totals by ``encode_batch_fast``), the settings a plain ``tokenizer(text)`` call would
    make set on the backend: the tokenizer's own (Python) call, which only leads there,
    is never made. A spy in the fast class's ``__call__`` (the class's own, so the
    tokenizer still counts as plain) sees no call."""
    from transformers import PreTrainedTokenizerFast

    tok = _char_tokenizer()
    counter = _counter(tok, "{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}")
    real = PreTrainedTokenizerFast.__call__
    calls: list[int] = []

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(PreTrainedTokenizerFast, "__call__", spy)
    assert _plain_backend(tok) is tok.backend_tokenizer
    messages = [{"role": "user", "content": "Alpha"}, {"role": "assistant", "content": "Bravo"}]
    assert counter.count_total(messages) == 12
    assert counter.count_messages(messages) == [6, 6]
    assert calls == []
    assert len(tok("Alpha")["input_ids"]) == 5 and calls == [1]  # the spy does see calls


def test_only_an_instance_of_the_fast_tokenizer_class_is_encoded_through_its_backend():
    """`_plain_backend` hands out the backend only for what ``tokenizer(text)`` is known
    to reduce to its ``encode_batch``: an instance of transformers' fast tokenizer class
    that overrides none of its encoding path. An object of another class is called
    itself, even one that carries that class's own encoding methods and a backend."""
    from transformers import PreTrainedTokenizerFast as fast

    names = ("__call__", "_call_one", "encode_plus", "batch_encode_plus", "_encode_plus",
             "_batch_encode_plus", "set_truncation_and_padding")
    lookalike = type("Lookalike", (), {n: getattr(fast, n) for n in names if hasattr(fast, n)})
    obj = lookalike()
    obj.backend_tokenizer = _char_tokenizer().backend_tokenizer
    assert _plain_backend(obj) is None


def test_a_long_rendering_is_encoded_four_pieces_at_a_time(chars, monkeypatch):
    """Comments of `ENCODE_CHARS` and `PIECES_PER_CALL` (4): a rendering longer than
    ENCODE_CHARS is encoded "a few pieces at a time", pieces of about a quarter of it
    (at most half: `pieces` cuts within twice the size), never all at once. With
    ENCODE_CHARS at 4,096 a 40,000-character rendering makes tens of pieces: every call
    but the last takes four; the count is the rendering's, one token a character."""
    monkeypatch.setattr(template_module, "ENCODE_CHARS", 4096)
    counter = _counter(chars, "{% for m in messages %}{{ m.content }}{% endfor %}")
    calls: list[list[int]] = []
    real = counter._encode_starts
    monkeypatch.setattr(counter, "_encode_starts",
                        lambda batch: calls.append([len(p) for p in batch]) or real(batch))
    messages = [{"role": "user", "content": "word " * 8000}]
    assert counter.count_total(messages) == 40000  # totals go in pieces too
    assert counter.count_messages(messages) == [40000]
    assert sum(map(sum, calls)) == 40000
    assert len(calls) >= 5
    assert all(len(batch) == 4 for batch in calls[:-1]) and 1 <= len(calls[-1]) <= 4
    assert max(map(max, calls)) <= 2 * 4096 // 4


def test_no_cut_lies_within_sixteen_characters_of_an_added_token(chars):
    """Comment of `SPECIAL_MARGIN` (16): characters on each side of a cut in which no
    added token may lie. EOS spans 40-53 here: cuts from 24 to 69 are vetoed, 23 and
    70 are not."""
    near = _special_veto(chars)
    assert near is not None
    text = "x" * 40 + EOS + "y" * 40
    assert [near(text, at) for at in (23, 24, 69, 70)] == [False, True, True, False]


def test_a_rendering_of_exactly_encode_chars_is_encoded_whole(chars, monkeypatch):
    """Comment of `ENCODE_CHARS`: only a rendering *longer* than it goes in pieces; one of
    exactly ENCODE_CHARS characters (4,096 here) is encoded in one call, whole."""
    monkeypatch.setattr(template_module, "ENCODE_CHARS", 4096)
    counter = _counter(chars, "{% for m in messages %}{{ m.content }}{% endfor %}")
    calls: list[list[int]] = []
    real = counter._encode_starts
    monkeypatch.setattr(counter, "_encode_starts",
                        lambda batch: calls.append([len(p) for p in batch]) or real(batch))
    assert counter.count_messages([{"role": "user", "content": "word " * 819 + "w"}]) == [4096]
    assert calls == [[4096]]


def test_renderings_are_encoded_about_encode_chars_characters_a_call(chars, monkeypatch):
    """Comment of `ENCODE_CHARS`: the characters rendered per tokenizer call, at most. With
    it at 100, ten 25-character rows go four to a call (100 characters, not more), the
    last call taking the two left; each row's total is its length."""
    monkeypatch.setattr(template_module, "ENCODE_CHARS", 100)
    counter = _counter(chars, "{% for m in messages %}{{ m.content }}{% endfor %}")
    calls: list[list[int]] = []
    real = counter._encode_lengths
    monkeypatch.setattr(counter, "_encode_lengths",
                        lambda chunk: calls.append([len(t) for t in chunk]) or real(chunk))
    rows = [([{"role": "user", "content": f"{i:02d}" + "x" * 23}], None) for i in range(10)]
    assert counter.count_totals(rows) == [25] * 10
    assert calls == [[25] * 4, [25] * 4, [25] * 2]


def test_a_token_with_no_characters_starts_at_the_start_of_the_text(tmp_path):
    """`_encoding_start`: a token an encoding gives no characters (the BOS a
    post-processor adds) counts as starting at 0, so it goes to the first message, the
    head (module docstring: BOS goes to the first message)."""
    from tokenizers import Tokenizer, processors

    from trajectory_compressor.counting.template import _encoding_start

    raw = _char_tokenizer().backend_tokenizer
    raw = Tokenizer.from_str(raw.to_str())
    raw.add_special_tokens(["<s>"])
    raw.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[
        ("<s>", raw.token_to_id("<s>"))])
    encoding = raw.encode("ab")
    assert encoding.token_to_chars(0) is None  # the BOS: no characters
    start = _encoding_start(encoding)
    assert [start(i) for i in range(3)] == [0, 0, 1]


def test_a_position_at_a_piece_boundary_is_read_in_the_next_piece():
    """`_PieceStarts`: pieces are [start, end); a position before the current piece
    starts the reading over. Asked at 3, the second piece's start, it reads into the
    second piece; asked at 2 then, the reading starts over (a second read); the counts
    are those of the tokens before each position (tokens at 0, 2 | 3, 4)."""
    from trajectory_compressor.counting.template import _PieceStarts, _Starts

    reads: list[int] = []

    def read() -> Any:
        reads.append(1)
        yield 0, 3, _Starts(2, [0, 2].__getitem__)
        yield 3, 6, _Starts(2, [0, 1].__getitem__)

    starts = _PieceStarts(read)
    assert starts.before(3) == 2
    assert len(reads) == 1
    assert starts.before(2) == 1
    assert len(reads) == 2


# -- setup -----------------------------------------------------------------------------------


def test_markers_of_a_tokenizer_without_added_vocabulary_are_its_bos_and_eos():
    """`_marker_tokens`: the added tokens the template writes "and the BOS/EOS strings,
    longest first"; a tokenizer that cannot list added tokens still has those."""
    plain = types.SimpleNamespace(bos_token="<s>", eos_token="</s>")
    assert _marker_tokens(plain, "{{ bos_token }}{{ messages }}") == ["</s>", "<s>"]


def test_a_chat_template_counter_needs_jinja2_before_anything_else(chars, monkeypatch):
    """`require_jinja2`: "checked once when counting starts", so a counter is not made
    without jinja2 (a None entry in sys.modules makes the import fail as when missing),
    even for a tokenizer that has a template."""
    monkeypatch.setitem(sys.modules, "jinja2", None)
    with pytest.raises(ChatTemplateError, match=r"jinja2 3\.1 or later, which is not installed"):
        TemplateCounter(chars, "{{ messages }}")


def test_only_string_bos_and_eos_are_markers():
    """`_marker_tokens`: "the BOS/EOS strings": a value that is no string (a token
    object, as some tokenizers keep) is not one."""
    from tokenizers import AddedToken

    odd = types.SimpleNamespace(bos_token=AddedToken("<s>", special=True), eos_token="</s>")
    assert _marker_tokens(odd, "{{ messages }}") == ["</s>"]


def test_a_tokenizer_without_a_template_is_named_in_the_error():
    """A tokenizer with no chat template and none given: the error names it, by its
    path, or its class when it has none (one built in memory; transformers 5 calls the
    fast class TokenizersBackend, 4 PreTrainedTokenizerFast)."""
    bare = _char_tokenizer()
    assert not bare.chat_template and not bare.name_or_path
    cls = type(bare).__name__
    assert cls in ("TokenizersBackend", "PreTrainedTokenizerFast")
    with pytest.raises(ChatTemplateError, match=f"^the tokenizer '{cls}' has no "
                                                "chat template, which token_counting: "):
        TemplateCounter(bare)
    bare.name_or_path = "/models/tok"
    with pytest.raises(ChatTemplateError, match=r"^the tokenizer '/models/tok' has no chat"):
        TemplateCounter(bare)


def test_the_tokenizer_s_own_template_is_the_one_hashed_and_searched_for_markers():
    """Without ``template`` the counter uses the tokenizer's own: ``template`` is it, its
    hash "the first 16 hex digits of the sha256", and the added tokens it writes are
    markers (here only the EOS it writes)."""
    tok = _char_tokenizer()
    own = "{% for m in messages %}{{ m.content }}<|endoftext|>{% endfor %}"
    tok.chat_template = own
    counter = TemplateCounter(tok)
    assert counter.template == own
    assert counter.template_hash == hashlib.sha256(own.encode("utf-8")).hexdigest()[:16]
    assert counter.count_messages([{"role": "user", "content": "Hi"}]) == [3]


def test_a_named_template_set_hashes_the_same_in_any_key_order():
    """`template_hash`: of a dict of named templates, "of its JSON" with the keys in
    order, so the same set hashes the same however the tokenizer listed it."""
    from trajectory_compressor.counting.template import template_hash

    ordered = {"default": "{{ messages }}", "tool_use": "{{ tools }}"}
    listed = {"tool_use": "{{ tools }}", "default": "{{ messages }}"}
    text = '{"default": "{{ messages }}", "tool_use": "{{ tools }}"}'
    expected = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    assert template_hash(ordered) == template_hash(listed) == expected


def test_a_tokenizer_without_the_split_special_tokens_option_keeps_them_whole():
    """Module docstring: ``split_special_tokens`` is set as a plain ``tokenizer(text)`` call
    sets it; a tokenizer that has no such option (transformers before it had one) keeps
    added tokens whole, as its calls did: the EOS is one token ("Hi" + EOS: 3)."""
    tok = _char_tokenizer()
    del tok.split_special_tokens
    counter = _counter(tok, "{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}")
    assert counter.count_total([{"role": "user", "content": "Hi"}]) == 3
    assert counter.count_messages([{"role": "user", "content": "Hi"}]) == [3]


def test_a_block_at_the_very_start_gets_the_tokens_that_start_in_it():
    """Module docstring: each token goes to the message whose block holds its first
    character. A template that writes an empty system message as nothing: the user's
    block starts at 0, and both of "Hi"'s tokens are the user's, counted through a
    tokenizer's own call (offsets from it) as through the backend."""
    from transformers import PreTrainedTokenizerFast

    class Preprocessing(PreTrainedTokenizerFast):
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return super().__call__(*args, **kwargs)

    template = "{% for m in messages %}{{ m.content }}{% endfor %}"
    messages = [{"role": "system", "content": ""}, {"role": "user", "content": "Hi"}]
    for tok in (_char_tokenizer(Preprocessing), _char_tokenizer()):
        assert _counter(tok, template).count_messages(messages) == [0, 2]


def test_markers_are_the_added_tokens_the_template_writes():
    """`_marker_tokens`: "added tokens the template writes, and the BOS/EOS strings,
    longest first": an added token the template never writes ("[SEP]") is none, even
    when a message's text brings it before a role name (the line starts that block)."""
    tok = _char_tokenizer()
    tok.add_tokens(["[SEP]", "<|im_start|>"])
    template = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}{% endfor %}"
    assert _marker_tokens(tok, template) == [EOS, "<|im_start|>"]
    counter = _counter(tok, template)
    text = "<|im_start|>user\nAlpha\nsee [SEP]assistant\nBravo"
    messages = [{"role": "user", "content": "Alpha"}, {"role": "assistant", "content": "Bravo"}]
    assert counter.block_starts(text, messages) == ([0, text.index("see")], len(text))


def test_a_long_rendering_in_pieces_splits_its_tokens_between_messages(chars, monkeypatch):
    """Pieces (ENCODE_CHARS at 4,096) do not move a token to another message: two
    20,001-character blocks ("word " 4,000 times and a line break) get 20,001 each."""
    monkeypatch.setattr(template_module, "ENCODE_CHARS", 4096)
    counter = _counter(chars, "{% for m in messages %}{{ m.content }}\n{% endfor %}")
    messages = [{"role": "user", "content": "word " * 4000},
                {"role": "assistant", "content": "more " * 4000}]
    assert counter.count_messages(messages) == [20001, 20001]


def test_a_tokenizer_s_own_call_counts_without_the_special_tokens_it_adds():
    """Module docstring: a rendering is tokenized without special tokens (the template
    writes BOS itself), as ``apply_chat_template`` does; so through a tokenizer's own
    call or its backend, for one whose plain calls add a BOS: "<a>Alpha\n" 9, "<b>Bravo\n" 9."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    class Preprocessing(PreTrainedTokenizerFast):
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return super().__call__(*args, **kwargs)

    for cls in (Preprocessing, PreTrainedTokenizerFast):  # its own call; its backend
        tok = _char_tokenizer(cls)
        tok.add_special_tokens({"bos_token": "<s>"})
        bos = tok.convert_tokens_to_ids("<s>")
        tok.backend_tokenizer.post_processor = processors.TemplateProcessing(
            single="<s> $A", special_tokens=[("<s>", bos)])
        assert tok("ab")["input_ids"][0] == bos  # plain calls add it
        template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}"
        counter = _counter(tok, template)
        messages = [{"role": "a", "content": "Alpha"}, {"role": "b", "content": "Bravo"}]
        assert counter.count_total(messages) == 18
        assert counter.count_messages(messages) == [9, 9]


def test_an_eos_reaching_past_the_search_is_not_skipped():
    """`_header_start` looks in text[lo:hi]: an EOS that starts there but ends past ``hi``
    is not skipped (the block would start past the search); nothing else closes the
    block, so it starts at ``lo``."""
    text = "Alpha" + EOS + "Bravo"
    assert _header_start(text, 5, 10, "assistant", [], EOS, last=True) == (5, 5)


def test_an_unreadable_template_file_is_named_with_the_reason(tmp_path):
    """`read_chat_template`: one sentence naming the file, the option and the reason."""
    from trajectory_compressor.counting.template import read_chat_template

    missing = tmp_path / "missing.jinja"
    with pytest.raises(ChatTemplateError) as info:
        read_chat_template(missing)
    assert str(info.value) == (f"cannot read the chat template {str(missing)!r} given with "
                               "--chat-template FILE.jinja: No such file or directory")


def test_only_text_parts_of_a_content_list_are_the_message_s_text():
    """Module docstring, 1.: content given as parts contributes its text parts; an image
    part, or anything that is not a part, adds nothing."""
    message = {"role": "user", "content": [
        {"type": "text", "text": "Look:"}, {"type": "image_url", "image_url": {"url": "x"}},
        "stray", {"type": "text", "text": "and this."}]}
    assert _pieces(message) == ["Look:", "and this."]


def test_a_rewritten_message_looks_for_its_header_within_its_text_plus_the_allowance():
    """Docstring, 1. and 3.: a message whose text the template rewrote ("bravo" rendered
    "BRAVO": no anchor) looks for its header from the previous block's end (5) as far as
    its own text (5) plus the allowance (20 here): to 30, which holds the "assistant" at
    17 (its line)."""
    text = "Alpha\n" + "." * 10 + "\nassistant\nBRAVO"
    messages = [{"role": "user", "content": "Alpha"}, {"role": "assistant", "content": "bravo"}]
    assert text.index("assistant") == 17
    assert _block_starts(text, messages, len(text), 20, [], "") == [0, 17]


def test_the_longest_added_token_is_the_one_near_a_cut():
    """`_special_veto`: within `SPECIAL_MARGIN` of an added token, the tokenizer's longest
    match: of "<x>" and "<x>long_token_suffix" (40-60 here) the longer, so 76 is near
    it, 77 is not."""
    tok = _char_tokenizer()
    tok.add_tokens(["<x>", "<x>long_token_suffix"])
    near = _special_veto(tok)
    assert near is not None
    text = "a" * 40 + "<x>long_token_suffix" + "b" * 40
    assert [near(text, at) for at in (24, 76, 77)] == [True, True, False]


def test_an_added_token_at_the_start_of_the_text_is_near_a_cut():
    """`_special_veto`: EOS at 0-13 makes cuts up to 29 near it, also seen from a cut
    close to the start."""
    near = _special_veto(_char_tokenizer())
    assert near is not None
    text = EOS + "a" * 60
    assert [near(text, at) for at in (5, 29, 30)] == [True, True, False]


# -- a --chat-template file that cannot be read (a real bug, fixed with these tests) -------


@pytest.mark.parametrize("command", [
    ("compress", "--token-counting", "chat_template", "-o", "{out}"),
    ("analyze",)])
@pytest.mark.parametrize("content", [None, b"\xff\xfe{{ messages }}"])
def test_an_unreadable_chat_template_file_is_a_configuration_error(tmp_path, command, content):
    """SPEC §7: a usage or configuration error exits 2 with one clear sentence, never an
    internal error (4). A ``--chat-template`` file that is missing or not UTF-8 text is
    the user's to fix, in ``compress`` (counting with it) as in ``analyze`` (comparing
    with it): the sentence names the file and the option."""
    from tests.cli_helpers import invoke_cli

    template = tmp_path / "template.jinja"
    if content is not None:
        template.write_bytes(content)
    args = [a.replace("{out}", str(tmp_path / "out.jsonl")) for a in command]
    run = invoke_cli(args[0], "data_samples/openai_messages.jsonl", *args[1:],
                     "--chat-template", str(template))
    assert run.returncode == 2, run.stderr
    assert (f"error: cannot read the chat template {str(template)!r} given with "
            "--chat-template FILE.jinja: ") in run.stderr
    assert "internal error" not in run.stderr and "Traceback" not in run.stderr
