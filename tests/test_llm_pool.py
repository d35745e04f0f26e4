"""The `openai` backend against a real loopback HTTP server with injected faults (§6, §12)."""

from __future__ import annotations

import asyncio
import types

import pytest

from tests.fake_llm_server import FAULTS, REPLY_MARK, FakeLLMServer
from trajectory_compressor.core.config import CompressionConfig, EndpointConfig
from trajectory_compressor.core.conversation import SUMMARY_PREFIX
from trajectory_compressor.core.deadline import Deadline
from trajectory_compressor.core.errors import FatalSummaryError
from trajectory_compressor.core.summary import SummaryFailed, SummaryRequest
from trajectory_compressor.engine import compressor as compressor_module
from trajectory_compressor.engine.compressor import TrajectoryCompressor
from trajectory_compressor.summarizers import pool as pool_module
from trajectory_compressor.summarizers.chat import ChatRequest
from trajectory_compressor.summarizers.openai import OpenAISummarizer
from trajectory_compressor.summarizers.pool import PoolFailure

KEY = "sk-test-0123456789abcdefSECRET"


# Timing under control: these tests assert what happens when time passes, so time is a
# `FakeClock` the test moves, and waits are for conditions or events, never a sleep
# whose length decides the outcome (the suite must pass on a loaded machine).

class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def until(condition, what: str, limit: float = 30.0) -> None:
    """Wait for ``condition()``: polled, bounded only as a guard against a hang."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + limit
    while not condition():
        if loop.time() > give_up:
            raise AssertionError(f"gave up waiting for {what}")
        await asyncio.sleep(0.002)


class GatedServer(FakeLLMServer):
    """Holds every request until ``gate`` is set (``on_arrival`` runs as each arrives)."""

    def __init__(self, on_arrival=None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.gate = asyncio.Event()
        self.on_arrival = on_arrival

    async def _answer(self, request):
        if self.on_arrival is not None:
            await self.on_arrival(self)
        await self.gate.wait()
        return await super()._answer(request)


class RecordedDeadline(Deadline):
    """A `Deadline` on a fake clock that says when its row is done with it, and how much
    of the budget the row had spent by then."""

    def __init__(self, seconds: float, clock: FakeClock) -> None:
        super().__init__(seconds, clock)
        self.done = False
        self.spent: float | None = None

    async def run(self, awaitable):
        try:
            return await super().run(awaitable)
        finally:
            self.done = True
            self.spent = self.seconds - self.remaining()


def fake_deadlines(monkeypatch, clock: FakeClock) -> list[RecordedDeadline]:
    """Every row's deadline runs on ``clock``; returns them as they are made."""
    made: list[RecordedDeadline] = []

    def make(seconds: float) -> RecordedDeadline:
        made.append(RecordedDeadline(seconds, clock))
        return made[-1]

    monkeypatch.setattr(compressor_module, "Deadline", make)
    return made


def config(**overrides) -> CompressionConfig:
    # A generous request timeout: a loopback reply on a loaded machine can take seconds,
    # and a timeout here would be a retry the test did not ask for.
    base = dict(max_retries=3, retry_delay=0.01, request_timeout=30.0, cache_enabled=False,
                max_concurrent_requests=50)
    base.update(overrides)
    return CompressionConfig(**base)


def summarizer(urls, cfg=None, model="fake-model", key_env=None, environ=None, **kwargs):
    endpoints = [EndpointConfig(u, model, key_env) for u in urls]
    return OpenAISummarizer(cfg or config(), endpoints, environ=environ or {}, **kwargs)


def request(i: int = 0, size: int = 40) -> SummaryRequest:
    turns = [{"from": "gpt", "value": f"call tool {i} " + "word " * size},
             {"from": "tool", "value": f"result {i} " + "data " * size}]
    return SummaryRequest(turns, 3, 200)


async def summarize_all(s: OpenAISummarizer, n: int, concurrent: bool = True):
    async with s:
        if concurrent:
            return await asyncio.gather(*(s.summarize(request(i)) for i in range(n)))
        return [await s.summarize(request(i)) for i in range(n)]


@pytest.mark.parametrize("fault", FAULTS)
def test_each_fault_is_a_failed_attempt_then_retried(fault):
    # Only the stall needs the request timeout; it is long enough for a normal reply on a
    # loaded machine, and the stall far longer than it.
    timeout = 5.0 if fault == "stall" else 30.0

    async def main():
        async with FakeLLMServer(script=[fault], retry_after=0.05, stall_seconds=600) as server:
            s = summarizer([server.url], config(request_timeout=timeout))
            [summary] = await summarize_all(s, 1)
            return summary, server

    summary, server = asyncio.run(main())
    assert summary.source == "llm"
    assert summary.text.startswith(SUMMARY_PREFIX + " " + REPLY_MARK)
    assert summary.text.count(SUMMARY_PREFIX) == 1
    u = summary.usage
    assert (u.api_calls, u.errors, u.retries) == (2, 1, 1)
    assert server.requests == 2
    assert u.prompt_tokens > 0 and u.completion_tokens > 0


@pytest.mark.parametrize("fault", ["http500", "drop", "html", "empty", "length", "truncated"])
def test_a_fault_on_every_attempt_raises_summary_failed_with_its_cost(fault):
    async def main():
        async with FakeLLMServer(faults={fault: 1.0}) as server:
            s = summarizer([server.url])
            with pytest.raises(SummaryFailed) as info:
                await summarize_all(s, 1)
            return info.value, server

    failure, server = asyncio.run(main())
    assert server.requests == 3
    u = failure.usage
    assert (u.api_calls, u.errors, u.retries) == (3, 3, 2)
    assert failure.reason.startswith("3 attempts failed; last: http://127.0.0.1:")


def test_retry_after_is_honoured_on_the_only_endpoint():
    async def main():
        async with FakeLLMServer(script=["rate_limit", "http503"], retry_after=0.4) as server:
            [summary] = await summarize_all(summarizer([server.url]), 1)
            return summary, server.arrivals

    summary, arrivals = asyncio.run(main())
    assert summary.source == "llm" and len(arrivals) == 3
    # retry_delay is 0.01 s, so only Retry-After can explain these gaps.
    assert arrivals[1] - arrivals[0] >= 0.4 and arrivals[2] - arrivals[1] >= 0.4


def test_a_rate_limited_request_fails_over_to_another_endpoint():
    async def main():
        async with FakeLLMServer(faults={"rate_limit": 1.0}, retry_after=30) as a, \
                FakeLLMServer() as b:
            summaries = await summarize_all(summarizer([a.url, b.url]), 5, concurrent=False)
            return summaries, a, b

    summaries, a, b = asyncio.run(main())
    assert all(s.source == "llm" for s in summaries)
    assert b.requests == 5
    # After the first 429, `a` cools down for Retry-After and the rest go to `b` directly.
    assert a.requests == 1


def test_a_rejected_key_is_fatal_and_names_the_endpoint_not_the_key():
    async def main():
        async with FakeLLMServer(api_key="the-right-key") as server:
            s = summarizer([server.url], key_env="FAKE_LLM_KEY", environ={"FAKE_LLM_KEY": KEY})
            async with s:
                results = await asyncio.gather(*(s.summarize(request(i)) for i in range(20)),
                                               return_exceptions=True)
                with pytest.raises(FatalSummaryError):
                    await s.summarize(request(99))
            return results, server

    results, server = asyncio.run(main())
    assert all(isinstance(r, FatalSummaryError) for r in results)
    message = str(results[0])
    assert server.url in message and "$FAKE_LLM_KEY" in message and "HTTP 401" in message
    assert KEY not in message and "\n" not in message
    assert server.requests <= 20  # no retries of a rejected key
    assert server.authorizations[f"Bearer {KEY}"] == server.requests


def test_no_key_is_sent_to_an_endpoint_without_a_key_variable():
    async def main():
        async with FakeLLMServer() as open_server, FakeLLMServer(api_key=KEY) as keyed:
            await summarize_all(summarizer([open_server.url]), 2)
            await summarize_all(summarizer([keyed.url], key_env="K", environ={"K": KEY}), 2)
            async with FakeLLMServer(api_key=KEY) as strict:
                with pytest.raises(FatalSummaryError, match="no API key was sent"):
                    await summarize_all(summarizer([strict.url]), 1)
            return open_server, keyed

    open_server, keyed = asyncio.run(main())
    assert set(open_server.authorizations) == {None}
    assert set(keyed.authorizations) == {f"Bearer {KEY}"}


def test_a_context_length_error_shrinks_the_input_and_retries():
    big = [{"from": "tool", "value": f"{i} " + "x" * 2400} for i in range(20)]

    async def main():
        async with FakeLLMServer(context_limit=2000) as server:
            s = summarizer([server.url], config(max_retries=1))
            async with s:
                summary = await s.summarize(SummaryRequest(big, 5, 200, region_tokens=12_000))
            return summary, server

    summary, server = asyncio.run(main())
    assert summary.source == "llm"
    assert server.outcomes["context"] >= 1 and server.outcomes["ok"] == 1
    sent = sum(len(m["content"]) for m in server.last_request["messages"])
    assert sent // 4 + 1 <= 2000
    assert "characters omitted" in server.last_request["messages"][1]["content"]
    assert summary.usage.errors == server.outcomes["context"]


def test_an_endpoint_dying_mid_run_fails_over_and_its_circuit_opens():
    async def main():
        async with FakeLLMServer(die_after=4, latency=0.005) as a, \
                FakeLLMServer(latency=0.005) as b:
            s = summarizer([a.url, b.url], config(max_concurrent_requests=4),
                           breaker_cooldown=3600)
            breaker = s.pool.endpoints[0].breaker
            send = breaker.on_send

            def on_send() -> None:  # the circuit's state as each request is sent
                states.append(breaker.state)
                send()

            breaker.on_send = on_send  # type: ignore[method-assign]
            summaries = await summarize_all(s, 60)
            return summaries, s, a, b

    states: list[str] = []
    summaries, s, a, b = asyncio.run(main())
    assert all(x.source == "llm" for x in summaries)
    dead = s.pool.endpoints[0]
    assert a.dead and dead.breaker.opened == 1 and dead.breaker.state == "open"
    # Once open, the dead endpoint gets no more traffic (the cooldown outlasts the test).
    # A count of its failures would depend on timing: a success that was slow to come
    # back restarts the count of consecutive failures.
    assert states == ["closed"] * dead.requests
    assert dead.failures >= dead.breaker.threshold
    assert b.requests >= 60 - 4


def test_circuit_breaker_stops_traffic_to_a_failing_endpoint_and_probes_it_later(monkeypatch):
    # The pool reads the breaker's time from `time.monotonic`: a fake clock here, which
    # stands still while the first ten requests run, however slowly.
    clock = FakeClock()
    monkeypatch.setattr(pool_module, "time", types.SimpleNamespace(monotonic=clock))

    async def main():
        async with FakeLLMServer(faults={"http500": 1.0}) as a, FakeLLMServer() as b:
            s = summarizer([a.url, b.url], breaker_threshold=3, breaker_cooldown=0.3)
            async with s:
                first = [await s.summarize(request(i)) for i in range(10)]
                ep_a = s.pool.endpoints[0]
                state_after = (ep_a.breaker.state, a.requests, b.requests)
                a.faults = {}  # endpoint a recovers
                clock.now += 0.31  # past the cooldown: the next request probes a
                second = [await s.summarize(request(100 + i)) for i in range(4)]
                return first + second, state_after, ep_a.breaker.state, a.requests

    summaries, (state, a_requests, b_requests), final_state, a_total = asyncio.run(main())
    assert all(x.source == "llm" for x in summaries)
    # Ties go to the first endpoint: a fails 3 times (each request retried on b), opens.
    assert state == "open" and a_requests == 3 and b_requests == 10
    assert final_state == "closed"
    assert a_total == 3 + 4  # the probe succeeded, then a is preferred again


def test_the_last_closed_endpoint_never_opens():
    async def main():
        async with FakeLLMServer(faults={"http500": 1.0}) as a:
            s = summarizer([a.url], breaker_threshold=2)
            async with s:
                for i in range(3):
                    with pytest.raises(SummaryFailed):
                        await s.summarize(request(i))
            return s, a

    s, a = asyncio.run(main())
    assert s.pool.endpoints[0].breaker.closed and a.requests == 9


def test_concurrency_is_bounded_globally_and_per_endpoint():
    async def main():
        async with GatedServer() as a, GatedServer() as b:
            endpoints = [EndpointConfig(a.url, "m", max_concurrency=2), EndpointConfig(b.url, "m")]
            s = OpenAISummarizer(config(max_concurrent_requests=7), endpoints, environ={})
            work = asyncio.ensure_future(summarize_all(s, 80))
            # Replies are held: the pool fills every slot it may, then waits.
            await until(lambda: a.in_flight + b.in_flight == 7, "7 requests in flight")
            for _ in range(20):
                await asyncio.sleep(0)  # room for an 8th request, if the bound were broken
            held = (a.in_flight, b.in_flight)
            a.gate.set()
            b.gate.set()
            summaries = await work
            return summaries, a, b, s, held

    summaries, a, b, s, held = asyncio.run(main())
    assert all(x.source == "llm" for x in summaries)
    assert held == (2, 5)
    assert a.peak_in_flight == 2 and a.peak_in_flight + b.peak_in_flight <= 7 + 2
    assert s.pool.in_flight == 0 and s.pool.calls == 80 == a.requests + b.requests
    assert s.live_counters() == {"api_calls": 80, "requests": 0}


def test_weights_shift_load_to_the_heavier_endpoint():
    async def main():
        async with FakeLLMServer(latency=0.02) as a, FakeLLMServer(latency=0.02) as b:
            endpoints = [EndpointConfig(a.url, "m", weight=3), EndpointConfig(b.url, "m")]
            s = OpenAISummarizer(config(max_concurrent_requests=16), endpoints, environ={})
            await summarize_all(s, 160)
            return a.requests, b.requests

    a_requests, b_requests = asyncio.run(main())
    assert a_requests + b_requests == 160
    assert a_requests > 2 * b_requests > 0


def test_the_deadline_leaves_the_row_unchanged_and_frees_the_pool(counter, monkeypatch):
    turns = [{"from": "system", "value": "sys"}, {"from": "human", "value": "task"}]
    turns += [{"from": "gpt" if i % 2 else "tool", "value": f"{i} " + "word " * 200}
              for i in range(12)]
    row = {"id": 7, "conversations": turns}
    # The rows' deadlines run on a fake clock: the stalled request spends a whole second
    # of it (past the 0.3 s deadline) the moment it arrives; the second row's request
    # spends none, so it is on time however slow the machine.
    clock = FakeClock()
    fake_deadlines(monkeypatch, clock)

    async def on_arrival(server):
        if server.requests == 1:
            clock.now += 1.0

    async def main():
        async with GatedServer(on_arrival, script=["stall"], stall_seconds=600) as server:
            server.gate.set()
            cfg = config(request_timeout=20, per_trajectory_timeout=0.3, target_max_tokens=1500,
                         summary_target_tokens=100)
            s = summarizer([server.url], cfg)
            async with TrajectoryCompressor(cfg, summarizer=s, counter=counter) as comp:
                late = await comp.compress_row(row)
                in_flight = s.pool.in_flight
                on_time = await comp.compress_row(row)
            return late, in_flight, on_time

    late, in_flight, on_time = asyncio.run(main())
    assert late.row["conversations"] == turns and late.metrics.failed
    assert "deadline" in late.metrics.error and not late.metrics.was_compressed
    assert in_flight == 0
    assert on_time.metrics.was_compressed and on_time.metrics.summary_source == "llm"


def test_cache_makes_a_rerun_free_whichever_endpoint_serves_the_model(tmp_path):
    path = tmp_path / "cache.sqlite"

    async def main():
        async with FakeLLMServer() as a, FakeLLMServer() as b:
            first = await summarize_all(summarizer([a.url], config(cache_path=str(path),
                                                                   cache_enabled=True)), 10)
            second = await summarize_all(summarizer([b.url], config(cache_path=str(path),
                                                                    cache_enabled=True)), 10)
            other_model = await summarize_all(
                summarizer([b.url], config(cache_path=str(path), cache_enabled=True),
                           model="another-model"), 10)
            return first, second, other_model, a.requests, b.requests

    first, second, other, a_requests, b_requests = asyncio.run(main())
    assert [s.source for s in first] == ["llm"] * 10 and a_requests == 10
    assert [s.source for s in second] == ["cache"] * 10
    assert [s.text for s in second] == [s.text for s in first]
    assert all(s.usage.api_calls == 0 for s in second)
    assert [s.source for s in other] == ["llm"] * 10 and b_requests == 10


def test_identical_regions_in_flight_cost_one_request():
    async def main():
        async with FakeLLMServer(latency=0.05) as server:
            s = summarizer([server.url])
            async with s:
                same = await asyncio.gather(*(s.summarize(request(1)) for _ in range(8)))
            return same, server.requests

    same, requests = asyncio.run(main())
    assert requests == 1
    assert sorted(x.source for x in same) == ["cache"] * 7 + ["llm"]
    assert len({x.text for x in same}) == 1


def test_model_text_is_trimmed_prefixed_once_and_redacted():
    def reply(data):
        return "\n [CONTEXT SUMMARY]: Read config.yaml; token ghp_abcdefghijklmnopqrstuvwxyz0123 " \
               "and key sk-abcdefghijklmnopqrstuvwx were found.  \n"

    async def main():
        async with FakeLLMServer(reply=reply) as server:
            [summary] = await summarize_all(summarizer([server.url]), 1)
            return summary

    summary = asyncio.run(main())
    assert summary.text == (f"{SUMMARY_PREFIX} Read config.yaml; token [REDACTED] and key "
                            "[REDACTED] were found.")


def test_the_request_follows_the_protocol():
    async def main():
        async with FakeLLMServer() as server:
            cfg = config(temperature=0.7)
            await summarize_all(summarizer([server.url], cfg, model="my-model"), 1)
            return server.last_request

    body = asyncio.run(main())
    assert body["model"] == "my-model" and body["temperature"] == 0.7
    assert body["max_tokens"] == 400  # 2 x the 200-token target
    assert [m["role"] for m in body["messages"]] == ["system", "user"]


def test_waiting_for_a_slot_does_not_count_against_the_deadline(counter, monkeypatch):
    """One slot, 0.3 s per request, five rows, a 0.8 s deadline: the last row waits
    1.2 s in the queue, yet every row gets its LLM summary; so does a sixth row whose
    region is the fifth's, waiting for that one's request.

    Time is a fake clock: each request spends 0.3 s of it when it arrives, once every
    other row still working is paused (queued for the slot, or waiting for its twin's
    request). So each row's deadline must show exactly its own request's 0.3 s."""
    rows = []
    for k in range(5):
        turns = [{"from": "system", "value": "sys"}, {"from": "human", "value": f"task {k}"}]
        turns += [{"from": "gpt" if i % 2 else "tool", "value": f"{k} {i} " + "word " * 200}
                  for i in range(12)]
        rows.append({"id": k, "conversations": turns})
    rows.append({"id": "twin", "conversations": rows[-1]["conversations"]})

    clock = FakeClock()
    deadlines = fake_deadlines(monkeypatch, clock)
    served_alone = []

    async def on_arrival(server):
        # Wait until every row but the one being served is paused or done.
        def others_still() -> bool:
            return sum(d.running and not d.done for d in deadlines) == 1
        await until(others_still, "the other rows to queue")
        served_alone.append(len(deadlines))
        clock.now += 0.3

    async def main():
        async with GatedServer(on_arrival) as server:
            server.gate.set()
            cfg = config(request_timeout=30, per_trajectory_timeout=0.8,
                         target_max_tokens=1500, summary_target_tokens=100,
                         max_concurrent_requests=1)
            s = summarizer([server.url], cfg)
            async with TrajectoryCompressor(cfg, summarizer=s, counter=counter) as comp:
                return await asyncio.gather(*(comp.compress_row(r) for r in rows))

    results = asyncio.run(main())
    sources = [r.metrics.summary_source for r in results]
    # The fifth row and its twin share a region: whichever asks first sends the request
    # (rows are counted on worker threads, so on a busy machine either may), and the other
    # waits for it and takes its summary from the cache.
    assert sources[:4] == ["llm"] * 4 and sorted(sources[4:]) == ["cache", "llm"]
    assert not any(r.metrics.failed for r in results)
    # 5 requests of 0.3 s each went by (1.5 s in all, past the 0.8 s deadline), and each
    # row spent only its own: the queue and the twin's wait stood still.
    assert len(served_alone) == 5 and clock.now == pytest.approx(1000 + 1.5)
    assert sorted(round(d.spent, 6) for d in deadlines) == [0.0] + [0.3] * 5


def test_a_reply_the_request_rejects_is_a_failed_attempt():
    """A reply that echoes the prompt is retried like an empty one, then falls back."""
    async def main():
        async with FakeLLMServer() as server:
            s = summarizer([server.url])
            chat = ChatRequest([{"role": "user", "content": "x"}], 50, 0.3, 100,
                               reject=lambda text: "echo" if REPLY_MARK in text else None)
            async with s:
                with pytest.raises(PoolFailure) as info:
                    await s.pool.complete(chat)
            return info.value, server.requests

    failure, requests = asyncio.run(main())
    assert requests == 3 and failure.usage.errors == 3
    assert failure.reason.endswith(": echo")
    assert failure.usage.completion_tokens > 0  # the rejected replies still cost tokens
