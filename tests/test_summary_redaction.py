"""Secrets in extractive and fallback summaries: every summary is redacted, whoever wrote it.

The extractive summarizer copies text out of the region (user messages, tool arguments,
output lines), so a key in the trajectory reaches its summary unless it is redacted
(§4: "a post-pass redacts obvious secrets from every summary"). One example per kind of
key; each must be gone from the summary, and the summary must still say what happened.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.extractive import extractive_text
from trajectory_compressor.core.redact import REDACTED
from trajectory_compressor.core.summary import (
    Summarizer,
    Summary,
    SummaryFailed,
    SummaryRequest,
    SummaryUsage,
)
from trajectory_compressor.engine.compressor import TrajectoryCompressor

# One example of each kind of key-like token the post-pass knows (made up, not real).
SECRETS = {
    "openai": "sk-proj-Ab12Cd34Ef56Gh78",
    "github classic": "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2",
    "github fine-grained": "github_pat_" + "11ABCDEFG0123456789_abcdef",
    "gitlab": "glpat-" + "x1Y2z3A4b5C6d7E8f9G0",
    "aws": "AKIA" + "IOSFODNN7EXAMPLE",
    "slack": "xoxb-" + "123456789012-abcdefghij",
    "google": "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    "hugging face": "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ012345",
    "stripe": "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
}


def words(text: str) -> int:
    return len(text.split())


def request_with(secret: str) -> SummaryRequest:
    turns = [
        {"from": "human", "value": f"Use the key {secret} for the deploy."},
        {"from": "gpt", "value": '<tool_call>{"name": "bash", "arguments": {"command": '
                                 f'"deploy --token {secret}"}}}}</tool_call>'},
        {"from": "tool", "value": f"<tool_response>deployed with {secret}\nexit code 0"
                                  "</tool_response>"},
    ]
    return SummaryRequest(turns, 4, 500)


@pytest.mark.parametrize("kind", list(SECRETS))
def test_the_extractive_summary_redacts_every_kind_of_key(kind: str) -> None:
    secret = SECRETS[kind]
    text = extractive_text(request_with(secret), words)
    assert secret not in text
    # Still a summary of the turns: the call, the message and the output, each redacted.
    assert text.count(REDACTED) >= 3, text
    assert "turn 5: bash(command=deploy --token [REDACTED]" in text
    assert "turn 4 (user): Use the key [REDACTED] for the deploy." in text


class FailingSummarizer(Summarizer):
    """Every attempt fails: the row gets the extractive fallback."""

    name = "failing"

    async def summarize(self, request: SummaryRequest) -> Summary:
        usage = SummaryUsage(api_calls=3)
        usage.failed("http")
        raise SummaryFailed("3 attempts failed", usage)


def test_the_fallback_summary_is_redacted_too(counter: Any) -> None:
    secret = SECRETS["openai"]
    roles = ["system", "human", "gpt", "tool", "human", "gpt", "human", "gpt"]
    values = ["You are an agent.", "Deploy it.", "<tool_call>{}</tool_call>", "ok",
              f"The key is {secret}, use it.", "Understood.", "Thanks.", "Done."]
    row = {"conversations": [{"from": r, "value": v} for r, v in zip(roles, values,
                                                                      strict=True)]}
    # n = 8, protected: 0-3 and the last two; the middle [4, 6) has 1000 of 1150 tokens.
    config = CompressionConfig(protect_last_n_turns=2, target_max_tokens=800,
                               summary_target_tokens=300)

    async def go():
        async with TrajectoryCompressor(config, summarizer=FailingSummarizer(),
                                        counter=counter) as compressor:
            return await compressor.compress_row(row, [100, 10, 10, 10, 500, 500, 10, 10])

    result = asyncio.run(go())
    assert result.metrics.summary_source == "fallback"
    assert result.metrics.summarization_errors >= 1
    summary = result.row["conversations"][4]["value"]
    assert summary.startswith("[CONTEXT SUMMARY]:")
    assert secret not in summary and "The key is [REDACTED], use it." in summary
    # The row's own turns are data: kept exactly, key and all (§12).
    assert row["conversations"][4]["value"] == f"The key is {secret}, use it."


def test_a_key_glued_to_another_is_redacted_too() -> None:
    # Found by the seeded property test: the Google key's marker exposed the sk- key
    # glued to it, which a single pass left in the text.
    from trajectory_compressor.core.redact import redact

    text = "google " + SECRETS["google"] + SECRETS["openai"] + " end"
    assert redact(text) == "google [REDACTED][REDACTED] end"


def test_configured_values_too_short_once_stripped_or_not_text_are_ignored() -> None:
    from trajectory_compressor.core.redact import Scrubber

    scrub = Scrubber([" abc ", None, 42])  # type: ignore[list-item]
    assert scrub.literal("x abc y") == "x abc y" and not scrub


def test_a_value_is_found_in_json_written_without_ascii_escapes() -> None:
    import json

    from trajectory_compressor.core.redact import Scrubber

    secret = 'pä"ss-1234'
    text = json.dumps({"k": secret}, ensure_ascii=False)  # {"k": "pä\"ss-1234"}
    assert Scrubber([secret]).literal(text) == '{"k": "[REDACTED]"}'


def test_a_one_character_quoted_value_keeps_its_quotes() -> None:
    from trajectory_compressor.core.redact import redact

    assert redact('password="x"') == 'password="[REDACTED]"'
    assert redact("password='ab'") == "password='[REDACTED]'"
