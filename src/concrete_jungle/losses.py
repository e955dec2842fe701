"""Contrastive losses of the paper's training (Sec. 2.3, 3.2, 3.3): one registry of loss variants by name.

Shapes follow open_clip's loss classes: shared logits (:func:`get_logits`) and a ``forward`` that returns a dict of
named loss terms (their sum is the training loss). Every loss takes the same call::

    loss_fn(image_features, text_features, logit_scale, concreteness=None, hard_negative_valid=None,
            output_dict=True, return_stats=False)

and is **stateless**: nothing of a batch is kept on the module. With ``return_stats=True`` (the trainer asks for it
on logging steps only) the call returns ``{"losses": {name: scalar}, "stats": {name: 0-d tensor}}`` instead of the
bare terms, the statistics below computed from the same logits (no second forward); :func:`stats_to_floats` reads
them to Python floats with one device synchronisation. Without it no statistic is computed at all.

Variants (:data:`LOSSES`, built by :func:`build_loss`; 2N = takes the ConcreteBatch hard negatives):

- ``clip``: N x N over the anchors only (open_clip ``ClipLoss``), the "COCO fine-tune" baseline (Tab. 2/3); no 2N.
- ``infonce``: 2N x 2N ConcreteBatch, symmetric I2T + T2I, no margin (Sec. 2.3).
- ``cement``: infonce + adaptive margin m^_i, Fermi-Dirac in c_i, rising with concreteness (Sec. 2.3). Margin.
- ``static_margin``: infonce + a constant margin m (paper: 1; Sec. 3.3). Margin.
- ``inverse_margin``: infonce + the mirrored Fermi-Dirac margin, falling with concreteness (Sec. 3.3). Margin.
- ``negclip``: NegCLIP's layout, I2T N x 2N over [T; T'], T2I N x N over anchor images only; hard-negative images
  unused (outside baseline).

**One forward path.** Every class of :data:`LOSSES` has the same ``forward`` (checks, then the variant's loss).
The five hard-negative variants share all of it (:class:`HardNegativeContrastiveLoss._contrastive`: one product for
the logits, margin and mask written into the hard-negative entries, both softmaxes off that one matrix, the
statistics as sums) and supply only their margin (:meth:`~HardNegativeContrastiveLoss.margins`) or, for ``negclip``,
their layout (``needs_hard_negative_images = False``). The same ``_contrastive`` also serves the reference path from
separate logits (:meth:`~HardNegativeContrastiveLoss.loss_from_logits`) and the row-sharded data-parallel loss
(``distributed.local_rows_loss``: some rows of the global batch against all of its columns, statistics summed over
ranks). ``clip`` hands its logits and loss to open_clip's ``ClipLoss``.

ConcreteBatch layout (Sec. 2.3): a batch holds N anchors and their N hard negatives, 2N rows in all::

    image_features = [v_1 .. v_N, v'_1 .. v'_N]      # [2N, D], L2-normalised (cosine space)
    text_features  = [t_1 .. t_N, t'_1 .. t'_N]      # [2N, D], L2-normalised

The positive of row i is column i and its hard negative is column i' = (i + N) mod 2N, in both directions
(image->text, I2T: rows are images; text->image, T2I: rows are texts). Logits are ``s = logit_scale * cos``.

**Where margins act.** In logit space, after the logit scale: the paper writes s~_{i,i'} = s_{i,i'} + m where s is
the quantity inside exp(.) of the softmax of L_{v->t} (Sec. 2.3), i.e. the scaled logit, and its margin range
[m_min, m_max] = [-2, 2] and static m = 1 (Sec. 3) only make sense there: in cosine space (values in [-1, 1]) a
margin of 2 would lift every hard negative above every positive. The margin of pair i, m_i, is added to its two
hard-negative entries s(v_i, t'_i) and s(v'_i, t_i). Each entry is the hard negative of one I2T row and one T2I row
(s(v_i, t'_i) is I2T row i, column i' and T2I row i', column i), so every one of the 2N rows of **both** directions
gets m_i on its hard negative, as the paper's sum over i = 1..2N and its symmetric loss require; positives and easy
negatives are unchanged.

**Masking.** ``hard_negative_valid`` ``[N]`` bool: False marks a pair whose hard-negative caption tokenises to its
anchor's. Its hard-negative entries are set to -inf in both directions (never pushed away; their gradient is exactly
0) and its rows are left out of the statistics; everything else about the pair (its positives, its texts and images
as easy negatives of other rows) is unchanged.

**Statistics** (``out["stats"]`` with ``return_stats=True``: detached 0-d tensors on the features' device, float32
or the logits' wider dtype; rows with a masked hard negative excluded; names in :data:`STAT_NAMES`):

- ``gradient_ratio``: mean over rows (both directions where both have hard negatives) of the hard-negative
  gradient ratio p_{i,i'} / (1 - p_{i,i}) = (dL/ds_{i,i'}) / (-dL/ds_{i,i}) (Sec. 2.3, Fig. 3 / 6), with p the
  softmax of the logits after margin and mask; 0 when no row has a hard negative.
- ``easy_negative_share``: 1 - ``gradient_ratio``, the share of the push that goes to easy negatives.
- ``margin_mean``: mean margin over valid pairs, logit units (0 without a margin).
- ``logit_gap``: mean s_{i,i} - s_{i,i'} over valid I2T rows before the margin, logit units (Sec. 2.3, Fig. 5).
- ``masked_hard_negatives``: number of pairs of the batch whose hard negative is masked.

``clip`` has no hard negatives: its ``gradient_ratio`` is 0, ``easy_negative_share`` 1, ``margin_mean`` 0,
``masked_hard_negatives`` 0 and it has no ``logit_gap``.

**No host synchronisation.** A call without ``return_stats`` launches device work only: the per-pair inputs are
checked by shape and dtype; the *values* of ``concreteness`` (finite, in [1, 5]) are checked when the tensor is on
the CPU (as the trainer passes it), and not for accelerator tensors, where the check would block on the device
every step (``ConcreteBatchDataset`` checks every c_i when it is built).
"""

from __future__ import annotations

import torch
from open_clip.loss import ClipLoss
from torch import nn

from concrete_jungle.params import MarginConfig  # re-exported: the config lives in params

__all__ = [
    "CONCRETENESS_RANGE",
    "MarginConfig",
    "fermi_dirac_margin",
    "inverse_fermi_dirac_margin",
    "get_logits",
    "hard_negative_index",
    "hard_negative_gradient_ratio",
    "hard_negative_offsets",
    "STAT_NAMES",
    "STAT_SUM_NAMES",
    "statistics_from_sums",
    "stats_to_floats",
    "evaluate_loss",
    "HardNegativeContrastiveLoss",
    "InfoNCELoss",
    "CementLoss",
    "StaticMarginLoss",
    "InverseMarginLoss",
    "NegCLIPLoss",
    "ClipFineTuneLoss",
    "ClipLoss",
    "LOSSES",
    "MARGIN_LOSSES",
    "HARD_NEGATIVE_LOSSES",
    "build_loss",
]

#: Brysbaert et al. (2014) concreteness scale of the keyword, c_i in [1, 5].
CONCRETENESS_RANGE = (1.0, 5.0)


def _margin_input(concreteness: torch.Tensor) -> torch.Tensor:
    return concreteness.to(torch.float64 if concreteness.dtype == torch.float64 else torch.float32)


def fermi_dirac_margin(concreteness: torch.Tensor, cfg: MarginConfig) -> torch.Tensor:
    """Adaptive margin m^_i of Cement loss (paper Sec. 2.3, equation for m^_i).

    m^_i = (m_max - m_min) / (1 + exp((c~ - c_i) / tau_m)) + m_min

    Args:
        concreteness: ``[N]`` keyword concreteness c_i (Brysbaert 1-5 scale; any finite value is computed).
        cfg: margin parameters.

    Returns:
        ``[N]`` margins in logit units (float64 for float64 input, else float32): (m_max + m_min) / 2 at c_i = c~,
        -> m_max for c_i >> c~ and -> m_min for c_i << c~ (concrete keywords get the larger margin).
    """
    c = _margin_input(concreteness)
    return (cfg.m_max - cfg.m_min) * torch.sigmoid((c - cfg.c_tilde) / cfg.tau) + cfg.m_min


def inverse_fermi_dirac_margin(concreteness: torch.Tensor, cfg: MarginConfig) -> torch.Tensor:
    """Inverse margin of the ablation (paper Sec. 3.3): the Fermi-Dirac margin mirrored about c~.

    m^_i = (m_max - m_min) / (1 + exp((c_i - c~) / tau_m)) + m_min

    Args:
        concreteness: ``[N]`` keyword concreteness c_i (Brysbaert 1-5 scale).
        cfg: margin parameters (the same fields as :func:`fermi_dirac_margin`).

    Returns:
        ``[N]`` margins in logit units (dtype as :func:`fermi_dirac_margin`): (m_max + m_min) / 2 at c_i = c~,
        -> m_min for c_i >> c~ (abstract keywords get the larger margin).
    """
    c = _margin_input(concreteness)
    return (cfg.m_max - cfg.m_min) * torch.sigmoid((cfg.c_tilde - c) / cfg.tau) + cfg.m_min


def get_logits(
    image_features: torch.Tensor, text_features: torch.Tensor, logit_scale: torch.Tensor | float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled similarity logits in both directions, as open_clip's ``ClipLoss.get_logits`` (one product).

    Args:
        image_features: ``[B, D]`` L2-normalised image embeddings (cosine space).
        text_features: ``[C, D]`` L2-normalised text embeddings.
        logit_scale: exponentiated scale (scalar tensor or float, e.g. at most 100).

    Returns:
        ``(logits_per_image [B, C], logits_per_text [C, B])`` in logit space; the second is a transposed view of
        the first.
    """
    logits_per_image = (logit_scale * image_features) @ text_features.T
    return logits_per_image, logits_per_image.T


def hard_negative_index(two_n: int, device: torch.device | None = None) -> torch.Tensor:
    """Column of each row's hard negative in the 2N ConcreteBatch layout: i' = (i + N) mod 2N.

    Returns:
        ``[2N]`` int64 column indices.

    Raises:
        ValueError: if ``two_n`` is not a positive even number.
    """
    if two_n <= 0 or two_n % 2:
        raise ValueError(f"hard-negative batch must have an even, positive number of rows (2N), got {two_n}")
    n = two_n // 2
    return (torch.arange(two_n, device=device) + n) % two_n


def _ratio_from_log_probs(log_p: torch.Tensor, hard_cols: torch.Tensor,
                          pos_cols: torch.Tensor | None = None) -> torch.Tensor:
    """``[R]`` p_{r,h(r)} / sum_{j != pos(r)} p_{r,j} from detached log-probabilities ``[R, C]``; the positive of
    row r is column ``pos_cols[r]`` (default r).

    The denominator is summed over the other columns rather than taken as 1 - p_{r,r}, so it keeps full relative
    precision when p_{r,r} -> 1. One exp pass and one sum pass over the matrix.
    """
    p = log_p.exp()
    p_hard = p.gather(1, hard_cols[:, None]).squeeze(1)
    if pos_cols is None:
        p.diagonal().zero_()
    else:
        p.scatter_(1, pos_cols[:, None], 0.0)
    rest = p.sum(dim=1)
    ratio = torch.where(rest > 0, p_hard / rest.clamp_min(torch.finfo(rest.dtype).tiny), torch.zeros_like(rest))
    return ratio.clamp_(0.0, 1.0)


def _stat_dtype(t: torch.Tensor) -> torch.Tensor:
    """Detached copy of a statistic in at least float32 (bf16 / fp16 logits are averaged in float32)."""
    return t.detach().to(torch.promote_types(t.dtype, torch.float32))


def hard_negative_gradient_ratio(
    logits: torch.Tensor, valid: torch.Tensor | None = None, hard_negative_cols: torch.Tensor | None = None
) -> torch.Tensor:
    """Share of the negative (push) gradient that goes to the hard negative, per row (paper Sec. 2.3, Fig. 3/6).

    For row i of a softmax cross-entropy over logits s (margin already added), dL/ds_{i,i} = -(1 - p_{i,i}) and
    dL/ds_{i,j} = p_{i,j}; the ratio is p_{i,i'} / (1 - p_{i,i}) = p_{i,i'} / sum_{j != i} p_{i,j}, computed as the
    latter (exact in relative terms even when p_{i,i} -> 1). One minus it is the easy-negative share.

    Args:
        logits: ``[R, C]`` logits of one direction (logit space, after margin and masking), the positive of row r
            in column r (``C >= R``).
        valid: optional ``[R]`` bool; rows whose hard negative is masked get 0.
        hard_negative_cols: ``[R]`` column of each row's hard negative; default the 2N layout
            :func:`hard_negative_index` (then ``R == C`` must be even).

    Returns:
        ``[R]`` ratios in [0, 1], detached, in the dtype of ``logits``.

    Raises:
        ValueError: if ``logits`` is not 2-D with ``C >= R``, or the index / mask shapes differ from ``[R]``.
    """
    if logits.ndim != 2 or logits.shape[1] < logits.shape[0]:
        raise ValueError(f"logits must be [R, C] with C >= R, got {tuple(logits.shape)}")
    r = logits.shape[0]
    if hard_negative_cols is None:
        if logits.shape[1] != r:
            raise ValueError(f"logits {tuple(logits.shape)} are not square: pass hard_negative_cols")
        hard_negative_cols = hard_negative_index(r, logits.device)
    if hard_negative_cols.shape != (r,):
        raise ValueError(f"hard_negative_cols must have shape ({r},), got {tuple(hard_negative_cols.shape)}")
    with torch.no_grad():
        ratio = _ratio_from_log_probs(logits.detach().log_softmax(dim=1), hard_negative_cols.to(logits.device))
        if valid is not None:
            if valid.shape != (r,):
                raise ValueError(f"valid must have shape ({r},), got {tuple(valid.shape)}")
            ratio = torch.where(valid.to(device=ratio.device, dtype=torch.bool), ratio, torch.zeros_like(ratio))
        return ratio


def hard_negative_offsets(
    margin: torch.Tensor | None, valid: torch.Tensor | None, pairs: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor | None:
    """What each row adds to its hard-negative logit: s~_{r,h(r)} = s_{r,h(r)} + m_{pair(r)} (paper Sec. 2.3).

    The one place where margin and mask become logit offsets; the loss classes and the row-sharded
    ``distributed.local_rows_loss`` both write them with ``index_put(..., accumulate=True)`` at each row's hard-negative
    column.

    Args:
        margin: ``[N]`` per-pair margin m_i in logit units (after the logit scale), or None for no margin.
        valid: ``[N]`` bool, False = pair i's hard negative is masked (its offset becomes -inf), or None.
        pairs: ``[R]`` int64 pair of each row, i mod N in the 2N layout (on the device of ``margin`` / ``valid``).
        dtype: dtype of the logits the offsets are added to.

    Returns:
        ``[R]`` offsets in logit units (m_{pair(r)}, 0 without a margin, -inf where masked), or None when there is
        neither a margin nor a mask (the logits stay as they are).
    """
    if margin is None and valid is None:
        return None
    if margin is None:
        add = torch.zeros(pairs.shape[0], device=pairs.device, dtype=dtype)
    else:
        add = margin.to(dtype)[pairs]
    if valid is not None:
        add = add.masked_fill(~valid[pairs], float("-inf"))
    return add


#: Names of the statistics of ``return_stats=True`` (module docstring), in logging order.
STAT_NAMES = ("gradient_ratio", "easy_negative_share", "margin_mean", "logit_gap", "masked_hard_negatives")
#: Names of the additive pieces the statistics are made of (sums and counts over rows / pairs): summed over the
#: ranks of a data-parallel step they give the statistics of the global batch (:func:`statistics_from_sums`).
STAT_SUM_NAMES = ("ratio_sum", "ratio_rows", "gap_sum", "gap_rows", "margin_sum", "margin_pairs", "masked_pairs")


def statistics_from_sums(sums: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The statistics (:data:`STAT_NAMES`) from their sums and counts (:data:`STAT_SUM_NAMES`, 0-d tensors).

    Each mean is sum / count, and 0 when its count is 0 (every hard negative masked: all of the push goes to easy
    negatives, ``gradient_ratio`` 0, ``easy_negative_share`` 1). No host synchronisation.

    Returns:
        ``{name: 0-d tensor}`` in the dtype and on the device of the sums (``easy_negative_share`` in float64: one
        minus the ratio without rounding).
    """
    def mean(total: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        return torch.where(count > 0, total / count.clamp_min(1), torch.zeros_like(total))

    ratio = mean(sums["ratio_sum"], sums["ratio_rows"])
    return {
        "gradient_ratio": ratio,
        "easy_negative_share": 1.0 - ratio.to(torch.float64),  # as 1 - float(ratio): exact in float64
        "margin_mean": mean(sums["margin_sum"], sums["margin_pairs"]),
        "logit_gap": mean(sums["gap_sum"], sums["gap_rows"]),
        "masked_hard_negatives": sums["masked_pairs"],
    }


def stats_to_floats(stats: dict[str, torch.Tensor | float] | None) -> dict[str, float]:
    """``{name: float}`` from a stats dict of 0-d tensors (or floats), read with **one** device synchronisation
    (one stacked ``tolist``); ``{}`` for None. Values are exact: float32 widens to float64 losslessly."""
    if not stats:
        return {}
    names = list(stats)
    tensors = [v for v in stats.values() if isinstance(v, torch.Tensor)]
    if not tensors:
        return {k: float(v) for k, v in stats.items()}
    dev = tensors[0].device
    stacked = torch.stack([v.detach().to(device=dev, dtype=torch.float64).reshape(()) if isinstance(v, torch.Tensor)
                           else torch.tensor(float(v), dtype=torch.float64, device=dev) for v in stats.values()])
    return dict(zip(names, stacked.tolist()))


def evaluate_loss(
    loss_fn,
    image_features: torch.Tensor,
    text_features: torch.Tensor,
    logit_scale: torch.Tensor | float,
    *,
    hard_negatives: bool,
    concreteness: torch.Tensor | None = None,
    hard_negative_valid: torch.Tensor | None = None,
    return_stats: bool = False,
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor] | None]:
    """Call any loss the trainer accepts, the one place that knows the call conventions.

    ``loss_fn(img, txt, scale, concreteness=..., hard_negative_valid=..., output_dict=True)`` for hard negatives,
    ``loss_fn(img, txt, scale, output_dict=True)`` for pairs (open_clip ``ClipLoss`` works as is); with
    ``return_stats`` and a loss of this module (``provides_stats``) also ``return_stats=True``.

    Args:
        loss_fn: a loss of :data:`LOSSES`, open_clip ``ClipLoss``, or any callable with their call returning
            ``{name: scalar}``.
        image_features, text_features: ``[rows, D]`` L2-normalised features (cosine space), layout of the loss.
        logit_scale: exponentiated logit scale (multiplier of cosines).
        hard_negatives: the 2N ConcreteBatch call (with c_i and the mask) or the plain pair call.
        concreteness, hard_negative_valid: ``[N]`` c_i (1-5) and bool mask (hard negatives only).
        return_stats: also compute the statistics (logging steps).

    Returns:
        ``(terms {name: scalar tensor}, stats {name: 0-d tensor} or None)``; stats is None unless asked for and the
        loss provides them.

    Raises:
        ValueError: as the loss's ``forward``.
    """
    kw = {"concreteness": concreteness, "hard_negative_valid": hard_negative_valid} if hard_negatives else {}
    if return_stats and getattr(loss_fn, "provides_stats", False):
        out = loss_fn(image_features, text_features, logit_scale, output_dict=True, return_stats=True, **kw)
        return out["losses"], out["stats"]
    return loss_fn(image_features, text_features, logit_scale, output_dict=True, **kw), None


# ------------------------------------------------------------------------------------------------ input checks
def _check_features(image_features: torch.Tensor, text_features: torch.Tensor, who: str) -> None:
    """Raises ValueError unless both features are 2-D floating point with the same embedding size D."""
    for name, t in (("image_features", image_features), ("text_features", text_features)):
        if t.ndim != 2:
            raise ValueError(f"{who}: {name} must be 2-D [rows, D], got shape {tuple(t.shape)}")
        if not t.is_floating_point():
            raise ValueError(f"{who}: {name} must be floating point, got {t.dtype}")
    if image_features.shape[1] != text_features.shape[1]:
        raise ValueError(f"{who}: image_features {tuple(image_features.shape)} and text_features "
                         f"{tuple(text_features.shape)} have different embedding sizes D")


def _check_concreteness(concreteness: torch.Tensor | None, n: int, who: str) -> None:
    """Raises ValueError unless ``concreteness`` is None or a ``[n]`` tensor of finite c_i in [1, 5] (values checked
    for CPU tensors only: no device synchronisation)."""
    if concreteness is None:
        return
    if not isinstance(concreteness, torch.Tensor):
        raise ValueError(f"{who}: concreteness must be a tensor of shape ({n},), got {type(concreteness).__name__}")
    if concreteness.shape != (n,):
        raise ValueError(f"{who}: concreteness must have shape ({n},) (one c_i per anchor), "
                         f"got {tuple(concreteness.shape)}")
    if concreteness.device.type != "cpu":  # a value check would synchronise the device (module docstring)
        return
    lo, hi = CONCRETENESS_RANGE
    c = concreteness.detach()
    if not bool(torch.isfinite(c).all()) or bool((c < lo).any()) or bool((c > hi).any()):
        bad = c[~(torch.isfinite(c) & (c >= lo) & (c <= hi))]
        raise ValueError(f"{who}: concreteness c_i must be finite and in [{lo:g}, {hi:g}] (Brysbaert scale), "
                         f"got {bad[:5].tolist()}")


def _check_valid(hard_negative_valid: torch.Tensor | None, n: int, device: torch.device, who: str):
    """``[N]`` bool on ``device`` or None; raises ValueError on a wrong shape or dtype."""
    if hard_negative_valid is None:
        return None
    if not isinstance(hard_negative_valid, torch.Tensor) or hard_negative_valid.shape != (n,):
        shape = tuple(hard_negative_valid.shape) if isinstance(hard_negative_valid, torch.Tensor) else \
            type(hard_negative_valid).__name__
        raise ValueError(f"{who}: hard_negative_valid must be a bool tensor of shape ({n},), got {shape}")
    if hard_negative_valid.dtype != torch.bool:
        raise ValueError(f"{who}: hard_negative_valid must be bool (False = masked), got {hard_negative_valid.dtype}")
    return hard_negative_valid.to(device, non_blocking=True)


def _check_pair_inputs(concreteness, hard_negative_valid, n: int, device: torch.device, who: str):
    """Check the per-pair inputs of N pairs (:func:`_check_concreteness`, :func:`_check_valid`); returns ``valid``."""
    _check_concreteness(concreteness, n, who)
    return _check_valid(hard_negative_valid, n, device, who)


# ------------------------------------------------------------------------------------------------ losses
class _UniformCall:
    """The call every loss of :data:`LOSSES` takes, defined once: check the batch, then the variant's loss.

    A loss class supplies ``name``, ``_check_batch(image_features, text_features) -> (image rows used, N)`` (its
    feature layout; raises ValueError) and ``_loss(images, text_features, logit_scale, N, concreteness, valid,
    return_stats) -> (terms, stats or None)`` (its logits, loss terms and, when asked, statistics).
    """

    _who_note = ""  # appended to ``name`` in the messages of the per-pair checks
    #: the call takes ``return_stats`` (read by :func:`evaluate_loss`)
    provides_stats = True

    def forward(
        self,
        image_features: torch.Tensor,
        text_features: torch.Tensor,
        logit_scale: torch.Tensor | float,
        concreteness: torch.Tensor | None = None,
        hard_negative_valid: torch.Tensor | None = None,
        output_dict: bool = True,
        return_stats: bool = False,
    ):
        """Loss of one batch.

        Args:
            image_features: ``[rows, D]`` L2-normalised image embeddings (cosine space); rows as the variant's
                layout (2N for the ConcreteBatch, N for ``negclip`` or ``clip``; see the class docstring).
            text_features: ``[rows, D]`` L2-normalised caption embeddings (2N: anchors t_i, then hard negatives
                t'_i; N for ``clip``).
            logit_scale: exponentiated logit scale (scalar tensor or float); logits = scale * cosine.
            concreteness: ``[N]`` keyword concreteness c_i (1-5); required by ``cement`` and ``inverse_margin``,
                checked and otherwise ignored by the other variants (values checked for CPU tensors only).
            hard_negative_valid: optional ``[N]`` bool; False masks pair i's hard-negative entries (-inf in both
                directions: never pushed away) and leaves its rows out of the statistics.
            output_dict: return ``{"contrastive_loss": loss}`` (open_clip style) instead of the bare scalar.
            return_stats: also compute the statistics (module docstring) from the same logits.

        Returns:
            The scalar loss (mean over rows, averaged over I2T and T2I), as ``{"contrastive_loss": loss}`` or a
            tensor; with ``return_stats``: ``{"losses": {"contrastive_loss": loss}, "stats": {name: 0-d tensor}}``.

        Raises:
            ValueError: on non-2-D or mismatched features, rows that do not fit the variant's layout, a
                wrong-shaped ``hard_negative_valid`` / ``concreteness``, c_i outside 1-5, missing c_i for a loss
                that needs it, or ``return_stats`` with ``output_dict=False``.
        """
        _check_output(output_dict, return_stats, self.name)
        images, n = self._check_batch(image_features, text_features)
        valid = _check_pair_inputs(concreteness, hard_negative_valid, n, image_features.device,
                                   self.name + self._who_note)
        terms, stats = self._loss(images, text_features, logit_scale, n, concreteness, valid, return_stats)
        return _package(terms, stats, output_dict, return_stats)


def _check_output(output_dict: bool, return_stats: bool, who: str) -> None:
    if return_stats and not output_dict:
        raise ValueError(f"{who}: return_stats=True returns a dict ({{'losses', 'stats'}}); pass output_dict=True")


def _package(terms: dict[str, torch.Tensor], stats, output_dict: bool, return_stats: bool):
    if return_stats:
        return {"losses": terms, "stats": stats}
    return terms if output_dict else terms["contrastive_loss"]


class HardNegativeContrastiveLoss(_UniformCall, nn.Module):
    """Symmetric InfoNCE over a ConcreteBatch with an optional per-pair margin on hard negatives: the one forward
    path of every hard-negative loss of :data:`LOSSES`.

    L = (L_{v->t} + L_{t->v}) / 2, L_{v->t} = -1/R sum_{r=1}^{R} log softmax(s~_{r,:})_r (paper Sec. 2.3, R = 2N),
    where s~_{r,r'} = s_{r,r'} + m_{r mod N} on the hard-negative entry r' = (r + N) mod 2N of every row and every
    other entry is unchanged (see the module docstring for the layout, margin space, masking and statistics).

    A variant supplies only what differs, as class attributes and :meth:`margins`:

    - its margin: :meth:`margins` gives ``[N]`` m_i in logit units, or None (InfoNCE, NegCLIP: no margin);
    - its layout: ``needs_hard_negative_images`` True gives the 2N x 2N ConcreteBatch (R = 2N image rows; T2I
      rows are all 2N captions, with hard negatives); False gives NegCLIP's layout (R = N anchor images against the
      2N captions; T2I rows are the N anchor captions against the N anchor images, without hard negatives).

    Masking (``hard_negative_valid``) is the same for every variant: -inf on the masked pair's hard-negative
    entries (both directions where both have them). The module keeps no state of a batch.

    Class attributes:
        name: registry name.
        needs_hard_negatives: the loss takes the 2N layout (anchors then hard negatives).
        needs_hard_negative_images: the hard-negative images v'_i are used (False for ``negclip``).
        uses_margin: the loss reads the margin config (re-run it when ``margin.*`` changes).
        margin_fields: the :class:`MarginConfig` fields it reads.
    """

    name = "hard_negative"
    needs_hard_negatives = True
    needs_hard_negative_images = True
    uses_margin = False
    margin_fields: tuple[str, ...] = ()

    def __init__(self, margin: MarginConfig | None = None) -> None:
        """Args: margin: margin parameters (default :class:`MarginConfig`); unused unless ``uses_margin``.

        Raises:
            ValueError: if ``margin`` is not a :class:`MarginConfig`.
        """
        super().__init__()
        self.margin_cfg = margin if margin is not None else MarginConfig()
        if not isinstance(self.margin_cfg, MarginConfig):
            raise ValueError(f"{self.name}: margin must be a MarginConfig, got {type(margin).__name__}")

    def margins(self, concreteness: torch.Tensor | None, n: int, device: torch.device) -> torch.Tensor | None:
        """Per-pair margin ``[N]`` in logit units, or None for no margin (plain InfoNCE, NegCLIP).

        ``concreteness`` has already been checked (shape ``[N]``, values in 1-5 for CPU tensors) when given.
        """
        return None

    def loss_from_logits(
        self,
        logits_per_image: torch.Tensor,
        logits_per_text: torch.Tensor,
        concreteness: torch.Tensor | None = None,
        hard_negative_valid: torch.Tensor | None = None,
        output_dict: bool = True,
        return_stats: bool = False,
    ):
        """The same loss (and statistics) from separate I2T and T2I logits (reference path; inputs not modified).

        Useful to read dL/ds of each direction with autograd (tests) or to feed logits computed elsewhere.

        Args:
            logits_per_image: I2T logits s (logit space, before margin), rows images, columns the 2N captions:
                ``[2N, 2N]`` (``[N, 2N]`` for ``negclip``).
            logits_per_text: T2I logits, rows captions, columns images: ``[2N, 2N]`` (``[N, N]`` for ``negclip``).
            concreteness, hard_negative_valid, output_dict, return_stats: as :meth:`forward`.

        Returns:
            As :meth:`forward`.

        Raises:
            ValueError: as :meth:`forward`, for logits of other shapes.
        """
        _check_output(output_dict, return_stats, self.name)
        n = self._check_logits(logits_per_image, logits_per_text)
        valid = _check_pair_inputs(concreteness, hard_negative_valid, n, logits_per_image.device, self.name)
        loss, sums = self._contrastive(logits_per_image, logits_per_text, n, concreteness, valid, return_stats)
        return _package({"contrastive_loss": loss}, None if sums is None else statistics_from_sums(sums),
                        output_dict, return_stats)

    # -- the one path ----------------------------------------------------------------------------------------
    def _check_batch(self, image_features: torch.Tensor, text_features: torch.Tensor) -> tuple[torch.Tensor, int]:
        """Check the feature layout; returns ``(image rows used [R, D], N)``."""
        _check_features(image_features, text_features, self.name)
        if self.needs_hard_negative_images and image_features.shape != text_features.shape:
            raise ValueError(f"{self.name}: image_features {tuple(image_features.shape)} and text_features "
                             f"{tuple(text_features.shape)} differ (the 2N layout pairs row i of both)")
        two_n = text_features.shape[0]
        if two_n <= 0 or two_n % 2:
            raise ValueError(f"{self.name}: text_features must have an even, positive number of rows (2N: anchors "
                             f"then hard negatives), got {two_n}")
        n = two_n // 2
        if image_features.shape[0] not in (n, two_n):
            raise ValueError(f"{self.name}: image_features must have N = {n} or 2N = {two_n} rows (anchor images "
                             f"first), got {image_features.shape[0]}")
        rows = two_n if self.needs_hard_negative_images else n
        return (image_features if image_features.shape[0] == rows else image_features[:rows]), n

    def _loss(self, images, text_features, logit_scale, n, concreteness, valid, return_stats):
        """``forward`` of the hard-negative losses: one product (:func:`get_logits`) gives the I2T logits
        ``[R, 2N]`` (``images`` ``[R, D]``: R = 2N, or the N anchors for NegCLIP's layout); the margin / mask is
        written into the hard-negative entries in place (no dense offset matrix), and T2I is the column softmax of
        the same matrix (of its first R columns in NegCLIP's layout)."""
        logits_per_image, _ = get_logits(images, text_features, logit_scale)  # fresh; mm saves only its inputs
        loss, sums = self._contrastive(logits_per_image, None, n, concreteness, valid, return_stats)
        return {"contrastive_loss": loss}, None if sums is None else statistics_from_sums(sums)

    def _check_logits(self, logits_per_image: torch.Tensor, logits_per_text: torch.Tensor) -> int:
        """Check I2T ``[R, 2N]`` and T2I ``[R, R]`` logits (R = 2N, or N for NegCLIP's layout); returns N."""
        two_n = logits_per_image.shape[1] if logits_per_image.ndim == 2 else -1
        n = two_n // 2
        rows = two_n if self.needs_hard_negative_images else n
        if n < 1 or two_n % 2 or logits_per_image.shape != (rows, two_n) or logits_per_text.shape != (rows, rows):
            want = "both be [2N, 2N]" if self.needs_hard_negative_images else "be I2T [N, 2N] and T2I [N, N]"
            raise ValueError(f"{self.name}: logits must {want}, got {tuple(logits_per_image.shape)} and "
                             f"{tuple(logits_per_text.shape)}")
        return n

    def _contrastive(self, logits_per_image, logits_per_text, n, concreteness, valid, return_sums, rows=None):
        """Loss and, with ``return_sums``, the statistics' sums and counts (:data:`STAT_SUM_NAMES`) of R rows.

        ``logits_per_image`` ``[R, 2N]``: I2T logits before margin (positive of row r in column ``rows[r]``, hard
        negative in column (rows[r] + N) mod 2N). ``logits_per_text``: T2I logits of the same R rows (texts) against
        the image columns (``[R, R]`` for the whole batch, ``[R, 2N]`` for a row subset), or None: T2I read off the
        first R columns of the I2T matrix (column softmax; faster than a row softmax of the transpose, and both
        directions' gradients land on one layout), which is then written in place. ``rows``: ``[R]`` global row of
        each row for a subset of the 2N layout (``distributed.local_rows_loss``; T2I logits required), default
        ``arange(R)``. T2I rows have hard negatives iff R = 2N or ``rows`` is given.

        Returns ``(scalar loss, sums or None)``; sums of rows whose pair is masked are left out, and the pair
        counts (margin, masked) are over the anchor rows among the R (global row < N), so that the sums of a
        partition of the 2N rows add up to those of the whole batch.
        """
        li = logits_per_image
        r, two_n = li.shape
        here = torch.arange(r, device=li.device)
        subset = rows is not None
        labels = rows.to(li.device) if subset else here
        cols = (labels + n) % two_n
        margin = self.margins(concreteness, n, li.device)
        pairs = labels % n
        gap = None
        if return_sums:
            with torch.no_grad():
                pos = li.gather(1, labels[:, None]).squeeze(1) if subset else li.diagonal()
                gap = _stat_dtype(pos - li[here, cols])
        add = hard_negative_offsets(margin, valid, pairs, li.dtype)
        t_cols = cols if (subset or r == two_n) else None
        if logits_per_text is None:
            if subset:
                raise ValueError(f"{self.name}: a row subset needs its T2I logits (logits_per_text)")
            if add is not None:
                # Entry (i, i') is I2T row i's and T2I row i''s hard negative: one write serves both directions.
                li = li.index_put_((here, cols), add, accumulate=True)
            t_src, t_dim = (li if r == two_n else li[:, :r]), 0
        else:
            t_src, t_dim = logits_per_text, 1
            if add is not None:
                li = li.index_put((here, cols), add, accumulate=True)
                if t_cols is not None:
                    t_src = t_src.index_put((here, t_cols), add, accumulate=True)
        log_pi = li.log_softmax(dim=1)
        log_pt = t_src.log_softmax(dim=t_dim)
        if t_dim == 0:
            log_pt = log_pt.T  # rows = texts
        if subset:
            loss = -(log_pi.gather(1, labels[:, None]).mean() + log_pt.gather(1, labels[:, None]).mean()) / 2
        else:
            loss = -(log_pi.diagonal().mean() + log_pt.diagonal().mean()) / 2
        if not return_sums:
            return loss, None
        return loss, self._stat_sums(log_pi, log_pt, cols, t_cols, labels if subset else None, pairs, n, valid,
                                     margin, gap)

    @staticmethod
    @torch.no_grad()
    def _stat_sums(log_pi, log_pt, i_cols, t_cols, pos_cols, pairs, n, valid, margin, gap) -> dict[str, torch.Tensor]:
        """Sums and counts of the statistics (:data:`STAT_SUM_NAMES`, 0-d tensors, no host synchronisation) from the
        log-probabilities of both directions, the hard-negative column of each row (``t_cols`` None: T2I has no hard
        negatives), the positive columns (None: the diagonal), each row's pair, the ``[N]`` mask and margin and the
        detached ``[R]`` I2T logit gap before the margin."""
        ratio = _ratio_from_log_probs(log_pi.detach(), i_cols, pos_cols)
        if t_cols is not None:
            ratio = torch.cat([ratio, _ratio_from_log_probs(log_pt.detach(), t_cols, pos_cols)])
        dt = gap.dtype
        ratio = ratio.to(dt)
        # anchor rows (global row < N) carry the pair counts: every pair is counted once per batch
        anchor_rows = (pos_cols if pos_cols is not None else torch.arange(pairs.shape[0], device=pairs.device)) < n
        if valid is None:
            ok_rows = torch.ones_like(anchor_rows)
        else:
            ok_rows = valid[pairs]  # each row -> its pair's flag
        ok = ok_rows.repeat(ratio.shape[0] // ok_rows.shape[0])
        ok_pairs = anchor_rows & ok_rows
        zero = gap.new_zeros(())
        margin_rows = zero.expand(pairs.shape[0]) if margin is None else margin.to(dt)[pairs]
        return {
            "ratio_sum": torch.where(ok, ratio, zero).sum(),
            "ratio_rows": ok.sum().to(dt),
            "gap_sum": torch.where(ok_rows, gap, zero).sum(),
            "gap_rows": ok_rows.sum().to(dt),
            "margin_sum": torch.where(ok_pairs, margin_rows, zero).sum(),
            "margin_pairs": ok_pairs.sum().to(dt),
            "masked_pairs": (anchor_rows & ~ok_rows).sum().to(dt),
        }


class InfoNCELoss(HardNegativeContrastiveLoss):
    """InfoNCE with hard negatives in the batch, no margin (paper Sec. 2.3, L_{v->t} and its t->v twin), 2N x 2N."""

    name = "infonce"


class CementLoss(HardNegativeContrastiveLoss):
    """Cement loss: InfoNCE with the adaptive Fermi-Dirac margin m^_i on hard-negative logits (paper Sec. 2.3).

    m^_i = :func:`fermi_dirac_margin` (c_i) in logit units; with m_min = m_max = 0 it equals :class:`InfoNCELoss`.
    """

    name = "cement"
    uses_margin = True
    margin_fields = ("m_min", "m_max", "c_tilde", "tau")
    _margin_fn = staticmethod(fermi_dirac_margin)

    def margins(self, concreteness: torch.Tensor | None, n: int, device: torch.device) -> torch.Tensor:
        """``[N]`` margins m^_i(c_i) in logit units.

        Raises:
            ValueError: if ``concreteness`` is missing.
        """
        if concreteness is None:
            raise ValueError(f"{self.name} loss needs the keyword concreteness c_i of every pair (got None)")
        return self._margin_fn(concreteness.detach().to(device, non_blocking=True), self.margin_cfg)


class InverseMarginLoss(CementLoss):
    """Inverse-margin ablation (paper Sec. 3.3): m^_i = :func:`inverse_fermi_dirac_margin` (c_i), logit units,
    large for abstract keywords and small for concrete ones."""

    name = "inverse_margin"
    _margin_fn = staticmethod(inverse_fermi_dirac_margin)


class StaticMarginLoss(HardNegativeContrastiveLoss):
    """Static-margin ablation (paper Sec. 3.3): the constant ``margin.static`` (paper: 1, logit units) on every
    hard-negative logit; c_i is not used."""

    name = "static_margin"
    uses_margin = True
    margin_fields = ("static",)

    def margins(self, concreteness: torch.Tensor | None, n: int, device: torch.device) -> torch.Tensor:
        """``[N]`` copies of ``margin.static`` (logit units)."""
        return torch.full((n,), float(self.margin_cfg.static), device=device)


class NegCLIPLoss(HardNegativeContrastiveLoss):
    """NegCLIP's layout (Yuksekgonul et al., ICLR 2023), an outside baseline: hard-negative captions only.

    I2T: each anchor image v_i against [t_1 .. t_N, t'_1 .. t'_N] (``[N, 2N]``, positive column i, hard negative
    column i + N). T2I: each anchor caption t_i against the anchor images only (``[N, N]``); the hard-negative
    captions are not rows and the hard-negative images v'_i are not used (pass ``[N, D]`` or ``[2N, D]`` image
    features; rows N..2N-1 of the latter are ignored). L = (L_{v->t} + L_{t->v}) / 2, each a mean over N rows.
    No margin. Masking sets I2T entry (i, i + N) to -inf. The ``gradient_ratio`` statistic is the I2T mean only (T2I
    has no hard negative); ``logit_gap`` is s(v_i, t_i) - s(v_i, t'_i). All of it is the shared forward path of
    :class:`HardNegativeContrastiveLoss` with ``needs_hard_negative_images = False``.
    """

    name = "negclip"
    needs_hard_negative_images = False


class ClipFineTuneLoss(_UniformCall, ClipLoss):
    """Plain CLIP fine-tuning without hard negatives (the "COCO fine-tune" baseline, paper Tab. 2/3): open_clip's
    ``ClipLoss`` over N anchors, N x N logits, symmetric I2T + T2I, no margin.

    Takes the uniform call of :data:`LOSSES`; ``concreteness`` / ``hard_negative_valid`` are checked against the N
    rows (so a 2N ConcreteBatch passed by mistake is caught when they are given) and otherwise ignored. Statistics
    (``return_stats=True``, :meth:`statistics`): ``gradient_ratio`` 0, ``easy_negative_share`` 1, ``margin_mean``
    0, ``masked_hard_negatives`` 0 (there is no hard negative, all of the push goes to easy negatives); no
    ``logit_gap``.

    Its forward is open_clip's own (two products, ``F.cross_entropy``), not the hard-negative path of
    :class:`HardNegativeContrastiveLoss`: the baseline is by definition open_clip's loss, bit for bit, and keeps
    ``ClipLoss``'s gather options and ``distributed.local_rows_loss`` support.
    """

    name = "clip"
    _who_note = " (anchors only, N x N)"
    needs_hard_negatives = False
    needs_hard_negative_images = False
    uses_margin = False
    margin_fields: tuple[str, ...] = ()

    def __init__(self, margin: MarginConfig | None = None, **clip_loss_kwargs) -> None:
        """Args: margin: accepted for the uniform constructor, unused; ``clip_loss_kwargs``: open_clip
        ``ClipLoss`` options (``local_loss``, ``gather_with_grad``, ``rank``, ``world_size``, ...)."""
        super().__init__(**clip_loss_kwargs)
        self.margin_cfg = margin if margin is not None else MarginConfig()

    @staticmethod
    def statistics(device: torch.device | str | None = None) -> dict[str, torch.Tensor]:
        """The constant statistics of a loss without hard negatives (0-d float32 tensors on ``device``): no push on
        a hard negative (``gradient_ratio`` 0, ``easy_negative_share`` 1), no margin, nothing masked."""
        def const(v: float) -> torch.Tensor:
            return torch.full((), v, dtype=torch.float32, device=device)

        return {"gradient_ratio": const(0.0), "easy_negative_share": const(1.0), "margin_mean": const(0.0),
                "masked_hard_negatives": const(0.0)}

    def _check_batch(self, image_features: torch.Tensor, text_features: torch.Tensor) -> tuple[torch.Tensor, int]:
        """``[N, D]`` anchor images and captions of the same shape; returns ``(image_features, N)``."""
        _check_features(image_features, text_features, self.name)
        if image_features.shape != text_features.shape:
            raise ValueError(f"{self.name}: image_features {tuple(image_features.shape)} and text_features "
                             f"{tuple(text_features.shape)} differ")
        return image_features, image_features.shape[0]

    def _loss(self, images, text_features, logit_scale, n, concreteness, valid, return_stats):
        """open_clip ``ClipLoss.forward`` on the N anchors (c_i and the mask are checked, unused)."""
        terms = ClipLoss.forward(self, images, text_features, logit_scale, output_dict=True)
        return terms, (self.statistics(images.device) if return_stats else None)


#: Registry: name -> loss class; every class takes ``(margin: MarginConfig | None = None)``.
LOSSES: dict[str, type[nn.Module]] = {
    cls.name: cls
    for cls in (ClipFineTuneLoss, InfoNCELoss, CementLoss, StaticMarginLoss, InverseMarginLoss, NegCLIPLoss)
}
#: Losses that read the margin config (their runs depend on ``margin.*``).
MARGIN_LOSSES: frozenset[str] = frozenset(k for k, cls in LOSSES.items() if cls.uses_margin)
#: Losses that need ConcreteBatch hard negatives (2N text rows); ``clip`` takes anchors only.
HARD_NEGATIVE_LOSSES: frozenset[str] = frozenset(k for k, cls in LOSSES.items() if cls.needs_hard_negatives)


def build_loss(name: str, margin: MarginConfig | None = None) -> nn.Module:
    """Build a loss of :data:`LOSSES` by name with the margin config (default :class:`MarginConfig`).

    Args:
        name: ``clip``, ``infonce``, ``cement``, ``static_margin``, ``inverse_margin`` or ``negclip``.
        margin: margin parameters; read only by :data:`MARGIN_LOSSES`.

    Raises:
        ValueError: for an unknown name (listing the known ones) or a ``margin`` that is not a MarginConfig.
    """
    if name not in LOSSES:
        raise ValueError(f"unknown loss {name!r}; known: {sorted(LOSSES)}")
    if margin is not None and not isinstance(margin, MarginConfig):
        raise ValueError(f"build_loss({name!r}): margin must be a MarginConfig, got {type(margin).__name__}")
    return LOSSES[name](margin=margin)
