"""`imgbuild node-check`: the compute centre's consistency check, run with a released image on a node.

A PyTorch image: torchrun starts N ranks inside the image (NCCL with one process per GPU where the engine
has GPUs, gloo on CPU otherwise); each runs builder/nodecheck/worker.py, mounted read-only, with the
image's own Python. A JAX image: builder/nodecheck/jax_worker.py starts N processes joined by
jax.distributed (or, where that JAX has no CPU collectives, one process with N host devices, and says so).
Rank 0's one tagged line of JSON is the report: per check, pass/fail, numbers, and the ranks that
disagreed. The same workers are what a Slurm job (sbatch.py) or a Kubernetes Job (k8s.py) runs on many nodes.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from builder.ship.engine import Engine
from builder.plan.layout import release_repo
from builder.ship.registry import Registry
from builder.errors import ImgbuildError
from builder.load import tags as tag_templates
from builder.load.spec import Spec

WORKER = Path(__file__).resolve().with_name("worker.py")
JAX_WORKER = Path(__file__).resolve().with_name("jax_worker.py")
FRAMEWORKS = ("torch", "jax")
# Which worker an image takes, asked of the image's own Python: jax where it has jax and no torch.
DETECT = ("import importlib.util as u; print('jax' if u.find_spec('jax') and not u.find_spec('torch') else 'torch')")
IN_IMAGE = "/opt/imgbuild/node_check.py"
RESULT_TAG = "@@IMGBUILD_NODE_CHECK "


class NodeCheckFailed(ImgbuildError):
    exit_code = 8
    label = "node check"


@dataclass
class NodeReport:
    image: str
    world_size: int
    backend: str
    results: list
    seconds: float
    log: str = field(default="", repr=False)

    @property
    def ok(self) -> bool:
        return all(r["status"] != "failed" for r in self.results)

    @property
    def mode(self) -> str:
        """What the run exercised: NCCL on GPUs, or the CPU alone (gloo), said so a pass is not read as more."""
        if self.backend == "nccl":
            return f"GPUs: NCCL on {self.world_size} rank(s)"
        return (f"CPU only ({self.backend}): no GPU, NCCL or fabric was exercised")

    def to_json(self) -> dict:
        return {"image": self.image, "world_size": self.world_size, "backend": self.backend, "mode": self.mode,
                "ok": self.ok, "seconds": self.seconds, "results": self.results}


def gpus_per_node(stack) -> tuple[int | None, str]:
    """The GPUs of each node a GPU stack runs on, and where that comes from: its own or the site's
    gpus_per_node, else the catalog's systems of its GPUs where they agree. (None, why) where nobody says."""
    if not stack.gpus:
        return 0, "the stack names no GPU"
    if stack.gpus_per_node:
        return stack.gpus_per_node, "gpus_per_node of the stack or site.node_check"
    from builder.core import cpubaseline
    names = {g.name for g in stack.gpus}
    found = {s.name: s.gpus_per_node for s in cpubaseline.systems() if names & set(s.gpus) and s.gpus_per_node}
    counts = set(found.values())
    if len(counts) == 1:
        return counts.pop(), "the catalog's systems of " + ", ".join(sorted(names)) + " (" + ", ".join(
            f"{k}: {v}" for k, v in sorted(found.items())) + ")"
    why = ("the catalog's systems disagree (" + ", ".join(f"{k}: {v}" for k, v in sorted(found.items())) + ")"
           if found else "no system of " + ", ".join(sorted(names)) + " in the catalog")
    return None, why


def released_image(spec: Spec, target) -> str:
    """The exact image a stack's release tag names now (REGISTRY/NS/STACK@sha256:...): the check runs on
    that digest, not on whatever the tag names by the time a node pulls it. target: the Stack."""
    stack = target.name
    # A tag the stacks file alone fills (its name, its project's commit) names the stack's newest release.
    values = tag_templates.spec_values(target)
    filled = [tag for tag, missing in (tag_templates.expand(t, values, tag_templates.today()) for t in target.tags
                                       if "date" not in {f for f, _ in tag_templates.fields(t)}) if not missing]
    if not filled:
        raise NodeCheckFailed(f"stack {stack!r} has no release tag made of its name (and project commit) alone to "
                              "find its image by", hint="give the image reference instead of stack=NAME")
    tag = filled[0]
    repo = release_repo(spec.site.namespace, stack)
    digest = Registry(spec.site.registry).manifest_digest(repo, tag)
    if not digest:
        raise NodeCheckFailed(f"stack {stack!r} is not released: {spec.site.registry}/{repo}:{tag} is not in the "
                              "registry", hint=f"imgbuild build stack={stack}")
    return f"{spec.site.registry}/{repo}@{digest}"


def framework_of(stack) -> str:
    """The worker a stack's images take: jax where a layer of its chain provides jax, else torch."""
    return "jax" if any("jax" in layer.kind.provides for layer in stack.chain) else "torch"


def worker_file(framework: str) -> Path:
    return JAX_WORKER if framework == "jax" else WORKER


def detect(engine: Engine, image: str, platform: str | None = None) -> str:
    res = engine.run_container(image, ["python", "-c", DETECT], timeout=120, platform=platform)
    word = res.stdout.strip().splitlines()[-1] if res.returncode == 0 and res.stdout.strip() else ""
    if word not in FRAMEWORKS:
        raise NodeCheckFailed(f"could not tell whether {image} is a PyTorch or a JAX image (exit {res.returncode}): "
                              f"{(res.stderr or res.stdout).strip()[-400:]}", hint="give --framework torch or jax")
    return word


def framework_in_rootfs(rootfs: Path) -> str:
    """The worker an unpacked image takes, read off its Python folders: jax where it has jax and no torch."""
    found = {name for name in FRAMEWORKS for where in ("usr/lib", "usr/local/lib", "opt/*/lib")
             if any(rootfs.glob(f"{where}/python3*/*-packages/{name}/__init__.py"))}
    return "jax" if found == {"jax"} else "torch"


def _fault() -> dict:
    """The fault put in on purpose (worker.py's docstring) and the check's timeout, passed through from the
    caller's environment."""
    return {k: os.environ[k] for k in ("IMGBUILD_NODE_CHECK_PERTURB", "IMGBUILD_NODE_CHECK_TIMEOUT") if os.environ.get(k)}


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_argv(procs: int, script: str, port: int = 29500) -> list[str]:
    """torchrun on one node, through the image's Python (a venv's torchrun script may not be on PATH).
    port: the rendezvous port; fixed in a container of its own, free on the host's network."""
    # A static rendezvous on the loopback address: --standalone names the container's hostname, which
    # resolves to nothing in a container without a network, and the ranks wait out the store's timeout.
    return ["python", "-m", "torch.distributed.run", "--nnodes", "1", "--node-rank", "0", "--master-addr", "127.0.0.1",
            "--master-port", str(port), "--nproc-per-node", str(procs), script]


def worker_argv(procs: int, options: dict, port: int = 29500, framework: str = "torch") -> list[str]:
    # JAX's worker starts its processes itself (process 0 the coordinator on `port`).
    argv = (["python", IN_IMAGE, "--procs", str(procs), "--port", str(port)] if framework == "jax"
            else torchrun_argv(procs, IN_IMAGE, port))
    for key, value in options.items():
        argv += [f"--{key.replace('_', '-')}"] + ([] if value is True else [str(value)])   # True: a flag
    return argv


# `kubectl logs --prefix` puts the pod and container before each line: [pod/NAME-0-x1y2z/check] ...
KUBECTL_PREFIX = re.compile(r"^\[pod/[a-z0-9.-]+/[a-z0-9-]+\] ")


def parse(image: str, stdout: str, stderr: str, returncode: int, limits: dict | None = None) -> NodeReport:
    """The report in a check's output: a container's, a Slurm job's, or pods' logs as kubectl prints them."""
    lines = (KUBECTL_PREFIX.sub("", l, count=1) for l in reversed(stdout.splitlines()))
    line = next((l for l in lines if l.startswith(RESULT_TAG)), None)
    if line is None:
        tail = (stderr or stdout).strip()[-1500:]
        raise NodeCheckFailed(f"the check did not finish in {image} (exit {returncode}): {tail}")
    data = json.loads(line[len(RESULT_TAG):])
    return NodeReport(image=image, world_size=data["world_size"], backend=data["backend"],
                      results=judge_bandwidth(data["results"], limits or {}), seconds=data["seconds"], log=stderr)


def judge_bandwidth(results: list, limits: dict) -> list:
    """The bandwidth the worker measured, judged here (the worker only measures): each node's all_reduce_perf
    (nccl-tests) against the intra-node threshold, and the NCCL all-reduce sweep across nodes against the
    inter-node one. limits: {"intra": GB/s, "inter": GB/s} a site set (site.node_check.min_busbw_gbps); the
    catalog's figure for the GPU otherwise (busbw.threshold). A run too small to compare is not a pass."""
    from builder.nodecheck import busbw
    out = []
    hosts = next((r["numbers"].get("hosts") for r in results if r["id"] == "env"), None) or []
    for r in results:
        r = dict(r)
        if r["id"] == "nccl-tests" and r["status"] == "passed":
            verdicts = []
            for node in r["numbers"].get("nodes", []):
                run = busbw.parse(node["output"])
                gpu = _catalog_gpu(run.device)
                status, detail = busbw.judge(run, busbw.threshold(gpu, "intra", limits.get("intra")), "intra")
                verdicts.append((status, detail))
            bad = [d for s, d in verdicts if s in ("failed", "not comparable")]
            r["status"] = "failed" if bad else "passed"
            r["detail"] = "; ".join(d for _, d in verdicts) or r["detail"]
        if r["id"] == "allreduce-bw" and len(hosts) > 1 and r["status"] == "passed":
            rows = [busbw.Row(x["bytes"], x["busbw_GBps"], x["busbw_GBps"], 0) for x in r["numbers"].get("sweep", [])]
            device = next((x["numbers"].get("rank0", {}).get("device") for x in results if x["id"] == "env"), None)
            run = busbw.Run(tuple(rows), tuple(hosts), 0, device or "")
            status, detail = busbw.judge(run, busbw.threshold(_catalog_gpu(device or ""), "inter", limits.get("inter")),
                                         "inter")
            if status in ("failed", "not comparable"):
                r["status"], r["detail"] = "failed", detail
            else:
                r["detail"] = f"{r['detail']}; {detail}"
        out.append(r)
    return out


def _catalog_gpu(device: str) -> str | None:
    """The catalog's GPU in a device name as CUDA prints it ("NVIDIA H100 80GB HBM3" -> H100)."""
    from builder.core import catalog
    words = set(re.split(r"[\s,-]+", device.upper()))
    found = [name for name in catalog.gpus() if name.upper() in words]
    return max(found, key=len) if found else None


def run(engine: Engine, image: str, procs: int = 2, gpus: bool | None = None, env: dict | None = None,
        options: dict | None = None, timeout: float = 900, framework: str | None = None,
        limits: dict | None = None) -> NodeReport:
    """Run the check in `image` with `procs` ranks. gpus: NCCL on the engine's GPUs (default: when it has
    any). env: variables every rank gets (a fault put in on purpose, a site's NCCL settings). A release of
    several platforms (an index) runs its entry for the engine's own platform, the node's. framework:
    torch or jax (default: asked of the image)."""
    gpus = engine.has_gpu() if gpus is None else gpus
    platform = engine.platform()
    if engine.inspect(image) is None:
        engine.pull(image, platform)
    framework = framework or detect(engine, image, platform)
    # gloo on a container with only its loopback: name the interface, or it resolves the hostname
    base_env = {} if gpus else {"GLOO_SOCKET_IFNAME": "lo"}
    # Gloo under JAX binds to the address of the container's hostname, which resolves to nothing in a
    # container without a network ("gloo/transport/tcp/device.cc:99 rv == 0. -3 vs 0"): name it localhost.
    res = engine.run_container(image, worker_argv(procs, options or {}, framework=framework),
                               mounts=[(str(worker_file(framework)), IN_IMAGE)],
                               hostname="localhost" if framework == "jax" and not gpus else None,
                               gpus=gpus, env={**base_env, **_fault(), **(env or {})}, shm_size="1g", timeout=timeout,
                               platform=platform)
    return parse(image, res.stdout, res.stderr, res.returncode, limits)


def run_squashfs(sqsh: Path, procs: int = 2, options: dict | None = None, timeout: float = 900,
                 framework: str | None = None) -> NodeReport:
    """The check inside an exported squashfs, started as Enroot would start it (builder.export.run_in_rootfs):
    unpacked to a scratch folder beside it, the worker copied in, torchrun (or JAX's worker) through the
    image's /etc/rc."""
    import shutil
    import tempfile
    from builder.export import run_in_rootfs, unpack
    with tempfile.TemporaryDirectory(prefix="imgbuild-rootfs-", dir=sqsh.resolve().parent) as tmp:
        rootfs = unpack(sqsh, Path(tmp) / "rootfs")
        framework = framework or framework_in_rootfs(rootfs)
        (rootfs / IN_IMAGE.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(worker_file(framework), rootfs / IN_IMAGE.lstrip("/"))
        # No network namespace of its own (as under Enroot): a fixed port could be a job's on this node.
        res = run_in_rootfs(rootfs, worker_argv(procs, options or {}, port=_free_port(), framework=framework),
                            env={"GLOO_SOCKET_IFNAME": "lo", **_fault()}, timeout=timeout)
    return parse(str(sqsh), res.stdout, res.stderr, res.returncode)


def table(report: NodeReport) -> str:
    rows = [f"node check: {report.image}", f"  {report.world_size} ranks, {report.backend}, {report.seconds} s; {report.mode}"]
    for r in report.results:
        word = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}[r["status"]]
        ranks = f" [rank {', '.join(map(str, r['bad_ranks']))}]" if r["bad_ranks"] else ""
        rows.append(f"  {word} {r['id']:<13} {r.get('seconds', 0.0):>6.1f} s{ranks}  {r['detail']}")
        for row in r["numbers"].get("sweep", []):
            rows.append(f"       {row['bytes']:>12} B  {row['time_us']:>10.1f} us  algbw {row['algbw_GBps']:>7.3f} GB/s"
                        f"  busbw {row['busbw_GBps']:>7.3f} GB/s")
    failed = [r["id"] for r in report.results if r["status"] == "failed"]
    rows.append(f"{'FAILED: ' + ', '.join(failed) if failed else 'ok'}: "
                f"{sum(r['status'] == 'passed' for r in report.results)} passed, {len(failed)} failed, "
                f"{sum(r['status'] == 'skipped' for r in report.results)} skipped")
    return "\n".join(rows)


__all__ = ["NodeCheckFailed", "NodeReport", "released_image", "gpus_per_node", "run", "table", "framework_of",
           "worker_file", "WORKER", "JAX_WORKER", "IN_IMAGE"]
