"""DVC stage `dataset_stats@<dataset>`: paper Table 1 figures of one ConcreteBatch under the reference model (mean /
median c_i, I2T / T2I accuracy, BERTScore, CLIP-L / CLIP-V, DINOScore, unique keywords; Sec. 3.1).

Writes ``metrics/<p>/dataset_stats/<dataset>.json``, the per-record logit gaps ``<dataset>_gaps.csv`` beside it
(paper Fig. 4; ``dvc plots``) and the c_i histogram ``reports/<p>/dataset_stats/<dataset>.png``.
"""

from analysis.dataset_stats import plot_concreteness_histogram
from concrete_jungle.cli import clear_outputs, run_stage
from concrete_jungle.io import atomic_write, read_jsonl, write_metrics
from concrete_jungle.params import Params


def dataset_stats_stage(params: Params, dataset: str) -> dict:
    """Score every (v, t, v', t') quadruple of ConcreteBatch ``dataset``
    (:func:`~concrete_jungle.evaluation.dataset_stats.dataset_statistics`).

    Raises:
        FileNotFoundError: the reference checkpoint is missing; ValueError: it is not marked complete, or a record
            is malformed (named).
    """
    import pandas as pd

    from concrete_jungle.evaluation.dataset_stats import dataset_statistics, reference_checkpoint
    from concrete_jungle.models.checkpoints import load_model

    cfg = params.dataset_stats
    metrics = params.metrics_dir / "dataset_stats" / f"{dataset}.json"
    gaps_csv = params.metrics_dir / "dataset_stats" / f"{dataset}_gaps.csv"
    histogram = params.reports_dir / "dataset_stats" / f"{dataset}.png"
    clear_outputs(metrics, gaps_csv, histogram)
    bundle = load_model(reference_checkpoint(cfg.reference_model, params.models_dir))
    records = read_jsonl(params.data_dir / "concreteplant" / dataset / "concretebatch.jsonl")
    stats = dataset_statistics(records, bundle, cfg, dataset=dataset)
    gaps = pd.DataFrame(stats.pop("per_record"), columns=["anchor_id", "type", "c_i", "cos_gap", "logit_gap"])
    with atomic_write(gaps_csv) as fh:
        gaps.to_csv(fh, index=False, float_format="%.6g")  # per-record logit gap vs c_i (Fig. 4; dvc plots)
    plot_concreteness_histogram({dataset: [r["c_i"] for r in records]}, histogram)
    write_metrics(metrics, stats)
    return stats


if __name__ == "__main__":
    run_stage(__doc__, dataset_stats_stage, dataset={"choices": ["hc", "lc", "wo"]})
