"""Every bad stacks.yaml is refused by the real CLI with exit code 2 and a message naming the file, the
line, the key path, the reason and (for a closed set) the allowed values; never with a traceback.

Each case edits one snippet of a small valid file. The line the error must point at carries the
marker `# <==`, so the expected line number is read from the text itself.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from dataclasses import dataclass

import pytest

from conftest import REPO, copy_kinds, run_cli, write_stacks

VALID = """\
version: 1
site:
  registry: 127.0.0.1:5000
  namespace: imgbuild
bases:
  ngc:
    image: nvcr.io/nvidia/pytorch:25.09-py3
    family: ngc-pytorch
    provides: {python: "3.12.3", torch: "2.9.0", cuda: "13.0.1"}
  deb:
    image: debian:bookworm
    family: debian
    provides: {python: "3.11.2"}
layers:
  site:
    kind: ngc-pytorch
    params: {apt: [libaio-dev]}
  ds:
    kind: deepspeed
    params: {version: "0.19.5", ops: [fused_adam]}
  cput:
    kind: cpu-torch
    params:
      wheel: {file: torch-2.13.0-cp311-none-any.whl, sha256: 6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b}
projects:
  proj:
    kind: megatron
    params:
      source: {repo: "https://example.com/m.git", commit: 0123456789abcdef0123456789abcdef01234567}
runtimes:
  env:
    kind: runtime-env
    params:
      env: {A: "1"}
stacks:
  s1:
    base: ngc
    layers: [site, ds]
    project: proj
    runtime: env
    gpus: [H100]
  s2:
    extends: s1
    runtime: env
"""

CATALOG_GPUS = "catalog GPUs: V100, T4, A100"
TOP_KEYS = "allowed: bases, layers, projects, runtimes, site, stacks, version"
STACK_KEYS = "allowed: above, base, cpu_baseline, description, driver_floor, extends, gpus, gpus_per_node, layers, platforms, project, runtime, tags"
BASE_KEYS = "allowed: description, digest, family, image, provides, source"
LAYER_KEYS = "allowed: description, kind, params"  # layers, projects and runtimes alike
DS_PARAMS = "allowed: apt, libaio, ops, packages, runtime_ops, version"
KINDS = "kinds (folders under layers/): apex, cpu-torch, cuda-source, cuda-toolkit-pip, deepspeed, flash-attn, jax, megatron, nccl-tests, ngc-jax, ngc-pytorch, pip, project, pypi-torch, runtime-env, system-setup, transformer-engine"
TAGS = ("allowed: {stack}, {date}, {project_commit}, {python}, {torch}, {cuda}, {cudnn}, {nccl}, {numpy}, {apex}, {deepspeed}, "
        "{flash_attn}, {jax}, {jaxlib}, {megatron}, {transformer_engine}")


@dataclass
class Case:
    id: str
    old: str          # snippet of VALID to replace (must occur exactly once)
    new: str          # replacement; the line the error is about carries '# <=='
    key: str          # dotted key path in the message
    reason: str       # the reason (substring)
    hint: str | None = None  # allowed values / hint (substring)


CASES = [
    Case("unknown-top-level-key", "version: 1\n", "version: 1\ncolour: blue  # <==\n",
         "colour", "unknown key 'colour'", TOP_KEYS),
    Case("unknown-key-in-stack", "    gpus: [H100]\n  s2:", "    gpu: [H100]  # <==\n  s2:",
         "stacks.s1.gpu", "unknown key 'gpu'", STACK_KEYS),
    Case("unknown-key-in-base", "    family: debian\n", "    family: debian\n    digets: sha256:00  # <==\n",
         "bases.deb.digets", "unknown key 'digets'", BASE_KEYS),
    Case("unknown-key-in-site", "  namespace: imgbuild\n", "  namespace: imgbuild\n  user: me  # <==\n",
         "site.user", "unknown key 'user'", "allowed: catalog, ci, cpu_baseline, description, driver_floor, engine, epoch, k8s, namespace, node_check, partitions, registry, retention, slurm, source_date_epoch, trust"),
    Case("unknown-key-in-layer", "    kind: deepspeed\n", "    kind: deepspeed\n    param: {ops: [cpu_adam]}  # <==\n",
         "layers.ds.param", "unknown key 'param'", LAYER_KEYS),
    Case("unknown-key-in-project", "    kind: megatron\n",
         "    kind: megatron\n    commit: 0123456789abcdef0123456789abcdef01234567  # <==\n",
         "projects.proj.commit", "unknown key 'commit'", LAYER_KEYS),
    Case("unknown-key-in-runtime", "    kind: runtime-env\n", '    kind: runtime-env\n    env: {B: "2"}  # <==\n',
         "runtimes.env.env", "unknown key 'env'", LAYER_KEYS),
    Case("unknown-key-in-git-pin", 'source: {repo: "https://example.com/m.git", commit: 0123456789abcdef0123456789abcdef01234567}',
         'source: {repo: "https://example.com/m.git", commit: 0123456789abcdef0123456789abcdef01234567, branch: main}  # <==',
         "projects.proj.params.source.branch", "unknown key 'branch'", "allowed: repo, commit"),
    Case("unknown-layer-param", 'params: {version: "0.19.5", ops: [fused_adam]}',
         'params: {version: "0.19.5", opts: [fused_adam]}  # <==',
         "layers.ds.params.opts", "unknown parameter 'opts' for kind 'deepspeed'", DS_PARAMS),
    Case("string-where-list-expected-layers", "    layers: [site, ds]\n", "    layers: site  # <==\n",
         "stacks.s1.layers", "expected a non-empty list of layer names"),
    Case("string-where-list-expected-param", 'ops: [fused_adam]}', 'ops: fused_adam}  # <==',
         "layers.ds.params.ops", "expected a list, got a string"),
    Case("string-where-list-expected-gpus", "    gpus: [H100]\n", "    gpus: H100  # <==\n",
         "stacks.s1.gpus", "expected a list of GPU names, got a string"),
    Case("list-where-mapping-expected-params", 'params: {version: "0.19.5", ops: [fused_adam]}',
         'params: [version, ops]  # <==', "layers.ds.params", "expected a mapping, got a list"),
    Case("list-where-mapping-expected-provides", 'provides: {python: "3.11.2"}', "provides: [python]  # <==",
         "bases.deb.provides", "expected a mapping, got a list"),
    Case("list-where-mapping-expected-git", 'source: {repo: "https://example.com/m.git", commit: 0123456789abcdef0123456789abcdef01234567}',
         'source: ["https://example.com/m.git"]  # <==', "projects.proj.params.source",
         "expected a mapping with repo and commit, got a list"),
    Case("unknown-base-reference", "    base: ngc\n", "    base: ngc-99  # <==\n",
         "stacks.s1.base", "unknown base 'ngc-99'", "bases: deb, ngc"),
    Case("unknown-layer-reference", "    layers: [site, ds]\n", "    layers: [site, dss]  # <==\n",
         "stacks.s1.layers[1]", "unknown layer 'dss'", "layers: cput, ds, site"),
    Case("project-used-as-layer", "    layers: [site, ds]\n", "    layers: [site, proj]  # <==\n",
         "stacks.s1.layers[1]", "unknown layer 'proj': it is a project", "a stack names its projects under project:"),
    Case("unknown-project-reference", "    project: proj\n", "    project: projx  # <==\n",
         "stacks.s1.project", "unknown project 'projx'", "projects: proj"),
    Case("unknown-runtime-reference", "    runtime: env\n    gpus", "    runtime: ib  # <==\n    gpus",
         "stacks.s1.runtime", "unknown runtime 'ib'", "runtimes: env"),
    Case("unknown-layer-kind", "    kind: deepspeed\n", "    kind: deepsped  # <==\n",
         "layers.ds.kind", "unknown layer kind 'deepsped'", KINDS),
    Case("layer-kind-not-a-string", "    kind: deepspeed\n", "    kind: [deepspeed]  # <==\n",
         "layers.ds.kind", "unknown layer kind ['deepspeed']", KINDS),
    Case("kind-in-wrong-section", "    kind: runtime-env\n", "    kind: deepspeed  # <==\n",
         "runtimes.env.kind", "kind 'deepspeed' has role 'layer' and cannot be declared under 'runtimes'",
         "layers is where it belongs"),
    Case("duplicate-name-across-sections", "runtimes:\n", "  site:  # <==\n    kind: project\n"
         "    params: {source: {repo: r, commit: 0123456789abcdef0123456789abcdef01234567}}\nruntimes:\n",
         "projects.site", "name 'site' is already used under 'layers'; layers, projects and runtimes share one namespace"),
    Case("extends-cycle", "  s2:\n    extends: s1\n",
         "  s2:\n    extends: s3\n  s3:\n    extends: s2  # <==\n",
         "stacks.s3.extends", "stacks extend each other in a cycle: s2 -> s3 -> s2"),
    Case("extends-cycle-of-three", "  s2:\n    extends: s1\n",
         "  s2:\n    extends: s3\n  s3:\n    extends: s4\n  s4:\n    extends: s2  # <==\n",
         "stacks.s4.extends", "stacks extend each other in a cycle: s2 -> s3 -> s4 -> s2"),
    Case("extends-itself", "  s2:\n    extends: s1\n", "  s2:\n    extends: s2  # <==\n",
         "stacks.s2.extends", "stacks extend each other in a cycle: s2 -> s2"),
    Case("extends-unknown-stack", "    extends: s1\n", "    extends: s9  # <==\n",
         "stacks.s2.extends", "unknown stack 's9'", "stacks: s1, s2"),
    Case("git-pin-short-hash", "commit: 0123456789abcdef0123456789abcdef01234567}",
         "commit: deadbee}  # <==", "projects.proj.params.source.commit",
         "'deadbee' is not a full 40-hex commit sha", "pin the commit: git rev-parse"),
    Case("git-pin-branch-name", "commit: 0123456789abcdef0123456789abcdef01234567}",
         "commit: main}  # <==", "projects.proj.params.source.commit",
         "'main' is not a full 40-hex commit sha; branches, tags and short hashes float or collide"),
    Case("git-pin-uppercase-hex", "commit: 0123456789abcdef0123456789abcdef01234567}",
         "commit: 0123456789ABCDEF0123456789ABCDEF01234567}  # <==", "projects.proj.params.source.commit",
         "is not a full 40-hex commit sha"),
    Case("git-pin-trailing-newline", "commit: 0123456789abcdef0123456789abcdef01234567}",
         'commit: "0123456789abcdef0123456789abcdef01234567\\n"}  # <==', "projects.proj.params.source.commit",
         "is not a full 40-hex commit sha"),
    Case("git-pin-missing-commit", 'source: {repo: "https://example.com/m.git", commit: 0123456789abcdef0123456789abcdef01234567}',
         'source: {repo: "https://example.com/m.git"}  # <==', "projects.proj.params.source.commit",
         "missing 'commit'"),
    Case("cuda-layer-without-gpus", "  s1:\n    base: ngc\n    layers: [site, ds]\n    project: proj\n    runtime: env\n    gpus: [H100]\n",
         "  s1:  # <==\n    base: ngc\n    layers: [site, ds]\n    project: proj\n    runtime: env\n", "stacks.s1.gpus",
         "layer 'ds' compiles CUDA code but the stack names no target GPU", "add gpus: [H100]"),
    Case("unknown-gpu", "    gpus: [H100]\n", "    gpus: [H100, H1000]  # <==\n",
         "stacks.s1.gpus[1]", "unknown GPU 'H1000'", CATALOG_GPUS),
    Case("gpu-not-a-string", "    gpus: [H100]\n", "    gpus: [[H100]]  # <==\n",
         "stacks.s1.gpus[0]", "unknown GPU ['H100']", CATALOG_GPUS),
    Case("invalid-version-string", 'params: {version: "0.19.5", ops: [fused_adam]}',
         'params: {version: "latest", ops: [fused_adam]}  # <==',
         "layers.ds.params.version", "'latest' is not a valid version (PEP 440)"),
    Case("invalid-provides-version", 'provides: {python: "3.11.2"}', 'provides: {python: "three"}  # <==',
         "bases.deb.provides.python", "'three' is not a valid version (PEP 440)"),
    Case("unpinned-requirement", 'params: {version: "0.19.5", ops: [fused_adam]}',
         'params: {version: "0.19.5", ops: [fused_adam], packages: ["numpy>=1"]}  # <==',
         "layers.ds.params.packages[0]", "needs an exact version (numpy==X.Y.Z), got the range 'numpy>=1'",
         "write NAME==VERSION"),
    Case("unparsable-requirement", 'params: {version: "0.19.5", ops: [fused_adam]}',
         'params: {version: "0.19.5", ops: [fused_adam], packages: ["numpy==1.26.4 && rm -rf /"]}  # <==',
         "layers.ds.params.packages[0]", "is not a valid requirement"),
    Case("newline-in-env-value", 'env: {A: "1"}', 'env: {A: "1\\nRUN rm -rf /"}  # <==',
         "runtimes.env.params.env.A", "control characters (newline, tab, ...) are not allowed"),
    Case("carriage-return-in-env-value", 'env: {A: "1"}', 'env: {A: "1\\r"}  # <==',
         "runtimes.env.params.env.A", "control characters"),
    Case("tab-in-apt-package", "params: {apt: [libaio-dev]}", 'params: {apt: ["libaio-dev\\tx"]}  # <==',
         "layers.site.params.apt[0]", "control characters"),
    Case("newline-in-git-repo", 'source: {repo: "https://example.com/m.git", commit: 0123456789abcdef0123456789abcdef01234567}',
         'source: {repo: "https://example.com/m.git\\nFROM x", commit: 0123456789abcdef0123456789abcdef01234567}  # <==',
         "projects.proj.params.source.repo", "control characters"),
    Case("bad-env-var-name", 'env: {A: "1"}', 'env: {1A: "1"}  # <==',
         "runtimes.env.params.env.1A", "'1A' is not a valid variable name"),
    Case("env-var-name-trailing-newline", 'env: {A: "1"}', 'env: {"A\\n": "1"}  # <==',
         "runtimes.env.params.env.'A\\n'", "'A\\n' is not a valid variable name"),
    Case("unknown-tag-field", "    gpus: [H100]\n  s2:", '    gpus: [H100]\n    tags: ["{stack}-{foo}"]  # <==\n  s2:',
         "stacks.s1.tags[0]", "unknown tag field {foo}", TAGS),
    Case("first-layer-not-base-role", "    layers: [site, ds]\n", "    layers: [ds, site]  # <==\n",
         "stacks.s1.layers[0]", "the first layer must adopt the base image"),
    Case("base-layer-not-first", "    layers: [site, ds]\n", "    layers: [site, ds, cput]  # <==\n",
         "stacks.s1.layers[2]", "'cput' adopts a base image and can only be first"),
    Case("base-family-mismatch", "    layers: [site, ds]\n", "    layers: [cput, ds]  # <==\n",
         "stacks.s1.layers[0]", "layer 'cput' adopts debian bases but base 'ngc' is a 'ngc-pytorch' image"),
    Case("missing-required-param", 'params: {version: "0.19.5", ops: [fused_adam]}',
         'params: {ops: [fused_adam]}  # <==', "layers.ds.params",
         "missing required parameter 'version' of kind 'deepspeed'"),
    Case("op-not-in-choices", 'ops: [fused_adam]}', 'ops: [fused_adamw]}  # <==',
         "layers.ds.params.ops[0]", "'fused_adamw' is not one of the allowed values", "allowed: async_io, cpu_adagrad, cpu_adam"),
    Case("enum-not-in-choices", "      source: {repo:", "      install: conda  # <==\n      source: {repo:",
         "projects.proj.params.install", "'conda' is not one of the allowed values", "allowed: pip-no-deps, pythonpath"),
    Case("invalid-stack-name-uppercase", "  s1:\n", "  S1:  # <==\n",
         "stacks.S1", "'S1' is not a valid name: use lowercase letters, digits and . _ -"),
    Case("invalid-layer-name-trailing-newline", "  ds:\n", '  "ds\\n":  # <==\n',
         "layers.'ds\\n'", "'ds\\n' is not a valid name"),
    Case("unknown-base-family", "    family: debian\n", "    family: alpine  # <==\n",
         "bases.deb.family", "'alpine' is not a base family", "allowed: ngc-pytorch, ngc-jax, cuda, debian"),
    Case("bad-digest", "    family: debian\n", "    family: debian\n    digest: sha256:abc  # <==\n",
         "bases.deb.digest", "'sha256:abc' is not a digest (sha256: and 64 hex digits)"),
    Case("unsupported-version", "version: 1\n", "version: 2  # <==\n",
         "version", "unsupported version 2", "allowed: 1"),
    Case("layer-twice-in-stack", "    layers: [site, ds]\n", "    layers: [site, ds, ds]  # <==\n",
         "stacks.s1.layers", "layer 'ds' appears twice in the stack"),
    Case("yaml-merge-key", "  s2:\n    extends: s1\n", "  s2:\n    <<: {extends: s1}  # <==\n",
         "stacks.s2", "YAML merge keys (<<) are not supported"),
    Case("bad-registry", "  registry: 127.0.0.1:5000\n", "  registry: http://127.0.0.1:5000  # <==\n",
         "site.registry", "is not a registry host[:port]"),
    Case("registry-read-as-a-number", "  registry: 127.0.0.1:5000\n", "  registry: 5000  # <==\n",
         "site.registry", "'5000' was read as a number, not a registry host[:port]",
         "write the host and port, e.g. registry: 127.0.0.1:5000"),
]


def marked_line(text: str) -> int:
    lines = [i + 1 for i, line in enumerate(text.splitlines()) if "# <==" in line]
    assert len(lines) == 1, "a case must mark exactly one line"
    return lines[0]


SPEC_RULE = re.compile(r"^spec error\[IB2\d\d\]", re.M)


def unruled(text: str) -> str:
    """A refusal as printed, its rule id (spec error[IB2xx], issue 11) taken out: for asserting the rest."""
    return SPEC_RULE.sub("spec error", text)


def assert_refused(res, file, reason, line=None, key=None, hint=None):
    assert res.code == 2, res.output
    assert "Traceback" not in res.err
    assert res.out == ""
    where = str(file) + (f":{line}" if line else "")
    if key:
        where += f": {key}"
    assert SPEC_RULE.match(res.err), res.err
    assert unruled(res.err).startswith(f"spec error: {where}: "), res.err
    message = res.err.split("\n  hint: ")[0]
    assert reason in message, res.err
    if hint:
        assert f"hint: {hint}" in res.err, res.err


def test_the_valid_file_is_accepted(write):
    res = run_cli("check", "-f", write(VALID))
    assert res.code == 0, res.output
    assert "ok:" in res.out


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_input_is_refused(case, write):
    assert VALID.count(case.old) == 1, f"snippet of {case.id} must occur once"
    text = VALID.replace(case.old, case.new)
    file = write(text)
    res = run_cli("check", "-f", file)
    assert_refused(res, file, case.reason, marked_line(text), case.key, case.hint)


def test_duplicate_stack_name_names_both_lines(write):
    text = VALID + "  s1:\n    base: deb\n    layers: [cput]\n"
    first = text.splitlines().index("  s1:") + 1
    second = len(text.splitlines()) - 2
    file = write(text)
    res = run_cli("check", "-f", file)
    assert first != second
    assert_refused(res, file, f"duplicate key 's1' (first defined on line {first})", second, "stacks.s1")


def test_duplicate_layer_name_in_one_section(write):
    text = VALID.replace("  cput:\n", "  site:\n    kind: ngc-pytorch\n  cput:\n")
    file = write(text)
    res = run_cli("check", "-f", file)
    lines = [i + 1 for i, l in enumerate(text.splitlines()) if l == "  site:"]
    assert_refused(res, file, f"duplicate key 'site' (first defined on line {lines[0]})", lines[1], "layers.site")


def test_layer_needing_cuda_on_a_cpu_base(write):
    text = VALID.replace("  s2:\n    extends: s1\n    runtime: env\n",
                         "  s2:\n    base: deb\n    layers: [cput, te]  # <==\n    gpus: [H100]\n") \
                .replace("projects:\n", "  te:\n    kind: transformer-engine\n    params: {version: \"2.8\"}\nprojects:\n")
    file = write(text)
    res = run_cli("check", "-f", file)
    assert_refused(res, file, "layer 'te' (kind transformer-engine) needs cuda, which no layer beneath it "
                   "nor the base provides", marked_line(text), "stacks.s2.layers")


def test_layer_needing_torch_with_nothing_providing_it(tmp_path):
    """A base-role kind that provides no torch, then DeepSpeed (which needs torch)."""
    root = copy_kinds(tmp_path / "site")
    plain = root / "layers" / "plain-debian"
    plain.mkdir()
    (plain / "kind.yaml").write_text("description: bare Debian\nrole: base\nbase_family: debian\nprovides: [python]\n")
    (plain / "fragment.j2").write_text("RUN true\n")
    text = VALID.replace("  s2:\n    extends: s1\n    runtime: env\n",
                         "  s2:\n    base: deb\n    layers: [bare, ds]  # <==\n    gpus: [H100]\n") \
                .replace("projects:\n", "  bare:\n    kind: plain-debian\nprojects:\n")
    file = write_stacks(root, text)
    res = run_cli("check", "-f", file)
    assert_refused(res, file, "layer 'ds' (kind deepspeed) needs torch, which no layer beneath it nor the "
                   "base provides", marked_line(text), "stacks.s2.layers")


# -- files that are not a stacks mapping at all ----------------------------------------------------

def test_empty_file(write):
    file = write("")
    assert_refused(run_cli("check", "-f", file), file, "the file is empty")


def test_comment_only_file_is_empty(write):
    file = write("# nothing here\n")
    assert_refused(run_cli("check", "-f", file), file, "the file is empty")


def test_not_yaml(write):
    file = write("a: [1\n")
    res = run_cli("check", "-f", file)
    assert res.code == 2 and "Traceback" not in res.err
    assert re.search(re.escape(str(file)) + r":\d+: not valid YAML: ", res.err), res.err


def test_yaml_list_at_top_level(write):
    file = write("- a\n- b\n")
    assert_refused(run_cli("check", "-f", file), file,
                   "expected a mapping with bases, layers and stacks, got a list", line=1)


def test_several_yaml_documents(write):
    file = write(VALID + "---\nversion: 1\n")
    line = VALID.count("\n") + 2  # where the second document's content starts
    assert_refused(run_cli("check", "-f", file), file, "expected one YAML document, found several (---)", line)


def test_missing_bases(write):
    file = write("version: 1\nstacks: {}\n")
    assert_refused(run_cli("check", "-f", file), file, "missing required key 'bases'", line=1)


def test_file_not_found(tmp_path):
    file = tmp_path / "nope.yaml"
    assert_refused(run_cli("check", "-f", file), file, "file not found")


def test_not_utf8(tmp_path):
    file = tmp_path / "stacks.yaml"
    file.write_bytes(b"version: 1\nbases: {\xff\xfe}\n")
    assert_refused(run_cli("check", "-f", file), file, "not a UTF-8 text file")


# -- every command reports spec errors the same way, --debug adds the traceback --------------------

@pytest.mark.parametrize("command", [["check"], ["plan", "--all"], ["plan", "--all", "--json"], ["render", "--all"]])
def test_every_command_refuses_the_same_way(command, write):
    text = VALID.replace("    base: ngc\n", "    base: ngc-99  # <==\n")
    file = write(text)
    res = run_cli(*command, "-f", file)
    if "--json" in command:   # the same refusal, also as the JSON envelope on stdout
        body = json.loads(res.out)
        assert body["ok"] is False and body["error"]["key"] == "stacks.s1.base", body
        res = dataclasses.replace(res, out="")
    assert_refused(res, file, "unknown base 'ngc-99'", marked_line(text), "stacks.s1.base", "bases: deb, ngc")


def test_debug_shows_the_traceback(write):
    file = write(VALID.replace("    base: ngc\n", "    base: ngc-99\n"))
    plain = run_cli("check", "-f", file)
    debug = run_cli("--debug", "check", "-f", file)
    assert plain.code == debug.code == 2
    assert "Traceback" not in plain.err
    assert "Traceback (most recent call last)" in debug.err
    assert "SpecError" in debug.err
    assert "spec error[IB204]:" in debug.err and "unknown base 'ngc-99'" in debug.err


def test_unknown_stack_selected(write):
    file = write(VALID)
    res = run_cli("plan", "stack=nope", "-f", file)
    assert res.code == 2 and "Traceback" not in res.err
    assert "no stack named 'nope'" in res.err and "hint: stacks: s1, s2" in res.err


def test_installed_entry_point_as_subprocess(tmp_path):
    """The same refusal from the real process: exit code 2 on stderr, nothing on stdout."""
    text = VALID.replace("commit: 0123456789abcdef0123456789abcdef01234567}", "commit: main}  # <==")
    file = write_stacks(tmp_path, text)
    proc = subprocess.run([sys.executable, "-m", "builder.cli", "check", "-f", str(file)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert (f"spec error[IB206]: {file}:{marked_line(text)}: projects.proj.params.source.commit: 'main' is not a "
            "full 40-hex commit sha") in proc.stderr


# -- helpers of the issue 20 tests ------------------------------------------------------------------

def edit(text: str, *changes: tuple) -> str:
    for old, new in changes:
        assert text.count(old) == 1, f"snippet must occur once: {old!r}"
        text = text.replace(old, new)
    return text


def refusal_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("spec error[")]


# -- a range where an exact version is needed: one rule, IB211 (issue 20) ---------------------------

@pytest.mark.parametrize("old, new, key, reason", [
    ('version: "0.19.5"', 'version: "~=0.19"', "layers.ds.params.version", "needs an exact version (X.Y.Z), got the range '~=0.19'"),
    ('version: "0.19.5"', 'version: "0.19.*"', "layers.ds.params.version", "needs an exact version (X.Y.Z), got the range '0.19.*'"),
    ('version: "0.19.5"', 'version: "<1"', "layers.ds.params.version", "needs an exact version (X.Y.Z), got the range '<1'"),
    ('version: "0.19.5"', 'version: ">=0.19,<0.20"', "layers.ds.params.version",
     "needs an exact version (X.Y.Z), got the range '>=0.19,<0.20'"),
    ('version: "0.19.5"', 'version: "==0.19.5"', "layers.ds.params.version",
     "needs an exact version written alone (0.19.5), got the requirement '==0.19.5'"),
    ('provides: {python: "3.11.2"}', 'provides: {python: ">=3.11"}', "bases.deb.provides.python",
     "needs an exact version (X.Y.Z), got the range '>=3.11'"),
    ("ops: [fused_adam]}", 'ops: [fused_adam], packages: ["numpy~=2.1"]}', "layers.ds.params.packages[0]",
     "needs an exact version (numpy==X.Y.Z), got the range 'numpy~=2.1'"),
    ("ops: [fused_adam]}", 'ops: [fused_adam], packages: ["numpy==2.*"]}', "layers.ds.params.packages[0]",
     "needs an exact version (numpy==X.Y.Z), got the range 'numpy==2.*'"),
    ("params: {apt: [libaio-dev]}", 'params: {apt: ["libaio-dev>=0.3"]}', "layers.site.params.apt[0]",
     "needs an exact version (libaio-dev=VERSION), got the range 'libaio-dev>=0.3'"),
    ("  namespace: imgbuild\n", '  namespace: imgbuild\n  driver_floor: ">=580"\n', "site.driver_floor",
     "needs an exact version (an NVIDIA driver version, e.g. 580.65.06), got the range '>=580'"),
    ("    gpus: [H100]\n", '    gpus: [H100]\n    driver_floor: "580.*"\n', "stacks.s1.driver_floor",
     "needs an exact version (an NVIDIA driver version, e.g. 580.65.06), got the range '580.*'"),
])
def test_a_range_where_an_exact_version_is_needed_is_one_rule(write, old, new, key, reason):
    """Wherever one version is needed (a version parameter, a base's provides, a pip pin, an apt pin, a driver
    floor), a range or wildcard is said to be one, under one rule id (IB211), with a hint."""
    text = edit(VALID, (old, new))
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if ln not in VALID.splitlines())
    file = write(text)
    res = run_cli("check", "-f", file)
    assert res.code == 2 and refusal_lines(res.err) == [f"spec error[IB211]: {file}:{line}: {key}: {reason}"], res.err
    assert "\n  hint: " in res.err


def test_a_range_as_a_kind_s_default_version_is_the_same_rule(tmp_path):
    root = copy_kinds(tmp_path / "site")
    kind = root / "layers" / "pinned"
    kind.mkdir()
    (kind / "kind.yaml").write_text('description: x\nrole: layer\nparams:\n  version: {type: version, default: ">=1"}\n')
    (kind / "fragment.j2").write_text("RUN true\n")
    res = run_cli("check", "-f", write_stacks(root, VALID))
    assert res.code == 2 and (f"spec error[IB211]: {kind / 'kind.yaml'}:4: params.version.default: needs an exact "
                              "version (X.Y.Z), got the range '>=1'") in res.err, res.err


# -- every independent mistake of a file in one run (issue 20) --------------------------------------

# Five mistakes, each in a place of its own; the line of each carries '# <==' (in this order in the file).
FIVE = [  # (old, new, key, reason, rule)
    ("params: {apt: [libaio-dev]}", "params: {apts: [libaio-dev]}  # <==",
     "layers.site.params.apts", "unknown parameter 'apts' for kind 'ngc-pytorch' (did you mean 'apt'?)", "IB201"),
    ('params: {version: "0.19.5", ops: [fused_adam]}', 'params: {version: ">=0.19", ops: [fused_adam]}  # <==',
     "layers.ds.params.version", "needs an exact version (X.Y.Z), got the range '>=0.19'", "IB211"),
    ('env: {A: "1"}', 'env: "A=1"  # <==',
     "runtimes.env.params.env", "expected a mapping of variable names, got a string", "IB202"),
    ("    gpus: [H100]\n", "    gpus: [h100]  # <==\n",
     "stacks.s1.gpus[0]", "unknown GPU 'h100' (did you mean 'H100'?)", "IB204"),
    ("    extends: s1\n", "    extends: s1\n    colour: blue  # <==\n",
     "stacks.s2.colour", "unknown key 'colour'", "IB201"),
]


def test_every_independent_mistake_is_reported_in_one_run(write):
    """Five mistakes took five runs to find, one refusal each: one run names them all, each as a single
    refusal is named, then how many there are; --json lists them all."""
    text = edit(VALID, *[(old, new) for old, new, *_ in FIVE])
    lines = [i + 1 for i, line in enumerate(text.splitlines()) if "# <==" in line]
    file = write(text)
    expected = [(line, key, reason, rule) for line, (_, _, key, reason, rule) in zip(lines, FIVE)]
    res = run_cli("check", "-f", file)
    assert res.code == 2 and res.out == "" and "Traceback" not in res.err, res.output
    assert refusal_lines(res.err) == [f"spec error[{rule}]: {file}:{line}: {key}: {reason}"
                                      for line, key, reason, rule in expected], res.err
    assert "  hint: allowed: apt, keep_ngc_constraints\n" in res.err   # each with its hint
    assert res.err.endswith(f"\n5 spec errors in {file}\n"), res.err
    res = run_cli("check", "-f", file, "--json")
    assert res.code == 2, res.output
    body = json.loads(res.out)
    assert body["ok"] is False and body["error"] == body["errors"][0], body
    assert [(e["file"], e["line"], e["key"], e["reason"], e["rule"]) for e in body["errors"]] == \
        [(str(file), *each) for each in expected], body


def test_refusals_past_the_limit_are_counted(write):
    from builder.errors import SpecErrors
    many = "".join(f"  x{i:02d}:\n    extends: s1\n    gpus: [G{i:02d}]\n" for i in range(SpecErrors.LIMIT + 5))
    file = write(VALID + many)
    res = run_cli("check", "-f", file)
    assert res.code == 2, res.output
    shown = refusal_lines(res.err)
    assert len(shown) == SpecErrors.LIMIT, res.err
    assert ": stacks.x00.gpus[0]: unknown GPU 'G00'" in shown[0] and ": stacks.x19.gpus[0]: unknown GPU 'G19'" in shown[-1]
    assert res.err.endswith(f"\n... and 5 more\n{SpecErrors.LIMIT + 5} spec errors in {file} "
                            f"(the first {SpecErrors.LIMIT} shown)\n"), res.err
    body = json.loads(run_cli("check", "-f", file, "--json").out)
    assert len(body["errors"]) == SpecErrors.LIMIT and body["errors"][-1]["key"] == "stacks.x19.gpus[0]"


S1 = "  s1:\n    base: ngc\n    layers: [site, ds]\n    project: proj\n    runtime: env\n    gpus: [H100]\n"
S2 = "  s2:\n    extends: s1\n    runtime: env\n"


@pytest.mark.parametrize("text, key, reason", [
    # A refused layer: the stacks naming it (s1, and s2 through extends) do not call it unknown.
    (edit(VALID, ("    kind: deepspeed\n", "    kind: deepsped\n")), "layers.ds.kind", "unknown layer kind 'deepsped'"),
    (edit(VALID, ("    kind: runtime-env\n", "    kind: runtime-env\n    colour: blue\n")),
     "runtimes.env.colour", "unknown key 'colour'"),
    # A refused base: the stacks on it do not call it unknown.
    (edit(VALID, ("    family: ngc-pytorch\n", "    family: ngc\n")), "bases.ngc.family", "'ngc' is not a base family"),
    # A stack with a refusal of its own: the stack extending it does not repeat it, whichever comes first.
    (edit(VALID, ("    gpus: [H100]\n", "    gpus: [h100]\n")), "stacks.s1.gpus[0]", "unknown GPU 'h100'"),
    (edit(VALID, (S1 + S2, S2 + S1.replace("[H100]", "[h100]"))), "stacks.s1.gpus[0]", "unknown GPU 'h100'"),
    (edit(VALID, (S1 + S2, S2 + S1.replace("    gpus: [H100]\n", ""))), "stacks.s1.gpus",
     "layer 'ds' compiles CUDA code but the stack names no target GPU"),
    (edit(VALID, (S1 + S2, S2 + S1 + "    colour: blue\n")), "stacks.s1.colour", "unknown key 'colour'"),
    # A misspelt required parameter is not also missing; a misspelt section is not also missing.
    (edit(VALID, ('{version: "0.19.5", ops', '{verison: "0.19.5", ops')), "layers.ds.params.verison",
     "unknown parameter 'verison' for kind 'deepspeed'"),
    (edit(VALID, ("\nstacks:\n", "\nstack:\n")), "stack", "unknown key 'stack'"),
    (edit(VALID, ("\nlayers:\n", "\nlayer:\n")), "layer", "unknown key 'layer'"),
    # A stack whose name is refused: an `extends` of the name it was meant to have is not called unknown.
    (edit(VALID, ("  s1:\n", "  S1:\n")), "stacks.S1", "'S1' is not a valid name"),
    # ... nor are its tag templates, which {stack} would fill with the refused name.
    (edit(VALID, ("  s1:\n", "  s!1:\n")), "stacks.s!1", "'s!1' is not a valid name"),
    # A required key misspelt in a stack is not also missing, there or in the stack extending it.
    (edit(VALID, (S1, S1.replace("    base: ngc\n", "    bse: ngc\n"))), "stacks.s1.bse", "unknown key 'bse'"),
])
def test_a_refusal_is_not_repeated_by_what_depends_on_it(write, text, key, reason):
    file = write(text)
    res = run_cli("check", "-f", file)
    assert res.code == 2 and len(refusal_lines(res.err)) == 1, res.err
    assert f": {key}: {reason}" in res.err and "spec errors in" not in res.err, res.err


def test_an_unknown_key_leaves_the_rest_of_its_stack_checked(write):
    """A stray key in a stack once ended that stack's reading: its other mistakes came one run later."""
    file = write(edit(VALID, (S1, S1.replace("    gpus: [H100]\n", "    gpus: [h100]\n    colour: blue\n"))))
    res = run_cli("check", "-f", file)
    assert res.code == 2 and len(refusal_lines(res.err)) == 2, res.err
    assert ": stacks.s1.colour: unknown key 'colour'" in res.err and ": stacks.s1.gpus[0]: unknown GPU 'h100'" in res.err


def test_a_refused_site_leaves_the_stacks_checked(write):
    """Only the chain check of a stack reads the site (its registry ties lock file entries to bases): the
    rest of each stack is still checked."""
    file = write(edit(VALID, ("  namespace: imgbuild\n", "  namespace: Imgbuild\n"), ("    gpus: [H100]\n", "    gpus: [h100]\n")))
    res = run_cli("check", "-f", file)
    assert [line.split(": ", 2)[2] for line in refusal_lines(res.err)] == [
        "site.namespace: 'Imgbuild' is not a valid repository path",
        "stacks.s1.gpus[0]: unknown GPU 'h100' (did you mean 'H100'?)"], res.err


# A kind.yaml with five independent mistakes and one that depends on another (a check naming a refused
# parameter): each mistake once, in one run, in the order of the file.
FIVE_IN_A_KIND = """description: x
role: layr
params:
  version: {type: verison}
  flag: {type: bool, colour: blue}
compiles_cuda: maybe
checks:
  - id: v
    check: dist-version
    args: {dist: pinned, equals: "param:version"}
  - id: w
    check: wat
versions:
  pinned: [pinned]
"""


def test_every_independent_mistake_of_a_kind_file_is_reported_in_one_run(tmp_path):
    """Issue 20 left kind.yaml at its first mistake: a site kind with five took five runs. Now one, as for
    stacks.yaml, and a check that names a parameter refused above is not refused again for that."""
    root = copy_kinds(tmp_path / "site")
    kind = root / "layers" / "pinned"
    kind.mkdir()
    (kind / "kind.yaml").write_text(FIVE_IN_A_KIND)
    (kind / "fragment.j2").write_text("RUN true\n")
    res = run_cli("check", "-f", write_stacks(root, VALID))
    assert res.code == 2, res.output
    where = kind / "kind.yaml"
    assert refusal_lines(res.err) == [
        f"spec error[IB208]: {where}:2: role: 'layr' is not a role",
        f"spec error[IB208]: {where}:4: params.version.type: 'verison' is not a parameter type",
        f"spec error[IB201]: {where}:5: params.flag.colour: unknown key 'colour'",
        f"spec error[IB208]: {where}:6: compiles_cuda: 'maybe' is not allowed",
        f"spec error[IB208]: {where}:12: checks[1].check: 'wat' is not a check type",
    ], res.err
    assert res.err.endswith(f"\n5 spec errors in {where}\n"), res.err
    body = json.loads(run_cli("check", "-f", write_stacks(root, VALID), "--json").out)
    assert [e["key"] for e in body["errors"]] == ["role", "params.version.type", "params.flag.colour",
                                                  "compiles_cuda", "checks[1].check"], body


def test_five_mistakes_across_references_lists_and_sections_in_one_check(tmp_path):
    """Issue 36 (8): a reference was named only once the structural mistakes were fixed (its section held a
    refused entry, which it might have named), and only a list's first bad item was. One `check --json` now
    names all of them: a reference beside a refused entry it does not name, every bad item of a list, a key
    misspelt in the site, a kind misspelt, and the near name for each misspelling."""
    from conftest import shipped_data, write_stacks
    data = shipped_data()
    data["site"]["regstry"] = data["site"].pop("registry", "127.0.0.1:5000")                 # a section's key
    data["layers"]["cpu-torch-2.13"]["kind"] = "cpu-troch"                                    # a kind
    data["layers"]["extras"] = {"kind": "pip", "params": {"packages": [                      # two items of a list
        "numpy==2.1.0", "not a req!", "torch==2.13.0", "scipy=="]}}
    data["stacks"]["cpu-smoke"]["layers"] = ["cpu-torch-2.13", "ds-0.19.8-cpu", "extras"]
    data["stacks"]["cpu-smoke"]["project"] = "smoke-trian"                                    # a reference
    file = write_stacks(tmp_path, data)
    for _ in range(2):
        res = run_cli("check", "--json", "-f", file)
        assert res.code == 2, res.output
        got = {(e["key"], e["reason"]) for e in json.loads(res.out)["errors"]}
        assert got == {
            ("site.regstry", "unknown key 'regstry' (did you mean 'registry'?)"),
            ("layers.cpu-torch-2.13.kind", "unknown layer kind 'cpu-troch' (did you mean 'cpu-torch'?)"),
            ("layers.extras.params.packages[1]", next(r for k, r in got if k.endswith("packages[1]"))),
            ("layers.extras.params.packages[3]", next(r for k, r in got if k.endswith("packages[3]"))),
            ("stacks.cpu-smoke.project", "unknown project 'smoke-trian' (did you mean 'smoke-train'?)"),
        }, got
        assert all("is not a valid requirement" in r for k, r in got if "packages" in k)
