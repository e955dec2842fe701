"""End to end: `dvc repro` on a shrunken copy of the real params (tiny world, one short epoch) in a temp dir."""

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
        if not src.is_file() or rel.startswith(("metrics/", "reports/", "dvc.lock")):
            continue
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst / rel)


def _run(cmd, cwd, env):
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout + proc.stderr


@pytest.mark.slow
def test_dvc_repro_world_end_to_end(tmp_path):
    work = tmp_path / "repo"
    work.mkdir()
    _copy_repo(work)
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    (work / "params.yaml").write_text(yaml.safe_dump(_deep_update(params, SHRINK), sort_keys=False))
    load_params(work / "params.yaml")  # the shrunken config is still valid
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    env.update(GIT_AUTHOR_NAME="ci", GIT_AUTHOR_EMAIL="ci@example.invalid", GIT_COMMITTER_NAME="ci",
               GIT_COMMITTER_EMAIL="ci@example.invalid")
    _run(["git", "init", "-q"], work, env)
    _run(["git", "add", "-A"], work, env)
    _run(["git", "commit", "-q", "-m", "shrunken copy"], work, env)
    _run(["dvc", "repro"], work, env)

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
    again = _run(["dvc", "repro"], work, env)
    assert "up to date" in again.lower(), again

    # a margin-only change (what `dvc exp run -S margin.tau=0.3` writes) touches only margin-based stages
    changed = yaml.safe_load((work / "params.yaml").read_text())
    changed["margin"]["tau"] = 0.3
    (work / "params.yaml").write_text(yaml.safe_dump(changed, sort_keys=False))
    proc = subprocess.run(["dvc", "status", "--json"], cwd=work, env=env, capture_output=True, text=True, check=True)
    status = json.loads(proc.stdout)
    expected = {f"train_margin@{d}-{loss}" for d in t["datasets"] for loss in t["margin_losses"]}
    assert set(status) == expected | {"gradient_ratio"}, status
