"""Which entries of the lock file no longer stand for the stacks file (`imgbuild lock --check`): an entry
holds while the layer it is for, the layers beneath it and the base build as they did when it was made
(builder.plan.keys.layer_definition)."""

from __future__ import annotations

from builder.core.lockfile import lock_path
from builder.core.platforms import DEFAULT as DEFAULT_PLATFORM
from builder.load.intent import HOST_PINNED, layer_intents
from builder.plan.keys import layer_definition


def stale_entries(spec) -> list[str]:
    """What of the lock file no longer stands for the stacks file, a line each: a base entry probed from
    another image, a layer or Python entry whose layer, a layer beneath it or the base changed (its
    definition), or whose layer or stack is gone. No lock file at all is one line too."""
    lock = spec.lock
    if lock is None:
        return [f"{lock_path(spec.file)}: no lock file (imgbuild lock writes it)"]
    out, texts = [], {}
    for name, entry in lock.bases.items():
        base = spec.bases.get(name)
        if base is None:
            out.append(f"bases.{name}: no such base in {spec.file}")
        elif not base.locked_by(entry, spec.site):
            out.append(f"bases.{name}: probed from {entry.image}@{entry.digest}, not the base stacks.yaml names now")
    everything = [("layers", name, entry) for name, entry in lock.layers.items()] + \
        [("python", name, entry) for name, entries in lock.python_all.items() for entry in entries]
    for section, name, entry in everything:
        stack = getattr(entry, "stack", None)
        stacks = [spec.stacks[stack]] if stack in spec.stacks else \
            [s for s in spec.stacks.values() if name in [d.name for d in s.chain]][:1]
        if not stacks or name not in [d.name for d in stacks[0].chain]:
            out.append(f"{section}.{name}: layer {name!r} is in no stack's chain" + (f" ({stack})" if stack else ""))
            continue
        base_digest = None if section == "python" else lock.base_digest(stacks[0].base, spec.site)
        now = layer_definition(spec, stacks[0], name, base_digest, getattr(entry, "platform", DEFAULT_PLATFORM), texts)
        if entry.definition != now:
            out.append(f"{section}.{name}: the layer, a layer beneath it or its base changed since it was "
                       f"{'resolved' if section == 'python' else 'measured'}; run imgbuild lock "
                       f"{'python' if section == 'python' else 'layer'}={name}"
                       + (f" (or stack={stack})" if section == "python" and stack else ""))
    seen = set()
    for stack in spec.stacks.values():
        for layer in stack.chain:
            floating = [i for i in layer_intents(layer) if i[2] not in HOST_PINNED]
            for platform in stack.platforms:
                definition = layer_definition(spec, stack, layer.name, None, platform, texts) if floating else None
                if floating and not lock.python_for(layer.name, definition, platform) and \
                        (layer.name, definition, platform) not in seen:
                    seen.add((layer.name, definition, platform))
                    on = "" if platform == DEFAULT_PLATFORM else f" on {platform}"
                    out.append(f"python.{layer.name}: missing{on}: {floating[0][1]!r} floats ({floating[0][2]}); run "
                               f"imgbuild lock python={layer.name} (or stack={stack.name})")
    return out
