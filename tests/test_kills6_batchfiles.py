"""Round 6 of the mutation kills (issue 26, item 5) in `summarizers/batch.py`: the batch
export's statistics, the results' error reasons, and the phase 2 summarizer's resources.

From SPEC §17, README "Batch inference" and the docstrings of `summarizers/batch.py`,
`core/summary.py` (`Summarizer`, `SummaryRequest.origin`, `bound_summary`) and
`ExportStats`: a request the summary cache already holds is counted once as cached and
any further row with that region as a duplicate; a results file's error is reported as
one scrubbed line of at most 160 characters; the prompt a request is exported with is
scrubbed of the run's key values as online; phase 2 reports a summary the batch paid for
as the call it was to the row that paid for it (also when that row runs again after an
interruption), cut summaries as truncated, and closes only the cache it opened itself
(the online backend's connection is the backend's), closing the online backend with it.
Expected values are worked out by hand (``count_tokens=len``: one token per character).
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import orjson
import pytest

from tests.open_files import open_files_under
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import ConfigError
from trajectory_compressor.core.redact import Scrubber
from trajectory_compressor.core.summary import (
    Summarizer,
    Summary,
    SummaryRequest,
    SummaryUsage,
)
from trajectory_compressor.summarizers.batch import (
    BATCH_ERROR,
    BatchExporter,
    BatchSummarizer,
    CachedKeys,
    batch_request,
    import_results,
)
from trajectory_compressor.summarizers.cache import SummaryCache, origin_digest

PREFIX = "[CONTEXT SUMMARY]:"
ORIGIN = "batch-origin"


def _request(text: str = "Ran the tests; 3 failed.", **kw) -> SummaryRequest:
    turns = [{"from": "gpt", "value": text}, {"from": "tool", "value": "FAILED test_a"}]
    return SummaryRequest(turns=turns, first_index=2, target_tokens=60, **kw)


def _write(path: Path, *lines: object) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


# -- phase 1 -------------------------------------------------------------------------------


def test_a_cached_region_is_one_cached_request_and_its_repeats_duplicates(tmp_path):
    # ExportStats: `cached` counts requests already in the cache, `duplicates` rows whose
    # region is another row's; every row needing a summary is exactly one of the three.
    config = CompressionConfig(summarization_model="m1")
    _, key = batch_request(config, "m1", _request())
    store = SummaryCache(tmp_path / "c.sqlite")
    store.put(key, "m1", f"{PREFIX} Old.")
    store.close()
    lines: list[bytes] = []
    keys = CachedKeys(tmp_path / "c.sqlite")
    exporter = BatchExporter(config, lines.append, len, keys)

    async def go() -> None:
        for _ in range(3):
            await exporter.summarize(_request())

    asyncio.run(go())
    keys.close()
    s = exporter.stats
    assert lines == []
    assert (s.summaries, s.requests, s.cached, s.duplicates) == (3, 0, 1, 2)


def test_cached_keys_close_their_file(tmp_path):
    # An export writes nothing and leaves nothing open: closing the reader closes the file.
    store = SummaryCache(tmp_path / "c.sqlite")
    store.put("k", "m", f"{PREFIX} S.")
    store.close()
    keys = CachedKeys(tmp_path / "c.sqlite")
    assert "k" in keys
    assert open_files_under(tmp_path) == [str((tmp_path / "c.sqlite").resolve())]
    keys.close()
    assert open_files_under(tmp_path) == []


def test_the_exported_prompt_is_scrubbed_of_the_run_s_key_values(tmp_path, monkeypatch):
    # "Each summary request ... the very body the openai backend would POST": the turns
    # go through the run's scrubber (its key values), or the one the caller gives.
    monkeypatch.setenv("KILLS6_BATCH_KEY", "sk-kills6-env-secret-value")
    config = CompressionConfig(summarization_model="m1", api_key_env="KILLS6_BATCH_KEY",
                               base_url="https://user:pw-kills6-in-url@llm.example/v1")
    request = _request("Logged in with pw-kills6-in-url, then sk-kills6-env-secret-value.")
    chat, _ = batch_request(config, "m1", request)
    body = chat.body("m1").decode()
    assert "pw-kills6-in-url" not in body and "sk-kills6-env-secret-value" not in body
    assert "Logged in with" in body
    given = Scrubber(["only-the-caller-knows-this"])
    chat, _ = batch_request(CompressionConfig(summarization_model="m1"), "m1",
                            _request("Used only-the-caller-knows-this here."), scrub=given)
    body = chat.body("m1").decode()
    assert "only-the-caller-knows-this" not in body and "Used" in body


# -- phase 2: the results ------------------------------------------------------------------


def _error_reason(tmp_path: Path, error: object, scrubber: Scrubber | None = None) -> str:
    cache = SummaryCache(tmp_path / "cache.sqlite")
    try:
        out = _write(tmp_path / "err.jsonl", {"custom_id": "k", "error": error})
        report = import_results([out], cache, "m", scrubber or Scrubber(), ORIGIN)
    finally:
        cache.close()
    kind, reason = report.failures["k"]
    assert kind == BATCH_ERROR
    prefix = f"{out}:1: "
    assert reason.startswith(prefix)
    return reason[len(prefix):]


def test_an_error_is_one_scrubbed_line(tmp_path):
    said = _error_reason(tmp_path, {"code": "server_error",
                                    "message": "line one\n   line\ttwo  s3cret-kills6 end"},
                         Scrubber(["s3cret-kills6"]))
    assert "s3cret-kills6" not in said
    assert said.startswith("server_error: line one line two ") and said.endswith(" end")
    assert "\n" not in said and "  " not in said


def test_an_error_is_shown_up_to_160_characters(tmp_path):
    exactly = ("ab " * 60)[:160]  # single spaces, no space at either end
    assert len(exactly) == 160 and exactly == " ".join(exactly.split())
    assert _error_reason(tmp_path, exactly) == exactly
    longer = ("ab " * 60)[:161]
    assert len(longer) == 161
    said = _error_reason(tmp_path, longer)
    assert said == longer[:159] + "…" and len(said) == 160


def test_more_than_five_keys_answered_twice_are_counted_not_listed(tmp_path):
    def answers(n: int) -> Path:
        ok = {"status_code": 200, "body": {"choices": [{"message": {
            "role": "assistant", "content": "Fine."}, "finish_reason": "stop"}]}}
        return _write(tmp_path / f"out{n}.jsonl",
                      *[{"custom_id": f"k{i}", "response": ok} for i in range(n)] * 2)

    cache = SummaryCache(tmp_path / "cache.sqlite")
    try:
        with pytest.raises(ConfigError) as five:
            import_results([answers(5)], cache, "m", Scrubber(), ORIGIN)
        with pytest.raises(ConfigError) as six:
            import_results([answers(6)], cache, "m", Scrubber(), ORIGIN)
    finally:
        cache.close()
    said = str(five.value)
    assert said.startswith("5 custom_ids of the batch results have more than one result")
    assert all(f"'k{i}'" in said for i in range(5))
    # k4 at lines 5 and 10, the last shown, right before the advice
    assert re.search(r"out5\.jsonl:10; a request gets one answer", said), said
    said = str(six.value)
    assert all(f"'k{i}'" in said for i in range(5)) and "'k5'" not in said
    assert "out6.jsonl:11 and 1 more; a request gets one answer" in said  # k4: lines 5, 11


# -- phase 2: the summarizer ---------------------------------------------------------------


class Online(Summarizer):
    """An online backend whose cache (when it has one) belongs to the test."""

    def __init__(self, cache: SummaryCache | None = None) -> None:
        self.cache = cache
        self.closed = 0
        self.asked = 0

    def live_counters(self) -> dict[str, int]:
        return {"api_calls": 7}

    async def summarize(self, request: SummaryRequest) -> Summary:
        self.asked += 1
        if self.notify is not None:
            self.notify("online: first failure of its kind")
        return Summary(f"{PREFIX} Online.", "llm", request.usage)

    async def aclose(self) -> None:
        self.closed += 1


def _config(tmp_path: Path) -> CompressionConfig:
    return CompressionConfig(summarization_model="m1", cache_path=str(tmp_path / "c.sqlite"))


def test_live_counters_are_the_online_backend_s_or_none(tmp_path):
    config = _config(tmp_path)
    assert BatchSummarizer(config, ORIGIN, {}, count_tokens=len).live_counters() == {}
    with_online = BatchSummarizer(config, ORIGIN, {}, count_tokens=len, online=Online())
    assert with_online.live_counters() == {"api_calls": 7}


def test_the_online_backend_is_closed_and_its_notices_reach_the_run(tmp_path):
    online = Online()
    summarizer = BatchSummarizer(_config(tmp_path), ORIGIN, {}, count_tokens=len,
                                 online=online)
    heard: list[str] = []
    summarizer.notify = heard.append

    async def go() -> Summary:
        async with summarizer:
            return await summarizer.summarize(_request("Never exported."))

    summary = asyncio.run(go())
    assert summary.text == f"{PREFIX} Online." and online.asked == 1
    assert heard == ["online: first failure of its kind"]
    assert online.closed == 1


def test_only_the_cache_it_opened_is_closed_run_after_run(tmp_path):
    shared = SummaryCache(tmp_path / "shared.sqlite")
    shared.put("s", "m1", f"{PREFIX} Shared.")
    online = Online(shared)
    summarizer = BatchSummarizer(_config(tmp_path), ORIGIN, {}, count_tokens=len,
                                 online=online)

    async def run_once() -> SummaryCache | None:
        async with summarizer:
            used = summarizer.cache
        return used

    try:
        assert asyncio.run(run_once()) is shared  # the backend's: one connection
        assert shared.get("s") == f"{PREFIX} Shared."  # still open: the backend's
        online.cache = None  # a backend without a cache: the summarizer opens its own
        own = asyncio.run(run_once())
        assert own is not None and own is not shared
        assert not [f for f in open_files_under(tmp_path) if "c.sqlite" in f]
        online.cache = shared  # and with one again: not the summarizer's to close
        assert asyncio.run(run_once()) is shared
        assert shared.get("s") == f"{PREFIX} Shared."
        assert online.closed == 3
    finally:
        shared.close()


def _store(tmp_path: Path, key: str, text: str, **kw) -> None:
    store = SummaryCache(tmp_path / "c.sqlite")
    store.put(key, "m1", text, **kw)
    store.close()


def _summarize(tmp_path: Path, *requests: SummaryRequest) -> list[Summary]:
    summarizer = BatchSummarizer(_config(tmp_path), ORIGIN, {}, count_tokens=len)

    async def go() -> list[Summary]:
        async with summarizer:
            return [await summarizer.summarize(r) for r in requests]

    return asyncio.run(go())


def test_the_row_that_paid_is_told_so_again_after_an_interruption(tmp_path):
    # SummaryRequest.origin: "a cached summary that this very row obtained before an
    # interruption is reported as it was obtained, not as a cache hit".
    _, key = batch_request(_config(tmp_path), "m1", _request())
    _store(tmp_path, key, f"{PREFIX} Tests ran; 3 failed.", origin=ORIGIN,
           usage=SummaryUsage(api_calls=1, prompt_tokens=40, completion_tokens=9))
    [first] = _summarize(tmp_path, _request(origin="run:1"))
    assert (first.source, first.usage.api_calls) == ("llm", 1)
    again, other = _summarize(tmp_path, _request(origin="run:1"), _request(origin="run:2"))
    assert (again.source, again.usage.api_calls, again.usage.prompt_tokens) == ("llm", 1, 40)
    assert (other.source, other.usage.api_calls) == ("cache", 0)
    store = SummaryCache(tmp_path / "c.sqlite")
    assert store.get_entry(key).origin == origin_digest("run:1")
    store.close()


def test_a_request_without_an_origin_pays_for_a_batch_summary_once(tmp_path):
    _, key = batch_request(_config(tmp_path), "m1", _request())
    _store(tmp_path, key, f"{PREFIX} Tests ran.", origin=ORIGIN,
           usage=SummaryUsage(api_calls=1, prompt_tokens=40, completion_tokens=9))
    first, second = _summarize(tmp_path, _request(), _request())
    assert (first.text, first.source, first.usage.api_calls) == (f"{PREFIX} Tests ran.",
                                                                 "llm", 1)
    assert (second.source, second.usage.api_calls) == ("cache", 0)


def test_a_cut_or_truncated_batch_summary_is_reported_truncated(tmp_path):
    # bound_summary with count_tokens=len, target 60, tolerance 2.0: over 120 characters
    # the text is cut at the last sentence end within 60 characters.
    _, key = batch_request(_config(tmp_path), "m1", _request())
    _, short_key = batch_request(_config(tmp_path), "m1", _request("Short region."))
    long_text = f"{PREFIX} " + "Tests ran. " * 20
    assert len(long_text) > 120
    _store(tmp_path, key, long_text, origin="elsewhere")
    _store(tmp_path, short_key, f"{PREFIX} Short.", origin="elsewhere", truncated=True)
    cut, short = _summarize(tmp_path, _request(), _request("Short region."))
    assert cut.text == f"{PREFIX} Tests ran. Tests ran. Tests ran."
    assert (cut.source, cut.truncated) == ("cache", True)
    assert (short.text, short.source, short.truncated) == (f"{PREFIX} Short.", "cache", True)


def test_request_lines_embed_the_exporter_s_body(tmp_path):
    # Sanity for the helpers above: the exporter writes the body batch_request builds.
    config = CompressionConfig(summarization_model="m1")
    lines: list[bytes] = []
    exporter = BatchExporter(config, lines.append, len)
    asyncio.run(exporter.summarize(_request()))
    chat, key = batch_request(config, "m1", _request())
    assert orjson.loads(lines[0])["custom_id"] == key
    assert orjson.loads(lines[0])["body"] == orjson.loads(chat.body("m1"))
