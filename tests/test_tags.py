"""Issue 36 (6): tags that say what they hold. {project_commit} (the short commit of the stack's one project),
a date format ({date:%Y%m%d}), and a check warning (IB005) for a version field nothing declares before the
build, which plan and diff can only print unfilled."""
from __future__ import annotations

import datetime as dt
import json

import pytest

from builder.errors import SpecError
from builder.load import tags
from builder.load.spec import load_spec
from builder.ship.publish import PublishError, release_tags
from conftest import REPO, run_cli, shipped_data, write_stacks

MEGATRON_0_16 = "3bec9aa97dda898d16ff5a89bac0ed2b6682b172"


def test_a_date_takes_a_format_and_the_project_its_commit():
    fixed = {"project_commit": MEGATRON_0_16[:12]}
    got = release_tags(["{stack}-{date}", "{stack}-{date:%Y%m%d}", "{stack}-mcore{megatron}-{project_commit}"],
                       "h100", {"megatron": "0.16.0"}, "2026-12-05", fixed)
    assert got == ["h100-2026.12.05", "h100-20261205", "h100-mcore0.16.0-3bec9aa97dda"]
    assert release_tags(["{date:%Y.%m}"], "s", {}, dt.date(2026, 1, 9)) == ["2026.01"]
    with pytest.raises(PublishError, match="needs project_commit"):
        release_tags(["{stack}-{project_commit}"], "s", {}, "2026.12.05", {"project_commit": None})


@pytest.mark.parametrize("given", ["2026.12.05", "2026-12-05", "20261205"])
def test_a_release_date_is_read_in_three_spellings(given):
    assert tags.parse_date(given) == dt.date(2026, 12, 5)


@pytest.mark.parametrize("given", ["2026.13.01", "yesterday", "05/12/2026", ""])
def test_a_date_that_is_no_day_is_refused(given):
    with pytest.raises(ValueError, match="is not a date: give YYYY.MM.DD"):
        tags.parse_date(given)


def _megatron_stack(tmp_path, tag: str, edit=lambda data: None):
    data = shipped_data()
    data["stacks"]["h100-megatron"]["tags"] = [tag]
    edit(data)
    return write_stacks(tmp_path, data, lock=True)


@pytest.mark.parametrize("tag, words", [
    ("{stack}-{date:%B}", "%B cannot be used in a tag"),
    ("{stack}-{date:%Y/%m}", "a tag holds only letters"),
    ("{stack}-{date:}", "an empty date format"),
    ("{stack}-{torch:%Y}", "only {date} takes a format"),
    ("{stack}-{projectcommit}", "unknown tag field {projectcommit} (did you mean 'project_commit'?)"),
])
def test_a_bad_field_or_format_is_refused_at_its_key(tmp_path, tag, words):
    file = _megatron_stack(tmp_path, tag)
    for _ in range(2):
        with pytest.raises(SpecError) as err:
            load_spec(file)
        assert words in err.value.render() and "stacks.h100-megatron.tags[0]" in err.value.render(), err.value.render()


def test_project_commit_needs_exactly_one_project(tmp_path):
    def two(data):
        data["projects"]["mcore-next"] = data["projects"]["megatron-core-0.17"]
        data["stacks"]["h100-megatron"]["project"] = ["megatron-core-0.16", "smoke-train"]
    with pytest.raises(SpecError, match="has 2: megatron-core-0.16, smoke-train"):
        load_spec(_megatron_stack(tmp_path / "two", "{stack}-{project_commit}", two))

    def none(data):
        data["stacks"]["cpu-smoke"].pop("project")
        data["stacks"]["cpu-smoke"]["tags"] = ["{stack}-{project_commit}"]
    with pytest.raises(SpecError, match="stack 'cpu-smoke' has none"):
        load_spec(_megatron_stack(tmp_path / "none", "{stack}", none))
    # The twin: one project, and the tag is the stacks file's to fill.
    spec = load_spec(_megatron_stack(tmp_path / "one", "{stack}-{project_commit}"))
    assert tags.spec_values(spec.stack("h100-megatron"))["project_commit"] == MEGATRON_0_16[:12]


def _unknown_commit(data):
    params = data["projects"]["megatron-core-0.16"]["params"]
    params["source"]["commit"] = "a" * 40   # a commit the catalog does not know
    params.pop("version")                    # and nothing declares which megatron-core it is


def test_check_warns_of_a_field_not_known_before_the_build(tmp_path):
    tag = "{stack}-mcore{megatron}"
    unknown = _megatron_stack(tmp_path / "unknown", tag, _unknown_commit)
    for _ in range(2):
        res = run_cli("check", "stack=h100-megatron", "--json", "-f", unknown)
        found = [f for f in json.loads(res.out)["findings"] if f["rule"] == "IB005"]
        assert len(found) == 1 and found[0]["severity"] == "warning" and found[0]["key"] == "stacks.h100-megatron.tags[0]" \
            and "{megatron} is not known before the build" in found[0]["message"], res.output
    # The twin: the version declared (the shipped project): no IB005.
    known = _megatron_stack(tmp_path / "known", tag)
    res = run_cli("check", "stack=h100-megatron", "--json", "-f", known)
    assert not [f for f in json.loads(res.out)["findings"] if f["rule"] == "IB005"], res.output
    # {project_commit} and {date:...} are always known: no warning.
    dated = _megatron_stack(tmp_path / "dated", "{stack}-{date:%Y%m%d}-{project_commit}", _unknown_commit)
    res = run_cli("check", "stack=h100-megatron", "--json", "-f", dated)
    assert not [f for f in json.loads(res.out)["findings"] if f["rule"] == "IB005"], res.output


def test_a_bad_release_date_stops_before_anything_is_built(tmp_path):
    for _ in range(2):
        res = run_cli("build", "stack=cpu-smoke", "--date", "2026-13-40", "-f", REPO / "stacks.yaml")
        assert res.code == 2 and "--date '2026-13-40' is not a date" in res.err, res.output
    res = run_cli("release", "stack=cpu-smoke", "--date", "tomorrow", "-f", REPO / "stacks.yaml")
    assert res.code == 2 and "is not a date" in res.err, res.output


def test_diff_shows_a_new_commit_as_a_new_tag_where_the_version_alone_would_move_one(tmp_path, monkeypatch):
    """Two commits of a project that declare one version: a `-ds{deepspeed}` tag moves from one to the other,
    a `-{project_commit}` tag is created beside the one before."""
    from builder.diff.specdiff import diff_revisions
    from test_specdiff import PIN_V1, PIN_V2, commit, edit, site_repo
    root = site_repo(tmp_path / "site", "base")

    def templates(d):
        d["stacks"]["cpu-smoke"]["tags"] = ["{stack}-ds{deepspeed}", "{stack}-{date:%Y%m%d}-{project_commit}"]
    edit(root, templates)
    commit(root, "tags")
    edit(root, lambda d: d["projects"]["smoke-train"]["params"]["source"].update(commit=PIN_V2))
    commit(root, "pin")
    monkeypatch.setattr(tags, "today", lambda: dt.date(2026, 12, 5))   # one day, even across midnight
    day = "20261205"
    for _ in range(2):
        smoke = next(s for s in diff_revisions(root / "stacks.yaml", "tags", "pin", offline=True).stacks
                     if s.name == "cpu-smoke")
        repo = "127.0.0.1:5000/imgbuild/cpu-smoke:"
        assert smoke.tags == (f"{repo}cpu-smoke-ds0.19.8", f"{repo}cpu-smoke-{day}-{PIN_V2[:12]}")
        assert smoke.moved == (f"{repo}cpu-smoke-ds0.19.8",) and smoke.created == (f"{repo}cpu-smoke-{day}-{PIN_V2[:12]}",)
        assert PIN_V1[:12] not in "".join(smoke.tags)
