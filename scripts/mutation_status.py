#!/usr/bin/env python3
"""Where the whole mutation pass stands (issue 26, item 5), from every result on record.

`scripts/mutation.py` appends each mutant's result to a JSONL file (``--results``); passes,
branches and re-runs of survivors leave several. This reads them all and, for each module
of the goal in its *current* text, says how many of its mutants have a result on that
text or on a committed version with the same code (only docstrings or comments changed:
the mutants are the same), how many are killed (by any run: a kill stands while the code
is unchanged), how
many survivors `scripts/mutation_equivalent.json` names, and the score, killed / (run -
equivalent). A module with mutants not yet run is marked; ``--survivors`` lists what
lives, with the runner's note (no in-process test, or slower tests left out by a budget).

``--carry`` also counts, apart, the kills an edit left standing: a mutant never run on
the current code whose change sits in a function (or module-level statement) with the
same code as on an earlier committed version of the module (under its earlier name too),
where a test killed the same change. That is how an incremental mutation run decides
what to rerun (mutmut keys its results on a function's hash the same way); survivors and
equivalents are never carried, only kills. ``--pending`` prints each module's mutants
still to run, for `scripts/mutation.py MODULE --only ...`. With ``--carry`` every
committed version of `scripts/mutation-results.jsonl.gz` is read too: ``--save`` keeps
only the results of the texts of its day.

It runs nothing. ``--save FILE`` writes the results that count (the latest per mutant of
the current texts, killed first) to one JSONL file, gzip-compressed if FILE ends in
``.gz``: `scripts/mutation-results.jsonl.gz` is kept in the repository that way, so a
fresh clone knows where the pass stands.

Usage::

    .venv/bin/python scripts/mutation_status.py .mutation-cache/results.jsonl
    .venv/bin/python scripts/mutation_status.py scripts/mutation-results.jsonl.gz \\
        .mutation-cache/*.jsonl --survivors core/plan.py
    .venv/bin/python scripts/mutation_status.py scripts/mutation-results.jsonl.gz \\
        .mutation-cache/results.jsonl --carry --pending
"""

from __future__ import annotations

import argparse
import ast
import gzip
import hashlib
import itertools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mutation  # this folder's runner: the same mutants, keys and hashes

KILLED = ("killed", "timeout")
KEPT = mutation.KEPT  # the repository's record of results
# What --save keeps of a result: enough to tell which mutant, on which text, and how it
# ended (not the wall times, nor the coverage map's key a survivor was run under).
SAVED = ("module", "index", "line", "operator", "original", "mutated", "source_hash",
         "status", "killed_by", "note", "left_out")


def records(paths: list[Path]) -> Iterator[dict[str, Any]]:
    for path in paths:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a line cut by a stopped run
                if isinstance(rec, dict) and {"module", "index", "source_hash",
                                              "status"} <= rec.keys():
                    yield rec


def committed_results() -> Iterator[dict[str, Any]]:
    """The results of every committed version of `KEPT`, oldest first."""
    git = ["git", "-C", str(mutation.ROOT)]
    kept = KEPT.relative_to(mutation.ROOT).as_posix()
    commits = subprocess.run([*git, "log", "--reverse", "--format=%H", "--", kept],
                             capture_output=True, text=True, check=False).stdout.split()
    for commit in commits:
        data = subprocess.run([*git, "show", f"{commit}:{kept}"], capture_output=True,
                              check=False).stdout
        try:
            lines = gzip.decompress(data).decode("utf-8").splitlines()
        except (OSError, EOFError):
            continue  # not there in that commit
        for line in lines:
            rec = json.loads(line)
            if {"module", "index", "source_hash", "status"} <= rec.keys():
                yield rec


def best_results(paths: list[Path], history: bool = False
                 ) -> dict[tuple[str, int, str], dict[str, Any]]:
    """Per (module, index, text hash): a kill if any run killed it, else the latest (with
    ``history``, the committed versions of `KEPT` are read first)."""
    best: dict[tuple[str, int, str], dict[str, Any]] = {}
    for rec in itertools.chain(committed_results() if history else (), records(paths)):
        if rec["status"] == "error":
            continue
        key = (rec["module"], rec["index"], rec["source_hash"])
        if best.get(key, {}).get("status") not in KILLED:
            best[key] = rec
    return best


def code_digest(source: str) -> str:
    """The module's code without its docstrings and comments: two texts with the same
    digest have the same mutants at the same indices (docstrings are never mutated), so
    a result on one stands for the other."""
    tree = _without_docstrings(ast.parse(source))
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()[:16]


def committed_texts(module: str) -> dict[str, tuple[str, str]]:
    """Every committed version of ``module``, by its text hash (`mutation.source_hash`),
    with the module's name in that commit (a moved module keeps its history: issue 40
    moved ``engine/analyze.py`` to ``inspect/analyze.py``)."""
    git = ["git", "-C", str(mutation.ROOT)]
    log = "".join(subprocess.run([*git, "log", *follow, "--name-only", "--format=%x00%H",
                                  "--", f"{mutation.PACKAGE}/{module}"], capture_output=True,
                                 text=True, check=False).stdout
                  for follow in ([], ["--follow"]))  # --follow alone skips some commits
    texts: dict[str, tuple[str, str]] = {}
    for entry in log.split("\0")[1:]:
        # (a merge lists no names: the module's own path is tried)
        commit, *names = [*entry.split(), f"{mutation.PACKAGE}/{module}"]
        text = subprocess.run([*git, "show", f"{commit}:{names[0]}"], capture_output=True,
                              text=True, check=False).stdout
        name = names[0].removeprefix(f"{mutation.PACKAGE}/")
        if text:
            texts.setdefault(mutation.source_hash(text), (text, name))
    return texts


def same_code(source: str, texts: dict[str, tuple[str, str]]) -> set[str]:
    """The text hashes of the versions in ``texts`` whose code is that of ``source``:
    results recorded on any of them count."""
    wanted = code_digest(source)
    found = {mutation.source_hash(source)}
    for digest, (text, _) in texts.items():
        try:
            if code_digest(text) == wanted:
                found.add(digest)
        except SyntaxError:
            continue
    return found


def _without_docstrings(node: ast.AST) -> ast.AST:
    """``node`` with the docstrings of it and everything in it dropped, in place."""
    for inner in ast.walk(node):
        body = getattr(inner, "body", None)
        if (isinstance(inner, (ast.Module, ast.ClassDef, ast.FunctionDef,
                               ast.AsyncFunctionDef)) and isinstance(body, list) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            # Dropped, not replaced: a docstring added to a function that had none
            # leaves its code, and so its mutants, as they were.
            inner.body = body[1:] or [ast.Pass()]
    return node


def unit_keys(module: str, source: str) -> dict[int, str]:
    """Each mutant's index -> what it is apart from where the module has it: the code of
    the innermost function around it (or of the module- or class-level statement, outside
    any function), the change, and its rank among the same changes of that code. Two
    versions of a module give a mutant the same key when the code it sits in is unchanged,
    wherever the lines moved (`ast.dump` holds no positions)."""
    tree = ast.parse(source)
    units: list[tuple[int, int, str]] = []  # first line, last line, name:digest

    def unit(node: ast.stmt, name: str) -> None:
        first, last = node.lineno, node.end_lineno or node.lineno
        code: ast.AST = node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            code = _without_docstrings(ast.parse(ast.unparse(node)).body[0])  # a copy
        digest = hashlib.sha256(ast.dump(code).encode()).hexdigest()[:16]
        units.append((first, last, f"{name}:{digest}"))

    def visit(body: list[ast.stmt], name: str) -> None:
        for stmt in body:
            if isinstance(stmt, ast.ClassDef):
                visit(stmt.body, f"{name}.{stmt.name}")
                continue
            unit(stmt, f"{name}.{stmt.name}" if isinstance(
                stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) else name)
            for inner in ast.walk(stmt):
                if inner is not stmt and isinstance(inner, (ast.FunctionDef,
                                                            ast.AsyncFunctionDef)):
                    unit(inner, f"{name}.{inner.name}")

    visit(tree.body, "")
    keys: dict[int, str] = {}
    seen: dict[str, int] = {}
    for mutant, _ in mutation.mutants_of(module, source):
        around = [u for u in units if u[0] <= mutant.line <= u[1]]
        code = max(around, key=lambda u: (u[0], -u[1]))[2] if around else "?"
        change = f"{code} {mutant.operator}: {mutant.original} -> {mutant.mutated}"
        seen[change] = seen.get(change, 0) + 1
        keys[mutant.index] = f"{change} #{seen[change]}"
    return keys


def carried_kills(best: dict[tuple[str, int, str], dict[str, Any]], module: str,
                  texts: dict[str, tuple[str, str]]) -> dict[str, dict[str, Any]]:
    """The kills recorded on earlier versions of ``module``, by `unit_keys`: a mutant of
    the current text whose key is among them sits in code that has not changed since a
    test killed it. (Only kills are carried: a survivor or an equivalent is run again.)"""
    carried: dict[str, dict[str, Any]] = {}
    names = {name for _, name in texts.values()}
    mine = [(k, r) for k, r in best.items() if k[0] in names and r["status"] in KILLED]
    for digest, (text, name) in texts.items():
        kills = {i: r for (m, i, h), r in mine if m == name and h == digest}
        if not kills:
            continue
        try:
            keys = unit_keys(module, text)
        except SyntaxError:
            continue
        for index, rec in kills.items():
            if index in keys:
                carried.setdefault(keys[index], rec)
    return carried


def standing(best: dict[tuple[str, int, str], dict[str, Any]], module: str,
             equivalent: dict[str, str], carry: bool = False) -> dict[str, Any]:
    source = (mutation.ROOT / mutation.PACKAGE / module).read_text(encoding="utf-8")
    digest = mutation.source_hash(source)
    history = committed_texts(module)
    texts = same_code(source, history)
    carried = carried_kills(best, module, history) if carry else {}
    keys = unit_keys(module, source) if carried else {}
    row: dict[str, Any] = {"module": module, "mutants": 0, "run": 0, "killed": 0,
                           "carried": 0, "equivalent": 0, "survivors": [], "results": [],
                           "pending": []}
    for mutant, _ in mutation.mutants_of(module, source):
        row["mutants"] += 1
        held = [r for r in (best.get((history.get(t, ("", module))[1], mutant.index, t))
                            for t in texts) if r]
        if not held:
            # Never run on this code: a kill of the same change in the same, unchanged
            # function of an earlier version stands for it (`carried_kills`).
            if keys.get(mutant.index, "") in carried:
                row["run"] += 1
                row["killed"] += 1
                row["carried"] += 1
            else:
                row["pending"].append(mutant.index)
            continue
        # A kill on any version of the same code, else the result on this very text.
        rec = next((r for r in held if r["status"] in KILLED), held[0])
        rec = {**rec, "source_hash": digest}
        row["run"] += 1
        row["results"].append(rec)
        if rec["status"] in KILLED:
            row["killed"] += 1
        elif mutant.key in equivalent:
            row["equivalent"] += 1
        else:
            row["survivors"].append((mutant, rec.get("note", "")))
    live = row["run"] - row["equivalent"]
    row["score"] = row["killed"] / live if live else 1.0
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path,
                        help="result files of scripts/mutation.py (JSONL, or .jsonl.gz)")
    parser.add_argument("--modules", nargs="*", help="only these (default: the goal's)")
    parser.add_argument("--survivors", nargs="*", metavar="MODULE",
                        help="list the survivors of these modules (none named: of all)")
    parser.add_argument("--save", type=Path, help="write the results that count here")
    parser.add_argument("--carry", action="store_true",
                        help="count a mutant never run on this code as killed when the same "
                        "change in the same, unchanged function was killed on an earlier "
                        "version (shown apart, in the 'carried' column)")
    parser.add_argument("--pending", action="store_true",
                        help="print, per module, the indices still to run (for "
                        "scripts/mutation.py MODULE --only ...)")
    parser.add_argument("--equivalent", type=Path,
                        default=mutation.ROOT / "scripts" / "mutation_equivalent.json")
    args = parser.parse_args(argv)
    best = best_results(args.results, history=args.carry)
    equivalent = mutation.load_equivalent(args.equivalent)
    rows = [standing(best, m, equivalent, args.carry)
            for m in args.modules or mutation.scope_modules()]
    carried = f" {'carried':>7}" if args.carry else ""
    print(f"{'module':32} {'mutants':>7} {'run':>6} {'killed':>6}{carried} {'equiv.':>6} "
          f"{'left':>5} {'score':>7}")
    for r in rows:
        if not r["mutants"]:
            continue
        missing = r["mutants"] - r["run"]
        note = f"  {missing} not run" if missing else ""
        carried = f" {r['carried']:7}" if args.carry else ""
        print(f"{r['module']:32} {r['mutants']:7} {r['run']:6} {r['killed']:6}{carried} "
              f"{r['equivalent']:6} {len(r['survivors']):5} {r['score']:7.1%}{note}")
    whole = [r for r in rows if r["mutants"] and r["run"] == r["mutants"]]
    under = [r["module"] for r in whole if r["score"] < 0.9]
    by_carry = (f" ({sum(r['carried'] for r in rows):,} of them kills carried from unchanged "
                "functions)" if args.carry else "")
    print(f"\n{len(whole)} of {sum(1 for r in rows if r['mutants'])} modules run whole; "
          f"{sum(r['run'] for r in rows):,} of {sum(r['mutants'] for r in rows):,} mutants "
          f"run{by_carry}; whole and under 90%: {', '.join(under) or 'none'}")
    if args.pending:
        for r in rows:
            if r["pending"]:
                print(f"pending {r['module']} {' '.join(map(str, r['pending']))}")
    if args.survivors is not None:
        for r in rows:
            if args.survivors and r["module"] not in args.survivors:
                continue
            for mutant, note in r["survivors"]:
                print(f"  {mutant.where} #{mutant.index} {mutant.operator}: "
                      f"{mutant.original} -> {mutant.mutated}  [{note}]")
    if args.save:
        kept = sorted((rec for r in rows for rec in r["results"]),
                      key=lambda rec: (rec["module"], rec["index"]))
        opener = gzip.open if args.save.suffix == ".gz" else open
        with opener(args.save, "wt", encoding="utf-8") as f:
            for rec in kept:
                f.write(json.dumps({k: rec.get(k) for k in SAVED}) + "\n")
        print(f"wrote {len(kept):,} results to {args.save}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
