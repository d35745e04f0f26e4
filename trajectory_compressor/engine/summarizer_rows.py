"""Summarizer training rows (`--emit-summarizer-rows PATH`, §20): one JSON line per
summary a windows run made, so a team can fine-tune its own summarizer on its own data.

A row is the request the summarizer was sent for the turns the summary replaced (the
system instructions and the fenced transcript, exactly as `summarizers.prompt` builds
them) and the summary as the assistant's answer (without its ``[CONTEXT SUMMARY]:``
prefix), in the output's dialect: OpenAI ``messages``; Hermes ShareGPT
``conversations`` (system, human, gpt); a LLaMA-Factory ShareGPT row (human, gpt, and
the instructions in its ``system`` column). Each carries ``summarizer_row``: the source
row's id (text, or null), the window and the turns replaced — which is also how a later
run knows the file is its own to replace.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..core.conversation import Row
from ..core.errors import ConfigError
from ..core.summary import SummaryRequest, summary_body
from ..dialects.base import Dialect
from ..dialects.training import instruction_row
from ..summarizers.prompt import build_prompt

MARK = "summarizer_row"


def summarizer_row(request: SummaryRequest, summary_text: str, dialect: Dialect,
                   max_input_tokens: int, scrub: Any, source_id: str | None,
                   window: int) -> Row:
    """The training row of one summary (see the module's docstring)."""
    prompt = build_prompt(request, max_input_tokens, None, scrub=scrub)
    system, user = (str(m["content"]) for m in prompt.messages)
    answer = summary_body(summary_text)
    start = request.first_index
    mark = {MARK: {"source_id": source_id, "window": window,
                   "turns": {"start_idx": start, "end_idx": start + len(request.turns)}}}
    ident = {} if source_id is None else {"id": f"{source_id}#w{window}-summary"}
    return {**ident, **instruction_row(dialect, system, user, answer), **mark}


def check_target(path: Path, overwrite: bool, resuming: bool) -> None:
    """Refuse to replace an existing file this feature did not write (its first line is
    not a summarizer row), unless ``overwrite``; a resumed run continues its own."""
    if resuming or overwrite or not path.exists():
        return
    if not path.is_file():
        raise ConfigError(f"--emit-summarizer-rows {path} is not a regular file")
    try:
        with path.open("rb") as f:
            first = f.readline()
        own = not first.strip() or MARK in json.loads(first)
    except (OSError, ValueError, TypeError):
        own = False
    if not own:
        raise ConfigError(f"--emit-summarizer-rows {path} exists and was not written by "
                          "--emit-summarizer-rows; name another file, or pass --overwrite "
                          "to replace it")
