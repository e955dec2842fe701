"""DVC stage `report`: render the study's tables and figures from tracked metrics (paper Tab. 1-3, Fig. 4, 6).

``reports/<profile>/``: ``table2.md`` / ``.tex`` (compositional understanding: SugarCrepe, SugarCrepe++, Winoground,
M.Avg and the relative gain over the base model), ``table3.md`` / ``.tex`` (general representation: linear probes,
VTAB groups, retrieval R@K), ``comparisons.md`` (the positive control first, from ``metrics/<profile>/positive_control.json``, and whether the
models can see the edits at all, from ``metrics/<profile>/visibility.json``; then
paired differences with bootstrap CIs, McNemar and Holm-adjusted p and the minimal detectable effect for the pairs of
:func:`~concrete_jungle.grid.comparison_pairs`, from ``data/<profile>/verdicts``, the rows of a model that failed the
control marked "cannot be read"), ``heldout.png``
(held-out pair accuracy by concreteness bin), ``gradient_ratio.png`` (the logged ratio of each hard-negative run),
``gradient_ratio_study.png`` (ratio vs N, Fig. 6), ``learning_curves.png`` (held-out accuracy by keyword type
during each fine-tune, against the baseline), ``concreteness_gap.png`` (logit gap vs c_i, LOWESS, Fig. 4) and
``table1.md``.
"""

from analysis.dataset_stats import plot_concreteness_gap, plot_fig5, table1_markdown
from analysis.report import (GRADIENT_RATIO_TSV, figure_axes, plot_gradient_ratio, plot_gradient_ratio_study,
                             plot_learning_curves)
from analysis.tables import (comparisons_markdown, plot_heldout, read_results, read_verdicts, table2, table3,
                             visibility_markdown)
from concrete_jungle.cli import clear_outputs, run_stage
from concrete_jungle.evaluation.positive_control import failed_models
from concrete_jungle.grid import comparison_pairs, model_labels, train_metrics_dir
from concrete_jungle.io import atomic_write, read_json
from concrete_jungle.params import Params

OUTPUTS = ("table2.md", "table2.tex", "table3.md", "table3.tex", "comparisons.md", "gradient_ratio.png",
           "gradient_ratio_study.png", "table1.md", "concreteness_gap.png", "heldout.png", "fig5_def.png",
           "learning_curves.png")
#: Bootstrap resamples of each paired CI in comparisons.md (percentile method, seeded).
BOOTSTRAP_RESAMPLES = 2000


def _write(path, text: str) -> None:
    with atomic_write(path) as fh:
        fh.write(text)


def render_reports(params: Params) -> dict:
    """Render every report of the profile; returns ``{name: path}``.

    Raises:
        FileNotFoundError: a metrics file of the grid is missing (a gradient-ratio curve, the study, Table 1's
            statistics, the positive control).
    """
    import pandas as pd

    out_dir = params.reports_dir
    clear_outputs(*(out_dir / name for name in OUTPUTS))
    labels = model_labels(params)
    results = read_results(params.metrics_dir / "evaluate", labels)
    out = {}
    for name, render in (("table2", table2), ("table3", table3)):
        md, tex = render(results, labels)
        _write(out_dir / f"{name}.md", md)
        _write(out_dir / f"{name}.tex", tex)
        out[name] = out_dir / f"{name}.md"
    verdicts = read_verdicts(params.data_dir / "verdicts", labels)
    control = read_json(params.metrics_dir / "positive_control.json")
    # the control first, then its first diagnosis (can the models see the edits at all?), then the comparisons
    _write(out_dir / "comparisons.md", comparisons_markdown(
        verdicts, comparison_pairs(params), include=("sugarcrepe", "sugarcrepe_pp", "winoground", "heldout", "probe",
                                                     "retrieval"),
        n_resamples=BOOTSTRAP_RESAMPLES, method="percentile", seed=params.seed,
        power=params.evaluate.positive_control.power, control=control, unreadable=failed_models(control),
        diagnosis=visibility_markdown(read_json(params.metrics_dir / "visibility.json"))))
    out["comparisons"] = out_dir / "comparisons.md"
    out["heldout"] = plot_heldout(results.get("heldout", {}), out_dir / "heldout.png")
    hard = [lab for lab in labels if lab != "base" and lab not in params.train.baselines]
    out["gradient_ratio"] = plot_gradient_ratio({lab: train_metrics_dir(params, lab) / GRADIENT_RATIO_TSV
                                                 for lab in hard}, out_dir / "gradient_ratio.png")
    from concrete_jungle.learning_curve import read_curves

    curves = {lab: read_curves(train_metrics_dir(params, lab)) for lab in [*hard, *params.train.baselines]}
    if any(curves.values()):
        out["learning_curves"] = plot_learning_curves(curves, {lab: lab.split("-", 1)[0] for lab in hard},
                                                      list(params.train.baselines), out_dir / "learning_curves.png")
    else:  # train.curve_every: null: the figure says so rather than missing (a DVC output)
        with figure_axes(out_dir / "learning_curves.png", figsize=(4, 1.5)) as ax:
            ax.axis("off")
            ax.text(0.5, 0.5, "no learning curve logged (train.curve_every: null)", ha="center", va="center")
        out["learning_curves"] = out_dir / "learning_curves.png"
    out["gradient_ratio_study"] = plot_gradient_ratio_study(read_json(params.metrics_dir / "gradient_ratio.json"),
                                                            out_dir / "gradient_ratio_study.png")
    datasets = params.concreteplant.datasets
    stats = {d: read_json(params.metrics_dir / "dataset_stats" / f"{d}.json") for d in datasets}
    _write(out_dir / "table1.md", "# Table 1: ConcreteBatch statistics\n\n" + table1_markdown(stats))
    out["table1"] = out_dir / "table1.md"
    gaps = {d: pd.read_csv(params.metrics_dir / "dataset_gaps" / f"{d}.csv") for d in datasets}
    unit = "cosine" if any(df["logit_gap"].isna().any() for df in gaps.values()) else "logit"  # no logit scale
    col = "logit_gap" if unit == "logit" else "cos_gap"
    out["concreteness_gap"] = plot_concreteness_gap(
        {d: {"c_i": df["c_i"].tolist(), "gap": df[col].tolist()} for d, df in gaps.items()},
        out_dir / "concreteness_gap.png", unit=unit)
    out["fig5"] = plot_fig5(gaps, stats, out_dir / "fig5_def.png")
    return out


if __name__ == "__main__":
    run_stage(__doc__, render_reports)
