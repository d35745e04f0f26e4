"""A lean fixed-latency OpenAI chat-completions server for `bench.py` (raw asyncio).

    python scripts/lean_llm_server.py --latency 0.2   # prints {"port": N} then serves

The test server (`tests/fake_llm_server.py`, aiohttp) programs faults and keeps
statistics; on a 2-core machine its per-request CPU competes with the client being
measured. This one only parses HTTP/1.1 keep-alive requests, waits the latency with
``call_later`` (no task per request) and answers a fixed completion, so the harness
steals as little CPU as possible. ``GET /stats`` returns the number of completions.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
from typing import Any

import orjson

SUMMARY = ("The agent inspected the repository, ran the tests, read the failing "
           "module and patched the parser; the tests then passed.")


class _Server:
    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.completions = 0


class _Protocol(asyncio.Protocol):
    def __init__(self, server: _Server) -> None:
        self.server = server
        self.buffer = b""
        self.transport: asyncio.Transport | None = None
        self.loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end]
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4:end + 4 + length]
            self.buffer = self.buffer[end + 4 + length:]
            self._handle(head, body)

    def _handle(self, head: bytes, body: bytes) -> None:
        if head.startswith(b"GET /stats"):
            self._reply(orjson.dumps({"completions": self.server.completions}))
            return
        try:
            model = orjson.loads(body).get("model", "fake")
        except orjson.JSONDecodeError:
            model = "fake"
        payload = orjson.dumps({
            "id": "chatcmpl-lean", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": SUMMARY},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": len(body) // 4, "completion_tokens": 30,
                      "total_tokens": len(body) // 4 + 30},
        })
        self.server.completions += 1
        if self.server.latency:
            self.loop.call_later(self.server.latency, self._reply, payload)
        else:
            self._reply(payload)

    def _reply(self, payload: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload))

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def _serve(latency: float, port: int, lifetime: float) -> None:
    state = _Server(latency)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Protocol(state), "127.0.0.1", port, backlog=4096)
    sock: Any = server.sockets[0]
    print(json.dumps({"port": sock.getsockname()[1]}), flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=lifetime)
    server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--lifetime", type=float, default=3600.0)
    args = parser.parse_args()
    asyncio.run(_serve(args.latency, args.port, args.lifetime))


if __name__ == "__main__":
    main()
