"""`imgbuild diff` results as text: a table for people, Markdown for a merge request, JSON for machines.

People read changes first and the most important first (torch, CUDA, NCCL, DeepSpeed, Megatron, TE);
what did not change is one line. Long hex digests are cut to 12 digits here; --json keeps them whole.
"""

from __future__ import annotations

import json
import re
from collections import Counter

from builder.diff.imagediff import Change, Image, ImageDiff, Section, human_size
from builder.diff.specdiff import NodeChange, SpecDiff, StackDiff
from builder.textsafe import inert, markdown

HEX = re.compile(r"\b(sha256:)?([0-9a-f]{12})[0-9a-f]{20,}\b")
DIRECTIONS = ("upgrade", "downgrade", "added", "removed", "changed")
LONG = 15  # Markdown sections with more rows than this are folded


def render(result: SpecDiff | ImageDiff, fmt: str) -> str:
    """fmt: table | markdown | json."""
    if fmt == "json":
        return json.dumps(result.to_json(), indent=2)
    if isinstance(result, SpecDiff):
        return spec_markdown(result) if fmt == "markdown" else spec_table(result)
    return image_markdown(result) if fmt == "markdown" else image_table(result)


def short(text: str | None) -> str:
    """Long digests cut to 12 hex digits, and the text made inert: much of what a diff shows (labels, env,
    versions, package names, history) comes from an image or a registry and may hold escape sequences or a
    newline that would forge a line of the report."""
    return "-" if text is None else inert(HEX.sub(lambda m: (m.group(1) or "") + m.group(2), str(text)))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _md(text: str) -> str:
    """Untrusted text for a Markdown page (a merge request comment): no markup, no HTML of its own."""
    return markdown(HEX.sub(lambda m: (m.group(1) or "") + m.group(2), str(text)))


# -- spec diff -------------------------------------------------------------------------------------

def _key(n: NodeChange) -> str:
    if n.old_key and n.new_key and n.old_key != n.new_key:
        return f"{n.old_key[:12]} -> {n.new_key[:12]}"
    return (n.new_key or n.old_key or "")[:12]


def _why(n: NodeChange) -> str:
    parts = [f"{c.input}: {c.detail}" for c in n.causes]
    if n.was:
        parts.insert(0, f"replaces {n.was}")
    if n.note:
        parts.append(n.note)
    return "; ".join(parts)


def _summary(d: SpecDiff) -> str:
    build, reuse, reval = d.keys("build"), d.keys("reuse"), d.keys("revalidate")
    moved = sum(len(s.moved) for s in d.stacks)
    created = sum(len(s.created) for s in d.stacks)
    changed = sum(1 for s in d.stacks if s.status != "unchanged")
    # "reused": images the changed stacks need that are built already (the same key at the old revision,
    # or a new key the registry holds), whatever the reason; unchanged layers are not counted.
    text = (f"{_plural(len(build), 'layer image')} to build, {len(reval)} to revalidate, {len(reuse)} already "
            f"built; {_plural(moved, 'release tag')} move")
    return text + (f", {created} new" if created else "") + f" ({changed} of {_plural(len(d.stacks), 'stack')} change)"


def _tag_lines(s: StackDiff) -> list[tuple[str, str]]:
    """(tag, what happens to it) in the order of the stack's templates."""
    return [(t, "new" if t in s.created else "moves") for t in s.tags]


def _stack_head(s: StackDiff) -> str:
    if s.status == "unchanged":
        return f"{s.name}: unchanged ({_plural(len(s.nodes), 'layer image')} reused)"
    counts = Counter(n.action for n in s.nodes if n.change != "unchanged")
    what = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()) if k != "none")
    return f"{s.name}: {s.status}" + (f" ({what})" if what else "")


def spec_table(d: SpecDiff) -> str:
    lines = [f"imgbuild diff: {d.file} at {d.old} -> {d.new}"]
    lines += [f"note: {n}" for n in d.notes]
    for s in d.stacks:
        lines.append("")
        lines.append(_stack_head(s))
        if s.status == "unchanged":
            continue
        lines += [f"  note: {n}" for n in s.notes]
        if s.tags:
            lines.append("  release tags once merged:")
            lines += [f"    {what:<6}{t}" for t, what in _tag_lines(s)]
        width = max(len(n.layer) for n in s.nodes)
        lines.append(f"  {'#':<3}{'layer':<{width + 2}}{'change':<11}{'action':<12}key")
        for n in s.nodes:
            lines.append(f"  {n.position:<3}{n.layer:<{width + 2}}{n.change:<11}{n.action:<12}{_key(n)}"
                         + (f"  (replaces {n.was})" if n.was else "") + (f"  ({n.note})" if n.note else ""))
            for c in n.causes:
                lines.append(f"       {c.input}: {short(c.detail)}")
                lines += [f"         {line}" for line in c.lines]
    lines += ["", "summary: " + _summary(d)]
    return "\n".join(lines)


def spec_markdown(d: SpecDiff) -> str:
    lines = [f"### imgbuild diff: `{d.file}` at {d.old} → {d.new}", "", f"**{_summary(d)}**", ""]
    lines += [f"> note: {_md(n)}" for n in d.notes]
    unchanged = [s.name for s in d.stacks if s.status == "unchanged"]
    for s in d.stacks:
        if s.status == "unchanged":
            continue
        lines += ["", f"#### {_md(_stack_head(s))}", ""]
        lines += [f"- note: {_md(n)}" for n in s.notes]
        if s.tags:
            # Tags hold only [A-Za-z0-9_.-] and the registry's name (the spec's grammar): shown as code, inert.
            lines.append("Release tags once merged: " + ", ".join(f"`{inert(t)}` ({what})" for t, what in _tag_lines(s)))
            lines.append("")
        lines += ["| # | layer | change | action | key | why |", "|---|---|---|---|---|---|"]
        for n in s.nodes:
            if n.change == "unchanged":
                continue
            action = f"**{n.action}**" if n.action == "build" else n.action
            lines.append(f"| {n.position} | {_md(n.layer)} | {n.change} | {action} | `{_key(n)}` | {_md(_why(n))} |")
        reused = sum(1 for n in s.nodes if n.change == "unchanged")
        if reused:
            lines += ["", f"{_plural(reused, 'unchanged layer image')} reused."]
        for n in s.nodes:
            for c in n.causes:
                if c.lines:
                    lines += ["", f"<details><summary>{n.layer}: rendered Dockerfile lines that change</summary>",
                              "", "```diff", *c.lines, "```", "</details>"]
    if unchanged:
        lines += ["", "Unchanged: " + ", ".join(unchanged) + "."]
    return "\n".join(lines)


# -- image diff ------------------------------------------------------------------------------------

def _elide(old: str | None, new: str | None, width: int = 100) -> tuple[str, str]:
    """Long values that differ only in their tail (a RUN line) are shown from shortly before it."""
    old, new = short(old), short(new)
    if old == "-" or new == "-" or max(len(old), len(new)) <= width:
        return old, new
    common = 0
    while common < min(len(old), len(new)) and old[common] == new[common]:
        common += 1
    cut = old.rfind(" ", 0, max(0, common - 30)) + 1
    return ("…" + old[cut:] if cut else old), ("…" + new[cut:] if cut else new)


def _values(c: Change) -> str:
    if c.old is None or c.new is None:
        return short(c.new if c.old is None else c.old)
    return " -> ".join(_elide(c.old, c.new))


def _counts(s: Section) -> str:
    counts = Counter(c.direction for c in s.changes)
    parts = [f"{counts[d]} {d}" for d in DIRECTIONS if counts[d]]
    if not parts and not s.same and s.note:
        return s.note
    text = ", ".join(parts + [f"{s.same} same"]) if parts else f"same ({s.same})"
    return text + (f"; {s.note}" if s.note else "")


def _describe(i: Image) -> str:
    made = (f"imgbuild manifest of {short(str(i.recorded.get('layer')))} (key {short(str(i.recorded.get('key'))[:12])})"
            if i.recorded else "no imgbuild manifest")
    return f"{short(i.digest)}  {len(i.layers)} layers, {human_size(i.size)}, {made}"


def _transfer(d: ImageDiff) -> str:
    ratio = d.bytes_fetched / d.total_size if d.total_size else 0
    return (f"read {human_size(d.bytes_fetched)} of registry metadata for {human_size(d.total_size)} of images "
            f"({ratio:.4%}) in {d.seconds:.2f} s; no layer pulled")


def _not_compared(d: ImageDiff) -> str:
    why = next(s.note for s in d.sections if not s.compared)
    return f"not compared ({why}): " + ", ".join(d.not_compared)


def _headline(d: ImageDiff) -> str:
    if not d.different:
        return "equal: same image digest" if d.a.digest == d.b.digest else "equal in everything compared"
    changed = [f"{s.title} ({len(s.changes)})" for s in d.sections if s.changes]
    return "different: " + (", ".join(changed) if changed else "digest only")


def image_table(d: ImageDiff) -> str:
    lines = ["imgbuild diff: images",
             f"  A  {d.a.ref}", f"     {_describe(d.a)}", f"  B  {d.b.ref}", f"     {_describe(d.b)}",
             _headline(d)]
    if d.versions:
        moved = {c.name: c.direction for s in d.sections if s.id == "versions" for c in s.changes}
        width = max(len(n) for n, _, _ in d.versions) + 2
        col = max(len(str(a)) for _, a, _ in d.versions) + 2
        lines += ["", f"{'versions':<{width + 2}}{'A':<{col}}B"]
        lines += [f"  {short(n):<{width}}{short(str(a or '-')):<{col}}{short(str(b or '-')):<{col}}{moved.get(n, '')}".rstrip()
                  for n, a, b in d.versions]
    lines.append("")
    for s in d.sections:
        if (s.id == "versions" and d.versions) or not s.compared:
            continue
        lines.append(f"{s.title}: {_counts(s)}")
        width = min(40, max((len(c.name) for c in s.changes), default=0))
        for c in s.changes:
            lines.append(f"  {c.direction:<10}{short(c.name):<{width}}  {_values(c)}" + (f"  ({short(c.note)})" if c.note else ""))
    lines += [_not_compared(d)] if d.not_compared else []
    lines += [_transfer(d)]
    return "\n".join(lines)


def image_markdown(d: ImageDiff) -> str:
    lines = [f"### imgbuild diff: `{d.a.ref}` → `{d.b.ref}`", "", f"**{_headline(d)}**", "",
             "| | A | B |", "|---|---|---|",
             f"| digest | `{short(d.a.digest)}` | `{short(d.b.digest)}` |",
             f"| size | {human_size(d.a.size)} ({len(d.a.layers)} layers) | {human_size(d.b.size)} ({len(d.b.layers)} layers) |"]
    moved = {c.name: c.direction for s in d.sections if s.id == "versions" for c in s.changes}
    lines += [f"| {f'**{_md(n)}** ({moved[n]})' if n in moved else _md(n)} | {_md(str(a or '-'))} | {_md(str(b or '-'))} |"
              for n, a, b in d.versions]
    same = []
    for s in d.sections:
        if s.id == "versions" and d.versions:
            continue
        if not s.changes:
            if s.compared:
                same.append(f"{s.title} ({s.same})" if s.same else f"{s.title}: {s.note}")
            continue
        rows = ["| change | name | A | B | note |", "|---|---|---|---|---|"]
        for c in s.changes:
            old, new = _elide(c.old, c.new)
            rows.append(f"| {c.direction} | {_md(c.name)} | {_md(old)} | {_md(new)} | {_md(c.note)} |")
        head = f"{s.title}: {_counts(s)}"
        if len(s.changes) > LONG:
            lines += ["", f"<details><summary>{_md(head)}</summary>", "", *rows, "", "</details>"]
        else:
            lines += ["", f"#### {_md(head)}", "", *rows]
    if same:
        lines += ["", "Same: " + ", ".join(same) + "."]
    if d.not_compared:
        lines += ["", "N" + _not_compared(d)[1:] + "."]
    lines += ["", f"<sub>{_transfer(d)}</sub>"]
    return "\n".join(lines)


__all__ = ["render", "spec_table", "spec_markdown", "image_table", "image_markdown"]
