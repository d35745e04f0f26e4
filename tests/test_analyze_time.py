"""`analyze`'s estimate of how long `compress` would take (issue 25, item 4).

The arithmetic is checked on hand-made measurements; the measured parts against what they
measure (rows, summaries, a real run's duration); the probe against the loopback fake
server's fixed latency and the concurrency it was given, and by the requests the server
saw (none without --probe).
"""

from __future__ import annotations

import json
import re
import statistics

import pytest

from tests.cli_helpers import ROOT, invoke_cli
from tests.fake_llm_server import FakeLLMServer
from tests.fixtures_runs import (
    HAND_CONFIG,
    HAND_ROWS,
    compress_run,
    generated_rows,
    write_jsonl,
)
from tests.test_analyze import assert_fits_80_columns
from trajectory_compressor.app.analysis import format_analysis
from trajectory_compressor.app.time_estimate import duration
from trajectory_compressor.core.config import CompressionConfig, EndpointConfig
from trajectory_compressor.core.errors import ConfigError
from trajectory_compressor.inspect.analyze import analyze
from trajectory_compressor.inspect.estimate import (
    DEFAULT_SECONDS_PER_CALL,
    Probe,
    WorkClock,
    concurrency,
    estimate_time,
)
from trajectory_compressor.inspect.probe import ProbeSample
from trajectory_compressor.summarizers.local import cpu_count

SAMPLES = ROOT / "data_samples"
LATENCY = 1.0
# Seconds a request may take beyond the server's latency on a loaded machine; less than
# LATENCY, so that a request timed while it queued behind another would show.
SLACK = 0.9


def hand_clock() -> WorkClock:
    """Read 2 s; planning 0.5 s; summarized rows built in 3 s, 1 s of it the extractive
    summaries themselves, for 10 rows."""
    clock = WorkClock(1)
    clock.rows, clock.read_seconds = 100, 2.0
    clock.plan_seconds[0], clock.build_seconds[0] = 0.5, 3.0
    clock.extractive_seconds[0], clock.summarized[0] = 1.0, 10
    return clock


def test_the_arithmetic_on_hand_made_measurements():
    clock = hand_clock()
    extractive = estimate_time(CompressionConfig(summarizer="extractive"), clock, [100], [10])
    (t,) = extractive.targets
    assert extractive.basis == "measured"
    assert (t.local_seconds, t.calls, t.wait_seconds, t.seconds) == (5.5, 0, 0.0, 5.5)

    openai = CompressionConfig(summarizer="openai", max_concurrent_requests=5)
    assumed = estimate_time(openai, clock, [100], [10], seconds_per_call=2.0)
    (t,) = assumed.targets
    assert (assumed.basis, assumed.concurrency, assumed.seconds_per_call) == ("assumed", 5, 2.0)
    # The model's wait replaces the extractive summaries: 5.5 - 1; 10 calls / 5 x 2 s.
    assert (t.local_seconds, t.calls, t.wait_seconds, t.seconds) == (4.5, 10, 4.0, 8.5)

    default = estimate_time(openai, clock, [100], [10])
    assert default.seconds_per_call == DEFAULT_SECONDS_PER_CALL["openai"] == 10.0
    assert default.targets[0].wait_seconds == 10 / 5 * 10.0

    probe = Probe(rows=2, seconds=(1.0, 3.0), failures=(), startup_seconds=0.5)
    probed = estimate_time(openai, clock, [100], [10], probe=probe)
    (t,) = probed.targets
    # 2 s a call on average; the start is paid once.
    assert (probed.basis, probed.seconds_per_call) == ("probed", 2.0)
    assert t.wait_seconds == 10 / 5 * 2.0 + 0.5
    assert t.seconds == 4.5 + 4.5

    batch = estimate_time(CompressionConfig(summarizer="batch"), clock, [100], [10])
    (t,) = batch.targets
    assert (batch.basis, t.local_seconds, t.calls, t.wait_seconds, t.seconds) == (
        "batch_window", 4.5, 10, None, None)
    assert "24 h" in batch.to_dict()["batch_window"]


def test_a_sample_is_scaled_to_the_whole_input_but_its_reading():
    """Every record is read to be drawn (measured on all of them: 2 s); the rest of the
    work and the calls scale with 1,000 records read for 100 kept."""
    clock = hand_clock()
    clock.records_read, clock.records_kept = 1000, 100
    extractive = estimate_time(CompressionConfig(summarizer="extractive"), clock, [100], [10])
    assert extractive.whole_input_records == 1000
    (t,) = extractive.targets
    assert t.seconds == 5.5  # the sample itself, as compress --sample-percent would run it
    assert t.whole_input_seconds == pytest.approx(2.0 + (0.5 + 3.0) * 10)
    openai = CompressionConfig(summarizer="openai", max_concurrent_requests=5)
    (t,) = estimate_time(openai, clock, [100], [10], seconds_per_call=2.0).targets
    # 2 + (0.5 + 3 - 1) x 10, and 100 calls / 5 x 2 s.
    assert t.whole_input_seconds == pytest.approx(2.0 + 25.0 + 40.0)
    clock.records_read = 100  # not sampled
    assert estimate_time(openai, clock, [100], [10]).targets[0].whole_input_seconds is None


def test_concurrency_and_rate_limits_bound_the_wait():
    clock = hand_clock()
    endpoints = [EndpointConfig("http://127.0.0.1:1/v1", "m", max_concurrency=1),
                 EndpointConfig("http://127.0.0.1:2/v1", "m", max_concurrency=2)]
    config = CompressionConfig(summarizer="openai", endpoints=endpoints)
    assert concurrency(config) == 3  # the endpoints' own limits, under the default 50
    assert concurrency(config.replace(max_concurrent_requests=2)) == 2
    assert concurrency(config.replace(window_rows=1)) == 1  # rows held at once
    open_ended = [endpoints[0], EndpointConfig("http://127.0.0.1:3/v1", "m")]
    assert concurrency(config.replace(endpoints=open_ended)) == 50
    # 6 + 6 requests a minute: 10 calls need 50 s, more than 10 / 3 x 2 s.
    limited = [EndpointConfig(e.base_url, "m", max_concurrency=e.max_concurrency, rpm=6)
               for e in endpoints]
    slow = estimate_time(config.replace(endpoints=limited), clock, [100], [10],
                         seconds_per_call=2.0)
    assert slow.targets[0].wait_seconds == pytest.approx(50.0)
    # The local backend: one request per llama.cpp server, one server per 4 CPUs (1-4).
    local = CompressionConfig(summarizer="local")
    assert concurrency(local) == min(max(cpu_count() // 4, 1), 4)
    assert estimate_time(local, clock, [100], [10]).seconds_per_call == 15.0


@pytest.mark.parametrize(("seconds", "shown"), [
    (0.004, "0.00 s"), (0.42, "0.42 s"), (0.996, "1.0 s"), (12.34, "12.3 s"),
    (59.97, "1 min 00 s"), (245, "4 min 05 s"), (3599.6, "1 h 00 min"), (7620, "2 h 07 min"),
    (90000, "25 h 00 min"), (None, "-")])
def test_durations_read_as_a_person_says_them(seconds, shown):
    assert duration(seconds) == shown


@pytest.fixture
def hand_input(tmp_path, counter):
    return write_jsonl(tmp_path / "hand.jsonl", HAND_ROWS, extra_lines=("{oops",))


def test_extractive_is_measured_on_the_rows_it_summarized(hand_input, counter):
    config = CompressionConfig(summarizer="extractive", **HAND_CONFIG)
    # At 100 tokens "fits" and "big-tail" get a summary; at 300 no row is over.
    a = analyze(str(hand_input), config, targets=[100, 300], counter=counter)
    estimate = a.time
    assert estimate is not None and estimate.basis == "measured"
    assert estimate.rows == 5  # the rejected line is not a row
    assert [t.summarized for t in estimate.targets] == [2, 0]
    for t in estimate.targets:
        assert t.calls == 0 and t.wait_seconds == 0.0
        assert t.seconds == t.local_seconds > estimate.read_seconds > 0
    data = a.to_dict()["time_estimate"]
    assert data["basis"] == "measured" and data["rows_timed"] == 5
    assert [t["rows_summarized"] for t in data["targets"]] == [2, 0]
    text = format_analysis(a)
    assert_fits_80_columns(text)
    assert "Time compress would take: an estimate (extractive summaries)" in text
    assert "work timed here on 5 rows" in text


def test_the_extractive_estimate_is_near_a_real_run(tmp_path, counter):
    src = write_jsonl(tmp_path / "gen.jsonl", generated_rows(1) + generated_rows(2))
    config = CompressionConfig(summarizer="extractive", target_max_tokens=600,
                               summary_target_tokens=120)
    # The same work in the same process, moments apart: within a factor of 3 either way
    # (the machine is shared; a forgotten or doubled part would be far outside). The
    # fastest of up to three of each, taken in turn: a burst of load slows one of them
    # (an estimate once took 3.4 times its run here at a load of 5), not all three.
    estimated: list[float] = []
    took: list[float] = []
    for i in range(3):
        estimate = analyze(str(src), config, counter=counter).time
        run = compress_run(src, tmp_path / f"out{i}.jsonl", config, counter)
        assert estimate is not None
        (t,) = estimate.targets
        assert t.summarized == run.metrics.trajectories_compressed > 10
        estimated.append(t.seconds)
        took.append(run.metrics.processing_duration_seconds)
        if min(took) / 3 <= min(estimated) <= min(took) * 3:
            break
    assert min(took) / 3 <= min(estimated) <= min(took) * 3, (estimated, took)


def test_an_llm_without_probe_assumes_the_stated_figure(hand_input, counter):
    config = CompressionConfig(summarizer="openai", max_concurrent_requests=4, **HAND_CONFIG)
    a = analyze(str(hand_input), config, counter=counter, seconds_per_call=3.0)
    estimate = a.time
    assert estimate is not None and estimate.basis == "assumed"
    (t,) = estimate.targets
    assert (t.calls, estimate.concurrency) == (2, 4)
    assert t.wait_seconds == 2 / 4 * 3.0
    text = format_analysis(a)
    assert_fits_80_columns(text)
    assert "3.00 s per call assumed (--seconds-per-call)" in text
    assert "4 calls at once" in text and "--probe N times N real requests" in text
    assert text.splitlines()[0] == "Dry run: no LLM call, nothing written"


def test_probe_and_per_call_figure_only_for_an_llm(hand_input, counter):
    for name in ("extractive", "batch"):
        config = CompressionConfig(summarizer=name, **HAND_CONFIG)
        with pytest.raises(ConfigError, match="--probe times LLM summary requests"):
            analyze(str(hand_input), config, counter=counter, probe_requests=2)
        with pytest.raises(ConfigError, match="--seconds-per-call times LLM"):
            analyze(str(hand_input), config, counter=counter, seconds_per_call=2.0)
    openai = CompressionConfig(summarizer="openai", **HAND_CONFIG)
    with pytest.raises(ConfigError, match="not both"):
        analyze(str(hand_input), openai, counter=counter, probe_requests=2,
                seconds_per_call=2.0)
    with pytest.raises(ConfigError, match="1 or more"):
        analyze(str(hand_input), openai, counter=counter, probe_requests=0)


def test_the_probe_sample_is_drawn_over_the_whole_input():
    sample = ProbeSample(3, seed=7)
    for i in range(1000):
        sample.offer(i)  # type: ignore[arg-type] - any object stands for a row
    assert len(sample.rows) == 3 == len(set(sample.rows))
    assert max(sample.rows) >= 3  # not simply the first rows
    few = ProbeSample(5)
    for i in range(3):
        few.offer(i)  # type: ignore[arg-type]
    assert few.rows == [0, 1, 2]


def probe_input(tmp_path):
    """40 rows, many over 600 tokens, each with its own region (twins would share one
    request)."""
    return write_jsonl(tmp_path / "gen.jsonl", generated_rows(1))


def analyze_args(src, url, *more):
    return ("analyze", str(src), "--summarizer", "openai", "--base-url", url, "--model", "m",
            "--target-max-tokens", "600", "--summary-target-tokens", "120", *more)


def test_the_probe_times_real_requests_at_the_runs_concurrency(tmp_path):
    src = probe_input(tmp_path)
    out = tmp_path / "analysis.json"
    with FakeLLMServer(latency=LATENCY).in_thread() as server:
        run = invoke_cli(*analyze_args(src, server.url, "--max-concurrent-requests", "2",
                                       "--probe", "3", "--json", str(out)), cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        assert server.requests == 3  # N summary requests, no more
        assert server.peak_in_flight <= 2
    estimate = json.loads(out.read_text())["time_estimate"]
    assert estimate["basis"] == "probed" and estimate["concurrency"] == 2
    probe = estimate["probe"]
    assert (probe["rows"], probe["calls"], probe["failed"]) == (3, 3, 0)
    for seconds in probe["call_seconds"]:
        assert LATENCY <= seconds < LATENCY + SLACK
    per_call = estimate["seconds_per_call"]
    assert per_call == pytest.approx(statistics.mean(probe["call_seconds"]), abs=1e-3)
    (t,) = estimate["targets"]
    assert t["calls"] > 3
    # calls / concurrency x seconds per call (the start of an HTTP session is next to 0).
    assert t["wait_seconds"] == pytest.approx(t["calls"] / 2 * per_call
                                              + probe["startup_seconds"], abs=2e-3)
    assert t["calls"] / 2 * LATENCY <= t["wait_seconds"] < t["calls"] / 2 * (LATENCY + SLACK)
    assert t["seconds"] == pytest.approx(t["local_seconds"] + t["wait_seconds"], abs=2e-3)
    text = run.stdout
    assert_fits_80_columns(text)
    assert text.splitlines()[0] == "Dry run: nothing written; --probe sent 3 summary requests"
    assert re.search(r"\d s per call, measured by --probe \(3 requests: [\d.]+ s"
                     r"( to [\d.]+ s)?\)", text), text
    assert "2 calls at once" in text


def test_without_probe_no_request_is_sent(tmp_path):
    src = probe_input(tmp_path)
    with FakeLLMServer(latency=LATENCY).in_thread() as server:
        run = invoke_cli(*analyze_args(src, server.url, "--json", "-"), cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        stated = invoke_cli(*analyze_args(src, server.url, "--seconds-per-call", "2.5",
                                          "--json", "-"), cwd=tmp_path)
        assert stated.returncode == 0, stated.stderr
        assert server.requests == 0
    estimate = json.loads(run.stdout)["time_estimate"]
    assert (estimate["basis"], estimate["seconds_per_call"], estimate["probe"]) == (
        "assumed", 10.0, None)
    assert estimate["whole_input_records"] is None  # not a sample
    (t,) = json.loads(stated.stdout)["time_estimate"]["targets"]
    assert t["wait_seconds"] == pytest.approx(t["calls"] / 50 * 2.5, abs=1e-4)


@pytest.mark.parametrize("value", ["0", "-1", "1.5", "three"])
def test_a_probe_that_is_not_a_positive_whole_number_is_a_usage_error(tmp_path, value):
    src = write_jsonl(tmp_path / "hand.jsonl", HAND_ROWS)
    with FakeLLMServer().in_thread() as server:
        run = invoke_cli("analyze", str(src), "--summarizer", "openai", "--base-url",
                         server.url, "--probe", value, cwd=tmp_path)
        assert run.returncode == 2
        assert "--probe" in run.stderr
        assert server.requests == 0


@pytest.mark.parametrize(("flags", "message"), [
    (("--summarizer", "extractive", "--probe", "2"), "the extractive summarizer makes no"),
    (("--summarizer", "batch", "--probe", "2"), "batch window"),
    (("--summarizer", "openai", "--seconds-per-call", "0"), "must be > 0"),
    (("--summarizer", "openai", "--probe", "2", "--seconds-per-call", "3"), "not both"),
])
def test_timing_flags_that_cannot_apply_are_usage_errors(tmp_path, flags, message):
    src = write_jsonl(tmp_path / "hand.jsonl", HAND_ROWS)
    run = invoke_cli("analyze", str(src), *flags, cwd=tmp_path)
    assert run.returncode == 2
    assert message in run.stderr


def test_a_probe_whose_requests_fail_says_so(tmp_path, counter):
    src = probe_input(tmp_path)
    with FakeLLMServer(faults={"http500": 1.0}).in_thread() as server:
        config = CompressionConfig(summarizer="openai", target_max_tokens=600,
                                   summary_target_tokens=120, max_retries=1,
                                   retry_delay=0.0).with_endpoint_flags([server.url], "m")
        a = analyze(str(src), config, counter=counter, probe_requests=2)
    assert a.time is not None and a.time.probe is not None
    assert len(a.time.probe.failures) == 2 and "500" in a.time.probe.failures[0]
    assert a.time.basis == "probed"  # the time to fail is what a run spends too
    text = format_analysis(a)
    assert re.search(r"measured by --probe \(2 requests: [\d.]+ s( to [\d.]+ s)?, 2 failed\)",
                     text), text


def test_a_probe_rejected_by_the_endpoint_stops_analyze_with_exit_2(tmp_path):
    src = probe_input(tmp_path)
    with FakeLLMServer(api_key="the-right-key").in_thread() as server:
        run = invoke_cli(*analyze_args(src, server.url, "--api-key-env", "TC_PROBE_KEY",
                                       "--probe", "2"),
                         cwd=tmp_path, env={"TC_PROBE_KEY": "a-wrong-key"})
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith("error: ") and "a-wrong-key" not in run.stderr


SAMPLE_NAMES = ("trajectories.jsonl", "trajectories.parquet", "openai_messages.jsonl",
                "llamafactory_sharegpt.json", "llamafactory_messages.jsonl")


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_every_dialect_and_container_gets_a_probed_estimate(tmp_path, name):
    # A seeded quarter of the 50-row Hermes samples is enough (and 4x faster).
    sample = ("--sample-percent", "25") if name.startswith("trajectories") else ()
    with FakeLLMServer(latency=0.05).in_thread() as server:
        run = invoke_cli("analyze", str(SAMPLES / name), "--summarizer", "openai",
                         "--base-url", server.url, "--model", "m", "--target-max-tokens",
                         "4000", "--summary-target-tokens", "200", "--probe", "2",
                         "--json", "-", *sample, cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        assert server.requests == 2
    data = json.loads(run.stdout)
    estimate = data["time_estimate"]
    assert estimate["rows_timed"] == data["rows"] > 0
    assert estimate["basis"] == "probed" and estimate["probe"]["calls"] == 2
    (t,) = estimate["targets"]
    assert t["calls"] == data["targets"][0]["llm"]["summarization_calls"] >= 2
    assert t["seconds"] > t["wait_seconds"] >= t["calls"] / 50 * 0.05


def test_a_sampled_analysis_also_estimates_the_whole_input(tmp_path):
    src = write_jsonl(tmp_path / "gen.jsonl", generated_rows(1) + generated_rows(2))
    run = invoke_cli("analyze", str(src), "--summarizer", "extractive", "--target-max-tokens",
                     "600", "--summary-target-tokens", "120", "--sample-percent", "25",
                     "--json", "-", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    estimate = data["time_estimate"]
    assert estimate["whole_input_records"] == 80  # every line of the file was read
    assert 0 < data["rows"] < 80
    (t,) = estimate["targets"]
    assert t["whole_input_seconds"] > t["seconds"] > 0
    text = invoke_cli("analyze", str(src), "--summarizer", "extractive", "--target-max-tokens",
                      "600", "--summary-target-tokens", "120", "--sample-percent", "25",
                      cwd=tmp_path).stdout
    assert_fits_80_columns(text)
    assert f"work timed here on the {data['rows']} rows of the sample" in text
    assert "whole input (80 rows)" in text
