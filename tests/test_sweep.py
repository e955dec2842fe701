"""Reading a sweep back from `dvc exp show --json` (analysis/sweep.py): points per run, sorted by the param."""

import json

import pytest

from analysis.sweep import plot_sweep, sweep_points

METRICS = {"acc": ("metrics/{profile}/evaluate/sugarcrepe/hc-cement.json", "metrics.micro_accuracy")}


def _run(rev, name, tau, acc):
    data = {"params": {"params.yaml": {"data": {"margin": {"tau": tau}}}}}
    if acc is not None:
        data["metrics"] = {"metrics/world/evaluate/sugarcrepe/hc-cement.json": {"data": {"metrics": {
            "micro_accuracy": acc}}}}
    return {"rev": rev, "name": name, "data": data}


def test_points_of_the_baseline_and_every_experiment(tmp_path):
    exp_show = [
        {**_run("workspace", None, 0.3, 0.70), "experiments": None},  # repeats the last run: left out
        {**_run("a" * 40, "main", 0.15, 0.66), "experiments": [
            {"revs": [_run("b" * 40, "exp-1", 0.3, 0.70)]},
            {"revs": [_run("c" * 40, "exp-2", 0.05, 0.61)]},
            {"revs": [_run("d" * 40, "exp-3", 0.5, None)]},  # failed: no metrics
        ]},
    ]
    points = sweep_points(exp_show, "margin.tau", METRICS)
    assert points == [{"run": "exp-2", "margin.tau": 0.05, "acc": 0.61}, {"run": "main", "margin.tau": 0.15, "acc": 0.66},
                      {"run": "exp-1", "margin.tau": 0.3, "acc": 0.70}]
    png = plot_sweep(points, "margin.tau", ["acc"], tmp_path / "s.png")
    assert png.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="nothing to plot"):
        plot_sweep([], "margin.tau", ["acc"], tmp_path / "t.png")
    with pytest.raises(ValueError, match="dvc exp show --json"):
        sweep_points(json.loads("{}"), "margin.tau", METRICS)
