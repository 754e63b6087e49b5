"""The imgbuild command line: thin commands over the Python API; errors become messages here only."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import List, Literal, Optional

import typer

from builder import __version__
from builder.errors import ImgbuildError, Interrupted, PreflightError, SpecError, SpecErrors
from builder.plan.keys import KEY_LEN, image_ref
from builder.core.platforms import PLATFORMS
from builder.load.spec import Spec, Stack, load_spec
from builder.prepared import Prepared, prepare
from builder.redact import redact
from builder.textsafe import terminal
from builder.ship.registry import auth_config_from_env

# Plain help (no type column: `<list[Path]>` told a reader about Python, not about the option), -h as well
# as --help, and shell completion (`imgbuild --install-completion`).
HELP = {"help_option_names": ["-h", "--help"]}
app = typer.Typer(no_args_is_help=True, pretty_exceptions_show_locals=False, rich_markup_mode=None,
                  context_settings=HELP, help="Declared, pinned, validated GPU training images from one stacks.yaml.")
EXIT_CODES = ("Exit codes: 0 ok; 2 bad input (stacks file, arguments; diff: any error); 3 preflight refused; "
              "4 a git pin; 5 the engine; 6 the registry; 7 build or validation failed, or a release refused "
              "(no tag moved); 8 a node check failed; 9 an export failed; 70 an internal error; 130 interrupted. "
              "diff: 0 equal, 1 different.")
STATE = {"debug": False, "json": False, "verb": ""}


def echo(text: object = "", err: bool = False) -> None:
    """Everything a command prints goes through here: credentials in URLs are redacted (***), and no control
    character reaches the terminal or the log (text from a registry or an image may hold escape sequences).
    Under --json the text goes to stderr: stdout then holds exactly one JSON document (reply)."""
    typer.echo(terminal(redact(str(text))), err=err or STATE["json"])


def json_mode(verb: str, on: bool) -> bool:
    """A verb's --json: from here on text goes to stderr, and a refusal is printed as the envelope too."""
    STATE["json"], STATE["verb"] = on, verb
    return on


def reply(data: dict, ok: bool = True, code: int = 0) -> None:
    """The one JSON envelope of every verb: {"ok": ..., "verb": ..., the verb's data...}; a failure also has
    "error" (the first), "errors" (all) and "exit_code", whether a verb judged it (check, lint, node-check)
    or main() caught a refusal. Credentials redacted; json.dumps escapes every control character."""
    if STATE["json"]:
        if not ok:
            data = {**data, "errors": data.get("errors") or [data["error"]], "exit_code": code}
        typer.echo(redact(json.dumps({**data, "ok": ok, "verb": STATE["verb"]}, indent=2, sort_keys=True)))

FileOpt = typer.Option(Path(os.environ.get("IMGBUILD_STACKS", "stacks.yaml")), "--file", "-f",
                       help="The stacks file (default: ./stacks.yaml, or $IMGBUILD_STACKS).")
RequireLockedOpt = typer.Option(False, "--require-locked", help="A base without a lock entry, or a layer whose pip "
                                "set is not resolved in it (imgbuild lock python=NAME), is an error (CI uses this).")
AllOpt = typer.Option(False, "--all", help="Every stack in the file (also what no stack=NAME means).")
JsonOpt = typer.Option(False, "--json", help="One JSON document on stdout: {ok, verb, ...the data}, or with "
                       "error/errors on a refusal; text goes to stderr.")
Selectors = typer.Argument(None, help="stack=NAME (repeatable).", show_default=False, metavar="stack=NAME")
KindsOpt = typer.Option(None, "--kinds", show_default=False,
                        help="A folder of extra layer kinds (<kind>/kind.yaml, fragment.j2); repeatable, the first "
                             "wins; above layers/ beside the stacks file, then the shipped kinds. A site kind named "
                             "like a shipped one overrides it (default: $IMGBUILD_KINDS, os.pathsep-separated).")


def _version(value: bool) -> None:
    if value:
        echo(f"imgbuild {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    STATE["debug"] = debug
    STATE["json"] = False   # a command with --json sets it: a refusal is then printed as JSON too
    # A generated pipeline pins the imgbuild that wrote it (builder.ci): a runner with another one would
    # compute other keys and judge by other rules than the pipeline was planned with.
    pinned = os.environ.get("IMGBUILD_REQUIRE_VERSION")
    if pinned and pinned != __version__:
        raise SpecError(f"this pipeline pins imgbuild {pinned} (IMGBUILD_REQUIRE_VERSION) and the runner has imgbuild "
                        f"{__version__}", hint=f"install imgbuild {pinned} on the runner, or regenerate the pipeline "
                                               "with this imgbuild (imgbuild ci gitlab|github) and commit it")


def select(spec: Spec, selectors: Optional[List[str]], all_: bool) -> list[Stack]:
    """The Stacks that `stack=NAME` selectors name, in the order given; none (or --all) means every stack in
    the file, in file order. One default for every verb that takes stacks: a verb that once refused without
    a selection while its neighbour took them all taught people nothing but which was which. Names are
    looked up here, at the edge; everything beneath takes the Stacks."""
    stacks: list[Stack] = []
    for item in selectors or []:
        key, sep, value = item.partition("=")
        if not sep or key != "stack" or not value:
            raise SpecError(f"cannot read {item!r}: name stacks as stack=NAME",
                            hint="stacks: " + ", ".join(spec.stacks))
        stack = spec.stack(value)
        if stack not in stacks:
            stacks.append(stack)
    if all_ or not stacks:
        stacks = list(spec.stacks.values())
    return stacks


def prepared_for(file: Path, kinds, selectors: Optional[List[str]], all_: bool, bases=None) -> Prepared:
    """The one prepared plan of a verb (builder.prepared): the stacks file and its lock read once, the
    selected stacks, their bases resolved as `bases` says, the plan made once."""
    spec = load_spec(file, kinds=kinds or None)
    return prepare(spec, select(spec, selectors, all_), bases=bases)


EngineOpt = typer.Option(None, "--engine", metavar="docker|podman",
                         help="What builds and runs the checks: docker (BuildKit) or podman (Buildah, no daemon). "
                              "Default: IMGBUILD_ENGINE, else site.engine, else docker.")


@app.command()
def check(selectors: Optional[List[str]] = Selectors, file: Path = FileOpt, all_: bool = AllOpt,
          kinds: Optional[List[Path]] = KindsOpt,
          strict: bool = typer.Option(False, "--strict", help="Warnings are errors too (waived ones excepted)."),
          require_locked: bool = RequireLockedOpt, engine: Optional[str] = EngineOpt,
          as_json: bool = JsonOpt) -> None:
    """Validate stacks.yaml, render the selected stacks, run preflight and lint (no Docker needed)."""
    from builder.rules.review import review
    json_mode("check", as_json)
    prepared = prepared_for(file, kinds, selectors, all_)   # rendered Dockerfiles need no base digest
    spec, names = prepared.spec, prepared.names
    result = review(prepared, strict, require_locked, engine or os.environ.get("IMGBUILD_ENGINE"))
    ok = not result.errors()
    # The CPU level each stack's compiled host code is built for, and why (declared, derived, default).
    baselines = {s.name: {p: s.cpu_baseline(p) for p in s.platforms} for s in prepared.stacks}
    if as_json:
        data = {"file": str(file), "stacks": names, "summary": result.summary, "facts": result.facts,
                "findings": [f.to_json() for f in result.findings],
                "cpu_baselines": {n: {p: {"level": b.name, "how": b.how, "origin": b.origin} for p, b in by.items()}
                                  for n, by in baselines.items()}}
        if not ok:
            data["error"] = {"kind": "preflight", "message": f"{result.summary} in {len(names)} stack(s)"}
        reply(data, ok, PreflightError.exit_code)
        if not ok:
            raise SystemExit(PreflightError.exit_code)
        return
    for line in spec.kinds.describe({d.kind.name for s in prepared.stacks for d in s.chain}):
        echo(line)   # where each kind used (and the skeleton) came from: shipped or site
    for name, by in baselines.items():
        for platform, b in by.items():
            echo(f"cpu baseline [{name}] {platform}: {b.name} ({b.origin})")
    for finding in result.findings:
        echo(finding.render())
    if not ok:
        raise PreflightError(f"{file}: {result.summary} in {len(names)} stack(s) ({result.facts})",
                             hint="each finding names its key, rule and fact; --strict also fails on warnings; "
                                  "a stack accepts a warning with stacks.NAME.waivers")
    echo(f"ok: {file}: {len(names)} stack(s), {result.nodes} layer node(s) rendered; preflight and lint: "
               f"{result.summary} ({result.facts})")


def _chains(plan, name: str):
    """(node, position in its chain, file name suffix) of every platform's chain of a stack, platforms in
    order. The suffix (.arm64) tells the chains of a stack of several platforms apart; a stack of one has none."""
    several = len(plan.platforms(name)) > 1
    for platform in plan.platforms(name):
        for i, node in enumerate(plan.chain(name, platform)):
            yield node, i, f".{platform.split('/', 1)[1]}" if several else ""


@app.command()
def render(selectors: Optional[List[str]] = Selectors, file: Path = FileOpt, all_: bool = AllOpt,
           kinds: Optional[List[Path]] = KindsOpt,
           out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write STACK/NN-LAYER.Dockerfile files here, "
                                              "with docker-bake.json and build.sh that build every layer parents first."),
           context: bool = typer.Option(False, "--context", help="With --out: also assemble each layer's build context "
                                        "in DIR/nodes/TARGET as `build` does (kind files, inputs, git sources fetched "
                                        "and verified here, wheels from the wheelhouse) and ask the site registry for "
                                        "base digests, so that the tree builds without imgbuild."),
           as_json: bool = JsonOpt) -> None:
    """Print (or write) the rendered Dockerfile of every layer of the selected stacks."""
    from builder.plan.outdir import OutDir
    from builder.ship.bases import Resolved
    from builder.errors import RegistryError
    json_mode("render", as_json)
    spec = load_spec(file, kinds=kinds or None)
    stacks = select(spec, selectors, all_)
    names = [s.name for s in stacks]
    if context and not out:
        raise SpecError("--context assembles build contexts into the --out folder: give --out DIR too")
    if not out:
        plan = prepare(spec, stacks).locked()   # the Dockerfiles need no base digest: none is asked for
        for name in names:
            for node, i, _ in _chains(plan, name):
                if not as_json:
                    echo(f"# ==== {name} / {i:02d} {node.name} (key {node.short}, {node.platform})")
                    echo(node.dockerfile)
        reply({"stacks": {name: [{"layer": n.name, "key": n.short, "platform": n.platform, "dockerfile": n.dockerfile}
                                 for n, _, _ in _chains(plan, name)] for name in names}})
        return
    written: list[str] = []
    from builder.plan import bake
    # The interop files name images as imgbuild pushes them: keys over base digests. Declared or locked
    # digests need no network; --context (which fetches sources anyway) also asks the site registry.
    try:
        prepared = prepare(spec, stacks, bases="site" if context else "none")
    except RegistryError as exc:   # a base reference no registry client can parse: render all the same
        prepared = prepare(spec, stacks, bases=Resolved(unresolved={"(all)": f"base digests not resolved ({exc.message})"}))
    bases, plan = prepared.bases, prepared.locked()
    # Never through a link, never over a file; each file written whole (temporary name, then rename).
    with OutDir(out) as folder:
        for name in names:
            for node, i, suffix in _chains(plan, name):
                written.append(str(folder.write(name, f"{i:02d}-{node.name}{suffix}.Dockerfile", node.dockerfile)))
        if context:
            from builder.ship.hostconf import HostConf
            from builder.ship.pipeline import assemble_context
            hostconf = HostConf.from_env()
            for key, target in bake.names(plan).targets.items():
                node = plan.nodes[key]
                written.append(str(folder.tree(bake.NODES, target,
                                               lambda dest, node=node: assemble_context(node, hostconf, dest))))
        written.append(str(folder.write("", bake.BAKE_FILE, bake.bake_json(plan))))
        written.append(str(folder.write("", bake.SCRIPT, bake.build_script(plan), mode=0o755)))
    for path in written:
        echo(path)
    for base, why in sorted(bases.unresolved.items()):
        echo(f"note: base {base}: {why}; the tags in {bake.BAKE_FILE} and {bake.SCRIPT} are provisional keys "
             "(`imgbuild lock` records its digest; --context asks the site registry)", err=True)
    if not context:
        echo(f"note: no build contexts written; `render --out {out} --context` assembles them in "
             f"{out}/{bake.NODES}/ (git sources and wheels included)", err=True)
    reply({"stacks": names, "written": written, "provisional_bases": sorted(bases.unresolved)})


@app.command()
def plan(selectors: Optional[List[str]] = Selectors, file: Path = FileOpt, all_: bool = AllOpt,
         kinds: Optional[List[Path]] = KindsOpt,
         as_json: bool = typer.Option(False, "--json", help="The DAG as JSON (a CI matrix), in the envelope "
                                      "{ok, verb, ...}; text goes to stderr."),
         explain: bool = typer.Option(False, "--explain", "-x", help="Show the inputs that make each key."),
         offline: bool = typer.Option(False, "--offline", help="Ask no registry: bases neither pinned nor locked "
                                      "keep provisional keys.")) -> None:
    """Show the layer DAG: one node per distinct layer image, its content key and who uses it."""
    json_mode("plan", as_json)
    prepared = prepared_for(file, kinds, selectors, all_, bases="none" if offline else "site")
    spec, names, bases, result = prepared.spec, prepared.names, prepared.bases, prepared.locked()
    if as_json:
        reply(result.to_json())
        return
    for base, why in sorted(bases.unresolved.items()):
        echo(f"note: base {base}: {why}; its keys are provisional until `imgbuild lock` records its digest "
                   "or `imgbuild build` resolves it")
    for stack in prepared.stacks:
        name = stack.name
        echo(f"{name}  (base {stack.base.ref(spec.site)}; gpus {','.join(g.name for g in stack.gpus) or 'none'}; "
             f"platforms {','.join(stack.platforms)})")
        for node, _, _ in _chains(result, name):
            shared = [s for s in result.users[node.key] if s != name]
            echo(f"  {node.short}  {node.name:<22} {node.layer.kind.name:<18} {node.platform:<12}"
                       + (f" shared with {', '.join(shared)}" if shared else ""))
            if explain:
                echo(f"      image {image_ref(spec, node)}")
                for key, value in sorted(node.inputs.items()):
                    if value:
                        echo(f"      {key}: {json.dumps(value, sort_keys=True)}")
                for key, value in sorted(node.params.items()):   # they reach the key through the Dockerfile
                    echo(f"      params.{key}: {json.dumps(value, sort_keys=True)}")
    echo(f"{len(result.nodes)} distinct layer image(s) for {len(names)} stack(s); keys are "
               f"sha256 over the inputs shown with --explain (first {KEY_LEN} hex digits in tags)")


def release_date_given(date: str | None) -> None:
    """--date is read before anything is built: a date the tags cannot hold is a usage mistake (exit 2), not a
    refusal after an hour of building."""
    from builder.load.tags import parse_date
    if date is not None:
        try:
            parse_date(date)
        except ValueError as exc:
            raise SpecError(str(exc), hint="e.g. --date 2026.12.05; a tag's own format is {date:%Y%m%d}") from None


@app.command()
def build(selectors: Optional[List[str]] = Selectors, file: Path = FileOpt, all_: bool = AllOpt,
          kinds: Optional[List[Path]] = KindsOpt,
          docker: Optional[str] = typer.Option(None, "--docker", help="The Docker CLI to use (default: detected)."),
          date: Optional[str] = typer.Option(None, "--date", help="The day of release tags' {date}: YYYY.MM.DD, YYYY-MM-DD or YYYYMMDD (default: today, UTC)."),
          node: Optional[str] = typer.Option(None, "--node", help="Build, validate and push only this layer image "
                                             "(its key, or 12+ hex digits of it; CI's node job): its parent must be in "
                                             "the registry with passing checks. Moves no tag."),
          jobs: int = typer.Option(1, "--jobs", "-j", min=1, max=32, help="Build up to N independent layer images at "
                                   "once on the engine."),
          progress: Literal["auto", "plain", "tty"] = typer.Option(
              "auto", "--progress", metavar="auto|plain|tty",
              help="How the build is shown: tty, a status line per layer at work, redrawn in place; plain, "
                   "lines only, with a heartbeat for a layer silent for 30 s; auto, tty on a terminal outside "
                   "CI. Every line names its layer; the full engine output is in the run folder either way."),
          require_locked: bool = RequireLockedOpt, engine: Optional[str] = EngineOpt,
          as_json: bool = typer.Option(False, "--json", help="The run's report (report.json) in the envelope "
                                       "{ok, verb, ...} on stdout; progress goes to stderr.")) -> None:
    """Build what the registry lacks, validate every image, then move the release tags."""
    from builder.ship.pipeline import build as run_build
    json_mode("build", as_json)
    release_date_given(date)
    prepared = prepared_for(file, kinds, selectors, all_, bases="all")
    names = prepared.names
    report = run_build(prepared, say=lambda line: echo(line), docker=docker, date=date, node=node, jobs=jobs,
                       progress=progress, out=sys.stderr if as_json else sys.stdout, require_locked=require_locked,
                       engine=engine)
    built = sum(1 for r in report.nodes.values() if r.action == "build")
    if node:
        res = next(iter(report.nodes.values()))
        echo(f"ok: {res.layer} {res.key} {'built and pushed' if res.action == 'build' else res.action + 'd'} "
             f"({res.digest}); report {report.run_dir}/report.json")
    else:
        done = "built and validated, none released (not the release branch)" if report.held else "released"
        echo(f"ok: {len(names)} stack(s) {done}; {built} layer image(s) built, "
             f"{len(report.nodes) - built} reused; report {report.run_dir}/report.json")
    reply({**json.loads(Path(report.run_dir, "report.json").read_text()), "stacks": names,
           "run_dir": str(report.run_dir)})


@app.command()
def release(selectors: Optional[List[str]] = Selectors, file: Path = FileOpt, all_: bool = AllOpt,
            kinds: Optional[List[Path]] = KindsOpt,
            date: Optional[str] = typer.Option(None, "--date", help="The day of release tags' {date}: YYYY.MM.DD, YYYY-MM-DD or YYYYMMDD (default: today, UTC)."),
            require_gpu: bool = typer.Option(False, "--require-gpu-checks", help="A GPU check recorded as skipped is "
                                             "no proof: every GPU check must have run and passed (CI with GPU runners)."),
            as_json: bool = JsonOpt) -> None:
    """Move the release tags of built stacks: only if every layer image of every selected stack is in
    the registry with passing recorded checks (read from the registry, not from a job's exit code)."""
    from builder.ship.pipeline import refuse_release, release as run_release
    json_mode("release", as_json)
    release_date_given(date)
    spec = load_spec(file, kinds=kinds or None)
    stacks = select(spec, selectors, all_)
    names = [s.name for s in stacks]
    refuse_release(spec)   # before any registry is asked for a base digest
    moved = run_release(prepare(spec, stacks, bases="all"), say=lambda line: echo(line), date=date, require_gpu=require_gpu)
    echo(f"ok: {len(moved)} stack(s) released")
    reply({"stacks": names, "released": moved})


@app.command()
def gc(file: Path = FileOpt, apply_: bool = typer.Option(False, "--apply", help="Delete the candidates (default: "
                                                       "a dry run that lists them and the bytes they free)."),
       all_rows: bool = typer.Option(False, "--all", help="List what is kept too, with the rule that keeps it."),
       as_json: bool = JsonOpt) -> None:
    """Retention: what in the site's namespace no release, running build or retention rule (site.retention)
    needs. A dry run by default; --apply deletes those manifests through the registry's API, and the
    registry's own garbage collection then frees the bytes (docs/retention.md)."""
    from builder.ship import gc as gc_mod
    from builder.ship.registry import Registry
    json_mode("gc", as_json)
    spec = load_spec(file)
    site = spec.site
    reg = Registry(site.registry, on_retry=lambda line: echo(line))
    reg.ping()
    plan = gc_mod.plan_gc(reg, site.namespace, site.retention, say=lambda line: echo(line))
    plan.deletes_allowed = gc_mod.deletes_allowed(reg, site.namespace)
    p = site.retention
    echo(f"policy: keep the newest {p.keep_releases} release(s) of each stack, "
         + (f"tags {', '.join(p.keep_tags)}, " if p.keep_tags else "") + f"everything younger than {p.keep_days} "
         f"day(s), the keys of runs started in the last {p.grace_hours} h")
    rows = plan.items if all_rows else plan.candidates
    if rows:
        echo(f"{'':<4}{'kind':<8} {'age':>9} {'bytes':>10}  manifest")
    now = time.time()
    for i in sorted(rows, key=lambda i: (bool(i.keep), i.repo, i.kind, i.tags)):
        age = f"{(now - i.created) / 86400:.1f} d" if i.created else "-"
        size = i.size + sum(i.blobs.values())
        echo(f"{'keep' if i.keep else 'gc':<4}{i.kind:<8} {age:>9} {size:>10}  {i.ref}"
             + (f"  ({i.keep})" if i.keep else ""))
    for line in plan.missing:
        echo(f"note: a kept release lacks a layer image: {line}; the next build of that stack builds it again")
    for line in plan.unread:
        echo(f"note: not readable, so its shared blobs are not counted (fewer bytes may be freed): {line}")
    candidates = plan.candidates
    echo(f"{len(candidates)} of {len(plan.items)} manifest(s) in {site.registry}/{site.namespace} are not needed; "
         f"deleting them frees {plan.freed} bytes ({plan.freed / 2**20:.1f} MiB) once the registry collects "
         "its garbage")
    deleted: list = []
    if apply_ and candidates:
        deleted = gc_mod.apply(reg, plan, say=lambda line: echo(line))
        echo(f"ok: {len(deleted)} manifest(s) deleted; run the registry's garbage collection to free the bytes "
             "(docs/retention.md)")
    elif not apply_:
        if plan.deletes_allowed is False:
            echo(f"note: {site.registry} does not allow deletes: --apply would be refused (storage.delete.enabled)")
        echo("dry run: nothing was deleted (--apply deletes)")
    reply({**plan.to_json(), "applied": apply_, "deleted": [f"{r}@{d}" for r, d in deleted]})


@app.command()
def catalog(out: Path = typer.Option(Path("catalog"), "--out", "-o", help="The folder to write the site into "
                                     "(replaced whole; default ./catalog)."),
            registry: Optional[str] = typer.Option(None, "--registry", help="The registry host[:port] (default: "
                                                   "the stacks file's site.registry, else 127.0.0.1:5000)."),
            namespace: Optional[str] = typer.Option(None, "--namespace", help="The namespace (default: the stacks "
                                                    "file's site.namespace, else imgbuild)."),
            file: Path = FileOpt, as_json: bool = JsonOpt) -> None:
    """A static site for the cluster's users: every released stack of the namespace, what is in it, which GPUs
    it is for, its checks, its SBOM, what changed since its last release and how to run it. Reads the registry
    only (a stacks file, where there is one, only says which registry); HTML with catalog.json beside it."""
    from builder import catalog as catalog_mod
    from builder.catalog import page
    from builder.load.spec import DEFAULT_NAMESPACE, DEFAULT_REGISTRY
    from builder.ship.registry import Registry
    json_mode("catalog", as_json)
    site = load_spec(file).site if (registry is None or namespace is None) and file.exists() else None
    host = registry or (site.registry if site else DEFAULT_REGISTRY)
    ns = namespace or (site.namespace if site else DEFAULT_NAMESPACE)
    reg = Registry(host, on_retry=lambda line: echo(line))
    reg.ping()
    collected = catalog_mod.collect(reg, ns, say=lambda line: echo(line), trust=site.trust if site else None)
    written = page.write(out, collected)
    stacks = collected["data"]["stacks"]
    echo(f"ok: {out}/index.html: {len(stacks)} released stack(s) of {host}/{ns}, {len(written)} file(s)")
    reply({"out": str(out), "stacks": [s["name"] for s in stacks], "files": written})


@app.command()
def validate(targets: Optional[List[str]] = typer.Argument(None, help="stack=NAME or an image reference."),
             file: Path = FileOpt, kinds: Optional[List[Path]] = KindsOpt,
             platform: Optional[str] = typer.Option(None, "--platform", help="Of a stack of several platforms, "
                                                    "check this platform's image only (e.g. linux/arm64 on a Grace "
                                                    "node); default: each platform's."),
             docker: Optional[str] = typer.Option(None, "--docker"), engine: Optional[str] = EngineOpt,
             as_json: bool = JsonOpt) -> None:
    """Re-run the in-image checks of existing images (no target: every stack's) and record the results
    beside them."""
    from builder.ship.pipeline import validate as run_validate
    from builder.errors import ValidationFailed
    json_mode("validate", as_json)
    spec = load_spec(file, kinds=kinds or None)
    stacks = [t for t in targets or [] if t.startswith("stack=")]
    images = [t for t in targets or [] if not t.startswith("stack=")]
    chosen = select(spec, stacks, False) if stacks or not images else []
    names = [s.name for s in chosen]
    # An image is matched against every stack's layers; a stack=NAME against its own.
    prepared = prepare(spec, list(spec.stacks.values()) if images else chosen, bases="all")
    if not run_validate(prepared, chosen, images, say=lambda line: echo(line), docker=docker, platform=platform,
                        engine=engine):
        raise ValidationFailed("checks failed (see above); nothing was tagged")
    echo("ok: every check passed or was skipped with its reason")
    reply({"stacks": names, "images": images})


ci_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, context_settings=HELP, help="Write a CI pipeline from the plan: one job per layer image, "
                     "needs following the layer DAG, a release job per stack.")
app.add_typer(ci_app, name="ci")
ImgbuildCmdOpt = typer.Option("imgbuild", "--imgbuild", help="How the jobs call imgbuild (split into words, each "
                              "quoted), e.g. '.venv/bin/imgbuild'.")
CiOutOpt = typer.Option(None, "--out", "-o", help="Write the pipeline to this file (default: stdout).")
OfflineCiOpt = typer.Option(False, "--offline", help="Ask no registry: bases neither pinned nor locked keep "
                            "provisional keys (their node jobs will refuse); for review only: the file says so in "
                            "its first line, and GitHub's self-check refuses it.")


def _ci(system: str, selectors, file: Path, all_: bool, kinds, imgbuild_cmd: str, out, offline: bool,
        as_json: bool, workflow: str | None = None) -> None:
    from builder import ci
    json_mode(f"ci {system}", as_json)
    prepared = prepared_for(file, kinds, selectors, all_, bases="none" if offline else "all")
    if not offline:
        prepared.bases.require()   # raises, naming the first base no registry answers
    names = prepared.names
    all_ = all_ or not selectors   # the regenerate command keeps following the file's stacks
    common = ("-f", str(file)) + tuple(a for k in kinds or [] for a in ("--kinds", str(k)))
    # GitHub's first job writes the workflow again with these very arguments and compares; never with
    # --offline, so a file written offline (provisional keys) cannot pass its own check on a runner.
    regenerate = ("ci", system, *(["--all"] if all_ else [f"stack={n}" for n in names]), *common,
                  "--imgbuild", imgbuild_cmd, "--workflow", str(workflow))
    text, notes = ci.generate(prepared, system, imgbuild=imgbuild_cmd, common=common, regenerate=regenerate,
                              workflow=str(workflow), offline=offline)
    for note in notes:
        echo(f"note: {note}", err=True)
    if out:
        ci.write(out, text)
        echo(f"ok: {out}: {system} pipeline for {len(names)} stack(s)", err=True)
    elif not as_json:
        typer.echo(text, nl=False)   # YAML as written: it holds no credential (keys, names, the stacks file path)
    reply({"system": system, "stacks": names, "notes": notes, **({"out": str(out)} if out else {"text": text})})


@ci_app.command("gitlab")
def ci_gitlab(selectors: Optional[List[str]] = Selectors, file: Path = FileOpt, all_: bool = AllOpt,
              kinds: Optional[List[Path]] = KindsOpt, imgbuild_cmd: str = ImgbuildCmdOpt,
              out: Optional[Path] = CiOutOpt, offline: bool = OfflineCiOpt, as_json: bool = JsonOpt) -> None:
    """A GitLab child pipeline (stages build, gpu, release; needs make the DAG). Trigger it from the parent
    .gitlab-ci.yml with trigger: include: artifact (docs/ci.md)."""
    _ci("gitlab", selectors, file, all_, kinds, imgbuild_cmd, out, offline, as_json)


@ci_app.command("github")
def ci_github(selectors: Optional[List[str]] = Selectors, file: Path = FileOpt, all_: bool = AllOpt,
              kinds: Optional[List[Path]] = KindsOpt, imgbuild_cmd: str = ImgbuildCmdOpt,
              out: Optional[Path] = CiOutOpt, offline: bool = OfflineCiOpt,
              workflow: str = typer.Option(".github/workflows/imgbuild.yml", "--workflow", help="Where the workflow "
                                           "is committed: its first job regenerates it and compares with this file."),
              as_json: bool = JsonOpt) -> None:
    """A GitHub Actions workflow; its first job regenerates it and fails when the committed file differs."""
    _ci("github", selectors, file, all_, kinds, imgbuild_cmd, out, offline, as_json, workflow)


@app.command()
def facts(file: Optional[Path] = typer.Option(None, "--file", "-f", help="A stacks file whose site.catalog adds to "
                                              "the shipped catalog (default: the shipped catalog alone)."),
          as_json: bool = JsonOpt) -> None:
    """The bases the catalog knows (NGC PyTorch and JAX months, and a site catalog's own bases) with their torch,
    CUDA, cuDNN, NCCL and Python, and the framework releases it knows: what `check` judges a stack by where
    nothing was measured."""
    from builder.core import catalog
    json_mode("facts", as_json)
    if file is not None:
        load_spec(file)   # puts its site catalog in use
    else:
        catalog.use(None)
    cols = ("torch", "jax", "cuda", "cudnn", "nccl", "python")
    bases = {}
    for framework in catalog.FRAMEWORK_NAME:
        for month, rel in sorted(catalog.ngc_releases(framework).items()):
            have = dict(rel.facts)
            bases[f"nvcr.io/nvidia/{framework}:{month}-py3"] = {**{c: have.get(c) for c in cols}, "source": rel.source}
    for image in catalog.section("bases"):
        rel = catalog.base_record("", image)
        bases[image] = {**{c: dict(rel.facts).get(c) for c in cols}, "source": rel.source}
    width = max(map(len, bases))
    echo(f"{'base':<{width}}  " + "  ".join(f"{c:<18}" for c in cols))
    for image, row in bases.items():
        echo(f"{image:<{width}}  " + "  ".join(f"{row[c] or '-':<18}" for c in cols))
    known = {field: catalog.releases(field) for field in ("deepspeed", "megatron", "transformer_engine", "flash_attn")}
    releases = {field: [str(v) for v in k.value] for field, k in known.items()}
    for field, versions in releases.items():
        echo(f"{field}: {len(versions)} releases, {versions[0]} to {versions[-1]} ({known[field].source})")
    echo("- : not in the catalog (imgbuild lock base=NAME measures a base; measured beats catalog)")
    reply({"bases": bases, "releases": releases})


@app.command()
def kinds(name: Optional[str] = typer.Argument(None, help="A kind's name: its parameters and checks."),
          kinds_dirs: Optional[List[Path]] = KindsOpt,
          as_json: bool = JsonOpt,
          as_markdown: bool = typer.Option(False, "--markdown", help="The whole stacks.yaml reference as Markdown "
                                           "(docs/stacks-reference.md is this)."),
          ) -> None:
    """The layer kinds (shipped, the site's layers/ here, and --kinds folders): what each takes and checks.
    Exit 2 for a kind that does not exist."""
    from builder.load.kindpath import find_kinds
    from builder.load.kinds import load_kinds
    from builder import reference
    json_mode("kinds", as_json)
    found = dict(find_kinds(Path.cwd(), [Path(k) for k in kinds_dirs] if kinds_dirs else None, load_kinds))
    if name is not None and name not in found:
        raise SpecError(f"unknown layer kind {name!r}", hint="kinds: " + ", ".join(sorted(found)))
    if as_markdown:
        typer.echo(reference.markdown(found), nl=False)
    elif as_json:
        reply({"kinds": [reference.kind_data(found[k]) for k in sorted(found) if name in (None, k)]})
    else:
        echo(reference.kinds_text(found, name))


@app.command()
def init(out: Path = typer.Option(Path("stacks.yaml"), "--out", "-o", help="Where to write it (never over a file)."),
         registry: str = typer.Option("127.0.0.1:5000", "--registry", help="The site registry, host[:port]."),
         namespace: str = typer.Option("imgbuild", "--namespace", help="Repository path for the site's images."),
         stack: str = typer.Option("first-stack", "--stack", help="The first stack's name."),
         ngc: Optional[str] = typer.Option(None, "--ngc", metavar="MONTH", help="Start a GPU stack on NGC PyTorch "
                                           "MONTH (25.09): a month the catalog knows (imgbuild facts lists them)."),
         gpus: Optional[str] = typer.Option(None, "--gpus", metavar="H100,A100", help="With --ngc: the stack's GPUs, "
                                            "by catalog name (its DeepSpeed ops are compiled for them)."),
         as_json: bool = JsonOpt) -> None:
    """Write a minimal annotated stacks.yaml for a site, checked before it is written: the mirrored Debian base,
    torch and DeepSpeed on CPU, one stack; or, with --ngc and --gpus, a GPU stack on an NGC PyTorch month with
    the newest DeepSpeed that `check` accepts there. Exit 2 if the file exists or a value is refused."""
    from builder import reference
    from builder.ci import write
    json_mode("init", as_json)
    if out.exists():
        raise SpecError(f"{out} exists; imgbuild init writes a new file only", hint="--out another path")
    if (ngc is None) != (gpus is None):
        raise SpecError("--ngc MONTH and --gpus H100,... go together: a GPU stack needs both",
                        hint="e.g. imgbuild init --ngc 25.09 --gpus H100,A100")
    import tempfile
    with tempfile.TemporaryDirectory(prefix="imgbuild-init-") as tmp:
        trial = Path(tmp) / "stacks.yaml"
        if ngc is None:
            text = reference.init_text(registry, namespace, stack)
            _init_trial(trial, text)
            what = ""
        else:
            text, ds = _init_gpu(trial, registry, namespace, stack, ngc, gpus)
            what = f" (NGC PyTorch {ngc}, DeepSpeed {ds}, {gpus})"
    write(out, text)
    echo(f"ok: {out}: stack {stack!r}{what} on {registry}/{namespace}; next: imgbuild check -f {out}, then "
         f"imgbuild build stack={stack} -f {out}")
    reply({"file": str(out), "stack": stack, "registry": registry, "namespace": namespace})


def _init_trial(trial: Path, text: str):
    """The file init would write, read as any stacks file: every value refused is named by its key (the file is a
    temporary one, so its path is not shown)."""
    trial.write_text(text)
    try:
        return load_spec(trial)
    except SpecError as exc:
        given = [SpecError(f"{e.key}: {e.reason}", hint="--registry, --namespace, --stack, --ngc and --gpus are "
                           "written there", rule=e.rule) for e in getattr(exc, "errors", None) or [exc]]
        raise (given[0] if len(given) == 1 else SpecErrors(given)) from None


def _init_gpu(trial: Path, registry: str, namespace: str, stack: str, month: str, gpus: str) -> tuple[str, str]:
    """init --ngc: the month's facts from the catalog, and the newest DeepSpeed release (the last patch of each
    minor, newest first) whose stack `check` finds no error in."""
    from builder import reference
    from builder.core import catalog
    from builder.errors import did_you_mean
    from builder.rules.review import review
    from packaging.version import Version
    catalog.use(None)
    months = catalog.ngc_releases("pytorch")
    if month not in months:
        known = sorted(months, key=lambda m: tuple(map(int, m.split("."))))
        raise SpecError(f"--ngc {month!r}: not an NGC PyTorch month the catalog knows" + did_you_mean(month, known),
                        hint=f"it knows {known[0]} to {known[-1]} (imgbuild facts); a newer month goes in a site "
                             "catalog (site.catalog), then in stacks.yaml by hand")
    facts = dict(months[month].facts)
    names = [g.strip() for g in gpus.split(",") if g.strip()]
    wrong = [g for g in names if g not in catalog.gpus()]
    if wrong or not names:
        raise SpecError(f"--gpus {gpus!r}: " + (", ".join(f"unknown GPU {g!r}" + did_you_mean(g, catalog.gpus())
                                                          for g in wrong) or "no GPU named"),
                        hint="catalog GPUs: " + ", ".join(catalog.gpus()))
    newest = catalog.newest_known("deepspeed")
    by_minor: dict = {}
    for v in catalog.releases("deepspeed").value:
        if newest is None or v <= Version(newest.value):
            by_minor[v.release[:2]] = v
    tried = []
    for version in sorted(by_minor.values(), reverse=True)[:8]:
        ngc = {"month": month, "torch": facts.get("torch", "?"), "cuda": facts.get("cuda", "?"),
               "python": facts.get("python", "?"), "deepspeed": str(version), "gpus": names}
        text = reference.init_text(registry, namespace, stack, ngc)
        spec = _init_trial(trial, text)
        errors = review(prepare(spec)).errors()
        if not errors:
            return text, str(version)
        tried.append(f"{version}: {errors[0].rule} {errors[0].message}")
    raise SpecError(f"no DeepSpeed release the catalog knows passes check on NGC PyTorch {month} for "
                    f"{', '.join(names)}", hint="tried " + "; ".join(tried[:3]))


def _interrupt(signum, frame) -> None:
    # Ctrl-C and SIGTERM (CI cancelling a job) unwind the same way: a running build is stopped, nothing is tagged.
    raise Interrupted(signal.Signals(signum).name)


@app.command()
def diff(targets: List[str] = typer.Argument(..., show_default=False,
                                             help="REV1 [REV2]: git revisions (one: against the working tree); or "
                                                  "IMAGE_A IMAGE_B: REGISTRY/REPO:TAG, REGISTRY/REPO@sha256:..., STACK@TAG."),
         file: Path = FileOpt,
         as_json: bool = JsonOpt,
         markdown: bool = typer.Option(False, "--markdown", help="Markdown for a merge request comment."),
         registry: bool = typer.Option(False, "--registry", help="Spec diff: look new keys up in the site "
                                                                 "registry (found: reused)."),
         offline: bool = typer.Option(False, "--offline", help="Spec diff: ask no registry, not even for mirrored "
                                      "bases (their keys stay provisional)."),
         platform: Optional[str] = typer.Option(None, "--platform", help="Image diff: the entry of a multi-platform "
                                                "release to compare (default linux/amd64, or its only one)."),
         kinds: Optional[List[Path]] = KindsOpt) -> None:
    """What a change to stacks.yaml does to the layer images, or what differs between two built images.
    Exit 0 when equal, 1 when different, 2 on error (so that CI can gate on it)."""
    from builder.diff.diffreport import render
    from builder.errors import DiffError
    json_mode("diff", as_json)
    # Anything naming a registry or a tag (a '/' or an '@') is an image; git revisions carry neither.
    images = any("/" in t or "@" in t for t in targets)
    try:
        if as_json and markdown:
            raise DiffError("choose one of --json and --markdown")
        if images:
            from builder.diff.imagediff import diff_images
            if len(targets) != 2:
                raise DiffError(f"an image diff compares two images; {len(targets)} given")
            site = load_spec(file).site if any("/" not in t for t in targets) else None
            if platform is not None and platform not in PLATFORMS:
                raise DiffError(f"--platform {platform!r}: not one imgbuild builds ({', '.join(PLATFORMS)})")
            result = diff_images(targets[0], targets[1], site, platform)
        else:
            from builder.diff.specdiff import diff_revisions
            if len(targets) > 2:
                raise DiffError(f"a spec diff compares two revisions (or one with the working tree); {len(targets)} given")
            result = diff_revisions(file, targets[0], targets[1] if len(targets) == 2 else None, registry=registry,
                                    offline=offline, kinds=kinds or None)
    except DiffError:
        raise
    except ImgbuildError as exc:
        raise DiffError(f"{exc.label}: {exc.message}", hint=exc.hint) from exc
    if as_json:
        reply(result.to_json())   # ok: the comparison was made; "different" (and exit 1) says what it found
    else:
        echo(render(result, "markdown" if markdown else "table"))
    raise SystemExit(1 if result.different else 0)


@app.command()
def lint(paths: List[Path] = typer.Argument(..., help="stacks.yaml, Dockerfiles, or folders holding Dockerfiles."),
         kinds: Optional[List[Path]] = KindsOpt,
         strict: bool = typer.Option(False, "--strict", help="Warnings are errors too."),
         as_json: bool = JsonOpt) -> None:
    """Lint a stacks file (its values and every rendered Dockerfile) or hand-written Dockerfiles."""
    from builder.rules.findings import errors, ordered, strict as make_strict, summary
    from builder.core.dockerfile import dockerfiles_in, read as read_dockerfile
    from builder.rules.lint import lint_dockerfile
    from builder.rules.review import review
    json_mode("lint", as_json)
    found, count = [], 0
    for path in paths:
        if path.suffix in (".yaml", ".yml"):
            # A stacks file gets the same review as `check` (preflight included): one judgement, everywhere.
            found += review(prepare(load_spec(path, kinds=kinds or None))).findings
            count += 1
            continue
        for dockerfile in dockerfiles_in(path):
            try:
                text = read_dockerfile(dockerfile)
            except OSError as exc:
                raise SpecError(f"cannot read: {exc.strerror or exc}", file=str(dockerfile)) from None
            except ValueError as exc:
                raise SpecError(f"cannot lint: {exc}", file=str(dockerfile)) from None
            found += lint_dockerfile(text, str(dockerfile))
            count += 1
    found = ordered(make_strict(found) if strict else found)
    for finding in found:
        if not as_json:
            echo(finding.render())
    data = {"files": count, "summary": summary(found), "findings": [f.to_json() for f in found]}
    if errors(found):
        reply({**data, "error": {"kind": "lint", "message": f"{summary(found)} in {count} file(s)"}}, False,
              PreflightError.exit_code)
        if as_json:
            raise SystemExit(PreflightError.exit_code)
        raise PreflightError(f"lint: {summary(found)} in {count} file(s)")
    echo(f"ok: {count} file(s) linted: {summary(found)}")
    reply(data)


def _emit(site, image: str, nodes: int, procs: int, gpn: int, env: dict, only: str | None, framework: str,
          emit_k8s: Path | None, emit_sbatch: Path | None, flavor: str | None, name: str, force: bool,
          partition: str | None, account: str | None, time_limit: str | None) -> None:
    """`node-check --emit-k8s/--emit-sbatch`: the launch file of the nodes targeted (a site partition's runtime
    env laid over the stack's), every value checked before it is written, an existing file kept without --force."""
    from builder import nodecheck
    from builder.load.k8sconf import K8sSettings
    from builder.load.slurmconf import SlurmSettings
    from builder.nodecheck import k8s, sbatch
    target = site.partition(partition) if site is not None and partition else None
    if partition and target is None and emit_k8s is not None:
        known = ", ".join(p.name for p in site.partitions) if site is not None else ""
        raise SpecError(f"--partition {partition!r}: not a partition of site.partitions",
                        hint=f"partitions: {known}" if known else "declare it in stacks.yaml's site.partitions")
    env = {**env, **dict(target.env)} if target else dict(env)
    out = emit_k8s if emit_k8s is not None else emit_sbatch
    if out.exists() and not force:
        raise SpecError(f"{out} exists: nothing was written", hint="--force to overwrite it")
    worker = nodecheck.worker_file(framework).read_text()
    args = ["--only", only] if only else None
    each = "one jax.distributed process" if framework == "jax" else f"{gpn or procs} rank(s)"
    each += f" on {gpn} GPU(s)" if gpn else " on the CPU only (gloo): no GPU, NCCL or fabric exercised"
    where = f" on site partition {target.name}" if target else ""
    if emit_k8s is not None:
        settings = site.k8s if site is not None else K8sSettings()
        if target and target.node_selector:
            from dataclasses import replace as _replace
            settings = _replace(settings, node_selector=tuple({**dict(settings.node_selector),
                                                                **dict(target.node_selector)}.items()))
        flavor = flavor or settings.flavor or k8s.DEFAULT_FLAVOR
        objects = k8s.manifests(image, nodes, gpn or procs, gpn, env=env, settings=settings, name=name,
                                worker_args=args, framework=framework, worker=worker,
                                flavor=flavor)   # refused before anything is written
        emit_k8s.write_text(k8s.text(objects, name, nodes, flavor))
        echo(f"ok: {emit_k8s}: {flavor} {name}, {nodes} pod(s) x {each}{where}; run with: kubectl apply -f {emit_k8s}")
        reply({"k8s": str(emit_k8s), "flavor": flavor, "name": name, "nodes": nodes,
               "objects": [o["kind"] for o in objects]})
        return
    slurm = site.slurm if site is not None else SlurmSettings()
    text = sbatch.script(image, worker, nodes, gpn or procs, gpn, env=env, settings=slurm,
                         partition=(target.slurm_partition if target else partition), account=account,
                         time_limit=time_limit, worker_args=args, framework=framework, name=name,
                         target=target.name if target else None)   # refused before anything is written
    emit_sbatch.write_text(text)
    emit_sbatch.chmod(0o755)
    echo(f"ok: {emit_sbatch}: {nodes} node(s) x {gpn or procs} task(s)"
         + (f" on {gpn} GPU(s) each" if gpn else " on the CPU only (gloo): no GPU, NCCL or fabric exercised")
         + f"{where}; the worker is inside; submit with: sbatch {emit_sbatch}")
    reply({"sbatch": str(emit_sbatch), "nodes": nodes, "name": name})


@app.command(name="node-check")
def node_check(target: Optional[str] = typer.Argument(None, help="stack=NAME (its released image) or an image "
                                                      "reference; none with --squashfs or --from-log."),
               procs: Optional[int] = typer.Option(None, "--procs", "-n", min=1, max=64,
                                                   help="Ranks on this node (default: one per GPU of a GPU stack's "
                                                        "nodes, else 2)."),
               gpus: Optional[bool] = typer.Option(None, "--gpus/--no-gpus",
                                                   help="NCCL on the engine's GPUs (default: when it has any)."),
               json_out: bool = JsonOpt,
               only: Optional[str] = typer.Option(None, "--only", help="Comma-separated check ids."),
               emit_sbatch: Optional[Path] = typer.Option(None, "--emit-sbatch", help="Write a Slurm batch script "
                                                          "that runs the check over --nodes nodes, and do not run it."),
               emit_k8s: Optional[Path] = typer.Option(None, "--emit-k8s", help="Write Kubernetes launch files "
                                                       "that run the check over --nodes nodes (one pod per node, the "
                                                       "worker as a ConfigMap, site.k8s's profile), and do not run it."),
               k8s_flavor: Optional[str] = typer.Option(None, "--k8s-flavor", help="job (default: plain Kubernetes), "
                                                        "jobset, trainjob (Kubeflow Trainer v2), volcano (gang "
                                                        "scheduled) or pytorchjob (legacy Training Operator v1); "
                                                        "site.k8s.flavor sets the site's."),
               name: str = typer.Option("imgbuild-node-check", "--name", help="The name of the job and of every "
                                        "object it needs (two checks in one namespace: two names)."),
               force: bool = typer.Option(False, "--force", help="Overwrite an existing --emit-k8s/--emit-sbatch "
                                          "file."),
               partition: Optional[str] = typer.Option(None, "--partition", help="The nodes targeted: a site "
                                                       "partition (site.partitions: its Slurm partition, node "
                                                       "selector and runtime env), else a Slurm partition."),
               account: Optional[str] = typer.Option(None, "--account", help="Slurm account (default "
                                                     "site.slurm.account)."),
               time_limit: Optional[str] = typer.Option(None, "--time", help="Slurm time limit (default "
                                                        "site.slurm.time, 00:30:00)."),
               nodes: int = typer.Option(2, "--nodes", min=1, help="Nodes of the batch job."),
               gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", min=0,
                                                           help="GPUs per node of the batch job, one task per GPU "
                                                                "(default: a GPU stack's gpus_per_node, or its GPUs' "
                                                                "systems in the catalog)."),
               cpu: bool = typer.Option(False, "--cpu", help="Check a GPU image on the CPU alone (gloo): the report "
                                        "says CPU only. Without it, 0 GPUs for a GPU stack is refused."),
               from_log: Optional[Path] = typer.Option(None, "--from-log", help="Read the report from a batch "
                                                       "job's output instead of running the check."),
               squashfs: Optional[Path] = typer.Option(None, "--squashfs", help="Run the check inside an exported "
                                                       "squashfs (imgbuild export), started as Enroot starts it."),
               framework: Optional[str] = typer.Option(None, "--framework", help="torch or jax: which worker "
                                                       "the image takes (default: the stack's, or asked of the image)."),
               file: Path = FileOpt, kinds: Optional[List[Path]] = KindsOpt,
               docker: Optional[str] = typer.Option(None, "--docker")) -> None:
    """Run the consistency check with an image on this node: matmul against a reference, collectives and
    all-reduce bus bandwidth, DeepSpeed ZeRO-2 steps, Megatron-Core TP/PP, the environment of every rank;
    for a JAX image, jax.distributed processes (or host devices) with matmul and collectives by value.
    Exit 8 when a check fails, naming the ranks that disagreed."""
    from builder.ship.engines import choose
    from builder import nodecheck
    json_mode("node-check", json_out)
    env: dict = {}
    if target is None and squashfs is None and from_log is None:
        raise SpecError("name the image to check: stack=NAME, an image reference, --squashfs FILE or --from-log FILE")
    if framework is not None and framework not in nodecheck.FRAMEWORKS:
        raise SpecError(f"--framework {framework!r}: expected one of {', '.join(nodecheck.FRAMEWORKS)}")
    gpn = gpus_per_node
    limits: dict = {}     # the site's bus bandwidth thresholds (site.node_check.min_busbw_gbps)
    if target is None:
        image = str(squashfs or from_log)
    elif target.startswith("stack="):
        spec = load_spec(file, kinds=kinds or None)
        stack = select(spec, [target], False)[0]
        gpn = _node_gpus(stack, gpus_per_node, cpu, local=emit_k8s is None and emit_sbatch is None
                         and from_log is None, docker=docker)
        if gpn and gpus is None and emit_k8s is None and emit_sbatch is None:
            gpus = True
        image = nodecheck.released_image(spec, stack) if from_log is None and squashfs is None else target
        if from_log is None and squashfs is None and emit_k8s is None and emit_sbatch is None:
            _provenance(spec, image)   # what is about to run on the node: its signatures first
        env = stack.runtime_env()
        framework = framework or nodecheck.framework_of(stack)
        limits = dict(spec.site.node_check.min_busbw_gbps)
    else:
        image = target
    emitted = framework or "torch"   # what a written job runs: the stack's worker, or the one asked for
    gpn = gpn or 0
    procs = procs or gpn or 2
    if cpu:
        gpus = False
    if emit_k8s is not None or emit_sbatch is not None:
        site = spec.site if target is not None and target.startswith("stack=") else \
            (load_spec(file).site if file.exists() else None)
        _emit(site, image, nodes, procs, gpn, env, only, emitted, emit_k8s, emit_sbatch, k8s_flavor, name, force,
              partition, account, time_limit)
        return
    if from_log is not None:
        text = from_log.read_text(errors="replace")
        report = nodecheck.parse(image, text, text, 0, limits)
    elif squashfs is not None:
        report = nodecheck.run_squashfs(squashfs, procs=procs, options={"only": only} if only else None,
                                        framework=framework)
    else:
        site_engine = spec.site.engine if target is not None and target.startswith("stack=") else None
        report = nodecheck.run(choose(None, site_engine, docker), image, procs=procs, gpus=gpus,
                               options={"only": only} if only else None, framework=framework, limits=limits)
    failed = [r for r in report.results if r["status"] == "failed"]
    if json_out:
        data = report.to_json()
        if failed:
            data["error"] = {"kind": "node check", "message": ", ".join(r["id"] for r in failed) + " failed"}
        reply(data, report.ok, nodecheck.NodeCheckFailed.exit_code)
        if not report.ok:
            raise SystemExit(nodecheck.NodeCheckFailed.exit_code)
    else:
        echo(nodecheck.table(report))
    if not report.ok:
        raise nodecheck.NodeCheckFailed(", ".join(f"{r['id']} (rank {', '.join(map(str, r['bad_ranks'])) or '?'})"
                                                  for r in failed) + f" failed on {image}")


def _node_gpus(stack, given: int | None, cpu: bool, local: bool, docker: str | None) -> int:
    """The GPUs per node a stack's node check uses: 0 for a CPU stack or with --cpu; for a GPU stack the
    given number, else the stack's or site's gpus_per_node, else its GPUs' systems in the catalog. A GPU
    stack checked with 0 GPUs (or on a machine without one) is refused unless --cpu says so."""
    from builder import nodecheck
    if not stack.gpus:
        return given or 0
    if cpu:
        return 0
    gpus = ", ".join(g.name for g in stack.gpus)
    if given == 0:
        raise SpecError(f"stack {stack.name!r} is a GPU image ({gpus}), and --gpus-per-node 0 would check it on "
                        "the CPU alone: no GPU, NCCL or fabric", hint="--cpu says so on purpose")
    found, why = (given, "--gpus-per-node") if given else nodecheck.gpus_per_node(stack)
    if not found:
        raise SpecError(f"stack {stack.name!r} is a GPU image ({gpus}), but how many GPUs its nodes have is not "
                        f"known: {why}", hint="set site.node_check.gpus_per_node (or stacks.NAME.gpus_per_node), or "
                                              "pass --gpus-per-node N; --cpu checks the CPU alone")
    if local:
        from builder.ship.engines import choose
        if not choose(None, None, docker).has_gpu():
            raise SpecError(f"stack {stack.name!r} is a GPU image ({gpus}, {found} per node from {why}), and this "
                            "machine's engine has no GPU", hint="run it on a GPU node, emit a job for the GPU nodes "
                            "(--emit-sbatch, --emit-k8s), or --cpu to check the CPU path alone")
    return found


def _provenance(spec: Spec, image: str) -> dict | None:
    """Where the site signs (site.trust), the verified provenance of a released image, printed; a release
    whose signatures do not hold is refused (exit 10) before anything runs it."""
    if spec.site.trust is None:
        return None
    from builder.ship import trust
    from builder.ship.registry import Ref, Registry
    ref = Ref.parse(image)
    reg = Registry(ref.registry)
    digest = ref.digest or reg.manifest_digest(ref.repo, ref.reference)
    if not digest:
        raise trust.TrustError(f"{image} is not in the registry")
    report = trust.verify_release(reg, spec.site.trust, ref.repo, digest)
    for line in trust.provenance_lines(report):
        echo(line)
    return report


@app.command()
def verify(target: str = typer.Argument(..., help="stack=NAME (its released image) or an image reference "
                                        "(REGISTRY/REPO:TAG or REGISTRY/REPO@DIGEST)."),
           keys: Optional[List[Path]] = typer.Option(None, "--key", help="A trusted public key (PEM), instead of "
                                                     "the stacks file's site.trust.keys: how a cluster node checks."),
           rebuild: bool = typer.Option(False, "--rebuild", help="Instead: build the image's chain again on a clean "
                                        "engine from this checkout's spec and lock, each layer on its released parent, "
                                        "and report per layer whether the same key gave the same bytes, with the files "
                                        "that differ and why. Exit 0 all identical, 1 some differ."),
           engine: Optional[str] = EngineOpt,
           layer: Optional[List[str]] = typer.Option(None, "--layer", help="With --rebuild: only this layer (again for "
                                                     "more), still on its released parent."),
           record: bool = typer.Option(False, "--record", help="With --rebuild: store the result beside the released "
                                       "image (the catalog shows it)."),
           docker: Optional[str] = typer.Option(None, "--docker"),
           file: Path = FileOpt, kinds: Optional[List[Path]] = KindsOpt, as_json: bool = JsonOpt) -> None:
    """Verify a released image's signed provenance: the release's attestation and each layer image's, by the
    site's trusted keys, each naming the very bytes checked. Prints what built it, from which revision, and
    what it passed. Exit 0 verified, 10 refused (the reason named). With --rebuild: whether it builds again
    to the same bytes."""
    from builder import nodecheck
    from builder.ship import trust
    from builder.ship.registry import Ref, Registry
    json_mode("verify", as_json)
    if rebuild:
        _verify_rebuild(target, file, kinds, engine, docker, record, tuple(layer or ()))
        return
    if record or engine or layer:
        raise SpecError("--record, --layer and --engine go with --rebuild")
    spec = load_spec(file, kinds=kinds or None) if (not keys or target.startswith("stack=")) else None
    if keys:
        settings = trust.keys_from_files(keys)
    else:
        settings = spec.site.trust
        if settings is None:
            raise SpecError("site.trust declares no keys: nothing this site releases is signed", file=str(file),
                            key="site.trust", hint="declare the protected pipeline's keys (docs/trust.md), or give "
                                                   "--key FILE.pub")
    image = nodecheck.released_image(spec, select(spec, [target], False)[0]) if target.startswith("stack=") else target
    ref = Ref.parse(image)
    reg = Registry(ref.registry)
    digest = ref.digest or reg.manifest_digest(ref.repo, ref.reference)
    if not digest:
        raise trust.TrustError(f"{image} is not in the registry")
    report = trust.verify_release(reg, settings, ref.repo, digest)
    for line in trust.provenance_lines(report):
        echo(line)
    echo(f"ok: verified {reg.host}/{ref.repo}@{digest} (key {report['signed_by']})")
    reply(report)


def _verify_rebuild(target: str, file: Path, kinds, engine: str | None, docker: str | None, record: bool,
                    layers: tuple = ()) -> None:
    from builder.plan.layout import release_repo
    from builder.ship import reproduce
    from builder.ship.registry import Ref, Registry
    if record and layers:
        raise SpecError("--record stores the rebuild of a whole image; with --layer only part of it was rebuilt",
                        hint="drop --layer to record, or --record to rebuild one layer")
    spec = load_spec(file, kinds=kinds or None)
    chosen = select(spec, [target], False) if target.startswith("stack=") else list(spec.stacks.values())
    prepared = prepare(spec, chosen, bases="all")
    report = reproduce.rebuild(prepared, target, say=lambda line: echo(line), engine_kind=engine, docker=docker,
                               layers=layers)
    total, same = len(report.layers), report.identical
    timed = sum(1 for v in report.layers if v.time_only)
    echo(f"{'ok' if same == total else 'differs'}: {same} of {total} layer(s) rebuilt to identical bytes on "
         f"{report.engine}" + (f"; {timed} differ in file times alone, which this engine cannot fix" if timed else ""))
    for v in report.layers:
        if not v.identical and not v.time_only:
            echo(f"  drifts: {v.layer} ({v.key[:12]}): " + "; ".join(f"{n} x {c}" for c, n in list(v.causes.items())[:3]))
    if record:
        reg = Registry(spec.site.registry)
        repo = (release_repo(spec.site.namespace, report.stack) if target.startswith("stack=")
                else Ref.parse(target).repo)
        echo(f"recorded: {reproduce.record(reg, report, repo)}")
    reply(report.to_json())
    if same != total:
        raise typer.Exit(1)


@app.command()
def export(target: str = typer.Argument(..., help="stack=NAME (its released image) or an image reference by digest."),
           fmt: str = typer.Option("squashfs", "--format", help="squashfs: an Enroot / pyxis image."),
           out: Path = typer.Option(..., "--out", "-o", help="The file to write (FILE.json beside it: its record)."),
           platform: Optional[str] = typer.Option(None, "--platform", help="Of a release of several platforms, the "
                                                  "one to export (default: this machine's, the node's)."),
           partition: Optional[str] = typer.Option(None, "--partition", help="A site partition (site.partitions): "
                                                   "its runtime env is laid over the image's in the file's "
                                                   "/etc/environment, for those nodes."),
           file: Path = FileOpt, kinds: Optional[List[Path]] = KindsOpt, as_json: bool = JsonOpt) -> None:
    """Export a released image for a cluster: the same digest (and partition) always gives the same bytes."""
    from builder import export as exporter
    from builder import nodecheck
    json_mode("export", as_json)
    if fmt != "squashfs":
        raise SpecError(f"--format {fmt!r} is not a format imgbuild exports", hint="formats: squashfs")
    if platform is not None and platform not in PLATFORMS:
        raise SpecError(f"--platform {platform!r}: not one imgbuild builds", hint="platforms: " + ", ".join(PLATFORMS))
    chosen = None
    if partition is not None:
        site = load_spec(file, kinds=kinds or None).site
        chosen = site.partition(partition)
        if chosen is None:
            known = ", ".join(p.name for p in site.partitions)
            raise SpecError(f"--partition {partition!r}: not a partition of site.partitions",
                            hint=f"partitions: {known}" if known else "declare it in stacks.yaml's site.partitions")
    if target.startswith("stack="):
        spec = load_spec(file, kinds=kinds or None)
        image = nodecheck.released_image(spec, select(spec, [target], False)[0])
        provenance = _provenance(spec, image)
    else:
        image, provenance = target, None
    record = exporter.squashfs(image, out, say=lambda line: echo(line), platform=platform, provenance=provenance,
                               partition=chosen)
    echo(f"ok: {out} ({record['size'] / 1e9:.2f} GB, {record['sha256'][:19]}) from {image} in {record['seconds']} s")
    reply({"out": str(out), "image": image, "record": record})


@app.command()
def probe(target: str = typer.Argument(..., help="base=NAME, or layer=NAME (its image in the registry)"),
          file: Path = FileOpt, kinds: Optional[List[Path]] = KindsOpt,
          docker: Optional[str] = typer.Option(None, "--docker", help="The Docker CLI to use (default: detected)."),
          as_json: bool = JsonOpt) -> None:
    """Run a base image, or a layer's built image, and measure torch, CUDA, cuDNN, NCCL, Python, TE, Apex,
    numpy and pip's constraints."""
    from builder.ship.bases import resolve as resolve_bases
    from builder.ship.engines import choose
    from builder.rules.facts import resolve
    from builder.ship.lock import layer_image, stack_of
    from builder.ship.measure import probe as run_probe
    json_mode("probe", as_json)
    spec = load_spec(file, kinds=kinds or None)
    key, _, name = target.partition("=")
    if key == "layer" and name in spec.layers:
        stack = stack_of(spec, name)
        ref, digest = layer_image(spec, stack, name, resolve_bases(spec, [stack.name]).require()[stack.base.name])
        ref, where = f"{ref.rsplit(':', 1)[0]}@{digest}", f"{ref} ({digest[:19]}), as built in stack {stack.name}"
        names = [d.name for d in stack.chain]
        above = names[names.index(name) + 1] if names.index(name) + 1 < len(names) else None
        # What stacks.yaml and the catalog say of the image up to this layer, beside each measurement.
        known = {n: [f] for n, f in resolve(spec, stack, lock=None, below=above).facts.items()}
    elif key == "base" and name in spec.bases:
        base = spec.bases[name]
        ref = where = base.ref(spec.site) + (f"@{base.digest}" if base.digest else "")
        users = [s for s in spec.stacks.values() if s.base.name == name]
        known = resolve(spec, users[0], lock=None).options if users else {}
    else:
        raise SpecError(f"cannot read {target!r}: name a base as base=NAME or a layer as layer=NAME",
                        hint="bases: " + ", ".join(spec.bases))
    measured = run_probe(choose(None, spec.site.engine, docker), ref, spec.kinds.values())
    echo(f"{name}: {where}")
    for fact, value in measured.items():
        other = "; ".join(f"{f.origin} {f.value}" for f in known.get(fact, []))
        echo(f"  {fact}: {value if value is not None else 'not installed'}" + (f"   ({other})" if other else ""))
    if "python" not in measured:
        echo("  (no Python in the image: Python, torch and the rest are unknown, not absent)")
    reply({"target": target, "image": where, "measured": measured,
           "known": {fact: [f"{f.origin} {f.value}" for f in facts] for fact, facts in known.items()}})


def _unlocked_layers(spec, said: list[str], stacks: list) -> list[str]:
    """`lock --check stack=NAME`'s look at the plan: a layer of those stacks that installs with pip and has no
    entry for its chain is what `build --require-locked` (CI's node jobs) refuses (IB096), so the check that
    runs first says it too (CI's lock job names the pipeline's stacks). A layer already said to be stale is not
    said twice. Without stacks named, only the entries the file holds are judged."""
    from builder.prepared import prepare
    from builder.rules.review import unpinned
    if not stacks:
        return []
    prepared = prepare(spec, stacks)
    named = {line.split(":", 1)[0] for line in said}
    return [f"python.{f.key.split('.', 1)[1]}: {f.message}; {f.fix}"
            for f in unpinned(spec, prepared.plan, list(prepared.stacks), "error")
            if f"python.{f.key.split('.', 1)[1]}" not in named]


def _rebuilt_bases(spec, docker: str | None) -> list[str]:
    """`lock --check`'s look at the site registry: a locked base whose digest it no longer holds was made
    again, and the lock holds only where the image's environment is the one locked (measured here). Where the
    registry or the engine cannot be asked, that is said, and the file alone is judged."""
    from builder.ship.bases import resolve as resolve_bases
    from builder.ship.measure import rebuilt_bases
    if spec.lock is None or not spec.lock.bases:
        return []
    found = resolve_bases(spec, lookup="site")
    if not found.rebuilt:
        return []
    try:
        from builder.ship.engines import choose
        return rebuilt_bases(spec, found, choose(None, spec.site.engine, docker), lambda line: echo(line))
    except ImgbuildError as exc:
        return [f"bases.{name}: made again (its locked digest is gone from the registry), and its environment "
                f"cannot be measured here: {exc.message}" for name in sorted(found.rebuilt)]


@app.command(name="lock")
def lock_cmd(targets: Optional[List[str]] = typer.Argument(
                 None, help="base=NAME, layer=NAME, python=LAYER or stack=NAME (repeatable; default every base). "
                            "stack=NAME locks each pip layer of the stack from the bottom up, building the "
                            "layers beneath first."),
             file: Path = FileOpt, kinds: Optional[List[Path]] = KindsOpt,
             check: bool = typer.Option(False, "--check", help="Change nothing; exit 1 if an entry of the lock "
                                        "file is stale or missing for the stacks file; with stack=NAME, also for every pip layer of those "
                                        "stacks (what --require-locked builds need: CI's lock job runs this)."),
             upgrade: Optional[List[str]] = typer.Option(None, "--upgrade", metavar="NAME", help="Re-resolve this "
                                                         "distribution (repeatable), every other one of its layer held "
                                                         "at its locked version; a layer name re-resolves the git refs "
                                                         "of its sources."),
             docker: Optional[str] = typer.Option(None, "--docker"), as_json: bool = JsonOpt) -> None:
    """Resolve each base's digest and measure it, measure the built image of each named layer (a layer that
    makes a base of its own: CUDA and torch from PyPI), resolve with pip what each python=LAYER installs,
    every distribution with its sha256, and the commit of every git ref stacks.yaml names; write
    stacks.lock.yaml beside the stacks file. stacks.yaml may state intent (a range, a tag, a branch);
    the lock holds the truth, and nothing is built from intent."""
    from builder.ship.engines import choose
    from builder.ship.lock import check_upgrade, lock as run_lock, lock_stack
    from builder.load.intent import Intents, lock_path
    from packaging.utils import canonicalize_name
    json_mode("lock", as_json)
    lock_file = lock_path(file)
    if check:
        intents = Intents(accept=True, lock_file=lock_file.name, pinned_by_lock=True)
        spec = load_spec(file, kinds=kinds or None, intents=intents)
        refs, digests = intents.refs, intents.digests
        from builder.plan.stale import stale_entries
        stale = (stale_entries(spec)
                 + [f"sources: {repo} at {ref!r} has no commit (imgbuild lock resolves it)"
                    for repo, ref in sorted(intents.used - set(refs))]
                 + [f"sources: {repo} at {ref!r}: no layer names it any more (imgbuild lock drops it)"
                    for repo, ref in sorted(set(refs) - intents.used)]
                 + [f"downloads: {url} has no sha256 (imgbuild lock fetches it)"
                    for url in sorted(intents.used_urls - set(digests))]
                 + [f"downloads: {url}: no layer names it without a sha256 any more (imgbuild lock drops it)"
                    for url in sorted(set(digests) - intents.used_urls)])
        chosen = []
        for item in targets or ():
            key, _, name = item.partition("=")
            if key != "stack" or name not in spec.stacks:
                raise SpecError(f"cannot read {item!r} with --check: name the stacks whose pip layers must all be "
                                "locked as stack=NAME", hint="stacks: " + ", ".join(spec.stacks))
            chosen.append(spec.stacks[name])
        stale += _unlocked_layers(spec, stale, chosen) + _rebuilt_bases(spec, docker)
        for line in stale:
            echo(f"stale: {line}")
        if stale:
            reply({"stale": stale, "error": {"kind": "stale-lock", "reason": f"{len(stale)} stale entr"
                                             f"{'y' if len(stale) == 1 else 'ies'}", "file": spec.file}},
                  ok=False, code=1)
            raise typer.Exit(1)
        echo(f"ok: {lock_file} is current for {spec.file}")
        reply({"stale": []})
        return
    from builder.ship.sources import ls_remote
    from builder.ship.downloads import digest_of
    from builder.ship.hostconf import HostConf
    names = {canonicalize_name(n) for n in upgrade or ()}
    ca_bundle = HostConf.from_env().ca_bundle
    fetch = lambda url: digest_of(url, ca_bundle)   # noqa: E731
    intents = Intents(accept=True, resolve=ls_remote, fetch=fetch, lock_file=lock_file.name, pinned_by_lock=True)
    spec = load_spec(file, kinds=kinds or None, intents=intents)
    moved = {n for n in upgrade or () if n in spec.layers}   # layers whose git refs and downloads are resolved again
    if moved:
        again = {key for name in moved for _, value in spec.layers[name].params
                 if getattr(value, "ref", None) for key in [(value.repo, value.ref)]}
        urls = {d.url for name in moved for _, value in spec.layers[name].params if isinstance(value, tuple)
                for d in value if hasattr(d, "sha256") and hasattr(d, "url")}
        intents = Intents(accept=True, refs={k: v for k, v in intents.refs.items() if k not in again}, resolve=ls_remote,
                          stamps={k: v for k, v in intents.stamps.items() if k not in again}, lock_file=lock_file.name,
                          digests={u: v for u, v in intents.digests.items() if u not in urls},
                          digest_stamps={u: v for u, v in intents.digest_stamps.items() if u not in urls}, fetch=fetch)
        spec = load_spec(file, kinds=kinds or None, intents=intents, lock=spec.lock)   # the lock as read above
    bases, layers, python, stacks = [], [], [], []
    for item in targets or [f"base={b}" for b in spec.bases]:
        key, _, name = item.partition("=")
        if key == "base" and name in spec.bases:
            bases.append(name)
        elif key == "layer" and name in spec.layers:
            layers.append(name)
        elif key == "python" and name in spec.layers:
            python.append(name)
        elif key == "stack" and name in spec.stacks:
            stacks.append(spec.stacks[name])
        else:
            raise SpecError(f"cannot read {item!r}: name bases as base=NAME, layers as layer=NAME or python=NAME, "
                            "stacks as stack=NAME",
                            hint="bases: " + ", ".join(spec.bases) + "; layers: " + ", ".join(spec.layers)
                                 + "; stacks: " + ", ".join(spec.stacks))
    if names - {canonicalize_name(m) for m in moved} and not (python or stacks):
        raise SpecError("--upgrade NAME re-resolves a distribution of the layers locked in this run: name them "
                        "(python=LAYER or stack=NAME)")
    check_upgrade(spec, names - {canonicalize_name(m) for m in moved}, python, stacks)
    engine = choose(None, spec.site.engine, docker)
    path, failures, current = (run_lock(spec, bases, engine, say=lambda line: echo(line), layers=layers,
                                        python=python, upgrade=frozenset(names), intents=intents)
                               if bases or layers or python or not stacks else (None, [], spec.lock))
    for stack in stacks:
        if failures:
            break
        path, failures, current = lock_stack(prepare(spec, [stack]), engine, say=lambda line: echo(line),
                                             upgrade=frozenset(names), intents=intents, current=current)
    total = len(bases) + len(layers) + len(python) + len(stacks)
    if failures:
        raise failures[0].__class__(f"{len(failures)} of {total} target(s) not locked (see above); "
                                    f"{path} holds the others", hint=failures[0].hint)
    refs_done = len(intents.used)
    echo(f"ok: {path}: " + ", ".join(f"{n} {what}" for n, what in ((len(bases), "base(s)"), (len(layers), "layer(s)"),
                                                                   (len(python), "Python set(s)"),
                                                                   (len(stacks), "stack(s)"),
                                                                   (refs_done, "git ref(s)")) if n)
         + " locked" + (" (each layer's base with it)" if layers or python else ""))
    reply({"path": str(path), "bases": bases, "layers": layers, "python": python, "stacks": [s.name for s in stacks],
           "sources": [{"repo": r, "ref": f, "commit": intents.found.get((r, f)) or intents.refs.get((r, f))}
                       for r, f in sorted(intents.used)]})


def _polish() -> None:
    """Every verb's help ends with the exit codes (one table, here), and names each value by what it is
    (PATH, N, TEXT) rather than by its Python type."""
    import inspect
    for group in (app, ci_app):
        for command in group.registered_commands:
            command.epilog = command.epilog or EXIT_CODES
            for param in inspect.signature(command.callback).parameters.values():
                info, kind = param.default, str(param.annotation)
                if not isinstance(info, typer.models.ParameterInfo) or info.metavar or "bool" in kind:
                    continue
                if isinstance(info, typer.models.ArgumentInfo):
                    info.metavar = param.name.upper()
                    continue
                info.metavar = ("PATH" if "Path" in kind else "N" if "int" in kind else "SECONDS" if "float" in kind
                                else "TEXT")


# typer writes an argument's Python type beside its name (`[stack=NAME]... <list[str]>`): the name says it.
typer.core.TyperArgument.display_type_rich = lambda self, ctx: None


def refusal(exc: ImgbuildError) -> dict:
    """A refusal in the JSON envelope: "error" (the first, or only, one), "errors" (every one: a stacks file
    reports all its independent mistakes at once), the exit code, and a failed build's report."""
    def one(err: ImgbuildError) -> dict:
        if callable(getattr(err, "to_json", None)):
            return err.to_json()
        return {"kind": err.label, "message": err.message, "hint": err.hint}
    errors = [one(e) for e in getattr(exc, "errors", None) or [exc]]
    data = {"error": errors[0], "errors": errors, "count": getattr(exc, "total", len(errors)),
            "exit_code": exc.exit_code}
    report = getattr(exc, "report", None)
    if report is not None and getattr(report, "run_dir", None):
        data["run_dir"] = str(report.run_dir)
    return data


def main() -> None:
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    # --debug anywhere on the line, not only before the verb.
    if "--debug" in sys.argv[2:]:
        sys.argv = [sys.argv[0], "--debug"] + [a for a in sys.argv[1:] if a != "--debug"]
    _polish()
    try:
        auth_config_from_env()   # CI's $DOCKER_AUTH_CONFIG, for the registry client and the docker CLI alike
        code = app(standalone_mode=False)
    except ImgbuildError as exc:
        if STATE["debug"]:
            echo(traceback.format_exc().rstrip("\n"), err=True)
        if STATE.get("json"):
            reply(refusal(exc), False, exc.exit_code)
        echo(exc.render(), err=True)
        sys.exit(exc.exit_code)
    except (Interrupted, KeyboardInterrupt):
        echo("interrupted: the running step was stopped (release tags move only at the very end of a build)", err=True)
        sys.exit(130)
    except (typer.Exit, SystemExit) as exc:
        code = getattr(exc, "exit_code", getattr(exc, "code", 0))
        sys.exit(code or 0)
    except typer.Abort:
        sys.exit(1)
    except Exception as exc:  # usage errors (click's, vendored by typer) and anything unexpected
        if callable(getattr(exc, "show", None)) and isinstance(getattr(exc, "exit_code", None), int):
            exc.show()
            sys.exit(exc.exit_code)
        if STATE["debug"]:
            raise
        echo(f"internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback)", err=True)
        sys.exit(70)
    if isinstance(code, int) and code:   # with standalone_mode=False typer returns an Exit's code, not raise it
        sys.exit(code)


if __name__ == "__main__":
    main()
