"""The summarizers' small parts at their documented contracts (issue 26, item 5).

Each test pins a rule stated in the module's documentation or in SPEC §5/§6: the cache
commits in batches (every 64 entries or 2 s since the last commit) in WAL mode and names
the tokenizer that filled it; `.env` values fill only what the environment leaves unset
or empty (python-dotenv's quoting); an endpoint's rate limits refill with time; a circuit
counts how many times it opened; a ``Retry-After`` that is not a number waits for
nothing; client errors are described without URLs; the backend factory refuses what it
cannot build. Expected values are worked out by hand from those rules.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import functools
import json
import os
import signal
import sqlite3
import sys
import types
from pathlib import Path

import aiohttp
import orjson
import pytest

from trajectory_compressor.core.config import CompressionConfig, EndpointConfig
from trajectory_compressor.core.errors import ConfigError
from trajectory_compressor.core.extractive import ExtractiveSummarizer
from trajectory_compressor.core.redact import Scrubber
from trajectory_compressor.counting.tokens import TokenCounter
from trajectory_compressor.summarizers import cache as cache_module
from trajectory_compressor.summarizers import local as local_module
from trajectory_compressor.summarizers import local_server, make_summarizer
from trajectory_compressor.summarizers.batch import BATCH_ERROR, import_results
from trajectory_compressor.summarizers.breaker import CircuitBreaker
from trajectory_compressor.summarizers.cache import (
    COMMIT_EVERY,
    COMMIT_SECONDS,
    SCHEMA_VERSION,
    CacheEntry,
    SummaryCache,
    cache_key,
)
from trajectory_compressor.summarizers.chat import (
    ChatRequest,
    Failure,
    _describe,
    parse_reply,
    parse_retry_after,
)
from trajectory_compressor.summarizers.choice import (
    default_summarizer,
    local_extra_installed,
    resolve_summarizer,
)
from trajectory_compressor.summarizers.dotenv import (
    MAX_DOTENV_BYTES,
    KeyEnviron,
    dotenv_paths,
    key_environ,
    read_dotenv,
)
from trajectory_compressor.summarizers.endpoint import (
    Endpoint,
    is_loopback,
    resolve_endpoints,
)
from trajectory_compressor.summarizers.local import LocalSummarizer, cpu_count
from trajectory_compressor.summarizers.openai import OpenAISummarizer
from trajectory_compressor.summarizers.pool import Pool

# -- the cache ------------------------------------------------------------------------


class Clock:
    """A monotonic clock the test moves by hand (the cache reads `time.monotonic`)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def committed_keys(path) -> set[str]:
    """The keys another connection sees: only what the cache has committed."""
    other = sqlite3.connect(path)
    try:
        return {row[0] for row in other.execute("SELECT key FROM summaries")}
    finally:
        other.close()


def test_a_put_soon_after_a_commit_waits_for_the_next_batch(tmp_path, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(cache_module, "time",
                        types.SimpleNamespace(monotonic=clock.monotonic, time=lambda: 0.0))
    path = tmp_path / "c.sqlite"
    cache = SummaryCache(path)
    clock.now += 100  # the cache was opened long ago
    cache.put("a", "m", "first")  # 100 s since the last commit: committed now
    assert committed_keys(path) == {"a"}
    clock.now += COMMIT_SECONDS / 2  # 1 s after that commit: batched, not yet durable
    cache.put("b", "m", "second")
    assert committed_keys(path) == {"a"}
    cache.commit()  # an explicit commit also restarts the 2 s
    clock.now += COMMIT_SECONDS / 2
    cache.put("c", "m", "third")
    assert committed_keys(path) == {"a", "b"}
    clock.now += COMMIT_SECONDS
    cache.put("d", "m", "fourth")
    assert committed_keys(path) == {"a", "b", "c", "d"}
    cache.close()


def test_the_cache_file_is_in_wal_mode(tmp_path):
    path = tmp_path / "c.sqlite"
    SummaryCache(path).close()
    other = sqlite3.connect(path)  # WAL is a property of the file: another connection sees it
    try:
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        other.close()


def test_a_tokenizer_mismatch_without_templates_is_a_clear_error(tmp_path):
    path = tmp_path / "c.sqlite"
    SummaryCache(path, {"name": "tok-a", "files_sha256": "aaa", "counting": "text"}).close()
    with pytest.raises(ConfigError) as caught:
        SummaryCache(path, {"name": "tok-b", "files_sha256": "bbb", "counting": "text"})
    message = str(caught.value)
    assert "tokenizer 'tok-a' (files aaa), counting text;" in message
    assert "tokenizer 'tok-b' (files bbb), counting text." in message
    assert "template" not in message  # neither identity has one


def test_a_tokenizer_mismatch_names_the_template_when_there_is_one(tmp_path):
    path = tmp_path / "c.sqlite"
    SummaryCache(path, {"name": "t", "files_sha256": "f", "counting": "chat_template",
                        "template_sha256": "abc"}).close()
    with pytest.raises(ConfigError) as caught:
        SummaryCache(path, {"name": "t", "files_sha256": "f", "counting": "chat_template",
                            "template_sha256": ""})
    message = str(caught.value)
    assert "counting chat_template, template abc;" in message
    assert message.count("template ") == 1  # the empty one is not named


# -- .env files -----------------------------------------------------------------------


def test_a_name_set_nowhere_is_missing(tmp_path):
    env = KeyEnviron({}, paths=[tmp_path / "none.env"])
    with pytest.raises(KeyError):
        env["API_KEY"]
    assert "API_KEY" not in env
    assert env.get("API_KEY", "default") == "default"


def test_an_empty_exported_value_stands_when_no_file_has_one(tmp_path):
    dotenv = tmp_path / ".env"
    dotenv.write_text("OTHER=x\n")
    env = KeyEnviron({"API_KEY": ""}, paths=[dotenv])
    assert env["API_KEY"] == ""
    assert "API_KEY" in env


def test_an_empty_quoted_value_reads_as_empty(tmp_path):
    dotenv = tmp_path / ".env"
    # python-dotenv: KEY="" and KEY='' are the empty string; KEY="a" is a.
    dotenv.write_text('EMPTY=""\nSINGLE=\'\'\nONE="a"\n')
    assert read_dotenv(dotenv) == {"EMPTY": "", "SINGLE": "", "ONE": "a"}


def test_the_length_counts_each_name_once(tmp_path):
    first, second = tmp_path / "home.env", tmp_path / "cwd.env"
    first.write_text("A=1\nB=2\n")
    second.write_text("B=3\nC=4\n")
    env = KeyEnviron({"A": "0", "D": "5"}, paths=[first, second])
    assert len(env) == 4  # A, D, B, C
    assert sorted(env) == ["A", "B", "C", "D"]
    assert len(KeyEnviron({}, paths=[])) == 0


# -- endpoints, rate limits, circuits -------------------------------------------------


def test_an_endpoint_with_only_a_request_limit_says_when_it_is_ready(tmp_path):
    # rpm 6: 0.1 request a second, a burst of max(1, 0.1 x 10 s) = 1 request.
    limited = Endpoint(EndpointConfig("http://127.0.0.1:1/v1", "m", rpm=6), None, 0.0)
    assert limited.admits(0.0) and limited.next_ready(0.0) == 0.0
    limited.send(1000, 0.0)
    limited.in_flight = 0  # the reply came back
    assert not limited.admits(0.0)
    assert limited.next_ready(0.0) == pytest.approx(0.001)  # a hair past zero balance
    assert limited.admits(10.0)  # 10 s refill one request


def test_a_sent_request_is_debited_its_estimated_tokens():
    # tpm 600: 10 tokens a second, a burst of 100 tokens.
    limited = Endpoint(EndpointConfig("http://127.0.0.1:1/v1", "m", tpm=600), None, 0.0)
    limited.send(150, 0.0)
    limited.in_flight = 0
    assert not limited.admits(0.0)  # 100 - 150 = -50: 5 s of debt
    assert limited.next_ready(0.0) == pytest.approx(5.001)
    assert not limited.admits(4.9)
    assert limited.admits(5.1)


def test_a_remote_host_is_not_loopback_and_its_plain_http_key_is_refused():
    assert is_loopback("http://example.com/v1") is False
    assert is_loopback("http://10.0.0.1/v1") is False
    assert is_loopback("http://127.0.0.2:8000/v1") is True
    with pytest.raises(ConfigError, match="plain http"):
        resolve_endpoints([EndpointConfig("http://example.com/v1", "m", "K")], 0.0,
                          environ={"K": "secret"})


def test_no_endpoint_is_a_config_error():
    with pytest.raises(ConfigError, match="at least one endpoint"):
        resolve_endpoints([], 0.0, environ={})


def test_the_circuit_counts_each_opening_once():
    breaker = CircuitBreaker(threshold=2, cooldown=5.0)
    breaker.record_failure(0.0)
    assert breaker.opened == 0
    breaker.record_failure(0.0)
    assert (breaker.state, breaker.opened) == ("open", 1)
    assert breaker.available(5.0)  # half-open: the probe
    breaker.on_send()
    breaker.record_failure(5.0)  # the probe failed: open again
    assert (breaker.state, breaker.opened) == ("open", 2)


# -- replies and errors ---------------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "NaN", " -nan "])
def test_a_retry_after_that_is_not_a_number_waits_for_nothing(value):
    assert parse_retry_after(value) is None


def test_client_errors_are_described_by_kind():
    assert _describe(aiohttp.ServerDisconnectedError()) == "the server closed the connection"
    assert _describe(aiohttp.ClientPayloadError("cut")) == "the reply was cut off"
    bad = aiohttp.ClientResponseError(None, (), status=502)  # type: ignore[arg-type]
    assert _describe(bad) == "bad HTTP reply (status 502)"
    assert _describe(aiohttp.ClientOSError()) == "connection error (ClientOSError)"


# -- choosing and building a backend --------------------------------------------------


def test_a_half_installed_local_extra_counts_as_not_installed():
    def broken(name: str) -> object:
        raise ValueError(f"{name}.__spec__ is None")

    assert local_extra_installed(broken) is False


@functools.lru_cache(maxsize=1)
def counter() -> TokenCounter:
    return TokenCounter.load()


def test_the_extractive_backend_is_built_and_batch_is_refused_with_its_two_phases():
    tokens = counter()
    assert isinstance(make_summarizer(CompressionConfig(summarizer="extractive"), tokens),
                      ExtractiveSummarizer)
    with pytest.raises(ConfigError, match="two phases") as caught:
        make_summarizer(CompressionConfig(summarizer="batch"), tokens)
    assert "--batch-dir" in str(caught.value)


def test_an_unknown_backend_is_refused_by_name():
    config = CompressionConfig()
    config.summarizer = "carrier-pigeon"  # past validation: the factory still refuses it
    with pytest.raises(ConfigError, match="unknown summarizer 'carrier-pigeon'"):
        make_summarizer(config, counter())


def test_the_local_backend_is_built_or_asks_for_its_extra(tmp_path):
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF")
    config = CompressionConfig(summarizer="local", local_model=str(model))
    try:
        summarizer = make_summarizer(config, counter())
    except ConfigError as exc:  # without the extra: it says which one to install
        assert "the local summarizer needs the optional 'local' extra" in str(exc)
    else:
        assert summarizer.name == "local"


# -- the local backend's sizing -------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")
def test_cpus_are_this_process_s_affinity():
    mine = os.sched_getaffinity(0)
    if len(mine) < 2:
        pytest.skip("one CPU: a narrower mask cannot be told apart")
    one = {min(mine)}
    os.sched_setaffinity(0, one)
    try:
        assert cpu_count() == 1
    finally:
        os.sched_setaffinity(0, mine)
    assert cpu_count() == len(mine)


def test_without_affinity_cpus_are_the_machine_s(monkeypatch):
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)  # macOS, Windows
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert cpu_count() == 6
    monkeypatch.setattr(os, "cpu_count", lambda: None)  # undeterminable: one
    assert cpu_count() == 1


# -- batch results (phase 2) ----------------------------------------------------------


def batch_ok(key: str, text: str) -> str:
    return json.dumps({"custom_id": key, "response": {"status_code": 200, "body": {
        "choices": [{"message": {"role": "assistant", "content": text},
                     "finish_reason": "stop"}]}}, "error": None})


def import_into(tmp_path, paths):
    cache = SummaryCache(tmp_path / "cache.sqlite")
    try:
        return import_results(paths, cache, "m", Scrubber(), "origin")
    finally:
        cache.close()


def test_every_custom_id_answered_twice_is_named_or_counted(tmp_path):
    # Six requests answered twice: the message names five and counts the sixth.
    out = tmp_path / "out.jsonl"
    out.write_text("".join(f"{batch_ok(f'k{i}', 'Once.')}\n{batch_ok(f'k{i}', 'Twice.')}\n"
                           for i in range(6)))
    with pytest.raises(ConfigError) as caught:
        import_into(tmp_path, [out])
    message = str(caught.value)
    assert message.startswith("6 custom_ids of the batch results have more than one result")
    named = [i for i in range(6) if f"'k{i}'" in message]
    assert len(named) == 5
    assert " and 1 more;" in message


def test_a_missing_results_file_is_one_clear_sentence(tmp_path):
    missing = tmp_path / "nowhere.jsonl"
    with pytest.raises(ConfigError) as caught:
        import_into(tmp_path, [missing])
    assert str(caught.value) == (f"cannot read batch results {missing}: "
                                 f"{os.strerror(errno.ENOENT)}")


def test_an_error_given_as_text_is_the_failure_s_reason(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text(json.dumps({"custom_id": "k1", "response": None,
                               "error": "the batch expired"}) + "\n")
    report = import_into(tmp_path, [out])
    assert report.failures == {"k1": (BATCH_ERROR, f"{out}:1: the batch expired")}


# -- the local backend before and after its servers -----------------------------------
# Finding the model needs the 'local' extra (test_local_model_choice.py covers that);
# these tests give the backend a model file as found, and start no server.


@pytest.fixture
def local_backend(tmp_path, monkeypatch):
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF")
    monkeypatch.setattr(local_module, "find_model", lambda name: model)

    def make(cpus: int, **overrides) -> LocalSummarizer:
        return LocalSummarizer(CompressionConfig(summarizer="local", local_model=str(model),
                                                 **overrides), cpus=cpus)

    return make


@pytest.mark.quick  # builds the local backend, starts no server
@pytest.mark.parametrize("cpus, servers, threads", [(2, 1, 2), (8, 2, 4), (64, 4, 16)])
def test_one_server_per_four_cpus_up_to_four(local_backend, cpus, servers, threads):
    # README "Sizing": each server gets 4 CPUs (all of them on a smaller machine); one
    # server per 4 CPUs, up to 4; the pool sends one request at a time to each server.
    backend = local_backend(cpus, max_concurrent_requests=50)
    assert (backend.layout.servers, backend.layout.threads) == (servers, threads)
    assert backend.config.max_concurrent_requests == servers


@pytest.mark.quick  # builds the local backend, starts no server
def test_a_local_backend_not_started_has_no_counters_and_closes_quietly(local_backend):
    backend = local_backend(2)
    assert backend.live_counters() == {}
    asyncio.run(backend.aclose())
    assert backend.inner is None and backend.servers == []


@pytest.mark.quick  # builds the local backend, starts no server
def test_closing_the_local_backend_closes_its_pool_and_cache(local_backend, tmp_path):
    backend = local_backend(2)
    inner = OpenAISummarizer(CompressionConfig(cache_enabled=True,
                                               cache_path=str(tmp_path / "c.sqlite")),
                             [EndpointConfig("http://127.0.0.1:9/v1", "tiny")], environ={})

    async def main():
        await inner.start()  # what `start` leaves behind once its servers answer
        backend.inner = inner
        assert backend.live_counters() == {"api_calls": 0, "requests": 0}
        await backend.start()  # started already: nothing more is launched
        assert backend.servers == []
        await backend.aclose()

    asyncio.run(main())
    assert backend.inner is None
    assert inner.cache is None and inner.pool._session is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_the_death_signal_option_is_prctl_s_set_operation():
    # prctl(2): PR_SET_PDEATHSIG (1) sets the signal sent when the parent dies, which
    # PR_GET_PDEATHSIG (2) reads back. Set here to a signal ignored by default (SIGWINCH),
    # read, then cleared: the servers' children ask for SIGKILL with this same option.
    libc = ctypes.CDLL(None, use_errno=True)
    out = ctypes.c_int(-1)
    try:
        libc.prctl(local_server.PR_SET_PDEATHSIG, int(signal.SIGWINCH), 0, 0, 0)
        assert libc.prctl(2, ctypes.byref(out), 0, 0, 0) == 0
    finally:
        libc.prctl(1, 0, 0, 0, 0)
    assert out.value == signal.SIGWINCH


def test_by_default_five_failures_in_a_row_open_the_circuit_for_five_seconds():
    # README "Endpoints": one that fails 5 times in a row is taken out of rotation and
    # probed again after 5 s.
    breaker = CircuitBreaker()
    for _ in range(4):
        breaker.record_failure(0.0)
    assert breaker.state == "closed" and breaker.available(0.0) is True
    breaker.record_failure(0.0)
    assert breaker.state == "open" and breaker.ready_at() == 5.0
    assert breaker.available(4.9) is False
    assert breaker.available(5.0) is True


def open_and_probe(breaker: CircuitBreaker, now: float) -> None:
    while breaker.state == "closed":
        breaker.record_failure(now)
    assert breaker.available(breaker.ready_at())  # half-open: the probe may go
    breaker.on_send()


def test_a_circuit_closed_by_its_probe_starts_afresh():
    breaker = CircuitBreaker(threshold=2, cooldown=5.0)
    open_and_probe(breaker, 0.0)
    breaker.record_failure(5.0)  # the probe failed: open for twice the cooldown
    assert breaker.ready_at() == 15.0
    assert breaker.available(15.0)
    breaker.on_send()
    assert breaker.record_success() is True  # the second probe closed it
    # Opened again later, it waits the configured cooldown, not the doubled one ...
    breaker.record_failure(20.0)
    breaker.record_failure(20.0)
    assert breaker.state == "open" and breaker.ready_at() == 25.0
    # ... and then admits its probe: the earlier probe is over.
    assert breaker.available(25.0) is True


@pytest.mark.parametrize("url", ["http://localhost:8000/v1", "http://LOCALHOST/v1",
                                 "http://llm.localhost:8080/v1", "http://[::1]:8000/v1"])
def test_localhost_names_are_loopback_and_take_a_key_over_plain_http(url):
    assert is_loopback(url) is True
    [resolved] = resolve_endpoints([EndpointConfig(url, "m", "K")], 0.0,
                                   environ={"K": "secret"})
    assert resolved.headers["Authorization"] == "Bearer secret"


def test_a_name_that_only_contains_localhost_is_not_loopback():
    assert is_loopback("http://localhost.example.com/v1") is False
    assert is_loopback("http://notlocalhost/v1") is False


def test_credentials_in_the_url_and_a_key_are_refused_together():
    with pytest.raises(ConfigError, match="credentials in its URL"):
        resolve_endpoints([EndpointConfig("https://user:pw@api.test/v1", "m", "K")], 0.0,
                          environ={"K": "secret"})
    [alone] = resolve_endpoints([EndpointConfig("https://user:pw@api.test/v1", "m")], 0.0,
                                environ={})
    assert "Authorization" not in alone.headers and "pw" not in alone.name


def test_resolved_endpoints_open_after_five_failures_by_default():
    [resolved] = resolve_endpoints([EndpointConfig("http://127.0.0.1:9/v1", "m")], 0.0,
                                   environ={})
    for _ in range(4):
        resolved.breaker.record_failure(0.0)
    assert resolved.breaker.state == "closed"
    resolved.breaker.record_failure(0.0)
    assert resolved.breaker.state == "open"


def test_an_endpoint_counts_what_it_was_sent_and_refuses_what_it_cannot_take():
    config = EndpointConfig("http://127.0.0.1:9/v1", "m", max_concurrency=2)
    endpoint = Endpoint(config, None, 0.0)
    assert endpoint.config is config and endpoint.requests == 0
    endpoint.send(10, 0.0)
    endpoint.send(10, 0.0)
    assert endpoint.requests == 2 and endpoint.in_flight == 2
    assert endpoint.admits(0.0) is False  # at its max_concurrency
    limited = Endpoint(EndpointConfig("http://127.0.0.1:9/v1", "m", rpm=6), None, 0.0)
    limited.send(10, 0.0)
    limited.in_flight = 0
    assert limited.admits(0.0) is False  # its one request a 10 s burst allows is used
    tokens = Endpoint(EndpointConfig("http://127.0.0.1:9/v1", "m", tpm=60), None, 0.0)
    tokens.send(100, 0.0)
    tokens.in_flight = 0
    assert tokens.admits(0.0) is False  # 10 tokens of burst, 100 spent


def test_a_half_open_endpoint_takes_one_probe_at_a_time():
    endpoint = Endpoint(EndpointConfig("http://127.0.0.1:9/v1", "m"), None, 0.0,
                        CircuitBreaker(threshold=1, cooldown=5.0))
    endpoint.breaker.record_failure(0.0)
    assert endpoint.admits(5.0) is True  # the probe
    endpoint.send(10, 5.0)
    endpoint.in_flight = 0  # even with room, a second request waits for the probe
    assert endpoint.admits(5.0) is False


def test_a_rejected_key_is_named_only_when_one_was_sent():
    keyed = Endpoint(EndpointConfig("http://127.0.0.1:9/v1", "m", "MY_KEY"), "secret", 0.0)
    message = str(Pool([keyed])._fail_fatally(keyed, Failure("auth", "401", status=401)))
    assert "rejected the API key from $MY_KEY (HTTP 401)" in message
    bare = Endpoint(EndpointConfig("http://127.0.0.1:9/v1", "m", "MY_KEY"), None, 0.0)
    message = str(Pool([bare])._fail_fatally(bare, Failure("auth", "401", status=401)))
    assert "no API key was sent" in message and "MY_KEY" not in message


def test_the_dotenv_files_are_hermes_home_s_then_the_working_folder_s(tmp_path):
    home, work = tmp_path / "hermes", tmp_path / "work"
    assert dotenv_paths({"HERMES_HOME": str(home)}, cwd=work) == [home / ".env",
                                                                  work / ".env"]
    default = Path.home() / ".hermes" / ".env"  # HERMES_HOME unset or empty
    assert dotenv_paths({}, cwd=work) == [default, work / ".env"]
    assert dotenv_paths({"HERMES_HOME": ""}, cwd=work)[0] == default


def test_key_environ_reads_the_environment_given_first():
    env = key_environ({"SOME_KEY": "exported"})
    assert env["SOME_KEY"] == "exported"
    assert "SOME_KEY" in env


def test_only_the_first_mebibyte_of_a_dotenv_file_is_read(tmp_path):
    path = tmp_path / ".env"
    filler = "#" + "x" * (MAX_DOTENV_BYTES - 100) + "\n"  # a comment line of ~1 MiB
    path.write_text(f"EARLY=1\n{filler}NEAR=2\n" + "#" * 200 + "\nLATE=3\n")
    assert MAX_DOTENV_BYTES == 1 << 20
    assert read_dotenv(path) == {"EARLY": "1", "NEAR": "2"}


def test_lines_that_are_not_assignments_are_skipped(tmp_path):
    path = tmp_path / ".env"
    path.write_text("just words\nA=1\n= no name\n")
    assert read_dotenv(path) == {"A": "1"}


def test_a_folder_named_dotenv_reads_as_empty(tmp_path):
    folder = tmp_path / ".env"
    folder.mkdir()
    assert read_dotenv(folder) == {}


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_named_dotenv_reads_as_empty_even_with_a_line_waiting(tmp_path):
    fifo = tmp_path / ".env"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # so that a writer may open it
    writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    try:
        os.write(writer, b"A=1\n")
        assert read_dotenv(fifo) == {}
    finally:
        os.close(writer)
        os.close(reader)


def test_an_exported_key_wins_and_an_unset_one_comes_from_the_files(tmp_path):
    dotenv = tmp_path / ".env"
    dotenv.write_text("K=from-file\nONLY=in-file\n")
    env = KeyEnviron({"K": "exported"}, paths=[dotenv])
    assert env["K"] == "exported"
    assert env["ONLY"] == "in-file"


def test_double_quotes_take_newline_escapes_and_single_quotes_are_literal(tmp_path):
    path = tmp_path / ".env"
    path.write_text("DOUBLE=\"a\\nb\"\nSINGLE='a\\nb'\nPLAIN=a b # a comment\n"
                    "OPEN=\"unterminated\n")
    values = read_dotenv(path)
    assert values["DOUBLE"] == "a\nb"
    assert values["SINGLE"] == "a\\nb"
    assert values["PLAIN"] == "a b"
    assert values["OPEN"] in ("unterminated", '"unterminated')  # its text kept whole


def test_a_key_empty_or_absent_in_the_first_file_comes_from_the_second(tmp_path):
    first, second = tmp_path / "home.env", tmp_path / "cwd.env"
    first.write_text("EMPTY=\n")
    second.write_text("EMPTY=second\nLATER=second\n")
    env = KeyEnviron({}, paths=[first, second])
    assert env["EMPTY"] == "second" and env["LATER"] == "second"


def test_the_working_folder_is_the_current_one_by_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert dotenv_paths({"HERMES_HOME": "/h"})[1] == tmp_path / ".env"


def test_a_404_is_not_found_and_a_redirect_is_not_followed():
    where = Endpoint(EndpointConfig("https://api.test/v1", "m"), None, 0.0)
    missing = parse_reply(where, 404, b'{"error": {"message": "model m not found"}}')
    assert isinstance(missing, Failure) and missing.kind == "not_found"
    assert missing.reason == "https://api.test/v1: HTTP 404: model m not found"
    moved = parse_reply(where, 307, b"", location="https://user:pw@other.test/v1?k=1")
    assert isinstance(moved, Failure) and moved.kind == "redirect"
    assert moved.reason == ("https://api.test/v1: HTTP 307 redirect to "
                            "https://other.test/v1 (not followed)")
    first = parse_reply(where, 300, b"")  # 300 Multiple Choices is a redirect too (RFC 9110)
    assert first.kind == "redirect" and first.reason.endswith("HTTP 300 redirect (not followed)")


def test_a_server_message_is_quoted_clipped_and_only_from_an_object():
    where = Endpoint(EndpointConfig("https://api.test/v1", "m"), None, 0.0)
    said = parse_reply(where, 500, b'{"error": {"message": "the server  exploded"}}')
    assert said.reason == "https://api.test/v1: HTTP 500: the server exploded"
    listed = parse_reply(where, 500, b'["not", "an", "object"]')
    assert listed.reason == "https://api.test/v1: HTTP 500"
    long = parse_reply(where, 500, orjson.dumps({"error": "word " * 400}))
    assert "word word" in long.reason and long.reason.endswith("…")
    assert len(long.reason) < 400  # clipped: one line, not the server's 2,000 characters


def test_the_temperature_is_sent_to_a_model_that_takes_one():
    chat = ChatRequest([{"role": "user", "content": "x"}], 50, 0.3, 100)
    assert orjson.loads(chat.body("some-model"))["temperature"] == 0.3
    assert "temperature" not in orjson.loads(
        ChatRequest([{"role": "user", "content": "x"}], 50, None, 100).body("some-model"))


def test_request_options_count_in_the_cache_key_when_given():
    messages = [{"role": "user", "content": "turns"}]
    plain = cache_key("m", messages, 100, 0.3)
    assert cache_key("m", messages, 100, 0.3, {}) == plain  # old cache files stay valid
    stop = cache_key("m", messages, 100, 0.3, {"stop": ["\n\n"], "top_k": 20})
    assert stop != plain
    assert cache_key("m", messages, 100, 0.3, {"top_k": 20, "stop": ["\n\n"]}) == stop
    assert cache_key("m", messages, 100, 0.3, {"stop": ["\n"], "top_k": 20}) != stop


def test_an_entry_with_damaged_info_reads_as_an_old_one(tmp_path):
    path = tmp_path / "c.sqlite"
    cache = SummaryCache(path)
    cache.put("k", "m", "a summary", truncated=True)
    cache.close()
    other = sqlite3.connect(path)
    other.execute("UPDATE summaries SET info = '[1, 2]' WHERE key = 'k'")
    other.commit()
    other.close()
    again = SummaryCache(path)
    assert again.get_entry("k") == CacheEntry("a summary", None, None, False)
    assert (again.hits, again.misses) == (1, 0)
    assert again.get_entry("nope") is None and (again.hits, again.misses) == (1, 1)
    again.close()


def test_a_context_error_shrinks_by_what_it_says_or_by_half():
    where = Endpoint(EndpointConfig("https://api.test/v1", "m"), None, 0.0)
    both = parse_reply(where, 400, b'{"error": {"message": "This model\'s maximum context '
                                   b'length is 4096 tokens. However, you requested 8192 '
                                   b'tokens."}}')
    assert both.kind == "context" and both.shrink_factor == pytest.approx(0.9 * 4096 / 8192)
    only_limit = parse_reply(where, 400, b'{"error": "maximum context length is 4096"}')
    assert only_limit.kind == "context" and only_limit.shrink_factor == 0.5
    only_asked = parse_reply(where, 413, b'{"error": "prompt is too long: you have 9000 '
                                         b'tokens"}')
    assert only_asked.kind == "context" and only_asked.shrink_factor == 0.5


def test_the_cache_commits_with_synchronous_normal(tmp_path):
    # The module's note: WAL with synchronous=NORMAL makes a commit cheap (a setting of
    # the connection, not of the file).
    cache = SummaryCache(tmp_path / "c.sqlite")
    try:
        assert cache._db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    finally:
        cache.close()


def test_a_put_two_seconds_after_a_commit_is_committed(tmp_path, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(cache_module, "time",
                        types.SimpleNamespace(monotonic=clock.monotonic, time=lambda: 0.0))
    path = tmp_path / "c.sqlite"
    cache = SummaryCache(path)
    cache.put("a", "m", "first")
    assert committed_keys(path) == set()
    clock.now += COMMIT_SECONDS  # at least every 2 s: exactly 2 s is due
    cache.put("b", "m", "second")
    assert committed_keys(path) == {"a", "b"}
    # The count restarts with each commit: COMMIT_EVERY more entries, not one fewer.
    for i in range(COMMIT_EVERY - 1):
        cache.put(f"n{i}", "m", "x")
    assert len(committed_keys(path)) == 2
    cache.put("last", "m", "x")
    assert len(committed_keys(path)) == 2 + COMMIT_EVERY
    cache.close()


def test_a_closed_cache_is_closed_and_its_file_marked_with_the_schema(tmp_path):
    path = tmp_path / "deep" / "er" / "c.sqlite"  # missing folders are made
    cache = SummaryCache(path, {"a": 1, "b": 2})
    cache.put("k", "m", "a summary")
    cache.close()
    with pytest.raises(sqlite3.ProgrammingError):
        cache.get("k")
    assert not path.with_name("c.sqlite-wal").exists()  # the last connection is gone
    other = sqlite3.connect(path)
    try:
        assert other.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 1
    finally:
        other.close()
    again = SummaryCache(path, {"b": 2, "a": 1})  # the same identity, keys in any order
    entry = again.get_entry("k")
    assert entry is not None and entry.truncated is False  # put's default: not cut
    again.close()


def test_an_entry_whose_info_is_not_json_reads_as_an_old_one(tmp_path):
    path = tmp_path / "c.sqlite"
    cache = SummaryCache(path)
    cache.put("k", "m", "a summary", truncated=True)
    cache.close()
    other = sqlite3.connect(path)
    other.execute("UPDATE summaries SET info = '{not json' WHERE key = 'k'")
    other.commit()
    other.close()
    again = SummaryCache(path)
    assert again.get_entry("k") == CacheEntry("a summary", None, None, False)
    again.close()


def choose(environ=None, installed=False, **fields):
    return default_summarizer(CompressionConfig(**fields), environ or {},
                              local_installed=lambda: installed)


def test_auto_picks_the_backend_by_the_documented_order(tmp_path):
    # default_summarizer's contract: a named backend decides; for auto, a local model, an
    # endpoint, a base_url other than the default or a set key variable, else extractive.
    assert choose(summarizer="extractive", local_model="x.gguf") == (
        "extractive", "set by --summarizer or summarization.backend")
    assert choose(summarizer="auto", local_model="x.gguf")[0] == "local"
    endpoint = EndpointConfig("http://127.0.0.1:9/v1", "m")
    assert choose(summarizer="auto", endpoints=[endpoint]) == (
        "openai", "--base-url or summarization.endpoints names an endpoint")
    assert choose(summarizer="auto", base_url="https://u:pw@llm.test/v1") == (
        "openai", "summarization.base_url is https://llm.test/v1")
    assert choose(summarizer="auto", base_url="https://openrouter.ai/api/v1/")[0] == \
        "extractive"  # the default, written with a slash
    name, why = choose({"MY_KEY": "k"}, summarizer="auto", api_key_env="MY_KEY")
    assert name == "openai" and why.endswith("; MY_KEY is set")
    assert choose(summarizer="auto", api_key_env="MY_KEY") == (
        "extractive", "no model; no endpoint named, MY_KEY unset")
    assert choose(summarizer="auto", api_key_env=None) == (
        "extractive", "no model; no endpoint named, no key variable")
    name, why = choose(installed=True, summarizer="auto", api_key_env="MY_KEY")
    assert name == "extractive" and "the 'local' extra is installed" in why


def test_resolving_replaces_only_auto():
    endpoint = EndpointConfig("http://127.0.0.1:9/v1", "m")
    auto = CompressionConfig(summarizer="auto", endpoints=[endpoint])
    assert resolve_summarizer(auto, {}).summarizer == "openai"
    fixed = CompressionConfig(summarizer="extractive")
    assert resolve_summarizer(fixed, {}) is fixed


def test_the_factory_builds_the_openai_backend_auto_resolves_to():
    endpoint = EndpointConfig("http://127.0.0.1:9/v1", "m")
    for name in ("openai", "auto"):
        built = make_summarizer(CompressionConfig(summarizer=name, endpoints=[endpoint]),
                                counter())
        assert isinstance(built, OpenAISummarizer) and built.models == ["m"]


def test_the_local_extra_is_installed_when_every_module_is_found():
    assert local_extra_installed(lambda name: object()) is True
    assert local_extra_installed(lambda name: None) is False
    assert local_extra_installed(lambda name: None if name == "uvicorn" else object()) is False


WHERE = "https://api.test/v1"


def reply(status: int, body: bytes = b"", **kwargs):
    return parse_reply(Endpoint(EndpointConfig(WHERE, "m"), None, 0.0), status, body, **kwargs)


def test_retry_after_is_read_from_a_503_only():
    assert reply(503, b"", retry_after="7").retry_after == 7.0
    assert reply(500, b"", retry_after="7").retry_after is None
    assert reply(504, b"", retry_after="7").retry_after is None


def test_a_422_that_says_the_input_is_too_long_is_a_context_error():
    assert reply(422, b'{"detail": "input is too long"}').kind == "context"
    assert reply(422, b'{"detail": "bad field"}').kind == "http"


@pytest.mark.parametrize("limit, asked, factor", [(4096, 4096, 0.5), (0, 100, 0.5),
                                                  (1, 100, 0.1), (3000, 4000, 0.675)])
def test_the_shrink_factor_follows_the_numbers_only_when_the_limit_is_below_the_ask(
        limit, asked, factor):
    body = (f'{{"error": "maximum context length is {limit} tokens, you requested '
            f'{asked} tokens"}}').encode()
    assert reply(400, body).shrink_factor == pytest.approx(factor)


@pytest.mark.parametrize("body, said", [
    (b"<html>bad gateway</html>", ""),
    (b'{"error": "quota exceeded"}', ": quota exceeded"),
    (b'{"message": "from message"}', ": from message"),
    (b'{"detail": "from detail"}', ": from detail"),
    (b'{"error": "   "}', ""),
    (b'{"error": {"message": 42}}', ""),
])
def test_the_server_s_message_is_taken_from_the_usual_places(body, said):
    assert reply(502, body).reason == f"{WHERE}: HTTP 502{said}"


def test_a_redirect_names_only_an_absolute_target():
    assert reply(307, b"").reason == f"{WHERE}: HTTP 307 redirect (not followed)"
    assert reply(301, b"", location="/v2").reason == f"{WHERE}: HTTP 301 redirect (not followed)"


def test_usage_counts_only_positive_integers():
    def usage(prompt, completion):
        body = orjson.dumps({"choices": [{"message": {"content": "A summary."},
                                          "finish_reason": "stop"}],
                             "usage": {"prompt_tokens": prompt,
                                       "completion_tokens": completion}})
        done = reply(200, body)
        return done.prompt_tokens, done.completion_tokens

    assert usage(1, 1) == (1, 1)
    assert usage(True, -5) == (0, 0)
    assert usage("12", 3.0) == (0, 0)
    bare = reply(200, orjson.dumps({"choices": [{"message": {"content": "A summary."}}]}))
    assert (bare.prompt_tokens, bare.completion_tokens) == (0, 0)  # no usage: none known


def test_a_reply_that_is_not_json_names_its_content_type():
    done = reply(200, b"<html>", content_type="text/html")
    assert done.kind == "invalid"
    assert done.reason == f"{WHERE}: the reply is not JSON (text/html, 6 bytes)"
    assert reply(200, b"<html>", content_type="").reason.endswith(
        "(unknown content type, 6 bytes)")
