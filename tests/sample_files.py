"""The bundled samples (`data_samples/`), cut to their first rows for the tests that walk
every dialect and container but do not need every row.

The Hermes samples (`trajectories.jsonl` and `.parquet`) hold 50 rows of about 25,000
tokens each: five times the other samples, and most of a matrix test's time. Their first
ten rows still fall on both sides of the targets the tests use (1,880 to 51,627 tokens).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

SAMPLES = Path(__file__).resolve().parent.parent / "data_samples"


def sample_head(name: str, folder: Path, rows: int = 10) -> Path:
    """``folder/name``: the bundled sample ``name`` cut to its first ``rows`` rows, in its
    own container (JSONL lines as they are, a `.json` array, a Parquet table with the
    sample's schema)."""
    src, dst = SAMPLES / name, folder / name
    if name.endswith(".parquet"):
        pq.write_table(pq.read_table(src).slice(0, rows), dst)
    elif name.endswith(".json"):
        dst.write_text(json.dumps(json.loads(src.read_text(encoding="utf-8"))[:rows],
                                  ensure_ascii=False, indent=1), encoding="utf-8")
    else:
        lines = src.read_text(encoding="utf-8").splitlines(keepends=True)
        dst.write_text("".join(lines[:rows]), encoding="utf-8")
    return dst
