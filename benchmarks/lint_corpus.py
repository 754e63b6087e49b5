"""Precision and recall of `imgbuild lint` on a corpus of real public LLM-training Dockerfiles.

    .venv/bin/python benchmarks/lint_corpus.py [--corpus .cache/lint-corpus] [--lint PATH/TO/lint.py]

docs/lint-corpus.yaml names each file (repository, path, commit), judges every finding the lint gave
on it (rule, line, and a part of the message where one line holds findings of both kinds) as true or
false, and lists the fragile spots the lint should find (`missed`: line, class, the rule that would
report it). The files themselves are not in the repository: fetch them at the commits named and save
each as <owner>__<repo>__<path with / as __> in the corpus folder.

precision = true findings / all findings; recall = true findings / (true findings + spots of `missed`
that no true finding of the run covers). Findings of severity `unknown` say a fact is not known: they
claim no problem, are counted apart and left out of both. A finding with no judgement is printed and
counted as false, and the exit status is 1, so that a new finding cannot pass silently. --lint runs
another copy of lint.py (the BEFORE numbers: `git show 48e361f:builder/rules/lint.py > /tmp/l.py`).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def load_lint(path: str | None):
    if not path:
        from builder.rules import lint
        return lint
    spec = importlib.util.spec_from_file_location("lint_under_test", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["lint_under_test"] = module
    spec.loader.exec_module(module)
    return module


def judge(finding, judgements: list[dict]) -> dict | None:
    for j in judgements:
        if j["rule"] == finding.rule and j["line"] == finding.line and j.get("match", "") in finding.message:
            return j
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default=str(ROOT / ".cache" / "lint-corpus"))
    ap.add_argument("--judgements", default=str(ROOT / "docs" / "lint-corpus.yaml"))
    ap.add_argument("--lint", help="a lint.py to run instead of builder/rules/lint.py")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every finding with its judgement")
    args = ap.parse_args(argv)
    lint = load_lint(args.lint)
    doc = yaml.safe_load(Path(args.judgements).read_text())
    tp = fp = unknown = misses = 0
    unjudged, absent = [], []
    by_rule: dict[str, list[int]] = {}
    for entry in doc["files"]:
        path = Path(args.corpus) / entry["file"]
        if not path.exists():
            absent.append(entry["file"])
            continue
        judgements = entry.get("findings") or []
        true_at = set()
        for f in lint.lint_dockerfile(path.read_text(), entry["file"]):
            if f.severity == "unknown":
                unknown += 1
                continue
            j = judge(f, judgements)
            ok = bool(j and j["judgement"])
            counts = by_rule.setdefault(f.rule, [0, 0, 0])
            counts[0 if ok else 1] += 1
            if ok:
                tp += 1
                true_at.add((f.rule, f.line))
            else:
                fp += 1
            if j is None:
                unjudged.append(f"{entry['file']}:{f.line} {f.rule} {f.severity}: {f.message}")
            if args.verbose:
                print(f"{'TRUE ' if ok else 'FALSE'} {entry['file']}:{f.line} {f.rule} {f.message[:90]}")
        for spot in entry.get("missed") or []:
            if (spot.get("rule"), spot["line"]) not in true_at:
                misses += 1
                by_rule.setdefault(spot.get("rule") or "-", [0, 0, 0])[2] += 1
                if args.verbose:
                    print(f"MISS  {entry['file']}:{spot['line']} {spot.get('rule') or '-'} {spot['class']}")
    found = tp + fp
    precision = tp / found if found else 1.0
    recall = tp / (tp + misses) if tp + misses else 1.0
    print(f"files: {len(doc['files']) - len(absent)} of {len(doc['files'])} (corpus {args.corpus})")
    print("rule   true false missed")
    for rule in sorted(by_rule):
        print(f"{rule:6} {by_rule[rule][0]:4} {by_rule[rule][1]:5} {by_rule[rule][2]:6}")
    print(f"findings: {found} ({tp} true, {fp} false), {unknown} unknown left out; judged misses: {misses}")
    print(f"precision = {tp}/{found} = {precision:.1%}; recall = {tp}/{tp + misses} = {recall:.1%}")
    for name in absent:
        print(f"absent from the corpus folder: {name}")
    for line in unjudged:
        print(f"NO JUDGEMENT (counted false): {line}")
    return 1 if unjudged or absent else 0


if __name__ == "__main__":
    sys.exit(main())
