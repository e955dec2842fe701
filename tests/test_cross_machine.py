"""analysis.cross_machine: a re-run's metrics against the committed ones, tolerance from the seed spread."""

import json
import statistics

import pytest

from analysis.cross_machine import cross_machine_check, lookup, main


def _write(root, profile, rel, data):
    path = root / "metrics" / profile / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


@pytest.fixture()
def repo(tmp_path):
    # the committed world value 0.60 and its seeds' 0.62 / 0.57: sd 0.0252, tolerance 3 x sd = 0.0755
    for profile, acc in (("world", 0.60), ("world_seed1", 0.62), ("world_seed2", 0.57)):
        _write(tmp_path, profile, "evaluate/sugarcrepe/clip.json", {"metrics": {"micro": acc, "R@1": 0.3}})
    return tmp_path


def test_within_outside_and_the_seed_spread(repo):
    tol = 3 * statistics.stdev([0.60, 0.62, 0.57])
    assert tol == pytest.approx(0.07550, abs=1e-5)
    diff = {"metrics/world/evaluate/sugarcrepe/clip.json": {"metrics.micro": {"old": 0.60, "new": 0.65, "diff": 0.05}}}
    res = cross_machine_check(diff, "world", ["world_seed1", "world_seed2"], repo)
    assert res["passed"] and res["within"] == 1 and res["compared"] == 1 and res["outside"] == []
    moved = {"metrics/world/evaluate/sugarcrepe/clip.json": {"metrics.micro": {"old": 0.60, "new": 0.68, "diff": 0.08}}}
    res = cross_machine_check(moved, "world", ["world_seed1", "world_seed2"], repo)
    assert not res["passed"] and res["within"] == 0
    (row,) = res["outside"]
    assert row["key"] == "metrics.micro" and row["diff"] == pytest.approx(0.08)
    assert row["tolerance"] == pytest.approx(tol) and row["spread_n"] == 3
    # k = 4 widens it past 0.08
    assert cross_machine_check(moved, "world", ["world_seed1", "world_seed2"], repo, k=4)["passed"]
    # equal seeds: the floor is the tolerance
    assert cross_machine_check({"metrics/world/evaluate/sugarcrepe/clip.json": {
        "metrics.R@1": {"old": 0.3, "new": 0.304, "diff": 0.004}}}, "world", ["world_seed1", "world_seed2"],
        repo)["within"] == 1


def test_data_stages_text_values_missing_spread_and_other_code(repo):
    diff = {"metrics/world/corpus.json": {"n_images": {"old": 6000, "new": 6001, "diff": 1}},
            "metrics/world/concreteplant/hc.json": {"skipped.x": {"old": 0, "new": 2, "diff": 2}},
            "metrics/world/positive_control.json": {"status": {"old": "passed", "new": "failed"},
                                                    "models.hc-infonce.gain": {"old": 3.0, "new": 9.0, "diff": 6.0},
                                                    "models.hc-infonce.verdict": {"old": None, "new": "failed"}},
            "metrics/world/train/base.json": {"base.train.wall_s": {"old": 80.0, "new": 60.0, "diff": -20.0}},
            "metrics/real/corpus.json": {"n_images": {"old": 1, "new": 2, "diff": 1}}}  # another profile: ignored
    res = cross_machine_check(diff, "world", ["world_seed1", "world_seed2"], repo)
    assert not res["passed"]
    assert [(r["file"], r["key"]) for r in res["exact_moved"]] == [
        ("metrics/world/concreteplant/hc.json", "skipped.x"), ("metrics/world/corpus.json", "n_images")]
    assert [r["key"] for r in res["outside"]] == ["status"]  # a verdict that flipped
    assert [r["key"] for r in res["unjudged"]] == ["models.hc-infonce.gain"]  # no seed holds it: no spread
    assert [r["key"] for r in res["keys_differ"]] == ["models.hc-infonce.verdict"]
    assert res["ignored"] == 1 and res["compared"] == 2
    with pytest.raises(ValueError, match="k and floor must be finite"):
        cross_machine_check(diff, "world", [], repo, k=-1)


def test_lookup_walks_keys_with_dots():
    data = {"metrics": {"by_tag": {"tag.Noun": {"image": 0.25}}, "world": {"i2t": {"R@1": 0.5}}}}
    assert lookup(data, "metrics.by_tag.tag.Noun.image") == 0.25
    assert lookup(data, "metrics.world.i2t.R@1") == 0.5
    assert lookup(data, "metrics.nothing") is None and lookup(None, "a") is None


def test_cli_exit_status_on_a_perturbed_metrics_file(repo, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(repo)
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"metrics/world/evaluate/sugarcrepe/clip.json": {
        "metrics.micro": {"old": 0.60, "new": 0.61, "diff": 0.01}}}))
    assert main(["--rev", "abc", "--diff-json", str(good)]) == 0
    bad = tmp_path / "bad.json"  # the same file perturbed by 0.2
    bad.write_text(json.dumps({"metrics/world/evaluate/sugarcrepe/clip.json": {
        "metrics.micro": {"old": 0.60, "new": 0.80, "diff": 0.20}}}))
    assert main(["--rev", "abc", "--diff-json", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "1 outside" in out and "OUTSIDE metrics/world/evaluate/sugarcrepe/clip.json metrics.micro: 0.6 -> 0.8" in out
