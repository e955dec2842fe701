"""DVC stage `dataset_stats`: paper Table 1 figures of every ConcreteBatch of ``concreteplant.datasets`` (mean /
median c_i, I2T / T2I accuracy, BERTScore, CLIP-L / CLIP-V, DINOScore, unique keywords; Sec. 3.1), in one process
(the models are loaded once): the CLIP rows under ``dataset_stats.clip_model`` (paper profile: PE-Core-L-14-336 /
meta), the logit gaps under ``dataset_stats.reference_model``, DINOScore under ``dataset_stats.dino``.

Writes ``metrics/<p>/dataset_stats/<dataset>.json`` (with ``fig5``: Fig. 5(d) by concreteness bin, the
correlations of 5(e)/(f)), the per-pair values ``metrics/<p>/dataset_gaps/<dataset>.csv`` (logit gap of Fig. 4,
BERTScore, word edit distance, CLIP-L, CLIP-V, DINO cosine; ``dvc plots``) and the c_i histogram
``reports/<p>/dataset_stats/<dataset>.png`` of each dataset.

The DVC command sets ``PYTHONHASHSEED=0`` (``lineage.HASH_SEEDED``): ``bert_score`` batches sentences in ``set``
order, so under Python's default hash randomisation its scores differ between runs in the 9th digit; run it the
same way by hand (``PYTHONHASHSEED=0 python stages/dataset_stats.py``) to reproduce the recorded hashes.
"""

from analysis.dataset_stats import plot_concreteness_histogram
from concrete_jungle.cli import clear_outputs, run_stage
from concrete_jungle.io import atomic_write, read_jsonl, write_metrics
from concrete_jungle.params import Params

#: Columns of ``metrics/<p>/dataset_gaps/<dataset>.csv``, one row per scored pair (empty: not computed).
PAIR_COLUMNS = ["anchor_id", "type", "c_i", "cos_gap", "logit_gap", "bertscore", "word_edit_distance", "clip_l",
                "clip_v", "dino"]


def dataset_stats_stage(params: Params) -> dict:
    """Score every (v, t, v', t') quadruple of each ConcreteBatch
    (:func:`~concrete_jungle.evaluation.dataset_stats.dataset_statistics`); returns ``{dataset: statistics}``.

    Raises:
        ValueError / FileNotFoundError: before any work, naming the key: an unknown ``dataset_stats.dino.model``,
            ``dataset_stats.clip_model.name`` / ``.pretrained``, a missing ``dataset_stats.clip_model.weights_path``
            or ``.checkpoint`` or ``dataset_stats.reference_model`` checkpoint. ValueError: a checkpoint not marked
            complete, or a malformed record (named).
        ClipModelUnavailable: the CLIP-score model's tag weights are not available offline.
    """
    import pandas as pd

    from concrete_jungle.evaluation.dataset_stats import (
        build_clip_model,
        check_clip_model,
        check_dino_model,
        dataset_statistics,
        reference_checkpoint,
    )
    from concrete_jungle.models.checkpoints import load_model

    cfg = params.dataset_stats
    check_dino_model(cfg.dino)
    check_clip_model(cfg.clip_model, params.models_dir)
    reference = reference_checkpoint(cfg.reference_model, params.models_dir)
    metrics, gaps_dir, figures = (params.metrics_dir / "dataset_stats", params.metrics_dir / "dataset_gaps",
                                  params.reports_dir / "dataset_stats")
    clear_outputs(metrics, gaps_dir, figures)
    bundle = load_model(reference)
    clip_bundle = build_clip_model(cfg.clip_model, params.models_dir, reference=bundle)  # the same one by default
    out = {}
    for dataset in params.concreteplant.datasets:
        records = read_jsonl(params.data_dir / "concreteplant" / dataset / "concretebatch.jsonl")
        stats = dataset_statistics(records, bundle, cfg, dataset=dataset, clip_bundle=clip_bundle)
        gaps = pd.DataFrame(stats.pop("per_record"), columns=PAIR_COLUMNS)
        with atomic_write(gaps_dir / f"{dataset}.csv") as fh:  # per pair: Fig. 4 (logit gap vs c_i), Fig. 5(d)-(f)
            gaps.to_csv(fh, index=False, float_format="%.6g")
        plot_concreteness_histogram({dataset: [r["c_i"] for r in records]}, figures / f"{dataset}.png")
        write_metrics(metrics / f"{dataset}.json", stats)
        out[dataset] = stats
    return out

if __name__ == "__main__":
    run_stage(__doc__, dataset_stats_stage)
