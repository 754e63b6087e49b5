"""Read YAML into plain data while keeping the line of every key, and refuse what YAML would read wrong.

PyYAML silently keeps the last of two equal keys; a site file with two stacks of the same name
must be refused instead, with both lines named. Lines are kept per key path so that every later
error can point at the exact line of the value it is about.

The stacks file is input a user (or an attacker) writes, so reading it is bounded and strict:

- a file over MAX_BYTES, or one that is not a regular file (a FIFO, a device, a directory) or not
  UTF-8, is refused before it is parsed; below the limit reading is linear in the file;
- nesting deeper than MAX_DEPTH, and aliases that would expand to more than MAX_ALIAS_NODES nodes
  (a "billion laughs" bomb) are refused while the event stream is read, before anything is expanded;
- no tag is constructed but the core ones (!!str, !!int, !!float, !!bool, !!null, !!seq, !!map);
- plain (unquoted) scalars are read as YAML 1.2 reads them where YAML 1.1 (PyYAML) would change their
  meaning, or refused with a hint to quote them: `on/off/yes/no/y/n` (booleans to YAML 1.1), numbers
  whose text would not survive (`0.10` is the number 0.1, `012` is 10, `1:30` is 90), dates stay text.

Error messages name the file, line and key path and quote no raw content of the file beyond a key or
a short excerpt of the offending scalar: a stacks file may be a link to a file that holds secrets.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from builder.errors import SpecError

Path_ = tuple  # a key path, e.g.: ("stacks", "h100-megatron", "layers", 2)

MAX_BYTES = 4 * 1024 * 1024   # a stacks file (or kind.yaml) larger than this is refused unread
MAX_DEPTH = 64                # maps and lists nested deeper than this are refused
MAX_ALIAS_NODES = 100_000     # nodes that aliases (*name) may add in all, once expanded
LIMITS_HINT = (f"imgbuild reads YAML files of at most {MAX_BYTES // (1024 * 1024)} MiB, nested at most "
               f"{MAX_DEPTH} deep, whose aliases expand to at most {MAX_ALIAS_NODES:,} nodes")

_CORE = "tag:yaml.org,2002:"
_NULL = {"", "~", "null", "Null", "NULL"}
_BOOL = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_BOOLISH = re.compile(r"(?i:y|n|yes|no|on|off|true|false)\Z")
_INT = re.compile(r"-?(?:0|[1-9][0-9]*)\Z")
_RESOLVER = yaml.resolver.Resolver()
_PARSER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when present: 10x faster


@dataclass(frozen=True)
class Doc:
    file: str
    data: Any
    lines: dict = field(default_factory=dict)

    def line(self, path: Path_) -> int | None:
        """Line of the value at path, or of its nearest parent that has one."""
        path = tuple(path)
        while True:
            if path in self.lines:
                return self.lines[path]
            if not path:
                return None
            path = path[:-1]

    def error(self, path: Path_, reason: str, hint: str | None = None) -> SpecError:
        return SpecError(reason, file=self.file, line=self.line(path), key=dotted(path), hint=hint)


def dotted(path: Path_) -> str:
    out = ""
    for part in path:
        if isinstance(part, str) and not part.isprintable():
            part = repr(part)  # a key holding a newline must not break the message
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _tag(tag: str) -> str:
    return excerpt("!!" + tag[len(_CORE):] if tag.startswith(_CORE) else tag)


def excerpt(text: str, limit: int = 40) -> str:
    """A short, printable excerpt of a scalar for a message (repr-quoted, cut at limit characters)."""
    cut = text[:limit]
    return repr(cut) + ("..." if len(text) > limit else "")


class _Node:
    """A composed map, list or scalar: what an alias refers to. size counts the nodes it holds once
    expanded (itself included), height its nesting depth (1 for a scalar)."""

    __slots__ = ("kind", "line", "value", "size", "height", "done")

    def __init__(self, kind: str, line: int, value: Any):
        self.kind, self.line, self.value = kind, line, value
        self.size, self.height, self.done = 1, 1, kind == "scalar"


def _tab_at(text: str, index: int) -> bool:
    """Whether the character a YAML error points at is a tab where indentation belongs."""
    line_start = text.rfind("\n", 0, index) + 1
    return 0 <= index < len(text) and text[index] == "\t" and not text[line_start:index].strip(" \t-")


class _Reader:
    def __init__(self, file: str):
        self.file = file
        self.anchors: dict[str, _Node] = {}
        self.alias_nodes = 0

    def fail(self, line: int | None, path: tuple, reason: str, hint: str | None = None) -> SpecError:
        key = dotted(path[:12]) + ("..." if len(path) > 12 else "")  # a path 64 deep says nothing more
        return SpecError(reason, file=self.file, line=line, key=key or None, hint=hint)

    # -- scalars ------------------------------------------------------------------------------------

    def scalar(self, event: Any, line: int, path: tuple) -> Any:
        value, tag = event.value, event.tag
        if tag is None and event.style in (None, ""):
            return self.plain(value, line, path)
        if tag is None or tag == "!" or tag == _CORE + "str":
            return value
        if not tag.startswith(_CORE) or tag[len(_CORE):] not in ("int", "float", "bool", "null"):
            raise self.fail(line, path, f"YAML tag {_tag(tag)} is not allowed: imgbuild constructs no "
                            "custom types", hint="remove the tag (only !!str, !!int, !!float, !!bool, !!null, "
                            "!!seq and !!map are read)")
        resolved = self.plain(value, line, path)
        want = {"int": int, "float": float, "bool": bool, "null": type(None)}[tag[len(_CORE):]]
        if want is float and type(resolved) is int:
            return float(resolved)
        if type(resolved) is not want:
            raise self.fail(line, path, f"{excerpt(value)} is not a valid {tag[len(_CORE):]}")
        return resolved

    def plain(self, value: str, line: int, path: tuple) -> Any:
        """An unquoted scalar, read as YAML 1.2 reads it, or refused where YAML 1.1 reads it otherwise."""
        if value in _NULL:
            return None
        if value in _BOOL:
            return _BOOL[value]
        if _BOOLISH.match(value):
            raise self.fail(line, path, f"unquoted {value} is a boolean to YAML 1.1 readers, not the text "
                            f"{value!r}", hint=f'quote it: "{value}" (or write true/false for a boolean)')
        tag = _RESOLVER.resolve(yaml.ScalarNode, value, (True, False))
        if tag == _CORE + "int":
            if len(value) <= 64 and _INT.match(value):
                return int(value)
            raise self.fail(line, path, f"unquoted {excerpt(value)} is read by YAML 1.1 as a number"
                            f"{self._as_number(value)}, not as written",
                            hint=f"quote it: \"{value[:40]}\", or write a plain decimal number")
        if tag == _CORE + "float":
            number = self._number(value)
            if number is not None and repr(number) == value:
                return number
            raise self.fail(line, path, f"unquoted {excerpt(value)} is read by YAML as a number"
                            f"{self._as_number(value)}, not as written",
                            hint=f"quote it: \"{value[:40]}\" (versions and names are text)")
        return value  # str, and also timestamps, '=' and '<<' as values: kept as written

    @staticmethod
    def _number(value: str) -> int | float | None:
        if len(value) > 64:
            return None
        try:
            node = yaml.ScalarNode(_RESOLVER.resolve(yaml.ScalarNode, value, (True, False)), value)
            return yaml.SafeLoader("").construct_object(node)
        except (ValueError, yaml.YAMLError):
            return None

    def _as_number(self, value: str) -> str:
        number = self._number(value)
        return "" if number is None else f" ({number!r})"

    def key(self, event: Any, line: int, path: tuple) -> str:
        if event.tag is None and event.style in (None, "") and event.value == "<<":
            raise self.fail(line, path, "YAML merge keys (<<) are not supported; write the values out")
        key = self.scalar(event, line, path)
        if key is None or isinstance(key, bool):
            raise self.fail(line, path, f"the key {event.value or '(empty)'} is read by YAML as "
                            f"{'nothing (null)' if key is None else 'a boolean'}",
                            hint=f'quote it: "{event.value}"' if event.value else None)
        return key if isinstance(key, str) else str(key)

    # -- the event stream -------------------------------------------------------------------------------

    def compose(self, text: str) -> _Node | None:
        """The document's node tree (aliases shared, not copied), built without recursion from the
        parser's events; every limit is checked as the events arrive."""
        root: _Node | None = None
        docs = 0
        # A frame: [node, path, pending key (maps) or None, key line, keys seen {key: line}]
        stack: list[list] = []
        loader = _PARSER(text)
        try:
            while True:
                event = loader.get_event()
                if event is None or isinstance(event, yaml.StreamEndEvent):
                    break
                if isinstance(event, yaml.DocumentStartEvent):
                    docs += 1
                    continue
                if isinstance(event, (yaml.StreamStartEvent, yaml.DocumentEndEvent)):
                    continue
                line = event.start_mark.line + 1
                if docs > 1:  # named at the second document's content, not at its ---
                    raise self.fail(line, (), "expected one YAML document, found several (---)")
                if isinstance(event, yaml.CollectionEndEvent):
                    node = stack.pop()[0]
                    node.done = True
                    self.attach(stack, node, line)
                    if not stack:
                        root = node
                    continue
                frame = stack[-1] if stack else None
                if frame is not None and frame[0].kind == "map" and frame[2] is None:
                    # A key: only a scalar (or an alias to one).
                    if isinstance(event, yaml.ScalarEvent):
                        key = self.key(event, line, frame[1])
                        if event.anchor:
                            self.anchors[event.anchor] = _Node("scalar", line, key)
                    elif isinstance(event, yaml.AliasEvent) and self.target(event, line, frame[1]).kind == "scalar":
                        key = self.anchors[event.anchor].value
                        key = key if isinstance(key, str) else str(key)
                    else:
                        raise self.fail(line, frame[1], "mapping keys must be plain scalars")
                    if key in frame[4]:
                        raise self.fail(line, frame[1] + (key,), f"duplicate key {excerpt(key)} (first "
                                        f"defined on line {frame[4][key]})")
                    frame[4][key] = line
                    frame[2], frame[3] = key, line
                    continue
                path = self.child_path(frame)
                if isinstance(event, yaml.AliasEvent):
                    node = self.target(event, line, path)
                    if len(stack) + node.height > MAX_DEPTH + 1:
                        raise self.fail(line, path, f"nested more than {MAX_DEPTH} deep (through an alias)",
                                        hint=LIMITS_HINT)
                    self.alias_nodes += node.size
                    if self.alias_nodes > MAX_ALIAS_NODES:
                        raise self.fail(line, path, f"aliases expand to more than {MAX_ALIAS_NODES:,} nodes "
                                        "(an alias bomb?)", hint=LIMITS_HINT)
                    self.attach(stack, node, line, alias=True)
                elif isinstance(event, yaml.ScalarEvent):
                    node = _Node("scalar", line, self.scalar(event, line, path))
                    if event.anchor:
                        self.anchors[event.anchor] = node
                    self.attach(stack, node, line)
                    if not stack:
                        root = node
                elif isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                    if len(stack) >= MAX_DEPTH:
                        raise self.fail(line, path, f"nested more than {MAX_DEPTH} deep", hint=LIMITS_HINT)
                    kind = "seq" if isinstance(event, yaml.SequenceStartEvent) else "map"
                    if event.tag not in (None, "!", _CORE + kind):
                        raise self.fail(line, path, f"YAML tag {_tag(event.tag)} is not allowed: imgbuild "
                                        "constructs no custom types", hint="remove the tag")
                    node = _Node(kind, line, [])
                    if event.anchor:
                        self.anchors[event.anchor] = node
                    stack.append([node, path, None, None, {}])
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            if "maximum nesting depth" in str(exc.problem):   # libyaml's own limit (1000), met first by its scanner
                raise self.fail(mark.line + 1 if mark else None, self.child_path(stack[-1] if stack else None),
                                f"nested more than {MAX_DEPTH} deep", hint=LIMITS_HINT) from None
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
            if mark is not None and _tab_at(text, mark.index):
                # The scanner says "found character '\t' that cannot start any token": name the tab.
                raise SpecError(f"not valid YAML: a tab in the indentation{where}; YAML indents with spaces only",
                                file=self.file, line=mark.line + 1, hint="replace the tab with spaces") from None
            raise SpecError(f"not valid YAML: {_problem(exc.problem or exc.context)}{where}", file=self.file,
                            line=mark.line + 1 if mark else None) from None
        except yaml.YAMLError as exc:
            reason = getattr(exc, "reason", None)
            raise SpecError(f"not valid YAML: {_problem(reason)}", file=self.file) from None
        finally:
            loader.dispose()
        return root

    def child_path(self, frame: list | None) -> tuple:
        if frame is None:
            return ()
        node, path, key = frame[0], frame[1], frame[2]
        return path + ((key,) if node.kind == "map" else (len(node.value),))

    def target(self, event: Any, line: int, path: tuple) -> _Node:
        node = self.anchors.get(event.anchor)
        if node is None:
            raise self.fail(line, path, "an alias (*name) with no anchor (&name) of that name before it")
        if not node.done:
            raise self.fail(line, path, "an alias (*name) refers to the map or list that contains it")
        return node

    @staticmethod
    def attach(stack: list, node: _Node, line: int, alias: bool = False) -> None:
        if not stack:
            return
        frame = stack[-1]
        parent = frame[0]
        if parent.kind == "map":
            parent.value.append((frame[2], frame[3], node))
            frame[2] = None
        else:
            parent.value.append(node)
        parent.size += node.size
        parent.height = max(parent.height, node.height + 1)


_QUOTED = re.compile(r"'[^']*'")


def _problem(text: Any) -> str:
    """PyYAML's problem text with quoted excerpts of the input dropped (they may be a secret's first
    line): token names like '<scalar>' and single characters stay."""
    text = str(text or "syntax error").splitlines()[0] if text else "syntax error"

    def keep(m: re.Match) -> str:
        inner = m.group(0)[1:-1]
        return m.group(0) if (len(inner) <= 2 or re.fullmatch(r"<[a-z ]+>", inner)) and inner.isprintable() \
            else "'...'"
    return _QUOTED.sub(keep, "".join(c if c.isprintable() else "?" for c in text))


def _convert(node: _Node, path: tuple, lines: dict) -> Any:
    """Plain data from the node tree; aliases are copied here, the limits bound the work (depth and
    expanded size were checked when the tree was composed)."""
    lines[path] = node.line
    if node.kind == "map":
        out: dict = {}
        for key, key_line, value in node.value:
            out[key] = _convert(value, path + (key,), lines)
            lines[path + (key,)] = key_line
        return out
    if node.kind == "seq":
        return [_convert(item, path + (i,), lines) for i, item in enumerate(node.value)]
    return node.value


def load_text(text: str, file: str) -> Doc:
    if len(text) > MAX_BYTES:
        raise SpecError(f"the file is larger than {MAX_BYTES // (1024 * 1024)} MiB", file=file, hint=LIMITS_HINT)
    root = _Reader(file).compose(text)
    if root is None:
        raise SpecError("the file is empty", file=file)
    lines: dict = {}
    data = _convert(root, (), lines)
    return Doc(file=file, data=data, lines=lines)


def read_text(path: Path) -> str:
    """The text of a regular, UTF-8 file of at most MAX_BYTES; anything else is refused without
    reading it (a FIFO would block, /dev/zero would never end) and without quoting it."""
    name = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise SpecError("file not found", file=name) from None
    except OSError as exc:
        raise SpecError(f"cannot read: {exc.strerror}", file=name) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            what = "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else \
                "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) \
                else "not a regular file"
            raise SpecError(f"not a regular file ({what})", file=name,
                            hint="a stacks file or kind.yaml must be a regular file")
        if os.fstat(fd).st_size > MAX_BYTES:
            raise SpecError(f"the file is larger than {MAX_BYTES // (1024 * 1024)} MiB", file=name,
                            hint=LIMITS_HINT)
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise SpecError(f"cannot read: {exc.strerror}", file=name) from None
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:   # it grew while being read
        raise SpecError(f"the file is larger than {MAX_BYTES // (1024 * 1024)} MiB", file=name, hint=LIMITS_HINT)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError("not a UTF-8 text file", file=name) from None


def load_file(path: Path) -> Doc:
    path = Path(path)
    # A link that leaves its folder (stacks.yaml -> /etc/shadow in a hostile checkout) is refused before
    # reading: a parse error or an unknown key would otherwise quote a line of a file that is not the site's.
    if path.is_symlink() and path.is_file():       # (what is not a regular file read_text refuses itself)
        target = path.resolve()
        if not target.is_relative_to(path.parent.resolve()):
            raise SpecError("a symbolic link to a file outside its folder; imgbuild reads a stacks file or a "
                            "kind only from its own folder", file=str(path),
                            hint="name the file itself (--file PATH), not a link to it")
    return load_text(read_text(path), str(path))
