"""Phase 2 of batch inference, line by line (issue 26, item 5).

From summarizers/batch.py's documentation and SPEC §17: each results line is
``{"custom_id", "response": {"status_code", "body"}, "error"}`` as OpenAI and `vllm
run-batch` write them; a reply is accepted as the online path accepts one (2xx, choices,
content not empty, ``finish_reason`` not ``length``) and stored prefixed under its
custom_id; a request with two answers is an error naming them (issue 24); results
for requests the export does not hold are counted as unknown, exported requests
without any result as missing; a line that cannot be read is named
``file:line: why``. Export lines embed the body byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from trajectory_compressor.core.errors import ConfigError
from trajectory_compressor.core.redact import Scrubber
from trajectory_compressor.summarizers.batch import (
    BATCH_ERROR,
    import_results,
    request_keys,
    request_line,
)
from trajectory_compressor.summarizers.cache import SummaryCache

PREFIX = "[CONTEXT SUMMARY]:"
ORIGIN = "batch-origin"


def ok(key: str, text: str, finish: str = "stop", status: int = 200) -> dict:
    return {"custom_id": key, "response": {"status_code": status, "body": {
        "choices": [{"message": {"role": "assistant", "content": text},
                     "finish_reason": finish}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7}}}, "error": None}


def write(path: Path, *lines: object) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n"
                            for x in lines))
    return path


@pytest.fixture
def cache(tmp_path):
    c = SummaryCache(tmp_path / "cache.sqlite")
    yield c
    c.close()


def run(paths, cache, expected=None):
    return import_results(paths, cache, "m", Scrubber(), ORIGIN, expected)


def test_an_accepted_result_is_stored_prefixed_with_its_cost(tmp_path, cache):
    report = run([write(tmp_path / "out.jsonl", ok("k1", "Did a thing."))], cache)
    assert (report.lines, report.accepted, dict(report.failed)) == (1, 1, {})
    entry = cache.get_entry("k1")
    assert entry is not None and entry.text == f"{PREFIX} Did a thing."
    assert entry.origin == ORIGIN
    assert entry.usage is not None and (entry.usage.api_calls, entry.usage.prompt_tokens,
                                        entry.usage.completion_tokens) == (1, 11, 7)


def test_a_custom_id_answered_twice_is_an_error_naming_it_and_its_lines(tmp_path, cache):
    # Issue 24: a request gets one answer; two are never resolved silently, in one file or
    # across files. A failure beside one answer is allowed (a second batch for the failed).
    out = write(tmp_path / "out.jsonl", ok("k1", "First."), ok("k1", "Second."))
    with pytest.raises(ConfigError, match=r"'k1'.*out\.jsonl:1.*out\.jsonl:2"):
        run([out], cache, expected={"k1"})
    first = write(tmp_path / "a.jsonl", ok("k2", "Second."))
    again = write(tmp_path / "b.jsonl", ok("k2", "Third."))
    with pytest.raises(ConfigError, match=r"'k2'.*a\.jsonl:1.*b\.jsonl:1"):
        run([first, again], cache)
    assert cache.get_entry("k1") is None and cache.get_entry("k2") is None
    failed = write(tmp_path / "err.jsonl", ok("k2", "cut", finish="length"))
    report = run([first, failed], cache)
    assert report.accepted == 1 and report.failures == {}
    assert cache.get_entry("k2").text == f"{PREFIX} Second."


def test_failures_by_kind_unknown_and_missing_requests(tmp_path, cache):
    out = write(tmp_path / "out.jsonl",
                ok("a", "Fine."),
                ok("b", "cut", finish="length"),
                {"custom_id": "c", "error": {"code": "server_error", "message": "boom"}},
                ok("stranger", "Not ours."),
                {"custom_id": "d", "response": {"status_code": 500, "body": {"error": "x"}}})
    report = run([out], cache, expected={"a", "b", "c", "d", "e", "f"})
    assert report.accepted == 2  # a and stranger (imported anyway)
    assert report.unknown == 1
    assert report.missing == 2  # e and f
    assert set(report.failures) == {"b", "c", "d"}
    assert report.failures["c"][0] == BATCH_ERROR
    assert "server_error: boom" in report.failures["c"][1]
    assert report.failed[BATCH_ERROR] == 1 and sum(report.failed.values()) == 3
    assert run([out], cache).missing is None  # nothing expected: unknown


def test_unreadable_lines_are_named_and_blank_lines_skipped(tmp_path, cache):
    out = write(tmp_path / "out.jsonl", "{oops", "", "[1]", json.dumps({"custom_id": 5}),
                {"custom_id": "k"}, ok("z", "Fine."))
    report = run([out], cache)
    assert report.lines == 5
    assert report.unreadable == [f"{out}:1: not a JSON line", f"{out}:3: no custom_id",
                                 f"{out}:4: no custom_id"]
    assert report.failures["k"][0] == "invalid"
    assert report.accepted == 1


def test_an_entry_a_row_already_used_is_left_alone(tmp_path, cache):
    cache.put("k1", "m", f"{PREFIX} Used.", origin="a-row")
    report = run([write(tmp_path / "out.jsonl", ok("k1", "New."))], cache)
    assert report.accepted == 1
    assert cache.get_entry("k1").text == f"{PREFIX} Used."


def test_a_missing_results_file_is_a_config_error(tmp_path, cache):
    with pytest.raises(ConfigError, match="cannot read batch results"):
        run([tmp_path / "gone.jsonl"], cache)


def test_request_lines_and_their_keys(tmp_path):
    body = b'{"model":"m","messages":[]}'
    line = request_line("key-1", body)
    assert orjson.loads(line) == {"custom_id": "key-1", "method": "POST",
                                  "url": "/v1/chat/completions",
                                  "body": {"model": "m", "messages": []}}
    assert body in line and line.endswith(b"}\n")
    a = tmp_path / "a.jsonl"
    a.write_bytes(line + request_line("key-2", body) + b"\n")
    assert request_keys([a]) == {"key-1", "key-2"}
    assert request_keys([a, tmp_path / "gone.jsonl"]) is None
    assert request_keys([]) == set()


# -- phase 1's exporter and phase 2's summarizer -------------------------------------------

def _request(text: str = "Ran the tests; 3 failed.", **kw) -> object:
    from trajectory_compressor.core.summary import SummaryRequest

    turns = [{"from": "gpt", "value": text}, {"from": "tool", "value": "FAILED test_a"}]
    return SummaryRequest(turns=turns, first_index=2, target_tokens=60, **kw)


def test_the_exporter_writes_one_line_per_distinct_request_not_cached(tmp_path):
    import asyncio

    from trajectory_compressor.core.config import CompressionConfig
    from trajectory_compressor.core.summary import Repair
    from trajectory_compressor.summarizers.batch import BatchExporter, CachedKeys, batch_request

    config = CompressionConfig(summarization_model="m1")
    _, cached_key = batch_request(config, "m1", _request("Another region."))
    store = SummaryCache(tmp_path / "c.sqlite")
    store.put(cached_key, "m1", f"{PREFIX} Old.")
    store.close()
    lines: list[bytes] = []
    exporter = BatchExporter(config, lines.append, len, CachedKeys(tmp_path / "c.sqlite"))

    async def go() -> list:
        return [await exporter.summarize(r) for r in (
            _request(), _request(), _request("Another region."),
            _request(repair=Repair("x", ("a",))))]

    summaries = asyncio.run(go())
    assert [(s.text, s.source) for s in summaries] == [(PREFIX, "batch")] * 4
    chat, key = batch_request(config, "m1", _request())
    assert len(lines) == 1
    line = orjson.loads(lines[0])
    assert line["custom_id"] == key and line["body"]["model"] == "m1"
    assert line["method"] == "POST" and line["url"] == "/v1/chat/completions"
    stats = exporter.stats
    assert (stats.summaries, stats.requests, stats.duplicates, stats.cached) == (3, 1, 1, 1)
    assert stats.max_output_tokens == chat.max_tokens
    assert stats.prompt_tokens == sum(len(m["content"]) for m in chat.messages)


def test_the_batch_summarizer_reports_a_paid_summary_once_then_as_a_cache_hit(tmp_path):
    import asyncio

    from trajectory_compressor.core.config import CompressionConfig
    from trajectory_compressor.core.summary import SummaryFailed, SummaryUsage
    from trajectory_compressor.summarizers.batch import (
        MISSING,
        BatchSummarizer,
        batch_request,
    )

    config = CompressionConfig(summarization_model="m1",
                               cache_path=str(tmp_path / "c.sqlite"))
    _, paid = batch_request(config, "m1", _request())
    _, failed = batch_request(config, "m1", _request("Failed region."))
    store = SummaryCache(tmp_path / "c.sqlite")
    store.put(paid, "m1", f"{PREFIX} Tests ran; 3 failed.", origin=ORIGIN,
              usage=SummaryUsage(api_calls=1, prompt_tokens=40, completion_tokens=9))
    store.close()
    summarizer = BatchSummarizer(config, ORIGIN, {failed: ("http", "HTTP 500")},
                                 count_tokens=len)

    async def go() -> tuple:
        async with summarizer:
            first = await summarizer.summarize(_request(origin="run:1"))
            second = await summarizer.summarize(_request(origin="run:2"))
            errors = []
            for text in ("Failed region.", "Never exported."):
                request = _request(text)
                try:
                    await summarizer.summarize(request)
                except SummaryFailed as exc:
                    errors.append((exc.reason, request.usage.api_calls,
                                   dict(request.usage.errors_by_kind)))
            return first, second, errors

    first, second, errors = asyncio.run(go())
    # The cache was closed with the run: the row that paid is on record for a rerun.
    from trajectory_compressor.summarizers.cache import origin_digest

    again = SummaryCache(tmp_path / "c.sqlite")
    assert again.get_entry(paid).origin == origin_digest("run:1")
    again.close()
    assert (first.text, first.source) == (f"{PREFIX} Tests ran; 3 failed.", "llm")
    assert (first.usage.api_calls, first.usage.prompt_tokens) == (1, 40)
    assert (second.source, second.usage.api_calls) == ("cache", 0)
    assert errors == [("HTTP 500", 1, {"http": 1}),
                      ("no result for this request in the batch results", 0, {MISSING: 1})]
    with pytest.raises(ConfigError, match="cache_path"):
        BatchSummarizer(CompressionConfig(), ORIGIN, {}, count_tokens=len)


def test_a_batch_summary_too_long_to_cut_goes_online_with_its_failure_counted(tmp_path):
    import asyncio

    from trajectory_compressor.core.config import CompressionConfig
    from trajectory_compressor.core.summary import Summarizer, Summary, SummaryUsage
    from trajectory_compressor.summarizers.batch import BatchSummarizer, batch_request

    class Online(Summarizer):
        def __init__(self) -> None:
            self.cache = SummaryCache(tmp_path / "online.sqlite")
            self.asked = 0

        async def summarize(self, request):
            self.asked += 1
            return Summary(f"{PREFIX} Online.", "llm", request.usage)

        async def aclose(self) -> None:
            self.cache.close()

    config = CompressionConfig(summarization_model="m1",
                               cache_path=str(tmp_path / "unused.sqlite"))
    _, key = batch_request(config, "m1", _request())
    online = Online()
    # One endless sentence, far over 60 x 2 tokens: no cut can keep it.
    online.cache.put(key, "m1", f"{PREFIX} " + "x" * 5000, origin=ORIGIN,
                     usage=SummaryUsage(api_calls=1))
    summarizer = BatchSummarizer(config, ORIGIN, {}, count_tokens=len, online=online)

    async def go():
        async with summarizer:
            assert summarizer.cache is online.cache  # one connection: the online one
            request = _request()
            return await summarizer.summarize(request), request

    result, request = asyncio.run(go())
    assert result.text == f"{PREFIX} Online." and online.asked == 1
    assert request.usage.errors_by_kind == {"too_long": 1}
    assert request.usage.api_calls == 1  # the batch sent it
    assert not (tmp_path / "unused.sqlite").exists()


def test_cached_keys_hold_none_once_closed_or_without_a_cache(tmp_path):
    from trajectory_compressor.summarizers.batch import CachedKeys

    store = SummaryCache(tmp_path / "c.sqlite")
    store.put("k", "m", f"{PREFIX} S.")
    store.close()
    keys = CachedKeys(tmp_path / "c.sqlite")
    assert "k" in keys and "other" not in keys
    keys.close()
    assert "k" not in keys
    assert "k" not in CachedKeys(None) and "k" not in CachedKeys(tmp_path / "none.sqlite")
    (tmp_path / "bad.sqlite").write_text("not a database")
    assert "k" not in CachedKeys(tmp_path / "bad.sqlite")
