"""Findings of preflight and lint: what is wrong, where, by which rule, on which fact, and how to fix it.

Severities: an error stops a build; a warning is printed (and with --strict stops it too); unknown
means a rule could not decide because a fact it needs is not known. Unknowns are never guessed into a
pass or a failure: they are printed with what would settle them, and no severity level turns them
into a failure (an unknown is not a known problem; `check --require-locked` demands the measurements
that settle most of them). A warning or an unknown a stack waives (stacks.NAME.waivers) is printed as
waived with its reason and fails nothing, --strict included; an error cannot be waived.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Iterable

SEVERITIES = ("error", "warning", "unknown")


@dataclass(frozen=True)
class Finding:
    rule: str                 # IB001 ...: preflight rules IB0xx, lint rules IB1xx
    severity: str             # error | warning | unknown
    message: str
    file: str                 # stacks.yaml, or the Dockerfile linted
    line: int | None
    key: str = ""             # key path in stacks.yaml (or the Dockerfile instruction)
    stack: str = ""
    source: str = ""          # where the fact behind the rule comes from
    origin: str = ""          # measured | declared | catalog: the kind of fact the rule used
    verified: bool | None = None
    fix: str = ""
    waived: str = ""          # the reason of the stack's waiver that accepts it ("": not waived)

    def render(self) -> str:
        where = self.file + (f":{self.line}" if self.line else "")
        if self.key:
            where += f": {self.key}"
        head = ("waived:" if self.waived else self.severity) + f" {self.rule}" + (f" [{self.stack}]" if self.stack else "")
        text = f"{head} {where}: {self.message}" + (f" ({self.waived})" if self.waived else "")
        if self.source:
            fact = ", ".join(x for x in (self.origin, {True: "verified", False: "unverified"}.get(self.verified)) if x)
            text += f"\n    fact{f' ({fact})' if fact else ''}: {self.source}"
        if self.fix:
            text += f"\n    fix: {self.fix}"
        return text


    def to_json(self) -> dict:
        return asdict(self)


def strict(findings: Iterable[Finding]) -> list[Finding]:
    """--strict: warnings become errors; unknowns stay what they are; waived findings stay waived."""
    return [replace(f, severity="error") if f.severity == "warning" and not f.waived else f for f in findings]


def errors(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == "error" and not f.waived]


def ordered(findings: Iterable[Finding]) -> list[Finding]:
    """Errors first, then warnings, then unknowns; within each, by file, line and rule. Duplicates (the
    same finding reached through two stacks' shared layers) are printed once."""
    seen, out = set(), []
    for f in findings:
        if f not in seen:
            seen.add(f)
            out.append(f)
    return sorted(out, key=lambda f: (bool(f.waived), SEVERITIES.index(f.severity), f.stack, f.file, f.line or 0,
                                      f.rule))


def summary(findings: list[Finding]) -> str:
    counts = {s: sum(1 for f in findings if f.severity == s and not f.waived) for s in SEVERITIES}
    waived = sum(1 for f in findings if f.waived)
    return (f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['unknown']} unknown"
            + (f", {waived} waived" if waived else ""))
