"""The `openai` backend's bounds and cache against the aiohttp fake server (issue 26, item 5).

From OpenAISummarizer's documentation and SPEC §6: a reply over its target x
``summary_tolerance`` tokens is cut at the last sentence end within the target (the
summary is then *truncated*), and one that cannot be cut so is a failed attempt
(``too_long``); a cached entry too long to bound is not served; a cached summary that
this very row (its ``origin``) paid for before an interruption is reported as the call it
was (source ``llm``, its usage), any other as a cache hit. Tokens are counted as
characters, so each bound is worked out by hand.
"""

from __future__ import annotations

import asyncio
import socket

import aiohttp
import pytest

from tests.fake_llm_server import FakeLLMServer
from trajectory_compressor.core.config import CompressionConfig, EndpointConfig
from trajectory_compressor.core.summary import SummaryFailed, SummaryRequest
from trajectory_compressor.summarizers.chat import ChatRequest, Failure, send
from trajectory_compressor.summarizers.endpoint import Endpoint
from trajectory_compressor.summarizers.openai import OpenAISummarizer
from trajectory_compressor.summarizers.pool import Pool, PoolFailure
from trajectory_compressor.summarizers.prompt import COMPACT

PREFIX = "[CONTEXT SUMMARY]: "  # 19 characters
SENTENCE = "Step one of the task is done. "  # 30 characters, ends a sentence
TARGET = 100  # tokens = characters here; the limit is 100 x 2.0 = 200


def config(**overrides) -> CompressionConfig:
    base = dict(max_retries=1, retry_delay=0.01, request_timeout=30.0, cache_enabled=False,
                summary_tolerance=2.0)
    base.update(overrides)
    return CompressionConfig(**base)


def summarizer(url: str, cfg: CompressionConfig) -> OpenAISummarizer:
    return OpenAISummarizer(cfg, [EndpointConfig(url, "fake-model")], environ={},
                            count_tokens=len)


def request(origin: str | None = None) -> SummaryRequest:
    turns = [{"from": "gpt", "value": "call the tool on file one"},
             {"from": "tool", "value": "the file holds three lines"}]
    return SummaryRequest(turns, 3, TARGET, origin=origin)


async def summarize(url: str, cfg: CompressionConfig, req: SummaryRequest):
    async with summarizer(url, cfg) as s:
        return await s.summarize(req)


def test_a_reply_over_its_limit_is_cut_at_a_sentence_end_and_marked_truncated():
    # 19 + 10 x 30 - 1 = 318 characters > 200: cut at the last sentence end within 100,
    # after two sentences (19 + 59 = 78; a third would end at 108).
    async def main():
        async with FakeLLMServer(reply=lambda data: SENTENCE * 10) as server:
            return await summarize(server.url, config(), request())

    summary = asyncio.run(main())
    assert summary.text == PREFIX + (SENTENCE * 2).rstrip()
    assert summary.truncated is True
    assert summary.source == "llm"


def test_a_reply_within_its_limit_is_kept_whole():
    # 19 + 6 x 30 - 1 = 198 characters: within the 200 allowed, not cut.
    async def main():
        async with FakeLLMServer(reply=lambda data: SENTENCE * 6) as server:
            return await summarize(server.url, config(), request())

    summary = asyncio.run(main())
    assert summary.text == PREFIX + (SENTENCE * 6).rstrip()
    assert summary.truncated is False


def test_a_reply_that_cannot_be_cut_is_a_failed_attempt():
    async def main():
        async with FakeLLMServer(reply=lambda data: "x" * 300) as server:
            with pytest.raises(SummaryFailed) as caught:
                await summarize(server.url, config(), request())
            return caught.value, server.requests

    failure, requests = asyncio.run(main())
    assert requests == 1
    assert failure.usage.errors_by_kind == {"too_long": 1}


def test_a_cached_entry_too_long_to_bound_is_asked_for_again(tmp_path):
    cfg = config(cache_enabled=True, cache_path=str(tmp_path / "c.sqlite"))

    async def main():
        # A run that did not bound its summaries (no counter) cached a blob.
        async with FakeLLMServer(reply=lambda data: "x" * 300) as blob:
            unbounded = OpenAISummarizer(cfg, [EndpointConfig(blob.url, "fake-model")],
                                         environ={})
            async with unbounded:
                first = await unbounded.summarize(request())
        async with FakeLLMServer(reply=lambda data: SENTENCE * 2) as server:
            second = await summarize(server.url, cfg, request())
            return first, second, server.requests

    first, second, requests = asyncio.run(main())
    assert first.text == PREFIX + "x" * 300
    assert requests == 1  # the blob was not served from the cache
    assert (second.source, second.text) == ("llm", PREFIX + (SENTENCE * 2).rstrip())


def test_a_summary_this_row_paid_for_is_reported_as_obtained_after_a_resume(tmp_path):
    cfg = config(cache_enabled=True, cache_path=str(tmp_path / "c.sqlite"))

    async def main():
        async with FakeLLMServer(reply=lambda data: SENTENCE * 2) as server:
            paid = await summarize(server.url, cfg, request(origin="run 1 row 7"))
            resumed = await summarize(server.url, cfg, request(origin="run 1 row 7"))
            twin = await summarize(server.url, cfg, request(origin="run 1 row 8"))
            return paid, resumed, twin, server.requests

    paid, resumed, twin, requests = asyncio.run(main())
    assert requests == 1
    assert paid.source == "llm" and paid.usage.api_calls == 1
    assert resumed.source == "llm"  # the interrupted part of this very row paid for it
    assert resumed.usage.api_calls == 1
    assert resumed.usage.prompt_tokens == paid.usage.prompt_tokens > 0
    assert twin.source == "cache"  # another row: a cache hit, free
    assert twin.usage.api_calls == 0


async def send_once(server: FakeLLMServer, chat: ChatRequest):
    async with aiohttp.ClientSession() as session:
        return await send(session, Endpoint(EndpointConfig(server.url, "fake-model"), None,
                                            0.0), chat, 30.0)


def chat_request(**kwargs) -> ChatRequest:
    return ChatRequest([{"role": "user", "content": "summarize this"}], 50, 0.3, 100,
                       **kwargs)


def test_a_reply_that_echoes_the_prompt_is_an_invalid_attempt():
    # The compact style rejects a reply that copies the transcript's markup back.
    async def main():
        async with FakeLLMServer(reply=lambda data: "[Turn 3 - gpt]: call the tool") as server:
            return await send_once(server, chat_request(reject=COMPACT.rejects))

    outcome = asyncio.run(main())
    assert isinstance(outcome, Failure) and outcome.kind == "invalid"
    assert "echoes the prompt ('[Turn')" in outcome.reason
    assert outcome.completion_tokens > 0  # what the reply cost still counts


def test_a_failed_reply_is_neither_rejected_nor_finished():
    seen: list[str] = []

    def finish(text: str):
        seen.append(text)
        return text, False

    def reject(text: str):
        seen.append(text)
        return None

    async def main():
        async with FakeLLMServer(faults={"http500": 1.0}) as server:
            return await send_once(server, chat_request(reject=reject, finish=finish))

    outcome = asyncio.run(main())
    assert isinstance(outcome, Failure) and outcome.kind == "http" and outcome.status == 500
    assert seen == []


def test_a_reply_the_pool_does_not_finish_is_not_truncated_and_a_failure_costs_no_tokens():
    async def main():
        async with FakeLLMServer(script=["http500"]) as server:
            pool = Pool([Endpoint(EndpointConfig(server.url, "fake-model"), None, 0.0)],
                        max_retries=1, retry_delay=0.01)
            await pool.start()
            try:
                with pytest.raises(PoolFailure) as caught:
                    await pool.complete(chat_request())  # the 500: no usage in it
                done = await pool.complete(chat_request())
            finally:
                await pool.aclose()
            return caught.value.usage, done

    failed, done = asyncio.run(main())
    assert (failed.prompt_tokens, failed.completion_tokens) == (0, 0)
    assert done.completion.truncated is False and done.usage.prompt_tokens > 0


def test_a_closed_port_is_unreachable_and_says_it_cannot_connect():
    with socket.socket() as probe:  # a port nobody listens on once this closes
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    async def main():
        async with aiohttp.ClientSession() as session:
            where = Endpoint(EndpointConfig(f"http://127.0.0.1:{port}/v1", "m"), None, 0.0)
            return await send(session, where, chat_request(), 5.0)

    outcome = asyncio.run(main())
    assert isinstance(outcome, Failure) and outcome.kind == "unreachable"
    assert outcome.reason.startswith(f"http://127.0.0.1:{port}/v1: cannot connect (")
    assert "Error)" not in outcome.reason  # the system's words, not an exception's name


def test_a_stalled_reply_is_a_timeout_and_a_dropped_one_a_connection_error():
    async def main():
        async with FakeLLMServer(faults={"stall": 1.0}, stall_seconds=5) as stalled, \
                FakeLLMServer(faults={"drop": 1.0}) as dropped:
            timeout = aiohttp.ClientTimeout(total=0.3)
            async with aiohttp.ClientSession(timeout=timeout) as session:
                slow = await send(session, Endpoint(EndpointConfig(stalled.url, "m"), None,
                                                    0.0), chat_request(), 0.3)
                cut = await send(session, Endpoint(EndpointConfig(dropped.url, "m"), None,
                                                   0.0), chat_request(), 0.3)
            return slow, cut, stalled.url

    slow, cut, url = asyncio.run(main())
    assert slow.kind == "timeout" and slow.reason == f"{url}: no reply within 0.3s"
    assert cut.kind == "connection" and "the server closed the connection" in cut.reason


def test_a_redirect_is_not_followed():
    async def main():
        async with FakeLLMServer() as target, \
                FakeLLMServer(redirect_to=target.url + "/chat/completions") as moved:
            outcome = await send_once(moved, chat_request())
            return outcome, target.requests

    outcome, reached = asyncio.run(main())
    assert isinstance(outcome, Failure) and outcome.kind == "redirect"
    assert reached == 0
