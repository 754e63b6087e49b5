"""The node check as a Slurm batch job that runs from any node and any directory: one task per rank over N
nodes, started in the image by pyxis (`srun --container-image`) where the cluster has it, else by a container
command the site names (IMGBUILD_CONTAINER_RUN; default `docker run` on the node's network).

The worker (builder/nodecheck/worker.py) travels inside the script, never as a path of the machine that wrote
it: the batch step writes it to node-local storage and `sbcast` copies it to every node of the job (no shared
filesystem needed). The pyxis image reference is written in the form the site's Enroot parses
(REGISTRY#REPO@sha256:... below Enroot 4.0, site.slurm.enroot_version). The job asks for whole nodes
(--exclusive, so bus bandwidth is not measured beside another job), and for the partition, account and time
limit of site.slurm or the flags. Rank 0 prints the report line into the job's output, which `imgbuild
node-check --from-log` reads.
"""

from __future__ import annotations

import hashlib
import re
import shlex

from builder.errors import SpecError
from builder.load.slurmconf import SlurmSettings
from builder.nodecheck import IN_IMAGE

SAFE = re.compile(r"[A-Za-z0-9._:/@+-]+")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Variables every rank's container gets from the task: torch.distributed's rendezvous, and what the
# network and the check read. The stack's runtime variables are added to them.
PASSED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME",
          "NCCL_SOCKET_IFNAME", "NCCL_DEBUG", "IMGBUILD_NODE_CHECK_PERTURB", "IMGBUILD_NODE_CHECK_TIMEOUT")


def pyxis_image(image: str, hash_form: bool) -> str:
    """REGISTRY/REPO@sha256:... as pyxis' --container-image takes it: Enroot before 4.0 reads the registry only
    before a '#' (REGISTRY#REPO), and would take REGISTRY/REPO for a repository on Docker Hub."""
    registry, _, rest = image.partition("/")
    if hash_form and ("." in registry or ":" in registry or registry == "localhost") and rest:
        return f"{registry}#{rest}"
    return image


def script(image: str, worker: str, nodes: int, tasks_per_node: int, gpus_per_node: int = 0,
           env: dict | None = None, settings: SlurmSettings = SlurmSettings(), partition: str | None = None,
           account: str | None = None, time_limit: str | None = None, worker_args: list | None = None,
           framework: str = "torch", name: str = "imgbuild-node-check", target: str | None = None) -> str:
    """The batch script's text, the worker's text inside it. env: the stack's runtime variables (its NCCL and IB
    settings, with the targeted partition's laid over them), exported for every task, so the check sees what a
    training job on those nodes would. framework: torch (each task a torch.distributed rank) or jax (each task
    a jax.distributed process, its GPU the task's local id). target: the site partition it was written for."""
    # The script splices these into commands a shell reads again (srun bash -c "..."): only the characters of
    # image references, names and plain paths get there.
    for what, value in (("image reference", image), ("job name", name), ("partition", partition or "x"),
                        ("account", account or "x"), ("time limit", time_limit or "x")):
        if not SAFE.fullmatch(value):
            raise SpecError(f"{what} {value!r} has characters a batch script cannot carry safely; nothing was written",
                            hint="letters, digits and . _ - / : @ only")
    bad = [k for k in (env or {}) if not ENV_NAME.fullmatch(k)]
    if bad:
        raise SpecError(f"{bad[0]!r} is not an environment variable name; nothing was written")
    env = dict(env or {})
    partition = partition or settings.partition
    account = account or settings.account
    time_limit = time_limit or settings.time
    names = list(dict.fromkeys([*PASSED, *env]))
    q = shlex.quote
    args = " ".join(q(a) for a in (worker_args or []))
    if framework == "jax":
        # $JAXARGS is text with $SLURM_* in it: each task's bash -c expands those, so the ids are the task's.
        args = "$JAXARGS" + (f" {args}" if args else "")
    # A delimiter the worker's text cannot hold, so the heredoc ends where the worker does.
    tag = "IMGBUILD_WORKER_" + hashlib.sha256(worker.encode()).hexdigest()[:16].upper()
    if tag in worker:
        raise SpecError("the worker holds its own heredoc delimiter; nothing was written")
    adjust = [
        "# Adjust in stacks.yaml's site.slurm (partition, account, time, exclusive, enroot_version) or with the flags",
        "# --partition/--account/--time, not here: the file is written again from them.",
    ]
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={name}",
        f"#SBATCH --nodes={nodes}",
        f"#SBATCH --ntasks-per-node={tasks_per_node}",
        *([f"#SBATCH --gpus-per-node={gpus_per_node}"] if gpus_per_node else []),
        *([f"#SBATCH --partition={partition}"] if partition else []),
        *([f"#SBATCH --account={account}"] if account else []),
        f"#SBATCH --time={time_limit}",
        *(["#SBATCH --exclusive"] if settings.exclusive else []),
        f"#SBATCH --output={name}-%j.out",
        f"# Written by `imgbuild node-check --emit-sbatch`: the consistency check of one image on {nodes} node(s),",
        "# one task per rank" + (f", for the nodes of site partition {target}" if target else "") + ". Submit it "
        "with sbatch from any node and directory: the worker is inside. `imgbuild node-check --from-log "
        f"{name}-JOB.out`",
        "# reads the report (exit 8 when a check failed).",
        *adjust,
        "set -euo pipefail",
        f"IMAGE={q(image)}",
        f"PYXIS_IMAGE={q(pyxis_image(image, settings.hash_form()))}",
        '# The worker, written on this node and copied to every node of the job (node-local, no shared filesystem).',
        'WORKER="${TMPDIR:-/tmp}/imgbuild-node-check-${SLURM_JOB_ID}.py"',
        f"cat > \"$WORKER\" <<'{tag}'",
        worker.rstrip("\n"),
        tag,
        'if [ "${SLURM_JOB_NUM_NODES:-1}" -gt 1 ]; then sbcast --force "$WORKER" "$WORKER"; fi',
        'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
        'export MASTER_PORT="${MASTER_PORT:-29500}"',
        *[f"export {k}={q(str(v))}" for k, v in sorted(env.items())],
        *(["# Each task is one jax.distributed process: its id and count are the task's Slurm ids.",
            "RANKS=true",
            "JAXARGS='--processes $SLURM_NTASKS --process-id $SLURM_PROCID --coordinator $MASTER_ADDR:$MASTER_PORT"
            + (" --local-device $SLURM_LOCALID" if gpus_per_node else "") + "'"] if framework == "jax" else
          ["# Each task is one rank: torch.distributed reads its rank from the task's Slurm ids.",
           "RANKS='export RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID'"]),
        "if srun --help 2>&1 | grep -q -- --container-image; then",
        "    # pyxis: Enroot starts the image on every node, the worker mounted read-only",
        f'    srun --container-image="$PYXIS_IMAGE" --container-mounts="$WORKER:{IN_IMAGE}:ro" \\',
        f"        bash -c \"$RANKS; exec python {IN_IMAGE} {args}\"",
        "else",
        "    # No pyxis here: the site's container command starts the image for each task",
        # the node's GPUs reach the container only when asked for
        '    RUN="${IMGBUILD_CONTAINER_RUN:-docker run --rm --network host --shm-size 1g'
        + (" --gpus all" if gpus_per_node else "") + '}"',
        f"    PASS=\"{' '.join('-e ' + n for n in names)}\"",
        f'    srun bash -c "$RANKS; exec $RUN $PASS -v $WORKER:{IN_IMAGE}:ro --entrypoint python $IMAGE {IN_IMAGE} {args}"',
        "fi",
        "",
    ]
    return "\n".join(lines)


__all__ = ["script", "pyxis_image", "PASSED"]
