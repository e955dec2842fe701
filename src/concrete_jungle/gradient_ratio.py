"""Gradient-ratio study (paper Sec. 2.3 and Sec. 3.3, Fig. 3 and Fig. 6): how much of the negative (push)
gradient of InfoNCE reaches the hard negative, as the batch grows and as a margin is added.

For row i of the softmax over 2N logits, dL/ds_{i,j} = p_{i,j} for j != i, so the share of the push gradient that
goes to the hard negative i' is the **gradient ratio** p_{i,i'} / (1 - p_{i,i}); one minus it is the easy-negative
share. The paper reports it falling below 0.2 at N = 1024 for InfoNCE and rising with the margin m.

The study embeds ConcreteBatch pairs once with the current model (anchors v_i, t_i and hard negatives v'_i,
t'_i; cosine space), then for each N of ``batch_sizes`` draws ``n_batches`` random batches of N pairs, lays them
out as the 2N x 2N ConcreteBatch (:mod:`concrete_jungle.losses`), applies each loss variant with the model's
logit scale and reads the ratio the trainer logs (the ``gradient_ratio`` statistic of a ``return_stats=True``
call: mean over rows and both directions). Values are therefore exactly what ``train/gradient_ratio`` would show
at step 0 of a run at that N.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from concrete_jungle.losses import MarginConfig, build_loss, stats_to_floats

__all__ = ["study_losses", "gradient_ratio_study"]


def study_losses(margin: MarginConfig, static_margins: Sequence[float]) -> dict[str, nn.Module]:
    """The variants of the study: ``infonce`` (m = 0), ``cement`` (adaptive m^_i of ``margin``) and
    ``static_margin=<m>`` for each constant margin m (logit units) of ``static_margins``."""
    losses = {"infonce": build_loss("infonce"), "cement": build_loss("cement", margin)}
    for m in static_margins:
        losses[f"static_margin={m:g}"] = build_loss("static_margin", dataclasses.replace(margin, static=float(m)))
    return losses


@torch.no_grad()
def gradient_ratio_study(
    anchor_images: torch.Tensor,
    anchor_texts: torch.Tensor,
    negative_images: torch.Tensor,
    negative_texts: torch.Tensor,
    concreteness: torch.Tensor,
    logit_scale: float,
    batch_sizes: Sequence[int],
    losses: Mapping[str, nn.Module],
    n_batches: int = 4,
    seed: int = 0,
) -> dict:
    """Gradient ratio and easy-negative share per (N, loss variant) on random batches of real pairs.

    Args:
        anchor_images, anchor_texts, negative_images, negative_texts: ``[M, D]`` L2-normalised embeddings of M
            ConcreteBatch pairs (v_i, t_i, v'_i, t'_i), cosine space.
        concreteness: ``[M]`` keyword concreteness c_i (Brysbaert 1-5).
        logit_scale: the exponentiated logit scale of the model (logits = scale * cosine).
        batch_sizes: the N to study; an N larger than M is skipped and recorded in ``skipped``.
        losses: variant name -> hard-negative loss module (called with ``return_stats=True``).
        n_batches: random batches per N (without replacement inside a batch), >= 1.
        seed: seed of the batch draws (the same batches serve every variant).

    Returns:
        ``{"rows": [{"N", "loss", "gradient_ratio", "gradient_ratio_sd", "easy_negative_share", "logit_gap",
        "n_batches"}], "skipped": {str(N): reason}, "n_pairs": M, "logit_scale": scale}``; all values finite.

    Raises:
        ValueError: on mismatched shapes, an N < 1, or ``n_batches < 1``.
    """
    m = anchor_images.shape[0]
    for name, t in (("anchor_texts", anchor_texts), ("negative_images", negative_images),
                    ("negative_texts", negative_texts)):
        if t.shape != anchor_images.shape:
            raise ValueError(f"gradient_ratio_study: {name} has shape {tuple(t.shape)}, expected "
                             f"{tuple(anchor_images.shape)}")
    if concreteness.shape != (m,):
        raise ValueError(f"gradient_ratio_study: concreteness has shape {tuple(concreteness.shape)}, expected ({m},)")
    if n_batches < 1:
        raise ValueError(f"gradient_ratio_study: n_batches must be >= 1, got {n_batches}")
    rng = np.random.default_rng(seed)
    rows, skipped = [], {}
    for n in batch_sizes:
        if n < 1:
            raise ValueError(f"gradient_ratio_study: batch size N must be >= 1, got {n}")
        if n > m:
            skipped[str(n)] = f"only {m} pairs available"
            continue
        draws = [torch.from_numpy(rng.choice(m, size=n, replace=False)) for _ in range(n_batches)]
        for name, loss in losses.items():
            ratios, easy, gaps = [], [], []
            for idx in draws:
                img = torch.cat([anchor_images[idx], negative_images[idx]])
                txt = torch.cat([anchor_texts[idx], negative_texts[idx]])
                st = stats_to_floats(loss(img, txt, logit_scale, concreteness=concreteness[idx],
                                          return_stats=True)["stats"])
                ratios.append(st["gradient_ratio"])
                easy.append(st["easy_negative_share"])
                gaps.append(st["logit_gap"])
            rows.append({"N": int(n), "loss": name, "gradient_ratio": statistics.fmean(ratios),
                         "gradient_ratio_sd": statistics.pstdev(ratios), "easy_negative_share": statistics.fmean(easy),
                         "logit_gap": statistics.fmean(gaps), "n_batches": n_batches})
    return {"rows": rows, "skipped": skipped, "n_pairs": int(m), "logit_scale": float(logit_scale)}
