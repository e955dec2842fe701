"""Contrastive training of open_clip models: the base model (anchors only) and fine-tuning on ConcreteBatch.

One loop serves both (paper Sec. 2.3 / 3):
- ``hard_negatives=False``: N image-caption pairs a batch, open_clip ``ClipLoss`` (N x N logits).
- ``hard_negatives=True``: N anchors plus their N hard negatives, 2N x 2N logits, InfoNCE or Cement loss
  (``concrete_jungle.losses``).

Optimisation (open_clip's recipe): AdamW (betas 0.9/0.98, eps 1e-6; no weight decay on gains, biases and the
logit scale), linear warm-up then cosine decay of the learning rate, optional gradient-norm clipping, bf16 autocast
when ``precision: bf16`` or when ``auto`` resolves to bf16 (only where native: CUDA, a CPU with AMX;
:mod:`concrete_jungle.machine`), and after every step the raw logit-scale parameter (log space) is clamped to
[0, ln 100], i.e. the exponentiated scale that multiplies cosine similarities stays <= 100.

Per logged step dvclive receives every loss term, ``train/logit_scale_exp`` (the **exponentiated** scale,
multiplier of cosines, <= 100), the learning rate, the total gradient norm before clipping (``train/grad_norm``,
when clipping is on) and for the losses of ``concrete_jungle.losses`` the statistics they return when called with
``return_stats=True`` (on logged steps only): the gradient ratio p_{i,i'} / (1 - p_{i,i}) (``train/gradient_ratio``),
the easy-negative share, the mean margin, the mean logit gap and the number of masked hard negatives. With several
processes the logged values are those of the whole global batch.

Input pipeline: a torch ``DataLoader`` over the batches of :func:`concrete_jungle.distributed.anchor_sampler`'s
order (epoch e: the sampler's permutation for (seed, e), batch b = positions [b*n, (b+1)*n)), started at the
resume position, so the batches are today's, in today's order, whatever the number of workers. ``num_workers=0``
builds each batch in the main process exactly when the step needs it (bit-identical to building it by hand, random
augmentation drawing from the global RNGs that the training state saves). ``num_workers > 0`` decodes and
collates in worker processes, ahead of the step (``prefetch_factor`` batches a worker), into pinned memory on CUDA;
before each item a worker seeds torch / numpy / ``random`` from (seed, epoch, item index), so random augmentation is
a function of the run's seed and the item alone: deterministic, the same for any number of workers > 0 and after a
resume (but not the draws of ``num_workers=0``: the two schemes are recorded in the state's fingerprint, and a state
of the other scheme is not resumed). With deterministic preprocessing (``augment: false``) every number of workers
gives the same batches, hence the same weights. The decoded-input cache of the datasets (``cache=True``) works as
before with 0 workers; with workers each worker process holds its **own** cache, started empty and filled as that
worker decodes (an image is decoded at most once per worker; memory up to ``num_workers`` copies of the cache: use
``cache=False`` for datasets whose decoded images do not fit that many times).

Host-device synchronisation: a step that is not logged launches its work and returns without waiting for the
device (no ``.item()`` / ``float()``, no Python branch on a device value, host-to-device copies non-blocking). Logged
steps read every value in one transfer.

Long runs: every ``checkpoint_every`` steps (and at the end) rank 0 writes the model checkpoint
(``models.checkpoints.save_checkpoint``, open_clip-loadable, ``"complete": False`` until the end) and a **training state** file
(default ``<checkpoint folder>/state.pt``, see :func:`save_training_state`) holding model, optimiser, step, epoch and
position in the epoch, the RNG states of every rank, the resolved params, a fingerprint of the run's inputs and the
logged rows. Data order depends only on (seed, epoch) (:func:`concrete_jungle.distributed.anchor_sampler`), so a run
killed at any point and started again with the same arguments resumes from the last state and, on CPU, ends with
weights bit-identical to an uninterrupted run; the dvclive curves are rebuilt from the logged rows stored in the state,
so they too equal the uninterrupted run's (rows logged after the last checkpoint by the killed run are dropped and
logged again). A non-finite loss or gradient norm stops the run with :class:`NonFiniteLossError` naming the step; the
last checkpoint and state written before it stay in place. The guard is immediate on logged steps (the bad step's
update is not applied, as :func:`train_step` with ``check_finite=True``) and **deferred** on the others: each step
records on the device whether its loss (and gradient norm) were finite, keeping the first bad step's index and
values, and the record is read on the next logged step, before every checkpoint and at the end; the error then names
the first non-finite step. Steps between it and the check run on invalid weights (wasted, never saved: no checkpoint
or state after the bad step is ever written), and the in-memory model is then invalid. Every file is read with
``torch.load(weights_only=True)``.

Data-parallel training under ``torchrun`` (``concrete_jungle.distributed``): DDP, anchors sharded with their hard
negatives, features gathered with gradients into the global 2N layout, ``global`` or ``local`` loss mode.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import math
import os
import random
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset
from tqdm.auto import tqdm

from concrete_jungle.distributed import (
    LOSS_MODES,
    DistContext,
    all_gather_objects,
    all_reduce_mean,
    anchor_sampler,
    distributed_contrastive_loss,
    init_distributed,
)
from concrete_jungle.datasets import (  # noqa: F401 (the training inputs, re-exported)
    AnchorDataset,
    ConcreteBatchDataset,
    ResumableBatches,
    collate_hard_negatives,
    collate_pairs,
    make_loader,
    stream_batches,
)
from concrete_jungle.losses import evaluate_loss
from concrete_jungle.machine import machine_info, resolve_precision
from concrete_jungle.models.encoding import padding_width, text_pad_id
from concrete_jungle.shards import ShardStream, stream_steps
from concrete_jungle.resume import (  # noqa: F401 (the training state, re-exported)
    STATE_FORMAT_VERSION,
    capture_rng_state,
    read_training_state,
    restore_rng_state,
    save_training_state,
    training_fingerprint,
    why_not_resumable,
)

__all__ = [
    "AnchorDataset",
    "ConcreteBatchDataset",
    "collate_pairs",
    "collate_hard_negatives",
    "ResumableBatches",
    "make_loader",
    "cosine_lr",
    "build_optimizer",
    "train_step",
    "train_contrastive",
    "exclusive_run",
    "capture_rng_state",
    "restore_rng_state",
    "save_training_state",
    "read_training_state",
    "NonFiniteLossError",
    "LOGIT_SCALE_MAX",
    "STATE_FORMAT_VERSION",
]

LOGIT_SCALE_MAX = math.log(100.0)
logger = logging.getLogger(__name__)


class NonFiniteLossError(RuntimeError):
    """Raised when a training step produces a NaN/Inf loss or gradient norm. The message names the step; the last
    checkpoint and training state written before that step are left in place (none if no checkpoint was due yet)."""


def cosine_lr(step: int, total_steps: int, warmup_steps: int, base_lr: float) -> float:
    """Linear warm-up to ``base_lr`` over ``warmup_steps``, then cosine decay to 0 at ``total_steps``."""
    if warmup_steps > 0 and step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return 0.5 * base_lr * (1.0 + math.cos(math.pi * min(1.0, progress)))


def _param_groups(model: torch.nn.Module, weight_decay: float):
    """open_clip's split: no weight decay on gains, biases, embeddings' scales and the logit scale."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        exclude = p.ndim < 2 or "bn" in name or "ln" in name or "bias" in name or "logit_scale" in name
        (no_decay if exclude else decay).append(p)
    return [{"params": no_decay, "weight_decay": 0.0}, {"params": decay, "weight_decay": weight_decay}]


def build_optimizer(model: torch.nn.Module, lr: float, weight_decay: float,
                    device: torch.device | str = "cpu") -> torch.optim.AdamW:
    """The trainer's optimiser (open_clip's recipe): AdamW, betas (0.9, 0.98), eps 1e-6, ``weight_decay`` on
    matrices only (:func:`_param_groups`), trainable parameters only. ``fused`` on CPU and CUDA (one kernel over
    all parameters: 42 -> 7 ms a step on the world model's 8.1 M parameters, 2 threads).

    Raises:
        ValueError: ``lr`` or ``weight_decay`` negative (torch's message).
    """
    fused = torch.device(device).type in ("cpu", "cuda")
    return torch.optim.AdamW(_param_groups(model, weight_decay), lr=lr, betas=(0.9, 0.98), eps=1e-6, fused=fused)


# --------------------------------------------------------------------------------------------------------------
# One optimisation step
# --------------------------------------------------------------------------------------------------------------
def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


def train_step(
    model: torch.nn.Module,
    batch: dict,
    loss_fn: Callable,
    optimizer: torch.optim.Optimizer,
    *,
    lr: float,
    step: int,
    hard_negatives: bool,
    grad_clip: float | None = None,
    autocast: Callable[[], Any] = contextlib.nullcontext,
    ctx: DistContext = DistContext(),
    distributed_loss: str = "global",
    return_stats: bool = False,
    check_finite: bool = True,
) -> dict:
    """One AdamW step on one batch (the paper's Sec. 3 fine-tuning; loss of Sec. 2.3): forward (under ``autocast``),
    loss, backward, clipping, step, logit-scale clamp.

    The loss is called through :func:`concrete_jungle.losses.evaluate_loss` (``loss_fn(image_features,
    text_features, logit_scale, concreteness=..., hard_negative_valid=..., output_dict=True)`` with hard negatives,
    ``loss_fn(image_features, text_features, logit_scale, output_dict=True)`` for pairs, plus ``return_stats=True``
    when asked and the loss provides statistics), with fp32 L2-normalised features and the exponentiated logit
    scale; with ``ctx.enabled`` it goes through :func:`concrete_jungle.distributed.distributed_contrastive_loss`.
    After ``optimizer.step()`` the raw logit-scale parameter is clamped to [0, ln 100].

    With ``check_finite=False`` and ``return_stats=False`` the step never waits for the device: batch tensors are
    copied with ``non_blocking=True`` (asynchronous from pinned memory), the c_i are checked on the CPU, and the
    finiteness of the loss and gradient norm is returned as a device tensor (``"finite"``) instead of being tested.

    Args:
        model: open_clip model returning a dict (``image_features``, ``text_features``, ``logit_scale``), possibly
            wrapped in ``DistributedDataParallel``.
        batch: ``{"images": [2N,3,H,W], "texts": [2N,L], "concreteness": [N], "valid": [N] bool}``
            (:func:`collate_hard_negatives`; ``images`` ``[N,3,H,W]`` for losses without hard-negative images) or
            ``{"images": [N,...], "texts": [N,L]}`` (:func:`collate_pairs`); the local shard under DDP; CPU
            tensors (pinned for asynchronous copies) or already on the device. CPU ``texts`` for a text tower that
            masks padding are cut after the batch's longest caption (``models/encoding.py`` padding_width): the
            width is read on the CPU, the whole tensor copied, the cut made on the device.
        loss_fn: loss module (see above).
        optimizer: its ``param_groups`` get ``lr`` before the step.
        lr: learning rate of this step.
        step: 0-based index of this step (for error messages).
        hard_negatives: 2N layout.
        grad_clip: max total L2 gradient norm, or None (no clipping, no gradient-norm check).
        autocast: context-manager factory wrapping the forward pass (``ModelBundle.autocast``).
        ctx: data-parallel context.
        distributed_loss: ``"global"`` or ``"local"`` (only used with ``ctx.enabled``).
        return_stats: also return the loss's statistics of the (global) batch (logging steps).
        check_finite: test the loss and gradient norm here (one synchronisation each) and raise before the update;
            False: only report ``"finite"`` (the caller checks it later; the update is applied either way).

    Returns:
        ``{"losses": {name: detached scalar}, "loss": detached scalar, "grad_norm": detached scalar or None,
        "stats": {name: 0-d tensor} or None, "finite": 0-d bool tensor}``, all on the device; the loss terms are
        averaged over ranks (the global batch's loss in both modes); ``stats`` is None unless ``return_stats`` and
        the loss provides statistics.

    Raises:
        NonFiniteLossError: ``check_finite`` and the loss or the gradient norm is NaN/Inf (message names ``step``);
            the parameters and optimiser state are not updated by this step.
    """
    for group in optimizer.param_groups:
        group["lr"] = lr
    raw = _unwrap(model)
    device = next(raw.parameters()).device
    images = batch["images"].to(device, non_blocking=True)
    texts = batch["texts"]
    # a tower that masks padding: cut after the batch's longest caption (the same loss), the width read on the CPU;
    # the whole tensor is copied (a slice is not contiguous: it would leave pinned memory and wait for the device)
    width = padding_width(texts, text_pad_id(raw)) if texts.device.type == "cpu" else None
    texts = texts.to(device, non_blocking=True)
    if width is not None:
        texts = texts[:, :width]
    optimizer.zero_grad(set_to_none=True)
    with autocast():
        out = model(images, texts)
    img_f, txt_f, scale = out["image_features"].float(), out["text_features"].float(), out["logit_scale"]
    concreteness = valid = None
    if hard_negatives:
        concreteness, valid = batch["concreteness"], batch["valid"]
        if ctx.enabled:  # gathered over ranks: on the device (the losses check c_i values of CPU tensors only)
            concreteness = concreteness.to(device, non_blocking=True)
            valid = valid.to(device, non_blocking=True)
    if ctx.enabled:
        res = distributed_contrastive_loss(loss_fn, img_f, txt_f, scale, ctx, hard_negatives=hard_negatives,
                                           mode=distributed_loss, concreteness=concreteness,
                                           hard_negative_valid=valid, return_stats=return_stats)
        losses, stats = (res["losses"], res["stats"]) if return_stats else (res, None)
    else:
        losses, stats = evaluate_loss(loss_fn, img_f, txt_f, scale, hard_negatives=hard_negatives,
                                      concreteness=concreteness, hard_negative_valid=valid,
                                      return_stats=return_stats)
    total = sum(losses.values())
    names = list(losses)
    reported = all_reduce_mean(torch.stack([losses[k].detach().float() for k in names]), ctx)
    total_reported = reported.sum()
    finite = torch.isfinite(total_reported)
    if check_finite and not finite:
        raise NonFiniteLossError(f"non-finite loss {float(total_reported)} at step {step}")
    total.backward()
    grad_norm = None
    if grad_clip:
        grad_norm = torch.nn.utils.clip_grad_norm_([p for p in raw.parameters() if p.grad is not None], grad_clip)
        norm_ok = torch.isfinite(grad_norm)
        if check_finite and not norm_ok:
            optimizer.zero_grad(set_to_none=True)
            raise NonFiniteLossError(f"non-finite gradient norm {float(grad_norm)} at step {step} "
                                     f"(loss {float(total_reported):.6g})")
        finite = finite & norm_ok
    optimizer.step()
    with torch.no_grad():
        raw.logit_scale.clamp_(0, LOGIT_SCALE_MAX)
    return {"losses": dict(zip(names, reported)), "loss": total_reported,
            "grad_norm": None if grad_norm is None else grad_norm.detach(), "stats": stats, "finite": finite}


class _DeferredGuard:
    """The deferred non-finite check of the loop (module docstring): a device record ``[first bad step, its loss,
    its gradient norm]`` (step -1: none yet), updated without synchronisation and read by :meth:`check`."""

    def __init__(self, device: torch.device) -> None:
        self.record = torch.tensor([-1.0, 0.0, 0.0], dtype=torch.float64, device=device)
        self.pending = False

    def update(self, step: int, out: dict) -> None:
        norm = out["grad_norm"] if out["grad_norm"] is not None else torch.zeros((), device=self.record.device)
        now = torch.stack([torch.full_like(self.record[0], float(step)), out["loss"].to(torch.float64),
                           norm.to(torch.float64)])
        newly_bad = (self.record[0] < 0) & ~out["finite"]
        self.record = torch.where(newly_bad, now, self.record)
        self.pending = True

    @staticmethod
    def error(record: Sequence[float], has_norm: bool, found_after: int) -> NonFiniteLossError | None:
        """The error for a host copy of the record, or None when no step was bad."""
        bad_step, loss, norm = record
        if bad_step < 0:
            return None
        when = f" (found at the check after step {found_after})" if found_after != int(bad_step) else ""
        if not math.isfinite(loss) or not has_norm:
            return NonFiniteLossError(f"non-finite loss {loss} at step {int(bad_step)}{when}")
        return NonFiniteLossError(f"non-finite gradient norm {norm} at step {int(bad_step)}{when} (loss {loss:.6g})")

    def check(self, has_norm: bool, found_after: int) -> None:
        """Read the record (one synchronisation, skipped when nothing was recorded since the last check) and raise
        :class:`NonFiniteLossError` naming the first non-finite step."""
        if not self.pending:
            return
        err = self.error(self.record.tolist(), has_norm, found_after)
        self.pending = False
        if err is not None:
            raise err


# --------------------------------------------------------------------------------------------------------------
# Training state (resume)
# --------------------------------------------------------------------------------------------------------------
def _rewrite_tsv_history(live, rows: Sequence) -> None:
    for step, metrics in rows:
        live.step = int(step)
        for name, value in metrics.items():
            live.log_metric(f"train/{name}", value)


# --------------------------------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------------------------------
def _resolve_device(device: str | torch.device, local_rank: int) -> torch.device:
    if str(device) == "auto":
        return torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    return torch.device(device)


def train_contrastive(
    bundle: Any,
    dataset: Dataset,
    loss_fn: Callable,
    loop: Any,
    *,
    seed: int,
    live_dir: str | Path,
    checkpoint_path: str | Path,
    params_dump: dict,
    save_checkpoint: Callable[..., Any],
    hard_negatives: bool,
    device: str | torch.device = "auto",
    state_path: str | Path | None = None,
    keep_state: bool = True,
    on_step_end: Callable[[int], None] | None = None,
    num_workers: int | None = None,
) -> dict:
    """Train ``bundle.model`` in place, resumably, and save its checkpoint; returns a summary dict (paper Sec. 3).

    Under ``torchrun`` (``WORLD_SIZE`` > 1) the model is wrapped in ``DistributedDataParallel``, each rank takes
    n = N / W anchors (with their hard negatives) a step and the loss runs on the gathered global batch
    (``loop.distributed_loss``); see ``concrete_jungle.distributed``. Rank 0 logs and writes files.

    Resume: when ``state_path`` exists, was written with equal ``params_dump`` and the same inputs (initial weights,
    dataset records and image files, loss, training code, world size), training continues from it; otherwise (with a
    logged warning naming the difference) it starts afresh and overwrites the file at the next checkpoint.

    Args:
        bundle: a ``concrete_jungle.models.build.ModelBundle`` (model + preprocessing + tokenizer); ``bundle.device`` is set
            to the training device.
        dataset: :class:`AnchorDataset` (``hard_negatives=False``) or :class:`ConcreteBatchDataset`; must not depend
            on the global RNG state except through its transforms (data order comes from (seed, epoch)). Or a
            :class:`~concrete_jungle.shards.ShardStream` decoding to their items (WebDataset shards, streamed:
            each rank reads its own contiguous part of an epoch's shard order, ``stream_steps`` batches an epoch on
            every rank, each sample at most once an epoch; resumed mid-epoch by skipping, ``datasets.stream_batches``;
            its rank and world size are set here).
        loss_fn: ``open_clip.loss.ClipLoss`` for pairs, a ``HardNegativeContrastiveLoss`` for ConcreteBatch (or any
            callable with their signature returning ``{name: scalar}``).
        loop: ``LoopParams`` (epochs, max_steps, batch_size = N anchors of the global batch, lr, weight_decay,
            warmup_frac, grad_clip, precision, log_every, num_threads; read when present, else the default:
            ``checkpoint_every`` (None: only at the end) and ``distributed_loss`` (``"global"``)).
        seed: seeds the data order (with the epoch), the RNGs (rank r: seed + r) and the AnchorDataset caption draw.
        live_dir: dvclive folder (metrics.json + plots/metrics/train/*.tsv); rebuilt from the state on resume.
        checkpoint_path: the model checkpoint (atomically written every ``checkpoint_every`` steps and at the end).
        params_dump: the resolved params (plain types), saved in the checkpoint and the state, and compared on resume.
        save_checkpoint: ``models.checkpoints.save_checkpoint``.
        hard_negatives: selects the 2N layout.
        device: ``"auto"`` (``cuda:<LOCAL_RANK>`` when CUDA is available, else CPU), or a torch device.
        state_path: training-state file; default ``<checkpoint_path folder>/state.pt``. Put it outside DVC outputs
            if a ``dvc repro`` after a kill should resume (DVC deletes a stage's outputs before running it). For the
            whole run rank 0 holds an exclusive ``flock`` on ``.lock`` in its folder (released when the run ends or
            the process dies), so two concurrent runs never share one state.
        keep_state: keep the final state file (True), or delete it once the final checkpoint is written.
        on_step_end: called with the number of steps done after each step (after any checkpoint of that step).
        num_workers: DataLoader worker processes that decode and collate the batches (module docstring); None
            (default): ``loop.num_workers`` when the loop params have that field, else 0 (in the main process, on
            demand: bit-identical to building each batch by hand). Batches are pinned when training on CUDA.

    Returns:
        ``{"steps", "samples_per_s" (rows of this process's run segment a second, all ranks), "wall_s" (this
        segment), "resumed_from_step" (0 for a fresh run), the last logged metrics ..., "precision" (the one
        computed in: ``loop.precision`` with ``auto`` resolved by ``machine.resolve_precision``), "machine"
        (``machine.machine_info(timing=False)``: CPU model, ISA flags, torch threads)}`` (the numbers finite floats).

    Raises:
        RuntimeError: another run holds the lock on ``state_path``'s folder (raised before any training; names
            ``<folder>/.lock``).
        NonFiniteLossError: a loss or gradient norm is NaN/Inf (names the step and the last good checkpoint).
        ValueError: the dataset is smaller than one batch per rank; ``batch_size`` not divisible by the world size;
            ``checkpoint_every`` < 1; unknown ``distributed_loss``; a negative ``num_workers``; an unreadable state
            file (names the path).
    """
    from dvclive import Live

    local_rank = int(os.environ.get("LOCAL_RANK", "0") or 0)
    device = _resolve_device(device, local_rank)
    state_path = Path(state_path) if state_path else Path(checkpoint_path).parent / "state.pt"
    ctx, created_group = init_distributed(device.type)
    try:
        with exclusive_run(state_path.parent) if ctx.is_main else contextlib.nullcontext():
            return _train(bundle, dataset, loss_fn, loop, seed=seed, live_dir=Path(live_dir),
                          checkpoint_path=Path(checkpoint_path), params_dump=params_dump,
                          save_checkpoint=save_checkpoint, hard_negatives=hard_negatives, device=device, ctx=ctx,
                          state_path=state_path, keep_state=keep_state, on_step_end=on_step_end, live_cls=Live,
                          num_workers=num_workers)
    finally:
        if created_group:
            torch.distributed.destroy_process_group()


@contextlib.contextmanager
def exclusive_run(folder: Path) -> Iterator[None]:
    """Hold an exclusive, non-blocking ``flock`` on ``folder/.lock`` (created, with ``folder``, if absent) for the
    duration of the block; the kernel releases it when the file is closed or the process dies. A run holds one on
    its resume folder; a training stage holds one on its family's (``stages/train.py``, issue 22).

    Raises:
        RuntimeError: another process (or another open of the file) holds the lock, naming the lock file.
    """
    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / ".lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            raise RuntimeError(f"another run holds {lock}{f' (pid {holder})' if holder else ''}: a training run "
                               f"of the same stage is already using {folder}; wait for it to end or stop it") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)


def _train(bundle, dataset, loss_fn, loop, *, seed, live_dir, checkpoint_path, params_dump, save_checkpoint,
           hard_negatives, device, ctx, state_path, keep_state, on_step_end, live_cls, num_workers) -> dict:
    checkpoint_every = getattr(loop, "checkpoint_every", None)
    if num_workers is None:
        num_workers = getattr(loop, "num_workers", None) or 0
    if not isinstance(num_workers, int) or num_workers < 0:
        raise ValueError(f"num_workers must be a non-negative int, got {num_workers!r}")
    mode = getattr(loop, "distributed_loss", "global")
    if checkpoint_every is not None and (not isinstance(checkpoint_every, int) or checkpoint_every < 1):
        raise ValueError(f"checkpoint_every must be a positive int or None, got {checkpoint_every!r}")
    if mode not in LOSS_MODES:
        raise ValueError(f"distributed_loss must be one of {LOSS_MODES}, got {mode!r}")
    n_global = loop.batch_size
    if n_global % ctx.world_size:
        raise ValueError(f"batch_size ({n_global} anchors) must be divisible by the number of processes "
                         f"({ctx.world_size})")
    n = n_global // ctx.world_size
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if loop.num_threads:
        torch.set_num_threads(loop.num_threads)
    torch.manual_seed(seed + ctx.rank)
    np.random.seed((seed + ctx.rank) % (2**32))
    random.seed(seed + ctx.rank)

    raw = bundle.model.to(device)
    raw.train()
    bundle.device = device
    # The loop's precision decides autocast (``auto``: bf16 only where native, concrete_jungle.machine);
    # ModelBundle.autocast also picks the fast CPU attention kernel for bf16.
    precision = resolve_precision(loop.precision, device)
    bundle.spec = bundle.spec.model_copy(update={"precision": precision})
    streaming = isinstance(dataset, ShardStream)  # WebDataset shards (train.data_format: webdataset)
    if streaming:  # random transforms seeded per sample in workers: a resumed worker skips without decoding
        dataset.rank, dataset.world_size, dataset.seed_items = ctx.rank, ctx.world_size, True
        sampler, steps_per_epoch = None, stream_steps(len(dataset), n, ctx.world_size, num_workers)
    else:
        sampler = anchor_sampler(dataset, ctx, seed)
        steps_per_epoch = len(sampler) // n
    if steps_per_epoch == 0:
        slots = ctx.world_size * max(1, num_workers)
        raise ValueError(f"dataset has {len(dataset)} items, fewer than one batch (batch_size={n_global}"
                         + (f", {n} a rank on {ctx.world_size} processes" if ctx.enabled else "")
                         + (f"; streamed, each of the {slots} (rank, worker) slots holds about "
                            f"{len(dataset) // slots} samples and makes whole batches of its own: use fewer "
                            f"num_workers or a smaller batch" if streaming else "") + ")")
    total = steps_per_epoch * loop.epochs
    if loop.max_steps:
        total = min(total, loop.max_steps)
    warmup = int(round(loop.warmup_frac * total))
    opt = build_optimizer(raw, loop.lr, loop.weight_decay, device)
    # a stream's order also depends on its (rank, worker) slots: never resumed with another number of workers
    item_rng = "per_item" if num_workers else "global"
    fingerprint = training_fingerprint(raw, dataset, loss_fn, hard_negatives, ctx.world_size,
                                       item_rng=f"stream|{item_rng}|workers={num_workers}" if streaming else item_rng)
    fingerprint["precision"] = precision  # ``auto`` may resolve otherwise on another machine: never resume across it

    step = epoch = batch_pos = seen = 0
    log_rows: list = []
    last: dict[str, float] = {}
    resumed_from = 0
    rng_to_restore = None
    if state_path.exists():
        state = read_training_state(state_path)
        why = why_not_resumable(state, params_dump, fingerprint)
        if why is None and state["step"] > total:
            why = f"it is at step {state['step']}, beyond this run's {total} steps"
        if why is None and len(state["rng"]) != ctx.world_size:
            why = f"it holds RNG states of {len(state['rng'])} ranks, not {ctx.world_size}"
        if why is None:
            raw.load_state_dict(state["model"], strict=True)
            opt.load_state_dict(state["optimizer"])
            step, epoch, batch_pos = int(state["step"]), int(state["epoch"]), int(state["batch_in_epoch"])
            seen, log_rows, last = int(state.get("seen", 0)), list(state["log_rows"]), dict(state.get("last", {}))
            rng_to_restore = state["rng"][ctx.rank]
            resumed_from = step
            if ctx.is_main:
                logger.info("resuming %s from step %d of %d (%s)", checkpoint_path, step, total, state_path)
        elif ctx.is_main:
            logger.warning("training state %s is not resumed: %s; starting at step 0", state_path, why)
        del state

    model = raw
    if ctx.enabled:
        model = torch.nn.parallel.DistributedDataParallel(
            raw, device_ids=[device.index] if device.type == "cuda" else None)
    collate = collate_hard_negatives if hard_negatives else collate_pairs
    last_good = None if resumed_from == 0 else (state_path, resumed_from)

    def write_checkpoint(complete: bool) -> None:
        rng = all_gather_objects(capture_rng_state(device), ctx)  # collective: every rank takes part
        if not ctx.is_main:
            return
        summary = {"steps": step, **last}
        save_checkpoint(checkpoint_path, bundle, params=params_dump, step=step,
                        extra={"summary": summary, "complete": complete})
        if complete and not keep_state:
            with contextlib.suppress(FileNotFoundError):
                state_path.unlink()
            return
        save_training_state(state_path, {
            "format_version": STATE_FORMAT_VERSION, "step": step, "total_steps": total, "epoch": epoch,
            "batch_in_epoch": batch_pos, "complete": complete, "model": raw.state_dict(),
            "optimizer": opt.state_dict(), "rng": rng, "params": params_dump, "fingerprint": fingerprint,
            "log_rows": log_rows, "last": last, "seen": seen})

    live = bar = None
    if ctx.is_main:
        live = live_cls(dir=str(live_dir), save_dvc_exp=False, dvcyaml=None, report=None)
        _rewrite_tsv_history(live, log_rows)
        bar = tqdm(total=total, initial=step, desc=f"train {live_dir.name}", unit="step")
    if rng_to_restore is not None:  # last, so that nothing between here and the first step draws from the RNGs
        restore_rng_state(rng_to_restore, device)
    t0, seen_start = time.time(), seen
    guard = _DeferredGuard(device)
    has_norm = bool(loop.grad_clip)

    def fail(err: NonFiniteLossError) -> NonFiniteLossError:
        where = (f"the last good checkpoint is {checkpoint_path} with state {last_good[0]} at step "
                 f"{last_good[1]}") if last_good else "no checkpoint was written before it"
        return NonFiniteLossError(f"{err} of {live_dir}; {where}")

    batches = None
    if step < total:  # the loader (and its workers) is created without drawing from the global RNGs
        if streaming:
            batches = stream_batches(dataset, n, steps_per_epoch, epoch, batch_pos, total - step, collate, seed=seed,
                                     num_workers=num_workers, pin_memory=device.type == "cuda")
        else:
            batches = iter(make_loader(dataset, ResumableBatches(sampler, n, steps_per_epoch, epoch, batch_pos,
                                                                 total - step),
                                       collate, seed=seed, num_workers=num_workers, pin_memory=device.type == "cuda"))
    try:
        while step < total:
            batch = next(batches)
            log_now = (step + 1) % loop.log_every == 0 or step + 1 == total
            lr = cosine_lr(step, total, warmup, loop.lr)
            try:
                out = train_step(model, batch, loss_fn, opt, lr=lr, step=step, hard_negatives=hard_negatives,
                                 grad_clip=loop.grad_clip, autocast=bundle.autocast, ctx=ctx,
                                 distributed_loss=mode, return_stats=log_now, check_finite=log_now)
            except NonFiniteLossError as err:
                try:  # an earlier, not yet checked step comes first
                    guard.check(has_norm, step)
                except NonFiniteLossError as earlier:
                    err = earlier
                raise fail(err) from None
            if not log_now:
                guard.update(step, out)
            step += 1
            batch_pos += 1
            if batch_pos == steps_per_epoch:
                epoch, batch_pos = epoch + 1, 0
            seen += batch["texts"].shape[0] * ctx.world_size  # training rows: 2N with hard negatives, else N
            if bar is not None:
                bar.update(1)
            if log_now:
                # every logged value (and the deferred guard's record) in one device-to-host transfer
                values = {**out["losses"], "loss": out["loss"], "logit_scale_exp": raw.logit_scale.detach().exp()}
                if out["grad_norm"] is not None:
                    values["grad_norm"] = out["grad_norm"]
                values.update(out["stats"] or {})
                host = torch.cat([torch.stack([v.detach().to(torch.float64).reshape(()) for v in values.values()]),
                                  guard.record]).tolist()
                guard.pending = False
                err = guard.error(host[len(values):], has_norm, step - 1)
                if err is not None:
                    raise fail(err)
                got = dict(zip(values, host[:len(values)]))
                last = {k: got[k] for k in out["losses"]}
                last["loss"] = got["loss"]
                last["logit_scale_exp"] = got["logit_scale_exp"]
                last["lr"] = lr
                if out["grad_norm"] is not None:
                    last["grad_norm"] = got["grad_norm"]
                last.update({k: got[k] for k in (out["stats"] or {})})
                log_rows.append([step, dict(last)])
                if live is not None:
                    _rewrite_tsv_history(live, log_rows[-1:])
                    bar.set_postfix(loss=f"{last['loss']:.3f}")
            if checkpoint_every and step % checkpoint_every == 0 and step < total:
                try:
                    guard.check(has_norm, step - 1)
                except NonFiniteLossError as err:
                    raise fail(err) from None
                write_checkpoint(complete=False)
                last_good = (state_path, step)
            if on_step_end is not None:
                on_step_end(step)
        try:
            guard.check(has_norm, step - 1)
        except NonFiniteLossError as err:
            raise fail(err) from None
    finally:  # workers, logs and the progress bar are closed even when a step fails
        shutdown = getattr(batches, "_shutdown_workers", None) or getattr(batches, "close", None)
        if shutdown is not None:
            shutdown()
        if bar is not None:
            bar.close()
        if live is not None:
            live.end()
    elapsed = time.time() - t0
    write_checkpoint(complete=True)
    if ctx.enabled:
        torch.distributed.barrier()
    return {"steps": step, "samples_per_s": (seen - seen_start) / max(elapsed, 1e-9), "wall_s": elapsed,
            "resumed_from_step": resumed_from, **last, "precision": precision,
            "machine": machine_info(device, timing=False)}
