"""When to compress: the threshold, and the guard against compressing in vain (§10)."""

from __future__ import annotations

from dataclasses import dataclass

# A pass that saves less than this share of the tokens did not really help.
MIN_SAVINGS = 0.10
# After this many such passes in a row, automatic compression stops: the protected head
# and tail alone are close to the threshold, and every further pass would only lose detail
# (and cost a summarizer call) without freeing space.
MAX_INEFFECTIVE_PASSES = 2


@dataclass
class Trigger:
    """``prompt_tokens >= threshold_tokens``, unless the last passes kept failing to save."""

    threshold_tokens: int
    ineffective_passes: int = 0

    def should_compress(self, prompt_tokens: int) -> bool:
        return not self.thrashing and prompt_tokens >= self.threshold_tokens

    def record_pass(self, tokens_before: int, tokens_after: int) -> None:
        """Remember how much one compression pass saved."""
        saved = (tokens_before - tokens_after) / tokens_before if tokens_before > 0 else 0.0
        self.ineffective_passes = self.ineffective_passes + 1 if saved < MIN_SAVINGS else 0

    @property
    def thrashing(self) -> bool:
        return self.ineffective_passes >= MAX_INEFFECTIVE_PASSES
