"""The catalog as a static site: index.html, catalog.json beside it, each SBOM, and a node check's batch
script per stack. No server and no external asset: the style and the filter script are inlined, so the
page works from a file, from GitLab Pages, and on an air-gapped cluster. Every value from the registry is
HTML-escaped; the page holds what the registry holds, and no secret ever reaches the registry.

The site is written to a temporary folder beside the target and renamed into place, so that a failure
leaves the previous site as it was.
"""

from __future__ import annotations

import html
import json
import os
import shutil
import tempfile
from pathlib import Path

from builder.catalog import FRAMEWORKS, CatalogError
from builder.nodecheck import WORKER
from builder.nodecheck import sbatch

HERE = Path(__file__).resolve().parent


def e(value) -> str:
    return html.escape(str(value), quote=True)


def write(out: Path, collected: dict) -> list[str]:
    """Write the site into `out` (replaced whole); returns the files written, relative to it."""
    data, sboms = collected["data"], collected["sboms"]
    out = out.resolve()
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / "catalog.json").is_file())):
        # The folder is replaced whole: only one that holds a catalog already (or nothing) may be.
        raise CatalogError(f"{out} exists and does not hold a catalog (no catalog.json): it is replaced whole, so "
                           "imgbuild writes only into a new or empty folder, or over an earlier catalog",
                           hint="name a new folder, e.g. -o public")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        files = {"catalog.json": json.dumps(data, indent=1, sort_keys=True) + "\n"}
        for name, doc in sboms.items():
            files[name] = json.dumps(doc, indent=1) + "\n"
        scripts = {}
        for stack in data["stacks"]:
            latest = stack["releases"][0]
            name = f"sbatch/{stack['name']}.sbatch"
            gpus = 8 if latest["gpus"] else 0
            # the worker inside the script, as node-check --emit-sbatch writes it: it runs from any node
            scripts[stack["name"]] = (name, sbatch.script(latest["reference"], WORKER.read_text(), 2, gpus or 1, gpus,
                                                          env=latest["runtime_env"]))
            files[name] = scripts[stack["name"]][1]
        files["index.html"] = page(data, scripts)
        for name, text in files.items():
            path = tmp / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        os.chmod(tmp, 0o755)
        if out.exists():
            old = out.with_name(f".{out.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return sorted(files)


def _words(values) -> str:
    return " ".join(sorted({str(v).lower().replace(" ", "-") for v in values if v}))


def _frameworks(release: dict) -> set:
    found = set()
    for p in release["platforms"]:
        found |= {k for k in p["versions"] if k in FRAMEWORKS}
        if p["megatron_commit"]:
            found.add("megatron")
    return found


def page(data: dict, scripts: dict) -> str:
    stacks = data["stacks"]
    gpus = sorted({g for s in stacks for g in (s["releases"][0]["gpus"] or [])})
    fws = sorted({f for s in stacks for f in _frameworks(s["releases"][0])}, key=lambda f: list(FRAMEWORKS).index(f))
    platforms = sorted({p["platform"] for s in stacks for p in s["releases"][0]["platforms"]})
    where = f"{data['registry']}/{data['namespace']}"
    head = [
        "<!doctype html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Training images in {e(where)}</title>",
        f"<style>{(HERE / 'page.css').read_text()}</style>", "</head>", "<body>",
        "<header>", "<h1>Training images</h1>",
        f'<p class="muted">Every stack released to <code>{e(where)}</code>, read from the registry on '
        f'{e(data["generated"])}. The same data as JSON: <a href="catalog.json">catalog.json</a>.</p>',
        "</header>",
        "<main>", '<section id="find" aria-label="Find a stack">',
        '<label>Search <input id="q" type="search" placeholder="h100 deepspeed 0.19" autocomplete="off"></label>',
        _select("gpu", "GPU", [(g.lower(), g) for g in gpus]),
        _select("fw", "Framework", [(f, FRAMEWORKS[f]) for f in fws]),
        _select("platform", "Platform", [(p, p) for p in platforms]),
        '<p id="count" aria-live="polite"></p>', "</section>",
        _summary(stacks),
        *[_stack(s, scripts.get(s["name"])) for s in stacks],
        '<p id="none" hidden>No stack matches.</p>' if stacks else "<p>Nothing has been released here yet.</p>",
        "</main>", f"<script>{(HERE / 'page.js').read_text()}</script>", "</body>", "</html>",
    ]
    return "\n".join(head) + "\n"


def _select(id_: str, label: str, options: list) -> str:
    opts = "".join(f'<option value="{e(v)}">{e(t)}</option>' for v, t in options)
    return f'<label>{e(label)} <select id="{id_}"><option value="">any</option>{opts}</select></label>'


def _attrs(stack: dict) -> str:
    r = stack["releases"][0]
    text = " ".join([stack["name"], r["description"], *r["tags"], *(r["gpus"] or []), r["digest"],
                     *[f"{k} {v}" for p in r["platforms"] for k, v in p["versions"].items()],
                     *[p["platform"] for p in r["platforms"]], *[o for p in r["platforms"] for o in p["deepspeed_ops_prebuilt"]],
                     *[FRAMEWORKS.get(f, f) for f in _frameworks(r)],
                     *([waived_text(r)] if r.get("gpu_checks_waived") else [])]).lower()
    return (f'data-stack="{e(stack["name"])}" data-gpus="{e(_words(r["gpus"] or []))}" '
            f'data-fw="{e(" ".join(sorted(_frameworks(r))))}" '
            f'data-platforms="{e(" ".join(p["platform"] for p in r["platforms"]))}" data-text="{e(text)}"')


def _summary(stacks: list) -> str:
    rows = []
    for s in stacks:
        r = s["releases"][0]
        v = r["platforms"][0]["versions"]
        rows.append(f'<tr {_attrs(s)}><td><a href="#stack-{e(s["name"])}">{e(s["name"])}</a></td>'
                    f'<td>{e(", ".join(r["gpus"] or []) or "-")}'
                    + (' <span class="bad">(GPU checks waived)</span>' if r.get("gpu_checks_waived") else "") + '</td>'
                    f'<td>{e(v.get("torch", "-"))}</td><td>{e(v.get("cuda", "-"))}</td>'
                    f'<td>{e(v.get("deepspeed", "-"))}</td><td>{e(", ".join(p["platform"] for p in r["platforms"]))}</td>'
                    f'<td>{e((r["created"] or "-")[:10])}</td></tr>')
    return ('<div class="scroll"><table id="summary"><thead><tr><th>stack</th><th>GPUs</th><th>torch</th><th>CUDA</th>'
            '<th>DeepSpeed</th><th>platforms</th><th>built</th></tr></thead><tbody>' + "".join(rows)
            + "</tbody></table></div>")


def _provenance(found: dict | None) -> str:
    """The release's verified signature (docs/trust.md), or why it does not verify; nothing where the site
    does not sign."""
    if found is None:
        return ""
    if not found.get("verified"):
        return f'<dt>provenance</dt><dd class="bad">NOT VERIFIED: {e(found.get("error") or "")}</dd>'
    commit = f", commit {found['commit'][:12]}" if found.get("commit") else ""
    return (f"<dt>provenance</dt><dd>signed by key {e(found.get('signed_by') or '')} at {e(found.get('signed_at') or '')}"
            f"{e(commit)}</dd>")


def _rebuild(found: dict | None) -> str:
    """What rebuilding the release gave (verify --rebuild --record); nothing where it was never rebuilt."""
    if not found:
        return ""
    text = (f"{found['identical']} of {found['total']} layers identical on {found.get('engine') or '?'}"
            f" ({(found.get('when') or '')[:10]})")
    if found.get("drifting"):
        text += "; drifting: " + ", ".join(str(x) for x in found["drifting"])
    if found.get("time_only"):
        text += "; file times only (the engine could not fix them): " + ", ".join(str(x) for x in found["time_only"])
    return f"<dt>rebuilt</dt><dd>{e(text)}</dd>"


def waived_text(release: dict) -> str:
    """What a reader of the catalog sees of a release made without GPU proof (site.ci.gpu_checks)."""
    return f"GPU checks waived: {release['gpu_checks_waived']}"


def _stack(stack: dict, script) -> str:
    r = stack["releases"][0]
    name = stack["name"]
    tag = min(r["tags"], key=len)
    by_tag = f"{stack['repository']}:{tag}"
    host, _, path = stack["repository"].partition("/")
    parts = [f'<article class="stack" id="stack-{e(name)}" {_attrs(stack)}>', f"<h2>{e(name)}</h2>"]
    if r["description"]:
        parts.append(f"<p>{e(r['description'])}</p>")
    gpus = ", ".join(r["gpus"]) if r["gpus"] else ("none (CPU)" if r["gpus"] == [] else "not recorded (released before stack cards)")
    parts.append('<dl class="facts">'
                 f"<dt>tags</dt><dd>{''.join(f'<span class=pill>{e(t)}</span>' for t in r['tags'])}</dd>"
                 f'<dt>digest</dt><dd class="mono">{e(r["digest"])}</dd>'
                 f"<dt>image</dt><dd class=\"mono\">{e(by_tag)}</dd>"
                 f"<dt>built</dt><dd>{e(r['created'] or '-')}</dd>"
                 f"<dt>GPUs</dt><dd>{e(gpus)}</dd>"
                 + (f'<dt>GPU checks</dt><dd class="bad">{e(waived_text(r))}</dd>' if r.get("gpu_checks_waived") else "")
                 + _provenance(r.get("provenance")) + _rebuild(r.get("rebuild"))
                 + f"<dt>platforms</dt><dd>{e(', '.join(p['platform'] for p in r['platforms']))}</dd></dl>")
    for p in r["platforms"]:
        parts.append(_platform(p, len(r["platforms"]) > 1))
    parts.append(_changes(r))
    gpu_flag = " --gpus all" if r["gpus"] else ""
    srun_gpus = " --gpus-per-node=8" if r["gpus"] else ""
    parts.append("<h3>How to use it</h3>"
                 f"<pre>docker run --rm -it{gpu_flag} {e(r['reference'])}</pre>"
                 f"<pre>enroot import docker://{e(host)}#{e(path)}:{e(tag)}</pre>"
                 f"<pre>srun --container-image={e(host)}#{e(path)}:{e(tag)}{srun_gpus} python -c 'import torch; print(torch.__version__)'</pre>")
    if script:
        file, text = script
        parts.append(f'<p>The node check on two nodes, as <code>imgbuild node-check --emit-sbatch</code> writes it: '
                     f'<a href="{e(file)}">{e(file)}</a> (the worker is inside it: it runs from any node), '
                     f"then <code>sbatch {e(file.rsplit('/', 1)[-1])}</code>.</p>"
                     f"<details><summary>the batch script</summary><pre>{e(text)}</pre></details>")
    if len(stack["releases"]) > 1:
        rows = "".join(f"<tr><td>{e(', '.join(x['tags']))}</td><td class=mono>{e(x['digest'][:19])}</td>"
                       f"<td>{e((x['created'] or '-')[:10])}</td></tr>" for x in stack["releases"][1:])
        parts.append('<h3>Earlier releases</h3><div class="scroll"><table><thead><tr><th>tags</th><th>digest</th>'
                     f"<th>built</th></tr></thead><tbody>{rows}</tbody></table></div>")
    parts.append("</article>")
    return "\n".join(parts)


def _platform(p: dict, several: bool) -> str:
    out = [f"<h3>{e(p['platform'])}</h3>" if several else "<h3>What is in it</h3>"]
    rows = "".join(f"<tr><td>{e(k)}</td><td>{e(v)}</td></tr>" for k, v in p["versions"].items())
    if p["megatron_commit"]:
        rows += f"<tr><td>Megatron commit</td><td class=mono>{e(p['megatron_commit'])}</td></tr>"
    out.append(f'<div class="scroll"><table><tbody>{rows}</tbody></table></div>')
    if p["deepspeed_ops_prebuilt"]:
        out.append(f"<p>DeepSpeed ops prebuilt: {''.join(f'<span class=pill>{e(o)}</span>' for o in p['deepspeed_ops_prebuilt'])}</p>")
    elif "deepspeed" in p["versions"]:
        out.append("<p>DeepSpeed ops prebuilt: none (built at first use)</p>")
    archs = p["torch_arch_list"]
    out.append(f"<p>torch compiled for: {e(' '.join(archs)) if archs else 'no CUDA arch (a CPU build)'}</p>")
    if p["binary_archs"]:
        items = "".join(f"<tr><td class=mono>{e(f)}</td><td>{e(' '.join(t))}</td></tr>" for f, t in p["binary_archs"].items())
        out.append(f'<details><summary>archs found in {len(p["binary_archs"])} compiled binaries</summary>'
                   f'<div class="scroll"><table><tbody>{items}</tbody></table></div></details>')
    c = p["checks"]
    state = "bad" if c["failed"] else "ok"
    on = f" ({c['gpu_model']})" if c.get("gpu_model") else ""
    gpu = (f"{c['gpu_checks_ran']} of {c['gpu_checks']} GPU checks ran on a GPU{on}" if c["validated_with_gpu"]
           else f"{c['gpu_checks']} GPU check(s) skipped: validated on a machine without a GPU" if c["gpu_checks"]
           else "no GPU checks")
    out.append(f'<p class="{state}">Checks: {c["passed"]} passed, {c["failed"]} failed, {c["skipped"]} skipped; {e(gpu)}.</p>')
    if c["list"]:
        items = "".join(f"<tr><td>{e(x['id'])}</td><td>{e(x['status'])}</td><td>{'GPU' if x['gpu'] else ''}</td></tr>"
                        for x in c["list"])
        out.append(f'<details><summary>every check</summary><div class="scroll"><table><tbody>{items}'
                   "</tbody></table></div></details>")
    layers = "".join(f"<tr><td>{e(l['layer'])}</td><td>{e(l['kind'])}</td><td class=mono>{e(l['key'][:12])}</td>"
                     f"<td class=mono>{e(', '.join(f'{k} {v[:12]}' for k, v in l['sources'].items()))}</td></tr>"
                     for l in p["layers"])
    out.append(f'<details><summary>{len(p["layers"])} layers</summary><div class="scroll"><table><thead><tr><th>layer</th>'
               f"<th>kind</th><th>key</th><th>sources</th></tr></thead><tbody>{layers}</tbody></table></div></details>")
    out.append(f'<p>SBOM: <a href="{e(p["sbom"])}">{e(p["sbom"].rsplit("/", 1)[-1])}</a> (CycloneDX)</p>' if p["sbom"]
               else "<p>SBOM: none stored</p>")
    return "\n".join(out)


def _changes(r: dict) -> str:
    if "previous" not in r:
        return "<h3>Changes</h3><p>The first release of this stack.</p>"
    out = [f"<h3>Changes since the previous release</h3><p class=muted>from <span class=mono>{e(r['previous'][:19])}</span></p>"]
    if not r.get("changes"):
        out.append("<p>None in what imgbuild measures.</p>")
    for s in r.get("changes", []):
        rows = "".join(f"<tr><td>{e(c['name'])}</td><td>{e(c['old'] if c['old'] is not None else '-')}</td>"
                       f"<td>{e(c['new'] if c['new'] is not None else '-')}</td><td>{e(c['direction'])}</td></tr>"
                       for c in s["changes"])
        more = f"<p class=muted>and {s['more']} more</p>" if s.get("more") else ""
        note = f"<p class=muted>{e(s['note'])}</p>" if s.get("note") else ""
        out.append(f"<details><summary>{e(s['section'])}: {len(s['changes']) + s.get('more', 0)} change(s)</summary>"
                   f'{note}<div class="scroll"><table><thead><tr><th>name</th><th>before</th><th>now</th><th></th></tr>'
                   f"</thead><tbody>{rows}</tbody></table></div>{more}</details>")
    return "\n".join(out)


__all__ = ["write", "page"]
