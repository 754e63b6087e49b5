"""One redaction of credentials for everything imgbuild prints: errors, logs, render, plan and diff
(table, JSON, Markdown). A URL's user information becomes *** (`https://***@host/...`), and so does a
bare `user:password@host`. stacks.yaml refuses credentials in URLs at load (they come from the netrc
secret, $IMGBUILD_NETRC); this is the second line, for text that did not come through the loader
(an old revision in a diff, a message quoting a refused value, a tool's error output).
"""

from __future__ import annotations

import re

# scheme://USERINFO@ : the user information of a URL, up to the first / (and never across a space or quote)
# Every repetition is bounded, so that each start position scans a bounded stretch: one pass over the text,
# linear in its length however it is built (a 1 MB label of `a.a.a...` or `x!x!x...:` took quadratic time).
_URL_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]{0,31}://)([^/\s@]{1,1024})@")
# user:password@host with no scheme, starting at a word boundary; not NAME:TAG@sha256:... (an image digest)
_BARE_USERINFO = re.compile(r"(?<![\w.+/:@%-])[^\s/@:'\"<>`]{1,512}:[^\s/@'\"<>`]{0,1024}@(?!sha256:|sha384:|sha512:)")
MASK = "***"


def _url(match: re.Match) -> str:
    scheme, userinfo = match.group(1), match.group(2)
    if scheme.lower().rstrip(":/").endswith("ssh") and ":" not in userinfo:
        return match.group(0)   # ssh://git@host: a login name, not a secret (keys come from the agent)
    return f"{scheme}{MASK}@"


def redact(text: str) -> str:
    """text with every credential in a URL replaced by ***; anything else unchanged."""
    if "@" not in text:
        return text
    return _BARE_USERINFO.sub(MASK + "@", _URL_USERINFO.sub(_url, text))


def has_credentials(text: str) -> bool:
    """Whether text holds a literal credential in a URL: user information that redact() would hide, other
    than a variable reference ($TOKEN, ${TOKEN}: expanded where it runs, never written literally)."""
    if "@" not in text:
        return False
    literal = [m.group(2) for m in _URL_USERINFO.finditer(text) if _url(m) != m.group(0)]
    literal += [m.group(0) for m in _BARE_USERINFO.finditer(_URL_USERINFO.sub(_url, text)) if MASK not in m.group(0)]
    return any("$" not in part for part in literal)


__all__ = ["redact", "has_credentials", "MASK"]
