"""Everything imgbuild judges before building, assembled in one place: preflight (IB0xx), the spec's
own lint and the lint of every rendered Dockerfile (IB1xx), all on the same facts (the lock file's
measurements when there is one). `check`, `lint FILE.yaml` and the build gate all call `review`, so a
build refuses exactly what `check` refuses.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, replace
from functools import cache
from typing import Callable

from packaging.utils import canonicalize_name

from builder.errors import PreflightError, SpecError
from builder.core.yamlsrc import dotted
from builder.load.intent import layer_intents, unresolved_refs
from builder.core import catalog
from builder.rules import enginefit
from builder.rules import lint as lint_module
from builder.rules import preflight as preflight_module
from builder.rules.findings import Finding, errors, ordered, strict as make_strict, summary
from builder.rules.lint import lint_rendered, lint_spec
from builder.core.lockfile import Lock
from builder.plan.keys import Plan, python_entry
from builder.rules.enginefit import engine_findings
from builder.rules.preflight import preflight
from builder.load.spec import Spec, Stack


@dataclass(frozen=True)
class Review:
    findings: list
    lock: Lock | None
    plan: Plan                # what was rendered and linted (the prepared plan)

    @property
    def nodes(self) -> int:
        """Distinct layer nodes rendered and linted."""
        return len(self.plan.nodes)

    @property
    def facts(self) -> str:
        return f"measured facts from {self.lock.file}" if self.lock else "no lock file: facts declared or from the catalog"

    @property
    def summary(self) -> str:
        return summary(self.findings)

    def errors(self) -> list[Finding]:
        return errors(self.findings)


@cache
def known_rules() -> frozenset:
    """Every rule id a finding can carry (what a waiver may name): the ids the preflight and lint modules
    and this one write, and the catalog's DeepSpeed rules."""
    import sys
    text = "".join(inspect.getsource(m) for m in (lint_module, preflight_module, enginefit, sys.modules[__name__]))
    return frozenset(re.findall(r"[\"'](IB\d{3})[\"']", text)) | {i.rule for i in catalog.ds_incompatibilities()}


def check_waivers(spec: Spec, stacks: list[Stack]) -> None:
    """A waiver names a rule a finding can carry, refused with file, line and key like any spec error."""
    for stack in stacks:
        for w in stack.waivers:
            if w.rule not in known_rules():
                key = w.key + ("rule",)
                raise SpecError(f"{w.rule!r} is not a known rule id", file=spec.file,
                                line=spec.doc.line(key) if spec.doc else None, key=dotted(key),
                                hint="rules: " + ", ".join(sorted(known_rules())))


def review(prepared, strict: bool = False, require_locked: bool = False, engine: str | None = None) -> Review:
    """The judgement of a prepared plan (builder.prepared: its spec, stacks, lock and plan, made with
    intent tolerated: unresolved intent is a finding here, IB098). strict: warnings are errors (waived
    ones excepted). require_locked: a base without a lock entry measured from the image stacks.yaml names
    now is an error (IB092), for a site CI that wants every fact measured rather than declared or from the
    catalog."""
    spec, stacks, lock, plan = prepared.spec, prepared.stacks, prepared.lock, prepared.plan
    check_waivers(spec, stacks)
    intent = unresolved(spec, plan, stacks)
    # A layer of unresolved intent is rendered from its intent (nothing is built from it): what lint says of
    # its floating pins is what IB098 already says.
    said = {dotted((node.layer.section, node.layer.name)) for _, node, _ in floating_nodes(plan, stacks)}
    rendered = [f for f in lint_rendered(spec, plan, lock) if not (f.rule in FLOATING_LINT and f.key in said)]
    found = (preflight(spec, stacks, lock) + lint_spec(spec, stacks, lock) + rendered + replaced(spec, stacks, lock)
             + intent + fetched_binaries(spec, plan, stacks, lock)
             + engine_findings(spec, plan.narrowed([s.name for s in stacks]), engine))
    if require_locked:
        found += _unlocked(spec, stacks, lock) + unpinned(spec, plan, stacks, "error")
    found = unknown_bases(spec, stacks, lock, found)
    found = _waive(spec, stacks, found, set(rendered))
    return Review(ordered(make_strict(found) if strict else found), lock, plan)


def unknown_bases(spec: Spec, stacks: list[Stack], lock: Lock | None, found: list[Finding]) -> list[Finding]:
    """IB004: a base the catalog has no record of, that declares nothing it provides and that no lock entry
    measured: nothing is known of it, so every rule that needs its torch, CUDA or Python says so, once per stack
    (NGC 25.13 gave nine such lines and none saying why), and a base with no rule that needs it passed --strict
    unseen. One finding for the base instead (for NGC, with the months the catalog knows); the unknowns of its
    stacks are folded into it. A warning, not an unknown: that nothing vouches for the image is itself known, and
    --strict refuses it. An NGC month that cannot exist (13 and above) is an error: the pull would fail."""
    out, dropped_all = [], set()
    for base in {s.base.name: s.base for s in stacks}.values():
        if catalog.base_record(base.family, base.image) is not None:
            continue
        entry = lock.bases.get(base.name) if lock is not None else None
        framework = catalog.NGC_FRAMEWORK.get(base.family)
        m = catalog.NGC_TAG.search(base.image)
        impossible = framework is not None and m is not None and not 1 <= int(m.group(2).split(".")[1]) <= 12
        # What the base declares it provides does not make a month that cannot exist pullable.
        if not impossible and (base.provides or (entry is not None and base.locked_by(entry, spec.site) and entry.facts)):
            continue
        users = [s.name for s in stacks if s.base.name == base.name]
        # What the base's being unknown causes: the unknowns of its stacks, and their tag fields nothing gives (IB005).
        dropped = [f for f in found if (f.severity == "unknown" or f.rule == "IB005") and f.stack in users]
        dropped_all.update(id(f) for f in dropped)
        key = ("bases", base.name, "image")
        folded = (f"; {len(dropped)} check(s) of {', '.join(users)} cannot be judged until they are known"
                  if dropped else "")
        if framework is None or m is None:
            # Any other base nobody knows: no record, nothing declared, never measured. --strict refuses it.
            out.append(Finding(
                rule="IB004", severity="warning", file=spec.file, line=spec.doc.line(key) if spec.doc else None,
                key=dotted(key), stack=users[0],
                message=f"nothing is known of base {base.name} ({base.image}): the catalog has no record of it, it "
                        "declares nothing it provides, and no lock entry measured it" + folded,
                source="the catalog's bases (imgbuild facts lists them)",
                fix=f"measure it (imgbuild lock base={base.name}), or declare bases.{base.name}.provides "
                    "(python, os, and torch and cuda where it has them)"))
            continue
        months = sorted(catalog.ngc_releases(framework), key=lambda r: tuple(map(int, r.split("."))))
        month = m.group(2)
        name = f"NGC {catalog.FRAMEWORK_NAME[framework]} {month}"
        out.append(Finding(
            rule="IB004", severity="error" if impossible else "warning", file=spec.file,
            line=spec.doc.line(key) if spec.doc else None, key=dotted(key), stack=users[0],
            message=(f"{name} is not a month NGC can have: no such image exists" if impossible else
                     f"{name} is not a release the catalog knows (it knows {months[0]} to {months[-1]}), and the "
                     f"base declares nothing it provides: its torch, CUDA and Python are unknown") + folded,
            source=f"the catalog's NGC {catalog.FRAMEWORK_NAME[framework]} months (imgbuild facts lists them)",
            fix=("name a month that exists (imgbuild facts lists the ones the catalog knows)" if impossible else
                 f"measure it (imgbuild lock base={base.name}), declare bases.{base.name}.provides, or add the "
                 f"month to the site's catalog (site.catalog: ngc_{framework}.releases)")))
    return [f for f in found if id(f) not in dropped_all] + out


def _unlocked(spec: Spec, stacks: list[Stack], lock: Lock | None) -> list[Finding]:
    out = []
    for stack in stacks:
        name, base = stack.name, stack.base
        entry = lock.bases.get(base.name) if lock is not None else None
        if entry is not None and base.locked_by(entry, spec.site):
            continue
        why = ("no lock file" if lock is None else f"{lock.file} has no entry for it" if entry is None
               else f"{lock.file} was probed from {entry.image}@{entry.digest}, not the image stacks.yaml names now")
        key = ("bases", base.name)
        out.append(Finding(rule="IB092", severity="error", message=f"base {base.name} is not locked ({why}); "
                           "--require-locked wants every base measured", file=spec.file,
                           line=spec.doc.line(key) if spec.doc else None, key=dotted(key), stack=name,
                           fix=f"imgbuild lock base={base.name}, and commit the lock file"))
    return out


def replaced(spec: Spec, stacks: list[Stack], lock: Lock | None) -> list[Finding]:
    """IB097: a layer's resolved set (the lock file) replaces a package the image beneath it holds: code
    compiled against the old one (TE, Apex, DeepSpeed's ops) breaks, and the base's blessed versions are
    gone without a word. Pulled in by another requirement, it is an error, with the resolver's chain; asked
    for by the layer itself, a warning (it says so); torch, where the layer declares replace_torch, neither
    (IB070 and IB071 judge a declared swap)."""
    out, seen = [], set()
    for stack in stacks:
        name = stack.name
        for layer in stack.chain:
            entry = python_entry(spec, lock, stack, layer)
            if entry is None or layer.name in seen:
                continue
            seen.add(layer.name)
            swap = dict(layer.params).get("replace_torch")
            own = _own_before(lock, stack, layer, entry)
            for d in entry.dists().values():
                if d.replaces is None or (swap and d.name.lower() == "torch") or d.name.lower() in own:
                    continue
                key = (layer.section, layer.name)
                chain = "; ".join(d.required_by) if d.required_by else "asked for by the layer"
                out.append(Finding(
                    rule="IB097", severity="warning" if d.requested else "error", file=spec.file,
                    line=spec.doc.line(key) if spec.doc else None, key=dotted(key), stack=name,
                    message=f"layer {layer.name}'s resolved set replaces {d.name} {d.replaces} of the image beneath "
                            f"with {d.version} (required by: {chain})",
                    source=f"{lock.file}: python.{layer.name}",
                    fix=f"pin {d.name}=={d.replaces} in the layer (what beneath it holds), or change the requirement "
                        f"that asks for {d.version}; then imgbuild lock python={layer.name}"))
    return out


def _own_before(lock: Lock, stack: Stack, layer, entry) -> set:
    """The distributions a stack's first layer installed itself before its first pip command (the venv's own
    pip and setuptools, from ensurepip): what it "replaces" there is not the image beneath's. Known where the
    lock measured the base's environment; a base without Python holds none."""
    if stack.chain[0].name != layer.name:
        return set()
    base = lock.bases.get(stack.base.name)
    if base is None:
        return set()
    env = next((p.environment for p in base.platforms.values() if p.environment), None) or base.environment
    if env is None:
        return set()
    held = {d.split("==", 1)[0].lower() for d in env.get("dists") or ()}
    return {d.name.lower() for d in entry.dists().values() if d.replaces is not None and d.name.lower() not in held}


def fetched_binaries(spec: Spec, plan: Plan, stacks: list[Stack], lock: Lock | None) -> list[Finding]:
    """IB099: a layer's resolved set builds a package from source (an sdist, a git checkout, a folder) whose
    setup.py first downloads a prebuilt wheel from its project's release unless a variable says to compile
    (flash-attn, causal-conv1d, mamba-ssm): that binary is in no lock hash, so the same key can hold another
    one, and it is compiled for the project's GPUs, not the stack's. An error where the step's Dockerfile
    does not set the variable to TRUE (build_env, or the kind's own fragment as flash-attn's does)."""
    fetchers = catalog.prebuilt_fetchers()
    out, seen = [], set()
    for stack in stacks:
        name = stack.name
        for node in plan.chain(name):
            entry = python_entry(plan.spec, lock, stack, node.layer) if node.locked else None
            if entry is None or node.key in seen:
                continue
            seen.add(node.key)
            for d in entry.dists().values():
                var = fetchers.value.get(canonicalize_name(d.name))
                if var is None or d.url.split("#")[0].endswith(".whl"):
                    continue
                if re.search(rf"\b{var}=['\"]?TRUE\b", node.dockerfile):
                    continue
                key = (node.layer.section, node.layer.name)
                out.append(Finding(
                    rule="IB099", severity="error", file=spec.file, line=spec.doc.line(key) if spec.doc else None,
                    key=dotted(key), stack=name, source=fetchers.source,
                    message=f"layer {node.name}'s resolved set builds {d.name} {d.version} from source ({d.url}); "
                            f"its setup.py first downloads a prebuilt wheel from the project's release unless "
                            f"{var}=TRUE: a binary no lock hash covers, built for the project's GPUs, not the stack's arch list",
                    fix=f"build_env: {{{var}: \"TRUE\"}} on layer {node.name} (compiled here, for the stack's arch "
                        f"list), or install that wheel by URL so the lock hashes it"))
    return out


FLOATING_LINT = ("IB101", "IB103")   # lint's floating git ref and unpinned pip install


def floating_nodes(plan, stacks: list[Stack]) -> list[tuple[str, object, list]]:
    """(stack name, node, its floating values) for each layer, once, whose intent the lock does not resolve:
    a git ref without a commit, or floating requirements without a current set."""
    out, seen = [], set()
    for name in (s.name for s in stacks):
        for node in plan.chain(name):
            floating = unresolved_refs(node.layer) or ([] if node.locked else layer_intents(node.layer))
            if floating and node.name not in seen:
                seen.add(node.name)
                out.append((name, node, floating))
    return out


def unresolved(spec: Spec, plan, stacks: list[Stack]) -> list[Finding]:
    """IB098: a layer whose requirements float (a range, a bare name, a git tag or branch, a wheel URL
    without its hash, a requirements file) and that the lock file has no current set for: an error, since
    nothing is built from intent (builder.load.intent). One finding per layer, naming each floating value."""
    out = []
    for name, node, floating in floating_nodes(plan, stacks):
        key = (node.layer.section, node.layer.name, "params", floating[0][0])
        values = "; ".join(f"{what!r} ({why})" for _, what, why in floating[:6])
        out.append(Finding(rule="IB098", severity="error", file=spec.file,
                           line=spec.doc.line(key) if spec.doc else None, key=dotted(key), stack=name,
                           message=f"layer {node.name} states intent that the lock file does not resolve yet: "
                                   f"{values}" + (f" and {len(floating) - 6} more" if len(floating) > 6 else ""),
                           fix=(f"imgbuild lock python={node.name} (records the exact versions and hashes; for this "
                                f"stack's chain: stack={name})"
                                if not unresolved_refs(node.layer) else
                                "imgbuild lock (records the commit of each git ref and the sha256 of each file by "
                                "URL)") + ", and commit the lock file"))
    return out


def unpinned(spec: Spec, plan, stacks: list[Stack], severity: str) -> list[Finding]:
    """IB096: a layer whose pip commands have no resolved set in the lock file (imgbuild lock python=NAME),
    so pip resolves them at build time and the same key can give another image next month. An error
    under --require-locked (what CI uses), a warning printed by every build otherwise."""
    from builder.plan.pinning import PIP
    out, seen = [], set()
    for name in (s.name for s in stacks):
        for node in plan.chain(name):
            if node.locked or PIP not in node.dockerfile or node.key in seen or layer_intents(node.layer):
                continue
            seen.add(node.key)
            key = (node.layer.section, node.layer.name)
            out.append(Finding(rule="IB096", severity=severity, file=spec.file,
                               line=spec.doc.line(key) if spec.doc else None, key=dotted(key), stack=name,
                               message=f"layer {node.name} installs with pip and its set is not locked: pip resolves "
                                       "it at build time, so a rebuild of the same key can install other versions",
                               fix=f"imgbuild lock python={node.name} (for this stack's chain: stack={name}), and "
                                   "commit the lock file"))
    return out


def _waive(spec: Spec, stacks: list[Stack], found: list[Finding], rendered: set) -> list[Finding]:
    """Mark the warnings and unknowns each stack waives, and report every waiver that waived nothing
    (IB095), so that none outlives its reason. A finding about a rendered layer image concerns every
    selected stack whose chain holds that layer, and one about a base (IB004) every selected stack on it: it
    is waived only if all of them waive it. Errors are never waived."""
    by_layer: dict = {}
    for stack in stacks:
        for layer in stack.chain:
            by_layer.setdefault(dotted((layer.section, layer.name)), []).append(stack.name)
    on_base = {f.key: [s.name for s in stacks if dotted(("bases", s.base.name, "image")) == f.key]
               for f in found if f.rule == "IB004"}
    waivers = {stack.name: {w.rule: w for w in stack.waivers} for stack in stacks}
    used: set = set()
    out = []
    for f in found:
        concerned = set(by_layer.get(f.key, [])) | {f.stack} if f in rendered else \
            set(on_base[f.key]) | {f.stack} if f.rule == "IB004" else {f.stack}
        matching = [waivers.get(s, {}).get(f.rule) for s in concerned]
        if f.severity == "error" or not all(matching):
            out.append(f)
            continue
        used.update((s, f.rule) for s in concerned)
        out.append(replace(f, waived=waivers[f.stack][f.rule].reason))
    for stack in stacks:
        name = stack.name
        for w in stack.waivers:
            if (name, w.rule) not in used:
                out.append(Finding(rule="IB095", severity="warning", file=spec.file,
                                   line=spec.doc.line(w.key) if spec.doc else None, key=dotted(w.key), stack=name,
                                   message=f"the waiver of {w.rule} waives nothing in this stack: no warning or "
                                           f"unknown {w.rule} here (errors cannot be waived)",
                                   fix="remove the waiver, or fix what it was for"))
    return out


def gate(prepared, say: Callable[[str], None], strict: bool = False, require_locked: bool = False,
         engine: str | None = None) -> Review:
    """Before a build or a release: the whole review of the prepared plan, printed; any error refuses. A
    layer whose pip set is not locked is said (IB096), and refused under require_locked."""
    spec, stacks = prepared.spec, prepared.stacks
    result = review(prepared, strict, require_locked, engine)
    for f in result.findings:
        say(f.render())
    bad = result.errors()
    if bad:
        names = sorted({f.stack for f in bad if f.stack})
        stacks_ = f" (stacks: {', '.join(names)})" if names else ""
        raise PreflightError(f"{len(bad)} error(s) found before building{stacks_}; nothing was built",
                             hint="the findings above name the key, the rule and the fact (imgbuild check shows the same)")
    if not require_locked:   # what goes on to be built with pip resolving at build time is said
        for f in unpinned(spec, result.plan, stacks, "warning"):
            say(f.render())
    line = locked_line(spec, result.plan, stacks)
    if line:
        say(line)
    return result


def locked_line(spec: Spec, plan, stacks: list[Stack]) -> str | None:
    """One line on what the lock file holds for the pip layers about to be built: installed from their
    locked sets, or resolved by pip at build time (the IB096 warnings above name those)."""
    from builder.plan.pinning import PIP
    from builder.core.lockfile import lock_path
    locked, loose, seen = [], [], set()
    for name in (s.name for s in stacks):
        for node in plan.chain(name):
            if node.key in seen or not (node.locked or PIP in node.dockerfile):
                continue
            seen.add(node.key)
            (locked if node.locked else loose).append(node.name)
    if not locked and not loose:
        return None
    where = lock_path(spec.file).name
    if not loose:
        return f"lock: every pip layer's set is locked ({where}): {', '.join(locked)}"
    return (f"lock: {len(locked)} of {len(locked) + len(loose)} pip layer(s) locked ({where})"
            + (f": {', '.join(locked)}" if locked else "") + f"; resolved at build time: {', '.join(loose)}")


__all__ = ["review", "gate", "Review"]
