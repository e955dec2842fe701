"""DVC stages `seeds`, `real_seeds`, `batch_size` and `concreteness_source` of the controls pipeline
(``pipelines/controls/``): gather the derived pipelines into ``metrics/controls/<what>.json`` and ``reports/controls/``
(issue 12: seed spread of the world and of the real profile, batch size in training, Brysbaert vs visual
concreteness). Run the whole set with ``dvc repro pipelines/controls/dvc.yaml``;
see :mod:`analysis.controls`.

    python stages/controls.py seeds --params params.yaml pipelines/world_seed1/params.yaml ...
    python stages/controls.py real_seeds --params pipelines/real/params.yaml pipelines/real_seed1/params.yaml ...
    python stages/controls.py batch_size --params pipelines/world_n64/params.yaml ...
    python stages/controls.py concreteness_source --params params.yaml pipelines/world_visual/params.yaml
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from analysis.controls import batch_size_summary, seeds_summary, sources_summary
from analysis.report import GRADIENT_RATIO_TSV
from analysis.tables import read_results, read_verdicts
from concrete_jungle.cli import clear_outputs, dump_json, output_transaction
from concrete_jungle.grid import comparison_pairs, model_labels, train_metrics_dir
from concrete_jungle.io import atomic_write, read_json, write_metrics
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


def _common_grid(profiles: list[Params]) -> tuple[list[str], list[str]]:
    """The model labels every profile trains (in the first profile's order) and those only some train.

    Raises:
        ValueError: no fine-tune is common to every profile."""
    labels = [model_labels(p) for p in profiles]
    common = [m for m in labels[0] if all(m in lab for lab in labels[1:])]
    if not [m for m in common if m != "base"]:
        raise ValueError("controls: the gathered profiles share no fine-tune: "
                         + "; ".join(f"{p.profile}: {lab}" for p, lab in zip(profiles, labels)))
    return common, sorted({m for lab in labels for m in lab} - set(common))


def _seed_grid(profiles: list[Params]) -> tuple[list[str], list[str]]:
    """The models a seed spread gathers: the first profile (the study's own run) may train a superset of the grid;
    the added seeds train one grid, inside the first's. Returns (gathered labels, labels trained by the first only).

    Raises:
        ValueError: fewer than two profiles, the added seeds train different grids, or one trains a model the
            first profile does not."""
    if len(profiles) < 2:
        raise ValueError(f"controls: a seed spread needs at least two profiles, got {len(profiles)}")
    first, *added = [model_labels(p) for p in profiles]
    if any(lab != added[0] for lab in added) or not set(added[0]) <= set(first):
        raise ValueError("controls: the added seeds must train one grid inside the first profile's: "
                         + "; ".join(f"{p.profile}: {lab}" for p, lab in zip(profiles, [first, *added])))
    return _common_grid(profiles)


def _distinct(profiles: list[Params], key: str, values: list) -> None:
    if len(set(values)) != len(values):
        raise ValueError(f"controls: two gathered profiles share {key}: "
                         + ", ".join(f"{p.profile}={v}" for p, v in zip(profiles, values)))


def _require_inputs(profiles: list[Params], models: list[str]) -> None:
    """Refuse to gather before the gathered pipelines have run (issue 22): every profile must hold each model's
    SugarCrepe result (``metrics/<p>/evaluate/sugarcrepe/<m>.json``) and verdicts (``data/<p>/verdicts/sugarcrepe/
    <m>.json``); :func:`analysis.tables.read_results` leaves absent files out, which would gather a partial grid.

    Raises:
        FileNotFoundError: naming the absent files (the first 5, and how many) and the pipelines to run first."""
    absent = [(p, path) for p in profiles for m in models
              for path in (p.metrics_dir / "evaluate" / "sugarcrepe" / f"{m}.json",
                           p.data_dir / "verdicts" / "sugarcrepe" / f"{m}.json") if not path.exists()]
    if absent:
        runs = sorted({"dvc repro" if p.profile == "world" else f"dvc repro pipelines/{p.profile}/dvc.yaml"
                       for p, _ in absent})
        raise FileNotFoundError(
            f"controls: {len(absent)} input file(s) of the gathered pipelines are absent, e.g. "
            + ", ".join(path.as_posix() for _, path in absent[:5]) + "; run first: " + "; ".join(runs))


def run_seeds(profiles: list[Params], what: str = "seeds") -> dict:
    """Seed spread of a grid (one profile per seed), written as ``metrics/controls/<what>.json`` and
    ``reports/controls/<what>.md`` (``seeds`` the world, ``real_seeds`` the real profile). The first profile may
    train more datasets than the added seeds (the real seed 0 does): the models every seed trains are gathered, the
    others listed (:func:`_seed_grid`). Seeds whose benchmark is a fixed set (``benchmark.source: sugarcrepe``)
    share their items and are compared item-clustered (:func:`analysis.controls.item_clustered_delta`). Returns the
    metrics written.

    Raises:
        ValueError: two profiles with the same seed, added seeds whose grids differ or leave the first profile's,
            no fine-tune common to every profile, or profiles with different benchmark sources.
        FileNotFoundError: a gathered pipeline's results absent (:func:`_require_inputs`)."""
    _distinct(profiles, "seed", [p.seed for p in profiles])
    models, partial = _seed_grid(profiles)
    sources = {p.benchmark.source for p in profiles}
    if len(sources) != 1:
        raise ValueError(f"controls: the gathered profiles score different benchmarks: {sorted(sources)}")
    _require_inputs(profiles, models)
    clear_outputs(METRICS / f"{what}.json", REPORTS / f"{what}.md")
    runs = {f"seed {p.seed}": (read_results(p.metrics_dir / "evaluate", models),
                               read_verdicts(p.data_dir / "verdicts", models)) for p in profiles}
    pairs = [(m, r) for m, r in comparison_pairs(profiles[0]) if m in models and r in models]
    metrics, md = seeds_summary(runs, models, pairs, n_resamples=BOOTSTRAP_RESAMPLES, study=profiles[0].profile,
                                shared_items=sources == {"sugarcrepe"})
    if partial:
        metrics["not_in_every_seed"] = partial
        md += "\nTrained in some seeds only, so not gathered: " + ", ".join(partial) + ".\n"
    _write(REPORTS / f"{what}.md", md)
    write_metrics(METRICS / f"{what}.json", metrics)
    return {"seeds": metrics["seeds"], "pairs": len(metrics["sugarcrepe_pairs"]), "not_in_every_seed": partial}


def run_concreteness_source(profiles: list[Params]) -> dict:
    """D_hc / D_lc from each profile's ``concreteplant.concreteness`` (Brysbaert, visual) on the same world, written
    as ``metrics/controls/concreteness_source.json`` and ``reports/controls/concreteness_source.md``. Returns the
    metrics written.

    Raises:
        ValueError: two profiles with the same source, different seeds (the runs must share scenes and base model),
            or no ConcreteBatch fine-tune common to every profile.
        FileNotFoundError: a gathered pipeline's results absent (:func:`_require_inputs`)."""
    sources = [p.concreteplant.concreteness for p in profiles]
    _distinct(profiles, "concreteplant.concreteness", sources)
    if len({p.seed for p in profiles}) != 1:
        raise ValueError("controls: the concreteness sources are compared on one world; the profiles have seeds "
                         + ", ".join(f"{p.profile}={p.seed}" for p in profiles))
    common, _ = _common_grid(profiles)
    models = [m for m in common if m != "base" and m not in profiles[0].train.baselines]
    _require_inputs(profiles, ["base", *models])
    base = [read_verdicts(p.data_dir / "verdicts", ["base"]).get("sugarcrepe", {}).get("base") for p in profiles]
    if any(b is None or b != base[0] for b in base):
        raise ValueError("controls: the concreteness sources must share the base model and the benchmark, but the "
                         "base model's SugarCrepe verdicts differ (or are missing) between "
                         + ", ".join(p.profile for p in profiles))
    clear_outputs(METRICS / "concreteness_source.json", REPORTS / "concreteness_source.md")
    datasets = sorted({m.rsplit("-", 1)[0] for m in models})
    runs = {s: (read_results(p.metrics_dir / "evaluate", models), read_verdicts(p.data_dir / "verdicts", models),
                {d: read_json(p.metrics_dir / "dataset_stats" / f"{d}.json") for d in datasets})
            for s, p in zip(sources, profiles)}
    losses = [*profiles[0].train.losses, *profiles[0].train.margin_losses]
    first, *others = sources
    pairs = [(f"hc-{loss}@{s}", f"lc-{loss}@{s}") for s in sources for loss in losses]
    pairs += [(f"{d}-{loss}@{o}", f"{d}-{loss}@{first}") for o in others for d in ("hc", "lc") for loss in losses]
    metrics, md = sources_summary(runs, models, pairs, n_resamples=BOOTSTRAP_RESAMPLES)
    _write(REPORTS / "concreteness_source.md", md)
    write_metrics(METRICS / "concreteness_source.json", metrics)
    return {"sources": sources, "models": models}


def run_batch_size(profiles: list[Params]) -> dict:
    """Batch size in training over the ``world_n<N>`` profiles; returns the metrics written.

    Raises:
        ValueError: two profiles with the same ``train.batch_size``, or different grids.
        FileNotFoundError: a gathered pipeline's results absent (:func:`_require_inputs`)."""
    _distinct(profiles, "train.batch_size", [p.train.batch_size for p in profiles])
    models = [m for m in _same_grid(profiles) if m != "base"]
    _require_inputs(profiles, models)
    clear_outputs(METRICS / "batch_size.json", REPORTS / "batch_size.md", REPORTS / "fig6_training.png")
    runs = {p.train.batch_size: (read_results(p.metrics_dir / "evaluate", models),
                                 read_verdicts(p.data_dir / "verdicts", models),
                                 {m: train_metrics_dir(p, m) / GRADIENT_RATIO_TSV for m in models}) for p in profiles}
    metrics, md = batch_size_summary(runs, models, REPORTS / "fig6_training.png", n_resamples=BOOTSTRAP_RESAMPLES)
    _write(REPORTS / "batch_size.md", md)
    write_metrics(METRICS / "batch_size.json", metrics)
    return {"N": sorted(runs), "ablation": metrics["ablation"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["seeds", "real_seeds", "batch_size", "concreteness_source"])
    ap.add_argument("--params", nargs="+", required=True, help="the gathered profiles' params files")
    args = ap.parse_args(argv)
    profiles = [load_params(f) for f in args.params]
    with output_transaction():  # all new outputs or the earlier ones
        if args.what == "batch_size":
            result = run_batch_size(profiles)
        elif args.what == "concreteness_source":
            result = run_concreteness_source(profiles)
        else:
            result = run_seeds(profiles, args.what)
    print(dump_json(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
