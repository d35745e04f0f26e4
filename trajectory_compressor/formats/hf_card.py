"""The dataset card beside a Hugging Face dataset's output: which files are which split.

`datasets.load_dataset(FOLDER)` guesses splits from file names, and knows only its own
words for them: a split named ``holdout`` comes back inside ``train``, one named
``my_eval`` as ``test``. The output's shards are named ``<split>-NNNNN-of-NNNNN``
(`hf.shard_name`), so a ``README.md`` whose YAML header lists every split with its files
(the ``configs`` metadata `datasets` reads first) gives every split back by its name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from ..core.errors import ConfigError
from .registry import file_stem

CARD = "README.md"
MARK = "<!-- written by trajectory-compressor: the splits of this folder -->"
_SHARD = re.compile(r"(?P<split>\w+(?:\.\w+)*)-\d{5}-of-\d{5}")


def card_path(outputs: Iterable[Path]) -> Path | None:
    """Where the card goes: the one folder of outputs that are all split shards."""
    paths = list(outputs)
    folders = {p.parent for p in paths}
    if not paths or len(folders) != 1 or _splits(paths) is None:
        return None
    return folders.pop() / CARD


def dataset_card(outputs: Iterable[Path]) -> bytes:
    """The card: a YAML header with one ``data_files`` entry per split, then a line."""
    splits = _splits(list(outputs)) or []
    lines = ["---", "configs:", "- config_name: default", "  data_files:"]
    for split in splits:
        lines += [f"  - split: {split}", f"    path: {split}-*-of-*"]
    lines += ["---", MARK, ""]
    return "\n".join(lines).encode("utf-8")


def check_card(path: Path) -> None:
    """Refuse to replace a ``README.md`` this tool did not write."""
    try:
        text = path.read_bytes()[:4096]
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    if MARK.encode() not in text:
        raise ConfigError(f"{path} exists and was not written by trajectory-compressor; the "
                          "run writes the dataset card that lists the splits there: move it "
                          "or choose another output (-o)")


def _splits(paths: list[Path]) -> list[str] | None:
    found: dict[str, None] = {}
    for path in paths:
        match = _SHARD.fullmatch(file_stem(path))
        if match is None:
            return None
        found[match["split"]] = None
    return list(found)
