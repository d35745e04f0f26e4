"""A reversed or base64 echo of the configured key is redacted like the key (issue 36).

The expected encodings come from the stdlib's base64 on strings built here, the key
placed at each of the three offsets a 3-byte group allows."""

from __future__ import annotations

import base64
import json

import pytest

from tests.cli_helpers import read_jsonl
from tests.fake_llm_server import FakeLLMServer
from tests.test_loud_failures import compress, config, three_rows
from trajectory_compressor.core.redact import REDACTED, Scrubber

KEYS = ["sk-loud-7c1e9a4b2d8f6e0a3b5cSECRET",   # 34 characters
        "sk-proj-Zq81mX0pLk2vB7nYw4tR",          # 28: another length mod 3
        "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"]


def b64(text: str, urlsafe: bool = False) -> str:
    encode = base64.urlsafe_b64encode if urlsafe else base64.b64encode
    return encode(text.encode()).decode()


@pytest.mark.parametrize("key", KEYS)
def test_the_reversed_key_is_redacted(key):
    scrub = Scrubber([key])
    text = f"the token read backwards is {key[::-1]} (done)"
    assert scrub.literal(text) == f"the token read backwards is {REDACTED} (done)"
    assert key[::-1] not in scrub(text)


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("prefix", ["", "u", "us", "user:", "admin:", "Bearer "])
@pytest.mark.parametrize("urlsafe", [False, True])
def test_the_key_inside_any_base64_payload_is_redacted(key, prefix, urlsafe):
    payload = b64(f"{prefix}{key}", urlsafe)
    scrub = Scrubber([key])
    out = scrub.literal(f"Authorization: Basic {payload}\n")
    assert REDACTED in out
    # What is left of the payload is the prefix's own encoding and at most one group
    # (4 characters, 2 of the key's bytes) on each side: never the key.
    kept = out.removeprefix("Authorization: Basic ").rstrip("\n").split(REDACTED)
    assert len(kept) == 2, out
    assert len(kept[0]) <= len(b64(prefix)) + 4 and len(kept[1]) <= 4, out


def test_a_base64_json_body_holding_the_key_is_redacted():
    key = KEYS[0]
    body = b64(json.dumps({"model": "m", "api_key": key, "n": 1}))
    assert Scrubber([key]).literal(f"payload={body}").count(REDACTED) == 1


def test_near_misses_stay():
    key = KEYS[0]
    scrub = Scrubber([key])
    # Another key of the same shape (one sharing most of the key's characters is the key
    # leaked, and is redacted: its base64 shares the key's).
    other = "sk-loud-0a9b8c7d6e5f4a3b2c1dOTHERS"
    for text in (b64(other), other[::-1], b64("hello world, nothing secret here")):
        assert scrub.literal(text) == text


def test_a_model_echoing_the_key_reversed_and_encoded_writes_neither(tmp_path, sample_jsonl):
    from tests.test_loud_failures import KEY
    source, out = three_rows(sample_jsonl, tmp_path), tmp_path / "out.jsonl"

    def reply(_data):
        return (f"The agent fixed the bug. Key backwards {KEY[::-1]}; encoded "
                f"{b64('user:' + KEY)} and {b64(KEY, urlsafe=True)}.")

    with FakeLLMServer(reply=reply).in_thread() as server:
        proc = compress(source, out, config(tmp_path), server.url, "--model", "m", "--quiet")
    assert proc.returncode == 0, proc.stderr
    written = out.read_text()
    for form in (KEY[::-1], b64("user:" + KEY)[8:-8], b64(KEY, urlsafe=True)[4:-4]):
        assert form not in written
    summaries = [t["value"] for r in read_jsonl(out) for t in r["conversations"]
                 if "Key backwards" in t["value"]]
    assert len(summaries) == 3 and all(s.count(REDACTED) == 3 for s in summaries)
