"""The controls gathered over pipelines (analysis/controls.py) and the derived profiles (lineage.DERIVED): seed
spread, pooled paired tests and the batch-size ablation, on hand-made results with known answers."""

import importlib.util
import json

import pytest
import yaml

from analysis.controls import (batch_size_summary, item_clustered_delta, mean_sd, pool_runs, seeds_summary,
                               side_by_side, sources_summary)
from concrete_jungle import lineage
from concrete_jungle.params import load_params


def _result(suite, model, micro, subsets=None):
    subsets = subsets or {"replace_att": micro}
    return {"suite": suite, "model": model, "available": True,
            "metrics": {"micro_accuracy": micro, "subsets": {k: {"accuracy": v, "n": 10} for k, v in subsets.items()}}}


def _verdicts(pattern):
    return {"replace_att": {f"i{k}": bool(ok) for k, ok in enumerate(pattern)}}


def test_mean_sd_of_three_seeds():
    s = mean_sd([0.6, 0.7, 0.8])
    assert s["mean"] == pytest.approx(0.7) and s["sd"] == pytest.approx(0.1) and s["n"] == 3
    assert mean_sd([0.5])["sd"] == 0.0
    with pytest.raises(ValueError, match="finite"):
        mean_sd([0.5, float("nan")])


def test_pool_runs_keys_items_by_run_and_keeps_models_every_run_has():
    runs = {"s0": {"sugarcrepe": {"a": _verdicts([1, 0]), "b": _verdicts([0, 0])}},
            "s1": {"sugarcrepe": {"a": _verdicts([1, 1]), "c": _verdicts([1, 1])}}}
    pooled = pool_runs(runs)
    assert set(pooled["sugarcrepe"]) == {"a"}  # b and c are missing in one run each
    assert pooled["sugarcrepe"]["a"] == {"replace_att": {"s0/i0": True, "s0/i1": False, "s1/i0": True, "s1/i1": True}}
    # nested shapes (SugarCrepe++ itt/tot, Winoground scores) are re-keyed at their item level
    pp = pool_runs({"x": {"sugarcrepe_pp": {"a": {"itt": {"swap": {"7": True}}}}},
                    "y": {"sugarcrepe_pp": {"a": {"itt": {"swap": {"7": False}}}}}})
    assert pp["sugarcrepe_pp"]["a"]["itt"]["swap"] == {"x/7": True, "y/7": False}


def test_side_by_side_labels_each_model_by_its_run():
    runs = {"N64": {"sugarcrepe": {"a": 1, "b": 2}, "winoground": {"a": 3}},
            "N256": {"sugarcrepe": {"a": 4}, "winoground": None}}
    assert side_by_side(runs, ["a", "b"]) == {"sugarcrepe": {"a@N64": 1, "b@N64": 2, "a@N256": 4},
                                              "winoground": {"a@N64": 3}}
    assert side_by_side(runs, ["b"]) == {"sugarcrepe": {"b@N64": 2}}


def test_seeds_summary_mean_sd_and_pooled_paired_delta():
    # model m beats base on 2 of 4 items in seed 0 (only-m: 2, only-base: 0), ties in seed 1 (only-m 1, only-base 1)
    v0 = {"sugarcrepe": {"base": _verdicts([0, 0, 1, 1]), "m": _verdicts([1, 1, 1, 1])}}
    v1 = {"sugarcrepe": {"base": _verdicts([1, 0, 1, 0]), "m": _verdicts([0, 1, 1, 0])}}
    r0 = {"sugarcrepe": {"base": _result("sugarcrepe", "base", 0.5), "m": _result("sugarcrepe", "m", 1.0)}}
    r1 = {"sugarcrepe": {"base": _result("sugarcrepe", "base", 0.5), "m": _result("sugarcrepe", "m", 0.5)}}
    metrics, md = seeds_summary({"seed 0": (r0, v0), "seed 1": (r1, v1)}, ["base", "m"], [("m", "base")],
                                n_resamples=200)
    assert metrics["models"]["m"]["sugarcrepe"]["mean"] == pytest.approx(0.75)
    assert metrics["models"]["m"]["sugarcrepe"]["sd"] == pytest.approx(0.3535534, abs=1e-6)  # sd of (1.0, 0.5)
    assert metrics["models"]["m"]["table2_mavg"]["values"] == pytest.approx([1.0, 0.5])
    (row,) = metrics["sugarcrepe_pairs"]
    assert row["per_seed"]["seed 0"]["delta"] == pytest.approx(0.5)
    assert row["per_seed"]["seed 1"]["delta"] == pytest.approx(0.0)
    assert row["pooled"]["delta"] == pytest.approx(2 / 8) and row["pooled"]["n"] == 8  # (3 - 1) / 8
    assert row["pooled"]["p"] == pytest.approx(0.625)  # exact McNemar, 3 vs 1 discordant: 2 * P(X <= 1 | 4, .5)
    assert row["seed_level"]["mean"] == pytest.approx(0.25)
    assert row["seed_level"]["t_p"] == pytest.approx(0.5)  # t = 0.25 / (0.3536 / sqrt 2) = 1, df 1: p = 0.5
    assert row["same_sign"] is False  # a 0 in seed 1 is not a positive difference
    assert "75.0 ± 35.4 (100.0 / 50.0)" in md
    assert "| m | base | +50.0 (0.5) | +0.0 (1) | +25.0 (0.62) | +25.0 ± 35.4 (0.5) | no |" in md
    # M.Avg over the same columns in every seed: m's Winoground is skipped in seed 1, so no seed counts Winoground
    wg = {"group": 0.1, "text": 0.1, "image": 0.1}
    r0w = {**r0, "winoground": {k: {"available": True, "metrics": wg} for k in ("base", "m")}}
    r1w = {**r1, "winoground": {"base": {"available": True, "metrics": wg}, "m": {"available": False, "reason": "x"}}}
    mw, _ = seeds_summary({"seed 0": (r0w, v0), "seed 1": (r1w, v1)}, ["base", "m"], [("m", "base")], n_resamples=50)
    assert mw["models"]["m"]["table2_mavg"]["values"] == pytest.approx([1.0, 0.5])
    with pytest.raises(ValueError, match="two seeds"):
        seeds_summary({"seed 0": (r0, v0)}, ["base", "m"], [])


def test_item_clustered_delta_averages_each_item_over_seeds():
    # d per seed: (1, 0, 1, 0) and (1, 0, 0, 0) -> per item (1, 0, 0.5, 0): delta 0.375. Exact sign flips over the
    # 2 non-zero items: |mean| >= 0.375 in 2 of 4 sign patterns -> p = 0.5
    m = [_verdicts([1, 1, 1, 0]), _verdicts([1, 0, 1, 0])]
    r = [_verdicts([0, 1, 0, 0]), _verdicts([0, 0, 1, 0])]
    out = item_clustered_delta(m, r, n_resamples=500)
    assert out["delta"] == pytest.approx(0.375) and out["n_items"] == 4 and out["n_seeds"] == 2
    assert out["p"] == pytest.approx(0.5)
    assert 0.0 <= out["ci"][0] <= 0.375 <= out["ci"][1] <= 1.0
    same = item_clustered_delta([_verdicts([1, 1, 1])] * 2, [_verdicts([0, 0, 0])] * 2)
    assert same["delta"] == 1.0 and same["ci"] == [1.0, 1.0] and same["p"] == pytest.approx(0.25)  # 2 / 2**3
    # SugarCrepe++-style nesting; only the items both models have in every seed count
    nested = item_clustered_delta([{"itt": {"swap": {"a": True, "b": True}}}], [{"itt": {"swap": {"a": False}}}])
    assert nested["n_items"] == 1 and nested["delta"] == 1.0
    with pytest.raises(ValueError, match="no item"):
        item_clustered_delta([_verdicts([1])], [{"replace_att": {"other": True}}])


def test_seeds_summary_of_shared_items_is_item_clustered():
    v0 = {"sugarcrepe": {"base": _verdicts([0, 1, 0, 0]), "m": _verdicts([1, 1, 1, 0])},
          "heldout": {"base": {"hc": {"x0": True}}, "m": {"hc": {"x0": True}}}}
    v1 = {"sugarcrepe": {"base": _verdicts([0, 0, 1, 0]), "m": _verdicts([1, 0, 1, 0])},
          "heldout": {"base": {"hc": {"y0": True}}, "m": {"hc": {"y0": False}}}}
    r0 = {"sugarcrepe": {"base": _result("sugarcrepe", "base", 0.25), "m": _result("sugarcrepe", "m", 0.75)}}
    r1 = {"sugarcrepe": {"base": _result("sugarcrepe", "base", 0.25), "m": _result("sugarcrepe", "m", 0.5)}}
    metrics, md = seeds_summary({"seed 0": (r0, v0), "seed 1": (r1, v1)}, ["base", "m"], [("m", "base")],
                                n_resamples=500, study="real", shared_items=True)
    (row,) = metrics["sugarcrepe_pairs"]
    assert "pooled" not in row and row["item_clustered"]["delta"] == pytest.approx(0.375)
    assert row["item_clustered"]["n_items"] == 4  # the 4 shared items, not 2 x 4 copies
    assert row["per_seed"]["seed 0"]["delta"] == pytest.approx(0.5) and row["seed_level"]["mean"] == 0.375
    (sc,) = metrics["item_clustered"]  # SugarCrepe only: no SugarCrepe++ verdicts; held-out items differ per seed
    assert sc["suite"] == "sugarcrepe" and sc["p"] == pytest.approx(0.5)
    assert md.startswith("# The real study over 2 seeds (seed 0, seed 1)")
    assert "the benchmark items are the same in every seed" in md and "heldout" not in md.split("## Paired")[1]
    assert "| m | base | +50.0 (0.5) | +25.0 (1) | +37.5 [" in md
    from concrete_jungle.evaluation.paired import mde_from_ci

    row_md = next(line for line in md.splitlines() if line.startswith("| sugarcrepe | m | base |"))
    assert f"| {100 * mde_from_ci(*sc['ci']):.1f} | 4 |" in row_md  # MDE from the CI's width, then the items
    # every seed with the same delta: the seed-level t-test is undefined, recorded as None and shown as n/a
    same, md_same = seeds_summary({"seed 0": (r0, v0), "seed 1": (r0, v0)}, ["base", "m"], [("m", "base")],
                                  n_resamples=50)
    assert same["sugarcrepe_pairs"][0]["seed_level"]["t_p"] is None and "(n/a)" in md_same
    assert md_same.startswith("# The world study") and "pooled items are distinct" in md_same
    assert same["sugarcrepe_pairs"][0]["pooled"]["n"] == 8


def _controls_stage():
    spec = importlib.util.spec_from_file_location("_controls_stage", lineage.REPO / "stages" / "controls.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_real_seeds_gather_the_models_every_seed_trains():
    stage = _controls_stage()
    profiles = [load_params(lineage.REPO / f) for f in lineage.REAL_SEED_PROFILES]
    assert [p.seed for p in profiles] == [0, 1, 2]
    common, partial = stage._seed_grid(profiles)
    assert common == ["base", "clip", "hc-infonce", "hc-cement", "lc-infonce", "lc-cement"]
    assert partial == ["hc_type-cement", "hc_type-infonce", "lc_type-cement", "lc_type-infonce", "wo-cement",
                       "wo-infonce"]
    world = [load_params(lineage.REPO / f) for f in lineage.SEED_PROFILES]
    assert stage._seed_grid(world)[1] == []  # the world seeds train the same grid
    with pytest.raises(ValueError, match="inside the first profile's"):  # an added seed trains a superset
        stage._seed_grid([profiles[1], profiles[0]])
    with pytest.raises(ValueError, match="at least two profiles"):
        stage._seed_grid(profiles[:1])
    no_fine_tune = profiles[1].model_copy(update={"train": profiles[1].train.model_copy(
        update={"datasets": [], "baselines": []})})
    with pytest.raises(ValueError, match="share no fine-tune"):
        stage._common_grid([profiles[0], no_fine_tune])


def test_sources_summary_compares_each_source_on_the_same_items():
    stats = {"hc": {"mean_c": 4.5, "median_c": 4.6, "type_share": {"attribute": 0.5, "object": 0.5}},
             "lc": {"mean_c": 3.5, "median_c": 3.4, "type_share": {"relation": 1.0}}}
    runs = {}
    for source, hc, lc in (("brysbaert", [1, 1, 1, 0], [1, 0, 0, 0]), ("visual", [1, 1, 0, 0], [1, 1, 0, 0])):
        res = {"sugarcrepe": {"hc-infonce": _result("sugarcrepe", "hc-infonce", sum(hc) / 4),
                              "lc-infonce": _result("sugarcrepe", "lc-infonce", sum(lc) / 4)}}
        ver = {"sugarcrepe": {"hc-infonce": _verdicts(hc), "lc-infonce": _verdicts(lc)},
               "heldout": {"hc-infonce": {"hc": {f"{source}-a": True}}, "lc-infonce": {"lc": {f"{source}-b": True}}}}
        runs[source] = (res, ver, stats)
    pairs = [("hc-infonce@visual", "lc-infonce@visual"), ("hc-infonce@brysbaert", "lc-infonce@brysbaert"),
             ("hc-infonce@visual", "hc-infonce@brysbaert")]
    metrics, md = sources_summary(runs, ["hc-infonce", "lc-infonce"], pairs, n_resamples=100)
    assert metrics["models"]["hc-infonce"]["brysbaert"]["sugarcrepe"] == 0.75
    assert metrics["models"]["hc-infonce"]["visual"]["sugarcrepe"] == 0.5
    assert metrics["datasets"]["visual"]["lc"]["mean_c"] == 3.5
    assert "| brysbaert | hc | 4.50 | 4.60 | 50 % / 0 % / 50 % |" in md
    assert "| hc-infonce@brysbaert | lc-infonce@brysbaert | 4 | 75.0 | 25.0 | +50.0" in md  # paired on the 4 items
    assert "| hc-infonce@visual | lc-infonce@visual | 4 | 50.0 | 50.0 | +0.0" in md
    assert "held-out pairs are not compared" in md  # each source's held-out anchors differ: never paired
    with pytest.raises(ValueError, match="two concreteness sources"):
        sources_summary({"visual": runs["visual"]}, ["hc-infonce"], [])


def test_batch_size_summary_ablation_and_curves(tmp_path):
    runs = {}
    for n, acc, ratios in ((256, 0.6, [0.5, 0.4]), (1024, 0.8, [0.3, 0.1, 0.2])):
        tsv = tmp_path / f"n{n}.tsv"
        tsv.write_text("timestamp\tstep\tgradient_ratio\n" + "".join(f"0\t{i}\t{r}\n" for i, r in enumerate(ratios)))
        res = {"sugarcrepe": {"hc-infonce": _result("sugarcrepe", "hc-infonce", acc)}}
        ver = {"sugarcrepe": {"hc-infonce": _verdicts([1, 1, 0, 0, 1] if n == 256 else [1, 1, 1, 1, 0])}}
        runs[n] = (res, ver, {"hc-infonce": tsv})
    metrics, md = batch_size_summary(runs, ["hc-infonce"], tmp_path / "fig6.png", n_resamples=200)
    rows = {r["N"]: r for r in metrics["rows"]}
    assert rows[1024]["gradient_ratio_mean"] == pytest.approx(0.2) and rows[1024]["steps"] == 2
    assert rows[256]["gradient_ratio_first"] == pytest.approx(0.5) and rows[256]["gradient_ratio_last"] == 0.4
    assert metrics["ablation"]["hc-infonce"]["sugarcrepe"] == pytest.approx(-25.0)  # (0.6 - 0.8) / 0.8
    assert (tmp_path / "fig6.png").stat().st_size > 1000
    assert "hc-infonce@N256" in md and "-25.00 %" in md
    json.dumps(metrics, allow_nan=False)


def test_derived_profiles_are_their_source_plus_the_overrides():
    src = yaml.safe_load(lineage.derived_params("world_seed1"))
    world = yaml.safe_load((lineage.REPO / "params.yaml").read_text())
    assert {k for k in world if world[k] != src[k]} == {"profile", "seed"} and src["seed"] == 1
    n = yaml.safe_load(lineage.derived_params("world_n1024"))
    assert n["train"]["batch_size"] == 1024 and n["train"]["datasets"] == ["hc"] and n["train"]["baselines"] == []
    for name in lineage.DERIVED:  # every derived profile validates, with its own folders
        p = load_params(lineage.REPO / "pipelines" / name / "params.yaml")
        assert p.profile == name and str(p.metrics_dir) == f"metrics/{name}"
    for bad in ({"train.batchsize": 3}, {"train": 5}, {"train.batch_size.x": 1}):
        lineage.DERIVED["_typo"] = ("params.yaml", bad)
        try:
            with pytest.raises(KeyError, match=next(iter(bad))):
                lineage.derived_params("_typo")
        finally:
            del lineage.DERIVED["_typo"]


def test_controls_depend_on_the_exact_outputs_of_the_gathered_pipelines():
    """The lock check compares a controls dep with the upstream output's recorded hash only on an exact path."""
    seeds = lineage.controls_pipeline()["stages"]["seeds"]
    world = lineage.pipeline("params.yaml")["stages"]
    outs = {o if isinstance(o, str) else next(iter(o)) for st in world.values()
            for key in ("outs", "metrics", "plots") for o in (st.get("do", st).get(key) or [])}
    gathered = [d for d in seeds["deps"] if d.startswith(("metrics/world/", "data/world/"))]
    assert "metrics/world/evaluate/sugarcrepe" in gathered and "data/world/verdicts/heldout" in gathered
    assert set(gathered) <= outs


def test_controls_refuse_to_gather_before_the_gathered_pipelines_ran(tmp_path, monkeypatch):
    # issue 22: read_results leaves absent files out, so a gather before `dvc repro` of a seed pipeline used to
    # write a partial grid; now it names the absent inputs and the pipelines to run, and writes nothing
    stage = _controls_stage()
    profiles = [load_params(lineage.REPO / f) for f in lineage.SEED_PROFILES]
    monkeypatch.chdir(tmp_path)
    models = ["base", "clip"]
    for p in profiles[:-1]:
        for m in models:
            for path in (p.metrics_dir / "evaluate" / "sugarcrepe" / f"{m}.json",
                         p.data_dir / "verdicts" / "sugarcrepe" / f"{m}.json"):
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("{}")
    last = profiles[-1].profile
    with pytest.raises(FileNotFoundError, match=rf"controls: 4 input file\(s\) of the gathered pipelines are absent, "
                                                rf"e\.g\. metrics/{last}/evaluate/sugarcrepe/base\.json, "
                                                rf"data/{last}/verdicts/sugarcrepe/base\.json.*; run first: dvc repro "
                                                rf"pipelines/{last}/dvc\.yaml$"):
        stage._require_inputs(profiles, models)
    stage._require_inputs(profiles[:-1], models)  # all present: no error
    # the seed spread gathers the whole grid, whose fine-tunes no profile holds here
    with pytest.raises(FileNotFoundError, match=r"run first: dvc repro; dvc repro pipelines/world_seed1/dvc\.yaml; "
                                                r"dvc repro pipelines/world_seed2/dvc\.yaml$"):
        stage.run_seeds(profiles)
    assert not (tmp_path / "metrics" / "controls").exists() and not (tmp_path / "reports").exists()
