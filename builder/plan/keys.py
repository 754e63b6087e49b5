"""The plan: every stack becomes a chain of layer builds; equal prefixes across stacks are one node.

A node's content key is a hash over everything that can change its bytes: the rendered Dockerfile,
the parent's key (or the base image's digest), the context files, the source commits, the wheels,
the build args (every arch list spelling), the platform, the lock's resolved set, and the site's
epoch where one is set. Not imgbuild's version nor its code: only what they render into the
Dockerfile and the context, so an upgrade of imgbuild that renders the same text rebuilds nothing
(docs/keys.md; tests/golden/keys.json holds the shipped stacks' keys). A key found in the registry is
never built again, on any machine. The inputs are kept beside the key so that `plan` and `diff`
can say which input moved it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Iterable

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from builder import __version__
from builder.errors import SpecError
from builder.load.kinds import CheckSpec
from builder.plan.layout import layer_repo
from builder.load.intent import UNPINNED_DOWNLOAD, layer_intents, lock_path, unresolved_refs
from builder.plan import pinning
from builder.core import platforms as plat
from builder.load.params import FileRef, GitPin, Uninstall, WheelPin
from builder.plan.render import CudaTargets, render_layer
from builder.load.spec import LayerDef, Spec, Stack

KEY_LEN = 32  # hex digits kept in tags; 128 bits


def sha256(data: str | bytes) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


@dataclass(frozen=True)
class Node:
    key: str
    layer: LayerDef
    parent: str | None          # parent node key; None for the node on the base image
    base_ref: str | None        # the base image reference (with digest when known) for root nodes
    dockerfile: str
    platform: str = plat.DEFAULT   # what it is built for (an input of the key): each platform has its own chain
    inputs: dict = field(default_factory=dict, hash=False, compare=False)   # input name -> value or digest (what makes the key)
    build_args: dict = field(default_factory=dict, hash=False, compare=False)
    checks: tuple = ()          # CheckSpec with resolved args: its own and those of every layer beneath
    # The requirements file of each pip command, where the lock file resolved this layer's pip set
    # (builder.plan.pinning): the build installs exactly that. Empty: pip resolves at build time.
    locked: tuple = field(default=(), hash=False, compare=False)

    @property
    def name(self) -> str:
        return self.layer.name

    @property
    def short(self) -> str:
        return self.key[:KEY_LEN]

    @property
    def sources(self) -> dict:
        return {k: v for k, v in self.layer.params if isinstance(v, GitPin)}

    @property
    def wheels(self) -> dict:
        return {k: v for k, v in self.layer.params if isinstance(v, WheelPin)}

    @property
    def params(self) -> dict:
        """The layer's parameters as given or defaulted (empty ones left out), as JSON data: what
        `plan --explain` shows beside the inputs, reasons of removals and torch swaps included."""
        return {k: plain(v) for k, v in self.layer.params if v not in (None, (), "", [])}


@dataclass
class Plan:
    spec: Spec
    nodes: dict = field(default_factory=dict)     # key -> Node, in build order (parents first)
    # stack name -> every node key of the stack: each platform's chain, bottom to top, platforms in order.
    # A stack is released when all of them passed (one failed arm64 layer holds back its amd64 image too).
    stacks: dict = field(default_factory=dict)
    chains: dict = field(default_factory=dict)    # (stack name, platform) -> tuple of node keys, bottom to top
    users: dict = field(default_factory=dict)     # key -> [stack names]
    unresolved: set = field(default_factory=set)  # base names whose digest is not known
    lock: object = field(default=None, repr=False)  # the lock file planned with (builder.core.lockfile.Lock)
    # (stack name, layer, its lock entry or None) of every layer planned: what refuse_unlocked judges
    floating: list = field(default_factory=list, repr=False)

    def refuse_unlocked(self) -> None:
        """Refuses (IB098) the first layer whose intent the lock does not resolve: a plan made with intent
        tolerated (the prepared plan) is built, rendered or keyed only after this."""
        for _, layer, entry in self.floating:
            refuse_intent(self.spec, self.lock, layer, entry)

    def narrowed(self, names: Iterable[str]) -> "Plan":
        """The plan of some of its stacks (a CI node job's: those holding the node), planned no further."""
        names = list(names)
        keys = {k for name in names for k in self.stacks[name]}
        return Plan(spec=self.spec, nodes={k: n for k, n in self.nodes.items() if k in keys},
                    stacks={name: self.stacks[name] for name in names},
                    chains={c: keys_ for c, keys_ in self.chains.items() if c[0] in names},
                    users={k: [s for s in self.users[k] if s in names] for k in self.nodes if k in keys},
                    unresolved={self.spec.stacks[name].base.name for name in names} & self.unresolved,
                    lock=self.lock, floating=[f for f in self.floating if f[0] in names])

    def platforms(self, stack: str) -> tuple:
        return tuple(p for s, p in self.chains if s == stack)

    def chain(self, stack: str, platform: str | None = None) -> list[Node]:
        """One platform's chain of the stack (its first platform's when None: the only one of most stacks)."""
        return [self.nodes[k] for k in self.chains[(stack, platform or self.platforms(stack)[0])]]

    def top(self, stack: str, platform: str | None = None) -> Node:
        return self.chain(stack, platform)[-1]

    def tops(self, stack: str) -> dict:
        """platform -> the top node of that platform's chain."""
        return {p: self.top(stack, p) for p in self.platforms(stack)}

    def to_json(self) -> dict:
        """The DAG for machines (a CI matrix): nodes parents-first, each with its inputs and users."""
        return {
            "builder_version": __version__,   # who planned it: no input of any key
            "epoch": self.spec.site.epoch,
            "registry": self.spec.site.registry,
            "namespace": self.spec.site.namespace,
            "keys_final": not self.unresolved,
            "unresolved_bases": sorted(self.unresolved),
            "stacks": {name: {"nodes": [k[:KEY_LEN] for k in keys], "tags": list(self.spec.stacks[name].tags),
                              "platforms": list(self.platforms(name)),
                              "chains": {p: [k[:KEY_LEN] for k in self.chains[(name, p)]] for p in self.platforms(name)},
                              "spec_hash": self.spec.stacks[name].spec_hash()}
                       for name, keys in self.stacks.items()},
            "nodes": [
                {"key": n.short, "full_key": n.key, "layer": n.name, "kind": n.layer.kind.name, "platform": n.platform,
                 "parent": n.parent[:KEY_LEN] if n.parent else None, "base": n.base_ref,
                 "image": image_ref(self.spec, n), "stacks": self.users[n.key], "inputs": n.inputs,
                 "params": n.params,
                 "build_args": n.build_args,
                 "checks": [{"id": c.id, "check": c.check, "gpu": c.gpu} for c in n.checks]}
                for n in self.nodes.values()
            ],
        }


def image_ref(spec: Spec, node: Node) -> str:
    """Where a node's image lives in the registry: one repository per layer name, tagged by key."""
    return f"{spec.site.registry}/{layer_repo(spec.site.namespace, node.name)}:{node.short}"


def plain(value):
    """A parameter value as JSON data: versions as text, pins as their commit, files as their path,
    tuples as lists, other typed values (env extensions, uninstalls, users) as mappings."""
    if isinstance(value, GitPin):
        return value.commit
    if isinstance(value, WheelPin):
        return value.file
    if isinstance(value, FileRef):
        return value.path
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if hasattr(value, "__dataclass_fields__"):
        return {k: plain(getattr(value, k)) for k in value.__dataclass_fields__}
    return str(value)


def file_refs(value) -> list:
    """Every file beside stacks.yaml that a parameter value names (patches, copied files)."""
    if isinstance(value, FileRef):
        return [value]
    if isinstance(value, tuple):
        return [r for v in value for r in file_refs(v)]
    if hasattr(value, "__dataclass_fields__"):
        return [r for k in value.__dataclass_fields__ for r in file_refs(getattr(value, k))]
    return []


def _resolve_args(check: CheckSpec, layer: LayerDef, stack: Stack) -> CheckSpec:
    """Check arguments with the layer's values: "param:NAME" is the value itself, "{param:NAME}" inside a
    string is replaced by the value's text (e.g. /opt/imgbuild/sources/{param:name}). "stack:arch_list"
    is the arch list the layer is compiled for in this stack (None where it compiles no CUDA code)."""
    def resolve(value):
        if value == "stack:cpu_baseline":   # one level per platform; the check picks the image's
            return [stack.cpu_baseline(p).name for p in stack.platforms]
        if value == "stack:arch_list":   # as the build got it: the layer's own gpus, +PTX where asked
            if not stack.compiles_cuda(layer):
                return None
            return CudaTargets.of(stack, layer).spell("TORCH_CUDA_ARCH_LIST", ptx=dict(layer.params).get("ptx") is True)
        if isinstance(value, list):   # a list of values and references: the values given, flattened
            found = [resolve(v) for v in value]
            return [x for v in found for x in (v if isinstance(v, list) else [v]) if x is not None]
        if isinstance(value, str) and value.startswith("param:"):
            given = layer.param(value[6:])
            # A removal's reason is for people: rewording it must not make the checks new (a revalidation).
            return plain(given.packages if isinstance(given, Uninstall) else given)
        if isinstance(value, str) and "{param:" in value:
            return PARAM_REF.sub(lambda m: _text(plain(layer.param(m.group(1)))), value)
        return value
    args = tuple((name, resolve(value)) for name, value in check.args)
    return CheckSpec(id=check.id, check=check.check, gpu=check.gpu, args=args, doc=check.doc)


def lock_check(layer: LayerDef, entry) -> CheckSpec:
    """In the image: every distribution the lock file resolved for this layer is installed at its locked
    version (and still is in every image above it)."""
    installed = [f"{d.name}=={d.version}" for d in sorted(entry.dists().values(), key=lambda d: d.name.lower())]
    return CheckSpec(id=f"python-lock.{layer.name}", check="requirements", gpu=False,
                     args=(("installed", installed),), doc="the installed set is the lock file's")


def _without_removed(checks: tuple, layer: LayerDef) -> tuple:
    """The checks of the layers beneath as this layer's image must pass them: a distribution this layer
    declares removed (an `uninstall` with its reason) is no longer required installed by a requirements check
    from below, the lock's among them (the layer's own check requires it absent)."""
    removed = {_dist_name(n) for _, v in layer.params if isinstance(v, Uninstall) for n in v.packages}
    if not removed:
        return checks
    out = []
    for check in checks:
        args = dict(check.args)
        if check.check == "requirements" and args.get("installed"):
            kept = [r for r in args["installed"] if _dist_name(r) not in removed]
            if kept != list(args["installed"]):
                check = CheckSpec(id=check.id, check=check.check, gpu=check.gpu, doc=check.doc,
                                  args=tuple((k, kept if k == "installed" else v) for k, v in check.args))
        out.append(check)
    return tuple(out)


def _dist_name(requirement: str) -> str:
    """A requirement's distribution name (NAME==1.0, NAME @ git+URL, NAME), read as the requirements check
    reads it (builder/ship/checks: packaging's Requirement) and compared as pip compares names."""
    return canonicalize_name(Requirement(requirement).name)


PARAM_REF = re.compile(r"\{param:([A-Za-z_][A-Za-z0-9_]*)\}")


def _text(value) -> str:
    """A value inside a string: a list as its items separated by spaces (a shell loop's words)."""
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)


def base_ref(spec: Spec, stack: Stack, digests: dict, platform: str = plat.DEFAULT) -> tuple[str, bool]:
    """The base reference used in FROM and in the key, for one platform; False when its digest is not known
    yet. digests maps a base name to a digest (one image, or an index BuildKit picks the platform from)
    or to {platform: digest} (the entries of its index, builder.ship.bases)."""
    ref = stack.base.ref(spec.site)
    found = digests.get(stack.base.name)
    digest = (found.get(platform) if isinstance(found, dict) else found) or stack.base.digest
    return (f"{ref}@{digest}", True) if digest else (ref, False)


def node_inputs(spec: Spec, stack: Stack, layer: LayerDef, parent: str, text: str,
                platform: str = plat.DEFAULT) -> tuple[dict, dict]:
    build_args = CudaTargets.of(stack, layer).build_args() if stack.compiles_cuda(layer) else {}
    inputs = {
        "platform": platform,
        "parent": parent,
        "dockerfile": sha256(text),
        "files": {rel: f"{digest}:{mode}" for rel, digest, mode in layer.kind.files},
        "sources": {k: v.commit + (" +submodules" if v.submodules else "") for k, v in layer.params
                    if isinstance(v, GitPin)},
        "wheels": {v.file: v.sha256 for _, v in layer.params if isinstance(v, WheelPin)},
        "build_args": build_args,
    }
    refs = [r for _, v in layer.params for r in file_refs(v)]
    if refs:   # only when there are any: keys of layers without files stay what they were
        inputs["inputs"] = {r.path: r.sha256 for r in refs}
    if spec.site.epoch is not None:   # in every node, so that `plan --explain` shows it where it acts
        inputs["epoch"] = spec.site.epoch
    return inputs, build_args


def make_key(inputs: dict) -> str:
    return sha256(json.dumps(inputs, sort_keys=True, separators=(",", ":")))


def layer_definition(spec: Spec, stack: Stack, name: str, base_digest: str | None = None,
                     platform: str = plat.DEFAULT, texts: dict | None = None) -> str:
    """What a lock file entry of layer `name` stands for: the base as named (and its digest, for a measurement
    of the layer's image, `lock layer=`) and, for that layer and each layer beneath it, what builds it, as
    its key reads it: the rendered Dockerfile before the lock pins it, the kind's files, the sources, wheels
    and files it names, the arch build args. Not the parameters only the checks read (a smoke test's
    argument, an expected version): changing one leaves every entry as it was. Nor the sets locked beneath
    (each entry records what it was resolved over: its `environment`), nor the site's epoch.
    texts: a memo of rendered layers shared by calls (make_plan's)."""
    texts = {} if texts is None else texts
    chain = []
    for layer in stack.chain:
        layer = layer.for_platform(platform)
        inputs, _ = node_inputs(spec, stack, layer, "", _rendered(spec, stack, layer, platform, texts), platform)
        for moot in ("parent", "epoch"):
            inputs.pop(moot, None)
        chain.append([layer.name, layer.kind.name, inputs])
        if layer.name == name:
            break
    else:
        raise KeyError(f"layer {name!r} is not in stack {stack.name!r}")
    return sha256(json.dumps({"base": [stack.base.image, base_digest or ""], "chain": chain}, sort_keys=True))


def _rendered(spec: Spec, stack: Stack, layer: LayerDef, platform: str, texts: dict, reproducible: bool = False) -> str:
    """The layer's Dockerfile as rendered before the lock pins it, memoised in texts: a layer's text depends only
    on its definition, the base, the arch targets and the platform, so stacks sharing it render it once."""
    memo = (layer.name, stack.base.name, stack.arch_list if stack.compiles_cuda(layer) else None, platform, reproducible)
    if memo not in texts:
        texts[memo] = render_layer(spec, stack, layer, platform, reproducible=reproducible)
    return texts[memo]


def python_entry(spec: Spec, lock, stack: Stack, layer: LayerDef, platform: str = plat.DEFAULT,
                 texts: dict | None = None):
    """The lock file's resolved pip set for a layer in this stack on this platform, where it was resolved for
    the layer as it builds now (it and every layer beneath it, the base as named: layer_definition); else None."""
    if lock is None or layer.name not in lock.python_all:
        return None
    return lock.python_for(layer.name, layer_definition(spec, stack, layer.name, None, platform, texts), platform)


def refuse_intent(spec: Spec, lock, layer: LayerDef, entry) -> None:
    """A layer whose requirements float and that has no current lock entry, or whose git source is at a ref
    the lock file has no commit for: refused with the command that fixes it (the first floating value named)."""
    floating = unresolved_refs(layer) or (layer_intents(layer) if entry is None else [])
    if not floating:
        return
    pname, what, why = floating[0]
    more = f" (and {len(floating) - 1} more)" if len(floating) > 1 else ""
    state = (("has no sha256 for it" if why == UNPINNED_DOWNLOAD else "has no commit for it") if unresolved_refs(layer)
             else "has no entry for it"
             if lock is None or layer.name not in lock.python
             else "has an entry resolved for another definition of it or of a layer beneath")
    key = (layer.section, layer.name, "params", pname)
    raise SpecError(f"{what!r} floats ({why}){more} and {lock_path(spec.file).name} {state}: nothing is built "
                    "from intent", file=spec.file, line=spec.doc.line(key) if spec.doc else None,
                    key=".".join(key), rule="IB098",
                    hint=("imgbuild lock (records the commit of each git ref and the sha256 of each file by URL)"
                          if unresolved_refs(layer) else f"imgbuild lock python={layer.name} (records the exact set)")
                    + ", then commit the lock file")


def make_plan(spec: Spec, stacks: Iterable[Stack | str] | None = None, digests: dict | None = None, lock=None,
              intent: bool = False) -> Plan:
    """Plan the stacks (Stack objects; names are looked up, for tests and scripts; all when None). digests maps base names to digests resolved from a
    registry or lock file; without them a base's declared digest is used, else the keys are provisional.
    lock: the lock file (default: the one read with the stacks file, Spec.lock), whose resolved pip sets each layer
    installs, and whose sets are part of the keys. A layer whose requirements float (a range, a git tag,
    a requirements file) is refused where the lock has no current set for it, unless intent is True
    (`imgbuild lock`, which resolves it, and the review, which reports it as IB098): nothing is built,
    rendered or keyed from intent."""
    digests = digests or {}
    if lock is None:
        lock = spec.lock
    plan = Plan(spec=spec, lock=lock)
    # A layer's text depends only on its definition, the base and the arch targets (layer_context),
    # so stacks that share a layer on the same base render it once.
    texts: dict = {}
    for stack in (stacks if stacks is not None else spec.stacks.values()):
        stack = stack if isinstance(stack, Stack) else spec.stack(stack)
        name = stack.name
        every: list = []
        for platform in stack.platforms:
            keys = _plan_chain(plan, spec, stack, platform, digests, lock, intent, texts)
            plan.chains[(name, platform)] = tuple(keys)
            every += keys
        plan.stacks[name] = tuple(every)
    return plan


def _plan_chain(plan: Plan, spec: Spec, stack: Stack, platform: str, digests: dict, lock, intent: bool,
                texts: dict) -> list:
    """One platform's chain of a stack into the plan: its node keys, bottom to top."""
    ref, known = base_ref(spec, stack, digests, platform)
    if not known:
        plan.unresolved.add(stack.base.name)
    parent_key: str | None = None
    checks: tuple = ()
    keys = []
    for layer in stack.chain:
        layer = layer.for_platform(platform)
        text, locked = _rendered(spec, stack, layer, platform, texts, reproducible=True), ()
        entry = python_entry(spec, lock, stack, layer, platform, texts)
        if entry is not None:
            try:
                text, locked = pinning.pinned(text, entry)
            except ValueError:
                entry = None   # resolved for another rendering of the layer: not this one's set
        plan.floating.append((stack.name, layer, entry))
        if not intent:
            refuse_intent(spec, lock, layer, entry)
        parent_input = parent_key or f"base:{ref}"
        inputs, build_args = node_inputs(spec, stack, layer, parent_input, text, platform)
        if entry is not None:   # the set itself, not only the file that names it
            inputs["python"] = pinning.digest(entry)
        key = make_key(inputs)
        checks = _without_removed(checks, layer) + tuple(_resolve_args(c, layer, stack) for c in layer.kind.checks)
        if entry is not None:
            checks += (lock_check(layer, entry),)
        if key not in plan.nodes:
            plan.nodes[key] = Node(key=key, layer=layer, parent=parent_key,
                                   base_ref=None if parent_key else ref, dockerfile=text, platform=platform,
                                   inputs=inputs, build_args=build_args, checks=checks, locked=locked)
            plan.users[key] = []
        if stack.name not in plan.users[key]:
            plan.users[key].append(stack.name)
        keys.append(key)
        parent_key = key
    return keys
