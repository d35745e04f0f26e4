"""Small modules' last survivors of the whole-module mutation runs: which reasons count
as failures, and the dataset card's guard on a README it did not write."""

from __future__ import annotations

from pathlib import Path

import pytest

from trajectory_compressor.core import reasons
from trajectory_compressor.core.errors import ConfigError
from trajectory_compressor.core.explain import RowReason
from trajectory_compressor.formats.hf_card import CARD, MARK, check_card


@pytest.mark.parametrize("reason", reasons.ALL, ids=lambda r: r.code)
def test_a_reason_is_a_failure_only_if_listed_as_one(reason):
    row = RowReason(reason.code, reason.text)
    assert row.failed is (reason in reasons.FAILURES)


def test_an_over_limit_reason_is_not_a_failure():
    assert RowReason(reasons.NO_MIDDLE.code, reasons.NO_MIDDLE.text).failed is False
    assert RowReason(reasons.DEADLINE.code, reasons.DEADLINE.text).failed is True


def card_with_mark_ending_at(tmp_path: Path, end: int) -> Path:
    """A README.md whose mark's last byte is byte ``end`` (1-based) of the file."""
    mark = MARK.encode()
    path = tmp_path / CARD
    path.write_bytes(b"x" * (end - len(mark)) + mark + b"\nmore text\n")
    return path


def test_the_mark_is_looked_for_in_the_first_4_kib(tmp_path):
    check_card(card_with_mark_ending_at(tmp_path, 4096))  # ours: no error


def test_a_mark_past_the_first_4_kib_is_not_ours(tmp_path):
    path = card_with_mark_ending_at(tmp_path, 4097)
    with pytest.raises(ConfigError, match="was not written by trajectory-compressor"):
        check_card(path)


def test_an_unreadable_readme_is_named_with_the_systems_words(tmp_path):
    path = tmp_path / CARD
    path.mkdir()  # a folder where the card goes
    with pytest.raises(ConfigError) as caught:
        check_card(path)
    assert str(caught.value) == f"cannot read {path}: Is a directory"
