"""One error hierarchy. Each class carries its exit code; the CLI maps them to messages in one place."""

from __future__ import annotations

import difflib
import re

from builder.redact import redact


def did_you_mean(word, choices) -> str:
    """' (did you mean 'NAME'?)' for the choice nearest a misspelt name, or '' where none is near: a match
    ignoring case, '-', '_' and spaces first (H100 for h-100), then difflib's closest at 0.6 or more."""
    if not isinstance(word, (str, int, float)) or isinstance(word, bool):
        return ""
    choices = [str(c) for c in choices]
    fold = {re.sub(r"[-_ ]", "", c.lower()): c for c in choices}
    near = fold.get(re.sub(r"[-_ ]", "", str(word).lower()))
    if near is None:
        found = difflib.get_close_matches(str(word).lower(), list(fold), n=1, cutoff=0.6)
        near = fold[found[0]] if found else None
    return f" (did you mean {near!r}?)" if near is not None and near != str(word) else ""


class ImgbuildError(Exception):
    """Base of every error imgbuild reports to a user (never shown with a traceback unless --debug)."""

    exit_code = 1
    label = "error"

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def render(self) -> str:
        """The message as printed: the one place errors are shown, so the one place they are redacted
        (a URL's credentials become ***, whatever value a message quotes)."""
        text = f"{self.label}: {self.message}"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return redact(text)


# Spec refusals (SpecError) carry a stable rule id per class of refusal, like preflight (IB0xx) and lint
# (IB1xx) findings: (id, what, reasons of that class). A refusal raised without an explicit `rule` gets the
# first class whose pattern its reason matches (the refusals of builder.load.params are ParamErrors turned
# into SpecErrors, so their reasons are what is classified); IB299 is every other refusal.
SPEC_RULES: tuple = (
    # First, and anchored: a reason that starts so is this class whatever value it quotes after (IB203's
    # "needs an" and IB207's "credential" would otherwise match first).
    ("IB211", "a version range (or wildcard) where an exact version is needed", r"^needs an exact version\b"),
    ("IB201", "unknown key or parameter", r"^unknown (?:key|parameter)\b|^an unknown key of"),
    ("IB207", "credentials in stacks.yaml", r"credential|netrc"),
    ("IB206", "bad git URL or pin", r"is not a git URL|40-hex commit|git requirement"),
    ("IB205", "unpinned or invalid requirement", r"is not pinned|not a valid requirement"),
    ("IB203", "missing required key or parameter", r"^missing\b|needs? (?:a|an|one or more) |is required"),
    ("IB204", "unknown reference", r"^unknown (?:base|layer|project|runtime|stack|GPU|platform|tag field)|^no stack named"
                                   r"|^unknown layer kind|names no parameter"),
    ("IB202", "wrong type", r"^expected |, got (?:a|an) "),
    ("IB209", "YAML the strict reader refuses", r"YAML|alias|nested deeper|MiB|not a regular file|linked from"),
    ("IB210", "an impossible stack structure", r"cycle|appears twice|already used|can only be first|first layer "
                                              r"must|adopts|no target GPU|which no layer beneath it|cannot be declared"),
    ("IB208", "a value outside its grammar", r"is not (?:a|an|one of|valid)|control character|listed twice|"
                                           r"can never be|characters a Docker tag"),
)
SPEC_OTHER = ("IB299", "another refusal of stacks.yaml or a layer kind")


def spec_rule(reason: str) -> str:
    """The rule id of a spec refusal, by the class its reason belongs to (SPEC_RULES)."""
    for rule, _, pattern in SPEC_RULES:
        if re.search(pattern, reason):
            return rule
    return SPEC_OTHER[0]


class SpecError(ImgbuildError):
    """stacks.yaml or a layer kind is malformed: unknown key, wrong type, bad reference, cycle, ...
    Printed as `spec error[IB2xx]: file:line: key: reason`; `rule` is given where it is raised or
    classified from the reason (spec_rule)."""

    exit_code = 2
    label = "spec error"

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 key: str | None = None, hint: str | None = None, rule: str | None = None):
        where = ""
        if file:
            where = file + (f":{line}" if line else "")
        if key:
            where = f"{where}: {key}" if where else key
        super().__init__(f"{where}: {message}" if where else message, hint=hint)
        self.file, self.line, self.key, self.reason = file, line, key, message
        self.rule = rule or spec_rule(message)
        self.label = f"spec error[{self.rule}]"

    def to_json(self) -> dict:
        return {"rule": self.rule, "file": self.file, "line": self.line, "key": self.key,
                "reason": redact(self.reason), "hint": redact(self.hint) if self.hint else None}


class SpecErrors(SpecError):
    """Several independent refusals of one stacks file, raised together (issue 20): the loader reads on past
    a refusal wherever what follows does not depend on it, so one run names every mistake. Its own fields
    (file, line, key, reason, hint, rule) are the first refusal's, for whatever reads one SpecError; `errors`
    holds each refusal (a SpecError), the first LIMIT of those given, and `total` counts them all: a file
    broken everywhere still gives a report that fits a screen. render() prints each as a SpecError prints,
    then how many there are; `--json` lists `errors` (builder.cli.refusal)."""

    LIMIT = 20

    def __init__(self, refusals: list):
        first = refusals[0]
        super().__init__(first.reason, file=first.file, line=first.line, key=first.key, hint=first.hint,
                         rule=first.rule)
        self.errors = tuple(refusals[:self.LIMIT])
        self.total = len(refusals)
        self.where = f" in {first.file}" if first.file and all(e.file == first.file for e in refusals) else ""

    def render(self) -> str:
        lines = [e.render() for e in self.errors]
        more = self.total - len(self.errors)
        if more:
            lines.append(f"... and {more} more")
        lines.append(f"{self.total} spec errors{self.where}" + (f" (the first {len(self.errors)} shown)" if more else ""))
        return redact("\n".join(lines))


class RenderError(ImgbuildError):
    """A value cannot be written into a Dockerfile safely, or a template is broken."""

    exit_code = 2
    label = "render error"


class PreflightError(ImgbuildError):
    """The stack is impossible (version, driver or arch rules) and must not be built."""

    exit_code = 3
    label = "preflight"


class SourceError(ImgbuildError):
    """A git pin could not be fetched or does not verify."""

    exit_code = 4
    label = "source error"


class EngineError(ImgbuildError):
    """The Docker engine or BuildKit is missing, unusable, or a build failed."""

    exit_code = 5
    label = "engine error"


class RegistryError(ImgbuildError):
    """The registry is unreachable or refused a request."""

    exit_code = 6
    label = "registry error"


class ValidationFailed(ImgbuildError):
    """An image was built but failed its in-image checks; no tag was moved."""

    exit_code = 7
    label = "validation failed"


class DiffError(ImgbuildError):
    """`imgbuild diff` could not compare: CI gates on 0 equal / 1 different, so every failure is 2."""

    exit_code = 2
    label = "diff error"


class Interrupted(BaseException):
    """Ctrl-C, or SIGTERM (CI cancelling a job). A BaseException like KeyboardInterrupt, so that no
    `except ImgbuildError` on the way up takes it for one failed layer and carries on with the next.
    The CLI raises it from its signal handlers instead of KeyboardInterrupt, which typer (run with
    standalone_mode=False) turns into a return value: the process then exited 0 on Ctrl-C."""

    exit_code = 130
