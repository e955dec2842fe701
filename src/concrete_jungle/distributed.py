"""Data-parallel training under ``torchrun``: process group, anchor sharding and the gathered 2N loss (paper Sec. 3).

The paper trains with 1024 anchors a batch (Sec. 3, "batch size of 1024"), so 2N = 2048 rows of each modality.
Spread over W ranks, rank r holds n = N / W anchors **and their hard negatives**: the sampler runs over anchors
(ConcreteBatch records) and every record brings its hard negative, so a pair never straddles two ranks. Each rank
embeds its local 2n rows in the local 2N layout ``[a_r (n rows); h_r (n rows)]``.

Gathering (``torch.distributed.nn.functional.all_gather``, which carries gradients) and rearranging gives the
global layout the losses expect (``concrete_jungle.losses``: anchors first, then hard negatives)::

    global = [a_0; a_1; ..; a_{W-1}; h_0; h_1; ..; h_{W-1}]          # [2N, D]

so global row ``r*n + k`` is local row ``k`` of rank r and its hard negative ``N + r*n + k`` is local row ``n + k``
of the same rank; i' = (i + N) mod 2N holds in the global layout. Keyword concreteness c_i (1-5) and the
hard-negative validity are gathered the same way (``[N]``, no gradient). Without hard negatives (N x N pairs) the
global layout is simply ``[x_0; x_1; ..; x_{W-1}]``.

Two loss modes (``distributed_loss`` of the training loop):

- ``"global"``: every rank evaluates the loss on the whole gathered 2N x 2N batch, L = (L_{v->t} + L_{t->v}) / 2
  (Sec. 2.3). All ranks compute the same L.
- ``"local"`` (as open_clip's ``local_loss``): rank r evaluates only its own rows against all gathered columns,
  ``[2n, 2N]`` logits per direction, L_r = (CE_{v->t}(rows of r) + CE_{t->v}(rows of r)) / 2 with each cross-entropy
  averaged over r's 2n rows. The margin m^_i and the hard-negative mask of a row are the ones of its global pair,
  applied at its global hard-negative column. Every rank has the same number of rows, so mean_r L_r = L exactly;
  it needs O(2n * 2N) instead of O(2N * 2N) logits per rank.

Gradients: the backward of ``all_gather`` **sums** the gradients that all ranks send to a rank's features, and DDP
**averages** parameter gradients over ranks. Global mode: every rank's L sends dL/df_r to rank r, so the rank-local
feature gradient is W * dL/df_r and the DDP average gives (1/W) * sum_r W * dL/dtheta|_r = dL/dtheta. Local mode:
rank r's features receive sum_{r'} dL_{r'}/df_r = W * d(mean_r' L_r')/df_r = W * dL/df_r, and again DDP's 1/W gives
dL/dtheta. The logit scale is not gathered: each rank's dL/ds (global) or dL_r/ds (local) averages to dL/ds. So
with DDP the parameter gradients equal those of one process on the whole global batch, in both modes (up to
floating-point summation order; ``tests/test_distributed.py`` checks rtol 1e-5). Logged loss values are
all-reduced (averaged) over ranks, i.e. the global L in both modes.

Statistics (gradient ratio, logit gap, ..., ``concrete_jungle.losses``; asked for with ``return_stats`` on logging
steps) are those of the global batch in both modes: in global mode every rank computes them from its global logits;
in local mode each rank computes the sums and counts of its own rows from the same ``[2n, 2N]`` logits as its loss
(no second forward) and one all-reduce (sum) of them gives the global figures.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
import torch.distributed as dist
import torch.nn.functional as F

__all__ = [
    "LOSS_MODES",
    "DistContext",
    "init_distributed",
    "anchor_sampler",
    "gather_global_batch",
    "global_row_index",
    "local_rows_loss",
    "distributed_contrastive_loss",
    "all_reduce_mean",
    "all_gather_objects",
]

LOSS_MODES = ("global", "local")
LossMode = Literal["global", "local"]


@dataclass(frozen=True)
class DistContext:
    """Where this process sits in the data-parallel group (infrastructure for the paper's Sec. 3 batch of 1024 anchors).

    Attributes:
        rank: global rank r in [0, world_size).
        world_size: W, number of processes (1: no distribution).
        local_rank: rank on this machine (selects the GPU ``cuda:<local_rank>``).
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        """True when more than one process trains (gather and DDP are needed)."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """True on rank 0, the only rank that logs and writes checkpoints."""
        return self.rank == 0


def _env_int(name: str, default: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None:
        if default is None:
            raise ValueError(f"environment variable {name} is required for distributed training (torchrun sets it)")
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name} must be an integer, got {raw!r}") from None


def init_distributed(device_type: str = "cpu") -> tuple[DistContext, bool]:
    """Join the process group that ``torchrun`` describes in the environment (``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``), or report single-process training.

    An already initialised default group is used as it is. Otherwise, with ``WORLD_SIZE`` > 1 the group is created
    with the ``nccl`` backend for ``device_type == "cuda"`` and ``gloo`` otherwise.

    Args:
        device_type: ``"cpu"`` or ``"cuda"``; chooses the backend.

    Returns:
        ``(context, created)``; ``created`` is True when this call initialised the group (the caller then destroys it
        with ``torch.distributed.destroy_process_group()``).

    Raises:
        ValueError: ``WORLD_SIZE`` > 1 but ``RANK``/``MASTER_ADDR``/``MASTER_PORT`` is missing or not an integer
            (the message names the variable), or ``RANK`` is outside [0, WORLD_SIZE).
    """
    if dist.is_available() and dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
        return DistContext(rank, world, _env_int("LOCAL_RANK", rank)), False
    world = _env_int("WORLD_SIZE", 1)
    if world < 1:
        raise ValueError(f"environment variable WORLD_SIZE must be >= 1, got {world}")
    if world == 1:
        return DistContext(), False
    rank = _env_int("RANK")
    if not 0 <= rank < world:
        raise ValueError(f"environment variable RANK must be in [0, {world}), got {rank}")
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        if not os.environ.get(name):
            raise ValueError(f"environment variable {name} is required for distributed training (torchrun sets it)")
    local_rank = _env_int("LOCAL_RANK", rank)
    backend = "nccl" if device_type == "cuda" else "gloo"
    dist.init_process_group(backend=backend, init_method="env://", rank=rank, world_size=world)
    return DistContext(rank, world, local_rank), True


def anchor_sampler(dataset, ctx: DistContext, seed: int) -> torch.utils.data.distributed.DistributedSampler:
    """Shuffling sampler over anchors (dataset items), sharded over ranks; also used with one process.

    The order of epoch e is ``torch.randperm(len(dataset))`` from a generator seeded with ``seed + e`` (set with
    ``set_epoch(e)``), so it depends on (seed, epoch) only, never on the global RNG: a resumed run sees the same
    order. ``drop_last=True``: every rank gets ``floor(len / W)`` items; rank r takes positions r, r + W, ... With a
    per-rank batch of n = N / W, global batch b is permutation positions [b*N, (b+1)*N), the same anchors as with
    one process. Each item is a whole ConcreteBatch record, so a hard negative stays on its anchor's rank.

    Raises:
        ValueError: ``seed`` is negative.
    """
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    return torch.utils.data.distributed.DistributedSampler(
        dataset, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True, seed=seed, drop_last=True
    )


def _gather_no_grad(x: torch.Tensor, ctx: DistContext) -> list[torch.Tensor]:
    parts = [torch.empty_like(x) for _ in range(ctx.world_size)]
    dist.all_gather(parts, x.contiguous())
    return parts


def global_row_index(rank: int, n: int, world_size: int, hard_negatives: bool) -> torch.Tensor:
    """Global rows of rank ``rank``'s local rows, in local order.

    With hard negatives (N = n * W): local rows ``[a_r; h_r]`` are global ``[r*n .. r*n+n-1, N + r*n .. N + r*n+n-1]``
    (``[2n]``); without: ``[r*n .. r*n+n-1]`` (``[n]``).

    Raises:
        ValueError: ``rank`` outside [0, world_size) or ``n`` < 1.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    if n < 1:
        raise ValueError(f"n (anchors per rank) must be >= 1, got {n}")
    own = torch.arange(rank * n, (rank + 1) * n)
    return torch.cat([own, own + n * world_size]) if hard_negatives else own


def gather_global_batch(
    image_features: torch.Tensor,
    text_features: torch.Tensor,
    ctx: DistContext,
    *,
    hard_negatives: bool,
    concreteness: torch.Tensor | None = None,
    hard_negative_valid: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """All-gather features **with gradients** and arrange them in the global layout (module docstring).

    Args:
        image_features: ``[2n, D]`` local rows ``[anchors; hard negatives]`` (``[n, D]`` without hard negatives,
            or with hard negatives for a loss that uses no hard-negative image, e.g. NegCLIP), L2-normalised
            (cosine space).
        text_features: ``[2n, D]`` captions ``[anchors; hard negatives]`` (``[n, D]`` without hard negatives).
        ctx: the process group context (world size W).
        hard_negatives: the 2n layout (True) or plain pairs (False).
        concreteness: ``[n]`` keyword concreteness c_i (1-5) of the local anchors, or None.
        hard_negative_valid: ``[n]`` bool, False masks pair i's hard negative, or None.

    Returns:
        ``(image_all [2N, D], text_all [2N, D], concreteness_all [N] | None, valid_all [N] bool | None)``; with one
        process the inputs are returned unchanged.

    Raises:
        ValueError: mismatched feature shapes, an odd row count with hard negatives, or ``concreteness`` /
            ``hard_negative_valid`` not of shape ``[n]``.
    """
    rows = text_features.shape[0]
    if hard_negatives and rows % 2:
        raise ValueError(f"hard-negative features need an even number of local rows (2n), got {rows}")
    n = rows // 2 if hard_negatives else rows
    # NegCLIP-style losses use no hard-negative image: the images are then the n anchors only
    anchor_images_only = hard_negatives and image_features.shape[0] == n and image_features.shape[1:] == \
        text_features.shape[1:]
    if image_features.shape != text_features.shape and not anchor_images_only:
        raise ValueError(f"image_features {tuple(image_features.shape)} and text_features "
                         f"{tuple(text_features.shape)} differ (with hard negatives the images may also be the "
                         f"{n} anchors only)")
    for name, t in (("concreteness", concreteness), ("hard_negative_valid", hard_negative_valid)):
        if t is not None and tuple(t.shape) != (n,):
            raise ValueError(f"{name} must have shape ({n},) (one per local anchor), got {tuple(t.shape)}")
    if not ctx.enabled:
        return image_features, text_features, concreteness, hard_negative_valid
    from torch.distributed.nn.functional import all_gather

    def arrange(parts, two_n: bool) -> torch.Tensor:
        if not two_n:
            return torch.cat(list(parts))
        return torch.cat([p[:n] for p in parts] + [p[n:] for p in parts])

    img_all = arrange(all_gather(image_features.contiguous()), hard_negatives and not anchor_images_only)
    txt_all = arrange(all_gather(text_features.contiguous()), hard_negatives)
    c_all = None if concreteness is None else torch.cat(_gather_no_grad(concreteness.float(), ctx))
    v_all = None
    if hard_negative_valid is not None:
        v_all = torch.cat(_gather_no_grad(hard_negative_valid.to(torch.uint8), ctx)).bool()
    return img_all, txt_all, c_all, v_all


def _supports_local(loss_fn: Callable, hard_negatives: bool) -> bool:
    """True when ``loss_fn``'s maths is what :func:`local_rows_loss` evaluates row by row (the unmodified
    ``HardNegativeContrastiveLoss`` path, or open_clip's ClipLoss)."""
    from concrete_jungle import losses

    def unchanged(base: type, *methods: str) -> bool:  # an instance of ``base`` that overrides none of ``methods``
        return isinstance(loss_fn, base) and all(getattr(type(loss_fn), m) is getattr(base, m) for m in methods)

    if hard_negatives:  # the 2N x 2N layout (NegCLIP's, without hard-negative images, is not supported here)
        return unchanged(losses.HardNegativeContrastiveLoss, "forward", "_loss", "_contrastive") and \
            loss_fn.needs_hard_negative_images
    plain = unchanged(losses.ClipLoss, "forward") or unchanged(losses.ClipFineTuneLoss, "forward", "_loss")
    return plain and getattr(loss_fn, "world_size", 1) == 1 and not getattr(loss_fn, "local_loss", False)


def local_rows_loss(
    loss_fn: Callable,
    image_rows: torch.Tensor,
    text_rows: torch.Tensor,
    image_all: torch.Tensor,
    text_all: torch.Tensor,
    logit_scale: torch.Tensor | float,
    rows: torch.Tensor,
    *,
    hard_negatives: bool,
    concreteness_all: torch.Tensor | None = None,
    valid_all: torch.Tensor | None = None,
    return_stat_sums: bool = False,
):
    """Loss of some rows of the global batch against all of its columns (open_clip ``local_loss``; module docstring).

    For hard negatives, row i (global index) gets the margin m^_{i mod N} of ``loss_fn.margins`` at its hard-negative
    column (i + N) mod 2N in both directions (I2T row = image i vs all captions; T2I row = caption i vs all images),
    and that entry is masked (-inf) when pair i mod N is invalid; exactly the entries
    ``HardNegativeContrastiveLoss`` changes, so the mean over a partition of the rows into equal parts equals its
    loss. It is the loss's own forward path (``HardNegativeContrastiveLoss._contrastive`` on the row subset), not a
    copy of it. Without hard negatives it is open_clip's ClipLoss restricted to the rows.

    Args:
        loss_fn: a 2N x 2N ``HardNegativeContrastiveLoss`` that supplies only its margin, not its own loss maths
            (InfoNCE, Cement, static / inverse margin: its ``margins(c, N, device)`` gives m^_i in logit units, None
            = no margin; the offsets come from ``losses.hard_negative_offsets``), or open_clip ``ClipLoss`` /
            ``ClipFineTuneLoss`` (single-process settings) for pairs. NegCLIP (anchor images only) is refused.
        image_rows / text_rows: ``[R, D]`` L2-normalised features of the rows (normally this rank's own features).
        image_all / text_all: ``[2N, D]`` (``[N, D]`` for pairs) gathered features, global layout.
        logit_scale: exponentiated logit scale (multiplier of cosines, <= 100).
        rows: ``[R]`` long, global index of each row (:func:`global_row_index`); also its label column.
        hard_negatives: the 2N layout with margins and masks.
        concreteness_all: ``[N]`` c_i (1-5), needed by concreteness-dependent margins (Cement loss).
        valid_all: ``[N]`` bool hard-negative validity, or None (all valid).
        return_stat_sums: hard negatives only: also return the sums and counts of the statistics over these rows
            (``losses.STAT_SUM_NAMES``; summed over a partition of the 2N rows they are those of the whole batch,
            ``losses.statistics_from_sums`` turns them into the statistics).

    Returns:
        Scalar (L_{v->t}(rows) + L_{t->v}(rows)) / 2, each cross-entropy averaged over the R rows; with
        ``return_stat_sums`` the pair ``(scalar, {name: 0-d tensor})``.

    Raises:
        ValueError: ``loss_fn`` is not one of the supported classes, shapes disagree, or ``return_stat_sums``
            without hard negatives.
    """
    if not _supports_local(loss_fn, hard_negatives):
        raise ValueError(
            f"distributed_loss 'local' runs the row-subset path of HardNegativeContrastiveLoss (hard negatives) or "
            f"ClipLoss (pairs); {type(loss_fn).__name__} is not one of them or overrides their loss: use 'global'")
    if image_rows.shape != text_rows.shape or image_all.shape != text_all.shape:
        raise ValueError(f"feature shapes differ: rows {tuple(image_rows.shape)}/{tuple(text_rows.shape)}, "
                         f"all {tuple(image_all.shape)}/{tuple(text_all.shape)}")
    if rows.shape != (image_rows.shape[0],):
        raise ValueError(f"rows must have shape ({image_rows.shape[0]},), got {tuple(rows.shape)}")
    device = image_rows.device
    rows = rows.to(device, non_blocking=True)
    li = logit_scale * image_rows @ text_all.T  # [R, 2N]
    lt = logit_scale * text_rows @ image_all.T
    if not hard_negatives:
        if return_stat_sums:
            raise ValueError("return_stat_sums needs the hard-negative layout (pairs have constant statistics)")
        return (F.cross_entropy(li, rows) + F.cross_entropy(lt, rows)) / 2
    two_n = image_all.shape[0]
    if two_n % 2:
        raise ValueError(f"hard-negative batch must have an even number of rows (2N), got {two_n}")
    n = two_n // 2
    if valid_all is not None:
        if valid_all.shape != (n,):
            raise ValueError(f"valid_all must have shape ({n},), got {tuple(valid_all.shape)}")
        valid_all = valid_all.to(device=device, dtype=torch.bool, non_blocking=True)
    # the loss's own path on the rows: margin m_{i mod N} and mask at each row's global hard-negative column
    loss, sums = loss_fn._contrastive(li, lt, n, concreteness_all, valid_all, return_stat_sums, rows=rows)
    return (loss, sums) if return_stat_sums else loss


def distributed_contrastive_loss(
    loss_fn: Callable,
    image_features: torch.Tensor,
    text_features: torch.Tensor,
    logit_scale: torch.Tensor | float,
    ctx: DistContext,
    *,
    hard_negatives: bool,
    mode: LossMode = "global",
    concreteness: torch.Tensor | None = None,
    hard_negative_valid: torch.Tensor | None = None,
    return_stats: bool = False,
) -> dict:
    """The contrastive loss of this rank for a data-parallel step (module docstring for the maths and gradients).

    Args:
        loss_fn: ``HardNegativeContrastiveLoss`` (InfoNCE / Cement, called through ``losses.evaluate_loss``) or
            open_clip ``ClipLoss`` / ``ClipFineTuneLoss`` for pairs.
        image_features / text_features: ``[2n, D]`` (pairs: ``[n, D]``) local rows, L2-normalised.
        logit_scale: exponentiated logit scale.
        ctx: process group context; with one process this is ``loss_fn`` on the inputs.
        hard_negatives: 2N layout.
        mode: ``"global"`` (whole 2N x 2N loss on every rank) or ``"local"`` (own rows against all columns).
        concreteness: ``[n]`` c_i (1-5) of the local anchors.
        hard_negative_valid: ``[n]`` bool.
        return_stats: also return the statistics of the whole global batch (gradient ratio, logit gap, ...;
            ``concrete_jungle.losses``), in both modes without a second forward (use on logging steps); None for a
            loss without statistics (open_clip ``ClipLoss``). Local mode: one all-reduce of their sums (collective).

    Returns:
        ``{"contrastive_loss": scalar}`` (the terms ``loss_fn`` returns in global mode), to be backpropagated under
        DDP. In local mode the value is this rank's L_r; average over ranks to get the global L. With
        ``return_stats``: ``{"losses": <those terms>, "stats": {name: 0-d tensor} or None}``.

    Raises:
        ValueError: unknown ``mode``; shape errors of :func:`gather_global_batch`; an unsupported loss in local mode.
    """
    if mode not in LOSS_MODES:
        raise ValueError(f"distributed_loss must be one of {LOSS_MODES}, got {mode!r}")

    from concrete_jungle import losses

    img_all, txt_all, c_all, v_all = gather_global_batch(
        image_features, text_features, ctx, hard_negatives=hard_negatives, concreteness=concreteness,
        hard_negative_valid=hard_negative_valid)
    if mode == "global" or not ctx.enabled:
        terms, stats = losses.evaluate_loss(loss_fn, img_all, txt_all, logit_scale, hard_negatives=hard_negatives,
                                            concreteness=c_all, hard_negative_valid=v_all, return_stats=return_stats)
        return {"losses": terms, "stats": stats} if return_stats else terms
    n = text_features.shape[0] // 2 if hard_negatives else text_features.shape[0]
    rows = global_row_index(ctx.rank, n, ctx.world_size, hard_negatives)
    want_sums = return_stats and hard_negatives
    out = local_rows_loss(loss_fn, image_features, text_features, img_all, txt_all, logit_scale, rows,
                          hard_negatives=hard_negatives, concreteness_all=c_all, valid_all=v_all,
                          return_stat_sums=want_sums)
    terms = {"contrastive_loss": out[0] if want_sums else out}
    if not return_stats:
        return terms
    stats = None
    if want_sums:
        sums = out[1]
        total = torch.stack([sums[k] for k in losses.STAT_SUM_NAMES])
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        stats = losses.statistics_from_sums(dict(zip(losses.STAT_SUM_NAMES, total.unbind())))
    elif isinstance(loss_fn, losses.ClipFineTuneLoss):
        stats = loss_fn.statistics(image_features.device)
    return {"losses": terms, "stats": stats}


def all_reduce_mean(values: torch.Tensor, ctx: DistContext) -> torch.Tensor:
    """Mean over ranks of a detached tensor (any shape, e.g. the loss terms: the global L of Sec. 2.3 in both loss
    modes); identity with one process. Collective: every rank must call it."""
    if not ctx.enabled:
        return values
    out = values.detach().clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out / ctx.world_size


def all_gather_objects(obj, ctx: DistContext) -> list:
    """``[obj of rank 0, .., obj of rank W-1]`` (picklable objects, e.g. RNG states for the training state);
    ``[obj]`` with one process. Collective: every rank must call it."""
    if not ctx.enabled:
        return [obj]
    out = [None] * ctx.world_size
    dist.all_gather_object(out, obj)
    return out
