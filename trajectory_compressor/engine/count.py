"""`RowCounter`: the token counts that decide "over the target", in either counting mode.

- ``turns`` (the reference's): each turn's text encoded alone, summed.
- ``chat_template``: the row rendered by the tokenizer's chat template with its tools, as
  the trainer sees it; per-turn counts attribute every rendered token to a turn (BOS, the
  tools block and the generation prompt to the first) and add up to the exact length.

The dialect says how a row's turns become chat messages (`Dialect.template_messages`), one
message per turn, so the planner's per-turn counts line up with the turns it plans.
"""

from __future__ import annotations

from typing import Any

from ..core.config import BUNDLED_TOKENIZER, CompressionConfig
from ..core.conversation import Row, Trajectory
from ..core.errors import ConfigError, one_line_error
from ..counting.identity import tokenizer_identity
from ..counting.tokens import TokenCounter, load_tokenizer
from ..dialects.base import Dialect

Item = tuple[Dialect, Row, Trajectory]

__all__ = ["Item", "RowCounter", "gap_counter", "tokenizer_identity"]


class RowCounter:
    """Per-turn counts of rows in the configured mode; a row the template cannot render,
    or with a text the tokenizer refuses, gets the reason instead of counts (it is
    rejected, the batch goes on). No count is ever estimated."""

    def __init__(self, config: CompressionConfig, counter: TokenCounter) -> None:
        self.mode = config.token_counting
        self.counter = counter
        self.template: Any = None
        self._config = config
        self._other: Any = None  # the template `analyze` compares with, built when asked
        if self.mode == "chat_template":
            from ..counting.template import ChatTemplateError, TemplateCounter

            source = _template_source(config)
            # The template needs the tokenizer as transformers loads it from its folder
            # (special tokens such as the BOS a template writes come from its config).
            tokenizer = load_tokenizer(config.tokenizer_name, config.trust_remote_code)
            try:
                self.template = TemplateCounter(tokenizer, source)
            except ChatTemplateError as exc:
                raise ConfigError(str(exc)) from None

    def template_totals(self, rows: list[tuple[list[dict[str, Any]], Any]]) -> list[int]:
        """Chat-template lengths of rows of messages (for the counting gap)."""
        if self.template is None and self._other is None:
            self._other = gap_counter(self._config, self.counter)
        template = self.template if self.template is not None else self._other
        return [int(n) for n in template.count_totals(rows)]

    @property
    def template_hash(self) -> str | None:
        return None if self.template is None else str(self.template.template_hash)

    def count(self, items: list[Item]) -> list[list[int] | str]:
        """Per-turn counts of each row (or why it cannot be counted), in one batch."""
        if self.template is None:
            trajectories = [turns for _, _, turns in items]
            try:
                return list(self.counter.count_trajectories(trajectories))
            except Exception:  # one text the tokenizer refuses must not cost the batch
                return [self._one_by_turns(turns) for turns in trajectories]
        rows = [dialect.template_messages(row, turns) for dialect, row, turns in items]
        try:
            return list(self.template.count_many_rows(rows))
        except Exception:  # one row the template refuses must not cost the batch
            return [self._one(row) for row in rows]

    def _one_by_turns(self, turns: Trajectory) -> list[int] | str:
        try:
            return self.counter.count_trajectories([turns])[0]
        except Exception as exc:
            return f"the tokenizer cannot count one of the row's turns: {one_line_error(exc)}"

    def _one(self, row: tuple[list[dict[str, Any]], Any]) -> list[int] | str:
        try:
            return list(self.template.count_many_rows([row])[0])
        except Exception as exc:
            return f"cannot count the row with the chat template: {one_line_error(exc)}"

    def total(self, dialect: Dialect, row: Row) -> int:
        """The exact count of a (compressed) row as written, in the configured mode."""
        turns = dialect.turns(row)
        if self.template is None:
            return sum(self.counter.count_many([t["value"] for t in turns]))
        return int(self.template.count_total(*dialect.template_messages(row, turns)))


def gap_counter(config: CompressionConfig, counter: TokenCounter) -> Any:
    """A template counter to compare the per-turn sum with: the configured template, else
    the tokenizer's own, else None (the bundled tokenizer has no chat template)."""
    if config.token_counting == "chat_template":
        return True  # the run counts with the template: the gap is against the sums
    from ..counting.template import ChatTemplateError, TemplateCounter

    source = _template_source(config)
    if source is None and config.tokenizer_name == BUNDLED_TOKENIZER:
        return None
    try:
        return TemplateCounter(load_tokenizer(config.tokenizer_name,
                                              config.trust_remote_code), source)
    except ChatTemplateError:
        return None


def _template_source(config: CompressionConfig) -> str | None:
    """The text of the ``--chat-template`` file, if one is given. One that cannot be read
    is the user's to fix: a configuration error (exit 2), as a missing config file is."""
    if not config.chat_template:
        return None
    from ..counting.template import ChatTemplateError, read_chat_template

    try:
        return read_chat_template(config.chat_template)
    except ChatTemplateError as exc:
        raise ConfigError(str(exc)) from None
