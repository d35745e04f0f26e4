"""`--max-invented 0` catches wrong facts (issue 36, item 8), worked by hand.

Doubled quantities passed (``1 hour`` for 30 min, ``1 GB`` for 512 MB: each is "1" at
the summary's precision), a port recast as a count passed (``8080 tests``), an invented
action passed (``deleted the production database``), and a faithful ``1500 ms`` for
``1.5 s`` was flagged (the row's ``1.5 s``, with a space, was no quantity)."""

from __future__ import annotations

import pytest

from trajectory_compressor.core.actions import action_claims
from trajectory_compressor.core.invented import InventedCheck


def invented(context: str, summary: str) -> list[str]:
    return InventedCheck([context]).invented(summary)


# -- quantities: converted both ways, and a rounded value stays near the row's -----------

@pytest.mark.parametrize(("context", "said"), [
    ("The build took 30 min.", "1 hour"),          # 30 min = 0.5 h: twice that
    ("The build took 30 minutes.", "60 min"),      # the same, in the row's unit
    ("The image is 512 MB.", "1 GB"),              # 0.512 GB (or 0.5 GiB): about twice
    ("The image is 512 MB.", "1024 MB"),
    ("It waited 2 s.", "4000 ms"),                 # 4 s
    ("It waited 1.5 s before the retry.", "3s"),   # hand: 1.5 x 2
    ("Disk at 40%.", "80%"),
])
def test_a_doubled_quantity_is_invented(context, said):
    assert invented(context, f"it was {said} then") == [said]


@pytest.mark.parametrize(("context", "said"), [
    ("The request took 1.5 s.", "1500 ms"),        # 1.5 x 1000: the case
    ("The request took 1500 ms.", "1.5 s"),        # and back
    ("The request took 1.5 s.", "1.5s"),
    ("The build took 30 min.", "0.5 hours"),       # 30 / 60
    ("The build took 30 min.", "1800 s"),          # 30 x 60
    ("The image is 512 MB.", "0.5 GiB"),           # 512 x 1024^2 B = 0.5 x 1024^3 B
    ("The image is 512 MiB.", "0.5 GiB"),
    ("It took 2345 ms.", "2 s"),                   # rounded to the second: 15% off
    ("It took 2.5 s.", "3 s"),                     # rounded up: 20% off, under a quarter
    ("It took 90 s.", "1.5 min"),                  # 90 / 60
])
def test_a_faithful_conversion_is_stated(context, said):
    assert invented(context, f"it was {said} then") == []


def test_the_spaced_one_letter_unit_of_the_row_is_a_quantity_but_a_summary_claims_none():
    # The row's "30 m" is 30 minutes (1800 s); in a summary "2 s" is not even a claim.
    assert invented("Ran for 30 m in all.", "it ran 1800s") == []
    assert invented("Ran for 30 m in all.", "it ran 3600s") == ["3600s"]
    assert invented("nothing timed here", "it took 2 s") == []


# -- a number keeps its kind ------------------------------------------------------------

@pytest.mark.parametrize("context", [
    "The server listens on port 8080.",
    "Listening on port=8080 now.",
    "curl http://localhost:8080/health returned 200",
    "bound 0.0.0.0:8080",
])
def test_a_port_is_not_a_count(context):
    assert invented(context, "8080 tests passed") == ["8080 tests"]


@pytest.mark.parametrize(("context", "said"), [
    ("The image is 512 MB.", "512 files"),
    ("Waited 30 s for the lock.", "30 retries"),
    ("Waited 30s for the lock.", "30 workers"),
])
def test_a_size_or_duration_is_not_a_count(context, said):
    assert invented(context, f"then {said} ran") == [said]


@pytest.mark.parametrize(("context", "said"), [
    ("ran 8080 tests", "8080 tests"),
    ('{"workers": 8}', "8 workers"),
    ("12 passed, 1 failed", "12 tests"),
    ("Listening on port 8080; 25 requests served.", "25 requests"),
])
def test_a_count_or_a_bare_number_still_states_a_count(context, said):
    assert invented(context, f"then {said} ran") == []


# -- actions no turn shows ----------------------------------------------------------------

def test_an_action_no_turn_shows_is_invented():
    context = "ran pytest: 12 passed. Then read the config of the production database."
    summary = "The agent ran 12 tests and deleted the production database."
    assert invented(context, summary) == ["deleted the production database"]
    # A variant: another verb and object.
    assert invented("git status; git diff", "It force-pushed the branch to origin.") == [
        "force-pushed the branch"]


@pytest.mark.parametrize(("context", "summary"), [
    ("$ rm -rf /var/lib/db/production\nthe production database is gone",
     "The agent deleted the production database."),            # rm, and "database"
    ("DROP TABLE users; -- drop done", "It dropped the users table."),
    ("$ git push origin fix-parser\nTo github.com:x/y.git", "It pushed the branch fix-parser."
     " "),
    ("systemctl restart nginx", "Then it restarted nginx."),
])
def test_an_action_a_turn_shows_is_stated(context, summary):
    assert invented(context, summary) == []


def test_the_object_must_be_named_too():
    # The row deletes a cache; the summary says a database.
    assert invented("rm -rf ~/.cache/pip", "It deleted the production database.") == [
        "deleted the production database"]


@pytest.mark.parametrize("summary", [
    "The agent did not delete the database.",
    "It never pushed the branch.",
    "We should push the branch later.",
    "The agent didn't deploy the service.",
])
def test_negated_or_hypothetical_actions_are_no_claims(summary):
    assert list(action_claims(summary)) == []
    assert invented("nothing happened", summary) == []
