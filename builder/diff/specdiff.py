"""`imgbuild diff REV1 [REV2]`: what a change to stacks.yaml does to the layer images, and why.

Each side is a revision's stacks.yaml, layers/ and Dockerfile.j2 (read with `git archive`), or the
working tree, loaded and planned by the current builder: a difference shown is a difference in the
spec, never one in the tool. Nodes are matched per stack by layer name (then by position and kind,
so a renamed layer shows as replaced), and every changed node names the inputs of its content key
that moved (Node.inputs), with the rendered Dockerfile lines that changed. A new key the old plan
already had is reused; any other is built. Release tags move for every stack whose top key changes.
"""

from __future__ import annotations

import difflib
import io
import subprocess
import tarfile
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from builder.ship.bases import resolve
from builder.errors import DiffError, ImgbuildError
from builder.plan.layout import layer_repo, release_repo
from builder.load.params import GitPin, Uninstall, WheelPin
from builder.plan.keys import Node, Plan, image_ref
from builder.prepared import prepare
from builder.ship import gpuproof
from builder.load import tags as tag_templates
from builder.ship.publish import TAG_OK
from builder.ship.registry import Registry
from builder.rules import facts
from builder.plan.render import CudaTargets
from builder.load.spec import LayerDef, Spec, Stack, load_spec

WORKING_TREE = "working tree"
# The inputs of a content key in the order a reviewer wants them; the parent last, since it only
# says that something beneath moved.
INPUT_ORDER = ("epoch", "sources", "wheels", "python", "build_args", "dockerfile", "files", "platform", "parent")


@dataclass(frozen=True)
class Cause:
    input: str          # a Node.inputs name, or "checks" (same key, different checks: revalidated)
    detail: str
    lines: tuple = ()   # for "dockerfile": the rendered lines that changed, "- old" / "+ new"


@dataclass(frozen=True)
class NodeChange:
    position: int            # in the new chain (in the old one for removed nodes); 0 sits on the base
    layer: str
    kind: str
    change: str              # unchanged | changed | replaced | added | removed | checks
    action: str              # reuse | revalidate | build | none (removed: nothing is deleted)
    old_key: str | None
    new_key: str | None
    image: str | None        # where the new image lives: its repository, tagged by content key
    was: str | None = None   # the old layer's name where another one took its place
    note: str = ""           # why a new key is reused
    causes: tuple = ()


@dataclass(frozen=True)
class StackDiff:
    name: str
    status: str              # unchanged | changed | added | removed
    nodes: tuple
    tag_action: str          # move (some or all move) | create (every one is new) | none
    tags: tuple              # release tag references that would move or be created, fields filled in
    notes: tuple = ()
    created: tuple = ()      # those of `tags` that do not exist yet (the rest move)

    @property
    def moved(self) -> tuple:
        return tuple(t for t in self.tags if t not in self.created)


@dataclass(frozen=True)
class SpecDiff:
    old: str
    new: str
    file: str
    stacks: tuple
    notes: tuple

    @property
    def different(self) -> bool:
        return any(s.status != "unchanged" for s in self.stacks)

    def keys(self, action: str) -> list[tuple[str, str]]:
        """Distinct (layer, key) of new images with this action, over every stack."""
        found = {(n.layer, n.new_key) for s in self.stacks for n in s.nodes
                 if n.action == action and n.change != "unchanged"}
        return sorted(found)

    def to_json(self) -> dict:
        return {
            "mode": "spec", "old": self.old, "new": self.new, "file": self.file, "different": self.different,
            "notes": list(self.notes),
            "summary": {"build": [f"{l}:{k}" for l, k in self.keys("build")],
                        "reuse": [f"{l}:{k}" for l, k in self.keys("reuse")],
                        "revalidate": [f"{l}:{k}" for l, k in self.keys("revalidate")],
                        "tags": sum(len(s.tags) for s in self.stacks),
                        "tags_moved": sum(len(s.moved) for s in self.stacks),
                        "tags_created": sum(len(s.created) for s in self.stacks)},
            "stacks": {s.name: {"status": s.status, "tag_action": s.tag_action, "tags": list(s.tags),
                                "tags_created": list(s.created), "tags_moved": list(s.moved),
                                "notes": list(s.notes), "nodes": [asdict(n) for n in s.nodes]}
                       for s in self.stacks},
        }


@dataclass(frozen=True)
class _Side:
    label: str
    spec: Spec
    plan: Plan


# -- loading a revision --------------------------------------------------------------------------

def _git(cwd: Path, *args: str, error: str) -> bytes:
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=300)
    except FileNotFoundError:
        raise DiffError("git is not installed; a spec diff reads revisions with git") from None
    if proc.returncode != 0:
        detail = proc.stderr.decode(errors="replace").strip().splitlines()
        raise DiffError(error + (f" ({detail[-1]})" if detail else ""))
    return proc.stdout


def _extract(archive: bytes, dest: Path, rev: str) -> None:
    """Write a revision's files under dest. A symbolic link in them is refused: a revision is read only
    from what it holds, never from a path on this machine a link points to (nor is that path's content
    ever quoted)."""
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            if not (member.isfile() or member.isdir()):
                what = "a symbolic link" if member.issym() or member.islnk() else "not a regular file"
                raise DiffError(f"{rev}: {member.name} is {what}; imgbuild reads a revision only from the "
                                "files it holds", hint="commit the file itself, not a link to it")
        # The data filter (3.11.4+) also refuses paths that leave dest.
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:
            tar.extractall(dest)


BESIDE_LIMIT = 64 << 20


def _extract_beside(archive: bytes, dest: Path) -> None:
    """The revision's other files beside its stacks file (patches, files copied into images), which
    `file` parameters name and hash. Only regular files, at most BESIDE_LIMIT in all; a link or anything
    else is left out, so a parameter naming it is refused as missing when the revision loads."""
    total = 0
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        members = []
        for member in tar.getmembers():
            if member.isfile() and not (dest / member.name).exists():
                total += member.size
                if total > BESIDE_LIMIT:
                    break
                members.append(member)
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, members=members, filter="data")
        else:
            tar.extractall(dest, members=members)


def _load_revision(file: Path, rev: str, dest: Path) -> tuple[Path, str]:
    """Write the revision's stacks file, its lock file, layers/ and Dockerfile.j2 under dest: (stacks file, label)."""
    folder = file.absolute().parent
    if not folder.is_dir():
        raise DiffError(f"{file}: no such folder")
    top, _, prefix = _git(folder, "rev-parse", "--show-toplevel", "--show-prefix",
                          error=f"{folder} is not in a git repository").decode().partition("\n")
    top_dir, prefix = Path(top), prefix.strip()
    commit = _git(top_dir, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}",
                  error=f"{rev!r} is not a revision of {top_dir}").decode().strip()
    lock_name = file.stem + ".lock.yaml"   # the revision's own lock pins its bases, as plan and build read it
    wanted = [prefix + file.name, prefix + "layers", prefix + "Dockerfile.j2", prefix + lock_name]
    present = _git(top_dir, "ls-tree", "--name-only", commit, "--", *wanted,
                   error=f"cannot list {rev}").decode().splitlines()
    if wanted[0] not in present:
        raise DiffError(f"{rev} has no {wanted[0]}")
    _extract(_git(top_dir, "archive", "--format=tar", commit, "--", *present, error=f"cannot read {rev}"), dest, rev)
    _extract_beside(_git(top_dir, "archive", "--format=tar", commit, "--", prefix or ".", error=f"cannot read {rev}"),
                    dest)
    label = rev if commit.startswith(rev) else f"{rev} ({commit[:12]})"
    return dest / prefix / file.name, label


def _reported(label: str, tmp: Path | None, fn, *args):
    """Run fn, naming the side in any error (and the revision's file, not its temporary copy)."""
    try:
        return fn(*args)
    except DiffError:
        raise
    except ImgbuildError as exc:
        several = getattr(exc, "errors", ())   # a stacks file's every mistake, not only its first
        message = (f"{exc.label}: {exc.message}" if len(several) < 2 else
                   f"{getattr(exc, 'total', len(several))} spec errors\n" + "\n".join(e.render() for e in several))
        message = message.replace(f"{tmp}/", "") if tmp else message
        raise DiffError(f"{label}: {message}", hint=None if len(several) > 1 else exc.hint) from None


def _plan(spec: Spec, label: str, reg: Registry | None, lookup: str) -> _Side:
    # The one resolver that plan and build use: declared, then the revision's own lock file, then the
    # site registry (where mirrored bases live), so that diff names the keys a build would compute.
    bases = resolve(spec, lookup=lookup, registry=(lambda host: reg) if reg else Registry)
    return _Side(label, spec, prepare(spec, bases=bases).locked())


# -- comparing ------------------------------------------------------------------------------------

def _short(value: str) -> str:
    return value[:12] if len(value) in (40, 64) and all(c in "0123456789abcdef" for c in value) else value


def _dict_changes(old: dict, new: dict) -> list[str]:
    out = []
    for k in sorted(set(old) | set(new)):
        if k not in old:
            out.append(f"+ {k}={_short(str(new[k]))}")
        elif k not in new:
            out.append(f"- {k}")
        elif old[k] != new[k]:
            out.append(f"{k} {_short(str(old[k]))} -> {_short(str(new[k]))}")
    return out


def _param_text(value) -> str:
    if isinstance(value, GitPin):
        return _short(value.commit)
    if isinstance(value, WheelPin):
        return value.file
    if isinstance(value, Uninstall):
        return f"{', '.join(value.packages)} ({value.reason})"
    return "none" if value is None else str(value)


def _param_changes(old: LayerDef, new: LayerDef) -> list[str]:
    """Parameters that differ, as 'NAME: a -> b' (lists and maps as what was added and removed)."""
    a, b = dict(old.params), dict(new.params)
    out = []
    for name in sorted(set(a) | set(b)):
        va, vb = a.get(name), b.get(name)
        if va == vb:
            continue
        if isinstance(va, GitPin) and isinstance(vb, GitPin) and va.repo != vb.repo:
            out.append(f"{name}: {va} -> {vb}")
        elif isinstance(va, tuple) and isinstance(vb, tuple):
            if all(isinstance(p, tuple) for p in va + vb):  # a map, kept as sorted pairs
                out.append(f"{name}: " + ", ".join(_dict_changes(dict(va), dict(vb))))
            else:
                added = [f"+ {v}" for v in vb if v not in va]
                removed = [f"- {v}" for v in va if v not in vb]
                out.append(f"{name}: " + (", ".join(added + removed) or "order changed"))
        else:
            out.append(f"{name}: {_param_text(va)} -> {_param_text(vb)}")
    return out


def _templates(spec: Spec, kind: str) -> dict[str, bytes]:
    """The templates a layer of `kind` renders from, wherever each was found (site or shipped folders):
    the skeleton, the kind's fragment, and the shared templates that win in the kinds' search order."""
    found = spec.kinds.templates
    paths = {"Dockerfile.j2": found.skeleton, f"layers/{kind}/fragment.j2": spec.kinds[kind].folder / "fragment.j2"}
    for folder in reversed(found.search):          # lowest priority first: a higher folder's macros.j2 wins
        for path in sorted(folder.glob("*.j2")):
            paths[f"layers/{path.name}"] = path
    return {name: path.read_bytes() for name, path in paths.items() if path.is_file()}


def _arch_list(stack: Stack, layer: LayerDef) -> str:
    return CudaTargets.of(stack, layer).torch_arch_list if stack.compiles_cuda(layer) else "none"


def _changed_lines(old: str, new: str) -> tuple[str, ...]:
    diff = list(difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0))[2:]
    return tuple(f"{line[0]} {line[1:].strip()}" for line in diff if not line.startswith("@@ "))


@dataclass(frozen=True)
class _Pair:
    old: _Side
    new: _Side
    old_stack: Stack | None
    new_stack: Stack | None

    def dockerfile_reasons(self, o: Node, n: Node) -> list[str]:
        if o.layer.kind.name != n.layer.kind.name:
            return [f"kind {o.layer.kind.name} -> {n.layer.kind.name}"]
        reasons = [f"layer name {o.name} -> {n.name}"] if o.name != n.name else []
        reasons += _param_changes(o.layer, n.layer)
        ta, tb = _templates(self.old.spec, o.layer.kind.name), _templates(self.new.spec, n.layer.kind.name)
        reasons += [f"template {p} changed" for p in sorted(set(ta) | set(tb)) if ta.get(p) != tb.get(p)]
        aa, ab = _arch_list(self.old_stack, o.layer), _arch_list(self.new_stack, n.layer)
        if aa != ab:
            reasons.append(f"arch list {aa} -> {ab}")
        facts = _dict_changes(dict(self.old_stack.base.provides), dict(self.new_stack.base.provides))
        if facts:
            reasons.append("base facts: " + ", ".join(facts))
        return reasons or ["rendering changed"]

    def parent(self, o: Node, n: Node, lowest: str) -> str:
        a, b = o.inputs["parent"], n.inputs["parent"]
        if a.startswith("base:") and b.startswith("base:"):
            return f"base image {a[5:]} -> {b[5:]}"
        name_a = a[5:] if a.startswith("base:") else self.old.plan.nodes[a].name
        name_b = b[5:] if b.startswith("base:") else self.new.plan.nodes[b].name
        if name_a != name_b:
            return f"{name_a} -> {name_b}"
        return f"{name_b} changed" + (f" (the change starts at {lowest})" if lowest != name_b else "")

    def causes(self, o: Node, n: Node, lowest: str) -> tuple[Cause, ...]:
        a, b = o.inputs, n.inputs
        out = []
        for name in INPUT_ORDER + tuple(sorted((set(a) | set(b)) - set(INPUT_ORDER))):
            if a.get(name) == b.get(name):
                continue
            if name == "dockerfile":
                out.append(Cause(name, "; ".join(self.dockerfile_reasons(o, n)),
                                 _changed_lines(o.dockerfile, n.dockerfile)))
            elif name == "parent":
                out.append(Cause(name, self.parent(o, n, lowest)))
            elif name == "python":
                out.append(Cause(name, _lock_changes(o, n)))
            elif name == "epoch":
                out.append(Cause(name, f"site.epoch {a.get(name) or '(none)'} -> {b.get(name) or '(none)'}: "
                                       "a deliberate rebuild of every layer"))
            elif isinstance(a.get(name), dict) or isinstance(b.get(name), dict):
                out.append(Cause(name, ", ".join(_dict_changes(a.get(name) or {}, b.get(name) or {}))))
            else:
                out.append(Cause(name, f"{a.get(name)} -> {b.get(name)}"))
        return tuple(out)


def _locked_set(node: Node) -> dict[str, str]:
    """What a node's lock installs, from its requirements files: name -> version (a wheel of the wheelhouse
    by its file name), the hash beside each."""
    out = {}
    for text in node.locked:
        for line in text.splitlines():
            what, _, digest = line.partition(" --hash=sha256:")
            name, _, version = what.rpartition("==") if "==" in what else (what.rsplit("/", 1)[-1], "", "")
            out[name] = f"{version} ({digest[:12]})" if version else f"({digest[:12]})"
    return out


def _lock_changes(o: Node, n: Node) -> str:
    """The lock's changes of one layer, package by package: name old -> new, + added, - removed."""
    a, b = _locked_set(o), _locked_set(n)
    if not a or not b:
        return (f"locked: {len(b)} distribution(s) (pip resolved at build time before)" if b
                else f"no longer locked (was {len(a)} distribution(s)): pip resolves at build time")
    parts = [f"{k} {a[k]} -> {b[k]}" for k in sorted(set(a) & set(b)) if a[k] != b[k]]
    parts += [f"+ {k} {b[k]}" for k in sorted(set(b) - set(a))] + [f"- {k} {a[k]}" for k in sorted(set(a) - set(b))]
    return "lock: " + (", ".join(parts) or "the same set")


def _checks_cause(o: Node, n: Node) -> Cause:
    a, b = {c.id: c for c in o.checks}, {c.id: c for c in n.checks}
    parts = [f"+ {i}" for i in b if i not in a] + [f"- {i}" for i in a if i not in b]
    parts += [f"{i} changed" for i in b if i in a and a[i] != b[i]]
    params = _param_changes(o.layer, n.layer)
    return Cause("checks", ", ".join(parts) + (f" (params: {'; '.join(params)})" if params else ""))


def _pairs(old: list[Node], new: list[Node]) -> tuple[list[tuple[Node | None, Node]], list[tuple[int, Node]]]:
    """Match by layer name, else by position when the kind is the same and the old layer's name is
    not used elsewhere in the new chain. Returns (old or None, new) in new order, and the removed."""
    by_name = {n.name: n for n in old}
    new_names = {n.name for n in new}
    matched, pairs = set(), []
    for i, n in enumerate(new):
        o = by_name.get(n.name)
        if o is None and i < len(old) and old[i].name not in new_names and old[i].key not in matched \
                and old[i].layer.kind.name == n.layer.kind.name:
            o = old[i]
        if o is not None:
            matched.add(o.key)
        pairs.append((o, n))
    return pairs, [(i, o) for i, o in enumerate(old) if o.key not in matched]


def _action(node: Node, old: _Side, new: _Side, reg: Registry | None) -> tuple[str, str]:
    if node.key in old.plan.nodes:
        return "reuse", f"same key as at {old.label}"
    if reg and reg.manifest_digest(layer_repo(new.spec.site.namespace, node.name), node.short):
        return "reuse", "already in the registry"
    return "build", ""


def _tags(spec: Spec, stack: str, templates, date) -> tuple[str, ...]:
    """The release tags as they would be written: each field filled from what the stack will hold (the
    versions its layers pin and its base provides, as preflight knows them; the project's commit), so that
    `-ds0.19.5` reads as a new tag beside `-ds0.19.4`. A field nothing declares stays `{field}`: it is read
    from the image at release (`check` warns of it, IB005)."""
    repo = release_repo(spec.site.namespace, stack)
    known = {name: TAG_OK.sub("-", str(fact.value)) for name, fact in facts.resolve(spec, spec.stack(stack)).facts.items()
             if fact is not None and fact.value is not None}
    known.update({k: v for k, v in tag_templates.spec_values(spec.stack(stack)).items() if v is not None})
    return tuple(f"{spec.site.registry}/{repo}:" + tag_templates.expand(t, known, date)[0] for t in templates)


def _moved(tag: str, before: tuple, reg: Registry | None) -> bool:
    """Whether a tag exists to be moved: the registry's answer where it is asked, else whether the old
    revision would have written the same tag."""
    if reg is not None:
        repo, _, name = tag.partition("/")[2].rpartition(":")
        return reg.manifest_digest(repo, name) is not None
    return tag in before


def _stack_diff(name: str, old: _Side, new: _Side, reg: Registry | None) -> StackDiff:
    old_stack, new_stack = old.spec.stacks.get(name), new.spec.stacks.get(name)
    if new_stack is None:
        nodes = tuple(NodeChange(i, n.name, n.layer.kind.name, "removed", "none", n.short, None, None)
                      for i, n in enumerate(old.plan.chain(name)))
        return StackDiff(name, "removed", nodes, "none", (), ("its release tags are left where they are",))
    pair = _Pair(old, new, old_stack, new_stack)
    chain = new.plan.chain(name)
    matches, removed = _pairs(old.plan.chain(name) if old_stack else [], chain)
    lowest = next((n.name for o, n in matches if o is None or o.key != n.key), "")
    nodes = []
    for i, (o, n) in enumerate(matches):
        image = image_ref(new.spec, n)
        if o is not None and o.key == n.key:
            if o.checks == n.checks:
                nodes.append(NodeChange(i, n.name, n.layer.kind.name, "unchanged", "reuse", o.short, n.short, image))
            else:
                nodes.append(NodeChange(i, n.name, n.layer.kind.name, "checks", "revalidate", o.short, n.short,
                                        image, causes=(_checks_cause(o, n),)))
            continue
        action, note = _action(n, old, new, reg)
        if o is None:
            nodes.append(NodeChange(i, n.name, n.layer.kind.name, "added", action, None, n.short, image, note=note))
        else:
            nodes.append(NodeChange(i, n.name, n.layer.kind.name, "changed" if o.name == n.name else "replaced",
                                    action, o.short, n.short, image, was=None if o.name == n.name else o.name,
                                    note=note, causes=pair.causes(o, n, lowest)))
    nodes += [NodeChange(i, o.name, o.layer.kind.name, "removed", "none", o.short, None, None) for i, o in removed]
    date = tag_templates.today()
    if old_stack is None:
        tags = _tags(new.spec, name, new_stack.tags, date)
        return StackDiff(name, "added", tuple(nodes), "create", tags, tuple(_waiver_notes(old, new, name)),
                         created=tuple(t for t in tags if not _moved(t, (), reg)))
    notes = _waiver_notes(old, new, name)
    for o, n in matches:   # what a stacks.yaml change says without changing an image or a check (a reason)
        if o is not None and o.key == n.key and o.checks == n.checks and _param_changes(o.layer, n.layer):
            notes.append(f"{n.name}: " + "; ".join(_param_changes(o.layer, n.layer)) + " (no image or check changes)")
    if old_stack.tags != new_stack.tags:
        notes.append("tag templates: " + ", ".join([f"+ {t}" for t in new_stack.tags if t not in old_stack.tags]
                                                   + [f"- {t}" for t in old_stack.tags if t not in new_stack.tags]))
    before = _tags(old.spec, name, old_stack.tags, date)
    if old.plan.top(name).key != new.plan.top(name).key:
        tags = _tags(new.spec, name, new_stack.tags, date)
    else:
        tags = tuple(t for t in _tags(new.spec, name, new_stack.tags, date) if t not in before)
    created = tuple(t for t in tags if not _moved(t, before, reg))
    action = "none" if not tags else "create" if len(created) == len(tags) else "move"
    changed = notes or any(n.change != "unchanged" for n in nodes)
    return StackDiff(name, "changed" if changed else "unchanged", tuple(nodes), action, tags, tuple(notes),
                     created)


def _waiver_notes(old: _Side, new: _Side, name: str) -> list[str]:
    """A GPU waiver (site.ci.gpu_checks) added, removed or changed for the stack: it changes no image, but
    whether the stack is released without its GPU checks having run on one of its GPUs."""
    was = old.spec.site.ci.gpu_waiver(name) if name in old.spec.stacks else None
    now = new.spec.site.ci.gpu_waiver(name)
    if was == now:
        return []
    if now is None:
        return [f"GPU checks no longer waived (site.ci.gpu_checks; was: {was}): released only where its GPU checks "
                "ran on one of its GPUs"]
    effect = ("released with its GPU checks skipped where no GPU of its ran them" if gpuproof.applies(new.spec, new.plan, name)
              else "no effect: the stack declares no GPUs or has no GPU checks")
    if was is None:
        return [f"GPU checks waived (site.ci.gpu_checks): {now} ({effect})"]
    return [f"GPU checks waiver changed (site.ci.gpu_checks): {was} -> {now} ({effect})"]


def _notes(old: _Side, new: _Side, registry: bool) -> tuple[str, ...]:
    notes = []
    o, n = old.spec.site, new.spec.site
    if (o.registry, o.namespace) != (n.registry, n.namespace):
        notes.append(f"site: {old.spec.site.registry}/{old.spec.site.namespace} -> "
                     f"{new.spec.site.registry}/{new.spec.site.namespace}: every image and tag reference moves "
                     "(content keys do not)")
    if o.driver_floor != n.driver_floor:
        notes.append(f"site driver floor {o.driver_floor} -> {n.driver_floor}: "
                     "preflight judges the stacks again; no image changes")
    same_ref = [b for b in sorted(old.plan.unresolved & new.plan.unresolved)
                if old.spec.bases[b].ref(old.spec.site) == new.spec.bases[b].ref(new.spec.site)]
    if same_ref:
        notes.append(f"base{'s' if len(same_ref) > 1 else ''} {', '.join(same_ref)}: no digest on either side, so "
                     "keys use the tag reference; a base that moved under its tag does not show here"
                     + ("" if registry else " (--registry resolves bases mirrored in the site registry)"))
    return tuple(notes)


def diff_revisions(file: str | Path, old_rev: str, new_rev: str | None = None, registry: bool = False,
                   offline: bool = False, kinds=None) -> SpecDiff:
    """Compare the stacks file at old_rev with new_rev (None: the working tree). Bases mirrored in the
    site registry are resolved there (as plan and build do) unless offline; with registry, new keys
    found there count as reused."""
    file = Path(file)
    with tempfile.TemporaryDirectory(prefix="imgbuild-diff-") as tmp:
        old_dir, new_dir = Path(tmp, "old"), Path(tmp, "new")
        old_file, old_label = _load_revision(file, old_rev, old_dir)
        if new_rev is None:
            if not file.is_file():
                raise DiffError(f"{file}: no such file in the working tree")
            new_file, new_label, new_dir = file, WORKING_TREE, None
        else:
            new_file, new_label = _load_revision(file, new_rev, new_dir)
        # A site's extra kind folders (--kinds, $IMGBUILD_KINDS) are read as they are now, on both sides.
        old_spec = _reported(old_label, old_dir, load_spec, old_file, None, kinds)
        new_spec = _reported(new_label, new_dir, load_spec, new_file, None, kinds)
        reg = Registry(new_spec.site.registry) if registry else None
        lookup = "none" if offline else "site"
        old = _reported(old_label, old_dir, _plan, old_spec, old_label, reg, lookup)
        new = _reported(new_label, new_dir, _plan, new_spec, new_label, reg, lookup)
        names = list(new_spec.stacks) + [s for s in old_spec.stacks if s not in new_spec.stacks]
        stacks = tuple(_reported("registry", None, _stack_diff, name, old, new, reg) for name in names)
        return SpecDiff(old=old_label, new=new_label, file=str(file), stacks=stacks,
                        notes=_notes(old, new, registry))

__all__ = ["diff_revisions", "SpecDiff", "StackDiff", "NodeChange", "Cause"]
