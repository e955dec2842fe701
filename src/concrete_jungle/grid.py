"""The experiment grid of one profile: which models exist, where their files live, which pairs the report compares.

Models are labelled ``base`` (the starting model), a baseline name (``clip``: fine-tuned on the corpus anchors
without hard negatives) or ``<dataset>-<loss>`` (a fine-tune on ConcreteBatch ``dataset`` with a hard-negative
``loss``; paper Sec. 3, Tab. 2). The labels name the rows of every table, the result and verdict files.

Models are made and encoded by **family**, one process a family (one DVC stage): ``base``, each baseline, and each
loss, whose members are the fine-tunes of that loss on every dataset of ``train.datasets``. A family's files live
under one folder, so a stage's outputs are one path per family whatever the grid:

    models/<p>/base/checkpoint.pt            metrics/<p>/train/base/
    models/<p>/clip/checkpoint.pt            metrics/<p>/train/clip/
    models/<p>/<loss>/<dataset>/checkpoint.pt  metrics/<p>/train/<loss>/<dataset>/
"""

from __future__ import annotations

from pathlib import Path

from concrete_jungle.params import Params

__all__ = ["model_labels", "model_label", "comparison_pairs", "family_members", "family_of", "member_path",
           "model_dir", "train_metrics_dir", "families", "concreteness_pairs"]


def model_labels(params: Params) -> list[str]:
    """Labels of every evaluated model: ``base``, the baselines (``clip``), then ``<dataset>-<loss>`` for the
    training grid (``train.losses`` then ``train.margin_losses`` per dataset)."""
    t = params.train
    return ["base", *t.baselines] + [f"{d}-{loss}" for d in t.datasets for loss in [*t.losses, *t.margin_losses]]


def model_label(dataset: str, loss: str) -> str:
    """``<dataset>-<loss>`` for a ConcreteBatch fine-tune; the loss name alone for a corpus baseline
    (``dataset == "corpus"``)."""
    return loss if dataset == "corpus" else f"{dataset}-{loss}"


def families(params: Params) -> list[str]:
    """Every model family of the grid: ``base``, the baselines, ``train.losses``, ``train.margin_losses``."""
    t = params.train
    return ["base", *t.baselines, *t.losses, *t.margin_losses]


def family_members(params: Params, family: str) -> list[str]:
    """The model labels of ``family`` (``["base"]``, ``["clip"]`` or ``["hc-<loss>", "lc-<loss>", ...]``).

    Raises:
        ValueError: ``family`` is not in the grid (:func:`families`).
    """
    t = params.train
    if family not in families(params):
        raise ValueError(f"model family {family!r} is not in the grid {families(params)} (train.losses, "
                         "train.margin_losses, train.baselines)")
    if family == "base" or family in t.baselines:
        return [family]
    return [model_label(d, family) for d in t.datasets]


def family_of(label: str) -> str:
    """The family of a model label: ``hc-cement`` -> ``cement``; ``base`` / ``clip`` are their own family."""
    return label.split("-", 1)[1] if "-" in label else label


def member_path(label: str) -> Path:
    """Where a model's files sit inside a family-keyed folder: ``base``, ``clip``, ``<loss>/<dataset>``."""
    if "-" in label:
        dataset, loss = label.split("-", 1)
        return Path(loss) / dataset
    return Path(label)


def model_dir(params: Params, label: str) -> Path:
    """The checkpoint folder of model ``label`` (``models/<p>/<member_path>``)."""
    return params.models_dir / member_path(label)


def train_metrics_dir(params: Params, label: str) -> Path:
    """The dvclive folder of model ``label``'s training run (``metrics/<p>/train/<member_path>``)."""
    return params.metrics_dir / "train" / member_path(label)


def comparison_pairs(params: Params) -> list[tuple[str, str]]:
    """The ``(model, reference)`` pairs the report compares paired on the benchmark items: every fine-tune
    against ``base``; every hard-negative fine-tune against each baseline (same steps, no hard negatives);
    every margin loss against InfoNCE on the same dataset (the paper's Cement-vs-InfoNCE question) when
    ``infonce`` is in ``train.losses``; the concreteness effect, default and type-matched
    (:func:`concreteness_pairs`)."""
    labels = model_labels(params)
    tp = params.train
    pairs = [(lab, "base") for lab in labels if lab != "base"]
    hard = [lab for lab in labels if lab != "base" and lab not in tp.baselines]
    pairs += [(lab, bl) for bl in tp.baselines for lab in hard]
    if "infonce" in tp.losses:
        pairs += [(model_label(d, m), model_label(d, "infonce")) for d in tp.datasets for m in tp.margin_losses]
    pairs += concreteness_pairs(params)
    return pairs


def concreteness_pairs(params: Params) -> list[tuple[str, str]]:
    """The concreteness effect (paper Sec. 3.1 / 3.3: D_hc vs D_lc), per loss: ``(hc-<loss>, lc-<loss>)`` and,
    when the type-matched pair is in ``train.datasets``, ``(hc_type-<loss>, lc_type-<loss>)`` — the same
    comparison with every anchor's keyword type held fixed (the reviewers' control)."""
    tp = params.train
    return [(model_label(hi, loss), model_label(lo, loss))
            for hi, lo in (("hc", "lc"), ("hc_type", "lc_type")) if hi in tp.datasets and lo in tp.datasets
            for loss in [*tp.losses, *tp.margin_losses]]
