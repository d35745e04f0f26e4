"""The local backend's sizing and notices, and `.env` reading, unit by unit (issue 26,
item 5).

From summarizers/local.py's documentation (README "Sizing"): the server's context is the
bounded input three times over (headroom) plus the reply limit, rounded up to a multiple
of 512; a server layout is a value; the started backend's pool tells its notices (an
endpoint's first failure of a kind) to the backend's ``notify``. From dotenv.py: a `.env`
file is read and its descriptor closed, a regular file or not.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tests.fake_llm_server import FakeLLMServer
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.summary import SummaryRequest
from trajectory_compressor.summarizers import local as local_module
from trajectory_compressor.summarizers.dotenv import read_dotenv
from trajectory_compressor.summarizers.local import (
    LOCAL_STYLE,
    LocalSummarizer,
    ServerLayout,
    context_size,
    plan_servers,
)
from trajectory_compressor.summarizers.local_server import LocalServer
from trajectory_compressor.summarizers.prompt import FULL

# -- sizing ----------------------------------------------------------------------------------


def test_the_context_is_the_next_multiple_of_512_at_or_over_what_is_needed():
    reply = 320  # LOCAL_STYLE's fixed completion limit (prompt.COMPACT: max_tokens=320)
    assert LOCAL_STYLE.completion_limit(0) == reply
    # 3 x 1602 + 320 = 5126, just over 10 x 512 = 5120: the next multiple is 5632.
    assert context_size(1602) == 5632
    for bound in range(1, 3000, 7):
        needed = 3 * bound + reply
        n_ctx = context_size(bound)
        assert n_ctx % 512 == 0 and needed <= n_ctx < needed + 512, bound


def test_a_local_context_needs_a_style_with_a_fixed_reply_limit():
    """One context serves every request: a reply limit that follows each target is refused."""
    assert FULL.max_tokens is None
    with pytest.raises(ValueError, match="fixed max_tokens"):
        context_size(1024, FULL)
    fixed = dataclasses.replace(FULL, max_tokens=100)
    assert context_size(1024, fixed) == 3584  # 3 x 1024 + 100 = 3172: 7 x 512
    assert context_size(1024, dataclasses.replace(FULL, max_tokens=0)) == 3072


def test_a_server_layout_is_a_value():
    layout = plan_servers(8)
    assert layout == ServerLayout(2, 4)
    assert hash(layout) == hash(ServerLayout(2, 4))
    with pytest.raises(dataclasses.FrozenInstanceError):
        layout.servers = 3  # type: ignore[misc]


# -- the started backend's notices -------------------------------------------------------------

class _InProcessServer(LocalServer):
    """A `LocalServer` answering from a fake OpenAI server in this process (as in
    test_kills4_summarizers.py): the first one made fails its first reply."""

    made: ClassVar[list[_InProcessServer]] = []

    def __init__(self, model: Path, **sizing: Any) -> None:
        super().__init__(model, **sizing)
        script = ["http500"] if not self.made else []
        self.fake = FakeLLMServer(script=script)
        self.made.append(self)

    async def start(self) -> None:
        await self.fake.start()
        self.port = self.fake.port

    def alive(self) -> bool:
        return True


TURNS = [{"from": "human", "value": "List the files of the project, please."},
         {"from": "gpt", "value": "I will run ls in the project folder now."}]


@pytest.mark.quick  # names LocalSummarizer, but its server is an in-process fake
def test_the_pools_notices_go_to_the_backends_notify(tmp_path, monkeypatch):
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF")
    monkeypatch.setattr(local_module, "find_model", lambda name: model)
    monkeypatch.setattr(local_module, "LocalServer", _InProcessServer)
    monkeypatch.setattr(_InProcessServer, "made", [])
    config = CompressionConfig(summarizer="local", local_model="tiny.gguf", retry_delay=0.01,
                               cache_enabled=False)
    backend = LocalSummarizer(config, cpus=1)
    notices: list[str] = []
    backend.notify = notices.append

    async def main() -> str:
        await backend.start()
        try:
            return (await backend.summarize(SummaryRequest(TURNS, 0, 100))).text
        finally:
            await backend.aclose()
            for server in _InProcessServer.made:
                await server.fake.stop()

    assert asyncio.run(main())  # the retry answers
    assert len(notices) == 1, notices  # the first failure of its kind, said once
    assert "500" in notices[0]


# -- .env files --------------------------------------------------------------------------------

def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc (Linux)")
def test_reading_a_dotenv_file_leaves_no_descriptor_open(tmp_path):
    path = tmp_path / ".env"
    path.write_text("OPENAI_API_KEY=sk-test\n")
    before = _open_descriptors()
    for _ in range(5):
        assert read_dotenv(path) == {"OPENAI_API_KEY": "sk-test"}
    assert read_dotenv(tmp_path) == {}  # a folder: not a regular file
    assert _open_descriptors() == before
