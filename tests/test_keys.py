"""Content keys: changing one input changes exactly the keys of the nodes at and above the change,
and no others. Each test mutates a copy of the shipped stacks.yaml (or of the shipped layer kinds)
in tmp_path and compares every (stack, layer) key with the unmodified baseline."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import builder.plan.keys
from builder.plan.keys import make_plan
from builder.load.spec import load_spec
from conftest import STACKS, copy_kinds, run_cli, shipped_data, write_stacks

H100 = ("h100-megatron", "h100-megatron-next")
ALL_STACKS = ("h100-megatron", "h100-megatron-next", "a100-deepspeed", "cpu-smoke")


def keys_of(file: Path, digests: dict | None = None) -> dict:
    """{(stack, layer name): full key} for every layer of every stack in the file."""
    plan = make_plan(load_spec(file), digests=digests)
    return {(stack, plan.nodes[k].name): k for stack, ks in plan.stacks.items() for k in ks}


def changed(before: dict, after: dict) -> set:
    assert before.keys() == after.keys(), "the stacks and layers themselves must not change"
    return {pos for pos in before if before[pos] != after[pos]}


def positions(stack: str, *layers: str) -> set:
    return {(stack, layer) for layer in layers}


def chains() -> dict:
    """{stack: [layer names bottom to top]} of the shipped file (the order the spec defines)."""
    return {name: [d.name for d in st.chain] for name, st in load_spec(STACKS).stacks.items()}


def downstream(*layers: str, stacks=ALL_STACKS) -> set:
    """Every (stack, layer) at or above one of the named layers, in the stacks that use it."""
    out = set()
    for stack, names in chains().items():
        if stack not in stacks:
            continue
        hits = [i for i, n in enumerate(names) if n in layers]
        if hits:
            out |= {(stack, n) for n in names[min(hits):]}
    return out


def everything_of(stacks, base_keys: dict) -> set:
    return {pos for pos in base_keys if pos[0] in stacks}


@pytest.fixture
def baseline(tmp_path) -> dict:
    return keys_of(write_stacks(tmp_path / "baseline", shipped_data()))


@pytest.fixture
def mutated(tmp_path):
    """mutated(fn) -> keys of the shipped data after fn(data) (written to its own folder)."""
    counter = {"n": 0}

    def _mutated(fn) -> dict:
        data = shipped_data()
        fn(data)
        counter["n"] += 1
        return keys_of(write_stacks(tmp_path / f"mutated{counter['n']}", data))

    return _mutated


def test_baseline_covers_every_layer_of_every_stack(baseline):
    assert {s for s, _ in baseline} == set(ALL_STACKS)
    assert len(baseline) == 6 + 6 + 3 + 4
    assert len(set(baseline.values())) == len(make_plan(load_spec(STACKS)).nodes) <= 15  # shared nodes


def test_deepspeed_version(baseline, mutated):
    def fn(d):
        d["layers"]["ds-0.19.5-hopper"]["params"]["version"] = "0.19.6"
    expect = downstream("ds-0.19.5-hopper")
    assert {s for s, _ in expect} == set(H100) and len(expect) == 8
    assert changed(baseline, mutated(fn)) == expect


def test_deepspeed_ops(baseline, mutated):
    def fn(d):
        d["layers"]["ds-0.17.6-ampere"]["params"]["ops"] = ["cpu_adam"]
    assert changed(baseline, mutated(fn)) == downstream("ds-0.17.6-ampere")


def test_git_commit_pin_of_a_project(baseline, mutated):
    def fn(d):
        d["projects"]["megatron-core-0.16"]["params"]["source"]["commit"] = "f" * 40
    expect = downstream("megatron-core-0.16")
    assert ("h100-megatron", "megatron-core-0.16") in expect and len(expect) <= 2  # the project and the runtime at most
    assert changed(baseline, mutated(fn)) == expect


def test_git_repo_of_a_project(baseline, mutated):
    def fn(d):
        d["projects"]["smoke-train"]["params"]["source"]["repo"] = "file:///elsewhere/smoke.git"
    assert changed(baseline, mutated(fn)) == downstream("smoke-train")


def test_target_gpus_change_only_cuda_compiling_nodes_and_above(baseline, mutated):
    def fn(d):
        d["stacks"]["h100-megatron"]["gpus"] = ["H100", "B200"]  # h100-megatron-next inherits them
    expect = downstream("ds-0.19.5-hopper")  # the first layer that compiles CUDA, and all above
    result = changed(baseline, mutated(fn))
    assert result == expect
    # the site layer and the TE shipped in the base compile nothing: untouched
    for stack in H100:
        assert not result & positions(stack, "ngc-25.09-site", "te-as-shipped")
    assert {s for s, _ in result} == set(H100)


def test_gpus_of_the_same_arch_change_no_key(baseline, mutated):
    """Keys follow the arch list, not GPU names: H200 is sm_90 like H100."""
    def fn(d):
        d["stacks"]["h100-megatron"]["gpus"] = ["H200"]
    assert changed(baseline, mutated(fn)) == set()


def test_gpus_of_one_stack_only(baseline, mutated):
    def fn(d):
        d["stacks"]["h100-megatron-next"]["gpus"] = ["H100", "A100"]
    assert changed(baseline, mutated(fn)) == downstream("ds-0.19.5-hopper", stacks=("h100-megatron-next",))


def test_runtime_env_value(baseline, mutated):
    def fn(d):
        d["runtimes"]["nccl-roce"]["params"]["env"]["NCCL_DEBUG"] = "INFO"
    expect = downstream("nccl-roce")
    assert ("a100-deepspeed", "nccl-roce") in expect and len(expect) == 1  # a100-deepspeed has no project
    assert changed(baseline, mutated(fn)) == expect


def test_runtime_env_shared_by_two_stacks(baseline, mutated):
    def fn(d):
        d["runtimes"]["nccl-ib"]["params"]["env"]["NCCL_IB_GID_INDEX"] = "5"
    expect = downstream("nccl-ib")
    assert positions("h100-megatron", "nccl-ib") | positions("h100-megatron-next", "nccl-ib") <= expect
    assert changed(baseline, mutated(fn)) == expect


def test_base_digest_in_the_file(baseline, mutated):
    def fn(d):
        d["bases"]["ngc-25.09"]["digest"] = "sha256:" + "ab" * 32
    assert changed(baseline, mutated(fn)) == everything_of(H100, baseline)


def test_base_digest_resolved_from_the_registry(tmp_path, baseline):
    file = write_stacks(tmp_path / "d", shipped_data())
    one = keys_of(file, digests={"debian-bookworm": "sha256:" + "1" * 64})
    two = keys_of(file, digests={"debian-bookworm": "sha256:" + "2" * 64})
    assert changed(baseline, one) == everything_of(("cpu-smoke",), baseline)
    assert changed(one, two) == everything_of(("cpu-smoke",), baseline)


def test_wheel_sha256(baseline, mutated):
    def fn(d):
        d["layers"]["cpu-torch-2.13"]["params"]["wheel"]["sha256"] = "0" * 64
    assert changed(baseline, mutated(fn)) == everything_of(("cpu-smoke",), baseline)


def test_pinned_tools(baseline, mutated):
    def fn(d):
        d["layers"]["cpu-torch-2.13"]["params"]["tools"] = ["setuptools==70.0.0"]
    assert changed(baseline, mutated(fn)) == everything_of(("cpu-smoke",), baseline)


def test_description_and_tags_change_no_key(baseline, mutated):
    def fn(d):
        d["stacks"]["a100-deepspeed"]["description"] = "something else"
        d["stacks"]["a100-deepspeed"]["tags"] = ["{stack}"]
        d["layers"]["ds-0.17.6-ampere"]["description"] = "x"
    assert changed(baseline, mutated(fn)) == set()


def test_an_upgrade_of_imgbuild_changes_no_key(baseline, tmp_path, monkeypatch):
    """Issue 23: imgbuild's version is no input of a key; only what it renders is."""
    import builder
    for module in (builder, builder.plan.keys):
        monkeypatch.setattr(module, "__version__", "999.0.0", raising=False)
    after = keys_of(write_stacks(tmp_path / "v", shipped_data()))
    assert after == baseline
    assert not any("builder_version" in n.inputs for n in make_plan(load_spec(tmp_path / "v" / "stacks.yaml")).nodes.values())


def test_the_epoch_changes_every_key_and_says_so(baseline, mutated, tmp_path):
    """The deliberate rebuild: site.epoch moves every key; 2 and "2" are one epoch."""
    def epoch(value):
        return lambda d: d.setdefault("site", {}).__setitem__("epoch", value)
    two = mutated(epoch(2))
    assert changed(baseline, two) == set(baseline)
    assert mutated(epoch("2")) == two
    assert changed(two, mutated(epoch(3))) == set(baseline)
    data = shipped_data()
    epoch(2)(data)
    path = write_stacks(tmp_path / "explained", data)
    out = run_cli("plan", "stack=cpu-smoke", "--explain", "-f", str(path))
    assert out.code == 0, out.output
    assert out.output.count('epoch: "2"') == 4   # every node of cpu-smoke's chain


@pytest.mark.parametrize("value", ["", "two words", "x" * 65, True, [1], {"a": 1}, 1.5])
def test_a_bad_epoch_is_refused_naming_the_key(tmp_path, value):
    data = shipped_data()
    data.setdefault("site", {})["epoch"] = value
    out = run_cli("check", "-f", str(write_stacks(tmp_path, data)))
    assert out.code != 0 and "site.epoch" in out.output and "not an epoch" in out.output, out.output
    assert "Traceback" not in out.output


# -- the layer kinds: files/ and fragment text -----------------------------------------------------

def kinds_site(tmp_path: Path, name: str) -> Path:
    root = copy_kinds(tmp_path / name)
    write_stacks(root, shipped_data())
    return root


def test_a_copy_of_the_kinds_elsewhere_gives_the_same_keys(tmp_path, baseline):
    """Keys depend on content, not on where the checkout lives."""
    root = kinds_site(tmp_path, "copy")
    assert load_spec(root / "stacks.yaml").root == root
    assert keys_of(root / "stacks.yaml") == baseline


def test_a_file_in_a_kinds_files_folder(tmp_path, baseline):
    root = kinds_site(tmp_path, "files")
    files = root / "layers" / "deepspeed" / "files"
    files.mkdir()
    (files / "patch.txt").write_text("one\n")
    added = keys_of(root / "stacks.yaml")
    expect = downstream("ds-0.19.5-hopper", "ds-0.17.6-ampere", "ds-0.19.8-cpu")
    assert {s for s, _ in expect} == set(ALL_STACKS)
    assert not expect & {("cpu-smoke", "cpu-torch-2.13"), ("a100-deepspeed", "ngc-25.03-site")}
    assert changed(baseline, added) == expect

    root2 = kinds_site(tmp_path, "files2")
    files2 = root2 / "layers" / "deepspeed" / "files"
    files2.mkdir()
    (files2 / "patch.txt").write_text("two\n")
    assert changed(added, keys_of(root2 / "stacks.yaml")) == expect  # its content counts


def test_the_mode_of_a_file_in_a_kinds_files_folder(tmp_path):
    """Same bytes, same name: only the executable bit differs, and that alone changes the keys."""
    def site_with(name: str, mode: int) -> Path:
        root = kinds_site(tmp_path, name)
        files = root / "layers" / "deepspeed" / "files"
        files.mkdir()
        (files / "patch.sh").write_text("#!/bin/sh\necho patched\n")
        os.chmod(files / "patch.sh", mode)
        return root

    plain, executable = site_with("plain", 0o644), site_with("executable", 0o755)
    a, b = (root / "layers" / "deepspeed" / "files" / "patch.sh" for root in (plain, executable))
    assert a.read_bytes() == b.read_bytes() and not os.access(a, os.X_OK) and os.access(b, os.X_OK)
    expect = downstream("ds-0.19.5-hopper", "ds-0.17.6-ampere", "ds-0.19.8-cpu")
    assert changed(keys_of(plain / "stacks.yaml"), keys_of(executable / "stacks.yaml")) == expect


def test_a_fragment_template_text(tmp_path, baseline):
    root = kinds_site(tmp_path, "fragment")
    fragment = root / "layers" / "runtime-env" / "fragment.j2"
    fragment.write_text("# the site's fabric settings\n" + fragment.read_text())
    expect = downstream("nccl-ib", "nccl-roce", "cpu-env")
    assert len(expect) >= 4
    assert changed(baseline, keys_of(root / "stacks.yaml")) == expect


def test_a_fragment_in_the_middle_of_the_chain(tmp_path, baseline):
    root = kinds_site(tmp_path, "megatron")
    fragment = root / "layers" / "megatron" / "fragment.j2"
    fragment.write_text(fragment.read_text().replace("--progress-bar off", "--progress-bar off -q"))
    expect = downstream("megatron-core-0.16", "megatron-core-0.17")
    assert {s for s, _ in expect} == set(H100)
    assert changed(baseline, keys_of(root / "stacks.yaml")) == expect


def test_template_comments_that_never_reach_the_dockerfile_change_no_key(tmp_path, baseline):
    """A Jinja comment, in a fragment, in the skeleton and in the shared macros, renders to nothing: no key moves.
    (The positive control is test_a_fragment_template_text: the same place, rendered text, keys move.)"""
    root = kinds_site(tmp_path, "comments")
    note = "{# reworded: this comment is for whoever edits the template #}"
    for path in [root / "Dockerfile.j2", *sorted((root / "layers").glob("*/fragment.j2")),
                 *sorted((root / "layers").glob("*.j2"))]:
        path.write_text(note + path.read_text() + note)
    assert keys_of(root / "stacks.yaml") == baseline


def test_the_skeleton_dockerfile_changes_every_key(tmp_path, baseline):
    root = kinds_site(tmp_path, "skeleton")
    skeleton = root / "Dockerfile.j2"
    skeleton.write_text(skeleton.read_text().replace('SHELL ["/bin/bash"', 'SHELL ["/usr/bin/bash"'))
    assert changed(baseline, keys_of(root / "stacks.yaml")) == set(baseline)


# -- sharing, stability, plan --json ---------------------------------------------------------------

def test_identical_prefixes_are_one_node(repo_root):
    plan = make_plan(load_spec(repo_root / "stacks.yaml"))
    a, b = plan.stacks["h100-megatron"], plan.stacks["h100-megatron-next"]
    names = chains()
    common = 0  # the layers the two stacks have in common from the bottom: only the project differs
    while names["h100-megatron"][common] == names["h100-megatron-next"][common]:
        common += 1
    assert common >= 3
    assert len(set(a) & set(b)) == common  # the shared bottom of the chain, as one node each
    assert a[:common] == b[:common] and not set(a[common:]) & set(b[common:])
    assert [plan.nodes[k].name for k in a[:3]] == ["ngc-25.09-site", "te-as-shipped", "ds-0.19.5-hopper"]
    for key in a[:common]:
        assert plan.users[key] == ["h100-megatron", "h100-megatron-next"]
    for key in set(a) ^ set(b):
        assert len(plan.users[key]) == 1
    assert len(plan.nodes) == 19 - common


def test_parents_chain_the_keys(repo_root):
    plan = make_plan(load_spec(repo_root / "stacks.yaml"))
    for stack, ks in plan.stacks.items():
        assert plan.nodes[ks[0]].parent is None and plan.nodes[ks[0]].base_ref
        for parent, child in zip(ks, ks[1:]):
            assert plan.nodes[child].parent == parent
            assert plan.nodes[child].inputs["parent"] == parent


def test_keys_are_stable_across_loads(repo_root, tmp_path):
    one = keys_of(repo_root / "stacks.yaml")
    two = keys_of(repo_root / "stacks.yaml")
    three = keys_of(write_stacks(tmp_path, shipped_data(), lock=True))  # re-serialised YAML, another folder
    assert one == two == three
    assert all(len(k) == 64 and int(k, 16) >= 0 for k in one.values())


def test_keys_are_stable_across_processes(repo_root):
    """No hash-seed or set-order dependence: two interpreters with different seeds agree."""
    import subprocess
    import sys
    code = ("import json; from builder.load.spec import load_spec; from builder.plan.keys import make_plan; "
            "p = make_plan(load_spec('stacks.yaml')); print(json.dumps(p.stacks))")
    outs = [subprocess.run([sys.executable, "-c", code], cwd=repo_root, capture_output=True, text=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}, check=True).stdout
            for seed in ("1", "2")]
    assert outs[0] == outs[1]
    assert json.loads(outs[0]) == {s: list(ks) for s, ks in make_plan(load_spec(repo_root / "stacks.yaml")).stacks.items()}


def test_plan_json_lists_each_node_once(repo_root):
    res = run_cli("plan", "--all", "--json", "--offline", "-f", repo_root / "stacks.yaml")
    assert res.code == 0, res.output
    doc = json.loads(res.out)
    nodes = doc["nodes"]
    keys = [n["key"] for n in nodes]
    # --offline plans on the digests it has without asking: the declared ones and the lock's
    from builder.prepared import prepare
    plan = prepare(repo_root / "stacks.yaml", bases="none").plan
    assert len(keys) == len(set(keys)) == len(plan.nodes)
    full = {n["key"]: n["full_key"] for n in nodes}
    assert set(full.values()) == set(plan.nodes)
    seen = set()
    for n in nodes:  # parents first, each parent a listed node
        assert n["parent"] is None or n["parent"] in seen, n
        assert (n["parent"] is None) == (n["base"] is not None)
        seen.add(n["key"])
        assert n["stacks"] == plan.users[n["full_key"]]
    for stack, entry in doc["stacks"].items():
        chain = entry["nodes"]
        assert chain == [k[:len(chain[0])] for k in plan.stacks[stack]]
        by_key = {n["key"]: n for n in nodes}
        for parent, child in zip(chain, chain[1:]):
            assert by_key[child]["parent"] == parent
        for k in chain:
            assert stack in by_key[k]["stacks"]
    shared = [n["layer"] for n in nodes if n["stacks"] == ["h100-megatron", "h100-megatron-next"]]
    assert shared[:3] == ["ngc-25.09-site", "te-as-shipped", "ds-0.19.5-hopper"]
    assert len(shared) == len(set(plan.stacks["h100-megatron"]) & set(plan.stacks["h100-megatron-next"]))
    # The mirrored Debian base is locked (stacks.lock.yaml); the NGC bases cannot be locked where nvcr.io is not reachable
    assert doc["keys_final"] is False and doc["unresolved_bases"] == ["ngc-25.03", "ngc-25.09"]


# -- the key covers pins and arch lists even when the Dockerfile text does not show them -------------

def hidden_text_site(tmp_path: Path, name: str, data: dict) -> Path:
    """A kinds copy whose rendered text omits the wheel sha256, the source pins and the arch list."""
    root = copy_kinds(tmp_path / name)
    skeleton = root / "Dockerfile.j2"
    text = skeleton.read_text()
    start = text.index("{% if cuda %}\n# Target GPUs")
    text = text[:start] + text[text.index("{% endif %}", start) + len("{% endif %}"):]
    text = text.replace("{% if cuda %} \\\n      io.imgbuild.cuda-arch-list={{ cuda.torch_arch_list | dq }}{% endif %}", "")
    start = text.index("{% for name, pin in params")
    text = text[:start] + text[text.index("{% endfor %}", start) + len("{% endfor %}"):]
    skeleton.write_text(text)
    fragment = root / "layers" / "cpu-torch" / "fragment.j2"
    fragment.write_text(fragment.read_text().replace("params.wheel.sha256", "'0' * 64"))
    write_stacks(root, data)
    return root / "stacks.yaml"


def test_hidden_text_site_really_hides_them(tmp_path):
    plan = make_plan(load_spec(hidden_text_site(tmp_path, "h", shipped_data())))
    text = "".join(n.dockerfile for n in plan.nodes.values())
    shipped = shipped_data()
    for hidden in ("cuda-arch-list", "NVTE_CUDA_ARCHS", "TORCH_CUDA_ARCH_LIST", shipped["layers"]["cpu-torch-2.13"]["params"]["wheel"]["sha256"],
                   shipped["projects"]["smoke-train"]["params"]["source"]["commit"]):
        assert hidden not in text


@pytest.mark.parametrize("what", ["wheel-sha256", "source-commit", "gpus"])
def test_inputs_not_in_the_text_still_change_the_key(tmp_path, what):
    before = keys_of(hidden_text_site(tmp_path, "before", shipped_data()))
    data = shipped_data()
    if what == "wheel-sha256":
        data["layers"]["cpu-torch-2.13"]["params"]["wheel"]["sha256"] = "1" * 64
        expect = downstream("cpu-torch-2.13")
    elif what == "source-commit":
        data["projects"]["smoke-train"]["params"]["source"]["commit"] = "1" * 40
        expect = downstream("smoke-train")
    else:
        data["stacks"]["a100-deepspeed"]["gpus"] = ["H100"]
        expect = downstream("ds-0.17.6-ampere")
    assert changed(before, keys_of(hidden_text_site(tmp_path, "after", data))) == expect


# -- the keys of the shipped stacks, as a golden file ------------------------------------------------

KEYS_GOLDEN = Path(__file__).resolve().parent / "golden" / "keys.json"


def shipped_files() -> list[Path]:
    root = Path(STACKS).parent
    return [Path(STACKS), root / "examples" / "cuda-pypi" / "stacks.yaml", root / "examples" / "jax" / "stacks.yaml",
            *sorted((root / "examples" / "real").glob("*/stacks.yaml"))]


def shipped_keys() -> dict:
    """{file: {stack: {platform: ["LAYER KEY", ...]}}} for every shipped stacks file. A base is at its declared
    digest, else its lock file's, else a made-up one (the same on every machine), so that the keys are final
    and mean the same everywhere. examples/real are planned as `imgbuild lock` plans them (intent=True: their floating
    requirements as written, where they have no lock entry), since most recipes there carry no lock."""
    import hashlib
    from builder.ship.bases import lock_digests
    root = Path(STACKS).parent
    out = {}
    for file in shipped_files():
        spec = load_spec(file)
        locked = lock_digests(spec)
        digests = {b.name: b.digest or locked.get(b.name) or "sha256:" + hashlib.sha256(f"golden:{b.name}".encode()).hexdigest()
                   for b in spec.bases.values()}
        plan = make_plan(spec, digests=digests, intent="real" in file.parts)
        assert not plan.unresolved
        out[file.relative_to(root).as_posix()] = {
            stack: {p: [f"{n.name} {n.short}" for n in plan.chain(stack, p)] for p in plan.platforms(stack)}
            for stack in plan.stacks}
    return out


def test_the_keys_of_the_shipped_stacks_are_the_golden_ones(update_golden):
    """A refactor of imgbuild that changes a key makes every site rebuild that layer and everything above it.
    This fails when it happens by accident; an intended change rewrites the file (--update-golden) and says so."""
    now = shipped_keys()
    if update_golden:
        KEYS_GOLDEN.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
        return
    assert KEYS_GOLDEN.exists(), "no tests/golden/keys.json: run `pytest tests/test_keys.py --update-golden`"
    before = json.loads(KEYS_GOLDEN.read_text())
    moved = [f"{f} {s} {p}: {a} -> {b}" for f in sorted(set(before) | set(now))
             for s in sorted(set(before.get(f, {})) | set(now.get(f, {})))
             for p in sorted(set(before.get(f, {}).get(s, {})) | set(now.get(f, {}).get(s, {})))
             for a, b in zip(before.get(f, {}).get(s, {}).get(p, []) + [None] * 99, now.get(f, {}).get(s, {}).get(p, []))
             if a != b]
    moved += [f"{f}: only in the golden file" for f in set(before) - set(now)]
    assert not moved, ("the keys of shipped stacks changed (every site would rebuild these layers and all above "
                       "them); if intended, rerun with --update-golden and say why in the commit:\n  "
                       + "\n  ".join(moved[:40]))
