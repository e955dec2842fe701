"""DVC stage `report`: render the study's tables and figures from tracked metrics.

``reports/<profile>/sugarcrepe.md`` (every model x subset, then the paired comparisons of
:func:`~concrete_jungle.grid.comparison_pairs` from ``data/<profile>/verdicts``), ``gradient_ratio.png`` (the logged
ratio of each hard-negative run), ``gradient_ratio_study.png`` (ratio vs N, Fig. 6), ``concreteness_gap.png`` (logit
gap vs c_i with LOWESS trends, Fig. 4) and ``table1.md``.
"""

from analysis.dataset_stats import plot_concreteness_gap, table1_markdown
from analysis.report import render_report
from concrete_jungle.cli import clear_outputs, run_stage
from concrete_jungle.grid import comparison_pairs, model_labels
from concrete_jungle.io import atomic_write, read_json
from concrete_jungle.params import Params

OUTPUTS = ("sugarcrepe.md", "gradient_ratio.png", "gradient_ratio_study.png", "table1.md", "concreteness_gap.png")


def render_reports(params: Params) -> dict:
    """Render every report of the profile; returns ``{name: path}``.

    Raises:
        FileNotFoundError: a metrics file of a model in the grid is missing.
    """
    import pandas as pd

    clear_outputs(*(params.reports_dir / name for name in OUTPUTS))
    labels = model_labels(params)
    evals = {lab: params.metrics_dir / "evaluate" / f"{lab}.json" for lab in labels}
    hard = [lab for lab in labels if lab != "base" and lab not in params.train.baselines]
    train_dirs = {lab: params.metrics_dir / "train" / lab for lab in hard}
    out = render_report(evals, train_dirs, params.reports_dir,
                        gradient_study=params.metrics_dir / "gradient_ratio.json",
                        verdicts={lab: params.data_dir / "verdicts" / f"{lab}.json" for lab in labels},
                        pairs=comparison_pairs(params))
    table = table1_markdown({d: read_json(params.metrics_dir / "dataset_stats" / f"{d}.json")
                             for d in params.concreteplant.datasets})
    unit = "logit"
    gaps = {}
    for d in params.concreteplant.datasets:
        df = pd.read_csv(params.metrics_dir / "dataset_stats" / f"{d}_gaps.csv")
        if df["logit_gap"].isna().any():  # a reference model without a scalar logit scale: cosine gaps
            unit = "cosine"
        gaps[d] = df
    col = "logit_gap" if unit == "logit" else "cos_gap"
    out["concreteness_gap"] = plot_concreteness_gap(
        {d: {"c_i": df["c_i"].tolist(), "gap": df[col].tolist()} for d, df in gaps.items()},
        params.reports_dir / "concreteness_gap.png", unit=unit)
    out["table1"] = params.reports_dir / "table1.md"
    with atomic_write(out["table1"]) as fh:
        fh.write("# Table 1: ConcreteBatch statistics\n\n" + table)
    return out


if __name__ == "__main__":
    run_stage(__doc__, render_reports)
