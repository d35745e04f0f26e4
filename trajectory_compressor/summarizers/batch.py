"""Batch inference (§17): summary requests as OpenAI Batch API files; their results.

Phase 1, `BatchExporter`: each summary request a run would send becomes one line of an
OpenAI Batch API input file, ``{"custom_id", "method": "POST", "url":
"/v1/chat/completions", "body"}``, where ``custom_id`` is the request's cache key and
``body`` the very chat-completions body the `openai` backend would POST (`batch_request`
builds both as `OpenAISummarizer` does); `engine.batch` splits the lines into files under
the provider's limits. Identical regions share one request; a request already in the
summary cache is not exported.

Phase 2, `import_results`: the provider's output and error files (``{"custom_id",
"response": {"status_code", "body"}, "error"}`` lines, as OpenAI and `vllm run-batch`
write them) are read; each reply passes the online path's acceptance (`chat.parse_reply`:
a 2xx status, JSON with choices, content not empty, ``finish_reason`` not ``length``), is
scrubbed of the run's key values, redacted and prefixed, and goes into the summary cache
under its custom_id, marked as paid for by the batch. `BatchSummarizer` then serves the
normal pipeline: a summary the batch paid for is bounded like an online reply and
reported as the call it was (``llm``, its usage) by the first row that uses it, as a
cache hit by later ones, exactly as an online run reports it; a request that failed in
the batch or has no result goes to the online endpoints when there are any, else fails
(the row gets the extractive fallback, its errors counted).
"""

from __future__ import annotations

import re
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ..core.config import CompressionConfig, EndpointConfig
from ..core.conversation import SUMMARY_PREFIX
from ..core.errors import ConfigError
from ..core.quote import quoted
from ..core.redact import Scrubber
from ..core.summary import (
    Summarizer,
    Summary,
    SummaryFailed,
    SummaryRequest,
    SummaryUsage,
    bound_summary,
    finish_summary_text,
)
from ..counting.identity import tokenizer_identity
from .cache import SummaryCache, cache_key, origin_digest
from .chat import ChatRequest, Completion, parse_reply
from .dotenv import key_environ
from .endpoint import Endpoint
from .prompt import FULL, PromptStyle, build_prompt

ENDPOINT_PATH = "/v1/chat/completions"
# Failure kinds of phase 2 besides the online ones (`chat.FailureKind`).
MISSING = "batch_missing"  # no result line for the request
BATCH_ERROR = "batch_error"  # the provider's error file (or ``error``) names it
_CUSTOM_ID = re.compile(rb'^\{"custom_id":"([^"\\]+)"')


def batch_request(
    config: CompressionConfig, model: str, request: SummaryRequest, style: PromptStyle = FULL,
    scrub: Scrubber | None = None,
) -> tuple[ChatRequest, str]:
    """What the `openai` backend sends ``model`` for ``request`` (its turns passed through
    ``scrub`` as online), and its cache key."""
    prompt = build_prompt(request, config.max_input_tokens, config.temperature, style,
                          scrub=scrub or Scrubber(config.secret_values(key_environ())))
    key = cache_key(model, prompt.messages, prompt.max_tokens, prompt.temperature,
                    style.options)
    return prompt.chat_request(), key


def request_line(key: str, body: bytes) -> bytes:
    """One line of a Batch API input file (``body`` embedded byte for byte)."""
    return (b'{"custom_id":' + orjson.dumps(key) + b',"method":"POST","url":"'
            + ENDPOINT_PATH.encode() + b'","body":' + body + b"}\n")


# -- phase 1 ----------------------------------------------------------------------------


class CachedKeys:
    """Which keys the summary cache already holds, read without writing anything (an
    export writes nothing but its folder); no file, or one that cannot be read, holds none."""

    def __init__(self, path: Path | None) -> None:
        self._db: sqlite3.Connection | None = None
        if path is not None and path.is_file():
            try:
                # immutable: no lock, journal or -shm file is created next to the cache.
                self._db = sqlite3.connect(f"{path.resolve().as_uri()}?immutable=1", uri=True)
                self._db.execute("SELECT 1 FROM summaries LIMIT 1")
            except sqlite3.Error:
                self.close()

    def __contains__(self, key: object) -> bool:
        if self._db is None:
            return False
        row = self._db.execute("SELECT 1 FROM summaries WHERE key = ?", (key,)).fetchone()
        return row is not None

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


@dataclass
class ExportStats:
    """What phase 1 found to ask for."""

    summaries: int = 0  # rows that need a summary
    requests: int = 0  # lines written
    duplicates: int = 0  # rows whose region is another row's: no line of their own
    cached: int = 0  # requests already in the summary cache: no line
    prompt_tokens: int = 0  # of the written requests, counted with the run's tokenizer
    max_output_tokens: int = 0  # the sum of their max_tokens


class BatchExporter(Summarizer):
    """Phase 1: records each summary request as a Batch API line instead of sending it,
    and answers with a placeholder (the run's rows are not kept)."""

    name = "batch-export"

    def __init__(
        self,
        config: CompressionConfig,
        write: Callable[[bytes], None],
        count_tokens: Callable[[str], int],
        cached: CachedKeys | None = None,
    ) -> None:
        self.config = config
        self.model = config.summarization_model
        self.write = write
        self.count_tokens = count_tokens
        self.cached = cached
        self.stats = ExportStats()
        self._seen: set[str] = set()
        self.scrubber = Scrubber(config.secret_values(key_environ()))

    async def summarize(self, request: SummaryRequest) -> Summary:
        if getattr(request, "repair", None) is not None:
            # A repair asks about a first summary the batch has not written yet: phase 2
            # sends it online when it can (`BatchSummarizer`).
            return Summary(SUMMARY_PREFIX, "batch")
        chat, key = batch_request(self.config, self.model, request, scrub=self.scrubber)
        stats = self.stats
        stats.summaries += 1
        if key in self._seen:
            stats.duplicates += 1
        elif self.cached is not None and key in self.cached:
            stats.cached += 1
            self._seen.add(key)
        else:
            self._seen.add(key)
            self.write(request_line(key, chat.body(self.model)))
            stats.requests += 1
            stats.prompt_tokens += sum(self.count_tokens(m["content"]) for m in chat.messages)
            stats.max_output_tokens += chat.max_tokens
        return Summary(SUMMARY_PREFIX, "batch")


def request_keys(paths: Iterable[Path]) -> set[str] | None:
    """The custom_ids of exported request files; None when one of them is gone."""
    keys: set[str] = set()
    for path in paths:
        try:
            with open(path, "rb") as f:
                for line in f:
                    match = _CUSTOM_ID.match(line)
                    if match:
                        keys.add(match.group(1).decode())
        except OSError:
            return None
    return keys


# -- phase 2 ----------------------------------------------------------------------------


@dataclass
class ImportReport:
    """What the results files held."""

    files: list[Path]
    lines: int = 0
    accepted: int = 0
    failed: Counter[str] = field(default_factory=Counter)  # by kind
    unreadable: list[str] = field(default_factory=list)  # "file:line: why"
    unknown: int = 0  # results for requests this export does not hold (imported anyway)
    missing: int | None = None  # exported requests without any result (None: unknown)
    # Requests that failed: custom_id -> (kind, reason); a later success clears one.
    failures: dict[str, tuple[str, str]] = field(default_factory=dict)


def import_results(
    paths: list[Path],
    cache: SummaryCache,
    model: str,
    scrubber: Scrubber,
    origin: str,
    expected: set[str] | None = None,
) -> ImportReport:
    """Store every acceptable reply of the results files in ``cache`` under its custom_id,
    marked with ``origin`` (the batch's `origin_digest`), and say what failed.

    The reply is judged as the online path judges one (`chat.parse_reply`), then
    scrubbed, redacted and prefixed (`finish_summary_text`); its length is bounded when a
    row uses it (`BatchSummarizer`), where its budget is known. A request with several
    results may fail in all but one (a second batch for the failed requests); two answers
    for one request, or one request twice in a file, are a `ConfigError` naming them,
    before anything is stored. An entry a row has already used is left alone (importing
    again, after an interruption or a finished run, changes nothing a row of that run was
    told).
    """
    _check_one_answer_each(paths, model, scrubber)
    report = ImportReport(list(paths))
    accepted: set[str] = set()
    for path in paths:
        for where, endpoint, line in _result_lines(path, model):
            report.lines += 1
            parsed = _parse_result(line, endpoint, scrubber)
            if isinstance(parsed, str):
                report.unreadable.append(f"{where}: {parsed}")
                continue
            key, outcome = parsed
            if expected is not None and key not in expected:
                report.unknown += 1
            if isinstance(outcome, Completion):
                held = cache.get_entry(key)
                # A summary a row already used (an earlier, maybe interrupted, phase 2)
                # stays as that row left it: a rerun reports it as online would.
                if held is None or held.origin == origin:
                    text = finish_summary_text(scrubber.literal(outcome.text), scrubber)
                    usage = SummaryUsage(api_calls=1, prompt_tokens=outcome.prompt_tokens,
                                         completion_tokens=outcome.completion_tokens)
                    cache.put(key, model, text, origin=origin, usage=usage)
                accepted.add(key)
                report.failures.pop(key, None)
            elif key not in accepted:
                report.failures[key] = outcome
    report.accepted = len(accepted)
    report.failed = Counter(kind for kind, _ in report.failures.values())
    if expected is not None:
        report.missing = len(expected - accepted - report.failures.keys())
    return report


def _result_lines(path: Path, model: str) -> Iterator[tuple[str, Endpoint, bytes]]:
    """The non-blank lines of a results file, each with its location and an endpoint
    named after it (so that failure reasons name the line)."""
    endpoint = Endpoint(EndpointConfig(path.resolve().as_uri(), model), None, 0.0)
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below, line by line
    except OSError as exc:
        raise ConfigError(f"cannot read batch results {path}: {exc.strerror or exc}") \
            from None
    with f:
        for number, line in enumerate(f, 1):
            if line.strip():
                endpoint.name = f"{path}:{number}"
                yield endpoint.name, endpoint, line


def _check_one_answer_each(paths: list[Path], model: str, scrubber: Scrubber) -> None:
    """Raise `ConfigError` naming the custom_ids with two answers in the results, or two
    lines in one file: which of them a row should get is not for this tool to guess."""
    answered: dict[str, str] = {}
    twice: dict[str, list[str]] = {}
    for path in paths:
        in_file: dict[str, str] = {}
        for where, endpoint, line in _result_lines(path, model):
            parsed = _parse_result(line, endpoint, scrubber)
            if isinstance(parsed, str):
                continue
            key = parsed[0]
            first = in_file.setdefault(key, where)
            if isinstance(parsed[1], Completion):
                first = answered.setdefault(key, where) if first == where else first
            if first != where:
                twice.setdefault(key, [first]).append(where)
    if twice:
        shown = "; ".join(f"{quoted(key)} at {', '.join(places)}"
                          for key, places in list(twice.items())[:5])
        more = f" and {len(twice) - 5} more" if len(twice) > 5 else ""
        raise ConfigError(f"{len(twice)} custom_id{'s' * (len(twice) != 1)} of the batch "
                          f"results {'have' if len(twice) != 1 else 'has'} more than one "
                          f"result: {shown}{more}; a request gets one answer: remove the "
                          "extra lines, or give each results file once")


def _parse_result(
    line: bytes, endpoint: Endpoint, scrubber: Scrubber
) -> tuple[str, Completion | tuple[str, str]] | str:
    """``(custom_id, reply or (failure kind, reason))`` of one results line, or why the
    line cannot be read."""
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError:
        return "not a JSON line"
    if not isinstance(data, dict) or not isinstance(data.get("custom_id"), str):
        return "no custom_id"
    key = data["custom_id"]
    response, error = data.get("response"), data.get("error")
    if isinstance(response, dict) and isinstance(response.get("status_code"), int):
        body = response.get("body")
        raw = orjson.dumps(body) if body is not None else b""
        outcome = parse_reply(endpoint, response["status_code"], raw, scrub=scrubber)
        if isinstance(outcome, Completion):
            return key, outcome
        said = f" ({_describe_error(error, scrubber)})" if error else ""
        return key, (outcome.kind, outcome.reason + said)
    if error:
        return key, (BATCH_ERROR, f"{endpoint.name}: {_describe_error(error, scrubber)}")
    return key, ("invalid", f"{endpoint.name}: neither a response nor an error")


def _describe_error(error: Any, scrubber: Scrubber) -> str:
    """The provider's error (``code: message`` of an object) as one line, scrubbed, of at
    most 160 characters: a longer one keeps its first 159 and ends with ``…``."""
    if isinstance(error, dict):
        parts = [str(error[k]) for k in ("code", "message") if error.get(k)]
        text = ": ".join(parts) or "error"
    else:
        text = str(error)
    text = scrubber(" ".join(text.split()))
    return text if len(text) <= 160 else text[:159] + "…"


class BatchSummarizer(Summarizer):
    """Phase 2: summaries from the batch results in the cache; the online endpoints (or
    the extractive fallback) for the requests the batch did not answer.

    ``origin`` is the `origin_digest` the import marked the batch's entries with;
    ``failures`` the import's failed requests (custom_id -> (kind, reason)).
    """

    name = "batch"

    def __init__(
        self,
        config: CompressionConfig,
        origin: str,
        failures: Mapping[str, tuple[str, str]],
        *,
        count_tokens: Callable[[str], int],
        online: Summarizer | None = None,
    ) -> None:
        if config.cache_path is None:
            raise ConfigError("the batch summarizer reads its results from the summary "
                              "cache: give it a cache_path")
        self.config = config
        self.model = config.summarization_model
        self.origin = origin
        self.failures = failures
        self.count_tokens = count_tokens
        self.online = online
        self.cache: SummaryCache | None = None
        self._own_cache = False
        self.scrubber = Scrubber(config.secret_values(key_environ()))

    def live_counters(self) -> dict[str, int]:
        return self.online.live_counters() if self.online is not None else {}

    async def start(self) -> None:
        """Open the cache (the online backend's, when there is one: one connection)."""
        if self.online is not None:
            self.online.notify = self.notify
            await self.online.start()
            self.cache = getattr(self.online, "cache", None)
        if self.cache is None:
            assert self.config.cache_path is not None
            self.cache = SummaryCache(self.config.cache_path, tokenizer_identity(self.config))
            self._own_cache = True

    async def aclose(self) -> None:
        try:
            if self.online is not None:
                await self.online.aclose()
        finally:
            cache, self.cache = self.cache, None
            if self._own_cache and cache is not None:
                cache.close()
            self._own_cache = False

    async def summarize(self, request: SummaryRequest) -> Summary:
        """The batch's summary for ``request``; else the online path; else `SummaryFailed`."""
        _, key = batch_request(self.config, self.model, request, scrub=self.scrubber)
        failure = self.failures.get(key)
        found = self._from_cache(key, request)
        if isinstance(found, Summary):
            return found
        if found is not None:
            failure = found
        kind, reason = failure or (MISSING, "no result for this request in the batch results")
        if kind != MISSING:
            request.usage.api_calls += 1  # the batch sent it
        request.usage.failed(kind)
        if self.online is not None:
            return await self.online.summarize(request)
        raise SummaryFailed(reason, request.usage)

    def _from_cache(self, key: str, request: SummaryRequest) -> Summary | tuple[str, str] | None:
        """The cached summary under ``key``, reported as an online run would report it;
        ``(kind, reason)`` when it is too long to use; None when there is none."""
        assert self.cache is not None
        entry = self.cache.get_entry(key)
        if entry is None:
            return None
        bounded = bound_summary(entry.text, request.target_tokens,
                                self.config.summary_tolerance, self.count_tokens)
        if bounded is None:
            return ("too_long", "the batch's summary is far longer than asked and has no "
                    "sentence end to cut it at")
        text, cut = bounded
        truncated = cut or entry.truncated
        mine = request.origin is not None and entry.origin == origin_digest(request.origin)
        if (entry.origin == self.origin or mine) and entry.usage is not None:
            if not mine:
                # The first row to use a batch summary paid for it; a later row with the
                # same region (or a rerun) finds it as a cache hit, as online.
                origin = origin_digest(request.origin) if request.origin is not None else None
                self.cache.put(key, self.model, entry.text, origin=origin, usage=entry.usage,
                               truncated=entry.truncated)
            request.usage.add(entry.usage)
            return Summary(text, "llm", request.usage, truncated)
        return Summary(text, "cache", request.usage, truncated)
