"""Round 4 of the mutation kills (issue 26, item 5) in `summarizers/`: the prompt's input
bound and repair list (`summarizers/prompt.py`) and the local backend's context size
(`summarizers/local.py`).

Expected values from the README ("Prompt", "Input and prompt" of the local backend) and
the modules' comments, worked out by hand.

The local backend's start (its servers, the pool in front of them) runs here against
servers in this process: `InProcessServer` is a `LocalServer` whose "server" is the aiohttp
fake of tests/fake_llm_server.py (the OpenAI API llama.cpp's server speaks) instead of a
llama.cpp process; starting, sizing and stopping real processes is test_local_server.py's
and test_local_llm.py's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tests.fake_llm_server import REPLY_MARK, FakeLLMServer
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.summary import Repair, SummaryRequest
from trajectory_compressor.summarizers import local as local_module
from trajectory_compressor.summarizers.local import LocalSummarizer, context_size
from trajectory_compressor.summarizers.local_server import LocalServer
from trajectory_compressor.summarizers.prompt import COMPACT, FULL, build_prompt, fence_nonce

# 20 turns of 2,000 characters (each under the 3,000 a turn keeps whole): 40,000
# characters said to hold 10,000 tokens, a quarter of a token per character.
TURNS = [{"from": "gpt" if i % 2 else "tool", "value": f"{i:02d}" + "x" * 1998}
         for i in range(20)]


def request(**more) -> SummaryRequest:
    return SummaryRequest(TURNS, 4, 300, region_tokens=10_000, **more)


def fenced(text: str, name: str) -> str:
    (body,) = re.findall(rf"<{name}-[0-9a-f]{{8}}>\n(.*?)\n</{name}-[0-9a-f]{{8}}>", text,
                         re.DOTALL)
    return body


def test_the_transcript_gets_the_input_bound_less_400_tokens():
    """README: the transcript is bounded to `max_input_tokens` less 400 tokens kept for
    the instructions and the message framing, at the region's own tokens per character:
    2,400 - 400 = 2,000 tokens at 0.25 a character is 8,000 characters."""
    prompt = build_prompt(request(), 2400, 0.3)
    assert prompt.max_chars == 8000
    assert prompt.tokens_per_char == 0.25
    assert prompt.transcript_chars < 40_000  # the whole region did not fit: it was cut
    assert FULL.overhead_tokens == 400


def test_the_transcript_keeps_2000_characters_however_small_the_bound():
    """README: however small `max_input_tokens`, the transcript keeps 2,000 characters:
    500 - 400 = 100 tokens would be 400 characters."""
    assert build_prompt(request(), 500, 0.3).max_chars == 2000
    assert build_prompt(request(), 400 + 500, 0.3).max_chars == 2000  # exactly 2,000
    assert build_prompt(request(), 400 + 501, 0.3).max_chars == 2004


def test_a_shrunk_prompt_never_goes_under_2000_characters():
    """A context-length error shrinks the transcript (README "Retries and fallback"),
    but not under 2,000 characters: then the request gives up shrinking."""
    shrink = build_prompt(request(), 2400, 0.3).chat_request().shrink
    assert shrink is not None
    smaller = shrink(0.25)  # 8,000 x 0.25 = 2,000 characters: still allowed
    assert smaller is not None
    assert shrink(0.2499) is None  # 1,999


def test_the_estimate_is_the_prompt_plus_the_completion_limit():
    """`estimated_tokens`, what a tokens-per-minute limit is charged: the 400 tokens of
    instructions, the transcript at 0.25 token a character, and the reply's limit,
    twice the summary target (README: `max_tokens` is twice `summary_target_tokens`)."""
    prompt = build_prompt(request(), 2400, 0.3)
    assert prompt.max_tokens == 600
    assert prompt.estimated_tokens == 400 + prompt.transcript_chars // 4 + 600
    assert prompt.chat_request().estimated_tokens == prompt.estimated_tokens


def test_a_repair_lists_at_most_40_dropped_facts():
    """README (Summary fidelity): a repair request carries the summary and what it
    dropped, at most 40 of the facts (the first, tail ones first as the row's list
    has them); the invented items likewise."""
    missing = tuple(f"/repo/file_{i}.py" for i in range(45))
    repair = Repair("A first summary.", missing, invented=missing)
    user = build_prompt(request(repair=repair), 24_000, 0.3).messages[1]["content"]
    assert fenced(user, "facts").split("\n") == [f"- {m}" for m in missing[:40]]
    assert fenced(user, "invented").split("\n") == [f"- {m}" for m in missing[:40]]
    repair = Repair("A first summary.", missing[:40])
    user = build_prompt(request(repair=repair), 24_000, 0.3).messages[1]["content"]
    assert fenced(user, "facts").split("\n") == [f"- {m}" for m in missing[:40]]


def test_the_local_context_is_three_times_the_input_plus_the_reply_in_512s():
    """The local server's context (README "Input and prompt"; summarizers/local.py: the
    model's tokenizer may need up to 3x the tokens ours counts): 3 x 512 + 320 (the
    compact prompt's reply limit) = 1,856, rounded up to 512s: 2,048."""
    assert context_size(512) == 2048
    assert context_size(1024) == 3584  # 3,072 + 320 = 3,392
    assert context_size(384) == 1536  # 1,152 + 320 = 1,472


def test_a_compact_repair_names_the_facts_and_the_invented_items_inline():
    """The compact prompt (the local backend's) lists a repair's items on one line, as
    written, separated by "; " (its wording: "include each of these exactly as
    written: ...", "without these: ...")."""
    repair = Repair("First.", ("/srv/app.py", "exit 3"))
    user = build_prompt(request(repair=repair), 512, None, COMPACT).messages[1]["content"]
    assert "include each of these exactly as written: /srv/app.py; exit 3\n" in user
    repair = Repair("First.", (), invented=("/data/x.parquet", "4016 samples"))
    user = build_prompt(request(repair=repair), 512, None, COMPACT).messages[1]["content"]
    assert "without these: /data/x.parquet; 4016 samples\n" in user


def test_a_repair_shows_the_first_summary_scrubbed_and_fenced():
    """README: the repair request carries the first summary, fenced like the transcript
    (a closing tag in it defused) and scrubbed of the run's secrets like the turns."""
    previous = "Used key sk-live-1234; then wrote </summary-00000000> and stopped."
    repair = Repair(previous, ("/srv/app.py",))
    user = build_prompt(request(repair=repair), 24_000, None,
                        scrub=lambda text: text.replace("sk-live-1234", "[REDACTED]")
                        ).messages[1]["content"]
    assert fenced(user, "summary") == ("Used key [REDACTED]; then wrote <\\/summary-00000000> "
                                       "and stopped.")


def test_the_fence_is_drawn_from_every_fenced_part():
    """The fence's nonce comes from the content (README: the same content, the same
    prompt): other content, or the same text split otherwise between the transcript and
    the summary, gives another nonce; the same parts, the same one."""
    assert re.fullmatch(r"[0-9a-f]{8}", fence_nonce("transcript", "summary"))
    assert fence_nonce("transcript", "summary") == fence_nonce("transcript", "summary")
    assert fence_nonce("transcript", "summary") != fence_nonce("transcript", "summarY")
    assert fence_nonce("ab", "c") != fence_nonce("a", "bc")
    assert fence_nonce("ab") != fence_nonce("ab", "")
    first = build_prompt(request(), 24_000, None).messages[1]["content"]
    other = SummaryRequest([{**TURNS[0], "value": "other"}, *TURNS[1:]], 4, 300,
                           region_tokens=10_000)
    second = build_prompt(other, 24_000, None).messages[1]["content"]
    assert re.search("<transcript-([0-9a-f]{8})>", first)[1] != re.search(
        "<transcript-([0-9a-f]{8})>", second)[1]


def test_a_one_turn_region_is_asked_for_by_its_index():
    one = SummaryRequest(TURNS[:1], 7, 300)
    user = build_prompt(one, 24_000, None).messages[1]["content"]
    assert user.startswith("Summarize turns 7 to 7 of the conversation:\n")
    assert build_prompt(request(), 24_000, None).messages[1]["content"].startswith(
        "Summarize turns 4 to 23 of the conversation:\n")


def test_the_words_asked_for_are_three_quarters_of_the_tokens_at_least_one():
    assert [FULL.target_words(n) for n in (1, 2, 4, 100, 750)] == [1, 1, 3, 75, 562]
    assert [COMPACT.target_words(n) for n in (2, 100, 750)] == [1, 75, 100]
    system = build_prompt(SummaryRequest(TURNS[:2], 0, 2), 24_000, None).messages[0]
    assert "Aim for about 2 tokens (roughly 1 words)." in system["content"]


def test_a_prompt_is_a_value_of_its_content():
    """Two builds of the same request are equal, whatever functions they carry to
    finish replies and scrub turns; and a prompt is not changed in place."""
    def scrub_a(text: str) -> str:
        return text

    def scrub_b(text: str) -> str:
        return text

    one = build_prompt(request(), 24_000, 0.3, scrub=scrub_a, finish=lambda t: (t, False))
    two = build_prompt(request(), 24_000, 0.3, scrub=scrub_b, finish=lambda t: (t, True))
    assert one == two
    with pytest.raises(dataclasses.FrozenInstanceError):
        one.max_chars = 1  # type: ignore[misc]


def test_the_compact_prompt_keeps_150_tokens_and_1000_characters():
    """README (local backend): the compact prompt's transcript gets the input bound less
    150 tokens, never under 1,000 characters: 512 - 150 = 362 tokens at 0.25 a character
    is 1,448 characters; at the 0.4 assumed when the region's count is unknown, 905,
    so 1,000."""
    assert build_prompt(request(), 512, None, COMPACT).max_chars == 1448
    unknown = SummaryRequest(TURNS, 4, 300)
    assert build_prompt(unknown, 512, None, COMPACT).max_chars == 1000
    shrink = build_prompt(request(), 4150, None, COMPACT).chat_request().shrink
    assert shrink is not None  # 16,000 characters
    assert shrink(1000 / 16_000) is not None and shrink(999 / 16_000) is None


def test_the_compact_prompt_cuts_turns_over_1000_characters_to_600_and_250():
    """README: turns over 1,000 characters keep their first 600 and last 250."""
    whole, cut = "a" * 1000, "h" * 600 + "z" * 151 + "t" * 250  # 1,001 characters
    region = SummaryRequest([{"from": "tool", "value": whole},
                             {"from": "tool", "value": cut}], 0, 100)
    user = build_prompt(region, 24_000, None, COMPACT).messages[1]["content"]
    assert whole in user
    assert "h" * 600 + "\n" in user and "h" * 601 not in user
    assert "\n" + "t" * 250 in user and "z" not in user


# -- the local backend started: its servers behind the pool ------------------------------

class InProcessServer(LocalServer):
    """A `LocalServer` answering from a fake OpenAI server in this process."""

    made: ClassVar[list[InProcessServer]] = []
    # The fake's options for each server made, in order (the first server's first).
    options: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, model: Path, **sizing: Any) -> None:
        super().__init__(model, **sizing)
        options = self.options[len(self.made)] if len(self.made) < len(self.options) else {}
        self.fake = FakeLLMServer(**options)
        self.stopped = 0
        self.made.append(self)

    async def start(self) -> None:
        await self.fake.start()
        self.port = self.fake.port

    def alive(self) -> bool:
        return self.stopped == 0

    def stop(self) -> None:
        self.stopped += 1
        super().stop()


@pytest.fixture
def in_process_servers(tmp_path, monkeypatch):
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF")
    monkeypatch.setattr(local_module, "find_model", lambda name: model)
    monkeypatch.setattr(local_module, "LocalServer", InProcessServer)
    monkeypatch.setattr(InProcessServer, "made", [])
    monkeypatch.setattr(InProcessServer, "options", [])
    return InProcessServer


@pytest.mark.quick  # names LocalSummarizer, but its servers are in-process fakes
def test_the_started_backend_sends_one_request_at_a_time_to_each_server(in_process_servers):
    """README "Sizing": one server per 4 CPUs (8 CPUs: two servers of 4 threads, each
    sized for the 512-token input) and one request at a time to each. The first reply of
    the first server fails; the request is tried again on another server than the one
    that failed when that one is free, else on the same one, never as a second request on
    a busy server. Every summary comes back; closing stops both servers."""
    in_process_servers.options = [{"script": ["http500"], "latency": 0.05},
                                  {"latency": 0.3}]
    config = CompressionConfig(summarizer="local", local_model="tiny.gguf", retry_delay=0.01,
                               cache_enabled=False)
    backend = LocalSummarizer(config, cpus=8)

    async def main() -> list[str]:
        await backend.start()
        try:
            requests = [SummaryRequest(TURNS[i:i + 2], i, 100) for i in (0, 2)]
            return [s.text for s in await asyncio.gather(*map(backend.summarize, requests))]
        finally:
            await backend.aclose()
            for server in in_process_servers.made:
                await server.fake.stop()

    texts = asyncio.run(main())
    servers = in_process_servers.made
    assert [(s.n_ctx, s.threads) for s in servers] == [(2048, 4), (2048, 4)]
    assert all(REPLY_MARK in text for text in texts)
    assert [s.fake.outcomes.total() for s in servers] == [2, 1]  # the retry: the first
    assert [s.fake.peak_in_flight for s in servers] == [1, 1]
    assert all(s.stopped for s in servers) and backend.inner is None
