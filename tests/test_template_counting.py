"""Chat-template token counts: exact totals, per-message attribution, clear failures.

Expected totals come from ``tokenizer.apply_chat_template(..., tokenize=True)`` itself;
expected per-message counts from turn blocks written out by hand for each test template.
The tokenizer is the bundled DeepSeek one, loaded offline from a local folder whose
``tokenizer_config.json`` carries the template (see ``template_tokenizer.py``).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.property_budget import examples
from tests.template_tokenizer import CHATML, DEEPSEEK, TEMPLATES, load_template_tokenizer
from trajectory_compressor.counting.template import (
    ChatTemplateError,
    TemplateCounter,
    TemplateRenderError,
    read_chat_template,
    template_hash,
)

SAMPLES = Path(__file__).resolve().parent.parent / "data_samples"
BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"

TOOLS = [
    {"type": "function", "function": {
        "name": "terminal",
        "description": "Run a shell command for the user and return its output.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                       "required": ["command"]}}},
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a file (UTF-8).",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}},
]


def call(name: str, arguments: dict[str, Any], cid: str = "call_1") -> dict[str, Any]:
    return {"id": cid, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}


CONVERSATIONS: dict[str, list[dict[str, Any]]] = {
    "plain": [
        {"role": "system", "content": "You are a careful coding agent."},
        {"role": "user", "content": "List the files, please."},
        {"role": "assistant", "content": "Sure. Here they are: a.py, b.py."},
    ],
    "tool_calls": [
        {"role": "system", "content": "You are a careful coding agent."},
        {"role": "user", "content": "What is in the workspace?"},
        {"role": "assistant", "content": None,
         "tool_calls": [call("terminal", {"command": "ls -la"})]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a.py\nb.py\nREADME.md"},
        {"role": "assistant", "content": "Let me read both.",
         "tool_calls": [call("read_file", {"path": "a.py"}, "c2"),
                        call("read_file", {"path": "b.py"}, "c3")]},
        {"role": "tool", "tool_call_id": "c2", "content": "print('a')"},
        {"role": "tool", "tool_call_id": "c3", "content": "print('b')"},
        {"role": "assistant", "content": "Both files print one letter."},
    ],
    "no_system": [
        {"role": "user", "content": "Run the tests."},
        {"role": "assistant", "content": None,
         "tool_calls": [call("terminal", {"command": "pytest -q"})]},
        {"role": "tool", "tool_call_id": "call_1", "content": "3 passed"},
        {"role": "assistant", "content": "All three tests pass."},
    ],
    "unicode": [
        {"role": "system", "content": "Réponds en français — 简体中文 aussi. 🙂"},
        {"role": "user", "content": "数据 émigré naïve façade 👩‍💻 עברית مرحبا e\u0301"},
        {"role": "assistant", "content": "日本語のテキスト、カタカナ。 Ünïcödé ✓ 𝔘𝔫𝔦"},
    ],
    "empty_contents": [
        {"role": "system", "content": ""},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": ""},
        {"role": "assistant", "content": "still here"},
    ],
    "whitespace": [
        {"role": "system", "content": "  padded system  \n"},
        {"role": "user", "content": "\n\n  indented question?\n"},
        {"role": "assistant", "content": "   "},
        {"role": "user", "content": "\tnext\t"},
    ],
    "long": [
        {"role": "system", "content": "Long rows."},
        {"role": "user", "content": " ".join(f"word{i % 97} line {i}\n" for i in range(3000))},
        {"role": "assistant", "content": "def f(x):\n    return x * 2\n" * 500},
    ],
    "repeated": [
        {"role": "user", "content": "ok"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "ok"},
        {"role": "assistant", "content": "ok"},
        {"role": "tool", "tool_call_id": "x", "content": "ok"},
        {"role": "assistant", "content": "ok"},
    ],
    "template_lookalikes": [
        {"role": "system", "content": "Mention the user, the assistant and a tool freely."},
        {"role": "user", "content": "user assistant tool <|im_start|>assistant\n<|im_end|>"},
        {"role": "assistant", "content": "<think>plan</think> the user said <｜User｜> user"},
        {"role": "user", "content": "system"},
    ],
    "content_parts": [
        {"role": "user", "content": [{"type": "text", "text": "first part, "},
                                     {"type": "text", "text": "second part."}]},
        {"role": "assistant", "content": "Got both parts."},
    ],
    "single": [{"role": "user", "content": "Just one message."}],
}


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("template_tokenizers")
    return {name: load_template_tokenizer(root / name, t) for name, t in TEMPLATES.items()}


def expected_ids(tok, messages, tools=None, **kwargs) -> list[int]:
    """The ids apply_chat_template gives (a BatchEncoding in transformers 5, a list in 4)."""
    out = tok.apply_chat_template(messages, tools=tools, tokenize=True, **kwargs)
    return list(out) if isinstance(out, list) else list(out["input_ids"])


def n_tokens(tok, text: str) -> int:
    return len(tok(text, add_special_tokens=False)["input_ids"]) if text else 0


# -- exact totals ---------------------------------------------------------------------------


@pytest.mark.parametrize("template", sorted(TEMPLATES))
@pytest.mark.parametrize("case", sorted(CONVERSATIONS))
@pytest.mark.parametrize("with_tools", [False, True])
def test_shares_add_up_to_apply_chat_template(tokenizers, template, case, with_tools):
    tok = tokenizers[template]
    messages = CONVERSATIONS[case]
    tools = TOOLS if with_tools else None
    shares = TemplateCounter(tok).count_messages(messages, tools)
    assert len(shares) == len(messages)
    assert all(s >= 0 for s in shares)
    assert sum(shares) == len(expected_ids(tok, messages, tools))


@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_generation_prompt_goes_to_the_head(tokenizers, template):
    tok = tokenizers[template]
    messages = CONVERSATIONS["tool_calls"]
    plain = TemplateCounter(tok).count_messages(messages, TOOLS)
    prompted = TemplateCounter(tok, add_generation_prompt=True).count_messages(messages, TOOLS)
    total = len(expected_ids(tok, messages, TOOLS, add_generation_prompt=True))
    assert sum(prompted) == total > sum(plain)
    assert prompted[1:] == plain[1:]
    assert prompted[0] - plain[0] == total - sum(plain)


@pytest.mark.parametrize("template", sorted(TEMPLATES))
@pytest.mark.parametrize("case", ["tool_calls", "no_system", "unicode"])
def test_tools_block_goes_to_the_head(tokenizers, template, case):
    tok = tokenizers[template]
    counter = TemplateCounter(tok)
    messages = CONVERSATIONS[case]
    without = counter.count_messages(messages, None)
    with_tools = counter.count_messages(messages, TOOLS)
    grown = len(expected_ids(tok, messages, TOOLS)) - len(expected_ids(tok, messages))
    assert grown >= sum(n_tokens(tok, json.dumps(t)) for t in TOOLS) // 2
    assert with_tools[0] - without[0] == grown
    assert with_tools[1:] == without[1:]


# -- attribution ----------------------------------------------------------------------------


@pytest.mark.parametrize("template", sorted(TEMPLATES))
@pytest.mark.parametrize("case", sorted(CONVERSATIONS))
def test_each_message_gets_at_least_its_own_text(tokenizers, template, case):
    tok = tokenizers[template]
    messages = CONVERSATIONS[case]
    shares = TemplateCounter(tok).count_messages(messages, TOOLS)
    for message, share in zip(messages, shares, strict=True):
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(part["text"] for part in content)
        own = n_tokens(tok, (content or "").strip())
        for c in message.get("tool_calls") or []:
            own += n_tokens(tok, c["function"]["name"]) + n_tokens(tok, c["function"]["arguments"])
        assert share >= own - 3, (message, share, own)


def chatml_blocks(messages, tools=None) -> list[str]:
    """The CHATML template's text per message, written out by hand (tools block: head)."""
    blocks = []
    for i, m in enumerate(messages):
        content = m.get("content") or ""
        if isinstance(content, list):
            content = "".join(p["text"] for p in content)
        if m["role"] == "assistant":
            text = content
            for k, c in enumerate(m.get("tool_calls") or []):
                f = c["function"]
                text += ("\n" if k == 0 and content else "") + (
                    f'<tool_call>\n{{"name": "{f["name"]}", "arguments": {f["arguments"]}}}'
                    "\n</tool_call>")
            blocks.append(f"<|im_start|>assistant\n{text}<|im_end|>\n")
        elif m["role"] == "tool":
            blocks.append(f"<|im_start|>tool\n<tool_response>\n{content}\n</tool_response>"
                          "<|im_end|>\n")
        elif m["role"] == "system" and i == 0 and not tools:
            blocks.append(f"<|im_start|>system\n{content}<|im_end|>\n")
        else:
            blocks.append(f"<|im_start|>{m['role']}\n{content}<|im_end|>\n")
    blocks[0] = BOS + blocks[0]
    return blocks


def deepseek_blocks(messages) -> list[str]:
    """The DEEPSEEK template's text per message, written out by hand."""
    blocks = []
    for m in messages:
        content = m.get("content") or ""
        if m["role"] == "system":
            blocks.append(content)
        elif m["role"] == "user":
            blocks.append("<｜User｜>" + content)
        elif m["role"] == "tool":
            blocks.append(f"<｜tool▁output▁begin｜>{content}<｜tool▁output▁end｜>")
        else:
            calls = "".join(
                f"<｜tool▁call▁begin｜>{c['function']['name']}<｜tool▁sep｜>"
                f"{c['function']['arguments']}<｜tool▁call▁end｜>"
                for c in m.get("tool_calls") or [])
            if calls:
                calls = f"<｜tool▁calls▁begin｜>{calls}<｜tool▁calls▁end｜>"
            blocks.append(f"<｜Assistant｜>{content}{calls}{EOS}")
    blocks[0] = BOS + blocks[0]
    return blocks


@pytest.mark.parametrize("case", ["plain", "tool_calls", "no_system", "unicode",
                                  "empty_contents", "repeated", "long", "single"])
@pytest.mark.parametrize("template", ["chatml", "deepseek"])
def test_shares_equal_hand_written_blocks(tokenizers, template, case):
    """Every block ends on a token boundary here, so its tokens are its block's alone."""
    tok = tokenizers[template]
    messages = CONVERSATIONS[case]
    blocks = chatml_blocks(messages) if template == "chatml" else deepseek_blocks(messages)
    assert "".join(blocks) == tok.apply_chat_template(messages, tokenize=False)
    expected = [n_tokens(tok, b) for b in blocks]
    assert sum(expected) == len(expected_ids(tok, messages))  # the oracle is additive
    assert TemplateCounter(tok).count_messages(messages) == expected


def test_trimmed_content_still_attributed(tokenizers):
    tok = tokenizers["header_trim"]
    messages = [
        {"role": "user", "content": "   " + "alpha " * 200 + "  \n"},
        {"role": "assistant", "content": "\n" + "beta " * 300},
        {"role": "user", "content": "  gamma  "},
    ]
    shares = TemplateCounter(tok).count_messages(messages)
    assert sum(shares) == len(expected_ids(tok, messages))
    header = n_tokens(tok, "<|start_header_id|>assistant<|end_header_id|>\n\n<|eot_id|>")
    beta = n_tokens(tok, ("beta " * 300).strip())
    assert beta <= shares[1] <= beta + header + 2
    assert shares[2] <= n_tokens(tok, "gamma") + header + 2


def test_rows_batched_equal_rows_one_by_one(tokenizers):
    tok = tokenizers["chatml"]
    counter = TemplateCounter(tok)
    rows = [(m, TOOLS if i % 2 else None) for i, m in enumerate(CONVERSATIONS.values())]
    rows.insert(3, ([], None))
    batched = counter.count_many_rows(rows)
    assert batched == [counter.count_messages(m, t) if m else [] for m, t in rows]
    assert counter.count_totals(rows) == [sum(s) for s in batched]
    assert counter.count_total(*rows[1]) == len(expected_ids(tok, *rows[1]))


def test_tokenizer_call_path_counts_the_same(tokenizers):
    """The path for tokenizer classes that pre-process text (no direct backend calls)."""
    tok = tokenizers["chatml"]
    direct = TemplateCounter(tok)
    through_call = TemplateCounter(tok)
    through_call._backend = None
    rows = [(m, TOOLS) for m in CONVERSATIONS.values()]
    assert through_call.count_many_rows(rows) == direct.count_many_rows(rows)
    assert through_call.count_totals(rows) == direct.count_totals(rows)


# -- every sample row -------------------------------------------------------------------------


_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_RESPONSE = re.compile(r"<tool_response>\s*(.*?)\s*</tool_response>", re.DOTALL)
_TOOLS = re.compile(r"<tools>\s*(\[.*?\])\s*</tools>", re.DOTALL)
_ROLES = {"system": "system", "human": "user", "gpt": "assistant", "tool": "tool"}


def openai_row(row: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """A sample ShareGPT row as OpenAI messages, calls parsed, tools from the system prompt."""
    messages: list[dict[str, Any]] = []
    tools = None
    for k, turn in enumerate(row["conversations"]):
        role, value = _ROLES[turn["from"]], turn["value"]
        message: dict[str, Any] = {"role": role, "content": value}
        if role == "system" and (found := _TOOLS.search(value)):
            tools = [{"type": "function", "function": f} for f in json.loads(found.group(1))]
        elif role == "assistant" and _CALL.search(value):
            calls = [json.loads(c) for c in _CALL.findall(value)]
            text = value[:value.index("<tool_call>")].strip()
            message = {"role": role, "content": text or None, "tool_calls": [
                {"id": f"call_{k}_{j}", "type": "function",
                 "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
                for j, c in enumerate(calls)]}
        elif role == "tool" and (found := _RESPONSE.search(value)):
            message["content"] = found.group(1)
        messages.append(message)
    return messages, tools


def sample_rows() -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in
            (SAMPLES / "trajectories.jsonl").read_text(encoding="utf-8").splitlines() if line]
    rows += pq.read_table(SAMPLES / "trajectories.parquet").to_pylist()
    unique: dict[str, dict[str, Any]] = {}
    for row in rows:  # the Parquet sample holds the same rows: count each once (its turns
        # carry a `weight` column besides, which `openai_row` does not read)
        turns = [(turn["from"], turn["value"]) for turn in row["conversations"]]
        unique.setdefault(json.dumps(turns), row)
    return list(unique.values())


@pytest.fixture(scope="module")
def samples() -> list[tuple[list[dict[str, Any]], list[dict[str, Any]] | None]]:
    return [openai_row(r) for r in sample_rows()]


def expected_lengths(tok, rows) -> list[int]:
    """apply_chat_template's lengths, one batched call per distinct tools list."""
    groups: dict[str, list[int]] = {}
    for i, (_, tools) in enumerate(rows):
        groups.setdefault(json.dumps(tools), []).append(i)
    lengths = [0] * len(rows)
    for where in groups.values():
        out = tok.apply_chat_template([rows[i][0] for i in where], tools=rows[where[0]][1],
                                      tokenize=True)
        ids = out if isinstance(out, list) else out["input_ids"]
        for i, row_ids in zip(where, ids, strict=True):
            lengths[i] = len(row_ids)
    return lengths


def test_every_sample_row_counts_exactly(tokenizers, samples):
    """The tokenizer's own template (CHATML) on every row, shares and the skip path."""
    tok = tokenizers["chatml"]
    assert len(samples) >= 50 and all(tools for _, tools in samples)
    counter = TemplateCounter(tok)
    counted = counter.count_many_rows(samples)
    totals = counter.count_totals(samples)
    expected = expected_lengths(tok, samples)
    assert expected[:1] == [len(expected_ids(tok, *samples[0]))]
    for (messages, _), shares, total, want in zip(samples, counted, totals, expected,
                                                   strict=True):
        assert len(shares) == len(messages) and min(shares) >= 0
        assert sum(shares) == total == want


@pytest.mark.parametrize("template", ["header_trim", "deepseek"])
def test_sample_rows_with_other_templates(tokenizers, samples, template):
    """Every fifth row (each long row takes a second to tokenize twice)."""
    tok = tokenizers[template]
    rows = samples[::5]
    for (messages, tools), shares in zip(rows, TemplateCounter(tok).count_many_rows(rows),
                                         strict=True):
        assert len(shares) == len(messages) and min(shares) >= 0
        assert sum(shares) == len(expected_ids(tok, messages, tools))


# -- generated rows ---------------------------------------------------------------------------


_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60) | \
    st.sampled_from(["", " ", "\n", "ok", "user", "assistant", "<|im_end|>", "<think>", "  x  "])
_call = st.builds(
    lambda name, args, i: call(name, {"arg": args}, f"c{i}"),
    st.sampled_from(["terminal", "read_file", "user"]), _text, st.integers(0, 99))


@st.composite
def _message(draw) -> dict[str, Any]:
    role = draw(st.sampled_from(["system", "user", "assistant", "tool"]))
    message: dict[str, Any] = {"role": role, "content": draw(_text)}
    if role == "assistant" and draw(st.booleans()):
        message["tool_calls"] = draw(st.lists(_call, min_size=1, max_size=3))
        message["content"] = draw(st.none() | _text)
    if role == "tool":
        message["tool_call_id"] = "c1"
    return message


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=st.lists(_message(), min_size=1, max_size=8),
       template=st.sampled_from(sorted(TEMPLATES)), with_tools=st.booleans(),
       prompt=st.booleans())
def test_generated_rows_add_up(tokenizers, messages, template, with_tools, prompt):
    tok = tokenizers[template]
    tools = TOOLS if with_tools else None
    shares = TemplateCounter(tok, add_generation_prompt=prompt).count_messages(messages, tools)
    assert len(shares) == len(messages) and min(shares) >= 0
    assert sum(shares) == len(expected_ids(tok, messages, tools, add_generation_prompt=prompt))


# -- templates and failures -------------------------------------------------------------------


def test_no_template_names_the_option(tmp_path):
    tok = load_template_tokenizer(tmp_path / "bare", chat_template=None)
    with pytest.raises(ChatTemplateError, match=re.escape("--chat-template FILE.jinja")):
        TemplateCounter(tok)


def test_given_template_overrides_and_is_hashed(tmp_path):
    tok = load_template_tokenizer(tmp_path / "bare", chat_template=None)
    path = tmp_path / "deepseek.jinja"
    path.write_text(DEEPSEEK, encoding="utf-8")
    counter = TemplateCounter(tok, read_chat_template(path))
    messages = CONVERSATIONS["tool_calls"]
    total = len(expected_ids(tok, messages, TOOLS, chat_template=DEEPSEEK))
    assert sum(counter.count_messages(messages, TOOLS)) == total
    assert counter.template_hash == hashlib.sha256(DEEPSEEK.encode()).hexdigest()[:16]
    assert template_hash(DEEPSEEK) != template_hash(CHATML)
    assert len(template_hash(CHATML)) == 16


def test_missing_template_file_names_the_option(tmp_path):
    with pytest.raises(ChatTemplateError, match="--chat-template"):
        read_chat_template(tmp_path / "nope.jinja")


def test_a_row_the_template_refuses(tokenizers):
    strict = "{% for m in messages %}{% if m.role == 'tool' %}" \
             "{{ raise_exception('no tools here') }}{% endif %}{{ m.content }}{% endfor %}"
    counter = TemplateCounter(tokenizers["chatml"], strict)
    assert counter.count_messages(CONVERSATIONS["plain"]) != []
    with pytest.raises(TemplateRenderError, match="no tools here"):
        counter.count_messages(CONVERSATIONS["tool_calls"])


# -- long renderings, counted in pieces (issue 24 item 8) -----------------------------------

def _long_conversation(marker: str) -> list[dict[str, Any]]:
    log = "".join(f"step {i} loss=0.{i:04d}{marker} /data/shard_{i}.bin ok word word\n"
                  for i in range(400))  # about 26,000 characters with the marker
    return [
        {"role": "system", "content": "You are a careful coding agent."},
        {"role": "user", "content": "Train it and show me the log."},
        {"role": "assistant", "content": None,
         "tool_calls": [call("terminal", {"command": "python train.py"})]},
        {"role": "tool", "tool_call_id": "call_1", "content": log},
        {"role": "assistant", "content": "The tail of it:\n" + log[-9_000:]},
    ]


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_a_long_rendering_counts_in_pieces_as_apply_chat_template_does(tokenizers, name,
                                                                       monkeypatch):
    from trajectory_compressor.counting import template as template_module

    tok = tokenizers[name]
    messages = _long_conversation(" <｜place▁holder▁no▁12｜>")
    whole = TemplateCounter(tok).count_messages(messages, TOOLS)  # one encoding
    monkeypatch.setattr(template_module, "ENCODE_CHARS", 2_048)
    pieced = TemplateCounter(tok)
    longest: list[int] = []
    real = pieced._encode_starts
    monkeypatch.setattr(pieced, "_encode_starts",
                        lambda chunk: longest.append(max(map(len, chunk))) or real(chunk))
    total = len(expected_ids(tok, messages, TOOLS))
    assert pieced.count_total(messages, TOOLS) == total
    assert pieced.count_messages(messages, TOOLS) == whole
    assert sum(whole) == total
    assert longest and max(longest) <= 2 * 2_048 // template_module.PIECES_PER_CALL


def test_no_piece_is_cut_inside_or_beside_an_added_token(tmp_path, monkeypatch):
    from tokenizers import AddedToken

    from trajectory_compressor.counting import template as template_module

    # An added token with ASCII digit edges inside it: the only cuts the rules allow in
    # this content fall inside the token, so only the veto keeps them out.
    tok = load_template_tokenizer(tmp_path / "added", CHATML)
    tok.add_tokens([AddedToken("<|reserved_7|>", special=True)])
    messages = [{"role": "user", "content": "Read it."},
                {"role": "assistant", "content": "x<|reserved_7|>" * 3_000}]
    total = len(expected_ids(tok, messages))
    monkeypatch.setattr(template_module, "ENCODE_CHARS", 2_048)
    assert TemplateCounter(tok).count_total(messages) == total
    block = "<|im_start|>assistant\n" + messages[1]["content"] + "<|im_end|>\n"
    assert TemplateCounter(tok).count_messages(messages)[1] == n_tokens(tok, block)
    unguarded = TemplateCounter(tok)
    unguarded._near_special = None
    assert unguarded.count_total(messages) != total
