"""Every prompt that leaves the process goes through the same redaction (issue 40 item 7):
the first try, retries after a 500, shrunk retries after a context-length 400, fidelity
repair requests and batch export lines. Each kind is sent (or written) for rows holding a
secret of every supported pattern and the run's own key value; the bytes the loopback
server received (and the batch files) are searched for every one of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_helpers import invoke_cli
from tests.fake_llm_server import FakeLLMServer, lossy_reply

KEY_ENV, KEY = "TC_REDACTION_KEY", "cfgkey-7Hq2Lm9Xw4Rt8Zp1"
# Each planted secret, and the part of it that must never be seen.
SECRETS = {
    "ghp_": ("ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8", "A1b2C3d4E5f6G7h8I9j0"),
    "ghr_": ("ghr_Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2", "Z9y8X7w6V5u4T3s2R1q0"),
    "sk-": ("sk-proj-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2", "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2"),
    "aws access key": ("AKIAQ3EGRTQ7ZD5XK2PM", "Q3EGRTQ7ZD5XK2PM"),
    "aws secret key": ("aws_secret_access_key=wJalrXUtnFEMIK7MDENGbPxRfiCYzzKEYq9",
                       "wJalrXUtnFEMIK7MDENGbPxRfiCYzzKEYq9"),
    "jwt": ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5NXgL0n3",
            "dozjgNryP4J3jVmNHl0w5NXgL0n3"),
    "private key": ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAzQ8privatebitsQx\n"
                    "-----END RSA PRIVATE KEY-----", "MIIEowIBAAKCAQEAzQ8privatebitsQx"),
    "url userinfo": ("https://deploy:S3cr3tPassw0rdQ@git.example.com/repo.git",
                     "S3cr3tPassw0rdQ"),
    "the run's key": (KEY, KEY),
}
FILLER = " ".join(f"step{i} compiled module_{i} in {i % 7} seconds" for i in range(30))


def _rows(n: int = 2) -> list[dict]:
    """Hermes rows whose middle (summarized) tool outputs hold every secret."""
    rows = []
    for k in range(n):
        turns = [{"from": "system", "value": "You are an agent."},
                 {"from": "human", "value": f"Deploy the service, take {k}."},
                 {"from": "gpt", "value": "Starting."},
                 {"from": "tool", "value": "ready"}]
        for name, (secret, _) in SECRETS.items():
            turns += [{"from": "gpt", "value": f"Checking the {name} ({k})."},
                      # At the head of the output: a long turn keeps its head in a prompt.
                      {"from": "tool", "value": f"found {secret} in the config\n{FILLER}"}]
        turns += [{"from": "gpt", "value": "Almost done."}, {"from": "tool", "value": "ok"},
                  {"from": "gpt", "value": "Deployed."}, {"from": "human", "value": "Thanks."}]
        rows.append({"id": f"row-{k}", "conversations": turns})
    return rows


def _input(tmp_path: Path) -> Path:
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in _rows()), encoding="utf-8")
    return src


COMMON = ("--target-max-tokens", "700", "--summary-target-tokens", "60", "--no-cache",
          "-q", "--no-config", "--model", "m", "--api-key-env", KEY_ENV)


def _sent_redacted(blobs: list[bytes], every: bool = True) -> None:
    """Each kind of secret reached what was sent, redacted: the line that held it is
    there with the marker in its place (so a missing redaction would show)."""
    text = b"\n".join(blobs)
    kept = {"aws secret key": "aws_secret_access_key=", "url userinfo": "https://"}
    seen = [name for name in SECRETS
            if f"found {kept.get(name, '')}[REDACTED]".encode() in text]
    assert seen == list(SECRETS) if every else seen, seen


def _leaks(blobs: list[bytes]) -> dict[str, int]:
    """How many of ``blobs`` hold each secret (JSON-escaped too: "\\n" in a key block)."""
    found = {}
    for name, (_, needle) in SECRETS.items():
        n = sum(needle.encode() in blob for blob in blobs)
        if n:
            found[name] = n
    return found


def _run(tmp_path: Path, server: FakeLLMServer, *flags: str):
    result = invoke_cli("compress", str(_input(tmp_path)), "-o", str(tmp_path / "out.jsonl"),
                        "--base-url", server.url, *COMMON, *flags, env={KEY_ENV: KEY})
    assert result.returncode in (0, 1), result.stderr
    return result


def test_the_planted_secrets_reach_the_transcript_unredacted_without_scrubbing():
    """The needles are in what the summarizer is given (so the tests below can fail)."""
    text = json.dumps(_rows(1))
    assert all(needle in text for _, needle in SECRETS.values())


@pytest.mark.parametrize("kind, server_args, flags", [
    ("first try", {}, ()),
    ("retries after a 500", {"script": ["http500", "http500"]}, ("--allow-fallback",)),
    ("repair requests", {"reply": lossy_reply(repairs=True)},
     ("--min-fidelity", "1.0", "--on-low-fidelity", "keep")),
], ids=["first", "retries", "repair"])
def test_every_request_body_is_redacted(tmp_path, kind, server_args, flags):
    with FakeLLMServer(**server_args).in_thread() as server:
        _run(tmp_path, server, *flags)
    assert len(server.bodies) >= 2, kind
    if kind == "repair requests":
        repairs = [b for b in server.bodies if b"dropped" in b or b"facts" in b]
        assert repairs, "no repair request was sent"
    assert _leaks(server.bodies) == {}, kind
    _sent_redacted(server.bodies)
    # Nor the summaries written (the rows keep their other turns as they were: data).
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    summaries = [t["value"].encode() for r in rows for t in r["conversations"]
                 if "[CONTEXT SUMMARY]" in t["value"]]
    assert summaries
    assert _leaks(summaries) == {}


def test_a_shrunk_retry_after_a_context_length_error_is_redacted(tmp_path):
    (tmp_path / "probe").mkdir()
    with FakeLLMServer().in_thread() as probe:
        _run(tmp_path / "probe", probe)
    first = max(len(b) for b in probe.bodies)
    # A limit the first prompt is over (fake tokens are 4 characters) and a halved one fits.
    with FakeLLMServer(context_limit=int(first / 4 * 0.7)).in_thread() as server:
        _run(tmp_path, server)
    assert server.outcomes["context"] >= 1, server.outcomes
    assert server.outcomes["ok"] >= 1, server.outcomes
    assert len(server.bodies) > server.outcomes["context"]  # the shrunk ones were sent too
    shrunk = [b for b in server.bodies if len(b) < first * 0.9]
    assert shrunk
    assert _leaks(shrunk) == {}
    _sent_redacted(shrunk, every=False)  # a shrunk transcript keeps its head and tail


def test_batch_export_lines_are_redacted(tmp_path):
    folder = tmp_path / "batch"
    result = invoke_cli("compress", str(_input(tmp_path)), "-o", str(tmp_path / "out.jsonl"),
                        "--summarizer", "batch", "--batch-dir", str(folder), *COMMON,
                        env={KEY_ENV: KEY})
    assert result.returncode == 0, result.stderr
    files = [p.read_bytes() for p in folder.rglob("*") if p.is_file()]
    assert _leaks(files) == {}
    _sent_redacted(files)
