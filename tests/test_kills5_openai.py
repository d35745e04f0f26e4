"""The `openai` backend against the aiohttp fake server, round 5 (issue 26, item 5).

Each expected value comes from a stated contract: OpenAISummarizer's docstring (cache,
identical regions in flight, repairs, the bound of a reply, the first failure of a kind
said on stderr), `Summary.commit` (the summary a row finally keeps replaces the cache
entry under a fidelity bar), README "Loud failures" / "Cache" / `--min-fidelity` ("under
a bar, the cache holds accepted summaries only") and `secret_values` (the run's key values
are scrubbed from everything it writes). Tokens are counted as characters where a counter
is given, so every bound is worked out by hand.
"""

from __future__ import annotations

import asyncio
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fake_llm_server import LOSSY_TEXT, FakeLLMServer, fenced, lossy_reply
from tests.fixtures_runs import words, write_jsonl
from trajectory_compressor.core.config import CompressionConfig, EndpointConfig
from trajectory_compressor.core.summary import (
    Repair,
    Summary,
    SummaryFailed,
    SummaryRequest,
    SummaryUsage,
)
from trajectory_compressor.engine.job import compress_dataset
from trajectory_compressor.summarizers.openai import OpenAISummarizer

PREFIX = "[CONTEXT SUMMARY]: "  # 19 characters
SENTENCE = "Step one of the task is done. "  # 30 characters, ends a sentence
TARGET = 100  # tokens; the limit is 100 x 2.0 = 200


def config(**overrides: Any) -> CompressionConfig:
    base: dict[str, Any] = dict(max_retries=1, retry_delay=0.01, request_timeout=30.0,
                                cache_enabled=False, summary_tolerance=2.0)
    base.update(overrides)
    return CompressionConfig(**base)


def cached(tmp_path: Path, **overrides: Any) -> CompressionConfig:
    return config(cache_enabled=True, cache_path=str(tmp_path / "c.sqlite"), **overrides)


def summarizer(url: str, cfg: CompressionConfig, counter: Any = len) -> OpenAISummarizer:
    return OpenAISummarizer(cfg, [EndpointConfig(url, "fake-model")], environ={},
                            count_tokens=counter)


def request(origin: str | None = None, repair: Repair | None = None) -> SummaryRequest:
    turns = [{"from": "gpt", "value": "call the tool on file one"},
             {"from": "tool", "value": "the file holds three lines"}]
    return SummaryRequest(turns, 3, TARGET, origin=origin, repair=repair)


async def summarize(url: str, cfg: CompressionConfig, req: SummaryRequest,
                    counter: Any = len) -> Summary:
    async with summarizer(url, cfg, counter) as s:
        return await s.summarize(req)


# -- the first failure of a kind, on stderr ------------------------------------------


def test_the_first_failure_of_a_kind_is_written_to_stderr_at_once(monkeypatch):
    # README "Loud failures": printed on stderr with its reason, and flushed as it is
    # written: a program that sets sys.stderr to a file it opened (block-buffered, as
    # `open` makes it) sees the warning in that file at once, not at the end of a long run.
    raw = io.BytesIO()
    buffered = io.TextIOWrapper(raw, encoding="utf-8", write_through=False)
    monkeypatch.setattr(sys, "stderr", buffered)

    async def main():
        async with FakeLLMServer(script=["http500"],
                                 reply=lambda data: SENTENCE * 2) as server:
            summary = await summarize(server.url, config(max_retries=2), request())
            return summary, server.url

    summary, url = asyncio.run(main())
    said = raw.getvalue().decode()  # what reached the file, not what waits in a buffer
    monkeypatch.undo()
    assert summary.source == "llm"  # the retry got it
    assert said.startswith(f"warning: {url}: HTTP 500")
    assert ("(the first 'http' failure from this endpoint; later ones are counted in the "
            "metrics file under summarization.errors_by_kind)\n") in said
    assert said.count("warning:") == 1


# -- a repair: asked once for one row -------------------------------------------------


REPAIR = Repair("The assistant read a file.", ("config.yaml",))


def test_a_repair_is_neither_cached_nor_served_from_the_cache(tmp_path):
    # A repair is asked once for one row (SummaryRequest.repair): a second row asking the
    # very same repair asks the endpoint again, even with the cache on and no fidelity bar
    # deferring its writes.
    cfg = cached(tmp_path)

    async def main():
        async with FakeLLMServer(reply=lambda data: SENTENCE * 2) as server:
            first = await summarize(server.url, cfg, request("row 1", REPAIR))
            second = await summarize(server.url, cfg, request("row 2", REPAIR))
            return first, second, server.requests

    first, second, requests = asyncio.run(main())
    assert requests == 2
    assert (first.source, second.source) == ("llm", "llm")
    assert second.usage.api_calls == 1
    assert second.text == PREFIX + (SENTENCE * 2).rstrip()


def test_identical_repairs_in_flight_are_not_shared(tmp_path):
    # Nor is a repair shared with a twin in flight, as an identical first request is.
    cfg = cached(tmp_path, max_invented=0)

    async def main():
        async with FakeLLMServer(latency=0.2, reply=lambda data: SENTENCE * 2) as server:
            async with summarizer(server.url, cfg) as s:
                pair = await asyncio.gather(s.summarize(request("row 1", REPAIR)),
                                            s.summarize(request("row 2", REPAIR)))
            return pair, server.requests

    (first, second), requests = asyncio.run(main())
    assert requests == 2
    assert (first.source, second.source) == ("llm", "llm")
    assert first.usage.api_calls == second.usage.api_calls == 1


def test_a_repair_whose_every_attempt_fails_raises_summary_failed():
    # "when every attempt failed it raises SummaryFailed and the caller falls back"
    async def main():
        async with FakeLLMServer(faults={"http500": 1.0}) as server:
            with pytest.raises(SummaryFailed) as caught:
                await summarize(server.url, config(max_retries=2), request("r", REPAIR))
            return caught.value, server.requests

    failure, requests = asyncio.run(main())
    assert requests == 2  # max_retries = 2 attempts
    assert failure.usage.errors_by_kind == {"http": 2}
    assert "HTTP 500" in str(failure)


# -- identical regions: shared while in flight, not after ------------------------------


def test_without_a_cache_an_identical_region_asked_later_is_asked_again():
    # "so is the summary of a region identical to one already being summarized": once
    # the first has come back it is no longer being summarized, and with the cache off
    # nothing keeps it.
    async def main():
        async with FakeLLMServer(reply=lambda data: SENTENCE * 2) as server:
            async with summarizer(server.url, config()) as s:
                first = await s.summarize(request())
                second = await s.summarize(request())
            return first, second, server.requests

    first, second, requests = asyncio.run(main())
    assert requests == 2
    assert (first.source, second.source) == ("llm", "llm")
    assert second.usage.api_calls == 1


# -- the cache: truncation and the summary a row keeps under a bar ---------------------


def test_a_cached_summary_that_was_cut_is_still_reported_truncated(tmp_path):
    # 19 + 10 x 30 - 1 = 318 characters > 200: cut after two sentences (78 characters,
    # a third would end at 108 > 100). The cut text, served again from the cache, fits
    # with no cut, but it is the same cut summary: truncated.
    cfg = cached(tmp_path)

    async def main():
        async with FakeLLMServer(reply=lambda data: SENTENCE * 10) as server:
            paid = await summarize(server.url, cfg, request("row 1"))
            hit = await summarize(server.url, cfg, request("row 2"))
            return paid, hit, server.requests

    paid, hit, requests = asyncio.run(main())
    assert requests == 1
    assert paid.text == hit.text == PREFIX + (SENTENCE * 2).rstrip()
    assert (paid.source, paid.truncated) == ("llm", True)
    assert (hit.source, hit.truncated) == ("cache", True)


def test_under_a_bar_the_summary_a_row_keeps_replaces_a_cached_one(tmp_path):
    # An entry cached by a run without the bar; under the bar, the row that was served
    # it keeps another (its repair): `Summary.commit` stores that one, with what it cost
    # and this row as the one that paid for it (README "Cache": a resume reports it as
    # obtained, `llm`, any other row as `cache`).
    repaired = PREFIX + "The assistant read config.yaml and ran the tool."
    paid_for = SummaryUsage(api_calls=2, prompt_tokens=120, completion_tokens=30)

    async def main():
        async with FakeLLMServer(reply=lambda data: LOSSY_TEXT) as server:
            first = await summarize(server.url, cached(tmp_path), request("run 1 row 1"))
            async with summarizer(server.url, cached(tmp_path, min_fidelity=0.9)) as s:
                served = await s.summarize(request("run 2 row 5"))
                assert served.source == "cache" and served.commit is not None
                served.commit(Summary(repaired, "llm", paid_for, False))
            bar = cached(tmp_path, min_fidelity=0.9)
            resumed = await summarize(server.url, bar, request("run 2 row 5"))
            other = await summarize(server.url, bar, request("run 3 row 1"))
            return first, served, resumed, other, server.requests

    first, served, resumed, other, requests = asyncio.run(main())
    assert requests == 1
    assert first.text == served.text == PREFIX + LOSSY_TEXT
    assert (resumed.source, resumed.text) == ("llm", repaired)
    assert (resumed.usage.api_calls, resumed.usage.prompt_tokens,
            resumed.usage.completion_tokens) == (2, 120, 30)
    assert (other.source, other.text, other.usage.api_calls) == ("cache", repaired, 0)


def test_without_a_bar_a_cached_summary_has_nothing_to_commit(tmp_path):
    # Without a bar every summary is cached as it comes: a hit defers nothing.
    async def main():
        async with FakeLLMServer(reply=lambda data: LOSSY_TEXT) as server:
            await summarize(server.url, cached(tmp_path), request("row 1"))
            return await summarize(server.url, cached(tmp_path), request("row 2"))

    hit = asyncio.run(main())
    assert hit.source == "cache" and hit.commit is None


# One fact per middle turn: the lossy server keeps none, its repairs name them all.
FACTS = ["src/app/main.py", "config.yaml", "req_8f2k91", "KeyError", "user_id",
         "localhost:8080", "512 MB", "PR-1234"]


def fact_row() -> dict[str, Any]:
    head = [("system", "You are a coding agent."), ("human", "Fix the failing service."),
            ("gpt", "I will look first."), ("tool", "ok")]
    middle = [("gpt" if i % 2 == 0 else "tool", f"Checked {fact} then " + words(60))
              for i, fact in enumerate(FACTS)]
    tail = [("gpt", "Now again src/app/main.py " + words(5)), ("tool", words(5)),
            ("gpt", "Done " + words(3)), ("human", "Thanks")]
    return {"id": "facts", "conversations": [{"from": r, "value": v}
                                             for r, v in head + middle + tail]}


def compress(tmp_path: Path, server: FakeLLMServer, name: str, **settings: Any) -> dict:
    src = tmp_path / "in.jsonl"
    if not src.exists():
        write_jsonl(src, [fact_row()])
    cfg = CompressionConfig(
        target_max_tokens=150, summary_target_tokens=60, add_summary_notice=False,
        summarizer="openai", base_url=server.url, api_key_env=None, max_retries=1,
        retry_delay=0, summary_references="off",
        cache_path=str(tmp_path / "cache.sqlite")).replace(**settings)
    out = tmp_path / f"{name}.jsonl"
    compress_dataset(str(src), str(out), cfg, overwrite=True)
    [row] = [json.loads(line) for line in out.read_text().splitlines()]
    return row["compression_metrics"]


def test_a_cached_summary_below_a_new_bar_is_repaired_once_and_replaced(tmp_path):
    # README --min-fidelity: "Under a bar, the cache holds accepted summaries only." A
    # run without the bar cached the lossy summary; the first run under the bar finds it
    # below, repairs it (one request) and accepts the repair: that replaces the entry, so
    # the next run under the bar is served the repaired summary and asks nothing.
    with FakeLLMServer(reply=lossy_reply(repairs=True)).in_thread() as server:
        plain = compress(tmp_path, server, "plain")
        assert server.requests == 1
        repaired = compress(tmp_path, server, "repaired", min_fidelity=0.9)
        assert server.requests == 2
        again = compress(tmp_path, server, "again", min_fidelity=0.9)
        assert server.requests == 2
    assert plain["fidelity"]["ratio"] == 0.0
    assert repaired["summary_source"] == "llm" and repaired["fidelity_repair"] is True
    assert repaired["fidelity"]["ratio"] == 1.0
    assert again["summary_source"] == "cache" and "fidelity_repair" not in again
    assert again["fidelity"]["ratio"] == 1.0


# -- key values given in ``environ`` ---------------------------------------------------


def test_a_key_value_from_the_given_environ_is_scrubbed_from_the_summary():
    # The key of an endpoint comes from the mapping the summarizer is given (not the
    # process environment); its value never reaches a summary. Not key-shaped, so only
    # the literal scrub can catch it.
    secret = "velvet-otter-harbour-4417"
    environ = {"K5_OPENAI_TEST_KEY": secret}

    async def main():
        async with FakeLLMServer(api_key=secret,
                                 reply=lambda data: f"The key {secret} worked.") as server:
            cfg = config()
            endpoint = EndpointConfig(server.url, "fake-model", "K5_OPENAI_TEST_KEY")
            async with OpenAISummarizer(cfg, [endpoint], environ=environ,
                                        count_tokens=len) as s:
                return await s.summarize(request())

    summary = asyncio.run(main())
    assert summary.source == "llm"
    assert secret not in summary.text
    assert summary.text.startswith(PREFIX + "The key ") and summary.text.endswith(" worked.")


# -- the bound of a reply without a token counter --------------------------------------


def body(chars: int) -> str:
    """Plain words, no whitespace at either end, exactly ``chars`` characters."""
    text = ("the tool ran fine " * (chars // 18 + 2))[:chars]
    assert len(text) == chars and not text[-1].isspace()
    return text


def test_without_a_counter_a_reply_is_clipped_past_the_bounded_prefix():
    # Target 100 x tolerance 2.0 = 200 tokens, at most 16 characters a token: 3200
    # characters; the prefix kept is one more, 3201 (the class docstring). A reply of
    # exactly 3201 characters is whole, one of 3202 loses its last and is truncated.
    whole, over = body(3201), body(3201) + "x"

    async def main():
        async with FakeLLMServer(reply=lambda data: whole) as a, \
                FakeLLMServer(reply=lambda data: over) as b:
            return (await summarize(a.url, config(), request(), None),
                    await summarize(b.url, config(), request(), None))

    kept, clipped = asyncio.run(main())
    assert (kept.text, kept.truncated) == (PREFIX + whole, False)
    assert (clipped.text, clipped.truncated) == (PREFIX + whole, True)


def inventing_then_faithful(data: dict[str, Any]) -> str:
    """Makes up a shard path and a count at first; asked to repair a summary that
    invented (the request names what it invented), states only facts of the row."""
    if fenced(data, "invented") is not None:
        return "The assistant checked src/app/main.py and config.yaml."
    return "The assistant loaded /data/shards/train-00017.parquet with 4016 samples."


def test_under_max_invented_alone_the_cache_holds_the_accepted_repair(tmp_path):
    # README --min-fidelity: "Under a bar, the cache holds accepted summaries only";
    # --max-invented gates like it (SPEC §15). The first summary invents two facts and
    # is not accepted; its repair is. README "Cache": "An identical rerun makes no request
    # except for rows that fell back": the rerun is served the accepted repair.
    with FakeLLMServer(reply=inventing_then_faithful).in_thread() as server:
        first = compress(tmp_path, server, "first", max_invented=0)
        assert server.requests == 2  # the summary and its repair
        again = compress(tmp_path, server, "again", max_invented=0)
        assert server.requests == 2
    assert first["summary_source"] == "llm" and first["fidelity_repair"] is True
    assert first["fidelity"]["invented"] == 0 and "low_fidelity" not in first
    assert again["summary_source"] == "cache" and "fidelity_repair" not in again
    assert again["fidelity"]["invented"] == 0
