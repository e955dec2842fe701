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

from concrete_jungle import lineage
from concrete_jungle.params import load_params

REPO = Path(__file__).resolve().parents[1]

# Only sizes shrink; everything else is the committed params.yaml.
SHRINK = {
    "corpus": {"n_scenes": 240, "heldout_fraction": 0.1},
    "benchmark": {"n_per_subset": 12},
    "base_model": {"epochs": 1, "batch_size": 32, "log_every": 2},
    "train": {"batch_size": 16, "max_steps": 3, "log_every": 1},
    "evaluate": {"batch_size": 64, "winoground": {"n_items": 12}, "retrieval": {"sets": {"world": {"n_images": 20}}},
                 "probe": {"train_size": 40, "val_size": 10, "Cs": [0.1, 1.0]}},
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
        # no results, no locks, and so no pending re-runs (the ledger names pipelines whose locks are left out)
        if not src.is_file() or rel.startswith(("metrics/", "reports/")) or rel.endswith("dvc.lock") \
                or rel == "pipelines/pending.yaml":
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
    params = _deep_update(params, SHRINK)
    for task in params["evaluate"]["probe"]["tasks"].values():
        task["test_size"] = 20
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    load_params(work / "params.yaml")  # the shrunken config is still valid
    for name, (source, _) in lineage.DERIVED.items():  # the control profiles derived from the world follow it
        if source == "params.yaml":
            (work / "pipelines" / name / "params.yaml").write_text(lineage.derived_params(name, work))
    _run(["git", "init", "-q"], work)
    _run(["git", "add", "-A"], work)
    _run(["git", "commit", "-q", "-m", "shrunken copy"], work)
    _run(["dvc", "repro"], work)

    t = params["train"]
    labels = ["base", *t["baselines"]] + [f"{d}-{loss}" for d in t["datasets"]
                                         for loss in t["losses"] + t["margin_losses"]]
    subsets = {"add_att", "add_obj", "replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj"}
    for label in labels:
        res = json.loads((work / "metrics/world/evaluate/sugarcrepe" / f"{label}.json").read_text())
        assert res["available"] and set(res["metrics"]["subsets"]) == subsets
        assert 0.0 <= res["metrics"]["macro_accuracy"] <= 1.0 and res["n"]["all"] == 12 * 7
        pp = json.loads((work / "metrics/world/evaluate/sugarcrepe_pp" / f"{label}.json").read_text())
        assert not pp["available"] and "sugarcrepe_pp" in pp["reason"]
        wino = json.loads((work / "metrics/world/evaluate/winoground" / f"{label}.json").read_text())
        assert wino["n"]["items"] == 12 and 0 <= wino["metrics"]["group"] <= wino["metrics"]["text"] <= 1
        ret = json.loads((work / "metrics/world/evaluate/retrieval" / f"{label}.json").read_text())
        assert 0 <= ret["metrics"]["world"]["i2t"]["R@1"] <= ret["metrics"]["world"]["i2t"]["R@5"] <= 1
        probe = json.loads((work / "metrics/world/evaluate/probe" / f"{label}.json").read_text())
        assert set(probe["metrics"]) - {"groups"} == set(params["evaluate"]["probe"]["tasks"])
        held = json.loads((work / "metrics/world/evaluate/heldout" / f"{label}.json").read_text())
        assert set(held["metrics"]) <= set(params["concreteplant"]["datasets"]) and held["metrics"]
    for d in params["concreteplant"]["datasets"]:
        stats = json.loads((work / f"metrics/world/concreteplant/{d}.json").read_text())
        assert stats["n_kept"] > 0.5 * stats["n_anchors"], stats
        heldout = {json.loads(line)["anchor_id"] for line in
                   (work / f"data/world/concreteplant/{d}/heldout.jsonl").read_text().splitlines()}
        trained = {json.loads(line)["anchor_id"] for line in
                   (work / f"data/world/concreteplant/{d}/concretebatch.jsonl").read_text().splitlines()}
        assert heldout and not heldout & trained  # held-out anchors are never trained on
    table = (work / "reports/world/table2.md").read_text()
    assert all(label in table for label in labels) and "M.Avg" in table
    assert "M.Avg" in (work / "reports/world/table3.md").read_text()
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
    # the provenance of this copy's results (the world fresh, every other pipeline never run), as a contributor
    # writes it before committing
    _run([sys.executable, "-m", "concrete_jungle.lineage", "write", "--repo", str(work)], work)
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
    # (and the pre-flight of the params file, which every stage runs after: issue 22)
    assert _stale(work) == {f"train_margin@{loss}" for loss in t["margin_losses"]} | {"gradient_ratio",
                                                                                      "check_params"}
    _run(["git", "checkout", "--", "params.yaml", "pipelines/real/params.yaml"], work)

    # 2b. a misspelt key stales no stage that reads params, yet `dvc repro` names it before any stage runs
    changed = yaml.safe_load((work / "params.yaml").read_text())
    changed["margin"]["tua"] = 0.3
    (work / "params.yaml").write_text(yaml.safe_dump(changed, sort_keys=False))
    proc = subprocess.run(["dvc", "repro"], cwd=work, env=_env(), capture_output=True, text=True)
    assert proc.returncode != 0 and "margin.tua: Extra inputs are not permitted" in proc.stdout + proc.stderr
    ran_stages = {line.split("'")[1] for line in proc.stdout.splitlines() if line.startswith("Running stage")}
    assert ran_stages == {"check_params"}, proc.stdout
    _run(["git", "checkout", "--", "params.yaml"], work)
    # DVC removed the marker before the failed run: the next repro re-makes it (or restores it from DVC's run cache,
    # the same params file having passed before), the same bytes, and runs nothing else
    ran = _run(["dvc", "repro"], work)
    assert {line.split("'")[1] for line in ran.splitlines() if line.startswith("Running stage")} <= {"check_params"}
    assert (work / "data/world/params_checked.txt").read_text().startswith("the params file was validated")
    assert _stale(work) == set()

    # 3. one suite's params: only that suite's scoring (then the report)
    changed = yaml.safe_load((work / "params.yaml").read_text())
    changed["evaluate"]["retrieval"]["ks"] = [1, 2]
    (work / "params.yaml").write_text(yaml.safe_dump(changed, sort_keys=False))
    assert _stale(work) == {"score_retrieval", "check_params"}
    _run(["git", "checkout", "--", "params.yaml"], work)

    # 4. an evaluation module: only the stages that run it (benchmark preparation and scoring)
    module = work / "src/concrete_jungle/evaluation/sugarcrepe_pp.py"
    module.write_text(module.read_text() + "\n# an edit\n")
    assert _stale(work) == {"benchmark", "score_benchmark"}
    ran = _run(["dvc", "repro"], work)
    ran_stages = {line.split("'")[1] for line in ran.splitlines() if line.startswith("Running stage")}
    assert ran_stages == {"benchmark", "score_benchmark"}, ran  # same outputs: no encoding, no report
    _run(["git", "checkout", "--", "src/concrete_jungle/evaluation/sugarcrepe_pp.py"], work)
    _run(["dvc", "repro"], work)

    # 5. byte-identical outputs wherever the clone lives: re-make corpus and base model in another folder
    other = tmp_path / "elsewhere" / "clone"
    shutil.copytree(work, other, symlinks=True)

    def outs(repo: Path) -> dict:
        lock = yaml.safe_load((repo / "dvc.lock").read_text())["stages"]
        return {name: [(o["path"], o["md5"]) for o in lock[name]["outs"]] for name in ("corpus", "base_model")}

    before = outs(other)
    _run(["dvc", "repro", "-f", "-s", "corpus"], other)
    _run(["dvc", "repro", "-f", "-s", "base_model"], other)
    assert outs(other) == before

    # 6. a margin sweep as the README documents it: an experiment beside the baseline commit, read back into points
    # and a figure. One experiment, and only the stages the sweep reads (the margin fine-tunes, their encodings and
    # the two suites it plots): the untargeted experiment re-runs every suite and report, 3.5 minutes of CI, where
    # `dvc exp run` spends about 5 s a stage collecting the 24 pipelines; what it would re-run is step 2's stale set
    said = _run(["dvc", "exp", "run", "-S", "margin.tau=0.3", "score_benchmark", "score_heldout"], work)
    # issue 29 item 4: nothing about the pipelines that never ran here (parked): their outputs made 112 "No file hash
    # info" warnings (stages a pending pipeline's lock predates still warn until it is re-run: the ledger)
    parked = [p.parent.name for p in work.glob("pipelines/*/dvc.parked.yaml")]
    assert "paper" in parked
    warned = [line for line in said.splitlines() if "No file hash info" in line]
    assert not [line for line in warned if any(f"/{name}/" in line for name in parked)], warned
    shown = subprocess.run(["dvc", "exp", "show", "--json"], cwd=work, env=_env(), capture_output=True, text=True,
                           check=True).stdout
    (tmp_path / "exp_show.json").write_text(shown)
    _run([sys.executable, str(work / "analysis" / "sweep.py"), "--exp-show", str(tmp_path / "exp_show.json")], work)
    sweep = json.loads((work / "metrics/world/sweep_margin.tau.json").read_text())
    taus = [p["margin.tau"] for p in sweep["points"]]
    assert taus == sorted(taus) == [params["margin"]["tau"], 0.3], sweep  # the baseline commit, then the experiment
    assert all(0.0 <= p["SugarCrepe hc-cement"] <= 1.0 for p in sweep["points"])
    assert (work / "reports/world/sweep_margin.tau.png").stat().st_size > 1000

    # back to the baseline commit's results (the experiment left its params, lock and the sweep's stages in the
    # workspace, and every other suite stale for its tau)
    _run(["git", "checkout", "--", "."], work)
    _run(["dvc", "checkout", "dvc.yaml"], work)
    assert _stale(work) == set()

    # 7. concreteplant.engine: ray (issue 21): the stage re-runs on a local Ray of 2 actors and writes the same
    # ConcreteBatches, so no stage after it runs (the shard work folder, which any engine would reuse, removed first)
    lock_before = yaml.safe_load((work / "dvc.lock").read_text())["stages"]["concreteplant"]["outs"]
    changed = yaml.safe_load((work / "params.yaml").read_text())
    changed["concreteplant"].update(engine="ray", ray={**changed["concreteplant"]["ray"], "workers": 2, "num_cpus": 2})
    (work / "params.yaml").write_text(yaml.safe_dump(changed, sort_keys=False))
    shutil.rmtree(work / "data/world/concreteplant-shards")
    ran = _run(["dvc", "repro"], work)
    ran_stages = {line.split("'")[1] for line in ran.splitlines() if line.startswith("Running stage")}
    assert ran_stages == {"check_params", "concreteplant"}, ran
    assert yaml.safe_load((work / "dvc.lock").read_text())["stages"]["concreteplant"]["outs"] == lock_before
    assert len(list((work / "data/world/concreteplant-shards").rglob("shard-*.stats.json"))) > 0

    # 8. train.data_format: webdataset (issue 21), then `lineage write`: stage shards writes the ConcreteBatches and
    # the anchors as tar shards, and every fine-tune streams them; the data stages before it stay as they were
    changed = yaml.safe_load((work / "params.yaml").read_text())
    changed["train"].update(data_format="webdataset", samples_per_shard=50)
    (work / "params.yaml").write_text(yaml.safe_dump(changed, sort_keys=False))
    _run([sys.executable, "-m", "concrete_jungle.lineage", "write", "--repo", str(work)], work)
    stale = _stale(work)
    assert "shards" in stale and {"corpus", "concreteplant", "base_model"}.isdisjoint(stale)
    # the fine-tunes of one family and the CLIP baseline (the anchors' shards); their encodings and scoring are the
    # JSONL path's, run above
    ran = _run(["dvc", "repro", "train@infonce", "train_baseline@clip"], work)
    ran_stages = {line.split("'")[1] for line in ran.splitlines() if line.startswith("Running stage")}
    assert {"shards", "train@infonce", "train_baseline@clip"} <= ran_stages, ran
    for name in [*t["datasets"], "anchors"]:
        index = json.loads((work / f"data/world/shards/{name}/index.json").read_text())
        assert index["samples"] > 50 and len(index["shards"]) == -(-index["samples"] // 50)
    summary = json.loads((work / "metrics/world/train/infonce.json").read_text())
    assert all(summary[f"{d}-infonce"]["step"] == 3 for d in t["datasets"]), summary
