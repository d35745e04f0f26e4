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

It runs nothing. ``--save FILE`` writes the results that count (the latest per mutant of
the current texts, killed first) to one JSONL file, gzip-compressed if FILE ends in
``.gz``: `scripts/mutation-results.jsonl.gz` is kept in the repository that way, so a
fresh clone knows where the pass stands.

Usage::

    .venv/bin/python scripts/mutation_status.py .mutation-cache/results.jsonl
    .venv/bin/python scripts/mutation_status.py scripts/mutation-results.jsonl.gz \\
        .mutation-cache/*.jsonl --survivors core/plan.py
"""

from __future__ import annotations

import argparse
import ast
import gzip
import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mutation  # this folder's runner: the same mutants, keys and hashes

KILLED = ("killed", "timeout")
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


def best_results(paths: list[Path]) -> dict[tuple[str, int, str], dict[str, Any]]:
    """Per (module, index, text hash): a kill if any run killed it, else the latest."""
    best: dict[tuple[str, int, str], dict[str, Any]] = {}
    for rec in records(paths):
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
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                              ast.AsyncFunctionDef)) and isinstance(body, list) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            # Dropped, not replaced: a docstring added to a function that had none
            # leaves its code, and so its mutants, as they were.
            node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()[:16]


def same_code(module: str, source: str) -> set[str]:
    """The text hashes (`mutation.source_hash`) of every committed version of ``module``
    whose code is that of ``source``: results recorded on any of them count."""
    path = f"{mutation.PACKAGE}/{module}"
    git = ["git", "-C", str(mutation.ROOT)]
    commits = subprocess.run([*git, "log", "--format=%H", "--", path], capture_output=True,
                             text=True, check=False).stdout.split()
    wanted = code_digest(source)
    found = {mutation.source_hash(source)}
    seen: set[str] = set()
    for commit in commits:
        text = subprocess.run([*git, "show", f"{commit}:{path}"], capture_output=True,
                              text=True, check=False).stdout
        digest = mutation.source_hash(text)
        if not text or digest in seen:
            continue
        seen.add(digest)
        try:
            if code_digest(text) == wanted:
                found.add(digest)
        except SyntaxError:
            continue
    return found


def standing(best: dict[tuple[str, int, str], dict[str, Any]], module: str,
             equivalent: dict[str, str]) -> dict[str, Any]:
    source = (mutation.ROOT / mutation.PACKAGE / module).read_text(encoding="utf-8")
    digest = mutation.source_hash(source)
    texts = same_code(module, source)
    row: dict[str, Any] = {"module": module, "mutants": 0, "run": 0, "killed": 0,
                           "equivalent": 0, "survivors": [], "results": []}
    for mutant, _ in mutation.mutants_of(module, source):
        row["mutants"] += 1
        held = [r for r in (best.get((module, mutant.index, t)) for t in texts) if r]
        if not held:
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
    parser.add_argument("--equivalent", type=Path,
                        default=mutation.ROOT / "scripts" / "mutation_equivalent.json")
    args = parser.parse_args(argv)
    best = best_results(args.results)
    equivalent = mutation.load_equivalent(args.equivalent)
    rows = [standing(best, m, equivalent) for m in args.modules or mutation.scope_modules()]
    print(f"{'module':32} {'mutants':>7} {'run':>6} {'killed':>6} {'equiv.':>6} "
          f"{'left':>5} {'score':>7}")
    for r in rows:
        if not r["mutants"]:
            continue
        missing = r["mutants"] - r["run"]
        note = f"  {missing} not run" if missing else ""
        print(f"{r['module']:32} {r['mutants']:7} {r['run']:6} {r['killed']:6} "
              f"{r['equivalent']:6} {len(r['survivors']):5} {r['score']:7.1%}{note}")
    whole = [r for r in rows if r["mutants"] and r["run"] == r["mutants"]]
    under = [r["module"] for r in whole if r["score"] < 0.9]
    print(f"\n{len(whole)} of {sum(1 for r in rows if r['mutants'])} modules run whole; "
          f"{sum(r['run'] for r in rows):,} of {sum(r['mutants'] for r in rows):,} mutants "
          f"run; whole and under 90%: {', '.join(under) or 'none'}")
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
