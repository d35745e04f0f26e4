from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# A suite started in the background by a non-interactive shell (`cmd &`) inherits SIGINT
# ignored, and so would every CLI it starts, which then cannot see the Ctrl-C the
# interruption tests send. A handled signal is reset to the default in a child.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

from trajectory_compressor.counting.tokens import TokenCounter  # noqa: E402

SAMPLES = ROOT / "data_samples"


@pytest.fixture(scope="session")
def counter() -> TokenCounter:
    """The real default tokenizer (bundled DeepSeek V4 files)."""
    return TokenCounter.load()


@pytest.fixture(scope="session")
def sample_jsonl() -> Path:
    return SAMPLES / "trajectories.jsonl"


def turns_of(spec: str, size: int = 10) -> list[dict]:
    """Turns from a compact role string: S=system H=human G=gpt T=tool."""
    roles = {"S": "system", "H": "human", "G": "gpt", "T": "tool"}
    return [{"from": roles[c], "value": f"{roles[c]} {i} " + "word " * size}
            for i, c in enumerate(spec)]
