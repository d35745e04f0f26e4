"""Which tokenizer a run counts with: its name, a hash of its files, the counting mode and
the chat template. Resumes and the summary cache refuse to mix runs that differ in it."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from ..core.config import BUNDLED_TOKENIZER, CompressionConfig
from .tokens import bundled_tokenizer_dir


def tokenizer_identity(config: CompressionConfig) -> dict[str, Any]:
    """The tokenizer a run counts with (its name and a hash of its files), the counting
    mode and the template: what `--resume` and the summary cache must not mix."""
    folder = bundled_tokenizer_dir() if config.tokenizer_name == BUNDLED_TOKENIZER \
        else Path(config.tokenizer_name)
    digest = hashlib.sha256()
    if folder.is_dir():
        for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model"):
            path = folder / name
            if path.is_file():
                digest.update(name.encode() + b"\0" + path.read_bytes())
    else:
        digest.update(config.tokenizer_name.encode())  # a hub name from the local cache
    identity: dict[str, Any] = {"name": config.tokenizer_name,
                                "files_sha256": digest.hexdigest()[:16],
                                "counting": config.token_counting}
    if config.token_counting == "chat_template":
        if config.chat_template:
            text = Path(config.chat_template).read_bytes()
            identity["template_sha256"] = hashlib.sha256(text).hexdigest()[:16]
        else:
            identity["template_sha256"] = "tokenizer"
    return identity
