"""Everything imgbuild judges before building, assembled in one place: preflight (IB0xx), the spec's
own lint and the lint of every rendered Dockerfile (IB1xx), all on the same facts (the lock file's
measurements when there is one). `check`, `lint FILE.yaml` and the build gate all call `review`, so a
build refuses exactly what `check` refuses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from builder.errors import PreflightError
from builder.rules.findings import Finding, errors, ordered, strict as make_strict, summary
from builder.rules.lint import lint_rendered, lint_spec
from builder.build.lockfile import Lock, load_lock
from builder.build.plan import make_plan
from builder.rules.preflight import preflight
from builder.load.spec import Spec


@dataclass(frozen=True)
class Review:
    findings: list
    lock: Lock | None
    nodes: int                # distinct layer nodes rendered and linted

    @property
    def facts(self) -> str:
        return f"measured facts from {self.lock.file}" if self.lock else "no lock file: facts declared or from the catalog"

    @property
    def summary(self) -> str:
        return summary(self.findings)

    def errors(self) -> list[Finding]:
        return errors(self.findings)


def review(spec: Spec, stacks: list[str], strict: bool = False) -> Review:
    lock = load_lock(spec.file)
    # Rendered Dockerfiles do not depend on base digests (the parent is a build argument), so the plan
    # here needs no registry.
    plan = make_plan(spec, stacks)
    linted = lint_spec(spec, stacks, lock) + lint_rendered(spec, plan, lock)
    found = ordered(preflight(spec, stacks, lock, strict) + (make_strict(linted) if strict else linted))
    return Review(found, lock, len(plan.nodes))


def gate(spec: Spec, stacks: list[str], say: Callable[[str], None], strict: bool = False) -> Review:
    """Before a build or a release: the whole review, printed; any error refuses."""
    result = review(spec, stacks, strict)
    for f in result.findings:
        say(f.render())
    bad = result.errors()
    if bad:
        names = sorted({f.stack for f in bad if f.stack})
        stacks_ = f" (stacks: {', '.join(names)})" if names else ""
        raise PreflightError(f"{len(bad)} error(s) found before building{stacks_}; nothing was built",
                             hint="the findings above name the key, the rule and the fact (imgbuild check shows the same)")
    return result


__all__ = ["review", "gate", "Review"]
