"""GPU proof: a stack that declares GPUs is released only where the GPU checks of its layer images ran on one
of those GPUs, or where the site waives that on purpose, stack by stack (site.ci.gpu_checks).

A GPU check (fused Adam, Transformer Engine's FP8 linear, Megatron's parallel state, ...) is skipped on a
machine without a GPU, and its image's proof says so: `validated_with_gpu: false`. Such a proof is enough to
reuse the image in a build, never to release a GPU stack: promote asks `unproven` for each layer image of
each stack it releases. The proof must say that a GPU ran the checks and which one (`gpu_model`, a name of
imgbuild's GPU catalog, recorded by manifest.build_manifest from what the probe measured in the container,
else from the host's nvidia-smi), and that GPU must be one of the stack's `gpus`. One layer image can serve
several stacks: the same proof can hold for an A100 stack and not for an H100 one.

Where a site has no GPU machine for a stack (yet), `site.ci.gpu_checks: {waive: {STACK: REASON}}` releases
that stack with its GPU checks skipped. The waiver is said wherever the release is read: the stack card
(`gpu_checks_waived`), the catalog, `imgbuild ci`'s notes and file, and `imgbuild diff` when it changes.
"""

from __future__ import annotations

import re
import shutil
import subprocess

from builder.core import catalog

# How checks.judge says that a GPU check did not run for want of a GPU (or under emulation, where none can).
NEEDS_A_GPU = "skipped: needs a GPU"
NAME_MAX = 200       # characters of a device name kept in a manifest


def catalog_gpu(device: str) -> str | None:
    """The catalog name of a device name as nvidia-smi or torch print it ("NVIDIA H100 80GB HBM3" -> H100,
    "NVIDIA A100-SXM4-80GB" -> A100, "NVIDIA GH200 480GB" -> GH200, "NVIDIA RTX A6000" -> RTXA6000), or None
    where it names no GPU of the catalog, or more than one."""
    known = {name.upper(): name for name in catalog.gpus()}
    words = re.findall(r"[A-Z0-9]+", str(device).upper())
    found = {known[w] for w in words if w in known}
    # The catalog writes RTX parts as one word: RTXA6000, RTX5090.
    found |= {known[a + b] for a, b in zip(words, words[1:]) if a == "RTX" and a + b in known}
    return found.pop() if len(found) == 1 else None


def host_devices(runner=subprocess.run) -> list[str]:
    """The GPUs of this machine as nvidia-smi names them ([] without nvidia-smi or where it fails): the
    machine engine.has_gpu found a GPU on."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        res = runner(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True,
                     timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in res.stdout.splitlines() if line.strip()] if res.returncode == 0 else []


def identify(facts: dict | None, host=host_devices) -> tuple[str | None, str | None]:
    """(catalog GPU, device name) of the GPU that ran an image's checks: torch's device 0 as the probe measured
    it inside the container, else the host's nvidia-smi. (None, name) for a GPU the catalog does not know, or
    for a machine with GPUs of several models (which one ran the checks is not known); (None, None) where
    nothing names one."""
    torch = (facts or {}).get("torch")
    device = torch.get("device") if isinstance(torch, dict) else None
    names = [device] if isinstance(device, str) and device.strip() else list(dict.fromkeys(host()))
    if not names:
        return None, None
    models = {catalog_gpu(n) for n in names}
    shown = "; ".join(names)[:NAME_MAX]
    return (models.pop() if len(models) == 1 else None), shown


def gpu_check_ids(node) -> list[str]:
    return [c.id for c in node.checks if c.gpu]


def applies(spec, plan, name: str) -> bool:
    """Whether releasing stack `name` needs GPU proof: it declares GPUs and a layer image of it has GPU checks."""
    return bool(spec.stack(name).gpus) and any(gpu_check_ids(plan.nodes[k]) for k in plan.stacks[name])


def waiver(spec, name: str) -> str | None:
    """The reason site.ci.gpu_checks gives for releasing stack `name` without GPU proof, or None."""
    return spec.site.ci.gpu_waiver(name)


def waived(spec, plan, name: str) -> str | None:
    """The waiver's reason where it takes effect (the stack needs GPU proof), else None."""
    return waiver(spec, name) if applies(spec, plan, name) else None


def unproven(spec, stack: str, node, recorded: dict | None) -> str | None:
    """Why the recorded proof of `node` (manifest.verdict already accepted it) does not show that its GPU
    checks ran on a GPU of `stack`, or None where it does, where the stack needs no GPU proof, or where the
    site waives it."""
    ids = gpu_check_ids(node)
    target = spec.stack(stack)
    if not ids or not target.gpus or not recorded or waiver(spec, stack) is not None:
        return None
    gpus = [g.name for g in target.gpus]
    what = f"GPU check{'s' if len(ids) > 1 else ''} {', '.join(ids)}"
    fix = (f"run it on a machine with {' or '.join(gpus)} (imgbuild build stack={stack} there, or a GPU runner in "
           f"site.ci), or release it without GPU proof on purpose: site.ci.gpu_checks: {{waive: {{{stack}: REASON}}}}")
    results = {r.get("id"): r for r in recorded.get("checks") or [] if isinstance(r, dict)}
    skipped = [i for i in ids if str((results.get(i) or {}).get("detail") or "").startswith(NEEDS_A_GPU)]
    if not recorded.get("validated_with_gpu") or skipped:
        return (f"{what} never ran on a GPU (recorded as skipped: validated where no GPU was); the stack targets "
                f"{', '.join(gpus)}: {fix}")
    model = recorded.get("gpu_model")
    if not isinstance(model, str) or not model:
        seen = recorded.get("gpu_name")
        return (f"{what} ran on a GPU imgbuild could not name ({str(seen)[:80] if seen else 'none recorded'}), "
                f"not on one of the stack's {', '.join(gpus)}: {fix}")
    if model not in gpus:
        return f"{what} ran on {model[:40]}, not on one of the stack's GPUs ({', '.join(gpus)}): {fix}"
    return None


__all__ = ["applies", "catalog_gpu", "gpu_check_ids", "host_devices", "identify", "unproven", "waived", "waiver",
           "NEEDS_A_GPU"]
