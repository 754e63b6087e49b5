"""The commands of a RUN as bash runs them, read by bash's grammar (tree-sitter-bash), not by splitting
text: each simple command with the operator after it (&& || | ; newline), the branch conditions under which
it runs (`if`, `elif`, `else`, `case` arms), whether it sits in a loop, a function or a command
substitution, whether it is a condition itself, the files its redirections write, the directory `cd` left
it in, and the variables known where it runs.

Variables are followed in the order the shell sets them: an assignment in a branch whose condition is known
to hold counts, one in a branch that may or may not run leaves the variable unknown after the branch
(a `case` over a CUDA version does not mean its last arm won), and inside a branch what its condition
implies is known (`[ "$CUDA_MAJOR" = 13 ]` then CUDA_MAJOR is 13 there).

Knows no rule: builder.rules.lint judges what it reads. Hostile text (unterminated quotes, deep nesting)
is read as far as the grammar recovers; nesting deeper than MAX_DEPTH is not followed.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache

from builder.core.shell import expand, words

MAX_DEPTH = 150          # nested constructs followed; deeper ones are not read (and said to be)
SHELLS = re.compile(r"^(?:ba|da|z|k|a)?sh\Z")
_VAR_WORD = re.compile(r'^"?\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?"?\Z')


@lru_cache(maxsize=1)
def _parser():
    import tree_sitter_bash
    from tree_sitter import Language, Parser
    return Parser(Language(tree_sitter_bash.language()))


@dataclass(frozen=True)
class Condition:
    """A branch condition: a variable compared with a value (`=`, `!=`, a `case` pattern), or any other
    test, kept as written."""
    text: str
    var: str | None = None
    value: str | None = None
    op: str = "="                # '=', '!=', 'match' (a case pattern; alternatives joined by |), 'set' (-n: not empty)
    negated: bool = False        # the branch runs when the condition does not hold (else, later elif)

    def holds(self, values: dict) -> bool | None:
        """True or False where the variable's value is known, else None."""
        known = values.get(self.var) if self.var else None
        if self.op == "set" and isinstance(known, str):
            return bool(known) != self.negated
        if not isinstance(known, str) or self.value is None:
            return None
        if self.op == "match":
            result = any(fnmatch.fnmatchcase(known, p) for p in self.value.split("|"))
        else:
            result = (known == self.value) == (self.op == "=")
        return result != self.negated

    def implies(self) -> tuple[str, str] | None:
        """(variable, value) the branch can take as known: an equality that holds, or a case pattern
        without a glob character."""
        if not self.var or self.value is None:
            return None
        eq = self.op == "=" or (self.op == "match" and "|" not in self.value and not re.search(r"[*?\[]", self.value))
        if self.op == "!=":
            eq, negated = True, not self.negated
        else:
            negated = self.negated
        return (self.var, self.value) if eq and not negated else None

    def __str__(self) -> str:
        if self.op == "set" and self.var:
            return f"{self.var} is {'empty' if self.negated else 'set'}"
        if self.var and self.value is not None:
            op = {"=": "=", "!=": "!=", "match": "matches"}[self.op]
            said = f"{self.var} {op} {self.value}"
        else:
            said = self.text
        return f"not ({said})" if self.negated else said


@dataclass(frozen=True)
class Command:
    """One command of a RUN, as the shell runs it. text: as written (prefix assignments and redirections
    included); offset: where it starts in the shell text."""
    text: str
    offset: int
    sep: str = ""                               # the operator after it: && || | ; & \\n, or '' (end of its body)
    path: tuple = ()                            # the Conditions under which it runs, outermost first
    loop: bool = False                          # in a for/while/until body
    subst: bool = False                         # in $( ) or backticks: its status is not the RUN's
    test: bool = False                          # an if/while condition: its failure chooses a branch
    last: bool = False                          # the last of its body: its status is the body's
    function: str | None = None                 # the function whose body holds it
    writes: tuple = ()                          # files its > and >> redirections write
    cwd: str | None = None                      # the directory the last `cd` before it entered
    fallback: str | None = None                 # after `||`: what runs when it fails, as written
    values: dict = field(default_factory=dict, compare=False, repr=False)   # variables known where it runs

    @property
    def where(self) -> str:
        """'in the branch where CUDA_MAJOR = 13', or '' for a command that always runs."""
        parts = [str(c) for c in self.path]
        out = f"in the branch where {' and '.join(parts)}" if parts else ""
        if self.function:
            out = f"in function {self.function}" + (f", {out}" if out else "")
        return out

    def implied(self) -> dict:
        """What the branch conditions imply about variables (CUDA_MAJOR -> '13')."""
        out = {}
        for c in self.path:
            pair = c.implies()
            if pair:
                out[pair[0]] = pair[1]
        return out


class _Reader:
    def __init__(self, code: str, values: dict):
        self.code = code
        self.data = code.encode("utf-8", "surrogatepass")
        self.ascii = len(self.data) == len(code)
        self._chars: list[int] | None = None
        self.out: list[Command] = []
        self.too_deep = False
        self.env = dict(values)
        self.cwd: str | None = None
        self.dirs: list = []                    # pushd's stack: popd goes back
        self.tails: dict = {}       # (start, end) of a command -> (end of its redirections, files they write)

    # -- offsets: tree-sitter counts bytes, the lint counts characters
    def char(self, byte: int) -> int:
        if self.ascii:
            return byte
        if self._chars is None:
            chars, n = [], 0
            for ch in self.code:
                chars.extend([n] * len(ch.encode("utf-8", "surrogatepass")))
                n += 1
            chars.append(n)
            self._chars = chars
        return self._chars[min(byte, len(self._chars) - 1)]

    def text(self, node) -> str:
        return self.data[node.start_byte:node.end_byte].decode("utf-8", "replace")

    # -- values
    def value_of(self, node, env: dict) -> str | None:
        """A word's value where every part of it is known, else None."""
        raw = self.text(node)
        if node.type == "raw_string":
            return raw[1:-1]
        if any(c.type in ("command_substitution", "process_substitution", "arithmetic_expansion")
               for c in _descendants(node, 4)):
            return None
        raw = raw[1:-1] if node.type == "string" and len(raw) >= 2 else raw
        value = expand(raw, env)
        return None if "$" in value or "`" in value else value

    def assign(self, node, env: dict) -> None:
        name = node.child_by_field_name("name")
        value = node.child_by_field_name("value")
        if name is not None:
            key = self.text(name)
            env[key] = self.value_of(value, env) if value is not None else ""

    # -- walking
    def body(self, nodes: list, ctx: dict, env: dict, depth: int) -> None:
        """A sequence of statements: each with its separator, the last one marked."""
        statements = [n for n in nodes if n.is_named and n.type not in ("comment", "heredoc_body")]
        for i, node in enumerate(statements):
            sep = self._sep_after(node, statements[i + 1] if i + 1 < len(statements) else None)
            self.statement(node, {**ctx, "last": i == len(statements) - 1}, env, sep, depth)

    def _sep_after(self, node, nxt) -> str:
        sib = node.next_sibling
        if sib is not None and not sib.is_named and sib.type in (";", "&", ";;", ";&", ";;&"):
            return ";" if sib.type.startswith(";") else "&"
        if nxt is None:
            return ""
        between = self.data[node.end_byte:nxt.start_byte]
        return "\n" if b"\n" in between else ";"

    def statement(self, node, ctx: dict, env: dict, sep: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            self.too_deep = True
            return
        kind = node.type
        if kind == "list":
            left, right = node.children[0], node.children[-1]
            op = next((c.type for c in node.children if not c.is_named), "&&")
            self.statement(left, {**ctx, "last": False}, env, op, depth + 1)
            if op == "||" and self.out:
                # What runs when the left side fails, whole (`|| { echo ...; exit 1; }` is no fallback that
                # hides the failure), on the command whose status it answers.
                self.out[-1] = replace(self.out[-1], fallback=self.text(right))
            self.statement(right, ctx, env, sep, depth + 1)
        elif kind == "pipeline":
            parts = [c for c in node.children if c.is_named]
            for i, part in enumerate(parts):
                self.statement(part, {**ctx, "last": ctx.get("last") and i == len(parts) - 1}, env,
                               "|" if i < len(parts) - 1 else sep, depth + 1)
        elif kind == "negated_command":
            inner = [c for c in node.children if c.is_named]
            if inner:
                self.statement(inner[0], ctx, env, sep, depth + 1)
        elif kind == "redirected_statement":
            self.redirected(node, ctx, env, sep, depth)
        elif kind in ("command", "test_command", "variable_assignment", "variable_assignments",
                      "declaration_command", "unset_command"):
            self.simple(node, ctx, env, sep, depth)
        elif kind in ("subshell", "compound_statement"):
            inner = dict(env) if kind == "subshell" else env
            self.body(node.children, {**ctx}, inner, depth + 1)
        elif kind == "if_statement":
            self.if_statement(node, ctx, env, depth)
        elif kind == "case_statement":
            self.case_statement(node, ctx, env, depth)
        elif kind in ("for_statement", "c_style_for_statement", "while_statement"):
            self.loop(node, ctx, env, depth)
        elif kind == "function_definition":
            name = node.child_by_field_name("name")
            body = node.child_by_field_name("body")
            if body is not None:
                self.body(body.children, {**ctx, "function": self.text(name) if name else "?"}, dict(env), depth + 1)
        elif kind == "ERROR" or node.child_count:
            # What the grammar could not place (an unterminated quote, a stray keyword): its statements as
            # they come, so that a command after the damage is still read.
            named = [c for c in node.children if c.is_named]
            if kind == "ERROR" and not any(c.type in _STATEMENTS for c in named):
                self.emit(node, ctx, env, sep)
            else:
                self.body(node.children, ctx, env, depth + 1)
        else:
            self.emit(node, ctx, env, sep)

    def redirected(self, node, ctx: dict, env: dict, sep: str, depth: int) -> None:
        body = node.child_by_field_name("body")
        writes, heredocs, piped = [], [], []
        for child in node.children:
            if child.type == "file_redirect":
                op = next((c.type for c in child.children if not c.is_named), "")
                dest = child.child_by_field_name("destination")
                if dest is not None and op in (">", ">>", ">|", "&>", "&>>") and not re.fullmatch(r"&?\d*", self.text(dest)):
                    writes.append(self.value_of(dest, env) or self.text(dest))
            elif child.type == "heredoc_redirect":
                heredocs += [c for c in child.children if c.type == "heredoc_body"]
                piped += [c for c in child.children if c.is_named and c.type in _STATEMENTS]
        if body is not None and body.type == "command":
            # One command, its redirections included in its text: bash reads `pip install a>=1 b` as the
            # arguments a and b with a redirection to the file '=1' (the grammar files b under the
            # redirection; the shell's words do not), and rules read the words as the shell does.
            self.simple(body, {**ctx, "writes": tuple(writes)}, env, "|" if piped else sep, depth, shown=node)
        elif body is not None and body.type in ("list", "pipeline", "redirected_statement"):
            # The grammar hangs `a && b >f c` on the list; bash gives a redirection to the simple command it
            # follows (a list takes none), with the words after it as that command's arguments.
            leaf = body
            while leaf.type in ("list", "pipeline", "redirected_statement") and leaf.named_child_count:
                leaf = leaf.child_by_field_name("body") if leaf.type == "redirected_statement" and \
                    leaf.child_by_field_name("body") is not None and leaf.end_byte == leaf.child_by_field_name(
                        "body").end_byte else [c for c in leaf.children if c.is_named][-1]
            self.tails[(leaf.start_byte, leaf.end_byte)] = (node.end_byte, tuple(writes))
            self.statement(body, ctx, env, "|" if piped else sep, depth + 1)
        elif body is not None:
            self.statement(body, {**ctx, "writes": tuple(writes)}, env, "|" if piped else sep, depth + 1)
        for p in piped:                                  # cat <<EOF | bash: the rest of the pipeline
            inner = [c for c in p.children if c.is_named] if p.type == "pipeline" else [p]
            for i, part in enumerate(inner):
                self.statement(part, ctx, env, "|" if i < len(inner) - 1 else sep, depth + 1)
        fed = [body] if body is not None else []
        fed += [c for p in piped for c in ([x for x in p.children if x.is_named] if p.type == "pipeline" else [p])]
        # bash <<EOF ... EOF (or a RUN heredoc with no command, which BuildKit hands to the shell): the
        # body is shell; python3 <<EOF and cat <<EOF > file are not.
        shell_fed = not fed or any(_runs_shell(words(self.text(c))) for c in fed)
        for doc in heredocs:
            if shell_fed:
                self.nested(doc, ctx, env, depth)

    def nested(self, node, ctx: dict, env: dict, depth: int) -> None:
        """Shell text inside another construct (a heredoc fed to a shell): read with its own grammar pass,
        offsets kept."""
        base = node.start_byte
        sub = _Reader(self.data[base:node.end_byte].decode("utf-8", "replace"), env)
        sub.cwd = self.cwd
        sub.body(_parser().parse(sub.data).root_node.children, ctx, sub.env, depth + 1)
        start = self.char(base)
        self.out += [_moved(c, start + c.offset) for c in sub.out]
        self.too_deep |= sub.too_deep

    def simple(self, node, ctx: dict, env: dict, sep: str, depth: int, shown=None) -> None:
        # Command substitutions run first, and their status is not the RUN's.
        for sub in _substitutions(shown or node):
            self.body(sub.children, {**ctx, "subst": True, "last": False}, dict(env), depth + 1)
        own = dict(env)
        if node.type in ("variable_assignment", "variable_assignments", "declaration_command"):
            for a in ([node] if node.type == "variable_assignment" else
                      [c for c in node.children if c.type == "variable_assignment"]):
                self.assign(a, env)
            own = env
        elif node.type == "command":
            for a in (c for c in node.children if c.type == "variable_assignment"):
                self.assign(a, own)                     # X=1 cmd: for this command only
        self.emit(shown or node, ctx, own, sep)
        w = words(self.text(node))
        if w[:1] in (("cd",), ("pushd",)) and len(w) > 1:
            target = expand(next((x for x in w[1:] if not x.startswith("-")), w[-1]), env)
            if w[0] == "pushd":
                self.dirs.append(self.cwd)
            self.cwd = target if target.startswith("/") or self.cwd is None else f"{self.cwd.rstrip('/')}/{target}"
        elif w[:1] == ("popd",) and self.dirs:
            self.cwd = self.dirs.pop()

    def emit(self, node, ctx: dict, env: dict, sep: str) -> None:
        end, writes = self.tails.pop((node.start_byte, node.end_byte), (node.end_byte, ()))
        text = self.data[node.start_byte:end].decode("utf-8", "replace")
        self.out.append(Command(
            text=text, offset=self.char(node.start_byte), sep=sep, path=ctx.get("path", ()),
            loop=ctx.get("loop", False), subst=ctx.get("subst", False), test=ctx.get("test", False),
            last=ctx.get("last", False), function=ctx.get("function"), writes=ctx.get("writes", ()) + writes,
            cwd=self.cwd, values={**env, **dict(c.implies() for c in ctx.get("path", ()) if c.implies())}))

    def if_statement(self, node, ctx: dict, env: dict, depth: int) -> None:
        clauses = []            # (condition nodes, body nodes) per if / elif, then the else body
        cond, body, state, other = [], [], "cond", None
        for child in node.children:
            t = child.type
            if t == "then":
                state = "body"
            elif t == "elif_clause":
                clauses.append((cond, body))
                cond, body = self._split_clause(child)
            elif t == "else_clause":
                other = [c for c in child.children if c.is_named]
            elif t in ("if", "fi", ";"):
                continue
            elif child.is_named:
                (cond if state == "cond" else body).append(child)
        clauses.append((cond, body))
        self.branches(clauses, other, ctx, env, depth)

    @staticmethod
    def _split_clause(clause) -> tuple[list, list]:
        cond, body, state = [], [], "cond"
        for child in clause.children:
            if child.type == "then":
                state = "body"
            elif child.is_named:
                (cond if state == "cond" else body).append(child)
        return cond, body

    def branches(self, clauses: list, other: list | None, ctx: dict, env: dict, depth: int) -> None:
        path = ctx.get("path", ())
        before: list[Condition] = []
        ends = []
        taken = False
        for cond_nodes, body in clauses:
            self.body(cond_nodes, {**ctx, "path": path + tuple(before), "test": True}, env, depth + 1)
            c = self.condition(cond_nodes)
            here = path + tuple(before) + (c,)
            holds = _all_hold(here, env)
            branch_env = dict(env)
            self.body(body, {**ctx, "path": here}, branch_env, depth + 1)
            ends.append((holds, branch_env))
            taken |= holds is True
            before.append(Condition(c.text, c.var, c.value, c.op, not c.negated))
        if other is not None:
            here = path + tuple(before)
            branch_env = dict(env)
            self.body(other, {**ctx, "path": here}, branch_env, depth + 1)
            ends.append((_all_hold(here, env), branch_env))
        elif not taken:
            ends.append((_all_hold(path + tuple(before), env), dict(env)))   # no branch taken: nothing changes
        _merge(env, ends)

    def case_statement(self, node, ctx: dict, env: dict, depth: int) -> None:
        subject = node.child_by_field_name("value")
        raw = self.text(subject) if subject is not None else ""
        m = _VAR_WORD.match(raw)
        var = m.group(1) if m else None
        path = ctx.get("path", ())
        ends, before, default = [], [], False
        for item in (c for c in node.children if c.type == "case_item"):
            patterns, body, state = [], [], "pattern"
            for child in item.children:
                if child.type == ")":
                    state = "body"
                elif child.is_named and state == "pattern":
                    patterns.append(self.text(child).strip("'\""))
                elif child.is_named and state == "body":
                    body.append(child)
            pattern = "|".join(patterns)
            default |= pattern == "*"
            c = Condition(f"case {raw} in {pattern})", var, pattern if var else None, "match")
            here = path + ((c,) if pattern != "*" else tuple(before))
            branch_env = dict(env)
            self.body(body, {**ctx, "path": here}, branch_env, depth + 1)
            ends.append((_all_hold(here, env), branch_env))
            before.append(Condition(c.text, c.var, c.value, "match", True))
        if not default:
            ends.append((_all_hold(path + tuple(before), env), dict(env)))
        _merge(env, ends)

    def loop(self, node, ctx: dict, env: dict, depth: int) -> None:
        body = node.child_by_field_name("body")
        cond = [c for i, c in enumerate(node.children) if c.is_named and node.field_name_for_child(i) == "condition"]
        if cond:
            self.body(cond, {**ctx, "test": True}, env, depth + 1)
        if node.type == "for_statement":
            var = node.child_by_field_name("variable")
            if var is not None:
                env[self.text(var)] = None
        if body is not None:
            loop_env = dict(env)
            self.body(body.children, {**ctx, "loop": True}, loop_env, depth + 1)
            _merge(env, [(None, loop_env), (None, dict(env))])

    def condition(self, nodes: list) -> Condition:
        text = " ".join(self.text(n) for n in nodes).strip().rstrip(";").strip()
        if len(nodes) != 1:
            return Condition(text)
        node = nodes[0]
        if node.type == "test_command":
            expr = next((c for c in node.children if c.is_named), None)
            negated = False
            while expr is not None and expr.type == "unary_expression" and self.text(expr).startswith("!"):
                negated = not negated               # [ ! -z $X ]
                expr = next((c for c in expr.children if c.is_named), None)
            if expr is not None and expr.type == "unary_expression":
                op = self.text(expr.child_by_field_name("operator")) if expr.child_by_field_name("operator") else ""
                operand = [c for c in expr.children if c.is_named and c != expr.child_by_field_name("operator")]
                m = _VAR_WORD.match(self.text(operand[0]).strip()) if operand else None
                if op in ("-n", "-z") and m:
                    return Condition(text, m.group(1), None, "set", negated != (op == "-z"))
                return Condition(text)
            if expr is not None and expr.type == "binary_expression" and not negated:
                left, right = expr.child_by_field_name("left"), expr.child_by_field_name("right")
                op = expr.child_by_field_name("operator")
                return _compare(text, self.text(left) if left else "", self.text(op) if op else "",
                                self.text(right) if right else "", "[[" in text[:2])
            return Condition(text)
        w = words(text)
        if w[:1] == ("test",) and len(w) == 3 and w[1] in ("-n", "-z") and _VAR_WORD.match(w[2]):
            return Condition(text, _VAR_WORD.match(w[2]).group(1), None, "set", w[1] == "-z")
        if w[:1] in (("test",), ("[",)) and len(w) >= 4:
            return _compare(text, w[1], w[2], w[3], False) if len(w) in (4, 5) else Condition(text)
        return Condition(text)


_STATEMENTS = {"command", "list", "pipeline", "redirected_statement", "if_statement", "case_statement",
               "for_statement", "c_style_for_statement", "while_statement", "subshell", "compound_statement",
               "function_definition", "variable_assignment", "variable_assignments", "declaration_command",
               "negated_command", "test_command", "unset_command"}


def _compare(text: str, left: str, op: str, right: str, double: bool) -> Condition:
    m = _VAR_WORD.match(left.strip())
    value = right.strip().strip("'\"")
    if not m:
        m2 = _VAR_WORD.match(right.strip())
        if not m2:
            return Condition(text)
        m, value = m2, left.strip().strip("'\"")
    ops = {"=": "=", "==": "=", "-eq": "=", "!=": "!=", "-ne": "!="}
    if op not in ops or "$" in value:
        return Condition(text)
    glob = double and op in ("==", "!=") and re.search(r"[*?\[]", value)
    if glob:
        return Condition(text, m.group(1), value, "match", op == "!=")
    return Condition(text, m.group(1), value, ops[op])


def _runs_shell(w: tuple) -> bool:
    """Whether a command's words run a shell that reads its standard input (bash, sh -ex, sudo bash)."""
    w = tuple(x for x in w if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", x))
    while w and w[0] in ("sudo", "env", "exec", "command"):
        w = w[1:]
    return bool(w) and bool(SHELLS.match(w[0].rsplit("/", 1)[-1])) and not any(x in ("-c",) for x in w[1:])


def _all_hold(path: tuple, env: dict) -> bool | None:
    results = [c.holds(env) for c in path]
    if any(r is False for r in results):
        return False
    return True if all(r is True for r in results) else None


def _merge(env: dict, ends: list) -> None:
    """After a construct: a branch known to run decides; branches that may run leave a variable known only
    where they agree; branches known not to run change nothing."""
    sure = [e for holds, e in ends if holds is True]
    if sure:
        env.clear()
        env.update(sure[0])
        return
    maybe = [e for holds, e in ends if holds is None]
    if not maybe:
        return
    for name in set().union(*maybe):
        seen = {e.get(name, env.get(name)) for e in maybe} | ({env.get(name)} if len(maybe) < len(ends) else set())
        env[name] = seen.pop() if len(seen) == 1 else None


def _descendants(node, depth: int):
    stack = [(node, 0)]
    while stack:
        n, d = stack.pop()
        yield n
        if d < depth:
            stack.extend((c, d + 1) for c in n.children)


def _substitutions(node) -> list:
    """The $( ) and backtick substitutions inside a command's words (not inside nested ones)."""
    out, stack = [], list(node.children)
    while stack:
        n = stack.pop()
        if n.type in ("command_substitution", "process_substitution"):
            out.append(n)
        else:
            stack.extend(n.children)
    return sorted(out, key=lambda n: n.start_byte)


def _moved(c: Command, offset: int) -> Command:
    return replace(c, offset=offset)


def read(code: str, values: dict | None = None) -> tuple[list[Command], bool]:
    """The commands of one RUN's shell text, in the order they appear (a substitution's before the command
    that holds it), and whether some nesting was too deep to follow. values: variables known before it
    (NAME -> str, or None where only a --build-arg would set it)."""
    reader = _Reader(code, {k: v for k, v in (values or {}).items()})
    tree = _parser().parse(reader.data)
    reader.body(tree.root_node.children, {}, reader.env, 0)
    return reader.out, reader.too_deep
