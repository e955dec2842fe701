"""Contrastive losses with hard negatives: InfoNCE and Cement loss (paper Sec. 2.3).

Shapes follow open_clip's loss classes: a shared :func:`get_logits` and a ``forward`` that returns a dict of
named loss terms (their sum is the training loss).

Batch layout (ConcreteBatch, Sec. 2.3): a batch holds N anchors and their N hard negatives, 2N rows in all::

    image_features = [v_1 .. v_N, v'_1 .. v'_N]      # [2N, D], L2-normalised
    text_features  = [t_1 .. t_N, t'_1 .. t'_N]      # [2N, D], L2-normalised

so the positive of row i is column i and its hard negative is column i' = (i + N) mod 2N. Logits are
``s = logit_scale * cos`` (logit space), 2N x 2N in each direction.

Margins act in **logit space**, after the logit scale: the paper writes s~_{i,i'} = s_{i,i'} + m with s the
quantity inside exp(.) of the softmax (Eq. for L_{v->t}), i.e. the scaled logit. The margin is added to the
hard-negative entry of every row in **both** directions (image->text row i, column i'; text->image row i,
column i'), for all 2N rows, since the paper's sum runs over i = 1..2N and the loss is symmetric. Row i and row
i + N share the margin of pair i, m^_i = m(c_i).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from open_clip.loss import ClipLoss
from torch import nn

__all__ = [
    "MarginConfig",
    "fermi_dirac_margin",
    "get_logits",
    "hard_negative_index",
    "hard_negative_gradient_ratio",
    "HardNegativeContrastiveLoss",
    "InfoNCELoss",
    "CementLoss",
    "LOSSES",
    "build_loss",
    "ClipLoss",
]


@dataclass(frozen=True)
class MarginConfig:
    """Parameters of the adaptive margin (paper Sec. 3: [m_min, m_max] = [-2, 2], c~ = 4, tau_m = 0.15).

    Margins are in logit units; ``c_tilde`` is on the Brysbaert concreteness scale (1-5).

    Raises:
        ValueError: if ``m_min > m_max`` or ``tau <= 0`` (naming the field).
    """

    m_min: float = -2.0
    m_max: float = 2.0
    c_tilde: float = 4.0
    tau: float = 0.15

    def __post_init__(self) -> None:
        if not self.m_min <= self.m_max:
            raise ValueError(f"margin.m_min ({self.m_min}) must be <= margin.m_max ({self.m_max})")
        if not self.tau > 0:
            raise ValueError(f"margin.tau must be > 0, got {self.tau}")
        for name in ("m_min", "m_max", "c_tilde", "tau"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"margin.{name} must be finite, got {getattr(self, name)}")


def fermi_dirac_margin(concreteness: torch.Tensor, cfg: MarginConfig) -> torch.Tensor:
    """Adaptive margin m^_i of Cement loss (paper Sec. 2.3, equation for m^_i).

    m^_i = (m_max - m_min) / (1 + exp((c~ - c_i) / tau_m)) + m_min

    Args:
        concreteness: ``[N]`` keyword concreteness c_i on the Brysbaert 1-5 scale.
        cfg: margin parameters.

    Returns:
        ``[N]`` margins in logit units; m^ = (m_max + m_min) / 2 at c_i = c~, -> m_max for c_i >> c~.
    """
    c = concreteness.to(torch.float32)
    return (cfg.m_max - cfg.m_min) * torch.sigmoid((c - cfg.c_tilde) / cfg.tau) + cfg.m_min


def get_logits(
    image_features: torch.Tensor, text_features: torch.Tensor, logit_scale: torch.Tensor | float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled similarity logits in both directions, as open_clip's ``ClipLoss.get_logits``.

    Args:
        image_features: ``[B, D]`` L2-normalised image embeddings.
        text_features: ``[B, D]`` L2-normalised text embeddings.
        logit_scale: exponentiated scale (scalar, e.g. 100 at most).

    Returns:
        ``(logits_per_image [B, B], logits_per_text [B, B])`` in logit space; the second is the transpose.
    """
    logits_per_image = logit_scale * image_features @ text_features.T
    return logits_per_image, logits_per_image.T


def hard_negative_index(two_n: int, device: torch.device | None = None) -> torch.Tensor:
    """Column of each row's hard negative in the 2N layout: i' = (i + N) mod 2N.

    Raises:
        ValueError: if ``two_n`` is not a positive even number.
    """
    if two_n <= 0 or two_n % 2:
        raise ValueError(f"hard-negative batch must have an even, positive number of rows (2N), got {two_n}")
    n = two_n // 2
    return (torch.arange(two_n, device=device) + n) % two_n


def _apply_hard_negative_terms(
    logits: torch.Tensor, margin_2n: torch.Tensor | None, valid_2n: torch.Tensor | None
) -> torch.Tensor:
    """Add the margin to each row's hard-negative logit and mask invalid hard negatives (-inf)."""
    two_n = logits.shape[0]
    rows = torch.arange(two_n, device=logits.device)
    cols = hard_negative_index(two_n, logits.device)
    add = torch.zeros(two_n, device=logits.device, dtype=logits.dtype)
    if margin_2n is not None:
        add = add + margin_2n.to(logits.dtype)
    if valid_2n is not None:
        add = add.masked_fill(~valid_2n, float("-inf"))
    if margin_2n is None and valid_2n is None:
        return logits
    delta = torch.zeros_like(logits)
    delta[rows, cols] = add
    return logits + delta


def hard_negative_gradient_ratio(logits: torch.Tensor, valid_2n: torch.Tensor | None = None) -> torch.Tensor:
    """Share of the negative (push) gradient that goes to the hard negative, per row (paper Sec. 2.3, Fig. 3/6).

    For row i of a softmax cross-entropy over logits s (margin already added), dL/ds_{i,i} = -(1 - p_{i,i}) and
    dL/ds_{i,j} = p_{i,j}; the ratio is p_{i,i'} / (1 - p_{i,i}) = p_{i,i'} / sum_{j != i} p_{i,j}. One minus it is
    the easy-negative share.

    Args:
        logits: ``[2N, 2N]`` logits of one direction (after margin and masking).
        valid_2n: optional ``[2N]`` bool; rows whose hard negative is masked are excluded (NaN-free: they get 0).

    Returns:
        ``[2N]`` ratios in [0, 1], detached.
    """
    with torch.no_grad():
        logits = logits.float()
        p = logits.softmax(dim=1)
        two_n = logits.shape[0]
        rows = torch.arange(two_n, device=logits.device)
        p_hard = p[rows, hard_negative_index(two_n, logits.device)]
        # 1 - p_ii computed as the sum of the other probabilities, stable when p_ii -> 1.
        log_p = logits.log_softmax(dim=1)
        diag_mask = torch.eye(two_n, dtype=torch.bool, device=logits.device)
        log_rest = torch.logsumexp(log_p.masked_fill(diag_mask, float("-inf")), dim=1)
        ratio = torch.exp(torch.log(p_hard.clamp_min(1e-38)) - log_rest)
        ratio = torch.where(p_hard > 0, ratio, torch.zeros_like(ratio))
        if valid_2n is not None:
            ratio = torch.where(valid_2n, ratio, torch.zeros_like(ratio))
        return ratio.clamp(0.0, 1.0)


class HardNegativeContrastiveLoss(nn.Module):
    """Symmetric InfoNCE over a 2N x 2N ConcreteBatch, with an optional per-pair margin on hard negatives.

    L = (L_{v->t} + L_{t->v}) / 2, L_{v->t} = -1/(2N) sum_i log softmax(s~_{i,:})_i (paper Sec. 2.3), where
    s~_{i,i'} = s_{i,i'} + m_i and every other entry is unchanged.

    After each forward the detached statistics of the batch are in ``self.stats``, over valid (unmasked) pairs:
    ``gradient_ratio`` (mean over rows and both directions of p_{i,i'} / (1 - p_{i,i}); 0 when every hard negative
    is masked), ``easy_negative_share`` (1 - that), ``margin_mean`` and ``logit_gap`` (mean s_{i,i} - s_{i,i'}
    before the margin, image->text, logit space).
    """

    name = "hard_negative"

    def __init__(self) -> None:
        super().__init__()
        self.stats: dict[str, float] = {}

    def margins(self, concreteness: torch.Tensor | None, n: int, device: torch.device) -> torch.Tensor | None:
        """Per-pair margin ``[N]`` in logit units, or None for no margin (plain InfoNCE)."""
        return None

    def forward(
        self,
        image_features: torch.Tensor,
        text_features: torch.Tensor,
        logit_scale: torch.Tensor | float,
        concreteness: torch.Tensor | None = None,
        hard_negative_valid: torch.Tensor | None = None,
        output_dict: bool = True,
    ):
        """Compute the loss.

        Args:
            image_features: ``[2N, D]`` normalised, anchors first then their hard-negative images.
            text_features: ``[2N, D]`` normalised, anchor captions then hard-negative captions.
            logit_scale: exponentiated logit scale (scalar tensor or float).
            concreteness: ``[N]`` keyword concreteness c_i (1-5); required by margin losses that depend on it.
            hard_negative_valid: optional ``[N]`` bool; False masks pair i's hard-negative entries (e.g. a negative
                caption that tokenises to the anchor's), so they are never pushed away.
            output_dict: return ``{"contrastive_loss": loss}`` (open_clip style) instead of the bare tensor.

        Raises:
            ValueError: on mismatched shapes or an odd number of rows.
        """
        if image_features.shape != text_features.shape:
            raise ValueError(
                f"image_features {tuple(image_features.shape)} and text_features {tuple(text_features.shape)} differ"
            )
        two_n = image_features.shape[0]
        hard_negative_index(two_n)  # validates 2N
        n = two_n // 2
        device = image_features.device
        logits_per_image, logits_per_text = get_logits(image_features, text_features, logit_scale)
        margin = self.margins(concreteness, n, device)
        margin_2n = None if margin is None else torch.cat([margin, margin])
        valid_2n = None
        if hard_negative_valid is not None:
            if hard_negative_valid.shape != (n,):
                raise ValueError(f"hard_negative_valid must have shape ({n},), got {tuple(hard_negative_valid.shape)}")
            valid_2n = torch.cat([hard_negative_valid, hard_negative_valid]).to(device=device, dtype=torch.bool)
        li = _apply_hard_negative_terms(logits_per_image, margin_2n, valid_2n)
        lt = _apply_hard_negative_terms(logits_per_text, margin_2n, valid_2n)
        labels = torch.arange(two_n, device=device)
        loss = (F.cross_entropy(li, labels) + F.cross_entropy(lt, labels)) / 2

        with torch.no_grad():
            ratio = torch.cat([hard_negative_gradient_ratio(li, valid_2n), hard_negative_gradient_ratio(lt, valid_2n)])
            n_valid = ratio.numel() if valid_2n is None else int(valid_2n.sum()) * 2
            # With every hard negative masked, all of the push goes to easy negatives: ratio 0, share 1.
            mean_ratio = float(ratio.sum() / n_valid) if n_valid else 0.0
            cols = hard_negative_index(two_n, device)
            gap = (logits_per_image.diagonal() - logits_per_image[labels, cols]).float()
            pair_ok = torch.ones(n, dtype=torch.bool, device=device) if hard_negative_valid is None \
                else hard_negative_valid.to(device=device, dtype=torch.bool)
            gap_ok = torch.cat([pair_ok, pair_ok])
            self.stats = {
                "gradient_ratio": mean_ratio,
                "easy_negative_share": 1.0 - mean_ratio,
                "margin_mean": 0.0 if margin is None or not pair_ok.any() else float(margin.float()[pair_ok].mean()),
                "logit_gap": float(gap[gap_ok].mean()) if gap_ok.any() else 0.0,
            }
        return {"contrastive_loss": loss} if output_dict else loss


class InfoNCELoss(HardNegativeContrastiveLoss):
    """InfoNCE with hard negatives in the batch, no margin (paper Sec. 2.3, L_{v->t} and its t->v twin)."""

    name = "infonce"


class CementLoss(HardNegativeContrastiveLoss):
    """Cement loss: InfoNCE with the adaptive Fermi-Dirac margin m^_i on hard-negative logits (paper Sec. 2.3).

    With m_min = m_max = 0 it equals :class:`InfoNCELoss` exactly.
    """

    name = "cement"

    def __init__(self, margin: MarginConfig) -> None:
        super().__init__()
        self.margin_cfg = margin

    def margins(self, concreteness: torch.Tensor | None, n: int, device: torch.device) -> torch.Tensor:
        """``[N]`` margins m^_i = fermi_dirac_margin(c_i) in logit units.

        Raises:
            ValueError: if ``concreteness`` is missing or not of shape ``[N]``.
        """
        if concreteness is None:
            raise ValueError("Cement loss needs the keyword concreteness c_i of every pair (got None)")
        if concreteness.shape != (n,):
            raise ValueError(f"concreteness must have shape ({n},), got {tuple(concreteness.shape)}")
        return fermi_dirac_margin(concreteness.to(device), self.margin_cfg)


LOSSES = {"infonce": InfoNCELoss, "cement": CementLoss, "clip": ClipLoss}


def build_loss(name: str, margin: MarginConfig | None = None) -> nn.Module:
    """Build a loss by its registry name: ``clip`` (N x N, no hard negatives), ``infonce``, ``cement``.

    Raises:
        ValueError: for an unknown name (listing the known ones).
    """
    if name not in LOSSES:
        raise ValueError(f"unknown loss {name!r}; known: {sorted(LOSSES)}")
    if name == "cement":
        return CementLoss(margin or MarginConfig())
    return LOSSES[name]()
