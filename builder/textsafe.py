"""Text from a registry or an image is data, never terminal control or markup.

A label, an annotation, a version, a tag or a registry's error message can hold escape sequences (set the
window title, write the clipboard, clear the screen), a carriage return or newline that forges a report
line, bidi overrides that reorder what a reviewer reads, or HTML and Markdown that a merge request page
would render. Every such string is passed through `inert` (one line of text) or `markdown` before it is
printed; the CLI's one output function passes everything it prints through `terminal` as a last line.
Each runs in linear time (one regular-expression pass).
"""

from __future__ import annotations

import re

# C0 controls, DEL, C1 controls, and the Unicode format characters that reorder or hide text.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")
_CONTROL_KEEP_LINES = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2064"
                                 r"\u2066-\u2069\ufeff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\x1b": "\\e"}
# What Markdown or HTML would read as markup inside a line of a table cell, a heading or a paragraph:
# emphasis, code, links and images (their brackets), table cells, strikethrough, and every HTML tag or
# entity (`<`, `&`). A `>` or `(` alone opens nothing there.
_MARKUP = re.compile(r"[\\`*_\[\]|~<&]")


def _escape(match: re.Match) -> str:
    c = match.group(0)
    if c in _NAMED:
        return _NAMED[c]
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def inert(text: str) -> str:
    """One line of untrusted text, every control and format character written out (`\\e`, `\\n`, `\\x07`)."""
    return _CONTROL.sub(_escape, str(text))


def terminal(text: str) -> str:
    """Output for a terminal or a log: newlines and tabs kept, every other control character written out."""
    return _CONTROL_KEEP_LINES.sub(_escape, str(text))


def markdown(text: str) -> str:
    """Untrusted text for a Markdown (or HTML) page: inert, and every markup character escaped, `<` and `&`
    as entities so that no tag or entity of the text's own survives."""
    def one(m: re.Match) -> str:
        c = m.group(0)
        return {"<": "&lt;", "&": "&amp;"}.get(c, "\\" + c)
    return _MARKUP.sub(one, inert(text))


__all__ = ["inert", "terminal", "markdown"]
