"""DVC stages `seeds` and `batch_size` of the controls pipeline (``pipelines/controls/``): gather the derived world
pipelines into ``metrics/controls/<what>.json`` and ``reports/controls/`` (issue 12: seed spread, batch size in
training). Run the whole set with ``dvc repro pipelines/controls/dvc.yaml``; see :mod:`analysis.controls`.

    python stages/controls.py seeds --params params.yaml pipelines/world_seed1/params.yaml ...
    python stages/controls.py batch_size --params pipelines/world_n64/params.yaml ...
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from analysis.controls import batch_size_summary, seeds_summary
from analysis.report import GRADIENT_RATIO_TSV
from analysis.tables import read_results, read_verdicts
from concrete_jungle.cli import clear_outputs, dump_json
from concrete_jungle.grid import comparison_pairs, model_labels, train_metrics_dir
from concrete_jungle.io import atomic_write
from concrete_jungle.params import Params, load_params

METRICS, REPORTS = Path("metrics/controls"), Path("reports/controls")
#: Bootstrap resamples of each pooled paired CI (percentile method, seed 0).
BOOTSTRAP_RESAMPLES = 2000


def _write(path: Path, text: str) -> None:
    with atomic_write(path) as fh:
        fh.write(text)


def _same_grid(profiles: list[Params]) -> list[str]:
    labels = [model_labels(p) for p in profiles]
    if any(lab != labels[0] for lab in labels):
        raise ValueError("controls: the gathered profiles have different grids: "
                         + "; ".join(f"{p.profile}: {lab}" for p, lab in zip(profiles, labels)))
    return labels[0]


def _distinct(profiles: list[Params], key: str, values: list) -> None:
    if len(set(values)) != len(values):
        raise ValueError(f"controls: two gathered profiles share {key}: "
                         + ", ".join(f"{p.profile}={v}" for p, v in zip(profiles, values)))


def run_seeds(profiles: list[Params]) -> dict:
    """Seed spread of the world grid (one profile per seed); returns the metrics written.

    Raises:
        ValueError: two profiles with the same seed, or different grids."""
    _distinct(profiles, "seed", [p.seed for p in profiles])
    models = _same_grid(profiles)
    clear_outputs(METRICS / "seeds.json", REPORTS / "seeds.md")
    runs = {f"seed {p.seed}": (read_results(p.metrics_dir / "evaluate", models),
                               read_verdicts(p.data_dir / "verdicts", models)) for p in profiles}
    metrics, md = seeds_summary(runs, models, comparison_pairs(profiles[0]), n_resamples=BOOTSTRAP_RESAMPLES)
    _write(REPORTS / "seeds.md", md)
    _write(METRICS / "seeds.json", dump_json(metrics) + "\n")
    return {"seeds": metrics["seeds"], "pairs": len(metrics["sugarcrepe_pairs"])}


def run_batch_size(profiles: list[Params]) -> dict:
    """Batch size in training over the ``world_n<N>`` profiles; returns the metrics written.

    Raises:
        ValueError: two profiles with the same ``train.batch_size``, or different grids."""
    _distinct(profiles, "train.batch_size", [p.train.batch_size for p in profiles])
    models = [m for m in _same_grid(profiles) if m != "base"]
    clear_outputs(METRICS / "batch_size.json", REPORTS / "batch_size.md", REPORTS / "fig6_training.png")
    runs = {p.train.batch_size: (read_results(p.metrics_dir / "evaluate", models),
                                 read_verdicts(p.data_dir / "verdicts", models),
                                 {m: train_metrics_dir(p, m) / GRADIENT_RATIO_TSV for m in models}) for p in profiles}
    metrics, md = batch_size_summary(runs, models, REPORTS / "fig6_training.png", n_resamples=BOOTSTRAP_RESAMPLES)
    _write(REPORTS / "batch_size.md", md)
    _write(METRICS / "batch_size.json", dump_json(metrics) + "\n")
    return {"N": sorted(runs), "ablation": metrics["ablation"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["seeds", "batch_size"])
    ap.add_argument("--params", nargs="+", required=True, help="the gathered profiles' params files")
    args = ap.parse_args(argv)
    profiles = [load_params(f) for f in args.params]
    result = (run_seeds if args.what == "seeds" else run_batch_size)(profiles)
    print(dump_json(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
