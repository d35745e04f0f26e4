"""Row ↔ conversation: the only code that knows how a row spells its turns.

`detect` picks a file's dialect from its first rows by majority, unless the config names
one, and checks every later row against it (`misfit`). What a row looks like:
- a ``messages`` list of ``{"role", ...}`` objects: OpenAI ``messages``;
- a ``conversations`` list whose roles are all Hermes' (system/human/gpt/tool) and no
  ``system``/``tools`` column beside it: Hermes ShareGPT, taken as it is;
- any other ``conversations`` list (``user``/``assistant``, ``function_call``,
  ``observation``, a system or tools column): a ShareGPT variant (LLaMA-Factory).
A YAML ``dataset`` section names the columns and tags of a custom dataset, as
LLaMA-Factory's ``dataset_info`` does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from functools import partial
from itertools import islice
from typing import Any

from ..core.config import CompressionConfig
from ..core.conversation import Trajectory
from .base import Dialect
from .messages import Messages
from .sharegpt import SHAREGPT, ShareGPT, ShareGPTTags, ShareGPTVariant

# Rows that decide a file's dialect: its first DETECT_ROWS rows that look like one (an
# unreadable line, or a row of no dialect, does not vote), among its first DETECT_SCAN.
DETECT_ROWS = 32
DETECT_SCAN = 10_000
# Tags only a ShareGPT variant uses; a Hermes file with another unknown role stays Hermes
# (and that row is rejected), so one stray row cannot change how the others are planned.
VARIANT_TAGS = frozenset({"user", "assistant", "function_call", "observation"})

__all__ = ["DETECT_ROWS", "DETECT_SCAN", "Dialect", "detect", "dialect_for", "misfit", "row_check",
           "row_kind", "row_turns"]


def dialect_for(config: CompressionConfig, name: str) -> Dialect:
    """The dialect called ``name`` (sharegpt, sharegpt-variant, openai), with the columns
    and tags the config's ``dataset`` section names."""
    if name == "openai":
        return Messages(column=config.dataset_messages or "messages",
                        tools=config.dataset_tools or "tools",
                        summary_role=config.summary_role or "user")
    if name == "sharegpt-variant" or _custom_tags(config):
        defaults = ShareGPTTags()

        def tags(value: str | None, default: tuple[str, ...]) -> tuple[str, ...]:
            return (value, *[d for d in default if d != value]) if value else default

        return ShareGPTVariant(ShareGPTTags(
            messages=config.dataset_messages or defaults.messages,
            role_tag=config.dataset_role_tag or defaults.role_tag,
            content_tag=config.dataset_content_tag or defaults.content_tag,
            user_tag=tags(config.summary_role or config.dataset_user_tag, defaults.user_tag),
            assistant_tag=tags(config.dataset_assistant_tag, defaults.assistant_tag),
            observation_tag=tags(config.dataset_observation_tag, defaults.observation_tag),
            function_tag=tags(config.dataset_function_tag, defaults.function_tag),
            system_tag=tags(config.dataset_system_tag, defaults.system_tag),
            system=config.dataset_system or defaults.system,
            tools=config.dataset_tools or defaults.tools,
        ))
    return SHAREGPT


def detect(rows: Iterable[Any], config: CompressionConfig) -> Dialect:
    """The dialect of a file whose first rows are ``rows`` (``dataset.format`` wins).

    Decided by majority: each row votes for the dialect it looks like (`row_kind`), so
    one odd row never decides the file. A dialect decided this way carries a row check
    (`row_check`): every row of the file that plainly belongs to another dialect is then
    rejected with that reason instead of being read in the file's dialect.
    """
    if config.dataset_format != "auto":
        return dialect_for(config, config.dataset_format)
    if _custom_tags(config):
        return dialect_for(config, "sharegpt-variant")
    # Rows of no dialect do not vote: 40 broken rows before the first good one must not
    # leave the file to the default (whose row check would then reject every good row).
    kinds = list(islice((kind for row in rows
                         if (kind := row_kind(row, config.dataset_messages)) is not None),
                        DETECT_ROWS))
    # First messages against conversations; then, among conversations, rows that fit
    # both ShareGPT dialects vote only when no row is plainly one of them.
    family = Counter(k == "openai" for k in kinds).most_common(1)
    if family and family[0][0]:
        name = "openai"
    else:
        shared = [k for k in kinds if k != "openai"]
        votes = (Counter(k for k in shared if k in _NAMES)
                 or Counter(_VOTE[k] for k in shared))
        name = votes.most_common(1)[0][0] if votes else "sharegpt"
    dialect = ShareGPT() if name == "sharegpt" else dialect_for(config, name)
    dialect.row_check = partial(misfit, dialect=name,  # type: ignore[attr-defined]
                                column=config.dataset_messages)
    return dialect


def row_check(dialect: Dialect) -> Callable[[Any], str | None] | None:
    """The row check `detect` gave ``dialect`` (None: the dialect was named, not guessed)."""
    return getattr(dialect, "row_check", None)


# Where a row that fits both ShareGPT dialects (`row_kind`) votes, when it votes.
_VOTE = {"sharegpt-columns": "sharegpt-variant", "sharegpt-plain": "sharegpt"}
_NAMES = {"openai": "OpenAI messages (a 'messages' list of role objects)",
          "sharegpt-variant": "LLaMA-Factory ShareGPT (a user/assistant/function_call/"
                              "observation role)",
          "sharegpt": "Hermes ShareGPT (a 'tool' turn and only system/human/gpt/tool roles)"}
# How `misfit` names a row's kind: the dialects, and the kinds both ShareGPT dialects share.
_KINDS = {**_NAMES,
          "sharegpt-columns": "ShareGPT (a 'conversations' list, with system/tools columns)",
          "sharegpt-plain": "ShareGPT (a 'conversations' list of from/value turns)"}
# Row kinds each file dialect reads as they are meant; others are rejected.
_FITS = {"openai": {"openai"},
         "sharegpt-variant": {"sharegpt-variant", "sharegpt-columns", "sharegpt-plain"},
         "sharegpt": {"sharegpt", "sharegpt-columns", "sharegpt-plain"}}


def row_kind(row: Any, column: str | None = None) -> str | None:
    """The dialect one row looks like: ``openai``, ``sharegpt-variant`` (a variant role),
    ``sharegpt`` (Hermes: a ``tool`` turn), ``sharegpt-columns`` (only roles both
    ShareGPT dialects share, with a ``system``/``tools`` column), ``sharegpt-plain`` (the
    same without those columns), or None (neither: the row's own checks say why)."""
    if not isinstance(row, dict):
        return None
    turns = row.get(column or "conversations")
    messages = row.get(column or "messages")
    # An empty 'messages' list beside a conversation is not a messages row.
    if (isinstance(messages, list) and (messages or not isinstance(turns, list))
            and all(isinstance(m, dict) and "role" in m for m in messages)):
        return "openai"
    if not isinstance(turns, list):
        return None
    # Only text roles vote: a list or object as a role (unhashable) is that row's reject,
    # said by its dialect's checks, never an error of the vote.
    roles = {role for t in turns if isinstance(t, dict) and isinstance(role := t.get("from"), str)}
    if roles & VARIANT_TAGS:
        return "sharegpt-variant"
    if "tool" in roles:
        return "sharegpt"
    if any(row.get(key) is not None for key in ("system", "tools")):
        return "sharegpt-columns"
    return "sharegpt-plain"


def misfit(row: Any, dialect: str, column: str | None = None) -> str | None:
    """Why ``row`` does not belong in a file detected as ``dialect`` (None: it does)."""
    kind = row_kind(row, column)
    if kind is None or kind in _FITS[dialect]:
        return None
    return (f"this row is {_KINDS[kind]}, but its file was detected as {_NAMES[dialect]} "
            f"by the majority of its first {DETECT_ROWS} rows of a known dialect; split "
            "mixed files, or name the dialect with --format")


def row_turns(row: Any, config: CompressionConfig) -> Trajectory:
    """The turns of one row of any dialect, detected from the row alone (``dataset.format``
    wins): for commands that read rows one by one, such as `report`. `RowError` when the
    row cannot be read."""
    return detect([row], config).turns(row)


def _custom_tags(config: CompressionConfig) -> bool:
    return any(value is not None for value in (
        config.dataset_role_tag, config.dataset_content_tag, config.dataset_user_tag,
        config.dataset_assistant_tag, config.dataset_observation_tag,
        config.dataset_function_tag, config.dataset_system_tag, config.dataset_system,
    ))
