"""What bounded parsing of turn text costs (issue 36): `json.loads` against
`core.json_text.loads` (the nesting measured first) on every tool output of a corpus
that parses as JSON, and on the adversarial 100,000 nested ``[``.

    PYTHONPATH=. python scripts/bench_json_text.py /work/realdata/sweagent.jsonl --runs 3

Prints the corpus's JSON tool outputs (count, MB), the median time of each parser over
all of them, and the ratio. Reads OpenAI ``messages`` and ShareGPT ``conversations``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from pathlib import Path

from trajectory_compressor.core import json_text


def tool_texts(path: Path) -> list[str]:
    texts = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            for turn in row.get("messages") or row.get("conversations") or []:
                value = turn.get("content", turn.get("value"))
                if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
                    texts.append(value.strip())
    return texts


def timed(parse, texts: list[str]) -> float:
    start = time.perf_counter()
    for text in texts:
        with contextlib.suppress(ValueError, RecursionError):
            parse(text)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    texts = tool_texts(args.corpus)
    # Tool outputs that look like JSON, and the same texts wrapped 200 deep (over the
    # bound, so the full scan runs and refuses them).
    deep = ["[" * 200 + t + "]" * 200 for t in texts]
    # One large document with many brackets (the slow path: more than MAX_DEPTH of them).
    big = [json.dumps([{"k": i, "v": "x y z" * 3, "l": [1, 2, 3]} for i in range(20000)])]
    # The same with brackets inside its strings (the quick filter cannot settle it).
    odd = [json.dumps([{"k": i, "v": 'x"[' * 3, "l": [1, 2, 3]} for i in range(20000)])]
    mb = sum(len(t) for t in texts) / 1e6
    print(f"{len(texts)} tool outputs that start like JSON, {mb:.1f} MB")
    for name, corpus in (("as written", texts), ("nested 200 deep", deep),
                         ("one 1.3 MB doc", big), ("same, [ in strings", odd)):
        plain = statistics.median(timed(json.loads, corpus) for _ in range(args.runs))
        bounded = statistics.median(timed(json_text.loads, corpus) for _ in range(args.runs))
        print(f"{name:16} json.loads {plain:.3f} s  json_text.loads {bounded:.3f} s  "
              f"ratio {bounded / plain:.2f}")
    adversarial = "[" * 100_000
    start = time.perf_counter()
    for _ in range(10):
        assert json_text.too_deep(adversarial)
    print(f"100,000 nested [: refused in {(time.perf_counter() - start) / 10 * 1e3:.1f} ms "
          "(json.loads: RecursionError)")


if __name__ == "__main__":
    main()
