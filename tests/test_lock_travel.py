"""Issue 36, without an engine: what a lock entry states of the environment pip resolved in, how a change of it
is named, the lock in generated CI (a first `lock --check` job, --require-locked builds, each of them a
site's to turn off), and the imgbuild version a pipeline pins. The engine half (a base made again keeps its
lock; another package in it is named and builds nothing; gitlab-ci-local stops at a stale lock) is in
test_docker_intent.py and test_docker_gitlab.py."""
from __future__ import annotations

import pytest
import yaml

from builder.core.lockfile import load_lock, parse_lock
from builder.errors import SpecError
from builder.ship.measure import environment, environment_change
from conftest import REPO, run_cli, shipped_data, write_stacks


def test_an_environment_is_the_os_the_python_and_every_distribution():
    env = environment({"os": "debian-12", "python": "3.11.2", "dists": {"numpy": "2.1.0", "pip": "23.0.1"}})
    assert env == {"os": "debian-12", "python": "3.11.2", "dists": ["numpy==2.1.0", "pip==23.0.1"]}
    # A base without Python (the mirrored Debian base): its OS alone, and no list
    assert environment({"os": "debian-12"}) == {"os": "debian-12", "python": None}


def test_a_change_of_environment_is_named_item_by_item():
    was = {"os": "debian-12", "python": "3.11.2", "dists": ["numpy==2.1.0", "pip==23.0.1", "six==1.16.0"]}
    assert environment_change(was, dict(was)) == []
    now = {"os": "debian-12", "python": "3.11.9", "dists": ["extra==1.0", "numpy==2.2.0", "pip==23.0.1"]}
    assert environment_change(was, now) == ["Python 3.11.2 -> 3.11.9", "numpy 2.1.0 -> 2.2.0",
                                            "+extra==1.0 (not there when locked)", "-six==1.16.0 (gone)"]
    assert environment_change({"os": "debian-12", "python": None}, {"os": "ubuntu-24.04", "python": "3.12.3"}) == \
        ["OS debian-12 -> ubuntu-24.04", "Python none -> 3.12.3"]


def test_the_shipped_lock_records_the_environments_it_stands_for():
    lock = load_lock(REPO / "stacks.yaml")
    base = lock.bases["debian-bookworm"]
    assert base.platforms["linux/amd64"].environment == {"os": "debian-12", "python": None}
    for name in ("cpu-torch-2.13", "ds-0.19.8-cpu", "smoke-train"):
        env = lock.python[name].environment
        assert env["python"] == "3.11.2" and env["platform"] == "linux/amd64" and env["beneath"], name
    # What the layers beneath installed is what the one above was resolved on.
    torch = {f"{d.name}=={d.version}" for d in lock.python["cpu-torch-2.13"].dists().values()}
    assert "torch==2.13.0+cpu" in torch and "torch==2.13.0+cpu" in lock.python["ds-0.19.8-cpu"].environment["beneath"]


# Every stacks file whose stacks build here, and those stacks (the examples/real recipes and the GPU stacks of the
# examples stand on NGC or Docker Hub bases, which this machine cannot pull or lock).
BUILDS_HERE = [("stacks.yaml", ["cpu-smoke"]), ("examples/jax/stacks.yaml", ["jax-cpu"]),
               ("examples/cuda-pypi/stacks.yaml", ["h100-pypi-deepspeed", "a100-h100-pypi-deepspeed",
                                                   "h100-pypi-megatron"])]


@pytest.mark.parametrize("file, names", BUILDS_HERE, ids=[f for f, _ in BUILDS_HERE])
def test_every_stack_that_builds_here_ships_its_lock_and_it_is_current(file, names):
    """What `lock --check stack=...` judges from the files (no registry): no stale entry, and every pip layer of
    those stacks has an entry for its chain, so `build --require-locked` builds them. Fails as soon as an edit
    to a layer, a kind or Dockerfile.j2 is committed without the lock made again."""
    from builder.load.intent import Intents
    from builder.load.spec import load_spec
    from builder.plan.stale import stale_entries
    from builder.prepared import prepare
    from builder.rules.review import unpinned
    path = REPO / file
    assert path.with_name("stacks.lock.yaml").is_file(), f"{file} ships no lock"
    spec = load_spec(path, intents=Intents(accept=True, lock_file="stacks.lock.yaml", pinned_by_lock=True))
    assert stale_entries(spec) == []
    prepared = prepare(spec, [spec.stacks[n] for n in names])
    assert [f"{f.key}: {f.message}" for f in unpinned(spec, prepared.plan, list(prepared.stacks), "error")] == []


@pytest.mark.parametrize("bad, words", [
    ({"os": "debian-12", "dists": "numpy==1"}, "environment is not a mapping with a dists list"),
    ({"os": "debian-12", "dists": ["numpy"]}, "is not NAME==VERSION"),
    ("debian-12", "environment is not a mapping"),
])
def test_a_malformed_environment_is_refused_naming_the_lock_file(tmp_path, bad, words):
    data = {"version": 1, "bases": {"b": {"image": "r/x:1", "digest": "sha256:" + "a" * 64, "probed": "t",
                                          "facts": {}, "environment": bad}}}
    with pytest.raises(SpecError, match=words) as err:
        parse_lock(data, tmp_path / "stacks.lock.yaml")
    assert err.value.file == str(tmp_path / "stacks.lock.yaml")


def _pipeline(tmp_path, cli, system: str, ci: dict) -> tuple[dict, str]:
    data = shipped_data()
    data["stacks"] = {"cpu-smoke": data["stacks"]["cpu-smoke"]}
    data["site"]["ci"] = ci
    res = cli("ci", system, "--all", "--offline", "-f", str(write_stacks(tmp_path / system, data, lock=True)))
    assert res.code == 0, res.output
    return yaml.safe_load(res.out), res.out


@pytest.mark.parametrize("system", ["gitlab", "github"])
def test_a_site_may_turn_the_lock_jobs_off_and_the_file_says_so(cli, tmp_path, system):
    doc, text = _pipeline(tmp_path, cli, system, {})
    jobs = doc if system == "gitlab" else doc["jobs"]
    assert "lock-check" in jobs and "site.ci.lock_check" not in text and "site.ci.require_locked" not in text
    doc, text = _pipeline(tmp_path, cli, system, {"lock_check": False, "require_locked": False})
    jobs = doc if system == "gitlab" else doc["jobs"]
    scripts = "\n".join(str(j.get("script") or j.get("steps")) for j in jobs.values() if isinstance(j, dict))
    assert "lock-check" not in jobs and "--require-locked" not in scripts and "--require-locked" in text
    assert "# imgbuild: site.ci.lock_check: false: no job runs `imgbuild lock --check`" in text
    assert "# imgbuild: site.ci.require_locked: false: node jobs build without --require-locked" in text
    # Node jobs at the bottom of a chain then need nothing (GitHub: the self-check)
    first = next(j for name, j in jobs.items() if name.startswith("node-cpu-torch"))
    assert first["needs"] == ([] if system == "gitlab" else ["workflow-current"])


@pytest.mark.parametrize("value", ["no", 0, [True]])
def test_the_lock_settings_take_true_or_false_only(tmp_path, value):
    data = shipped_data()
    data["site"]["ci"] = {"require_locked": value}
    res = run_cli("check", "stack=cpu-smoke", "-f", write_stacks(tmp_path, data))
    assert res.code == 2 and "site.ci.require_locked" in res.err and "expected true or false" in res.err, res.output


def test_a_runner_with_another_imgbuild_is_refused(monkeypatch):
    """The pipeline's IMGBUILD_REQUIRE_VERSION: every command refuses under another version, before it does anything."""
    from builder import __version__
    monkeypatch.setenv("IMGBUILD_REQUIRE_VERSION", "0.0.1-not-this")
    for _ in range(2):
        res = run_cli("plan", "--offline", "-f", REPO / "stacks.yaml")
        assert res.code == 2 and f"this pipeline pins imgbuild 0.0.1-not-this (IMGBUILD_REQUIRE_VERSION) and the " \
                                  f"runner has imgbuild {__version__}" in res.err, res.output
        assert res.out == ""
    monkeypatch.setenv("IMGBUILD_REQUIRE_VERSION", __version__)
    assert run_cli("plan", "--offline", "-f", REPO / "stacks.yaml").code == 0


def test_lock_check_for_named_stacks_wants_every_pip_layer_locked():
    """CI's lock job names the pipeline's stacks: a pip layer of theirs without an entry is what the node jobs'
    --require-locked refuses, so the first job says it. The NGC stacks cannot be locked here (nvcr.io is not
    reachable): their DeepSpeed layer is named; the file as a whole, and cpu-smoke, are current."""
    for _ in range(2):
        res = run_cli("lock", "--check", "stack=h100-megatron", "-f", REPO / "stacks.yaml")
        assert res.code == 1 and "stale: python.ds-0.19.5-hopper: layer ds-0.19.5-hopper installs with pip and its " \
                                  "set is not locked" in res.out, res.output
    plain = run_cli("lock", "--check", "-f", REPO / "stacks.yaml")
    assert "python.ds-0.19.5-hopper" not in plain.out, plain.output
    res = run_cli("lock", "--check", "base=debian-bookworm", "-f", REPO / "stacks.yaml")
    assert res.code == 2 and "name the stacks whose pip layers must all be locked as stack=NAME" in res.err


@pytest.mark.parametrize("edit, holds", [
    # What only a check reads: the project's smoke command; the runtime's expected variables are not pip's.
    (lambda d: d["projects"]["smoke-train"]["params"].update(smoke="python -m smoke_train --steps 3"), True),
    (lambda d: d["stacks"]["cpu-smoke"].update(tags=["{stack}"]), True),
    # What builds a layer: its source commit, its packages, a layer beneath it.
    (lambda d: d["projects"]["smoke-train"]["params"]["source"].update(commit="0" * 40), False),
    (lambda d: d["stacks"]["cpu-smoke"].update(cpu_baseline="x86-64-v3"), False),
])
def test_an_entry_holds_while_what_builds_its_layer_is_unchanged(tmp_path, edit, holds):
    """A lock entry stands for the layer as it builds (its rendered Dockerfile and inputs, and those beneath
    it), not for every parameter: a check's argument changed keeps the sets locked (before, a copy of the
    shipped stacks with another smoke command planned every pip layer unlocked); a build input changed makes
    the layer it builds, and those above, stale."""
    from builder.load.spec import load_spec
    from builder.plan.keys import make_plan
    from builder.plan.stale import stale_entries
    data = shipped_data()
    edit(data)
    spec = load_spec(write_stacks(tmp_path, data, lock=True))
    stale = [line for line in stale_entries(spec) if line.startswith("python.")]
    plan = make_plan(spec, ["cpu-smoke"], {"debian-bookworm": "sha256:" + "ab" * 32}, intent=True)
    locked = [n.name for n in plan.chain("cpu-smoke") if n.locked]
    if holds:
        assert stale == [] and locked == ["cpu-torch-2.13", "ds-0.19.8-cpu", "smoke-train"], (stale, locked)
    else:
        assert stale and "smoke-train" not in locked, (stale, locked)
