"""Invented facts (core/invented.py): the rules of README "Summary fidelity" / "Invented
facts" and the module's docstring that the fifth mutation round found untested. Every
expected value is worked out by hand from those texts."""

from __future__ import annotations

import pytest

from trajectory_compressor.core.invented import InventedCheck, claims


def invented(context: str, summary: str) -> list[str]:
    return InventedCheck([context]).invented(summary)


# -- a URL is one claim -----------------------------------------------------------------

def test_a_url_is_one_claim_not_also_its_path_and_query():
    # README: a URL is one claim, its path and query are not claims of their own.
    assert [c for c, _, _ in claims("see https://example.org/api?name=load_batch today")] \
        == ["https://example.org/api?name=load_batch"]


def test_a_url_at_the_end_of_the_summary_is_its_last_claim():
    # The URL is the text's last claim (a text cut at its budget): glued on the right, it
    # is found in the longer URL. Were `load_batch` of its query a claim of its own, it
    # would be the last one, and the URL, not clipped then, would not be found.
    context = "Docs at https://example.org/api?name=load_batch_v2 were read."
    assert invented(context, "Read https://example.org/api?name=load_batch") == []


# -- units of size and frequency: each prefix's exponent --------------------------------

@pytest.mark.parametrize(("context", "said"), [
    ("2 KiB", "2 kB"),                 # 2 kB as 1024: 2 x 1024 = 2,048 B = 2 KiB
    ("3072 GiB", "3 TB"),              # 3 TB as 1024: 3 x 1024^4 B = 3,072 x 1024^3 B
    ("2000000 GB", "2 PB"),            # 2 PB as 1000: 2 x 10^15 B = 2,000,000 x 10^9 B
    ("2 KiB", "2048 bytes"),           # 2 x 1024 = 2,048 B
    ("3,145,728 bytes", "3 MiB"),      # 3 x 1024^2 = 3,145,728 B
    ("1024 GiB", "1 TiB"),             # 1024^4 = 1,024 x 1024^3
    ("1.5 kHz", "1500 Hz"),            # 1.5 x 1000 = 1,500 Hz
])
def test_a_quantity_in_another_unit_of_its_kind_is_stated(context, said):
    assert invented(f"The job reported {context} in all.", f"it had {said} then") == []


@pytest.mark.parametrize(("context", "said"), [
    ("4 KiB", "2 kB"),             # 2 kB is 2,000 or 2,048 B, 4 KiB 4,096 B
    ("3 GiB", "3 TB"),
    ("2 TB", "2 PB"),
    ("2 KiB", "4096 bytes"),
    ("3 GiB", "3 MiB"),
    ("1 PB", "1 TiB"),             # 1 TiB = 1.0995 x 10^12 B, 1 PB 10^15 B (or 1024^5)
    ("1.5 MHz", "1500 Hz"),
])
def test_a_quantity_of_another_size_is_not(context, said):
    assert invented(f"The job reported {context} in all.", f"it had {said} then") == [said]


def test_another_number_with_a_unit_is_found_only_as_itself():
    # README: any other number with a unit (`60 fps`, `4k`) only as the same number and unit.
    assert invented("The game ran at 30 fps.", "it ran at 60 fps then") == ["60 fps"]
    assert invented("The game ran at 60 fps.", "it ran at 60 fps then") == []


def test_the_precision_range_includes_its_ends():
    # README: `1.5 GB` stands for 1.45-1.55 GB, both ends included. The code widens the
    # range by a hair (a billionth of it) for float rounding: `20s` stands for
    # 20 +- 0.5 x (1 + 1e-9) s, so 20.5000000005 s is its upper end, 20.500000001 s beyond
    # it. (20 s, not 2 s: 2 s for 1.5 s would be a third off, past MAX_ROUNDING.)
    assert invented("It slept 20.5000000005 seconds.", "slept 20s then") == []
    assert invented("It slept 19.4999999995 seconds.", "slept 20s then") == []
    assert invented("It slept 20.500000001 seconds.", "slept 20s then") == ["20s"]


# -- each claim once, words are not claims ----------------------------------------------

def test_an_invented_claim_is_listed_once_in_its_first_spelling():
    # The docstring: the claims the context does not state, in order, deduplicated
    # (by their matching form: case-folded).
    summary = "ShardIndexError hit load_batch; LOAD_BATCH raised ShardIndexError again"
    assert invented("nothing of that", summary) == ["ShardIndexError", "load_batch"]


def test_ordinary_words_in_any_case_are_not_claims():
    # README: `the`, `none`, `true`, `ok` are words in any case; `FAlse`, `NOne`, `TRue`
    # and `OKay` would otherwise read as camel-case names (two capitals, two small).
    summary = "it returned FAlse and NOne, then TRue; OKay"
    assert list(claims(summary)) == []
    assert invented("nothing of that", summary) == []


# -- clipped quotations: glued only where clipped -------------------------------------------

def test_a_claim_glued_on_its_left_is_not_found_without_an_ellipsis():
    # README: not glued to a letter, digit or `_` at an edge that is one: `pp.py` is not
    # `app.py`.
    assert invented("It opened src/app.py.", "read pp.py today") == ["pp.py"]


def test_the_last_claim_may_be_glued_with_one_character_after_it():
    # README: the text's last claim with at most one character after it (`src/app/loa.`,
    # not `(src/app/loa).`) is a clipped quotation.
    context = "It opened src/app/loader.py."
    assert invented(context, "it read src/app/loa") == []
    assert invented(context, "it read src/app/loa.") == []
    assert invented(context, "it read (src/app/loa).") == ["src/app/loa"]
    assert invented(context, "it read src/app/loa?!") == ["src/app/loa"]


def test_a_part_of_a_test_id_at_the_end_is_the_last_claim():
    # `tests/test_io.py::test_load_ba` has two claims, the path and the test's name; the
    # name is the text's last claim (it starts 18 characters into the word), so it may be
    # the start of `test_load_batch_twice`.
    context = "FAILED tests/test_io.py::test_load_batch_twice"
    assert invented(context, "failed tests/test_io.py::test_load_ba") == []
    assert invented(context, "failed tests/test_io.py::test_load_ba; fixed") == [
        "test_load_ba"]


def test_a_claim_clipped_on_its_left_may_be_glued_there():
    # The docstring and README: a claim touching `…`/`...` is a clipped quotation and may
    # be glued on that side. Once, the ellipsis before a word stayed part of the claim
    # (`...long_name.py`), found nowhere: every left-clipped quotation was "invented".
    context = "It opened src/very_long_name.py and load_batch_v2."
    assert invented(context, "…long_name.py was read") == []  # at the text's start
    assert invented(context, "read …long_name.py and ...batch_v2 today") == []
    assert invented(context, "read …/very_long_name.py today") == []
    assert list(claims("read …long_name.py today")) == [("long_name.py", True, False)]
    # Glued on the right it is not found: the ellipsis opens its left side only.
    assert invented(context, "read …long_nam today") == ["long_nam"]
    assert invented(context, "read …short_name.py today") == ["short_name.py"]
    # Not touching the ellipsis, a claim is not clipped.
    assert invented(context, "read … long_name.py today") == ["long_name.py"]


def test_a_file_name_that_begins_with_a_quantity_is_a_claim_too():
    # README: file names and paths are claims. `2GB-shard.parquet` begins with a number
    # with a unit (`2GB`, stated: the row's 2 GB) but names a file the row never does. Once
    # the file name was left out for the number it begins with, and so never invented.
    context = "Render at 4k; the shards are 2 GB and 12 GB."
    assert invented(context, "wrote 2GB-shard.parquet today") == ["2GB-shard.parquet"]
    assert invented(context, "wrote 4k-video.mp4 and 12GB.json") == [
        "4k-video.mp4", "12GB.json"]
    assert [c for c, _, _ in claims("wrote 4k-video.mp4 today")] == ["4k", "4k-video.mp4"]
    # A unit within the number is no claim of its own (`MiB` and `kHz` read as camel case),
    # nor a number written as one word (`4kB` once), nor a unit's rate (`GB/node/day`).
    assert [c for c, _, _ in claims("used 5 MiB, 4kB and 2 kHz; 10 GB/node/day")] == [
        "5 MiB", "4kB", "2 kHz", "10 GB"]
