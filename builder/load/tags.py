"""Release tag templates: `{field}` or `{field:FORMAT}` in a tag of stacks.yaml, filled at release.

Fields are the stack's name, the release date, the short commit of the stack's project, and the versions
measured in the image (builder.load.versions). The date takes a strftime format of the directives a tag
can hold (`{date:%Y%m%d}`; `{date}` is `%Y.%m.%d`); no other field takes a format. A tag says what it
holds only where its fields do: two commits of a project that declare one megatron-core version give
one `-mcore0.16.0` tag, and `{project_commit}` tells them apart."""

from __future__ import annotations

import datetime as dt
import re

# {name} or {name:format}; a brace that opens no field is a character a tag cannot hold (refused as such).
FIELD = re.compile(r"\{([^{}:]*)(?::([^{}]*))?\}")
DATE_FORMAT = "%Y.%m.%d"
# What a date format may use: each expands to digits only, so every date gives a valid tag.
DATE_DIRECTIVES = frozenset("YymdHMSjUW")
SHORT_COMMIT = 12   # hex digits of {project_commit}: git's default abbreviation grows past 7 in big repositories
# --date as given on the command line: each read as a UTC day.
DATE_INPUTS = ("%Y.%m.%d", "%Y-%m-%d", "%Y%m%d")


def fields(template: str) -> list[tuple[str, str | None]]:
    """[(field, format or None)] of a tag template, in order."""
    return [(m.group(1), m.group(2)) for m in FIELD.finditer(template)]


def format_problem(name: str, fmt: str | None) -> str | None:
    """Why a field's format cannot be used (None where it can): only the date takes one, of DATE_DIRECTIVES
    and the characters of a tag."""
    if fmt is None:
        return None
    if name != "date":
        return f"{{{name}:{fmt}}}: only {{date}} takes a format"
    if not fmt:
        return "{date:}: an empty date format (write {date} for " + DATE_FORMAT + ")"
    bad = sorted({d for d in re.findall(r"%(.)", fmt) if d not in DATE_DIRECTIVES})
    if bad:
        return (f"{{date:{fmt}}}: " + ", ".join("%" + d for d in bad) + " cannot be used in a tag; use "
                + " ".join("%" + d for d in sorted(DATE_DIRECTIVES)))
    if not re.fullmatch(r"(?:%[A-Za-z]|[A-Za-z0-9_.-])+", fmt):
        return f"{{date:{fmt}}}: a tag holds only letters, digits, '_', '.' and '-' besides the directives"
    return None


def parse_date(text: str) -> dt.date:
    """The release date given as --date: YYYY.MM.DD, YYYY-MM-DD or YYYYMMDD. ValueError naming the forms."""
    for form in DATE_INPUTS:
        try:
            return dt.datetime.strptime(text.strip(), form).date()
        except ValueError:
            continue
    raise ValueError(f"--date {text!r} is not a date: give YYYY.MM.DD, YYYY-MM-DD or YYYYMMDD")


def today() -> dt.date:
    return dt.datetime.now(dt.timezone.utc).date()


def expand(template: str, values: dict, date: dt.date) -> tuple[str, list[str]]:
    """The template with each field filled: (tag, fields no value was given for, each left as written)."""
    missing: list[str] = []

    def fill(m: re.Match) -> str:
        name, fmt = m.group(1), m.group(2)
        if name == "date":
            return date.strftime(fmt or DATE_FORMAT)
        if name in values and values[name] is not None:
            return str(values[name])
        missing.append(name)
        return m.group(0)
    return FIELD.sub(fill, template), missing


def project_commit(stack) -> str | None:
    """{project_commit}: the short commit of the stack's one project's source (None where it has no project
    with a git source, or more than one: the spec loader refuses such a tag)."""
    pins = [v for layer in stack.chain if layer.section == "projects" for _, v in layer.params
            if getattr(v, "commit", None)]
    return pins[0].commit[:SHORT_COMMIT] if len(pins) == 1 else None


def spec_values(stack) -> dict:
    """What the stacks file alone fills in: the stack's name and its project's commit."""
    return {"stack": stack.name, "project_commit": project_commit(stack)}


__all__ = ["DATE_FORMAT", "FIELD", "SHORT_COMMIT", "expand", "fields", "format_problem", "parse_date",
           "project_commit", "spec_values", "today"]
