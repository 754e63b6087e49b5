"""JAX's in-image checks (check type `jax`): the Python each one runs in the image, by its `test` argument.

Each is a separate `python -c` in the image (builder/ship/checks/probe.py runs snippets one process each),
so a test can set XLA_FLAGS before jax is imported: that is how one CPU becomes N host devices, and how
pmap's all-reduce runs here with no accelerator. Every test that can run on the CPU does so with
JAX_PLATFORMS=cpu, so that an image with the CUDA plugin and no GPU checks its CPU path instead of
failing to find a device; `gpu-*` tests are declared `gpu: true` and skipped without a GPU.
"""

from __future__ import annotations


# The preamble of the CPU tests: N host devices, the CPU backend only.
_CPU = '''import os
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=%(devices)d").strip()
os.environ["JAX_PLATFORMS"] = "cpu"
import jax, jax.numpy as jnp, numpy as np
'''

_CODE = {
    # jax and jaxlib import, and the versions they report are the ones pip recorded (the layer's pins are
    # the `packages` check's; an NGC base's are measured into the manifest).
    "versions": '''import importlib.metadata as m, os
os.environ["JAX_PLATFORMS"] = "cpu"
import jax, jaxlib
have = {"jax": jax.__version__, "jaxlib": jaxlib.__version__}
print("jax", have["jax"], "jaxlib", have["jaxlib"], "(metadata: jax %%s, jaxlib %%s)" %% (m.version("jax"), m.version("jaxlib")))
bad = ["%%s reports %%s, pip recorded %%s" %% (d, v, m.version(d)) for d, v in have.items() if v != m.version(d)]
assert not bad, "; ".join(bad)
''',
    # jax.devices() on the host: the CPU backend shows exactly the devices XLA_FLAGS asked for.
    "host-devices": _CPU + '''devs = jax.devices("cpu")
print(len(devs), "host devices:", ", ".join(map(str, devs)), "- default backend", jax.default_backend())
assert len(devs) == %(devices)d, "XLA_FLAGS asked for %(devices)d host devices, jax shows %%d" %% len(devs)
''',
    # pmap's psum over the host devices: device i holds i + 1, every device must get n(n+1)/2.
    "pmap-allreduce": _CPU + '''devs = jax.devices("cpu")
n = len(devs)
x = jnp.arange(1, n + 1, dtype=jnp.float32)
out = np.asarray(jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i", devices=devs)(x))
want = n * (n + 1) / 2
print("pmap psum over %%d host devices: %%s (want %%s on each)" %% (n, out.tolist(), want))
assert n > 1, "one device: pmap's all-reduce was not exercised"
assert np.all(out == want), "device(s) %%s got the wrong sum" %% [i for i, v in enumerate(out) if v != want]
''',
    # A jit-compiled float32 matmul against numpy's float64 product, within float32's rounding.
    "jit-matmul": _CPU + '''rng = np.random.default_rng(1234)
a, b = rng.standard_normal((256, 256)), rng.standard_normal((256, 256))
ref = a @ b
c = np.asarray(jax.jit(jnp.matmul)(jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32)), dtype=np.float64)
err = float(np.abs(c - ref).max() / np.abs(ref).max())
print("jit matmul 256x256 float32 on %%s: relative error %%.2e against float64" %% (jax.devices("cpu")[0], err))
assert err < 1e-4, "relative error %%.2e is above float32's 1e-4" %% err
''',
    # The CUDA plugin (no GPU needed): installed, of jaxlib's version and of the declared CUDA major; the
    # cuDNN and NCCL wheels it brought are the declared ones where the layer declares them.
    "cuda-plugin": '''import importlib.metadata as m
major = %(cuda)r.split(".")[0]
jaxlib = m.version("jaxlib")
found = {}
for dist in ("jax-cuda%%s-plugin" %% major, "jax-cuda%%s-pjrt" %% major):
    try:
        found[dist] = m.version(dist)
    except m.PackageNotFoundError:
        raise SystemExit("%%s is not installed: jaxlib %%s has no CUDA %%s plugin in this image" %% (dist, jaxlib, major))
print("jaxlib", jaxlib, found)
bad = ["%%s %%s is not jaxlib's version %%s" %% (d, v, jaxlib) for d, v in found.items() if v != jaxlib]
for what, declared in (("cudnn", %(cudnn)r), ("nccl", %(nccl)r)):
    dist = "nvidia-%%s-cu%%s" %% (what, major)
    try:
        have = m.version(dist)
    except m.PackageNotFoundError:
        print(dist, "not installed (the base's %%s is used)" %% what)
        continue
    print(dist, have)
    if declared and not (have + ".").startswith(declared + "."):
        bad.append("%%s is %%s, the layer declares %%s %%s" %% (dist, have, what, declared))
assert not bad, "; ".join(bad)
''',
    # On the GPUs: every one visible, and psum across all of them.
    "gpu-allreduce": '''import jax, jax.numpy as jnp, numpy as np
gpus = jax.devices("gpu")
print(len(gpus), "GPU(s):", ", ".join(d.device_kind for d in gpus))
out = np.asarray(jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i", devices=gpus)(jnp.ones(len(gpus))))
assert np.all(out == len(gpus)), out
''',
}


def code(test: str, args: dict) -> str:
    """The Python of one test, its arguments put in (`devices`, `cuda`, `cudnn`, `nccl`)."""
    values = {"devices": int(args.get("devices") or 4), "cuda": str(args.get("cuda") or ""),
              "cudnn": str(args.get("cudnn") or ""), "nccl": str(args.get("nccl") or "")}
    return _CODE[test] % values


__all__ = ["code"]
