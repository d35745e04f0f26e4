"""`RowCounter` and the counting gap (`engine/count.py`), in this process (issue 26, item 5:
the chat-template paths of the row counter ran in no in-process test).

Expected counts come from transformers itself: ``len(tokenizer.apply_chat_template(messages,
tokenize=True))`` for a rendered row (README, "Token counting"), ``len(tokenizer.encode(text,
add_special_tokens=False))`` for a turn's text. The tokenizer is the bundled DeepSeek one in
a local folder whose config carries a chat template (`tests/template_tokenizer.py`).
README: "`analyze` shows the gap whenever a template is available"; a row the template
cannot render is rejected with the reason, and the batch goes on.
"""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from tests.template_tokenizer import CHATML, make_tokenizer_dir
from tests.test_hermes_compat import Refusing  # the bundled backend, raising on REFUSE
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import ConfigError
from trajectory_compressor.counting.tokens import TokenCounter, load_tokenizer
from trajectory_compressor.dialects.sharegpt import SHAREGPT
from trajectory_compressor.engine.count import RowCounter, gap_counter
from trajectory_compressor.inspect.analyze import analyze

ROLES = {"system": "system", "human": "user", "gpt": "assistant", "tool": "tool"}
# A template that refuses any message holding REFUSE (as `raise_exception` in real ones).
REFUSING = ("{%- for m in messages -%}{%- if 'REFUSE' in m.content -%}"
            "{{ raise_exception('this template takes no REFUSE') }}{%- endif -%}"
            "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endfor -%}")


def hermes(row_id: str, *texts: str) -> dict:
    roles = ["system", "human", "gpt", "human", "gpt"]
    return {"id": row_id, "conversations": [{"from": r, "value": t}
                                            for r, t in zip(roles, texts, strict=False)]}


def messages_of(row: dict) -> list[dict]:
    """The row as chat messages, written out from the ShareGPT roles (not the dialect's)."""
    return [{"role": ROLES[t["from"]], "content": t["value"]} for t in row["conversations"]]


ROWS = [hermes("a", "You are terse.", "List the files.", "a.py and b.py."),
        hermes("b", "You help.", "What is 2 + 2?", "4.", "And 3 + 3?", "6, plainly.")]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A tokenizer folder with the CHATML template, that tokenizer as transformers loads
    it, and the run's token counter of it."""
    path = make_tokenizer_dir(tmp_path_factory.mktemp("tok") / "chatml", CHATML)
    return path, load_tokenizer(str(path)), TokenCounter.load(str(path))


def template_length(tok, messages: list[dict], **kwargs: object) -> int:
    """``len(apply_chat_template(..., tokenize=True))`` (a list in transformers 4, a
    BatchEncoding in 5)."""
    out = tok.apply_chat_template(messages, tokenize=True, **kwargs)
    return len(out if isinstance(out, list) else out["input_ids"])


def items(rows: list[dict]) -> list:
    return [(SHAREGPT, row, SHAREGPT.turns(row)) for row in rows]


def test_counting_by_turns_compares_with_the_folders_template_built_once(tmp_path, folder):
    _, tok, counter = folder
    dest = make_tokenizer_dir(tmp_path / "tok", CHATML)
    config = CompressionConfig(tokenizer_name=str(dest), token_counting="turns")
    rows = RowCounter(config, counter)
    assert rows.template is None and rows.template_hash is None
    expected = [template_length(tok, messages_of(r)) for r in ROWS]
    assert rows.template_totals([(messages_of(r), None) for r in ROWS]) == expected
    # Built when first asked, then kept: a later batch does not load the tokenizer again
    # (its folder is gone now, so loading it again would fail).
    shutil.rmtree(dest)
    assert rows.template_totals([(messages_of(ROWS[1]), None)]) == expected[1:]


def test_counting_with_the_template_uses_it_for_the_gap_and_names_its_hash(tmp_path, folder):
    dest, tok, counter = folder
    config = CompressionConfig(tokenizer_name=str(dest), token_counting="chat_template")
    rows = RowCounter(config, counter)
    assert rows.template_hash == hashlib.sha256(CHATML.encode("utf-8")).hexdigest()[:16]
    expected = [template_length(tok, messages_of(r)) for r in ROWS]
    assert rows.template_totals([(messages_of(r), None) for r in ROWS]) == expected
    counted = rows.count(items(ROWS))
    assert [len(c) for c in counted] == [3, 5]  # one count per turn
    assert [sum(c) for c in counted] == expected
    assert [rows.total(SHAREGPT, r) for r in ROWS] == expected


def test_a_row_the_template_refuses_gets_the_reason_and_the_others_their_counts(tmp_path,
                                                                                 folder):
    dest, tok, counter = folder
    template = tmp_path / "refusing.jinja"
    template.write_text(REFUSING, encoding="utf-8")
    config = CompressionConfig(tokenizer_name=str(dest), token_counting="chat_template",
                               chat_template=str(template))
    rows = RowCounter(config, counter)
    batch = [ROWS[0], hermes("bad", "You help.", "Please REFUSE this.", "No."), ROWS[1]]
    counted = rows.count(items(batch))
    expected = [template_length(tok, messages_of(r), chat_template=REFUSING) for r in ROWS]
    assert isinstance(counted[0], list) and isinstance(counted[2], list)
    assert [len(counted[0]), len(counted[2])] == [3, 5]
    assert [sum(counted[0]), sum(counted[2])] == expected
    assert isinstance(counted[1], str)
    assert counted[1].startswith("cannot count the row with the chat template: ")
    assert "this template takes no REFUSE" in counted[1]


def test_analyze_shows_the_gap_when_counting_with_the_template(tmp_path, folder):
    # (Counting by turns with a template at hand: the first test.)
    dest, tok, counter = folder
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    config = CompressionConfig(tokenizer_name=str(dest), token_counting="chat_template",
                               summarizer="extractive", target_max_tokens=1000,
                               summary_target_tokens=50)
    assert gap_counter(config, counter) is not None
    analysis = analyze(str(src), config, counter=counter)
    assert analysis.gap is not None and analysis.gap.rows == 2
    differences = sorted(
        template_length(tok, messages_of(r))
        - sum(len(tok.encode(t["value"], add_special_tokens=False)) for t in r["conversations"])
        for r in ROWS)
    summary = analysis.gap.difference.summary()
    assert (summary["min"], summary["max"]) == (differences[0], differences[-1])


def test_the_bundled_tokenizer_has_no_template_and_so_no_gap(tmp_path, counter):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    config = CompressionConfig(summarizer="extractive", target_max_tokens=1000,
                               summary_target_tokens=50)
    assert gap_counter(config, counter) is None
    assert analyze(str(src), config, counter=counter).gap is None


def turn_counts(tok, row: dict) -> list[int]:
    return [len(tok.encode(t["value"], add_special_tokens=False)) for t in row["conversations"]]


def test_counting_by_turns_counts_each_turns_text_alone(folder, counter):
    _, tok, _ = folder  # the bundled vocabulary, as the default counter's
    rows = RowCounter(CompressionConfig(), counter)
    assert rows.count(items(ROWS)) == [turn_counts(tok, r) for r in ROWS]
    assert [rows.total(SHAREGPT, r) for r in ROWS] == [sum(turn_counts(tok, r)) for r in ROWS]


def test_a_text_the_tokenizer_refuses_rejects_its_row_only(folder):
    _, tok, _ = folder
    rows = RowCounter(CompressionConfig(), TokenCounter(backend=Refusing()))
    bad = hermes("bad", "You help.", "Please REFUSE this.", "No.")
    counted = rows.count(items([ROWS[0], bad, ROWS[1]]))
    assert counted[0] == turn_counts(tok, ROWS[0]) and counted[2] == turn_counts(tok, ROWS[1])
    assert counted[1] == ("the tokenizer cannot count one of the row's turns: ValueError: "
                          "cannot encode this text")


def test_counting_with_the_template_of_a_tokenizer_that_has_none_is_a_config_error(counter):
    # README: "a tokenizer without one (the bundled DeepSeek tokenizer has none) is an
    # error naming that option".
    with pytest.raises(ConfigError, match="--chat-template"):
        RowCounter(CompressionConfig(token_counting="chat_template"), counter)


def test_a_template_file_gives_the_bundled_tokenizer_a_gap(tmp_path, folder, counter):
    _, tok, _ = folder
    template = tmp_path / "chatml.jinja"
    template.write_text(CHATML, encoding="utf-8")
    config = CompressionConfig(chat_template=str(template))
    assert gap_counter(config, counter) is not None
    rows = RowCounter(config, counter)
    assert rows.template_totals([(messages_of(r), None) for r in ROWS]) == [
        template_length(tok, messages_of(r), chat_template=CHATML) for r in ROWS]
