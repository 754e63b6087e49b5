"""The stacks.yaml reference, written from the code that reads the file: the loader's key sets (every key
it accepts), site.ci's, and every layer kind's folder (parameters with type, default, choices and doc;
checks; what it provides). `imgbuild kinds` prints it; docs/stacks-reference.md is its Markdown, and a
test regenerates it, so the page cannot drift from the loader. A key the loader accepts with no line
here fails that test.
"""

from __future__ import annotations

import json

from builder.load import ciconf, k8sconf, nodeconf, retention, slurmconf, trustconf
from builder.load import spec as spec_mod
from builder.load.params import TYPES

# One line per key the loader accepts, by section. builder.load.spec's sets are the truth; these are
# the words for them.
KEY_DOCS = {
    "top": {
        "version": "The file format: 1.",
        "site": "Where images live and how CI runs: registry, namespace, driver floor, ci.",
        "bases": "Images the site does not build (an NGC release, a mirrored Debian), by name.",
        "layers": "Framework layers: a kind and its parameters, by name (shared by every stack that names them).",
        "projects": "A team's pins (a Megatron-LM commit, extra packages): the layer a stack ends with.",
        "runtimes": "Runtime environment layers (NCCL, IB, OMP settings): above a stack's layers and beneath its "
                    "project (a new project pin rebuilds the project alone).",
        "stacks": "What is built and released: a base, layers, a project, a runtime, GPUs and tags.",
    },
    "site": {
        "registry": "The site registry as host[:port] (default 127.0.0.1:5000); credentials come from the Docker store.",
        "namespace": "The repository path under which layer images and releases are pushed (default imgbuild).",
        "description": "Free text.",
        "driver_floor": "The oldest NVIDIA driver on the site's GPU nodes (e.g. 580.65.06): preflight checks every base's CUDA against it.",
        "epoch": "A deliberate rebuild of everything: a whole number or a word, an input of every content key (raise it to rebuild every layer). Upgrading imgbuild changes no key by itself.",
        "source_date_epoch": "The one time, in seconds since 1970, that every file of every layer carries where the engine "
                             "can fix file times (Podman/Buildah), and SOURCE_DATE_EPOCH at build time (pip writes "
                             "checked-hash .pyc). Default 315532800 (1980-01-01, the earliest a ZIP entry holds); an input "
                             "of every key (docs/reproducible.md).",
        "engine": "What builds: docker (the Docker engine's BuildKit, the default) or podman (Buildah, no daemon); "
                  "`--engine` overrides it for one run (docs/podman.md).",
        "retention": "What `imgbuild gc` keeps (below).",
        "k8s": "What `imgbuild node-check --emit-k8s` writes into Kubernetes manifests (below).",
        "ci": "How `imgbuild ci` writes pipelines (below).",
        "trust": "Who may write proof: the protected pipeline's public keys and the staging namespace (below; docs/trust.md).",
        "catalog": "The site's own catalog: a YAML file of the shipped catalog's schema, relative to the stacks file, whose "
                   "records (each with its source) add to or override the shipped catalog's: a Megatron release it lacks, an NGC "
                   "month, a base built in house (bases: IMAGE: {python, torch, cuda, os, source}). Validated when read; findings "
                   "judged by it name it as their source (docs/site-catalog.md).",
        "cpu_baseline": "The instruction-set level every node shares, one per platform (x86-64-v2/v3/v4, armv8-a, "
                        "armv8.2-a, armv9-a, neoverse-v2): compiled host code is built for it, never for the build "
                        "host, and the cpu-isa check refuses a binary beyond it. Default: derived per stack from its "
                        "GPUs' systems (docs/cpu-baseline.md).",
        "node_check": "The GPU nodes `imgbuild node-check` exercises (below).",
        "slurm": "What `imgbuild node-check --emit-sbatch` writes into the batch script (below).",
        "partitions": "The site's partitions, NAME: {slurm_partition, node_selector: {label: value}, env: {NAME: value}}: "
                      "`node-check --partition NAME` writes launch files for those nodes, their runtime env (HCA "
                      "names, socket interface, GID index) laid over the stack's (docs/cluster.md).",
    },
    "site.slurm": {
        "partition": "#SBATCH --partition (the flag --partition, or a site partition's slurm_partition, overrides it).",
        "account": "#SBATCH --account.",
        "time": "#SBATCH --time (default 00:30:00).",
        "exclusive": "#SBATCH --exclusive, whole nodes (default true: bus bandwidth is not measured beside another job).",
        "enroot_version": "The site's Enroot: below 4.0 (the default) pyxis is given REGISTRY#REPO@sha256:..., from 4.0 "
                          "REGISTRY/REPO@sha256:...",
    },
    "site.node_check": {
        "gpus_per_node": "The GPUs of each node (1-64): a GPU stack's node check and emitted jobs use them. Default: "
                         "the catalog's systems of the stack's GPUs where they agree (8 for HGX/DGX boards).",
        "min_busbw_gbps": "All-reduce bus bandwidth a healthy node reaches, {intra: GB/s, inter: GB/s}: intra for "
                          "one node's NVLink (all_reduce_perf), inter across nodes (the fabric). Replaces the "
                          "catalog's figure (90% of it); across nodes only the site knows one.",
    },
    "site.trust": {
        "staging_namespace": "Where runs without the signing key (branches, merge requests) push layer images "
                             "(default NAMESPACE-staging); they read site.namespace as a cache and release nothing.",
        "staged_keys": "What the protected pipeline does with a key only staging holds: rebuild (the default and only choice).",
        "keys": "[{id, public_key: FILE.pub or PEM, not_before: DATE, not_after: DATE}]: the keys whose signatures "
                "promote and `imgbuild verify` accept, each in its period (several: rotation).",
    },
    "site.k8s": {
        "flavor": "The launch files' flavour: job (default, plain Kubernetes), jobset, trainjob (Kubeflow Trainer v2), "
                  "volcano (gang scheduled) or pytorchjob (legacy); --k8s-flavor overrides it (docs/kubernetes.md).",
        "namespace": "The Kubernetes namespace of the check's objects (default: kubectl's current one).",
        "rdma_resources": "Extended resources each pod requests for RDMA/InfiniBand, as the site's device plugin names them, "
                          "e.g. {rdma/ib: 1} or {rdma/rdma_shared_device_a: 1}.",
        "node_selector": "Node labels the pods must match, e.g. {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}.",
        "node_affinity": "Node labels one of whose values a node must have (required node affinity), {LABEL: [values]}.",
        "tolerations": "Tolerations as Kubernetes writes them: [{key, operator: Equal|Exists, value, effect, tolerationSeconds}].",
        "priority_class": "The pods' priorityClassName.",
        "scheduler_name": "The pods' schedulerName (a secondary scheduler; the volcano flavour sets volcano).",
        "queue": "A Volcano queue (the volcano flavour's spec.queue).",
        "labels": "Labels on every object and pod, e.g. {kueue.x-k8s.io/queue-name: QUEUE} for Kueue.",
        "annotations": "Annotations on every object and pod, e.g. {k8s.v1.cni.cncf.io/networks: NET} for Multus' secondary NICs.",
        "host_network": "Pods on the host's network (true where RDMA is only on the host's interfaces); default false.",
        "shm_size": "The size of each pod's /dev/shm (NCCL's shared memory), default 8Gi.",
        "image_pull_secret": "A Secret (dockerconfigjson) in that namespace for pulling from the site registry.",
        "trainer_runtime": "trainjob: a ClusterTrainingRuntime of the cluster to run (e.g. torch-distributed) instead "
                           "of the TrainingRuntime imgbuild writes; placement and the worker's mount reach it as a "
                           "runtime patch (Trainer v2.2 and later).",
    },
    "site.retention": {
        "keep_releases": "The newest N released images of each stack (default 3).",
        "keep_tags": "Release tags (globs allowed) whose images are always kept, e.g. [prod, \"*-stable\"] (default none).",
        "keep_days": "Everything built or released in the last D days is kept (default 14).",
        "grace_hours": "The keys of a build or release that started in the last H hours (its lease) are kept (default 24).",
    },
    "site.ci": {
        "release_branch": "The only branch whose pipelines release (default: the repository's default branch).",
        "runner_tags": "GitLab tags of the runners that build and release (none: any runner).",
        "gpu_runner_tags": "GitLab: GPU model (H100) or generation (hopper) -> tags of runners that have one.",
        "github_runs_on": "GitHub Actions runs-on labels of the builders (default [self-hosted]).",
        "github_gpu_runs_on": "GitHub: GPU model or generation -> runs-on labels of runners that have one.",
        "platform_runner_tags": "GitLab: platform (linux/arm64) -> tags of runners of that CPU, which build its layer "
                                "images natively; without one they build on runner_tags under QEMU emulation.",
        "github_platform_runs_on": "GitHub: platform -> runs-on labels of runners of that CPU (as platform_runner_tags).",
        "github_environment": "The GitHub environment of release jobs (default imgbuild-release): protect it.",
        "github_staging_environment": "GitHub: the environment of node and GPU jobs off the release branch where a "
                                      "protected secret exists (default imgbuild-staging; never github_environment).",
        "secrets": "ENV -> {from: CI secret name, reach: all|protected|release (default protected), file: bool}: which "
                   "jobs get which CI secret under which name; names only (docs/ci.md, Secrets).",
        "github_actions": "Pins of the actions the workflow uses: {checkout|upload-artifact: {commit, repo, version}}.",
        "timeouts": "Job timeouts in minutes: build, cuda_build, gpu, release, review.",
        "lock_check": "true (default): the pipeline's first job runs `imgbuild lock --check`, and every chain of node "
                      "jobs needs it; false: no such job (the file's header says so).",
        "require_locked": "true (default): node and GPU jobs build with --require-locked (a pip layer without its locked "
                          "set is an error, IB096); false: pip resolves such a layer at build time (the header says so).",
        "gpu_checks": "{waive: {STACK: REASON}}: stacks released with their GPU checks skipped, on purpose. Without it "
                      "a stack with GPUs is released only where its GPU checks ran on one of them.",
    },
    "bases.NAME": {
        "image": "The image reference; `{registry}` stands for site.registry.",
        "digest": "sha256:... pinning it (else `imgbuild lock` records one, else the registry is asked).",
        "family": "ngc-pytorch, ngc-jax, cuda or debian: which kinds may sit on it first.",
        "provides": "Declared facts (python, torch, cuda, cudnn, nccl, os, ...) where nothing measured them.",
        "source": "Where the declared facts come from (free text, shown beside findings).",
        "description": "Free text.",
    },
    "layers.NAME": {
        "kind": "The layer kind (a folder under layers/; `imgbuild kinds` lists them).",
        "params": "The kind's parameters (below, per kind).",
        "description": "Free text.",
    },
    "stacks.NAME": {
        "extends": "Another stack whose keys this one starts from.",
        "description": "Free text.",
        "base": "A name under bases.",
        "layers": "Names under layers, bottom to top.",
        "project": "A name under projects, or a list of them: each a layer at the top, above the runtime, in the "
                   "order given. Projects of one stack share one image: two that write the same path (a checkout, a "
                   "uv venv) or install the same distribution (megatron-core from two commits, one repository twice, "
                   "a package pinned two ways) are refused (IB081), naming both. A second team's project is a second "
                   "stack: `extends:` the first and name its own `project:`.",
        "runtime": "A name under runtimes.",
        "above": "Layers installed above the projects, in order (a package into a project's virtual environment).",
        "gpus": "Target GPUs by catalog name (A100, H100, H200, ...): the arch lists and the GPU runners follow.",
        "tags": "Release tag templates; fields {stack}, {date}, {project_commit} and every version field (`imgbuild "
                "kinds` lists them). {date} is the release day as YYYY.MM.DD; {date:FORMAT} takes a strftime format "
                "of %Y %y %m %d %H %M %S %j %U %W (`{date:%Y%m%d}`). {project_commit} is the first 12 hex digits of "
                "the stack's one project's commit (refused on a stack with no project or several): two commits "
                "that declare one megatron-core version give one `-mcore{megatron}` tag, which moves, and two "
                "`-{project_commit}` tags. A version field that nothing in the stack declares is read from the "
                "image at release; `check` warns of it (IB005), since `plan` and `diff` can only print it unfilled.",
        "driver_floor": "This stack's partition's oldest driver, where it differs from the site's.",
        "waivers": "Findings this stack accepts: [{rule: IBxxx, reason: ...}].",
        "platforms": "What it is built for: [linux/amd64], [linux/arm64] or both (one release, an OCI index of each "
                     "platform's image). Default: its GPUs' hosts (GH200, GB200, GB300: linux/arm64; other GPUs: "
                     "linux/amd64), linux/amd64 without GPUs.",
        "cpu_baseline": "This stack's CPU level(s), where they differ from the site's (only levels of its platforms).",
        "gpus_per_node": "The GPUs of each node of this stack's partition, where they differ from the site's.",
    },
}
SECTIONS = {"top": spec_mod.TOP_KEYS, "site": spec_mod.SITE_KEYS, "site.ci": ciconf.KEYS, "site.trust": trustconf.KEYS, "site.retention": retention.KEYS, "site.k8s": k8sconf.KEYS, "site.node_check": nodeconf.KEYS, "site.slurm": slurmconf.SLURM_KEYS,
            "bases.NAME": spec_mod.BASE_KEYS, "layers.NAME": spec_mod.LAYER_KEYS, "stacks.NAME": spec_mod.STACK_KEYS}


def undocumented() -> list[str]:
    """Keys the loader accepts that this module says nothing of (a test demands none)."""
    return [f"{section}.{key}" for section, keys in SECTIONS.items() for key in sorted(keys)
            if key not in KEY_DOCS[section]]


def _default(value) -> str:
    if value is None:
        return "-"
    return json.dumps(value if not isinstance(value, tuple) else list(value), default=str)


def kind_data(kind) -> dict:
    return {
        "name": kind.name, "role": kind.role, "description": " ".join(kind.description.split()),
        "base_family": " or ".join(kind.base_family), "needs": list(kind.needs), "provides": list(kind.provides),
        "compiles_cuda": kind.compiles_cuda + (f" (when {kind.compiles_cuda_param} is set)" if kind.compiles_cuda_param else ""),
        "versions": {f: list(d) for f, d in kind.versions},
        "params": [{"name": p.name, "type": p.type, "required": p.required,
                    "default": None if p.required else p.default, "choices": list(p.choices),
                    "doc": " ".join(p.doc.split())} for p in kind.params.values()],
        "checks": [{"id": c.id, "check": c.check, "gpu": c.gpu, "doc": " ".join(c.doc.split())} for c in kind.checks],
    }


def kinds_text(kinds: dict, name: str | None = None) -> str:
    """`imgbuild kinds`: one line a kind; `imgbuild kinds NAME`: that kind whole."""
    if name is None:
        width = max(len(k) for k in kinds) + 2
        lines = [f"{k:<{width}}{kinds[k].role:<8}{' '.join(kinds[k].description.split())[:90]}" for k in sorted(kinds)]
        return "\n".join(lines + ["", "imgbuild kinds NAME shows a kind's parameters and checks."])
    d = kind_data(kinds[name])
    lines = [f"{d['name']} ({d['role']}): {d['description']}",
             f"  needs: {', '.join(d['needs']) or '-'}; provides: {', '.join(d['provides']) or '-'}; "
             f"compiles CUDA: {d['compiles_cuda']}" + (f"; first on a {d['base_family']} base" if d["base_family"] else ""),
             "  parameters:"]
    for p in d["params"]:
        head = f"    {p['name']}: {p['type']}" + (", required" if p["required"] else f", default {_default(p['default'])}")
        many = "one or more of" if p["type"] == "list" else "one of"
        lines.append(head + (f", {many} {', '.join(p['choices'])}" if p["choices"] else ""))
        if p["doc"]:
            lines.append(f"        {p['doc']}")
    lines.append("  checks (run in every image built on it):")
    lines += [f"    {c['id']}: {c['check']}" + (" (GPU)" if c["gpu"] else "") + (f": {c['doc']}" if c["doc"] else "")
              for c in d["checks"]]
    if d["versions"]:
        lines.append("  version fields: " + ", ".join(f"{{{f}}}" for f in d["versions"]))
    return "\n".join(lines)


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(kinds: dict) -> str:
    """docs/stacks-reference.md."""
    out = ["# stacks.yaml reference", "",
           "Written by `imgbuild kinds --markdown` from the loader's key sets and the shipped layer kinds; "
           "`tests/test_reference.py` fails when this page and the code disagree. `imgbuild init` writes a "
           "minimal annotated file to start from.", ""]
    for section, docs in KEY_DOCS.items():
        out += [f"## `{section}`" if section != "top" else "## Top-level keys", "", "| key | what it is |", "|---|---|"]
        out += [f"| `{key}` | {_md(docs[key])} |" for key in sorted(SECTIONS[section])]
        out.append("")
    out += ["## Parameter types", "", ", ".join(f"`{t}`" for t in sorted(TYPES)), "", "## Layer kinds", ""]
    for name in sorted(kinds):
        d = kind_data(kinds[name])
        out += [f"### `{name}` ({d['role']})", "", _md(d["description"]), "",
                f"needs: {', '.join(d['needs']) or '-'}; provides: {', '.join(d['provides']) or '-'}; compiles CUDA: "
                f"{d['compiles_cuda']}" + (f"; first on a `{d['base_family']}` base" if d["base_family"] else "")
                + (f"; version fields: {', '.join('`{' + f + '}`' for f in d['versions'])}" if d["versions"] else ""), ""]
        if d["params"]:
            out += ["| parameter | type | default | doc |", "|---|---|---|---|"]
            for p in d["params"]:
                default = "required" if p["required"] else f"`{_md(_default(p['default']))}`"
                many = "One or more of" if p["type"] == "list" else "One of"
                choices = f" {many}: {', '.join(p['choices'])}." if p["choices"] else ""
                out.append(f"| `{p['name']}` | {p['type']} | {default} | {_md(p['doc'])}{choices} |")
            out.append("")
        if d["checks"]:
            out += ["Checks: " + "; ".join(f"`{c['id']}` ({c['check']}{', GPU' if c['gpu'] else ''})" for c in d["checks"]), ""]
    return "\n".join(out).rstrip() + "\n"


INIT = """\
# stacks.yaml: the site's images, written by `imgbuild init`. Reference: docs/stacks-reference.md,
# `imgbuild kinds` (every layer kind and its parameters). Check it with `imgbuild check`.
version: 1

site:
  registry: {registry}          # where layer images and releases are pushed
  namespace: {namespace}

bases:
  debian-bookworm:
    image: "{{registry}}/mirror/debian:bookworm"   # scripts/setup-host.sh mirrors it there
    family: debian
    provides: {{python: "3.11.2", os: debian-12}}

layers:
  torch-cpu:
    kind: cpu-torch             # torch from a wheel pinned by its sha256, found in pip's find-links
    params:
      wheel:
        file: torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl
        sha256: 6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b
      tools: ["setuptools==80.9.0", "wheel==0.45.1", "ninja==1.11.1.4"]
  deepspeed:
    kind: deepspeed
    params: {{version: "0.19.8", ops: [cpu_adam]}}   # ops compiled at build time

stacks:
  {stack}:
    description: A first stack; add gpus and an NGC base for GPU nodes (see the shipped stacks.yaml).
    base: debian-bookworm
    layers: [torch-cpu, deepspeed]
    tags: ["{{stack}}", "{{stack}}-{{date}}", "{{stack}}-torch{{torch}}-ds{{deepspeed}}"]
"""


# `imgbuild init --ngc MONTH --gpus H100,A100`: a GPU stack on an NGC PyTorch month the catalog knows, with a
# DeepSpeed release that `check` accepts on it (builder.cli.init picks it) compiled for the GPUs given.
INIT_GPU = """\
# stacks.yaml: the site's images, written by `imgbuild init --ngc {month}`. Reference: docs/stacks-reference.md,
# `imgbuild kinds` (every layer kind and its parameters). Check it with `imgbuild check`; `imgbuild facts`
# lists what the catalog knows of NGC {month} (torch {torch}, CUDA {cuda}, Python {python}).
version: 1

site:
  registry: {registry}          # where layer images and releases are pushed
  namespace: {namespace}
  # driver_floor: ...          # the oldest driver on the GPU nodes, as nvidia-smi prints it: checked against CUDA {cuda}

bases:
  ngc-{month}:
    image: nvcr.io/nvidia/pytorch:{month}-py3   # or its mirror: "{{{{registry}}}}/mirror/pytorch:{month}-py3"
    family: ngc-pytorch
    # digest: recorded by `imgbuild lock base=ngc-{month}`, which also measures what the image holds

layers:
  ngc-{month}-site:
    kind: ngc-pytorch           # adopts the base; NGC's torch, CUDA and NCCL stay as shipped
    params: {{{{apt: [libaio-dev, ninja-build]}}}}
  deepspeed-{deepspeed}:
    kind: deepspeed             # its CUDA ops compiled for the stack's GPUs (TORCH_CUDA_ARCH_LIST)
    params: {{{{version: "{deepspeed}", ops: [cpu_adam, fused_adam]}}}}

stacks:
  {stack}:
    description: DeepSpeed {deepspeed} on NGC PyTorch {month} for {gpu_list}.
    base: ngc-{month}
    layers: [ngc-{month}-site, deepspeed-{deepspeed}]
    gpus: [{gpu_list}]
    tags: ["{{{{stack}}}}", "{{{{stack}}}}-{{{{date}}}}", "{{{{stack}}}}-torch{{{{torch}}}}-cuda{{{{cuda}}}}-ds{{{{deepspeed}}}}"]
"""


def init_text(registry: str = spec_mod.DEFAULT_REGISTRY, namespace: str = spec_mod.DEFAULT_NAMESPACE,
              stack: str = "first-stack", ngc: dict | None = None) -> str:
    """The file `imgbuild init` writes: the CPU stack on the mirrored Debian, or (ngc: {month, torch, cuda,
    python, deepspeed, gpus}) a GPU stack on an NGC PyTorch month."""
    if ngc is None:
        return INIT.format(registry=registry, namespace=namespace, stack=stack)
    return INIT_GPU.format(registry=registry, namespace=namespace, stack=stack, gpu_list=", ".join(ngc["gpus"]),
                           **{k: v for k, v in ngc.items() if k != "gpus"}).format()


__all__ = ["KEY_DOCS", "undocumented", "kind_data", "kinds_text", "markdown", "init_text"]
