"""The experiment grid of one profile: which models exist and which pairs the report compares.

Models are labelled ``base`` (the starting model), a baseline name (``clip``: fine-tuned on the corpus anchors
without hard negatives) or ``<dataset>-<loss>`` (a fine-tune on ConcreteBatch ``dataset`` with a hard-negative
``loss``; paper Sec. 3, Tab. 2). The labels name the DVC stages, checkpoints, metrics and verdict files.
"""

from __future__ import annotations

from concrete_jungle.params import Params

__all__ = ["model_labels", "model_label", "comparison_pairs"]


def model_labels(params: Params) -> list[str]:
    """Labels of every evaluated model: ``base``, the baselines (``clip``), then ``<dataset>-<loss>`` for the
    training grid (``train.losses`` then ``train.margin_losses`` per dataset)."""
    t = params.train
    return ["base", *t.baselines] + [f"{d}-{loss}" for d in t.datasets for loss in [*t.losses, *t.margin_losses]]


def model_label(dataset: str, loss: str) -> str:
    """``<dataset>-<loss>`` for a ConcreteBatch fine-tune; the loss name alone for a corpus baseline
    (``dataset == "corpus"``)."""
    return loss if dataset == "corpus" else f"{dataset}-{loss}"


def comparison_pairs(params: Params) -> list[tuple[str, str]]:
    """The ``(model, reference)`` pairs the report compares paired on the benchmark items: every fine-tune
    against ``base``; every hard-negative fine-tune against each baseline (same steps, no hard negatives);
    every margin loss against InfoNCE on the same dataset (the paper's Cement-vs-InfoNCE question) when
    ``infonce`` is in ``train.losses``."""
    labels = model_labels(params)
    tp = params.train
    pairs = [(lab, "base") for lab in labels if lab != "base"]
    hard = [lab for lab in labels if lab != "base" and lab not in tp.baselines]
    pairs += [(lab, bl) for bl in tp.baselines for lab in hard]
    if "infonce" in tp.losses:
        pairs += [(model_label(d, m), model_label(d, "infonce")) for d in tp.datasets for m in tp.margin_losses]
    return pairs
