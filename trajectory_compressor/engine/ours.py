"""Whether an existing file at a path the user named is one this tool wrote (§12).

A command that writes a file where the user says (`report --html`, `analyze --json`, a
batch export's `manifest.json` and request files) replaces an existing file there only
when it recognises it as its own: the report page by the marker it carries in its head,
the analysis by its shape, a manifest by its ``format``, a request file by the manifest
beside it listing it. Anything else (a dataset, another program's page, a link to a
file) is replaced only with ``--overwrite``. The file is read bounded: the first
`HEAD_BYTES` of a regular file, never a device or FIFO.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from ..core.errors import ConfigError
from ..formats import jsonio

# The marker every `report --html` page carries in its <head>.
HTML_MARKER = '<meta name="generator" content="trajectory-compressor report">'
# The manifest's ``format`` (`engine.batch`).
MANIFEST_FORMAT = "trajectory-compressor batch requests"
# Bytes of an existing file read to recognise it: the marker is in the first few hundred
# bytes of a page; an `analyze --json` file of many targets is a few hundred KiB.
HEAD_BYTES = 4 << 20
# Keys every `analyze --json` file has at its top level.
_ANALYSIS_KEYS = frozenset({"input", "summarizer", "rows", "rows_rejected", "tokens",
                            "histogram", "targets"})


def read_head(path: Path, limit: int = HEAD_BYTES) -> bytes | None:
    """The first ``limit`` bytes of ``path`` when it is a regular file (through a link),
    else None (missing, a device, FIFO or folder: never opened in a way that blocks)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, left = [], limit
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def is_report_page(path: Path) -> bool:
    """Whether ``path`` is a `report --html` page (its head carries `HTML_MARKER`)."""
    head = read_head(path, 4096)
    return head is not None and HTML_MARKER.encode() in head


def is_analysis(path: Path) -> bool:
    """Whether ``path`` is an `analyze --json` file: a JSON object with its keys, whole
    within `HEAD_BYTES`."""
    data = _json_object(path)
    return data is not None and data.keys() >= _ANALYSIS_KEYS


def is_manifest(path: Path) -> bool:
    """Whether ``path`` is a batch export's ``manifest.json``."""
    data = _json_object(path)
    return data is not None and data.get("format") == MANIFEST_FORMAT


def manifest_files(path: Path) -> set[str]:
    """The request files a batch manifest lists (none when it is not one)."""
    data = _json_object(path)
    if data is None or data.get("format") != MANIFEST_FORMAT:
        return set()
    files = data.get("files")
    return {str(f["name"]) for f in files if isinstance(f, dict) and "name" in f} \
        if isinstance(files, list) else set()


def refuse_foreign(path: Path, what: str, ours: Callable[[Path], bool], *,
                   overwrite: bool, flag: str = "--overwrite") -> None:
    """Raise `ConfigError` when ``path`` exists (a file, or a link to anything) and is
    not one this tool wrote (``ours``), unless ``overwrite``."""
    if overwrite or not os.path.lexists(path):
        return
    if not path.is_symlink() and ours(path):
        return
    kind = "a symbolic link" if path.is_symlink() else "a file"
    raise ConfigError(f"{path} (the {what}) already exists and is {kind} this tool did "
                      f"not write; nothing was written; pass {flag} to replace it, or "
                      "choose another name")


def _json_object(path: Path) -> dict | None:
    head = read_head(path, HEAD_BYTES + 1)
    if head is None or len(head) > HEAD_BYTES or not head.lstrip().startswith(b"{"):
        return None
    try:
        data = jsonio.loads(head)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
