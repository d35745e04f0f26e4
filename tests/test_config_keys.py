"""Every configuration key does what it says, or is documented as accepted and ignored.

For each key of the YAML schema (`core.config.SECTIONS`) there is a probe here: a value to
change it to and an observation of what the library then does (the plan, the row
written, the request an endpoint receives, the files a run writes, ...). The test loads
the config through `from_dict` with and without the change and asserts the observations
differ. A key without a probe must be in `IGNORED_KEYS` (listed in the README, warned
about on stderr); so a new key that does nothing fails `test_every_key_is_probed_...`.
"""

from __future__ import annotations

import asyncio
import json
import re
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cli_helpers import ROOT, run_cli
from tests.fake_llm_server import FakeLLMServer
from tests.fixtures_runs import row as sized_row
from tests.fixtures_runs import write_jsonl
from trajectory_compressor.core.config import (
    DEFAULT_BASE_URL,
    DEFAULT_KEY_ENV,
    IGNORED_KEYS,
    SECTIONS,
    CompressionConfig,
    EndpointConfig,
    _key_of,
)
from trajectory_compressor.core.metrics import TrajectoryMetrics
from trajectory_compressor.core.plan import Plan, Region, plan_trajectory
from trajectory_compressor.core.summary import Summarizer, Summary, SummaryRequest
from trajectory_compressor.counting.tokens import TokenCounter
from trajectory_compressor.dialects import detect
from trajectory_compressor.engine.compressor import RowResult, TrajectoryCompressor
from trajectory_compressor.engine.count import RowCounter
from trajectory_compressor.engine.job import compress_dataset
from trajectory_compressor.engine.layout import OutputLayout, plan_layout
from trajectory_compressor.engine.progress import Progress
from trajectory_compressor.engine.stream import RowStream
from trajectory_compressor.engine.writer import RunWriter
from trajectory_compressor.formats.base import InputFile, Location, Record
from trajectory_compressor.summarizers import make_summarizer
from trajectory_compressor.summarizers.local import find_model
from trajectory_compressor.summarizers.openai import OpenAISummarizer

Observe = Callable[[CompressionConfig, Path], Any]
DEAD_URL = "http://127.0.0.1:9/v1"  # discard port: nothing listens there
_COUNTER: list[TokenCounter] = []


def counter() -> TokenCounter:
    if not _COUNTER:
        _COUNTER.append(TokenCounter.load())
    return _COUNTER[0]


# --- observations ----------------------------------------------------------------------

# 12 turns, 24,250 tokens (given, not counted): over the default 15,250 target.
ROLES = list("SHGTGTGTGTHG")
TOKENS = [100, 50, 3000, 3000, 3000, 3000, 3000, 3000, 3000, 3000, 50, 50]
NAMES = {"S": "system", "H": "human", "G": "gpt", "T": "tool"}
LONG_SUMMARY = "[CONTEXT SUMMARY]: " + " ".join(f"Step {i} read file {i}." for i in range(130))


def the_row() -> dict[str, Any]:
    return {"id": "r", "conversations": [{"from": NAMES[r], "value": f"{NAMES[r]} {i}"}
                                         for i, r in enumerate(ROLES)]}


class Recording(Summarizer):
    name = "recording"

    def __init__(self, text: str = "[CONTEXT SUMMARY]: short.") -> None:
        self.text, self.budgets = text, []

    async def summarize(self, request: SummaryRequest) -> Summary:
        self.budgets.append(request.target_tokens)
        return Summary(self.text, "llm")


def compressed(cfg: CompressionConfig, _tmp: Path, text: str = "[CONTEXT SUMMARY]: short.") -> Any:
    """The row written for `the_row` and the budgets the summarizer was asked for."""
    summarizer = Recording(text)

    async def go() -> RowResult:
        async with TrajectoryCompressor(cfg, summarizer=summarizer,
                                        counter=counter()) as compressor:
            return await compressor.compress_row(the_row(), list(TOKENS))

    result = asyncio.run(go())
    return json.dumps(result.row, sort_keys=True), summarizer.budgets


def distilled(cfg: CompressionConfig, _tmp: Path) -> Any:
    """The row written for a short row whose tool output is coloured: `distill` decides
    whether the colour codes stay."""
    row = {"id": "d", "conversations": [
        {"from": "human", "value": "run the tests"}, {"from": "gpt", "value": "running"},
        {"from": "tool", "value": "\x1b[32m12 passed\x1b[0m in 0.42s"}]}

    async def go() -> RowResult:
        async with TrajectoryCompressor(cfg, summarizer=Recording(),
                                        counter=counter()) as compressor:
            return await compressor.compress_row(row)

    return json.dumps(asyncio.run(go()).row, sort_keys=True)


def second_pass(cfg: CompressionConfig, _tmp: Path) -> Any:
    """The row written when two huge tool outputs sit in the middle, out of the summary's
    reach (the tail starts with a tool turn): `over_limit_strategy` decides their fate."""
    big = "\n".join(f"line {i} " + "word " * 40 for i in range(500))
    row = {"id": "r", "conversations": [
        {"from": NAMES[r], "value": big if i in (6, 7) else f"{NAMES[r]} {i}"}
        for i, r in enumerate("SHGTGGTTTGHG")]}

    async def go() -> RowResult:
        async with TrajectoryCompressor(cfg, summarizer=Recording(),
                                        counter=counter()) as compressor:
            return await compressor.compress_row(row)

    return json.dumps(asyncio.run(go()).row, sort_keys=True)


def long_summary(cfg: CompressionConfig, tmp: Path) -> Any:
    return compressed(cfg, tmp, LONG_SUMMARY)


def fidelity_seen(cfg: CompressionConfig, _tmp: Path) -> Any:
    """The row written when every turn names a file that the summary leaves out, and the
    requests the summarizer got (a repair is a second one)."""
    summarizer = Recording()
    row = {"id": "r", "conversations": [{"from": NAMES[r], "value": f"{i} reads src/app.py"}
                                        for i, r in enumerate(ROLES)]}

    async def go() -> RowResult:
        async with TrajectoryCompressor(cfg, summarizer=summarizer,
                                        counter=counter()) as compressor:
            return await compressor.compress_row(row, list(TOKENS))

    result = asyncio.run(go())
    return json.dumps(result.row, sort_keys=True), summarizer.budgets


def invented_seen(cfg: CompressionConfig, tmp: Path) -> Any:
    """`compressed` with a summary naming a file no turn does (a repair is a second
    request)."""
    return compressed(cfg, tmp, "[CONTEXT SUMMARY]: read /etc/made_up.conf.")


def planned(roles: str) -> Observe:
    """The plan for ``roles`` (3,000 tokens a turn), in which the last protected head turn
    is the first of one role: switching that role's protection moves the region."""
    def observe(cfg: CompressionConfig, _tmp: Path) -> Any:
        plan = plan_trajectory([NAMES[r] for r in roles], [3000] * len(roles), cfg)
        return plan.action, plan.region, plan.region_tokens
    return observe


def layout(cfg: CompressionConfig, tmp: Path) -> Any:
    src = tmp / "in.jsonl"
    src.write_text("{}\n")
    out = plan_layout(str(src), [InputFile(src, "jsonl")], None, cfg, single_file=True)
    return out.outputs, out.formats


def routed(cfg: CompressionConfig, tmp: Path) -> Any:
    """Where an over-limit row goes, and whether one row already made a checkpoint."""
    src, out = tmp / "in.jsonl", tmp / "out.jsonl"
    src.write_text("")
    lay = OutputLayout({src: out}, {src: "jsonl"}, tmp / "out")
    writer = RunWriter(lay, cfg, Progress(quiet=True), ([], {}))
    writer.open_file(0, InputFile(src, "jsonl"))
    row = {"id": "a", "conversations": []}
    metrics = TrajectoryMetrics(original_tokens=9, compressed_tokens=9, still_over_limit=True)
    writer.write(Record(Location("in.jsonl", line=1), row),
                 RowResult(row, metrics, Plan("over_limit", 9, Region(0, 0)), False, []), 0)
    checkpointed = lay.checkpoint.exists()
    writer.finish_file(0)
    writer.commit()
    return out.read_text(), (tmp / "out_over_limit.jsonl").read_text(), checkpointed


def batches(cfg: CompressionConfig, tmp: Path) -> Any:
    src = write_jsonl(tmp / "b.jsonl", [{"conversations": []}] * 5)
    stream = RowStream(lambda rows: detect(rows, cfg), batch_rows=cfg.batch_rows)
    return [len(b) for b in stream.batches(InputFile(src, "jsonl"))]


class Peak(Summarizer):
    """How many rows are being summarized at once."""

    name = "peak"

    def __init__(self) -> None:
        self.active = self.peak = 0

    async def summarize(self, request: SummaryRequest) -> Summary:
        self.active += 1
        self.peak = max(self.peak, self.active)
        await asyncio.sleep(0.05)
        self.active -= 1
        return Summary("[CONTEXT SUMMARY]: short.", "llm")


def run(cfg: CompressionConfig, tmp: Path) -> Any:
    """A whole run over 4 rows to compress: rows summarized at once, files written."""
    rows = [sized_row(f"r{i}", "SHGTGTGTGTGT", [10, 5, 5, 5, 40, 40, 40, 40, 5, 5, 5, 5])
            for i in range(4)]
    src = write_jsonl(tmp / "run.jsonl", rows)
    peak = Peak()
    compress_dataset(str(src), str(tmp / "out.jsonl"), cfg, summarizer=peak)
    return peak.peak, sorted(p.name for p in tmp.iterdir())


def rows_written(cfg: CompressionConfig, tmp: Path) -> Any:
    """The ids a run writes for a row over the target (`output.mode`: one, or windows)."""
    src = write_jsonl(tmp / "w.jsonl", [sized_row("r", "SHGTGTGTGTGT",
                                                  [10, 5, 5, 5, 20, 20, 20, 20, 5, 5, 5, 5])])
    compress_dataset(str(src), str(tmp / "w_out.jsonl"), cfg.replace(summarizer="extractive"))
    lines = (tmp / "w_out.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["id"] for line in lines]


def engine_used(cfg: CompressionConfig, tmp: Path) -> Any:
    """Which engine a run goes to: with ``ray`` hidden, the Ray engine refuses to start."""
    import sys

    src = write_jsonl(tmp / "e.jsonl", [sized_row("r", "SHG", [10, 5, 5])])
    saved = {name: sys.modules.get(name) for name in ("ray", "ray.data")}
    sys.modules.update(dict.fromkeys(saved))  # None: `import ray` raises ImportError
    try:
        compress_dataset(str(src), str(tmp / "e_out.jsonl"), cfg.replace(summarizer="extractive"))
        return "ran in this process"
    except Exception as exc:
        return f"refused: {exc}"
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def ray_pool(cfg: CompressionConfig, _tmp: Path) -> Any:
    """The Ray actor pool's size for 8 shards on a cluster of 4 CPUs."""
    from trajectory_compressor.engine.ray import _pool_size

    cluster = types.SimpleNamespace(cluster_resources=lambda: {"CPU": 4})
    return _pool_size(cluster, cfg, cfg.ray_actors, 8)


def dialect_view(row: dict[str, Any]) -> Observe:
    """How the configured dialect reads ``row``, writes a summary turn back, and which
    tools it gives the chat template."""
    def observe(cfg: CompressionConfig, _tmp: Path) -> Any:
        dialect = detect([row], cfg)
        try:
            turns = dialect.turns(row)
        except Exception as exc:
            return type(dialect).__name__, f"refused: {exc}"
        back = dialect.with_turns(row, [{"from": "human", "value": "S"}, *turns[1:]])
        return (type(dialect).__name__, turns, json.dumps(back, sort_keys=True),
                repr(dialect.template_messages(row, turns)[1]))
    return observe


VARIANT_ROW = {
    "msgs": [{"speaker": "me", "text": "hi"}, {"speaker": "bot", "text": "calling"},
             {"speaker": "fn", "text": '{"name": "ls"}'}, {"speaker": "obs", "text": "a.txt"},
             {"speaker": "bot", "text": "done"}],
    "conversations": [{"from": "user", "value": "plain"}, {"from": "assistant", "value": "ok"}],
    "sys": "be brief", "system": "default system",
    "functions": '[{"name": "ls"}]', "tools": '[{"name": "cat"}]',
}
VARIANT_BASE = {"format": "sharegpt-variant", "messages": "msgs", "role_tag": "speaker",
                "content_tag": "text", "user_tag": "me", "assistant_tag": "bot",
                "observation_tag": "obs", "function_tag": "fn"}


def on_fake(cfg: CompressionConfig, url: str) -> CompressionConfig:
    """``cfg`` pointed at a fake endpoint instead of the default provider (whose key
    variable is not sent elsewhere anyway)."""
    key_env = "" if cfg.api_key_env == DEFAULT_KEY_ENV else cfg.api_key_env
    return cfg.replace(base_url=url, api_key_env=key_env)


def requests_seen(server_kwargs: dict[str, Any] | None = None, n: int = 1,
                  environ: dict[str, str] | None = None, twice: bool = False,
                  big: bool = False) -> Observe:
    """What a fake endpoint receives when the `openai` backend summarizes ``n`` regions
    (the config's default URL is replaced by the fake's)."""
    def observe(cfg: CompressionConfig, _tmp: Path) -> Any:
        async def go() -> Any:
            async with FakeLLMServer(**(server_kwargs or {})) as server:
                c = cfg
                if c.base_url == DEFAULT_BASE_URL and not c.endpoints:
                    c = on_fake(c, server.url)
                outcome: list[Any] = []

                def longest(_low: float, high: float) -> float:
                    """The backoff's random draw: its upper bound, recorded."""
                    outcome.append(("backoff", high))
                    return high

                try:
                    for _ in range(2 if twice else 1):
                        s = OpenAISummarizer(c, environ=environ or {})
                        s.pool._rng = types.SimpleNamespace(uniform=longest)
                        turns = [{"from": "gpt", "value": "word " * (9000 if big else 40)}]
                        async with s:
                            results = await asyncio.gather(
                                *(s.summarize(SummaryRequest(turns, 3 + i, 100))
                                  for i in range(n)), return_exceptions=True)
                        outcome += [type(r).__name__ if isinstance(r, BaseException)
                                    else r.source for r in results]
                except Exception as exc:
                    outcome.append(f"refused: {exc}")
                body = server.last_request or {}
                return (outcome, server.requests, server.peak_in_flight,
                        dict(server.authorizations), body.get("model"),
                        body.get("temperature"),
                        [len(m["content"]) for m in body.get("messages", [])])
        return asyncio.run(go())
    return observe


def row_outcome(server_kwargs: dict[str, Any]) -> Observe:
    """A row compressed with the `openai` backend against a fake endpoint."""
    def observe(cfg: CompressionConfig, _tmp: Path) -> Any:
        async def go() -> Any:
            async with FakeLLMServer(**server_kwargs) as server:
                c = cfg
                if c.base_url == DEFAULT_BASE_URL and not c.endpoints:
                    c = on_fake(c, server.url)
                s = OpenAISummarizer(c, environ={})
                try:
                    async with TrajectoryCompressor(c, summarizer=s, counter=counter()) as tc:
                        result = await tc.compress_row(the_row(), list(TOKENS))
                except Exception as exc:
                    return f"stopped: {type(exc).__name__}"
                return result.metrics.summary_source, result.metrics.error is not None
        return asyncio.run(go())
    return observe


def exit_code(server_kwargs: dict[str, Any]) -> Observe:
    """The exit code of a whole run (`compress_input`, as the CLI runs it) of one row to
    compress with the `openai` backend against a fake endpoint."""
    from trajectory_compressor.app.commands import compress_input
    from trajectory_compressor.engine.options import RunOptions

    def observe(cfg: CompressionConfig, tmp: Path) -> Any:
        src = write_jsonl(tmp / "gate.jsonl", [sized_row(
            "r", "SHGTGTGTGTGT", [10, 5, 5, 5, 40, 40, 40, 40, 5, 5, 5, 5])])
        with FakeLLMServer(**server_kwargs).in_thread() as server:
            return compress_input(str(src), str(tmp / "gate_out.jsonl"),
                                  on_fake(cfg, server.url), RunOptions(quiet=True))
    return observe


def breaker_rest(cfg: CompressionConfig, _tmp: Path) -> Any:
    """How often 8 summaries in a row try a dead endpoint listed before a live one."""
    async def go() -> Any:
        async with FakeLLMServer() as live:
            c = cfg.replace(endpoints=[EndpointConfig(DEAD_URL, "m"),
                                       EndpointConfig(live.url, "m")],
                            cache_enabled=False, retry_delay=0.01, allow_fallback=True)
            s = OpenAISummarizer(c, environ={})
            async with s:
                for i in range(8):
                    await s.summarize(SummaryRequest([{"from": "gpt", "value": f"x {i}"}],
                                                     3, 50))
                    await asyncio.sleep(0.02)
            return s.pool.endpoints[0].requests
    return asyncio.run(go())


def backend(cfg: CompressionConfig, _tmp: Path) -> Any:
    try:
        return type(make_summarizer(cfg, counter())).__name__
    except Exception as exc:
        return f"refused: {exc}"


def local_model(cfg: CompressionConfig, tmp: Path) -> Any:
    shipped = tmp / "shipped"
    shipped.mkdir(exist_ok=True)
    (shipped / "smollm2.gguf").write_bytes(b"GGUF")
    spec = types.SimpleNamespace(submodule_search_locations=[str(shipped)])
    return find_model(cfg.local_model, lambda name: spec).name


_LOADS: list[tuple[str, bool]] = []


def tokenizer_load(cfg: CompressionConfig, _tmp: Path) -> Any:
    """What the tokenizer is loaded from, and with which trust (a spy on transformers)."""
    from transformers import AutoTokenizer

    real = AutoTokenizer.from_pretrained
    _LOADS.clear()

    def spy(source: str, **kwargs: Any) -> Any:
        _LOADS.append((Path(source).name, kwargs.get("trust_remote_code")))
        return real(source, **kwargs)

    AutoTokenizer.from_pretrained = spy  # type: ignore[method-assign]
    try:
        TokenCounter.load(cfg.tokenizer_name, cfg.trust_remote_code)
    finally:
        AutoTokenizer.from_pretrained = real  # type: ignore[method-assign]
    return list(_LOADS)


def counts(cfg: CompressionConfig, _tmp: Path) -> Any:
    """Per-turn counts of a row in the configured counting mode."""
    from trajectory_compressor.dialects.sharegpt import SHAREGPT

    row = {"conversations": [{"from": "human", "value": "hello there"},
                             {"from": "gpt", "value": "hi"}]}
    rc = RowCounter(cfg, TokenCounter.load(cfg.tokenizer_name))
    return rc.count([(SHAREGPT, row, row["conversations"])])


# --- the probes: "section.key" -> (new value, observation, base settings) ----------------

Probe = tuple[Any, Observe, dict[str, dict[str, Any]]]
FAST_RETRY = {"summarization": {"retry_delay": 0.01}}


def _tokenizer_dir(tmp: Path, template: str | None = None) -> str:
    from tests.template_tokenizer import CHATML, make_tokenizer_dir

    return str(make_tokenizer_dir(tmp / "tok", template or CHATML))


def verified(cfg: CompressionConfig, _tmp: Path) -> Any:
    """The row written when a distill rule has a bug (one line dropped, planted here):
    `verify_distill` decides whether the row is written undistilled, its failure noted."""
    from trajectory_compressor.core import distill_row
    from trajectory_compressor.engine import compressor as compressor_module

    def lossy(texts: Any, level: str, count_many: Any, **counts: Any) -> Any:
        out, stats = distill_row.distill_turns(texts, level, count_many, **counts)
        return [t if t is None else t.split("\n", 1)[-1] for t in out], stats

    row = {"id": "v", "conversations": [
        {"from": "human", "value": "run the tests"}, {"from": "gpt", "value": "running"},
        {"from": "tool", "value": "\x1b[32mstart\x1b[0m\n" + "waiting for it\n" * 20}]}

    async def go() -> RowResult:
        async with TrajectoryCompressor(cfg, summarizer=Recording(),
                                        counter=counter()) as compressor:
            return await compressor.compress_row(row)

    real = compressor_module.distill_turns
    compressor_module.distill_turns = lossy  # type: ignore[assignment]
    try:
        return json.dumps(asyncio.run(go()).row, sort_keys=True)
    finally:
        compressor_module.distill_turns = real
def masked(cfg: CompressionConfig, _tmp: Path) -> Any:
    """The row written for a row over the target with six long terminal outputs in the
    middle: `strategy` decides whether they are masked, `mask_keep_last` how many of the
    last stay, `mask_exclude_tools` whose stay."""
    call = '<tool_call>\n{"name": "terminal", "arguments": {"command": "ls"}}\n</tool_call>'
    out = "\n".join(f"file_{i}.py" for i in range(300))
    turns = [{"from": "system", "value": "sys"}, {"from": "human", "value": "go"}]
    for _ in range(6):
        turns += [{"from": "gpt", "value": call}, {"from": "tool", "value": out}]
    turns += [{"from": "gpt", "value": "done"}] * 4
    row = {"id": "m", "conversations": turns}

    async def go() -> RowResult:
        async with TrajectoryCompressor(cfg.replace(target_max_tokens=3000),
                                        summarizer=Recording(), counter=counter()) as c:
            return await c.compress_row(row)

    return json.dumps(asyncio.run(go()).row, sort_keys=True)


PROBES: dict[str, Probe] = {
    "tokenizer.name": ("<tok>", tokenizer_load, {}),
    "tokenizer.trust_remote_code": (True, tokenizer_load, {"tokenizer": {"name": "<tok>"}}),
    "tokenizer.counting": ("chat_template", counts, {"tokenizer": {"name": "<tok>"}}),
    "tokenizer.chat_template": ("<jinja>", counts,
                                {"tokenizer": {"name": "<tok>", "counting": "chat_template"}}),
    "compression.target_max_tokens": (20000, compressed, {}),
    "compression.summary_target_tokens": (2000, compressed, {}),
    "compression.over_limit_strategy": ("elide_tool_outputs", second_pass, {}),
    "compression.distill": ("safe", distilled, {}),
    "compression.verify_distill": (True, verified, {"compression": {"distill": "safe"}}),
    "compression.strategy": ("mask", masked, {}),
    "compression.mask_keep_last": (0, masked, {"compression": {"strategy": "mask"}}),
    "compression.mask_exclude_tools": (["terminal"], masked,
                                       {"compression": {"strategy": "mask"}}),
    "protected_turns.first_system": (False, planned("HGTGSGGGGGGG"), {}),
    "protected_turns.first_human": (False, planned("SGTGHGGGGGGG"), {}),
    "protected_turns.first_gpt": (False, planned("SHTHGHHHHHHH"), {}),
    "protected_turns.first_tool": (False, planned("SHGGTGGGGGGG"), {}),
    "protected_turns.last_n_turns": (6, compressed, {}),
    "summarization.model": ("other-model", requests_seen(), {}),
    "summarization.base_url": (DEAD_URL, requests_seen(), FAST_RETRY),
    "summarization.api_key_env": ("PROBE_KEY", requests_seen(environ={"PROBE_KEY": "pk-1234567"}),
                                  {}),
    "summarization.temperature": (1.1, requests_seen(), {}),
    "summarization.max_retries": (1, requests_seen({"faults": {"http500": 1.0}}), FAST_RETRY),
    "summarization.retry_delay": (0.02, requests_seen({"script": ["http500"]}), FAST_RETRY),
    # A config naming a model means openai (Hermes); naming none leaves `auto` (issue 40).
    "summarization.backend": ("extractive", backend, {"summarization": {"model": "m"}}),
    "summarization.endpoints": ([{"base_url": DEAD_URL, "model": "m"}], requests_seen(),
                                FAST_RETRY),
    "summarization.request_timeout": (0.3, requests_seen({"script": ["stall"],
                                                          "stall_seconds": 1.5}), FAST_RETRY),
    "summarization.max_input_tokens": (512, requests_seen(big=True), {}),
    "summarization.cache": (False, requests_seen(twice=True),
                            {"summarization": {"cache_path": "<tmp>/c.sqlite"}}),
    "summarization.cache_path": ("<tmp>/c.sqlite", requests_seen(twice=True), {}),
    "summarization.local_model": ("<tmp>/mine.gguf", local_model, {}),
    "summarization.summary_tolerance": (1.0, long_summary, {}),
    # (without the references line, which would name the file and pass the bar)
    "summarization.min_fidelity": (0.5, fidelity_seen,
                                   {"summarization": {"summary_references": "off"}}),
    "summarization.on_low_fidelity": ("uncompressed", fidelity_seen, {"summarization": {
        "min_fidelity": 0.5, "summary_references": "off"}}),
    "summarization.summary_references": ("off", fidelity_seen, {}),
    "summarization.max_invented": (0, invented_seen, {}),
    "summarization.allow_fallback": (True, row_outcome({"models": {"only-this"}}), FAST_RETRY),
    # A fallback: 3 (the gate), not 2 (no LLM summary at all, accepted by allow_fallback).
    "summarization.max_fallback_share": ("0%", exit_code({"faults": {"http500": 1.0}}), {
        "summarization": {"retry_delay": 0.01, "max_retries": 1, "allow_fallback": True},
        "compression": {"target_max_tokens": 100, "summary_target_tokens": 20}}),
    "summarization.breaker_failures": (1, breaker_rest, {}),
    "summarization.breaker_cooldown": (0.001, breaker_rest,
                                       {"summarization": {"breaker_failures": 1}}),
    "summarization.allow_insecure_http": (
        True, requests_seen(environ={"PROBE_KEY": "pk-1234567"}),
        {"summarization": {"base_url": "http://192.0.2.1:8000/v1", "api_key_env": "PROBE_KEY",
                           "request_timeout": 0.2, "max_retries": 1}}),
    "output.add_summary_notice": (False, compressed, {}),
    "output.summary_notice_text": ("\n\n(summarized)", compressed, {}),
    "output.output_suffix": ("_short", layout, {}),
    "output.format": ("parquet", layout, {}),
    "output.mode": ("windows", rows_written, {"compression": {
        "target_max_tokens": 100, "summary_target_tokens": 20}}),
    "processing.max_concurrent_requests": (1, requests_seen({"latency": 0.2}, n=4), {}),
    "processing.save_over_limit": (False, routed, {}),
    "processing.per_trajectory_timeout": (0.3, row_outcome({"script": ["stall"],
                                                            "stall_seconds": 1.5}), {}),
    "processing.batch_rows": (2, batches, {}),
    "processing.window_rows": (1, run, {}),
    "processing.window_mb": (1e-6, run, {}),
    "processing.checkpoint_rows": (1, routed, {}),
    "processing.checkpoint_seconds": (1e-9, routed, {}),
    "processing.engine": ("ray", engine_used, {}),
    "processing.ray_actors": (2, ray_pool, {"processing": {"engine": "ray"}}),
    "dataset.format": ("openai", dialect_view(VARIANT_ROW), {}),
    "dataset.messages": ("conversations", dialect_view(VARIANT_ROW),
                         {"dataset": VARIANT_BASE}),
    "dataset.role_tag": ("from", dialect_view(VARIANT_ROW), {"dataset": VARIANT_BASE}),
    "dataset.content_tag": ("value", dialect_view(VARIANT_ROW), {"dataset": VARIANT_BASE}),
    "dataset.user_tag": ("user", dialect_view(VARIANT_ROW), {"dataset": VARIANT_BASE}),
    "dataset.assistant_tag": ("assistant", dialect_view(VARIANT_ROW),
                              {"dataset": VARIANT_BASE}),
    "dataset.observation_tag": ("observation", dialect_view(VARIANT_ROW),
                                {"dataset": VARIANT_BASE}),
    "dataset.function_tag": ("function_call", dialect_view(VARIANT_ROW),
                             {"dataset": VARIANT_BASE}),
    "dataset.system_tag": ("me", dialect_view(VARIANT_ROW), {"dataset": VARIANT_BASE}),
    "dataset.system": ("sys", dialect_view(VARIANT_ROW), {"dataset": VARIANT_BASE}),
    "dataset.tools": ("functions", dialect_view(VARIANT_ROW), {"dataset": VARIANT_BASE}),
    "dataset.summary_role": ("assistant", dialect_view(VARIANT_ROW), {"dataset": VARIANT_BASE}),
    "metrics.enabled": (False, run, {}),
    "metrics.per_trajectory": (False, compressed, {}),
}
RUN_BASE = {"compression": {"target_max_tokens": 100, "summary_target_tokens": 20}}
for _key in ("processing.window_rows", "processing.window_mb", "metrics.enabled"):
    PROBES[_key] = (PROBES[_key][0], PROBES[_key][1], RUN_BASE)


def schema_keys() -> dict[str, str]:
    return {f"{section}.{key}": attr for section, keys in SECTIONS.items()
            for key, attr in keys.items()}


def _resolve(value: Any, tmp: Path) -> Any:
    if value == "<tok>":
        return _tokenizer_dir(tmp)
    if value == "<jinja>":
        path = tmp / "other.jinja"
        path.write_text("{% for m in messages %}<<{{ m.role }}>> {{ m.content }}\n{% endfor %}")
        return str(path)
    if isinstance(value, str) and value.startswith("<tmp>"):
        if value.endswith(".gguf"):
            (tmp / value[6:]).write_bytes(b"GGUF")
        return str(tmp / value[6:])
    if isinstance(value, dict):
        return {k: _resolve(v, tmp) for k, v in value.items()}
    return value


def test_every_key_is_probed_or_documented_as_ignored() -> None:
    keys = schema_keys()
    ignored = {_key_of(attr) for attr in IGNORED_KEYS}
    assert ignored <= set(keys)
    assert not ignored & set(PROBES), "an ignored key cannot also be probed"
    assert set(PROBES) | ignored == set(keys), (
        f"keys without a probe: {sorted(set(keys) - set(PROBES) - ignored)}; make each do "
        "something (and probe it here) or add it to IGNORED_KEYS and docs/configuration.md")
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    for key in ignored:  # in the manual's table of ignored keys, with why
        assert f"`{key}`" in page.split("## Ignored keys", 1)[1].split("\n## ", 1)[0], key


@pytest.mark.parametrize("key", sorted(PROBES))
def test_changing_the_key_changes_what_the_tool_does(key: str, tmp_path: Path) -> None:
    value, observe, base = PROBES[key]
    section, name = key.split(".", 1)
    base_dir, changed_dir = tmp_path / "base", tmp_path / "changed"
    outcomes = []
    for where, extra in ((base_dir, None), (changed_dir, value)):
        where.mkdir()
        data: dict[str, dict[str, Any]] = {s: _resolve(dict(v), tmp_path)
                                           for s, v in base.items()}
        if extra is not None:
            data.setdefault(section, {})[name] = _resolve(extra, tmp_path)
        cfg = CompressionConfig.from_dict(data)
        outcomes.append(observe(cfg, where))
    assert outcomes[0] != outcomes[1], f"{key}: {value!r} changed nothing: {outcomes[0]!r}"


# --- the ignored keys ------------------------------------------------------------------

IGNORED_YAML = ("processing:\n  num_workers: 8\n  skip_under_target: false\n"
                "metrics:\n  output_file: my_metrics.json\n")


def test_ignored_keys_set_to_other_values_warn_once_each_and_change_nothing(tmp_path):
    cfg = tmp_path / "hermes.yaml"
    cfg.write_text(IGNORED_YAML + "compression:\n  target_max_tokens: 100\n"
                   "  summary_target_tokens: 20\n")
    plain_cfg = tmp_path / "plain.yaml"
    plain_cfg.write_text("compression:\n  target_max_tokens: 100\n  summary_target_tokens: 20\n")
    src = write_jsonl(tmp_path / "in.jsonl", [
        sized_row("under", "SHGT", [10, 5, 5, 5]),
        sized_row("over", "SHGTGTGTGTGT", [10, 5, 5, 5, 40, 40, 40, 40, 5, 5, 5, 5])])
    common = ("--summarizer", "extractive", "--quiet")
    proc = run_cli("compress", str(src), "-o", str(tmp_path / "a.jsonl"),
                   "--config", str(cfg), *common)
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 3
    assert warnings[0].startswith("warning: processing.num_workers is 8 but has no effect: ")
    assert warnings[1].startswith(
        "warning: processing.skip_under_target is False but has no effect: ")
    assert warnings[2].startswith(
        "warning: metrics.output_file is 'my_metrics.json' but has no effect: ")
    plain = run_cli("compress", str(src), "-o", str(tmp_path / "b.jsonl"),
                    "--config", str(plain_cfg), *common)
    assert plain.returncode == 0 and "warning:" not in plain.stderr
    # The same rows (the one under the target unchanged: skip_under_target false did not
    # make it compressed), the same metrics file name; no my_metrics.json anywhere.
    out = (tmp_path / "a.jsonl").read_bytes()
    assert out == (tmp_path / "b.jsonl").read_bytes()
    under, over = (json.loads(line) for line in out.splitlines())
    assert "compression_metrics" not in under and over["compression_metrics"]["was_compressed"]
    assert (tmp_path / "a_metrics.json").exists() and not list(tmp_path.rglob("my_metrics*"))


def test_ignored_keys_at_their_defaults_say_nothing() -> None:
    defaults = CompressionConfig.from_dict({"processing": {"num_workers": 4,
                                                           "skip_under_target": True},
                                            "metrics": {"output_file":
                                                        "compression_metrics.json"}})
    assert defaults.ignored_settings() == []
    # The bundled configs load without a warning.
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        assert CompressionConfig.from_yaml(path).ignored_settings() == [], path


def test_the_python_api_lists_the_same_warnings() -> None:
    cfg = CompressionConfig(num_workers=2)
    [message] = cfg.ignored_settings()
    assert re.match(r"processing\.num_workers is 2 but has no effect: .*no worker", message)
