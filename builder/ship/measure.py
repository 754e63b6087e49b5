"""What an image holds, measured from the inside: the probe's facts (what preflight judges a base by) and the
environment that decides pip's answer on it (what a lock entry stands for). Beneath lock, build and the CLI:
each asks here, none asks another of them.

A base made again (builder.ship.bases: its locked digest gone from the site registry, its tag naming another
image) keeps the lock entries above it where its environment is the one locked: rebuilt_bases measures it.
"""

from __future__ import annotations

import json
from typing import Callable

from builder.errors import EngineError
from builder.load import versions
from builder.load.spec import Spec
from builder.ship.checks import PROBE
from builder.ship.engine import Engine

# The one probe (builder/ship/checks/probe.py), run by the image's own Python; an image without Python (the
# mirrored Debian base) reports its OS only.
WRAPPER = ('for p in python3 python; do if command -v "$p" >/dev/null 2>&1; then exec "$p" /imgbuild-probe.py; fi; '
           'done; . /etc/os-release 2>/dev/null; printf \'{"os": "%s-%s"}\\n\' "${ID:-unknown}" "${VERSION_ID:-}"')


def probe(engine: Engine, ref: str, kinds=(), platform: str | None = None) -> dict:
    """Measure an image: {fact: value or None}. Facts it could not measure are left out. kinds: the
    loaded layer kinds, whose `versions:` name the distributions to measure. platform: the image's, where
    the engine runs another (under QEMU)."""
    return measure(engine, ref, kinds, platform)[0]


def measure(engine: Engine, ref: str, kinds=(), platform: str | None = None) -> tuple[dict, dict]:
    """(facts, environment) of an image: probe's facts, and what decides pip's answer on it (environment)."""
    res = engine.run_container(ref, ["sh", "-c", WRAPPER], mounts=[(str(PROBE), "/imgbuild-probe.py")],
                               input="{}", timeout=600 if platform is None else 3600, platform=platform)
    lines = [line for line in res.stdout.splitlines() if line.startswith("{")]
    if res.returncode != 0 or not lines:
        raise EngineError(f"probing {ref} failed (exit {res.returncode}): {(res.stderr or res.stdout).strip()[-600:]}")
    measured = json.loads(lines[-1])
    return base_facts(measured, kinds), environment(measured)


def environment(measured: dict) -> dict:
    """What decides pip's answer on an image, beside the layers' own definitions: its OS release, its Python
    (none: a base without Python, whose first layer installs it) and every distribution that Python sees,
    NAME==VERSION, sorted. A base made again with the same of these keeps its lock entries."""
    out = {"os": str(measured.get("os") or "unknown"), "python": measured.get("python")}
    if "dists" in measured:
        out["dists"] = sorted(f"{n}=={v}" for n, v in (measured.get("dists") or {}).items())
    return out


def environment_change(locked: dict, now: dict) -> list[str]:
    """What differs between the environment a lock entry was made on and an image's now, a phrase each
    (empty: the same)."""
    out = [f"{what} {locked.get(key) or 'none'} -> {now.get(key) or 'none'}"
           for key, what in (("os", "OS"), ("python", "Python")) if (locked.get(key) or None) != (now.get(key) or None)]
    was = dict(d.split("==", 1) for d in locked.get("dists") or ())
    has = dict(d.split("==", 1) for d in now.get("dists") or ())
    out += [f"{n} {was[n]} -> {has[n]}" for n in sorted(was.keys() & has.keys()) if was[n] != has[n]]
    out += [f"+{n}=={has[n]} (not there when locked)" for n in sorted(has.keys() - was.keys())]
    out += [f"-{n}=={was[n]} (gone)" for n in sorted(was.keys() - has.keys())]
    return out


def rebuilt_bases(spec: Spec, resolved, engine: Engine, say: Callable[[str], None]) -> list[str]:
    """Each base the registry holds made again (builder.ship.bases: its locked digest is gone, its tag names
    another image) measured now: where its environment is the one locked, the lock's entries hold and that
    is said; otherwise a line naming what changed, for the caller to refuse."""
    problems = []
    for name, old in sorted(resolved.rebuilt.items()):
        entry = spec.lock.bases[name]
        now_digest = resolved.digests[name]
        # An index: the entry of a platform the lock measured (the mirrored Debian base's index also holds an
        # arm64 image that no amd64 stack was locked on).
        platform = next((p for p in now_digest if p in entry.platforms), None) if isinstance(now_digest, dict) else None
        first = (now_digest[platform] if platform else next(iter(now_digest.values()))) \
            if isinstance(now_digest, dict) else now_digest
        locked_env = (entry.platforms[platform].environment if platform in entry.platforms else entry.environment)
        ref = spec.bases[name].ref(spec.site)
        if locked_env is None:
            problems.append(f"bases.{name}: {ref} was made again ({old[:19]} is gone, the tag names {first[:19]}), and "
                            "the lock entry records no environment to compare it with; run imgbuild lock base="
                            f"{name}")
            continue
        _, env = measure(engine, f"{ref}@{first}", spec.kinds.values(), platform=platform)
        change = environment_change(locked_env, env)
        if change:
            problems.append(f"bases.{name}: {ref} was made again ({old[:19]} is gone, the tag names {first[:19]}) with "
                            f"another environment: {'; '.join(change[:12])}"
                            + (f"; and {len(change) - 12} more" if len(change) > 12 else "")
                            + f"; run imgbuild lock base={name} and re-lock the layers above it")
        else:
            say(f"base {name}: {ref} was made again ({old[:19]} is gone, the tag names {first[:19]}); its environment "
                f"is the one locked ({_env_words(env)}): the lock holds")
    return problems


def _env_words(env: dict) -> str:
    return (f"{env.get('os')}, Python {env.get('python') or 'none'}, "
            f"{len(env.get('dists') or ())} distribution(s)")


def base_facts(measured: dict, kinds=()) -> dict:
    """The probe's measurements as a base's facts: a str, or None for "measured: not installed". A fact
    the probe could not measure (no Python in the image; no CUDA for cuDNN) is left out: unknown."""
    if "dists" not in measured:
        return {"os": str(measured["os"])} if measured.get("os") else {}
    dists = measured["dists"]

    def dist(*names):
        return next((dists[n.lower().replace("_", "-")] for n in names if n.lower().replace("_", "-") in dists), None)
    out = {"python": measured.get("python"), "pip_constraint": measured.get("pip_constraint"),
           "pydantic": dist("pydantic"), **(measured.get("toolkit") or {})}
    if measured.get("os"):
        out["os"] = measured["os"]
    for field, names in versions.fields(kinds).items():
        if names:
            out[field] = dist(*names)
    torch = measured.get("torch") or {}
    if torch and "error" not in torch:
        out["torch"] = torch.get("version") or out.get("torch")
        out["torch_cuda"] = torch.get("cuda")
        if torch.get("arch_list"):
            out["torch_archs"] = ";".join(torch["arch_list"])
        if torch.get("cuda"):
            out["cudnn"], out["nccl"] = torch.get("cudnn"), torch.get("nccl")
    return {k: (None if v is None else str(v)) for k, v in sorted(out.items())}


__all__ = ["WRAPPER", "base_facts", "environment", "environment_change", "measure", "probe", "rebuilt_bases"]
