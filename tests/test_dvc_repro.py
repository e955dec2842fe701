"""End to end: `dvc repro` of the world pipeline on a shrunken copy of the committed params (tiny world, one short
epoch) in a temp clone; then what each kind of edit makes stale, and byte-identical outputs in another folder."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from concrete_jungle.params import load_params

REPO = Path(__file__).resolve().parents[1]

# Only sizes shrink; everything else is the committed params.yaml.
SHRINK = {
    "corpus": {"n_scenes": 240},
    "benchmark": {"n_per_subset": 12},
    "base_model": {"epochs": 1, "batch_size": 32, "log_every": 2},
    "train": {"batch_size": 16, "max_steps": 3, "log_every": 1},
    "evaluate": {"batch_size": 64},
    "dataset_stats": {"max_records": 24, "batch_size": 24},
    "gradient_ratio": {"batch_sizes": [4, 16], "max_pairs": 64, "n_batches": 2},
}


def _deep_update(d, u):
    for k, v in u.items():
        if isinstance(v, dict) and isinstance(d.get(k), dict):
            _deep_update(d[k], v)
        else:
            d[k] = v
    return d


def _copy_repo(dst: Path) -> None:
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split("\n")
    for rel in filter(None, files):
        src = REPO / rel
        if not src.is_file() or rel.startswith(("metrics/", "reports/")) or rel.endswith("dvc.lock"):
            continue
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst / rel)


def _env():
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    env.update(GIT_AUTHOR_NAME="ci", GIT_AUTHOR_EMAIL="ci@example.invalid", GIT_COMMITTER_NAME="ci",
               GIT_COMMITTER_EMAIL="ci@example.invalid")
    return env


def _run(cmd, cwd, env=None):
    proc = subprocess.run(cmd, cwd=cwd, env=env or _env(), capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout + proc.stderr


def _stale(work: Path) -> set[str]:
    """Stages of the world pipeline whose code, data or params differ from the lock."""
    return set(json.loads(_run(["dvc", "status", "--json", "dvc.yaml"], work) or "{}"))


@pytest.mark.slow
def test_dvc_repro_world_end_to_end(tmp_path):
    work = tmp_path / "repo"
    work.mkdir()
    _copy_repo(work)
    params = yaml.safe_load((work / "params.yaml").read_text())
    (work / "params.yaml").write_text(yaml.safe_dump(_deep_update(params, SHRINK), sort_keys=False))
    load_params(work / "params.yaml")  # the shrunken config is still valid
    _run(["git", "init", "-q"], work)
    _run(["git", "add", "-A"], work)
    _run(["git", "commit", "-q", "-m", "shrunken copy"], work)
    _run(["dvc", "repro"], work)

    t = params["train"]
    labels = ["base", *t["baselines"]] + [f"{d}-{loss}" for d in t["datasets"]
                                         for loss in t["losses"] + t["margin_losses"]]
    subsets = {"add_att", "add_obj", "replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj"}
    for label in labels:
        res = json.loads((work / "metrics/world/evaluate" / f"{label}.json").read_text())
        assert set(res["subsets"]) == subsets
        assert 0.0 <= res["macro_accuracy"] <= 1.0
        assert res["n_items"] == 12 * 7
    for d in params["concreteplant"]["datasets"]:
        stats = json.loads((work / f"metrics/world/concreteplant/{d}.json").read_text())
        assert stats["n_kept"] > 0.5 * stats["n_anchors"], stats
    table = (work / "reports/world/sugarcrepe.md").read_text()
    assert all(label in table for label in labels)
    assert (work / "reports/world/gradient_ratio.png").stat().st_size > 1000
    assert (work / "reports/world/gradient_ratio_study.png").stat().st_size > 1000
    study = json.loads((work / "metrics/world/gradient_ratio.json").read_text())
    assert {r["loss"] for r in study["rows"]} >= {"infonce", "cement", "static_margin=1"}
    assert "D_hc" in (work / "reports/world/table1.md").read_text()
    for d in params["concreteplant"]["datasets"]:
        ds = json.loads((work / f"metrics/world/dataset_stats/{d}.json").read_text())
        assert 1.0 <= ds["mean_c"] <= 5.0
    again = _run(["dvc", "repro"], work)
    assert "up to date" in again.lower(), again
    assert not list(work.rglob("pipelines/*/dvc.lock")), "a bare dvc repro ran another profile's pipeline"
    _run(["git", "add", "-A"], work)
    _run(["git", "commit", "-q", "-m", "world run"], work)

    # the lineage check passes on the fresh lock (the spec of the shrunken params is the committed one)
    _run([sys.executable, "-m", "concrete_jungle.lineage", "check", "--repo", str(work)], work)

    # 1. another profile's params: nothing of the world pipeline is stale
    real = yaml.safe_load((work / "pipelines/real/params.yaml").read_text())
    real["train"]["lr"] = 1e-3
    (work / "pipelines/real/params.yaml").write_text(yaml.safe_dump(real, sort_keys=False))
    assert _stale(work) == set()

    # 2. margin.tau (what `dvc exp run -S margin.tau=0.3` writes): only the margin trainings and the ratio study
    changed = yaml.safe_load((work / "params.yaml").read_text())
    changed["margin"]["tau"] = 0.3
    (work / "params.yaml").write_text(yaml.safe_dump(changed, sort_keys=False))
    margin_runs = {f"train_margin@{d}-{loss}" for d in t["datasets"] for loss in t["margin_losses"]}
    assert _stale(work) == margin_runs | {"gradient_ratio"}
    _run(["git", "checkout", "--", "params.yaml", "pipelines/real/params.yaml"], work)

    # 3. an evaluation module: only the stages that run it (benchmark preparation and scoring)
    module = work / "src/concrete_jungle/evaluation/sugarcrepe_pp.py"
    module.write_text(module.read_text() + "\n# an edit\n")
    evaluations = {"evaluate_base", *(f"evaluate_baseline@{b}" for b in t["baselines"])} | {
        f"evaluate@{d}-{loss}" for d in t["datasets"] for loss in t["losses"]} | {
        f"evaluate_margin@{d}-{loss}" for d in t["datasets"] for loss in t["margin_losses"]}
    assert _stale(work) == evaluations | {"benchmark"}
    ran = _run(["dvc", "repro"], work)
    ran_stages = {line.split("'")[1] for line in ran.splitlines() if line.startswith("Running stage")}
    assert ran_stages == evaluations | {"benchmark"}, ran  # same outputs: the report is not re-run
    _run(["git", "checkout", "--", "src/concrete_jungle/evaluation/sugarcrepe_pp.py"], work)
    _run(["dvc", "repro"], work)

    # 4. byte-identical outputs wherever the clone lives: re-make corpus and base model in another folder
    other = tmp_path / "elsewhere" / "clone"
    shutil.copytree(work, other, symlinks=True)

    def outs(repo: Path) -> dict:
        lock = yaml.safe_load((repo / "dvc.lock").read_text())["stages"]
        return {name: [(o["path"], o["md5"]) for o in lock[name]["outs"]] for name in ("corpus", "base_model")}

    before = outs(other)
    _run(["dvc", "repro", "-f", "-s", "corpus"], other)
    _run(["dvc", "repro", "-f", "-s", "base_model"], other)
    assert outs(other) == before
