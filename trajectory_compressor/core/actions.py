"""Actions a summary says were taken (issue 36): "deleted the production database".

A summary's *action claim* is a past-tense verb of an action that changes the world
(`ACTIONS`: deleted, dropped, pushed, deployed, ...) and its object, up to the next
punctuation (at most `OBJECT_WORDS` words after the articles). It is *stated* by the
row when the turns before the summary show the action - a form of the verb, or a command
that does it (``rm``, ``DROP``, ``git push``, ...) - and name the object's last word (its
head noun: ``database`` of ``the production database``). Otherwise the claim is
invented.

What this cannot tell, honestly: only the verbs listed are read; a paraphrase the list
lacks ("erased", "nuked"), an action stated about another object in the same row, or a
claim spread over two sentences go unseen; a negated claim ("did not delete the
database") and a hypothetical ("should push the branch") are no claims at all.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

# verb stem -> (the past forms a summary writes, the forms or commands that show it in
# a turn: matched as whole words, case-folded)
ACTIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "delete": (("deleted",), ("delete", "deleted", "deletes", "deleting", "deletion", "rm",
                              "del", "unlink", "rmdir", "drop", "dropped", "remove",
                              "removed", "truncate")),
    "remove": (("removed",), ("remove", "removed", "removes", "removing", "removal", "rm",
                              "rmdir", "del", "unlink", "uninstall", "uninstalled",
                              "delete", "deleted")),
    "drop": (("dropped",), ("drop", "dropped", "drops", "dropping")),
    "truncate": (("truncated",), ("truncate", "truncated", "truncating")),
    "wipe": (("wiped",), ("wipe", "wiped", "wiping", "rm")),
    "purge": (("purged",), ("purge", "purged", "purging")),
    "push": (("pushed", "force-pushed"), ("push", "pushed", "pushing")),
    "deploy": (("deployed",), ("deploy", "deployed", "deploying", "deployment")),
    "merge": (("merged",), ("merge", "merged", "merging")),
    "revert": (("reverted",), ("revert", "reverted", "reverting")),
    "reset": (("reset",), ("reset", "resetting")),
    "restart": (("restarted",), ("restart", "restarted", "restarting")),
    "reboot": (("rebooted",), ("reboot", "rebooted", "rebooting")),
    "kill": (("killed",), ("kill", "killed", "killing", "pkill", "killall")),
    "uninstall": (("uninstalled",), ("uninstall", "uninstalled", "uninstalling")),
    "migrate": (("migrated",), ("migrate", "migrated", "migrating", "migration")),
    "overwrite": (("overwrote", "overwritten"), ("overwrite", "overwrote", "overwritten",
                                                  "overwriting")),
    "format": (("formatted",), ("format", "formatted", "mkfs")),
    "publish": (("published",), ("publish", "published", "publishing")),
    "rotate": (("rotated",), ("rotate", "rotated", "rotating")),
    "revoke": (("revoked",), ("revoke", "revoked", "revoking")),
}
OBJECT_WORDS = 4
_PAST = {form: stem for stem, (past, _) in ACTIONS.items() for form in past}
_ARTICLES = frozenset({"the", "a", "an", "all", "every", "its", "their", "our", "his",
                       "her", "this", "that", "these", "those"})
# Words within three before the verb that make it no claim: a negation, a hypothetical.
_NEGATIONS = frozenset({"not", "never", "no", "cannot", "without", "should", "could",
                        "would", "might", "may", "must", "will", "to"})
# Words that end the object: the next phrase starts.
_OBJECT_END = frozenset({"and", "or", "but", "then", "to", "from", "in", "on", "at", "with",
                         "after", "before", "because", "so", "by", "for", "into", "of"})
_CLAUSE = re.compile(r"[^.;:!?\n()\[\]]+")
_WORD = re.compile(r"[\w'-]+")


def action_claims(summary: str) -> Iterator[tuple[str, str, str]]:
    """``(claim text, verb stem, head noun)`` for each action claim of ``summary``, in
    order: the verb, its object up to the clause's end, the object's last word."""
    for clause in _CLAUSE.finditer(summary):
        words = _WORD.findall(clause.group())
        for i, word in enumerate(words):
            stem = _PAST.get(word.casefold())
            if stem is None or _negated(words[max(i - 3, 0):i]):
                continue
            rest = words[i + 1:]
            while rest and rest[0].casefold() in _ARTICLES:
                rest = rest[1:]
            obj = []
            for w in rest:
                if w.casefold() in _OBJECT_END:
                    break
                obj.append(w)
                if len(obj) == OBJECT_WORDS:
                    break
            if not obj:
                continue
            claim = " ".join([word, *words[i + 1:i + 1 + (len(words[i + 1:]) - len(rest))],
                              *obj])
            yield claim, stem, obj[-1].casefold()


def _negated(before: list[str]) -> bool:
    return any(w.casefold() in _NEGATIONS or w.casefold().endswith("n't") for w in before)


class ActionCheck:
    """The words of a row's turns before a summary, against which action claims are
    checked."""

    def __init__(self, context: str) -> None:
        self.words = frozenset(w.casefold() for w in _WORD.findall(context))

    def stated(self, stem: str, head: str) -> bool:
        """Whether the context shows the action ``stem`` and names ``head``."""
        shows = ACTIONS[stem][1]
        return any(form in self.words for form in shows) and bool(_noun_forms(head) & self.words)

    def invented(self, summary: str) -> list[str]:
        """The action claims of ``summary`` the context does not show, in order."""
        return [claim for claim, stem, head in action_claims(summary)
                if not self.stated(stem, head)]


def _noun_forms(head: str) -> set[str]:
    """``head`` and its singular or plural (``databases`` / ``database``)."""
    forms = {head, head + "s", head + "es"}
    if head.endswith("es"):
        forms.add(head[:-2])
    if head.endswith("s"):
        forms.add(head[:-1])
    return forms
