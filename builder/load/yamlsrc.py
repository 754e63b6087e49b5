"""Read YAML into plain data while keeping the line of every key, and refuse duplicate keys.

PyYAML silently keeps the last of two equal keys; a site file with two stacks of the same name
must be refused instead, with both lines named. Lines are kept per key path so that every later
error can point at the exact line of the value it is about.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from builder.errors import SpecError

Path_ = tuple  # a key path, e.g.: ("stacks", "h100-megatron", "layers", 2)


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


def _convert(node: yaml.Node, path: tuple, lines: dict, file: str, loader: yaml.SafeLoader) -> Any:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out: dict = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise SpecError("YAML merge keys (<<) are not supported; write the values out",
                                file=file, line=key_node.start_mark.line + 1, key=dotted(path))
            key = _convert(key_node, path + ("<key>",), {}, file, loader)
            if not isinstance(key, (str, int, float, bool)) or key is None:
                raise SpecError("mapping keys must be plain scalars", file=file,
                                line=key_node.start_mark.line + 1, key=dotted(path))
            key = str(key)
            if key in out:
                raise SpecError(f"duplicate key {key!r} (first defined on line {lines[path + (key,)]})",
                                file=file, line=key_node.start_mark.line + 1, key=dotted(path + (key,)))
            lines[path + (key,)] = key_node.start_mark.line + 1
            out[key] = _convert(value_node, path + (key,), lines, file, loader)
            lines[path + (key,)] = key_node.start_mark.line + 1
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_convert(item, path + (i,), lines, file, loader) for i, item in enumerate(node.value)]
    return loader.construct_object(node, deep=True)


def load_text(text: str, file: str) -> Doc:
    try:
        # libyaml's composer when present (10x faster at site scale); nodes keep their marks either way.
        nodes = list(yaml.compose_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise SpecError(f"not valid YAML: {exc.problem or exc}", file=file, line=line) from None
    except yaml.YAMLError as exc:
        raise SpecError(f"not valid YAML: {exc}", file=file) from None
    if not nodes or nodes[0] is None:
        raise SpecError("the file is empty", file=file)
    if len(nodes) > 1:
        raise SpecError("expected one YAML document, found several (---)", file=file,
                        line=nodes[1].start_mark.line + 1)
    lines: dict = {}
    data = _convert(nodes[0], (), lines, file, yaml.SafeLoader(""))
    return Doc(file=file, data=data, lines=lines)


def load_file(path: Path) -> Doc:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError("file not found", file=str(path)) from None
    except UnicodeDecodeError:
        raise SpecError("not a UTF-8 text file", file=str(path)) from None
    except OSError as exc:
        raise SpecError(f"cannot read: {exc.strerror}", file=str(path)) from None
    return load_text(text, str(path))
