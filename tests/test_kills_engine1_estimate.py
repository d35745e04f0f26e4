"""`inspect.estimate`: the time estimate's arithmetic and JSON on hand-made measurements."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterator

import pytest

from tests.fake_llm_server import FakeLLMServer
from trajectory_compressor.core.config import CompressionConfig, EndpointConfig
from trajectory_compressor.core.extractive import ExtractiveSummarizer
from trajectory_compressor.core.summary import SummaryRequest
from trajectory_compressor.inspect.estimate import (
    Probe,
    TargetTime,
    TimedSummarizer,
    TimeEstimate,
    WorkClock,
    estimate_time,
    requests_per_second,
)
from trajectory_compressor.summarizers import make_summarizer

# -- the time estimate's JSON -------------------------------------------------------------

def test_the_time_estimates_seconds_are_given_to_a_tenth_of_a_millisecond():
    probe = Probe(rows=1, seconds=(1.234567,), failures=(), startup_seconds=0.123456)
    estimate = TimeEstimate("openai", "probed", rows=3, read_seconds=2.345678,
                            targets=[TargetTime(100, 1, 0.987654, 1, 1.234567)],
                            seconds_per_call=1.234567, concurrency=1, probe=probe)
    data = estimate.to_dict()
    assert data["read_and_count_seconds"] == 2.3457
    assert data["seconds_per_call"] == 1.2346
    assert data["probe"]["startup_seconds"] == 0.1235
    assert data["probe"]["call_seconds"] == [1.2346]
    (t,) = data["targets"]
    assert (t["local_seconds"], t["wait_seconds"], t["seconds"]) == (0.9877, 1.2346, 2.2222)


def test_a_rate_limit_only_when_every_openai_endpoint_sets_one():
    """The endpoints' requests per minute over a second: 6 + 12 a minute is 0.3 a
    second; with one endpoint unlimited, or none limited, or another summarizer, none."""
    limited = [EndpointConfig("http://127.0.0.1:1/v1", "m", rpm=6),
               EndpointConfig("http://127.0.0.1:2/v1", "m", rpm=12)]
    openai = CompressionConfig(summarizer="openai", endpoints=limited)
    assert requests_per_second(openai) == pytest.approx(0.3)
    one_open = [limited[0], EndpointConfig("http://127.0.0.1:3/v1", "m")]
    assert requests_per_second(openai.replace(endpoints=one_open)) is None
    assert requests_per_second(openai.replace(
        endpoints=[EndpointConfig("http://127.0.0.1:3/v1", "m")])) is None
    for other in ("extractive", "local", "batch"):
        assert requests_per_second(openai.replace(summarizer=other)) is None


def test_a_new_clock_has_measured_nothing():
    clock = WorkClock(2)
    assert (clock.rows, clock.records_read, clock.records_kept) == (0, 0, 0)
    assert (clock.read_seconds, clock.count_seconds) == (0.0, 0.0)
    assert clock.plan_seconds == clock.build_seconds == clock.extractive_seconds == [0.0, 0.0]
    assert clock.summarized == [0, 0]


def test_a_timed_summarizer_stands_for_the_one_it_wraps(counter):
    extractive = ExtractiveSummarizer(counter.count)
    timed = TimedSummarizer(extractive)
    assert timed.name == extractive.name == "extractive"
    with FakeLLMServer().in_thread() as server:
        config = CompressionConfig(summarizer="openai", target_max_tokens=600,
                                   summary_target_tokens=120).with_endpoint_flags(
                                       [server.url], "m")
        inner = make_summarizer(config, counter)
        llm = TimedSummarizer(inner)
        request = SummaryRequest([{"from": "human", "value": "list the files"},
                                  {"from": "gpt", "value": "a.py and b.py"}], 1, 120)

        async def session() -> dict[str, int]:
            await llm.start()
            await llm.summarize(request)
            counters = llm.live_counters()
            await llm.aclose()
            # Closed with the wrapper: the inner summarizer has no session left to send on.
            with pytest.raises(RuntimeError, match="not started"):
                await inner.summarize(SummaryRequest(request.turns, 1, 60))
            return counters

        counters = asyncio.run(session())
        assert server.requests == 1
    assert counters == {"api_calls": 1, "requests": 0}
    assert len(llm.seconds) == 1 and llm.failures == []


def test_the_clock_times_what_producing_the_items_takes():
    """Each item takes 20 ms to produce, and so does finding there is no more: the read
    time is at least 4 x 20 ms, and no more than the loop's wall time."""

    def slow() -> Iterator[int]:
        for i in range(3):
            time.sleep(0.02)
            yield i
        time.sleep(0.02)

    clock = WorkClock(1)
    start = time.perf_counter()
    assert list(clock.timed(slow())) == [0, 1, 2]
    wall = time.perf_counter() - start
    assert 4 * 0.02 <= clock.read_seconds <= wall


def test_reading_and_counting_add_up():
    """Read 2 s, distill and count 0.5 s, plan 0.25 s, build 1 s (the extractive
    summaries' 0.4 s of it): measured, the extractive estimate is all of it."""
    clock = WorkClock(1)
    clock.rows, clock.read_seconds, clock.count_seconds = 10, 2.0, 0.5
    clock.plan_seconds[0], clock.build_seconds[0] = 0.25, 1.0
    clock.extractive_seconds[0], clock.summarized[0] = 0.4, 3
    estimate = estimate_time(CompressionConfig(summarizer="extractive"), clock, [100], [3])
    assert estimate.read_seconds == pytest.approx(2.5)
    assert estimate.to_dict()["read_and_count_seconds"] == 2.5
    (t,) = estimate.targets
    assert t.local_seconds == pytest.approx(3.75) and t.seconds == pytest.approx(3.75)
    # An LLM does the summaries' work instead: 0.4 s less, plus 3 calls of 2 s at once.
    llm = estimate_time(CompressionConfig(summarizer="openai", max_concurrent_requests=3),
                        clock, [100], [3], seconds_per_call=2.0)
    assert llm.targets[0].local_seconds == pytest.approx(3.35)
    assert llm.targets[0].seconds == pytest.approx(3.35 + 2.0)


def test_the_estimates_records_are_values():
    probe = Probe(1, (1.0,), (), 0.0)
    target = TargetTime(100, 1, 1.0, 1, 1.0)
    estimate = TimeEstimate("openai", "probed", 1, 1.0, [target], probe=probe)
    for record, name in ((probe, "rows"), (target, "calls"), (estimate, "rows")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(record, name, 2)


def test_a_probe_names_its_first_failure():
    probe = Probe(2, (1.0, 2.0), ("HTTP 500 first", "HTTP 503 second"), 0.0)
    data = probe.to_dict()
    assert (data["calls"], data["failed"], data["first_failure"]) == (2, 2, "HTTP 500 first")
    assert Probe(1, (1.0,), (), 0.0).to_dict()["first_failure"] is None
