"""`imgbuild probe` and `imgbuild lock`: measure what a base image really holds, and record what each
base resolved to (its digest) with those measurements in stacks.lock.yaml beside stacks.yaml.

Preflight prefers measured facts over declared and catalog ones. The probe runs the image with no
network and only its own interpreter; an image without Python (the mirrored Debian base) reports
its OS, and everything Python would have measured stays unknown rather than "not installed".
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Callable

import yaml

from builder.core import platforms as plat
from builder.ship.bases import resolve
from builder.ship.engines import engines
from builder.ship.hostconf import HostConf
from builder.ship.pipeline import assemble_context
from builder.ship.resolve import resolve_layer, stamp
from builder.ship.engine import Engine
from builder.ship.measure import measure, probe
from builder.errors import ImgbuildError, SpecError
from builder.plan.layout import layer_repo
from builder.core.lockfile import LOCK_VERSION, Lock, lock_path, parse_lock
from builder.plan.keys import layer_definition, make_plan, python_entry
from builder.ship.registry import Registry
from builder.load.intent import HOST_PINNED, Intents, layer_intents
from builder.load.spec import Spec

def stack_of(spec: Spec, layer: str):
    """The first stack whose chain holds `layer` (its image there is the one measured)."""
    found = [s for s in spec.stacks.values() if layer in [d.name for d in s.chain]]
    if not found:
        raise SpecError(f"layer {layer!r} is in no stack's chain: there is no image of it to measure",
                        hint="layers in stacks: " + ", ".join(sorted({d.name for s in spec.stacks.values()
                                                                       for d in s.chain})))
    return found[0]


def chain_plan(spec: Spec, stack, base_digest, lock, intent: bool = True):
    """`imgbuild lock`'s view of one stack's chain: planned on the base digest it is locking, with the lock as
    it stands in this run (or with a layer's entry left out, to resolve its intent). Not the prepared plan:
    each entry written moves the lock, and with it the keys of the layers above, so a lock run plans again
    here, its one place, as it goes (intent: a layer of unresolved intent is what it resolves)."""
    return make_plan(spec, [stack], {stack.base.name: base_digest}, lock=lock, intent=intent)


def layer_image(spec: Spec, stack, name: str, base_digest: str) -> tuple[str, str]:
    """The registry reference (repository:key) and digest of layer `name`'s image in `stack` on that base."""
    node = next(n for n in chain_plan(spec, stack, base_digest, spec.lock, intent=False).chain(stack.name)
                if n.name == name)
    repo = layer_repo(spec.site.namespace, name)
    digest = Registry(spec.site.registry).verified_digest(repo, node.short)
    if not digest:
        raise SpecError(f"layer {name!r} ({node.short[:12]}) is not in {spec.site.registry}: there is no image to "
                        "measure", hint=f"build it first: imgbuild build stack={stack.name}")
    return f"{spec.site.registry}/{repo}:{node.short}", digest


def resolve_entry(spec: Spec, name: str, engine: Engine, hostconf: HostConf, log: Path,
                  progress: Callable[[str], None] = lambda line: None, upgrade: frozenset = frozenset(),
                  stack=None, platform: str | None = None, current: Lock | None = None) -> dict:
    """Resolve what layer `name`'s pip commands install on the image beneath it (builder.ship.resolve),
    as a lock file entry. The image beneath must be in the registry: the base by its digest, or the layer
    beneath by its key (built first, with `imgbuild build` or `imgbuild lock stack=NAME`). upgrade:
    canonical distribution names that may move; with it, every other distribution of the current entry is
    held at its locked version (`lock --upgrade NAME`). stack: the Stack whose chain it is resolved on
    (default the first that holds it); a layer on chains that differ beneath it has an entry for each.
    platform: the platform resolved for (default the stack's first); each has its own entry, resolved on
    its own image beneath, under QEMU where the engine runs another platform. current: the lock as it
    stands in this run (what stacks.yaml was read with, or what this run wrote since)."""
    stack = stack or stack_of(spec, name)
    platform = platform or stack.platforms[0]
    base_digest = resolve(spec, [stack.name]).require()[stack.base.name]
    plan = chain_plan(spec, stack, base_digest, current)
    node = next(n for n in plan.chain(stack.name, platform) if n.name == name)
    entry = python_entry(spec, current, stack, spec.layers[name], platform)
    keep = None
    if upgrade and entry is not None:
        keep = sorted(f"{d.name}=={d.version}" for key, d in entry.dists().items()
                      if key not in upgrade and d.sha256 is not None and not d.direct)
    if node.locked:   # resolve the layer's intent (its requirements as stacks.yaml writes them), not its lock
        unlocked = replace(current, python={k: v for k, v in current.python.items() if k != name},
                           python_all={k: v for k, v in current.python_all.items() if k != name})
        node = next(n for n in chain_plan(spec, stack, base_digest, unlocked).chain(stack.name, platform)
                    if n.name == name)
    if node.parent is None:
        parent_ref = node.base_ref
    else:
        below = plan.nodes[node.parent]
        repo = layer_repo(spec.site.namespace, below.name)
        digest = Registry(spec.site.registry).verified_digest(repo, below.short)
        if not digest:
            raise SpecError(f"layer {name!r} is resolved on the image beneath it, {below.name!r} ({below.short[:12]}), "
                            f"which is not in {spec.site.registry}",
                            hint=f"build it first (imgbuild build stack={stack.name}), or lock the stack from the "
                                 f"bottom up: imgbuild lock stack={stack.name}")
        parent_ref = f"{spec.site.registry}/{repo}@{digest}"
    with tempfile.TemporaryDirectory(prefix="imgbuild-resolve-context-") as tmp:
        context = assemble_context(node, hostconf, Path(tmp) / "context")
        beneath: dict = {}
        interpreter: dict = {}
        on = engines(engine, [platform])[platform]
        steps = resolve_layer(on.engine, node.dockerfile, context, parent_ref, node.build_args, hostconf, log, progress,
                              keep=keep, beneath=beneath, platform=platform, environment=interpreter)
    # Valid while the layer, those beneath it and the base as named are unchanged (builder.plan.keys.python_entry).
    out = {"stack": stack.name, "parent": parent_ref, "definition": layer_definition(spec, stack, name, None, platform),
           "resolved": stamp(), "steps": [[_dist(d) for d in step] for step in steps],
           # What decided pip's answer beside the layer's own definition: the interpreter and platform, and what
           # the image beneath held (its base's environment is in bases:, compared when the base is made again).
           "environment": {"python": interpreter.get("python_full_version"), "platform": platform,
                           "beneath": sorted(f"{n}=={v}" for n, v in beneath.items())}}
    if platform != plat.DEFAULT:   # entries for linux/amd64 read as they always did
        out["platform"] = platform
    intents = resolved_intents(spec.layers[name], steps, beneath)
    if intents:
        out["intents"] = intents
    return out


def resolved_intents(layer, steps, beneath: dict | None = None) -> list[dict]:
    """Each floating value of the layer as stacks.yaml writes it, beside what the resolution made of it: the
    exact requirement (NAME==VERSION, NAME @ git+URL@COMMIT, NAME @ URL with its sha256), the version the
    image beneath already holds (pip leaves a satisfied requirement alone), or, for a requirements file,
    how many distributions its pip command installs."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    found = {canonicalize_name(d.name): d for step in steps for d in step}
    out = []
    for pname, what, why in layer_intents(layer):
        if why.startswith("a requirements file"):
            out.append({"intent": what, "locked": f"{sum(len(s) for s in steps)} distribution(s) of the layer"})
            continue
        if why in HOST_PINNED:
            continue   # pinned on the host, recorded under sources: or downloads:
        key = canonicalize_name(Requirement(what).name)
        d = found.get(key)
        held = (beneath or {}).get(key)
        locked = (f"{Requirement(what).name}=={held} (held by the image beneath)" if d is None and held
                  else "not installed (a marker left it out)" if d is None
                  else f"{d.name} @ {d.url}" if d.url.startswith("git+")
                  else f"{d.name} @ {d.url.split('#')[0]}#sha256={d.sha256}" if d.direct
                  else f"{d.name}=={d.version}")
        out.append({"intent": what, "locked": locked})
    return out


def sources_section(intents: Intents) -> list[dict]:
    """The lock file's `sources:`: each git ref stacks.yaml names now, with the commit resolved by this run or
    recorded before (kept); refs no layer names any more are dropped."""
    out = []
    for repo, ref in sorted(intents.used):
        commit = intents.found.get((repo, ref)) or intents.refs.get((repo, ref))
        if commit:
            out.append({"repo": repo, "ref": ref, "commit": commit,
                        "resolved": intents.stamps.get((repo, ref)) or stamp()})
    return out


def downloads_section(intents: Intents) -> list[dict]:
    """The lock file's `downloads:`: each file stacks.yaml names by URL without a sha256, with the sha256
    fetched by this run or recorded before (kept); URLs no layer names that way any more are dropped."""
    out = []
    for url in sorted(intents.used_urls):
        digest = intents.found_digests.get(url) or intents.digests.get(url)
        if digest:
            out.append({"url": url, "sha256": digest, "resolved": intents.digest_stamps.get(url) or stamp()})
    return out


def lock_base(spec: Spec, name: str, stacks: list[str], engine: Engine, say: Callable[[str], None],
              resolver: Callable = resolve) -> dict:
    """A base's lock entry: the digest its reference names now and what was measured inside it. Where the
    reference is an index (NGC publishes linux/amd64 and linux/arm64 under one tag), one digest and one
    set of measurements per platform its stacks are built for, each probed on that platform (under QEMU
    where the engine runs another)."""
    base = spec.bases[name]
    ref = base.ref(spec.site)
    found = resolver(spec, stacks, use_lock=False) if stacks else None
    got = found.require()[name] if found else base.digest
    if not got:
        raise SpecError(f"base {name!r} is used by no stack and declares no digest; nothing to resolve")
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if not isinstance(got, dict) or found.references.get(name) in got.values():   # one image, not an index
        digest = next(iter(got.values())) if isinstance(got, dict) else got
        facts, env = measure(engine, f"{ref}@{digest}", spec.kinds.values())
        say(f"{name}: {ref}@{digest}: " + ", ".join(f"{k} {v}" for k, v in facts.items() if v is not None))
        return {"image": ref, "digest": digest, "probed": now, "facts": facts, "environment": env}
    wanted = [p for p in plat.PLATFORMS if any(p in spec.stack(s).platforms for s in stacks)]
    on = engines(engine, wanted, say=say)
    per = {}
    for platform in wanted:
        digest = got[platform]
        facts, env = measure(on[platform].engine, f"{ref}@{digest}", spec.kinds.values(), platform=platform)
        per[platform] = {"digest": digest, "facts": facts, "environment": env}
        say(f"{name}: {ref} {platform}: {digest}: " + ", ".join(f"{k} {v}" for k, v in facts.items() if v is not None))
    return {"image": ref, "digest": found.references[name], "probed": now, "facts": per[wanted[0]]["facts"],
            "platforms": per}


def lock(spec: Spec, bases: list[str], engine: Engine, say: Callable[[str], None],
         layers: list[str] = (), python: list[str] = (), hostconf: HostConf | None = None,
         log_dir: Path | None = None, upgrade: frozenset = frozenset(),
         intents: Intents | None = None, python_stack=None,
         current=...) -> tuple[Path, list[ImgbuildError], Lock]:
    """Resolve and probe each named base, and each named layer's image in the registry, resolve what each
    layer of `python` installs with pip, then write the lock file (atomically; entries of others kept). A
    layer's base is locked with it: the layer's entry stands for that base digest. upgrade: distribution
    names that may move in a re-resolution (the rest held). intents: how stacks.yaml was read (the git refs
    it names, and those resolved while reading it), for the `sources:` section. Returns the path and the
    failures (a failed entry keeps its old one). python_stack: the Stack whose chain the python layers are
    resolved on (default each one's first stack). current: the lock as it stands in this run (default the one
    stacks.yaml was read with, Spec.lock); the Lock written is returned third."""
    old = spec.lock if current is ... else current
    entries = {name: {k: v for k, v in asdict(rec).items() if (k != "platforms" or v) and not (k == "environment" and v is None)}
               for name, rec in (old.bases if old else {}).items()}
    layer_entries = {name: asdict(rec) for name, rec in (old.layers if old else {}).items()}
    python_entries = {name: [_plain_python(rec) for rec in recs] for name, recs in (old.python_all if old else {}).items()}
    failures: list[ImgbuildError] = []
    users = {**{name: stack_of(spec, name) for name in [*layers, *python]},
             **({name: python_stack for name in python} if python_stack else {})}
    bases = list(dict.fromkeys([*bases, *(users[name].base.name for name in [*layers, *python])]))
    for name in bases:
        base = spec.bases[name]
        stacks = [s for s, st in spec.stacks.items() if st.base.name == name]
        ref = base.ref(spec.site)
        try:
            entries[name] = lock_base(spec, name, stacks, engine, say)
        except ImgbuildError as exc:
            failures.append(exc)
            say(f"{name}: not locked: {exc.message}")
            continue
    for name in layers:
        stack = users[name]
        try:
            found = entries.get(stack.base.name) or {}
            # The base as its reference names it (an index's own digest) is what the entry stands for, as
            # preflight reads it (Lock.base_digest); the chain is planned on each platform's entry.
            base_digest = found.get("digest")
            if not base_digest:
                raise SpecError(f"layer {name!r}: its base {stack.base.name!r} could not be locked")
            planned = {p: e["digest"] for p, e in found["platforms"].items()} if found.get("platforms") else base_digest
            ref, digest = layer_image(spec, stack, name, planned)
            facts = probe(engine, f"{ref.rsplit(':', 1)[0]}@{digest}", spec.kinds.values())
        except ImgbuildError as exc:
            failures.append(exc)
            say(f"{name}: not locked: {exc.message}")
            continue
        layer_entries[name] = {"image": ref, "digest": digest,
                               "probed": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                               "definition": layer_definition(spec, stack, name, base_digest), "facts": facts}
        say(f"{name}: {ref} ({digest[:19]}): " + ", ".join(f"{k} {v}" for k, v in facts.items() if v is not None))
    if python and log_dir is None:
        # A folder of this run's own: two locks at once (two CI jobs, two users) resolving layers of one
        # name would otherwise write one /tmp/resolve-NAME.log. Kept: the messages name the files in it.
        log_dir = Path(tempfile.mkdtemp(prefix="imgbuild-lock-"))
    for name, platform in ((n, p) for n in python for p in users[n].platforms):
        on = "" if len(users[name].platforms) == 1 else f"-{plat.arch(platform)}"
        log = log_dir / f"resolve-{name}{on}.log"
        say(f"{name}: resolving its pip commands on the image beneath it{f' for {platform}' if on else ''} (log {log})")
        try:
            entry = resolve_entry(spec, name, engine, hostconf or HostConf.from_env(), log, upgrade=upgrade,
                                  stack=users[name], platform=platform, current=old)
        except ImgbuildError as exc:
            failures.append(exc)
            say(f"{name}: not locked: {exc.message}")
            continue
        # One entry per definition of the layer and platform: this one replaces the entry of the same definition
        # (or of the same stack, whose chain changed) for its platform; the entries of its other chains stay.
        python_entries[name] = [e for e in python_entries.get(name, [])
                                if e.get("platform", plat.DEFAULT) != platform
                                or (e["definition"] != entry["definition"] and e["stack"] != entry["stack"])] + [entry]
        dists = [d for step in entry["steps"] for d in step]
        say(f"{name}: {len(dists)} distribution(s) on {entry['parent']}: "
            + ", ".join(f"{d['name']}=={d['version']}" for d in dists))
    path = lock_path(spec.file)
    data = {"version": LOCK_VERSION, "bases": dict(sorted(entries.items()))}
    if layer_entries:
        data["layers"] = dict(sorted(layer_entries.items()))
    if python_entries:   # a layer with one entry is written as a mapping, as before; with several, as a list
        data["python"] = {name: (recs[0] if len(recs) == 1 else sorted(recs, key=lambda r: r["stack"]))
                          for name, recs in sorted(python_entries.items()) if recs}
    sources = sources_section(intents) if intents is not None else [asdict(r) for r in (old.sources if old else ())]
    if sources:
        data["sources"] = sources
    downloads = (downloads_section(intents) if intents is not None
                 else [asdict(r) for r in (old.downloads if old else ())])
    if downloads:
        data["downloads"] = downloads
    text = ("# Written by `imgbuild lock`: what each base resolved to and what was measured inside it, and what\n"
            "# each layer's pip commands install (python:, with each artifact's sha256), the commit of each\n"
            "# git ref stacks.yaml names (sources:) and the sha256 of each file it names by URL alone (downloads:).\n"
            "# null: measured, not installed; a fact that is missing was not measured. Do not edit.\n"
            + yaml.safe_dump(data, sort_keys=False))
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".stacks.lock.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
    return path, failures, parse_lock(data, path)


def _plain_python(rec) -> dict:
    return {"stack": rec.stack, "parent": rec.parent, "definition": rec.definition, "resolved": rec.resolved,
            "steps": [[_dist(d) for d in step] for step in rec.steps],
            **({"intents": [{"intent": i, "locked": o} for i, o in rec.intents]} if rec.intents else {}),
            **({"platform": rec.platform} if rec.platform != plat.DEFAULT else {}),
            **({"environment": rec.environment} if rec.environment is not None else {})}


def _dist(d) -> dict:
    """A distribution as the lock file writes it (a Resolved, or a LockedDist read back): replaces only
    where it replaces something."""
    out = {**asdict(d), "required_by": list(d.required_by)}
    if out["replaces"] is None:
        del out["replaces"]
    if not out["direct"]:
        del out["direct"]
    return out


def check_upgrade(spec: Spec, names: set, python: list, stacks: list) -> None:
    """`--upgrade NAME` names a distribution some current lock entry of the layers locked in this run holds:
    otherwise it would re-resolve nothing, and say nothing. stacks: the Stacks locked in this run."""
    if not names:
        return
    current = spec.lock
    layers = set(python) | {d.name for s in stacks for d in s.chain}
    held = {n for name in layers for e in (current.python_all.get(name, ()) if current else ()) for n in e.dists()}
    unknown = sorted(names - held)
    if unknown:
        raise SpecError(f"--upgrade {unknown[0]}: no lock entry of the layers locked here holds it, so nothing would move",
                        file=spec.file, hint="the names are those of stacks.lock.yaml's python: entries; a layer name "
                                             "re-resolves that layer's git refs")


def lock_stack(prepared, engine: Engine, say: Callable[[str], None], hostconf: HostConf | None = None,
               upgrade: frozenset = frozenset(), intents: Intents | None = None,
               log_dir: Path | None = None, current=...) -> tuple[Path | None, list[ImgbuildError], Lock | None]:
    """Lock every layer of stack `name` that installs with pip, from the bottom up: each is resolved on the
    image beneath it, which is built first from the lock as it stands (every layer beneath already locked,
    so the image it resolves on is the one the build will give). A layer with a current entry is kept,
    unless upgrade names one of its distributions. Stops at the first layer that cannot be locked: the
    layers above it would resolve on an image that is not the one they will be built on. prepared: the one
    stack, prepared (builder.prepared) with intent tolerated, judged before anything is built. current: the
    lock as it stands in this run (default Spec.lock); each layer locked moves it on, and the last is
    returned third."""
    from builder.plan.keys import Plan
    from builder.plan.pinning import PIP
    from builder.rules.review import review
    from builder.ship.pipeline import Builder
    from builder.errors import PreflightError, ValidationFailed
    spec, (stack,) = prepared.spec, prepared.stacks
    name = stack.name
    hostconf = hostconf or HostConf.from_env()
    # Impossible stacks fail here, before an hour of building the layers beneath; unlocked intent (IB098)
    # is what this resolves.
    bad = [f for f in review(prepared).errors() if f.rule != "IB098"]
    for f in bad:
        say(f.render())
    if bad:
        raise PreflightError(f"{len(bad)} error(s) in stack {name} besides unlocked intent; nothing was locked",
                             hint="imgbuild check stack=" + name + " shows the same")
    registry = Registry(spec.site.registry, on_retry=say)
    registry.ping()
    path: Path | None = None
    current = spec.lock if current is ... else current
    base_digest = resolve(spec, [name]).require()[stack.base.name]
    for i, layer in enumerate(stack.chain):
        plan = chain_plan(spec, stack, base_digest, current)
        chain = plan.chain(name)
        if PIP not in chain[i].dockerfile:
            continue
        entry = python_entry(spec, current, stack, layer)
        if entry is not None and not (upgrade & set(entry.dists())):
            say(f"{layer.name}: locked ({sum(len(s) for s in entry.steps)} distribution(s)), current; kept")
            continue
        if i:
            keys = [n.key for n in chain[:i]]
            beneath = Plan(spec=spec, nodes={k: plan.nodes[k] for k in keys}, users={k: [name] for k in keys})
            say(f"{layer.name}: the image beneath it first: " + ", ".join(f"{n.name} ({n.short[:12]})" for n in chain[:i]))
            report = Builder(spec, engine, registry, hostconf, say).run(beneath, [])
            if not report.ok:
                raise ValidationFailed(f"{layer.name} is not locked: the image beneath it did not build and pass "
                                       f"its checks ({report.error})", hint=f"run dir: {report.run_dir}")
        path, failures, current = lock(spec, [], engine, say, python=[layer.name], hostconf=hostconf, log_dir=log_dir,
                                       upgrade=upgrade, intents=intents, python_stack=stack, current=current)
        if failures:
            return path, failures, current
    if path is None:   # nothing of the stack to resolve with pip: the sources (git refs) are still recorded
        return lock(spec, [], engine, say, intents=intents, current=current)
    return path, [], current
