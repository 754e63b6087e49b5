"""The tiny stack family: the smallest real stacks on the real engine and registry, for the promises that do
not depend on torch (keys, reuse, release gating, races, faults, locks, downloads, diff, platforms, progress).

A tiny stack is the mirrored Debian base, a layer of the test's own kind (`tiny-env`: Debian's python3 and a
venv, then pinned packages) and whatever layer a test puts above it. Its packages are wheels and sdists the
tests make themselves and serve from a package index on the host's loopback (builds reach it with the host
network): pure-Python wheels written byte for byte the same every time, and a C extension whose sdist carries
its own standard-library build backend (the index has no setuptools), compiled by the image's cc in a second.
A first build of a tiny stack takes seconds where cpu-smoke's takes minutes (torch and DeepSpeed's op
compile); the seed stack (cpu-smoke) stays for what needs real torch and DeepSpeed.
"""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent

KIND = """description: A Python environment on the mirrored Debian image with pinned packages (the tests' own kind).
role: base
base_family: debian
provides: [python]
params:
  packages:
    type: requirements
    default: []
  apt:
    type: apt
    default: []
checks:
  - id: pip-check
    check: pip-check
"""
FRAGMENT = """{% import "macros.j2" as m %}
{{ m.apt(["python3", "python3-venv"] + (params.apt | list)) }}
{{ m.venv() }}
{% if params.packages %}
RUN {{ m.net() }}
    {{ m.net_env() }}
    python -m pip install --progress-bar off {{ params.packages | shjoin }}
{% endif %}
"""
# What compiling the C extension needs in the image.
COMPILER = ["gcc", "libc6-dev", "python3-dev"]
# Any build of a tiny stack reaches the loopback index through the host network.
NET = {"IMGBUILD_BUILD_NETWORK": "host"}


def wheel(folder: Path, name: str, version: str, requires: tuple = (), files: dict | None = None,
          tag: str = "py3-none-any") -> Path:
    """A wheel written byte for byte the same every time (fixed zip dates): its sha256 is stable, as an index's
    artifact is. Pure Python unless `files` adds others ({path in the wheel: bytes}, a compiled library) under
    a platform `tag` (py3-none-linux_x86_64)."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    purelib = "true" if tag.endswith("-any") else "false"
    body = {f"{dist}/__init__.py": f"__version__ = {version!r}\n".encode(),
            **{k: v for k, v in (files or {}).items()},
            f"{info}/METADATA": (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                 + "".join(f"Requires-Dist: {r}\n" for r in requires)).encode(),
            f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: imgbuild-test\nRoot-Is-Purelib: {purelib}\nTag: {tag}\n".encode()}
    record = []
    for path, data in body.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    body[f"{info}/RECORD"] = ("\n".join(record + [f"{info}/RECORD,,"]) + "\n").encode()
    out = folder / "files" / f"{dist}-{version}-{tag}.whl"
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w") as z:
        for path, data in body.items():
            z.writestr(zipfile.ZipInfo(path, date_time=(2026, 1, 1, 0, 0, 0)), data)
    return out


C_SOURCE = """#include <Python.h>
/* imgbuild's tiny C extension: a function, and the machine it was compiled for. */
static PyObject *add(PyObject *self, PyObject *args) {
    long a, b;
    if (!PyArg_ParseTuple(args, "ll", &a, &b)) return NULL;
    return PyLong_FromLong(a + b);
}
static PyObject *machine(PyObject *self, PyObject *args) {
#if defined(__x86_64__)
    return PyUnicode_FromString("x86_64");
#elif defined(__aarch64__)
    return PyUnicode_FromString("aarch64");
#else
    return PyUnicode_FromString("other");
#endif
}
static PyMethodDef methods[] = {
    {"add", add, METH_VARARGS, "a + b"}, {"machine", machine, METH_NOARGS, "the compiled-for machine"},
    {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tiny", NULL, -1, methods};
PyMODINIT_FUNC PyInit__tiny(void) { return PyModule_Create(&module); }
"""

C_BACKEND = '''"""A PEP 517 backend of the standard library alone (the tests' index has no setuptools): cc compiles
src/_tiny.c against the image's Python into a platform wheel. BUSY > 0 compiles it again, silently, until that
many seconds have passed: a long compile that prints nothing, as DeepSpeed's op builds do."""
import base64, hashlib, os, subprocess, sys, sysconfig, time, zipfile

NAME, VERSION, BUSY = {name!r}, {version!r}, {busy!r}
DIST = NAME.replace("-", "_")
INFO = DIST + "-" + VERSION + ".dist-info"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    os.makedirs("build", exist_ok=True)
    so = os.path.join("build", "_tiny" + suffix)
    argv = ["cc", "-shared", "-fPIC", "-O2", "-I", sysconfig.get_paths()["include"], "src/_tiny.c", "-o", so]
    print(" ".join(argv), flush=True)
    start = time.monotonic()
    subprocess.run(argv, check=True)
    while time.monotonic() - start < BUSY:
        subprocess.run(argv, check=True)
    py = "cp%d%d" % sys.version_info[:2]
    tag = py + "-" + py + "-" + sysconfig.get_platform().replace("-", "_").replace(".", "_")
    name, records = DIST + "-" + VERSION + "-" + tag + ".whl", []
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as z:
        def add(arc, data):
            z.writestr(arc, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            records.append(arc + ",sha256=" + digest + "," + str(len(data)))
        add(DIST + "/__init__.py", b"from ._tiny import add, machine\\n__version__ = " + repr(VERSION).encode() + b"\\n")
        add(DIST + "/_tiny" + suffix, open(so, "rb").read())
        add(INFO + "/METADATA", ("Metadata-Version: 2.1\\nName: " + NAME + "\\nVersion: " + VERSION + "\\n").encode())
        add(INFO + "/WHEEL", ("Wheel-Version: 1.0\\nGenerator: imgbuild-test\\nRoot-Is-Purelib: false\\nTag: " + tag
                              + "\\n").encode())
        z.writestr(INFO + "/RECORD", "\\n".join(records + [INFO + "/RECORD,,"]) + "\\n")
    return name


def build_sdist(sdist_directory, config_settings=None):
    raise RuntimeError("this sdist is built by the tests, not rebuilt")
'''


def c_sdist(folder: Path, name: str = "imgbuild-tiny-c", version: str = "1.0", busy: float = 0) -> Path:
    """The tiny C extension as an sdist (fixed tar times and owners: its sha256 is stable), whose build needs
    only cc and Python's headers in the image (tiny.COMPILER)."""
    dist = name.replace("-", "_")
    top = f"{dist}-{version}"
    files = {"pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n',
             "backend.py": C_BACKEND.format(name=name, version=version, busy=busy),
             "src/_tiny.c": C_SOURCE,
             "PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"}
    out = folder / "files" / f"{top}.tar.gz"
    out.parent.mkdir(parents=True, exist_ok=True)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{path}")
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    import gzip
    out.write_bytes(gzip.compress(raw.getvalue(), mtime=0))
    return out


def publish(root: Path) -> None:
    """The PEP 503 pages of every wheel and sdist under root/files (each link with its sha256, as PyPI gives it)."""
    by_name: dict = {}
    for f in sorted((root / "files").iterdir()):
        if f.name.endswith(".whl"):
            by_name.setdefault(f.name.split("-")[0].replace("_", "-"), []).append(f)
        elif f.name.endswith(".tar.gz"):
            by_name.setdefault(f.name[:-len(".tar.gz")].rsplit("-", 1)[0].replace("_", "-"), []).append(f)
    for name, artifacts in by_name.items():
        page = root / "simple" / name / "index.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text("<html><body>" + "".join(
            f'<a href="../../files/{a.name}#sha256={hashlib.sha256(a.read_bytes()).hexdigest()}">{a.name}</a>'
            for a in artifacts) + "</body></html>")


@pytest.fixture
def index(tmp_path, serve):
    """A package index on the host's loopback (builds reach it with the host network): demo-app 1.0,
    which asks for demo-dep>=1.0, demo-dep 1.0, and the tiny C extension 1.0. A test publishes more."""
    root = tmp_path / "index"
    wheel(root, "imgbuild-demo-app", "1.0", ("imgbuild-demo-dep>=1.0",))
    wheel(root, "imgbuild-demo-dep", "1.0")
    c_sdist(root)
    publish(root)
    return {"root": root, "url": serve(root) + "/simple"}


def served(root: Path):
    """A static file server for root on the host's loopback, for a module-scoped index (the `index` fixture
    is per test): yields {"root", "url"} (url: root/simple), stopped when the generator ends."""
    import functools
    import http.server
    import threading
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield {"root": root, "url": f"http://127.0.0.1:{server.server_address[1]}/simple"}
    server.shutdown()


def env_for_index(index: dict) -> dict:
    """The variables a build of a tiny stack needs: the loopback index instead of PyPI, the host network."""
    return {"IMGBUILD_PIP_INDEX_URL": index["url"], **NET}


def site(work: Path, name: str, namespace: str, above: list | None = None, *, packages: list | None = None,
         apt: list | None = None, platforms: list | None = None, tags: list | None = None) -> Path:
    """A stacks.yaml in work/name with the `tiny-env` kind beside it: stack `demo` is the mirrored Debian base
    and layer `demo` (python3, a venv, `packages`: demo-app 1.0 unless said), and with `above` a pip layer
    `plugin` over it with those requirements. `apt` adds Debian packages to `demo` (tiny.COMPILER to build the
    C extension); `platforms` makes it a stack of those platforms."""
    folder = work / name
    (folder / "layers" / "tiny-env").mkdir(parents=True)
    (folder / "layers" / "tiny-env" / "kind.yaml").write_text(KIND)
    (folder / "layers" / "tiny-env" / "fragment.j2").write_text(FRAGMENT)
    params: dict = {"packages": list(packages) if packages is not None else ["imgbuild-demo-app==1.0"]}
    if apt:
        params["apt"] = list(apt)
    data = {"version": 1, "site": {"registry": _registry(), "namespace": namespace},
            "bases": {"debian-bookworm": yaml.safe_load((ROOT / "stacks.yaml").read_text())["bases"]["debian-bookworm"]},
            "layers": {"demo": {"kind": "tiny-env", "params": params}},
            "stacks": {"demo": {"base": "debian-bookworm", "layers": ["demo"], "tags": list(tags or ["{stack}"])}}}
    if platforms:
        data["stacks"]["demo"]["platforms"] = list(platforms)
    if above:   # a pip layer above the demo environment, with these requirements
        data["layers"]["plugin"] = {"kind": "pip", "params": {"packages": above}}
        data["stacks"]["demo"]["layers"].append("plugin")
    (folder / "stacks.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return folder / "stacks.yaml"


def _registry() -> str:
    from e2e import REGISTRY
    return REGISTRY
