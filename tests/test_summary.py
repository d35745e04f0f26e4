"""Summary rules: prefix exactly once, elision markers, secret redaction, extractive budget."""

from __future__ import annotations

import asyncio
import json

import pytest

from trajectory_compressor.core.conversation import SUMMARY_PREFIX
from trajectory_compressor.core.extractive import ExtractiveSummarizer
from trajectory_compressor.core.redact import redact
from trajectory_compressor.core.summary import (
    SummaryRequest,
    elide_middle,
    finish_summary_text,
    render_turns,
)


@pytest.mark.parametrize("raw", [
    "did things", "[CONTEXT SUMMARY]: did things", "  [CONTEXT SUMMARY]:did things\n",
    "[CONTEXT SUMMARY]: [CONTEXT SUMMARY]: did things", "[context summary]: did things"])
def test_prefix_exactly_once(raw):
    text = finish_summary_text(raw)
    assert text == f"{SUMMARY_PREFIX} did things"


def test_empty_text_is_just_the_prefix():
    assert finish_summary_text("   ") == SUMMARY_PREFIX


def test_long_turns_are_elided_with_a_count():
    value = "a" * 1500 + "b" * 2000 + "c" * 500
    rendered = render_turns(SummaryRequest([{"from": "tool", "value": value}], 7, 100))
    assert rendered.startswith("[Turn 7 - TOOL]:\n" + "a" * 1500)
    assert "[2000 characters omitted]" in rendered
    assert rendered.endswith("c" * 500)
    short = render_turns(SummaryRequest([{"from": "gpt", "value": "x" * 3000}], 0, 100))
    assert "omitted" not in short


def test_whole_input_is_bounded():
    turns = [{"from": "tool", "value": "z" * 2900} for _ in range(40)]
    text = render_turns(SummaryRequest(turns, 0, 100), max_chars=10_000)
    assert len(text) < 10_100 and "characters omitted" in text
    assert elide_middle("short") == "short"


@pytest.mark.parametrize("secret", [
    "sk-proj-abcdefghijklmnopqrstuvwx1234", "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "AKIAIOSFODNN7EXAMPLE", "Bearer eyJhbGciOiJIUzI1NiJ9.abc.def",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
    "postgres://admin:hunter2@db.internal:5432/prod"])
def test_secrets_are_redacted(secret):
    text = redact(f"used {secret} to connect")
    assert secret not in text and "[REDACTED]" in text
    assert finish_summary_text(f"key {secret}").count("[REDACTED]") == 1


def test_extractive_keeps_what_a_reader_needs_within_budget(counter):
    call = {"name": "terminal", "arguments": {"command": "pytest -q tests/test_api.py"}}
    response = {"name": "terminal", "content": json.dumps(
        {"stdout": "collected 3 items\n" + "line\n" * 50 + "KeyError: 'user'",
         "exit_code": 1})}
    turns = [
        {"from": "gpt", "value": f"<think>hmm</think><tool_call>{json.dumps(call)}</tool_call>"},
        {"from": "tool", "value": f"<tool_response>{json.dumps(response)}</tool_response>"},
        {"from": "gpt", "value": "<tool_call>" + json.dumps(
            {"name": "read_file", "arguments": {"path": "src/app/db.py"}}) + "</tool_call>"},
    ]
    request = SummaryRequest(turns, 5, 200)
    summary = asyncio.run(ExtractiveSummarizer(counter.count).summarize(request))
    text = summary.text
    assert summary.source == "extractive"
    assert text.startswith(SUMMARY_PREFIX) and text.count(SUMMARY_PREFIX) == 1
    assert "terminal(command=pytest -q tests/test_api.py)" in text
    assert "read_file(path=src/app/db.py)" in text
    assert "exit code 1" in text and "KeyError: 'user'" in text
    assert "src/app/db.py" in text
    assert counter.count(text) <= 200
    assert asyncio.run(ExtractiveSummarizer(counter.count).summarize(request)).text == text


def test_extractive_respects_a_tiny_budget(counter, sample_jsonl):
    row = json.loads(sample_jsonl.read_text().splitlines()[1])
    request = SummaryRequest(row["conversations"][4:60], 4, 40)
    text = asyncio.run(ExtractiveSummarizer(counter.count).summarize(request)).text
    assert counter.count(text) <= 40 and text.startswith(SUMMARY_PREFIX)
