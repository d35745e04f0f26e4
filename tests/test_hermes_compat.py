"""Drop-in compatibility with the Hermes reference script (issue 19, item 2).

Each test states what the reference does (NousResearch hermes-agent
`trajectory_compressor.py` and the helpers it imports) and checks that this project does
the same, or what it does instead where README "Deliberate differences" says so.
"""

from __future__ import annotations

import asyncio
import json
import random
import types

import pytest

from tests.cli_helpers import read_jsonl, run_cli
from tests.fake_llm_server import FakeLLMServer
from tests.fixtures_runs import compress_run, row, write_jsonl
from trajectory_compressor.core.config import CompressionConfig, EndpointConfig
from trajectory_compressor.core.errors import ConfigError
from trajectory_compressor.core.extractive import ExtractiveSummarizer
from trajectory_compressor.core.summary import SummaryRequest
from trajectory_compressor.counting.tokens import TokenCounter, load_bundled_backend
from trajectory_compressor.dialects.sharegpt import SHAREGPT
from trajectory_compressor.engine.count import RowCounter
from trajectory_compressor.summarizers.cache import cache_key
from trajectory_compressor.summarizers.chat import ChatRequest, Failure
from trajectory_compressor.summarizers.dotenv import KeyEnviron, read_dotenv
from trajectory_compressor.summarizers.endpoint import Endpoint
from trajectory_compressor.summarizers.openai import OpenAISummarizer
from trajectory_compressor.summarizers.pool import Pool
from trajectory_compressor.summarizers.temperature import omits_temperature

KEY = "sk-dotenv-9f8e7d6c5b4a3928TOPSECRET"
MESSAGES = [{"role": "user", "content": "hi"}]


# --- temperature -------------------------------------------------------------------------

# The reference's `_is_kimi_model`: the last "/"-segment, lower case, is "kimi" or starts
# with "kimi-"; such models get no temperature at all (worked out by hand from that rule).
@pytest.mark.parametrize(("model", "omitted"), [
    ("kimi", True), ("Kimi-K2-Thinking", True), ("moonshotai/kimi-k2-instruct", True),
    ("openrouter/moonshotai/kimi-k2.5:free", True), (" KIMI-latest ", True),
    ("kimiko-7b", False), ("moonshot-v1-8k", False), ("kimi/gpt-4o", False),
    ("google/gemini-3-flash-preview", False), ("fake-model", False),
])
def test_the_kimi_family_gets_no_temperature(model, omitted):
    assert omits_temperature(model) is omitted
    body = json.loads(ChatRequest(MESSAGES, 100, 0.3, 200).body(model))
    assert ("temperature" not in body) is omitted
    if not omitted:
        assert body["temperature"] == 0.3


def test_temperature_null_in_yaml_sends_none_to_any_model():
    cfg = CompressionConfig.from_dict({"summarization": {"temperature": None}})
    assert cfg.temperature is None
    for model in ("fake-model", "moonshotai/kimi-k2"):
        assert "temperature" not in json.loads(ChatRequest(MESSAGES, 100, None, 200).body(model))
    with pytest.raises(ConfigError, match=r"between 0 and 2 \(or null"):
        CompressionConfig.from_dict({"summarization": {"temperature": 3}})


def test_the_cache_key_counts_the_temperature_as_sent():
    # None and 0.3 are different requests for most models; for Kimi both send none.
    assert cache_key("m", MESSAGES, 100, None) != cache_key("m", MESSAGES, 100, 0.3)
    assert cache_key("kimi-k2", MESSAGES, 100, None) == cache_key("kimi-k2", MESSAGES, 100, 0.3)


def test_a_kimi_endpoint_receives_no_temperature_over_http():
    async def main(model: str, temperature: float | None) -> dict:
        async with FakeLLMServer() as server:
            cfg = CompressionConfig(cache_enabled=False, retry_delay=0.01,
                                    temperature=temperature)
            s = OpenAISummarizer(cfg, [EndpointConfig(server.url, model)], environ={})
            async with s:
                summary = await s.summarize(SummaryRequest(
                    [{"from": "gpt", "value": "ran ls " * 30}], 3, 100))
            assert summary.source == "llm"
            assert server.last_request is not None
            return server.last_request

    assert "temperature" not in asyncio.run(main("moonshotai/Kimi-K2-Instruct", 0.3))
    assert "temperature" not in asyncio.run(main("fake-model", None))
    assert asyncio.run(main("fake-model", 0.7))["temperature"] == 0.7


# --- the first retry ----------------------------------------------------------------------

def test_every_retry_waits_at_least_retry_delay():
    # The reference waits retry_delay * 2**(k-1) plus up to half that again; full jitter
    # (uniform from 0) could retry at once. Ours: uniform in [d, d * 2**k], capped at 60 s.
    drawn: list[tuple[float, float]] = []
    endpoint = Endpoint(EndpointConfig("http://127.0.0.1:9/v1", "m"), None, 0.0)
    failure = Failure("http", "HTTP 500")
    pool = Pool([endpoint], retry_delay=2.0)
    pool._rng = types.SimpleNamespace(  # type: ignore[assignment]
        uniform=lambda lo, hi: drawn.append((lo, hi)) or lo)
    delays = [pool._delay(k, endpoint, failure) for k in (1, 2, 3, 6)]
    assert drawn == [(2.0, 4.0), (2.0, 8.0), (2.0, 16.0), (2.0, 60.0)]
    assert delays == [2.0, 2.0, 2.0, 2.0]
    real = Pool([endpoint], retry_delay=0.5, rng=random.Random(7))
    first = [real._delay(1, endpoint, failure) for _ in range(2000)]
    assert min(first) >= 0.5 and max(first) <= 1.0
    assert max(first) - min(first) > 0.4  # still jittered


# --- API keys from .env files --------------------------------------------------------------

def test_read_dotenv_takes_the_usual_spellings(tmp_path):
    path = tmp_path / ".env"
    path.write_text("# a comment\nexport A=1\nB = 'two words'\nC=\"x\\ny\"\nD=plain # note\n"
                    "not a line\nE=\n", encoding="utf-8")
    assert read_dotenv(path) == {"A": "1", "B": "two words", "C": "x\ny", "D": "plain",
                                 "E": ""}
    assert read_dotenv(tmp_path / "missing") == {}


def test_a_key_unset_in_the_environment_comes_from_hermes_home_then_cwd(tmp_path):
    home, cwd = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    cwd.mkdir()
    (home / ".env").write_text("K1=from-home\nK2=\n", encoding="utf-8")
    (cwd / ".env").write_text("K1=from-cwd\nK2=cwd-two\nK3=cwd-three\n", encoding="utf-8")
    env = KeyEnviron({"K4": "exported", "K1": ""}, [home / ".env", cwd / ".env"])
    assert env["K1"] == "from-home"  # unset (empty) here: $HERMES_HOME/.env first
    assert env["K2"] == "cwd-two"  # empty in the first file: the next one
    assert env["K3"] == "cwd-three"
    assert env["K4"] == "exported"
    assert env.get("K5") is None and "K5" not in env
    assert KeyEnviron({"K1": "exported"}, [home / ".env"])["K1"] == "exported"  # env wins


@pytest.mark.parametrize("where", ["hermes_home", "cwd"])
def test_the_cli_reads_the_key_from_a_dotenv_file_and_never_prints_it(tmp_path, where):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (home if where == "hermes_home" else work).joinpath(".env").write_text(
        f"TC_DOTENV_KEY={KEY}\n", encoding="utf-8")
    src = write_jsonl(work / "in.jsonl", [row("a", "SHGTGTGTGTGT",
                                              [10, 5, 5, 5, 40, 40, 40, 40, 5, 5, 5, 5])])
    with FakeLLMServer(api_key=KEY).in_thread() as server:
        proc = run_cli("compress", str(src), "-o", str(work / "out.jsonl"),
                       "--base-url", server.url, "--model", "fake-model",
                       "--api-key-env", "TC_DOTENV_KEY", "--target-max-tokens", "100",
                       "--summary-target-tokens", "20", cwd=work,
                       env={"HERMES_HOME": str(home), "TC_DOTENV_KEY": ""})
    assert proc.returncode == 0, proc.stderr
    assert server.outcomes["ok"] == 1 and not server.outcomes["unauthorized"]
    [out] = read_jsonl(work / "out.jsonl")
    assert out["compression_metrics"]["summary_source"] == "llm"
    assert KEY not in proc.stdout + proc.stderr
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.name != ".env":
            assert KEY.encode() not in path.read_bytes(), path


def test_help_says_where_the_key_may_come_from():
    proc = run_cli("compress", "--help", env={"COLUMNS": "200"})
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    assert "$HERMES_HOME/.env" in text and "./.env" in text


# --- a tokenizer error on one text ----------------------------------------------------------

class Refusing:
    """The bundled tokenizer, except that it raises on any batch holding "REFUSE"."""

    def __init__(self) -> None:
        self.inner = load_bundled_backend()

    def encode_batch(self, texts, add_special_tokens=False):
        if any("REFUSE" in t for t in texts):
            raise ValueError("cannot encode this text")
        return self.inner.encode_batch(texts, add_special_tokens=add_special_tokens)


def test_a_lone_surrogate_counts_as_the_replacement_character():
    counter = TokenCounter.load()
    assert counter.count("a \ud800 b") == counter.count("a \ufffd b") > 0
    assert counter.count_many(["x \udc01", "plain"]) == [counter.count("x \ufffd"),
                                                       counter.count("plain")]


def test_a_text_the_tokenizer_refuses_rejects_its_row_only():
    counter = TokenCounter(backend=Refusing())
    rows = [[{"from": "human", "value": "hello there"}],
            [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "REFUSE me"}],
            [{"from": "gpt", "value": "word word"}]]
    counted = RowCounter(CompressionConfig(), counter).count(
        [(SHAREGPT, {"conversations": t}, t) for t in rows])
    real = TokenCounter.load()
    assert counted[0] == [real.count("hello there")]
    assert counted[2] == [real.count("word word")]
    assert isinstance(counted[1], str)
    assert counted[1].startswith("the tokenizer cannot count one of the row's turns: ")


def test_a_row_the_tokenizer_refuses_goes_to_the_rejects_with_its_reason(tmp_path):
    sizes = [10, 5, 5, 5, 40, 40, 40, 40, 5, 5, 5, 5]
    bad = row("bad", "SHGTGTGTGTGT", sizes)
    bad["conversations"][5]["value"] += " REFUSE"
    src = write_jsonl(tmp_path / "in.jsonl", [row("a", "SHGTGTGTGTGT", sizes), bad,
                                              row("c", "SHGTHG", [10, 5, 5, 5, 5, 5])])
    cfg = CompressionConfig(target_max_tokens=100, summary_target_tokens=20,
                            summarizer="extractive", cache_enabled=False)
    counter = TokenCounter(backend=Refusing())
    result = compress_run(src, tmp_path / "out.jsonl", cfg, counter,
                          ExtractiveSummarizer(counter.count))
    assert result.exit_code == 1 and result.metrics.rows_rejected == 1
    assert [r["id"] for r in read_jsonl(tmp_path / "out.jsonl")] == ["a", "c"]
    [reject] = read_jsonl(tmp_path / "out_rejects.jsonl")
    assert reject["location"].endswith("in.jsonl:2")
    assert reject["error"] == ("the tokenizer cannot count one of the row's turns: "
                               "ValueError: cannot encode this text")


# --- flags and keys ---------------------------------------------------------------------------

def test_base_url_with_the_local_summarizer_is_an_error(tmp_path, sample_jsonl):
    proc = run_cli("compress", str(sample_jsonl), "-o", str(tmp_path / "o.jsonl"),
                   "--summarizer", "local", "--base-url", "http://127.0.0.1:9/v1")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: --base-url names endpoints for --summarizer openai")
    assert not list(tmp_path.iterdir())


def test_the_breaker_threshold_and_cooldown_are_yaml_keys():
    cfg = CompressionConfig.from_dict({"summarization": {"breaker_failures": 2,
                                                         "breaker_cooldown": 0.5}})
    s = OpenAISummarizer(cfg, [EndpointConfig("http://127.0.0.1:9/v1", "m")], environ={})
    breaker = s.pool.endpoints[0].breaker
    assert (breaker.threshold, breaker.base_cooldown) == (2, 0.5)
    default = OpenAISummarizer(CompressionConfig(), [EndpointConfig("http://127.0.0.1:9/v1",
                                                                    "m")], environ={})
    assert default.pool.endpoints[0].breaker.threshold == 5
    for bad in ({"breaker_failures": 0}, {"breaker_cooldown": 0}):
        with pytest.raises(ConfigError):
            CompressionConfig.from_dict({"summarization": bad})
    # They decide when an endpoint rests, not what a row becomes: a resume may change them.
    fingerprint = CompressionConfig.fingerprint_dict
    assert fingerprint(cfg) == fingerprint(CompressionConfig(summarizer="auto"))


def test_a_failing_endpoint_rests_after_breaker_failures_for_breaker_cooldown():
    dead = "http://127.0.0.1:9/v1"  # discard port: nothing listens

    async def main(failures: int, cooldown: float) -> int:
        async with FakeLLMServer() as live:
            cfg = CompressionConfig(cache_enabled=False, retry_delay=0.01,
                                    breaker_failures=failures, breaker_cooldown=cooldown,
                                    allow_fallback=True)
            s = OpenAISummarizer(cfg, [EndpointConfig(dead, "m"), EndpointConfig(live.url, "m")],
                                 environ={})
            async with s:
                for i in range(8):
                    await s.summarize(SummaryRequest([{"from": "gpt", "value": f"x {i}"}],
                                                     3, 50))
                    await asyncio.sleep(0.02)
            return s.pool.endpoints[0].requests

    # Sequential requests try the first endpoint first while it is in rotation.
    assert asyncio.run(main(5, 60)) == 5
    assert asyncio.run(main(1, 60)) == 1
    assert asyncio.run(main(1, 0.001)) > 1  # probed again after each (short) rest
