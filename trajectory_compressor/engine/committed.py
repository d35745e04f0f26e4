"""What a run committed, recorded in its metrics file, and checked again by `report` and
`validate` (issue 36 item 6): a metrics file beside an output may be another run's, and an
output may have been cut, extended or edited after its run wrote it.

At commit the metrics file's ``committed`` section records each output file's size and
SHA-256 (``files``, by resolved path) and how many rows were written (``rows``). The
checks compare the output as it is now with that record and with the run's ``outputs``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..core.counted import counted

_CHUNK = 1 << 20


def file_digest(path: Path) -> dict[str, Any]:
    """``{"bytes", "sha256"}`` of a file, or of a folder's files (names and contents, in
    name order)."""
    digest = hashlib.sha256()
    size = 0
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for file in files:
        if file != path:
            digest.update(str(file.relative_to(path)).encode("utf-8", "surrogateescape")
                          + b"\0")
        with file.open("rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
                size += len(chunk)
    return {"bytes": size, "sha256": digest.hexdigest()}


def committed_record(outputs: Iterable[Path], rows: int) -> dict[str, Any]:
    """The metrics file's ``committed`` section for outputs just committed."""
    return {"rows": rows,
            "files": {str(out.resolve()): file_digest(out) for out in outputs if out.exists()}}


def _files_of(output: Path, recorded: dict[str, Any]) -> dict[str, Any]:
    """The recorded entries that are ``output`` itself or lie in it (a folder output)."""
    root = output.resolve()
    return {name: entry for name, entry in recorded.items()
            if Path(name) == root or root in Path(name).parents}


def sidecar_disagreements(output: Path, metrics: dict[str, Any] | None,
                          metrics_path: Path) -> list[str]:
    """What the metrics file beside ``output`` says that the output contradicts: it names
    other outputs (another run's), or an output file changed since its run committed it.
    Row counts are `row_count_disagreement`'s (they need the rows read)."""
    if metrics is None:
        return []
    found: list[str] = []
    run = metrics.get("run")
    outputs = run.get("outputs") if isinstance(run, dict) else None
    if isinstance(outputs, dict) and outputs and not _files_of(output, outputs):
        other = ", ".join(sorted(outputs)[:2]) + (", ..." if len(outputs) > 2 else "")
        found.append(f"the metrics file {metrics_path.name} beside it is another run's: it "
                     f"records the outputs {other}, not {output}; its figures are not this "
                     "output's")
        return found
    committed = metrics.get("committed")
    files = committed.get("files") if isinstance(committed, dict) else None
    if not isinstance(files, dict):
        return found
    for name, entry in sorted(_files_of(output, files).items()):
        path = Path(name)
        if not path.exists():
            found.append(f"{name} was committed by the run recorded in {metrics_path.name} "
                         "but is gone")
            continue
        if not isinstance(entry, dict):
            continue
        now = file_digest(path)
        if now.get("sha256") != entry.get("sha256"):
            found.append(f"{path.name} changed since its run committed it ({entry.get('bytes')}"
                         f" bytes then, {now['bytes']} now; SHA-256 differs from the one "
                         f"recorded in {metrics_path.name}): edited, cut or another run's "
                         "output")
    return found


def row_count_disagreement(rows: int, metrics: dict[str, Any] | None,
                           metrics_path: Path) -> str | None:
    """A sentence when ``rows`` (read from the output now) is not what the run wrote."""
    if metrics is None:
        return None
    committed = metrics.get("committed")
    written = committed.get("rows") if isinstance(committed, dict) else None
    if not isinstance(written, int):
        written = (metrics.get("summary") or {}).get("total_trajectories")
    if not isinstance(written, int) or written == rows:
        return None
    if rows < written:
        return (f"{counted(written - rows, 'row')} fewer than its run wrote "
                f"({rows:,} now, {written:,} recorded in {metrics_path.name}): rows were "
                "dropped")
    return (f"{counted(rows - written, 'row')} more than its run wrote "
            f"({rows:,} now, {written:,} recorded in {metrics_path.name}): rows were "
            "duplicated or added")

