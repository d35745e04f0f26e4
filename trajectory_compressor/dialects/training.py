"""Which turns a trainer learns from, in each dialect's own spelling (§20 windows).

In windows output an assistant turn is trained in exactly one window; where it appears
again as context (a later window's head or its recent turns) it is marked not trained:

- OpenAI ``messages``: ``"weight": 0`` on the assistant message (OpenAI fine-tuning reads
  it for assistant messages; so does axolotl's ``chat_template`` loader with
  ``message_field_training: weight``); rows whose messages already carry
  ``loss_weight`` (LLaMA-Factory's spelling) also get ``"loss_weight": 0``.
- ShareGPT rows (Hermes and LLaMA-Factory variants): ``"train": false`` on the turn, the
  per-turn field axolotl's ``chat_template`` loader reads with
  ``message_field_training: train``; rows whose turns carry ``weight`` / ``loss_weight``
  also get them at 0.

A mark is added to the item the dialect writes back, so every other key stays as read.
"""

from __future__ import annotations

from typing import Any

from ..core.conversation import Row, Turn
from .base import ID_KEYS, SOURCE, Dialect, summary_weights
from .messages import Messages
from .sharegpt import ShareGPTVariant

TRAIN_FIELD = "train"


def not_trained(dialect: Dialect, row: Row, turn: Turn) -> Turn:
    """``turn`` as the dialect writes it back marked not trained."""
    if isinstance(dialect, Messages):
        original = turn.get(SOURCE)
        if not isinstance(original, dict):
            return turn
        marks = {"weight": 0, **summary_weights(row.get(dialect.column))}
        return {**turn, SOURCE: {**original, **marks}}
    if isinstance(dialect, ShareGPTVariant):
        kind, original = turn.get(SOURCE, (None, None))
        if kind != "item" or not isinstance(original, dict):
            return turn
        marks = {TRAIN_FIELD: False, **summary_weights(row.get(dialect.tags.messages))}
        return {**turn, SOURCE: (kind, {**original, **marks})}
    return {**turn, TRAIN_FIELD: False, **summary_weights(row.get("conversations"))}


def instruction_row(dialect: Dialect, system: str, user: str, answer: str) -> Row:
    """A one-exchange training row in ``dialect``'s spelling: instructions, a request,
    the answer to learn (OpenAI ``messages``; Hermes ``conversations`` system/human/gpt; a
    LLaMA-Factory ShareGPT row human/gpt with the instructions in its system column)."""
    if isinstance(dialect, Messages):
        return {"messages": [{"role": "system", "content": system},
                             {"role": "user", "content": user},
                             {"role": "assistant", "content": answer}]}
    if isinstance(dialect, ShareGPTVariant):
        return {"conversations": [{"from": "human", "value": user},
                                  {"from": "gpt", "value": answer}], "system": system}
    return {"conversations": [{"from": "system", "value": system},
                              {"from": "human", "value": user},
                              {"from": "gpt", "value": answer}]}


def is_marked(dialect: Dialect, item: Any) -> bool:
    """Whether a written row item (message or turn) is marked not trained."""
    if not isinstance(item, dict):
        return False
    if isinstance(dialect, Messages):
        return item.get("weight") == 0
    return item.get(TRAIN_FIELD) is False


def window_id(row: Row, number: int) -> dict[str, str]:
    """``{id key: "<id>#w<number>"}`` for a row with an id (`base.row_id`'s keys), else
    ``{}``: a row without an id gets none (its windows are told apart by
    ``compression_metrics.window``)."""
    for key in ID_KEYS:
        value = row.get(key)
        if key in row and isinstance(value, (str, int)):
            return {key: f"{value}#w{number}"}
    return {}
