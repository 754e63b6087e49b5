"""The node check as a Slurm batch job: one task per rank over N nodes, started in the image by pyxis
(`srun --container-image`) where the cluster has it, else by a container command the site names
(IMGBUILD_CONTAINER_RUN; default `docker run` on the node's network). The worker is the one that
`imgbuild node-check` runs (builder/nodecheck/worker.py), copied beside the script; rank 0 prints the
report line into the job's output, which `imgbuild node-check --from-log` reads.
"""

from __future__ import annotations

import re
import shlex

from builder.nodecheck import IN_IMAGE, NodeCheckFailed

SAFE = re.compile(r"[A-Za-z0-9._:/@+-]+")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Variables every rank's container gets from the task: torch.distributed's rendezvous, and what the
# network and the check read. The stack's runtime variables are added to them.
PASSED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME",
          "NCCL_SOCKET_IFNAME", "NCCL_DEBUG", "IMGBUILD_NODE_CHECK_PERTURB", "IMGBUILD_NODE_CHECK_TIMEOUT")


def script(image: str, worker: str, nodes: int, tasks_per_node: int, gpus_per_node: int = 0,
           env: dict | None = None, time_limit: str = "00:30:00", partition: str | None = None,
           worker_args: list | None = None, framework: str = "torch") -> str:
    """The batch script's text. env: the stack's runtime variables (its NCCL and IB settings), exported
    for every task, so the check sees what a training job on those nodes would. framework: torch (each task
    a torch.distributed rank) or jax (each task a jax.distributed process, its GPU the task's local id)."""
    # The script splices these into commands a shell reads again (srun bash -c "..."): only the
    # characters of image references and plain paths get there.
    for what, value in (("image reference", image), ("worker path", worker)):
        if not SAFE.fullmatch(value):
            raise NodeCheckFailed(f"{what} {value!r} has characters a batch script cannot carry safely",
                                  hint="letters, digits and . _ - / : @ only")
    bad = [k for k in (env or {}) if not ENV_NAME.fullmatch(k)]
    if bad:
        raise NodeCheckFailed(f"{bad[0]!r} is not an environment variable name")
    env = dict(env or {})
    names = list(dict.fromkeys([*PASSED, *env]))
    q = shlex.quote
    args = " ".join(q(a) for a in (worker_args or []))
    if framework == "jax":
        # $JAXARGS is text with $SLURM_* in it: each task's bash -c expands those, so the ids are the task's.
        args = "$JAXARGS" + (f" {args}" if args else "")
    lines = [
        "#!/bin/bash",
        "#SBATCH --job-name=imgbuild-node-check",
        f"#SBATCH --nodes={nodes}",
        f"#SBATCH --ntasks-per-node={tasks_per_node}",
        *([f"#SBATCH --gpus-per-node={gpus_per_node}"] if gpus_per_node else []),
        *([f"#SBATCH --partition={partition}"] if partition else []),
        f"#SBATCH --time={time_limit}",
        "#SBATCH --output=imgbuild-node-check-%j.out",
        f"# Written by `imgbuild node-check --emit-sbatch`: the consistency check of one image on {nodes} node(s),",
        "# one task per rank. Submit with sbatch; `imgbuild node-check --from-log imgbuild-node-check-JOB.out`",
        "# reads the report (exit 8 when a check failed).",
        "set -euo pipefail",
        f"IMAGE={q(image)}",
        f"WORKER={q(worker)}",
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
        f'    srun --container-image="$IMAGE" --container-mounts="$WORKER:{IN_IMAGE}:ro" \\',
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


__all__ = ["script", "PASSED"]
