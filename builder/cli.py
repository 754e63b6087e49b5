"""The imgbuild command line: thin commands over the Python API; errors become messages here only."""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import List, Optional

import typer

from . import __version__
from .errors import ImgbuildError, SpecError
from .plan import KEY_LEN, image_ref, make_plan
from .spec import Spec, load_spec

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_show_locals=False,
                  help="Declared, pinned, validated GPU training images from one stacks.yaml.")
STATE = {"debug": False}

FileOpt = typer.Option(Path(os.environ.get("IMGBUILD_STACKS", "stacks.yaml")), "--file", "-f",
                       help="The stacks file (default: ./stacks.yaml, or $IMGBUILD_STACKS).")
AllOpt = typer.Option(False, "--all", help="Every stack in the file.")
Selectors = typer.Argument(None, help="stack=NAME (repeatable).", show_default=False)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"imgbuild {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    STATE["debug"] = debug


def select(spec: Spec, selectors: Optional[List[str]], all_: bool) -> list[str]:
    """Stack names from `stack=NAME` selectors or --all, in the order given (file order for --all)."""
    names: list[str] = []
    for item in selectors or []:
        key, sep, value = item.partition("=")
        if not sep or key != "stack" or not value:
            raise SpecError(f"cannot read {item!r}: name stacks as stack=NAME",
                            hint="stacks: " + ", ".join(spec.stacks))
        spec.stack(value)
        if value not in names:
            names.append(value)
    if all_:
        names = list(spec.stacks)
    if not names:
        raise SpecError("no stack selected: give stack=NAME or --all", hint="stacks: " + ", ".join(spec.stacks))
    return names


@app.command()
def check(selectors: Optional[List[str]] = Selectors, file: Path = FileOpt, all_: bool = AllOpt) -> None:
    """Load and validate stacks.yaml; plan and render the selected stacks (no Docker needed)."""
    spec = load_spec(file)
    names = select(spec, selectors, all_ or not selectors)
    plan = make_plan(spec, names)
    typer.echo(f"ok: {file}: {len(names)} stack(s), {len(plan.nodes)} layer node(s) rendered")


@app.command()
def render(selectors: Optional[List[str]] = Selectors, file: Path = FileOpt, all_: bool = AllOpt,
           out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write STACK/NN-LAYER.Dockerfile files here.")) -> None:
    """Print (or write) the rendered Dockerfile of every layer of the selected stacks."""
    spec = load_spec(file)
    names = select(spec, selectors, all_)
    plan = make_plan(spec, names)
    for name in names:
        for i, node in enumerate(plan.chain(name)):
            if out:
                path = out / name / f"{i:02d}-{node.name}.Dockerfile"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(node.dockerfile)
                typer.echo(str(path))
            else:
                typer.echo(f"# ==== {name} / {i:02d} {node.name} (key {node.short})")
                typer.echo(node.dockerfile)


@app.command()
def plan(selectors: Optional[List[str]] = Selectors, file: Path = FileOpt, all_: bool = AllOpt,
         as_json: bool = typer.Option(False, "--json", help="The DAG as JSON (a CI matrix)."),
         explain: bool = typer.Option(False, "--explain", "-x", help="Show the inputs that make each key.")) -> None:
    """Show the layer DAG: one node per distinct layer image, its content key and who uses it."""
    spec = load_spec(file)
    names = select(spec, selectors, all_ or not selectors)
    result = make_plan(spec, names)
    if as_json:
        typer.echo(json.dumps(result.to_json(), indent=2, sort_keys=True))
        return
    if result.unresolved:
        typer.echo(f"note: digest not yet known for base(s) {', '.join(sorted(result.unresolved))}: "
                   "their keys are provisional until `imgbuild build` resolves them from the registry")
    for name in names:
        stack = spec.stack(name)
        typer.echo(f"{name}  (base {stack.base.ref(spec.site)}; gpus {','.join(g.name for g in stack.gpus) or 'none'})")
        for node in result.chain(name):
            shared = [s for s in result.users[node.key] if s != name]
            typer.echo(f"  {node.short}  {node.name:<22} {node.layer.kind.name:<18}"
                       + (f" shared with {', '.join(shared)}" if shared else ""))
            if explain:
                typer.echo(f"      image {image_ref(spec, node)}")
                for key, value in sorted(node.inputs.items()):
                    if value:
                        typer.echo(f"      {key}: {json.dumps(value, sort_keys=True)}")
    typer.echo(f"{len(result.nodes)} distinct layer image(s) for {len(names)} stack(s); keys are "
               f"sha256 over the inputs shown with --explain (first {KEY_LEN} hex digits in tags)")


@app.command()
def build(selectors: Optional[List[str]] = Selectors, file: Path = FileOpt, all_: bool = AllOpt,
          docker: Optional[str] = typer.Option(None, "--docker", help="The Docker CLI to use (default: detected)."),
          date: Optional[str] = typer.Option(None, "--date", help="The {date} of release tags (default: today, UTC)."),
          as_json: bool = typer.Option(False, "--json", help="Print the report as JSON at the end.")) -> None:
    """Build what the registry lacks, validate every image, then move the release tags."""
    from .build import build as run_build
    spec = load_spec(file)
    names = select(spec, selectors, all_)
    report = run_build(spec, names, say=lambda line: typer.echo(line), docker=docker, date=date)
    built = sum(1 for r in report.nodes.values() if r.action == "build")
    typer.echo(f"ok: {len(names)} stack(s) released; {built} layer image(s) built, "
               f"{len(report.nodes) - built} reused; report {report.run_dir}/report.json")
    if as_json:
        typer.echo(Path(report.run_dir, "report.json").read_text())


@app.command()
def validate(targets: Optional[List[str]] = typer.Argument(None, help="stack=NAME or an image reference."),
             file: Path = FileOpt, docker: Optional[str] = typer.Option(None, "--docker")) -> None:
    """Re-run the in-image checks of existing images and record the results beside them."""
    from .build import validate as run_validate
    from .errors import ValidationFailed
    spec = load_spec(file)
    stacks = [t for t in targets or [] if t.startswith("stack=")]
    images = [t for t in targets or [] if not t.startswith("stack=")]
    names = select(spec, stacks, False) if stacks or not images else []
    if not run_validate(spec, names, images, say=lambda line: typer.echo(line), docker=docker):
        raise ValidationFailed("checks failed (see above); nothing was tagged")
    typer.echo("ok: every check passed or was skipped with its reason")


def _terminate(signum, frame) -> None:
    # SIGTERM (CI cancelling a job) unwinds like Ctrl-C: a running build is stopped, nothing is tagged.
    raise KeyboardInterrupt


def main() -> None:
    signal.signal(signal.SIGTERM, _terminate)
    try:
        app(standalone_mode=False)
    except ImgbuildError as exc:
        if STATE["debug"]:
            traceback.print_exc()
        typer.echo(exc.render(), err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        typer.echo("interrupted: the running step was stopped (release tags move only at the very end of a build)", err=True)
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
        typer.echo(f"internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback)", err=True)
        sys.exit(70)


if __name__ == "__main__":
    main()
