"""Hostile YAML (issue 10, part A): every class is refused by the real CLI with exit 2 and
`file:line: key.path: reason`, never with a traceback or exit 70, in bounded time and memory.

Classes: YAML tags, alias bombs, nesting depth, file size and kind (not a regular file, not UTF-8,
content never quoted), YAML 1.1 scalars that change meaning, long `extends` chains.

The wall-time bounds here are generous sanity limits only; the measured numbers are in the benchmark
note of the change (benchmarks are not tests).
"""

from __future__ import annotations

import os
import time

import pytest

from conftest import run_cli, write_stacks
from test_spec_errors import VALID, unruled

from builder.core import yamlsrc

COMMANDS = [("check", "-f"), ("render", "--all", "-f"), ("plan", "--all", "--offline", "-f"), ("lint",)]


def run(command: tuple, file) -> object:
    return run_cli(*command, file)


def refused(res, file, reason: str, line: int | None = None, key: str | None = None, hint: str | None = None):
    assert res.code == 2, res.output
    assert "Traceback" not in res.output and "internal error" not in res.output, res.output
    where = str(file) + (f":{line}" if line else "")
    if key:
        where += f": {key}"
    assert f"spec error: {where}: " in unruled(res.err), res.err
    assert reason in res.err.split("\n  hint: ")[0], res.err
    if hint:
        assert hint in res.err, res.err


def timed(*args) -> tuple:
    start = time.monotonic()
    res = run_cli(*args)
    return res, time.monotonic() - start


def with_line(text: str) -> tuple[str, int]:
    """The text without its `# <==` marker, and the marked line's number."""
    lines = text.split("\n")
    number = next(i for i, ln in enumerate(lines, 1) if ln.endswith("# <=="))
    return text.replace("  # <==", ""), number


# -- 1. tags: never constructed, refused with the line -----------------------------------------------

@pytest.mark.parametrize("tagged, shown", [
    ("!!python/name:os.system", "'!!python/name:os.system'"),
    ("!!python/object/apply:os.system [echo pwned]", "'!!python/object/apply:os.system'"),
    ("!foo bar", "'!foo'"),
    ("!!binary aGVsbG8=", "'!!binary'"),
    ("!!set {a, b}", "'!!set'"),
])
def test_yaml_tags_are_refused(write, tagged, shown):
    text, line = with_line(VALID.replace("  namespace: imgbuild\n", f"  namespace: {tagged}  # <==\n"))
    file = write(text)
    refused(run_cli("check", "-f", file), file, f"YAML tag {shown} is not allowed", line, "site.namespace")


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_refuses_a_tag_the_same_way(write, command):
    text, line = with_line(VALID.replace("version: 1\n", "version: !!python/name:os.system 1  # <==\n"))
    file = write(text)
    refused(run(command, file), file, "YAML tag '!!python/name:os.system' is not allowed", line, "version")


def test_core_tags_still_read(write):
    file = write(VALID.replace('  namespace: imgbuild\n', '  namespace: !!str imgbuild\n')
                 .replace("version: 1\n", "version: !!int 1\n"))
    assert run_cli("check", "-f", file).code == 0


# -- 2. alias bombs ----------------------------------------------------------------------------------

LOL = "".join(
    [f"{'a'}: &a [" + ",".join(['"lol"'] * 9) + "]\n"]
    + [f"{n}: &{n} [" + ",".join([f"*{p}"] * 9) + "]\n" for p, n in zip("abcdefgh", "bcdefghi")])


@pytest.mark.parametrize("command", COMMANDS)
def test_billion_laughs_is_refused_at_once(tmp_path, command):
    file = write_stacks(tmp_path, LOL)
    res, seconds = timed(*command, file)
    refused(res, file, f"aliases expand to more than {yamlsrc.MAX_ALIAS_NODES:,} nodes", 6, "f[0]",
            hint="at most 4 MiB")
    assert seconds < 5, seconds  # was 57 s to a MemoryError


def test_a_recursive_alias_is_refused(tmp_path):
    file = write_stacks(tmp_path, "version: 1\nbases: &a [1, *a]\n")
    refused(run_cli("check", "-f", file), file, "an alias (*name) refers to the map or list that contains it", 2, "bases[1]")


def test_an_alias_nesting_past_the_depth_limit_is_refused(tmp_path):
    levels = ["l0: &l0 " + "[" * 40 + "]" * 40]
    levels += [f"l{i}: &l{i} " + "[" * 40 + f"*l{i - 1}" + "]" * 40 for i in range(1, 30)]
    file = write_stacks(tmp_path, "\n".join(levels) + "\n")
    res, seconds = timed("check", "-f", file)
    refused(res, file, f"nested more than {yamlsrc.MAX_DEPTH} deep (through an alias)", 2)
    assert seconds < 5


def test_a_few_aliases_still_work(write):
    text = VALID.replace("    gpus: [H100]\n", "    gpus: &gpus [H100]\n") + "  s9:\n    extends: s1\n    gpus: *gpus\n"
    assert run_cli("check", "-f", write(text)).code == 0


# -- 3. nesting depth --------------------------------------------------------------------------------

@pytest.mark.parametrize("depth", [65, 500, 999, 100_000])
@pytest.mark.parametrize("shape", ["list", "map"])
def test_deep_nesting_is_refused(tmp_path, depth, shape):
    value = "[" * depth + "]" * depth if shape == "list" else "{a: " * depth + "1" + "}" * depth
    file = write_stacks(tmp_path, f"version: 1\nbases: {value}\n")
    res, seconds = timed("check", "-f", file)
    refused(res, file, f"nested more than {yamlsrc.MAX_DEPTH} deep", 2, hint="nested at most 64 deep")
    assert seconds < 5, seconds


# -- 4. file size, kind and encoding; no content quoted ----------------------------------------------

def test_a_file_over_the_size_limit_is_refused_unread(tmp_path):
    file = tmp_path / "stacks.yaml"
    with open(file, "w") as out:
        out.write(VALID)
        out.write(("# " + "x" * 1000 + "\n") * (5 * 1024))   # 5 MiB of comments
    res, seconds = timed("check", "-f", file)
    refused(res, file, "the file is larger than 4 MiB", hint="at most 4 MiB")
    assert seconds < 5, seconds


def test_a_file_under_the_limit_is_read_in_linear_time(tmp_path):
    file = tmp_path / "stacks.yaml"
    items = "".join(f"      - pkg{i:07d}\n" for i in range((yamlsrc.MAX_BYTES - 2000) // 20))
    text = VALID.replace("    params: {apt: [libaio-dev]}\n", "    params:\n      apt:\n" + items, 1)
    file.write_text(text)
    assert file.stat().st_size < yamlsrc.MAX_BYTES
    start = time.monotonic()
    doc = yamlsrc.load_file(file)
    assert len(doc.data["layers"]["site"]["params"]["apt"]) > 200_000
    assert time.monotonic() - start < 15


@pytest.mark.parametrize("make, what", [
    (lambda p: p.symlink_to("/dev/zero"), "not a regular file (a device)"),
    (lambda p: os.mkfifo(p), "not a regular file (a FIFO)"),
    (lambda p: p.mkdir(), "not a regular file (a directory)"),
])
def test_a_file_that_is_not_regular_is_refused(tmp_path, make, what):
    file = tmp_path / "stacks.yaml"
    make(file)
    res, seconds = timed("check", "-f", file)
    refused(res, file, what)
    assert seconds < 5, seconds


def test_not_utf8_is_refused(tmp_path):
    file = tmp_path / "stacks.yaml"
    file.write_bytes(b"version: 1\nsite: {namespace: \xff\xfe}\n")
    refused(run_cli("check", "-f", file), file, "not a UTF-8 text file")


SECRET = "s3cr3tHash"


@pytest.mark.parametrize("content", [
    f"root:$6${SECRET}$abcdefgh:19000:0:99999:7\nbin:*:19000:0:99999:7:::\n",
    f"key: value\n{SECRET}: [unclosed\n",
    f"a: b\n  {SECRET}: c\n",
    f"a: *{SECRET}\n",
    f"a: '{SECRET}\n",
    f"- {SECRET}\nb: c\n",
    f"\t{SECRET}: 1\n",
])
@pytest.mark.parametrize("command", COMMANDS)
def test_a_link_to_a_secret_file_is_not_quoted(tmp_path, content, command):
    secret = tmp_path / "shadow"
    secret.write_text(content)
    file = tmp_path / "stacks.yaml"
    file.symlink_to(secret)
    res = run(command, file)
    assert res.code == 2, res.output
    assert SECRET not in res.output, res.output
    assert "Traceback" not in res.output and "internal error" not in res.output
    assert unruled(res.err).startswith(f"spec error: {file}"), res.err


def test_a_link_to_a_shadow_file_whose_line_is_a_key_is_not_quoted(tmp_path):
    secret = tmp_path / "shadow"
    secret.write_text(f"root:$6${SECRET}$abcdefgh:19000:0:99999:7:::\n")
    file = tmp_path / "stacks.yaml"
    file.symlink_to(secret)
    res = run_cli("check", "-f", file)
    assert res.code == 2 and SECRET not in res.output, res.output


# -- 5. YAML 1.1 scalars that change meaning ---------------------------------------------------------

@pytest.mark.parametrize("old, new, key, reason", [
    ('env: {A: "1"}', "env: {A: off}  # <==", "runtimes.env.params.env.A", "unquoted off is a boolean"),
    ('env: {A: "1"}', "env: {A: Yes}  # <==", "runtimes.env.params.env.A", "unquoted Yes is a boolean"),
    ('env: {A: "1"}', "env: {A: n}  # <==", "runtimes.env.params.env.A", "unquoted n is a boolean"),
    ('env: {A: "1"}', 'env: {ON: "1"}  # <==', "runtimes.env.params.env", "unquoted ON is a boolean"),
    ('env: {A: "1"}', 'env: {true: "1"}  # <==', "runtimes.env.params.env", "the key true is read by YAML as a boolean"),
    ('version: "0.19.5"', "version: 0.10  # <==", "layers.ds.params.version", "unquoted '0.10' is read by YAML as a number (0.1)"),
    ('version: "0.19.5"', "version: 1.10  # <==", "layers.ds.params.version", "(1.1)"),
    ('python: "3.11.2"', "python: 3.10  # <==", "bases.deb.provides.python", "(3.1)"),
    ("    kind: runtime-env", "    kind: yes  # <==", "runtimes.env.kind", "unquoted yes is a boolean"),
    ('env: {A: "1"}', "env: {A: 0755}  # <==", "runtimes.env.params.env.A", "read by YAML 1.1 as a number (493)"),
    ('env: {A: "1"}', "env: {A: 1:30}  # <==", "runtimes.env.params.env.A", "read by YAML 1.1 as a number (90)"),
    ('env: {A: "1"}', "env: {A: 1_000}  # <==", "runtimes.env.params.env.A", "(1000)"),
    ('env: {A: "1"}', "env: {A: 0x10}  # <==", "runtimes.env.params.env.A", "(16)"),
    ('env: {A: "1"}', "env: {A: " + "1" * 5000 + "}  # <==", "runtimes.env.params.env.A", "read by YAML 1.1 as a number"),
])
def test_yaml11_scalars_are_refused_with_a_hint_to_quote(write, old, new, key, reason):
    assert old in VALID
    new = new.replace("  # <==", "")
    text = VALID.replace(old, new, 1)
    line = next(i for i, ln in enumerate(text.split("\n"), 1) if new in ln)
    file = write(text)
    refused(run_cli("check", "-f", file), file, reason, line, key, hint="quote it")


def test_true_false_ints_and_quoted_values_still_read(write):
    text = VALID.replace('env: {A: "1"}', 'env: {A: "off", B: "0.10", "ON": "yes", C: "3.10"}')
    text = text.replace('version: "0.19.5"', "version: 0.19")    # a float that keeps its text
    file = write(text)
    res = run_cli("check", "-f", file)
    assert res.code == 0, res.output
    doc = yamlsrc.load_file(file)
    assert doc.data["runtimes"]["env"]["params"]["env"] == {"A": "off", "B": "0.10", "ON": "yes", "C": "3.10"}
    assert doc.data["version"] == 1
    booleans = yamlsrc.load_text("a: true\nb: False\nc: TRUE\nd: 2024-01-01\ne: ~\nf: 0\n", "x.yaml").data
    assert booleans == {"a": True, "b": False, "c": True, "d": "2024-01-01", "e": None, "f": 0}


# -- 6. extends chains -------------------------------------------------------------------------------

def test_a_long_extends_chain_loads(write):
    chain = "".join(f"  c{i}:\n    extends: {'s1' if i == 0 else f'c{i - 1}'}\n" for i in range(1000))
    file = write(VALID + chain)
    res, seconds = timed("check", "-f", file)
    assert res.code == 0, res.output[-2000:]
    assert seconds < 30, seconds
    from builder.load.spec import load_spec
    spec = load_spec(file)
    assert spec.stacks["c999"].chain == spec.stacks["s1"].chain


def test_a_long_extends_cycle_is_refused_naming_the_loop(write):
    cycle = "".join(f"  c{i}:\n    extends: c{(i + 1) % 1000}\n" for i in range(1000))
    file = write(VALID + cycle)
    res = run_cli("check", "-f", file)
    loop = " -> ".join(f"c{i}" for i in range(1000)) + " -> c0"
    refused(res, file, f"stacks extend each other in a cycle: {loop}", key="stacks.c999.extends",
            line=VALID.count("\n") + 2 * 999 + 2)
