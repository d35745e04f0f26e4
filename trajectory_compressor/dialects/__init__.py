"""Row ↔ conversation: the only code that knows how a row spells its turns.

`detect` picks a file's dialect from its first rows, unless the config names one:
- a ``messages`` list of ``{"role", ...}`` objects: OpenAI ``messages``;
- a ``conversations`` list whose roles are all Hermes' (system/human/gpt/tool) and no
  ``system``/``tools`` column beside it: Hermes ShareGPT, taken as it is;
- any other ``conversations`` list (``user``/``assistant``, ``function_call``,
  ``observation``, a system or tools column): a ShareGPT variant (LLaMA-Factory).
A YAML ``dataset`` section names the columns and tags of a custom dataset, as
LLaMA-Factory's ``dataset_info`` does.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..core.config import CompressionConfig
from ..core.conversation import Trajectory
from .base import Dialect
from .messages import Messages
from .sharegpt import SHAREGPT, ShareGPTTags, ShareGPTVariant

# Rows looked at to decide a file's dialect.
DETECT_ROWS = 32
# Tags only a ShareGPT variant uses; a Hermes file with another unknown role stays Hermes
# (and that row is rejected), so one stray row cannot change how the others are planned.
VARIANT_TAGS = frozenset({"user", "assistant", "function_call", "observation"})

__all__ = ["DETECT_ROWS", "Dialect", "detect", "dialect_for", "row_turns"]


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
    """The dialect of a file whose first rows are ``rows`` (``dataset.format`` wins)."""
    if config.dataset_format != "auto":
        return dialect_for(config, config.dataset_format)
    if _custom_tags(config):
        return dialect_for(config, "sharegpt-variant")
    column = config.dataset_messages
    for row in rows:
        if not isinstance(row, dict):
            continue
        if isinstance(row.get(column or "messages"), list) and all(
                isinstance(m, dict) and "role" in m for m in row[column or "messages"]):
            return dialect_for(config, "openai")
        turns = row.get(column or "conversations")
        if isinstance(turns, list):
            variant_roles = any(isinstance(t, dict) and t.get("from") in VARIANT_TAGS
                                for t in turns)
            columns = any(row.get(key) is not None for key in ("system", "tools"))
            if variant_roles or columns:
                return dialect_for(config, "sharegpt-variant")
    return SHAREGPT


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
