"""Contrastive training of open_clip models: the base model (anchors only) and fine-tuning on ConcreteBatch.

One loop serves both (paper Sec. 2.3 / 3):
- ``hard_negatives=False``: N image-caption pairs a batch, open_clip ``ClipLoss`` (N x N logits).
- ``hard_negatives=True``: N anchors plus their N hard negatives, 2N x 2N logits, InfoNCE or Cement loss
  (``concrete_jungle.losses``).

Optimisation (open_clip's recipe): AdamW (betas 0.9/0.98, eps 1e-6; no weight decay on gains, biases and the
logit scale), linear warm-up then cosine decay of the learning rate, optional gradient-norm clipping, bf16 autocast
when ``precision: bf16`` (on GPU and CPU), and after every step the raw logit-scale parameter (log space) is clamped
to [0, ln 100], i.e. the exponentiated scale that multiplies cosine similarities stays <= 100.

Per logged step dvclive receives every loss term, ``train/logit_scale_exp`` (the **exponentiated** scale,
multiplier of cosines, <= 100), the learning rate, the total gradient norm before clipping (``train/grad_norm``,
when clipping is on) and for hard-negative losses the statistics of ``loss_fn.stats``: the gradient ratio
p_{i,i'} / (1 - p_{i,i}) (``train/gradient_ratio``), the easy-negative share, the mean margin and the mean logit gap.
With several processes the logged values are those of the whole global batch.

Long runs: every ``checkpoint_every`` steps (and at the end) rank 0 writes the model checkpoint
(``models.checkpoints.save_checkpoint``, open_clip-loadable, ``"complete": False`` until the end) and a **training state** file
(default ``<checkpoint folder>/state.pt``, see :func:`save_training_state`) holding model, optimiser, step, epoch and
position in the epoch, the RNG states of every rank, the resolved params, a fingerprint of the run's inputs and the
logged rows. Data order depends only on (seed, epoch) (:func:`concrete_jungle.distributed.anchor_sampler`), so a run
killed at any point and started again with the same arguments resumes from the last state and, on CPU, ends with
weights bit-identical to an uninterrupted run; the dvclive curves are rebuilt from the logged rows stored in the state,
so they too equal the uninterrupted run's (rows logged after the last checkpoint by the killed run are dropped and
logged again). A non-finite loss or gradient norm stops the run with :class:`NonFiniteLossError` naming the step; the
last checkpoint and state written before it stay in place. Every file is read with ``torch.load(weights_only=True)``.

Data-parallel training under ``torchrun`` (``concrete_jungle.distributed``): DDP, anchors sharded with their hard
negatives, features gathered with gradients into the global 2N layout, ``global`` or ``local`` loss mode.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import math
import numbers
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
from concrete_jungle.io import atomic_write, load_rgb

__all__ = [
    "AnchorDataset",
    "ConcreteBatchDataset",
    "collate_pairs",
    "collate_hard_negatives",
    "cosine_lr",
    "train_step",
    "train_contrastive",
    "capture_rng_state",
    "restore_rng_state",
    "save_training_state",
    "read_training_state",
    "NonFiniteLossError",
    "LOGIT_SCALE_MAX",
    "STATE_FORMAT_VERSION",
]

LOGIT_SCALE_MAX = math.log(100.0)
STATE_FORMAT_VERSION = 1
logger = logging.getLogger(__name__)


class NonFiniteLossError(RuntimeError):
    """Raised when a training step produces a NaN/Inf loss or gradient norm. The message names the step; the last
    checkpoint and training state written before that step are left in place (none if no checkpoint was due yet)."""


def _check_files(paths: Sequence[str], what: str) -> None:
    """Raise ``FileNotFoundError`` naming up to three missing image files of ``what`` (checked before training)."""
    missing = sorted({p for p in paths if not Path(p).is_file()})
    if missing:
        raise FileNotFoundError(f"{what}: {len(missing)} image file(s) missing, e.g. {missing[:3]}")


class _CachedInputs:
    """Memoises preprocessed images and token rows, so every epoch after the first skips decoding, resizing and
    BPE. The cache is one contiguous tensor per kind, allocated on first use (many small long-lived tensors
    interleaved with per-step activations fragmented the heap: +0.7 GiB an epoch on the world base model). Only
    for deterministic preprocessing (``augment: false``): with random augmentation set ``cache=False``."""

    def _init_cache(self, preprocess: Callable, tokenizer: Callable, cache: bool, image_paths: Sequence[str],
                    texts: Sequence[str]) -> None:
        self.preprocess, self.tokenizer, self.cache = preprocess, tokenizer, cache
        self._image_row = {p: i for i, p in enumerate(dict.fromkeys(image_paths))}
        self._text_row = {t: i for i, t in enumerate(dict.fromkeys(texts))}
        self._images: torch.Tensor | None = None
        self._tokens: torch.Tensor | None = None
        self._image_done = torch.zeros(len(self._image_row), dtype=torch.bool)
        self._text_done = torch.zeros(len(self._text_row), dtype=torch.bool)

    def _image(self, path: str) -> torch.Tensor:
        if not self.cache or path not in self._image_row:
            return self.preprocess(load_rgb(path))
        row = self._image_row[path]
        if not self._image_done[row]:
            x = self.preprocess(load_rgb(path))
            if self._images is None:
                self._images = torch.empty((len(self._image_row), *x.shape), dtype=x.dtype)
            self._images[row] = x
            self._image_done[row] = True
        return self._images[row]  # a view: collate copies it into the batch

    def _text(self, text: str) -> torch.Tensor:
        if not self.cache or text not in self._text_row:
            return self.tokenizer([text])[0]
        row = self._text_row[text]
        if not self._text_done[row]:
            t = self.tokenizer([text])[0]
            if self._tokens is None:
                self._tokens = torch.empty((len(self._text_row), *t.shape), dtype=t.dtype)
            self._tokens[row] = t
            self._text_done[row] = True
        return self._tokens[row]


class AnchorDataset(_CachedInputs, Dataset):
    """Image-caption pairs from a corpus manifest (no hard negatives), for the base-model stage.

    Items are ``(image [3, H, W] float, tokens [L] long)``. ``caption="anchor"`` always uses the anchor caption;
    ``"random"`` draws one of the image's captions, deterministically from ``(seed, epoch, index)``.
    """

    def __init__(self, records: Sequence[dict], preprocess: Callable, tokenizer: Callable, caption: str = "random",
                 seed: int = 0, cache: bool = True) -> None:
        if not records:
            raise ValueError("AnchorDataset: the manifest has no records")
        if caption not in ("random", "anchor"):
            raise ValueError(f"caption must be 'random' or 'anchor', got {caption!r}")
        self.records = list(records)
        _check_files([r["image"] for r in self.records], "corpus manifest")
        texts = [r["anchor"] for r in self.records] + [c for r in self.records for c in r["captions"]]
        self._init_cache(preprocess, tokenizer, cache, [r["image"] for r in self.records], texts)
        self.caption, self.seed, self.epoch = caption, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int):
        rec = self.records[i]
        if self.caption == "anchor":
            text = rec["anchor"]
        else:
            rng = random.Random(hash((self.seed, self.epoch, i)))
            text = rng.choice(rec["captions"])
        return self._image(rec["image"]), self._text(text)


class ConcreteBatchDataset(_CachedInputs, Dataset):
    """ConcreteBatch records as training quadruples (paper Sec. 2.2-2.3).

    Items are ``(image, tokens, negative_image, negative_tokens, c_i, valid)`` with images ``[3, H, W]``, tokens
    ``[L]``, ``c_i`` the keyword concreteness (float, 1-5) and ``valid`` False when the negative caption tokenises
    to the anchor's (its hard-negative entries are then masked, never pushed away). With
    ``negative_images=False`` (losses that use no hard-negative image, e.g. NegCLIP) ``negative_image`` is None,
    the records may be text-only (``image_negatives: none``) and hard-negative images are never decoded.

    Raises:
        ValueError: no records, a record lacking a field the loss needs (naming the record and the field), or a
            ``c_i`` that is not a finite number in [1, 5] (Brysbaert's concreteness scale; naming the record's
            ``anchor_id`` and the value).
        FileNotFoundError: an image path that does not exist (via ``_check_files``).
    """

    def __init__(self, records: Sequence[dict], preprocess: Callable, tokenizer: Callable, cache: bool = True,
                 negative_images: bool = True) -> None:
        if not records:
            raise ValueError("ConcreteBatchDataset: the ConcreteBatch has no records")
        keys = ("image", "caption", "negative_caption", "c_i") + (("negative_image",) if negative_images else ())
        for idx, rec in enumerate(records):
            for key in keys:
                if rec.get(key) is None:
                    hint = (" (text-only hard negatives, image_negatives: none: the 2N x 2N losses need a negative"
                            " image; use image_negatives scene, retrieval or sdxl_turbo, or a loss without"
                            " hard-negative images such as negclip)") if key == "negative_image" else ""
                    raise ValueError(f"ConcreteBatch record {idx} ({rec.get('anchor_id')}) lacks {key!r}{hint}")
            c = rec["c_i"]
            if isinstance(c, bool) or not isinstance(c, numbers.Real) or not (math.isfinite(c) and 1 <= c <= 5):
                raise ValueError(f"ConcreteBatch record {idx} (anchor_id {rec.get('anchor_id')!r}) has c_i {c!r}; "
                                 "expected a finite concreteness in [1, 5] (Brysbaert scale)")
        self.negative_images = bool(negative_images)
        self.records = list(records)
        paths = [p for r in self.records for p in ((r["image"], r["negative_image"]) if negative_images
                                                   else (r["image"],))]
        _check_files(paths, "ConcreteBatch")
        self._init_cache(preprocess, tokenizer, cache, paths,
                         [t for r in self.records for t in (r["caption"], r["negative_caption"])])

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int):
        r = self.records[i]
        tok, neg_tok = self._text(r["caption"]), self._text(r["negative_caption"])
        valid = not torch.equal(tok, neg_tok)
        neg_img = self._image(r["negative_image"]) if self.negative_images else None
        return self._image(r["image"]), tok, neg_img, neg_tok, float(r["c_i"]), valid


def collate_pairs(batch):
    """Stack ``(image, tokens)`` items into ``{"images": [N,3,H,W], "texts": [N,L]}``."""
    images, texts = zip(*batch)
    return {"images": torch.stack(images), "texts": torch.stack(texts)}


def collate_hard_negatives(batch):
    """Stack ConcreteBatch items into the 2N layout: anchors first, then their hard negatives.

    Returns ``{"images": [2N,3,H,W], "texts": [2N,L], "concreteness": [N], "valid": [N] bool}``; ``images`` is
    ``[N,3,H,W]`` (anchor images only) when the items carry no hard-negative image
    (``ConcreteBatchDataset(negative_images=False)``).

    Raises:
        ValueError: if some items carry a hard-negative image and others do not.
    """
    img, tok, nimg, ntok, c, valid = zip(*batch)
    missing = sum(x is None for x in nimg)
    if missing not in (0, len(nimg)):
        raise ValueError(f"collate_hard_negatives: {missing} of {len(nimg)} items lack a hard-negative image")
    return {
        "images": torch.stack(list(img) + ([] if missing else list(nimg))),
        "texts": torch.stack(list(tok) + list(ntok)),
        "concreteness": torch.tensor(c, dtype=torch.float32),
        "valid": torch.tensor(valid, dtype=torch.bool),
    }


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
    compute_stats: bool = True,
) -> dict:
    """One AdamW step on one batch (the paper's Sec. 3 fine-tuning; loss of Sec. 2.3): forward (under ``autocast``),
    loss, backward, clipping, step, logit-scale clamp.

    The loss is called as ``loss_fn(image_features, text_features, logit_scale, concreteness=..., hard_negative_valid=...,
    output_dict=True)`` (hard negatives) or ``loss_fn(image_features, text_features, logit_scale, output_dict=True)``
    (pairs), with fp32 L2-normalised features and the exponentiated logit scale; with ``ctx.enabled`` it goes through
    :func:`concrete_jungle.distributed.distributed_contrastive_loss`. After ``optimizer.step()`` the raw logit-scale
    parameter is clamped to [0, ln 100].

    Args:
        model: open_clip model returning a dict (``image_features``, ``text_features``, ``logit_scale``), possibly
            wrapped in ``DistributedDataParallel``.
        batch: ``{"images": [2N,3,H,W], "texts": [2N,L], "concreteness": [N], "valid": [N] bool}``
            (:func:`collate_hard_negatives`; ``images`` ``[N,3,H,W]`` for losses without hard-negative images) or ``{"images": [N,...], "texts": [N,L]}`` (:func:`collate_pairs`);
            the local shard under DDP.
        loss_fn: loss module (see above).
        optimizer: its ``param_groups`` get ``lr`` before the step.
        lr: learning rate of this step.
        step: 0-based index of this step (for error messages).
        hard_negatives: 2N layout.
        grad_clip: max total L2 gradient norm, or None (no clipping, no gradient-norm check).
        autocast: context-manager factory wrapping the forward pass (``ModelBundle.autocast``).
        ctx: data-parallel context.
        distributed_loss: ``"global"`` or ``"local"`` (only used with ``ctx.enabled``).
        compute_stats: local mode: also fill ``loss_fn.stats`` for the global batch (logging steps).

    Returns:
        ``{"losses": {name: detached scalar}, "loss": detached scalar, "grad_norm": detached scalar or None}``; the
        loss terms are averaged over ranks (the global batch's loss in both modes).

    Raises:
        NonFiniteLossError: the loss or the gradient norm is NaN/Inf (message names ``step``); the parameters and
            optimiser state are not updated by this step.
    """
    for group in optimizer.param_groups:
        group["lr"] = lr
    raw = _unwrap(model)
    device = next(raw.parameters()).device
    images = batch["images"].to(device, non_blocking=True)
    texts = batch["texts"].to(device, non_blocking=True)
    optimizer.zero_grad(set_to_none=True)
    with autocast():
        out = model(images, texts)
    img_f, txt_f, scale = out["image_features"].float(), out["text_features"].float(), out["logit_scale"]
    concreteness = valid = None
    if hard_negatives:
        concreteness, valid = batch["concreteness"].to(device), batch["valid"].to(device)
    if ctx.enabled:
        losses = distributed_contrastive_loss(loss_fn, img_f, txt_f, scale, ctx, hard_negatives=hard_negatives,
                                              mode=distributed_loss, concreteness=concreteness,
                                              hard_negative_valid=valid, compute_stats=compute_stats)
    elif hard_negatives:
        losses = loss_fn(img_f, txt_f, scale, concreteness=concreteness, hard_negative_valid=valid, output_dict=True)
    else:
        losses = loss_fn(img_f, txt_f, scale, output_dict=True)
    total = sum(losses.values())
    names = list(losses)
    reported = all_reduce_mean(torch.stack([losses[k].detach().float() for k in names]), ctx)
    total_reported = reported.sum()
    if not torch.isfinite(total_reported):
        raise NonFiniteLossError(f"non-finite loss {float(total_reported)} at step {step}")
    total.backward()
    grad_norm = None
    if grad_clip:
        grad_norm = torch.nn.utils.clip_grad_norm_([p for p in raw.parameters() if p.grad is not None], grad_clip)
        if not torch.isfinite(grad_norm):
            optimizer.zero_grad(set_to_none=True)
            raise NonFiniteLossError(f"non-finite gradient norm {float(grad_norm)} at step {step} "
                                     f"(loss {float(total_reported):.6g})")
    optimizer.step()
    with torch.no_grad():
        raw.logit_scale.clamp_(0, LOGIT_SCALE_MAX)
    return {"losses": dict(zip(names, reported)), "loss": total_reported,
            "grad_norm": None if grad_norm is None else grad_norm.detach()}


# --------------------------------------------------------------------------------------------------------------
# Training state (resume)
# --------------------------------------------------------------------------------------------------------------
def capture_rng_state(device: torch.device | str = "cpu") -> dict:
    """RNG states of torch (CPU, and CUDA for a CUDA ``device``), numpy's global generator and Python's ``random``,
    as tensors, ints, floats and lists only, so ``torch.load(weights_only=True)`` reads them back (resumable runs;
    no paper equation).

    Returns:
        ``{"torch": uint8 tensor, "numpy": {"name", "keys": int64 tensor [624], "pos", "has_gauss",
        "cached_gaussian"}, "python": {"version", "state": list[int], "gauss_next"}, ["cuda": uint8 tensor]}``.
    """
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    version, internal, gauss_next = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {"name": str(name), "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "python": {"version": int(version), "state": [int(v) for v in internal], "gauss_next": gauss_next},
    }
    device = torch.device(device)
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng_state(state: dict, device: torch.device | str = "cpu") -> None:
    """Set the global RNGs from :func:`capture_rng_state`'s dict.

    Raises:
        ValueError: a key is missing (the message names it).
    """
    for key in ("torch", "numpy", "python"):
        if key not in state:
            raise ValueError(f"RNG state lacks {key!r} (has {sorted(state)})")
    torch.set_rng_state(state["torch"])
    ns = state["numpy"]
    np.random.set_state((ns["name"], ns["keys"].numpy().astype(np.uint32), ns["pos"], ns["has_gauss"],
                         ns["cached_gaussian"]))
    ps = state["python"]
    random.setstate((ps["version"], tuple(ps["state"]), ps["gauss_next"]))
    device = torch.device(device)
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def save_training_state(path: str | os.PathLike, state: dict) -> Path:
    """Write a training-state dict atomically (temp file in the same folder, fsync, ``os.replace``).

    Keys written by :func:`train_contrastive`: ``format_version``, ``step`` (optimiser steps done), ``total_steps``,
    ``epoch`` and ``batch_in_epoch`` (position of the next batch), ``complete``, ``model`` (state dict),
    ``optimizer`` (state dict), ``rng`` (one :func:`capture_rng_state` dict per rank), ``params`` (the resolved params,
    plain types), ``fingerprint`` (str/int: initial weights, dataset, loss, code, world size), ``log_rows``
    (``[[step, {metric: float}], ...]``), ``last`` (latest logged metrics) and ``seen`` (training rows so far).

    Returns:
        ``path``.

    Raises:
        OSError: the folder cannot be created or the rename fails (the previous file is left intact).
    """
    path = Path(path)
    with atomic_write(path, "wb") as fh:
        torch.save(state, fh)
    return path


def read_training_state(path: str | os.PathLike) -> dict:
    """Read a training-state file with ``torch.load(weights_only=True, map_location="cpu")``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is not a readable weights-only torch file, not a dict, of another format version, or
            lacks a key (the message names the path).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"training state {str(path)!r} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ValueError(f"training state {str(path)!r} is not a readable weights-only torch file: {exc}; delete it "
                         "to start the run afresh") from exc
    if not isinstance(state, dict):
        raise ValueError(f"training state {str(path)!r} holds a {type(state).__name__}, not a dict")
    if state.get("format_version") != STATE_FORMAT_VERSION:
        raise ValueError(f"training state {str(path)!r} has format_version {state.get('format_version')!r}, "
                         f"expected {STATE_FORMAT_VERSION}")
    missing = [k for k in ("step", "epoch", "batch_in_epoch", "model", "optimizer", "rng", "params", "fingerprint",
                           "log_rows") if k not in state]
    if missing:
        raise ValueError(f"training state {str(path)!r} lacks the keys {missing}")
    return state


_CODE_FILES = ("training.py", "distributed.py", "losses.py", "models/build.py", "models/checkpoints.py",
               "models/encoding.py")


def _fingerprint(model: torch.nn.Module, dataset: Dataset, loss_fn: Callable, hard_negatives: bool,
                 world_size: int) -> dict:
    """What must not change for a state to be resumed, besides the params: the initial weights, the dataset
    (records, image sizes and modification times), the loss, this package's training code and the world size."""
    weights = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        t = tensor.detach().to("cpu").contiguous().reshape(-1)
        weights.update(f"{name}|{t.dtype}|{tuple(tensor.shape)}".encode())
        weights.update(t.view(torch.uint8).numpy())
    data = hashlib.sha256(f"{type(dataset).__name__}|{len(dataset)}".encode())
    records = getattr(dataset, "records", None)
    if records is not None:
        data.update(json.dumps(records, sort_keys=True, default=str).encode())
        for rec in records:
            for key in ("image", "negative_image"):
                p = rec.get(key) if isinstance(rec, dict) else None
                if isinstance(p, str) and os.path.exists(p):
                    st = os.stat(p)
                    data.update(f"{p}|{st.st_size}|{st.st_mtime_ns}".encode())
    code = hashlib.sha256()
    here = Path(__file__).resolve().parent
    for name in _CODE_FILES:
        code.update((here / name).read_bytes())
    loss_desc = getattr(loss_fn, "__name__", type(loss_fn).__name__)
    margin = getattr(loss_fn, "margin_cfg", None)
    return {"weights": weights.hexdigest(), "dataset": data.hexdigest(), "code": code.hexdigest(),
            "loss": f"{loss_desc}|{margin!r}", "hard_negatives": bool(hard_negatives), "world_size": int(world_size)}


def _why_not_resumable(state: dict, params_dump: dict, fingerprint: dict) -> str | None:
    if state["params"] != params_dump:
        old, new = state["params"], params_dump
        keys = sorted({*old, *new}, key=str) if isinstance(old, dict) else []
        diff = [k for k in keys if old.get(k) != new.get(k)]
        return f"its params differ (top-level keys {diff[:5]})"
    diff = sorted(k for k in {*fingerprint, *state["fingerprint"]} if fingerprint.get(k) != state["fingerprint"].get(k))
    if diff:
        return f"its inputs differ ({', '.join(diff)})"
    return None


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
            on the global RNG state except through its transforms (data order comes from (seed, epoch)).
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

    Returns:
        ``{"steps", "samples_per_s" (rows of this process's run segment a second, all ranks), "wall_s" (this
        segment), "resumed_from_step" (0 for a fresh run), the last logged metrics ...}`` (finite floats).

    Raises:
        RuntimeError: another run holds the lock on ``state_path``'s folder (raised before any training; names
            ``<folder>/.lock``).
        NonFiniteLossError: a loss or gradient norm is NaN/Inf (names the step and the last good checkpoint).
        ValueError: the dataset is smaller than one batch per rank; ``batch_size`` not divisible by the world size;
            ``checkpoint_every`` < 1; unknown ``distributed_loss``; an unreadable state file (names the path).
    """
    from dvclive import Live

    local_rank = int(os.environ.get("LOCAL_RANK", "0") or 0)
    device = _resolve_device(device, local_rank)
    state_path = Path(state_path) if state_path else Path(checkpoint_path).parent / "state.pt"
    ctx, created_group = init_distributed(device.type)
    try:
        with _exclusive_run(state_path.parent) if ctx.is_main else contextlib.nullcontext():
            return _train(bundle, dataset, loss_fn, loop, seed=seed, live_dir=Path(live_dir),
                          checkpoint_path=Path(checkpoint_path), params_dump=params_dump,
                          save_checkpoint=save_checkpoint, hard_negatives=hard_negatives, device=device, ctx=ctx,
                          state_path=state_path, keep_state=keep_state, on_step_end=on_step_end, live_cls=Live)
    finally:
        if created_group:
            torch.distributed.destroy_process_group()


@contextlib.contextmanager
def _exclusive_run(folder: Path) -> Iterator[None]:
    """Hold an exclusive, non-blocking ``flock`` on ``folder/.lock`` (created, with ``folder``, if absent) for the
    duration of the block; the kernel releases it when the file is closed or the process dies.

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
           hard_negatives, device, ctx, state_path, keep_state, on_step_end, live_cls) -> dict:
    checkpoint_every = getattr(loop, "checkpoint_every", None)
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
    # The loop's precision decides autocast; ModelBundle.autocast also picks the fast CPU attention kernel for bf16.
    bundle.spec = bundle.spec.model_copy(update={"precision": loop.precision})
    sampler = anchor_sampler(dataset, ctx, seed)
    steps_per_epoch = len(sampler) // n
    if steps_per_epoch == 0:
        raise ValueError(f"dataset has {len(dataset)} items, fewer than one batch (batch_size={n_global}"
                         + (f", {n} a rank on {ctx.world_size} processes" if ctx.enabled else "") + ")")
    total = steps_per_epoch * loop.epochs
    if loop.max_steps:
        total = min(total, loop.max_steps)
    warmup = int(round(loop.warmup_frac * total))
    opt = torch.optim.AdamW(_param_groups(raw, loop.weight_decay), lr=loop.lr, betas=(0.9, 0.98), eps=1e-6)
    fingerprint = _fingerprint(raw, dataset, loss_fn, hard_negatives, ctx.world_size)

    step = epoch = batch_pos = seen = 0
    log_rows: list = []
    last: dict[str, float] = {}
    resumed_from = 0
    rng_to_restore = None
    if state_path.exists():
        state = read_training_state(state_path)
        why = _why_not_resumable(state, params_dump, fingerprint)
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
    order_epoch, order = None, []
    try:
        while step < total:
            if order_epoch != epoch:
                sampler.set_epoch(epoch)
                if hasattr(dataset, "set_epoch"):
                    dataset.set_epoch(epoch)
                order, order_epoch = list(sampler), epoch
            batch = collate([dataset[i] for i in order[batch_pos * n:(batch_pos + 1) * n]])
            log_now = (step + 1) % loop.log_every == 0 or step + 1 == total
            lr = cosine_lr(step, total, warmup, loop.lr)
            try:
                out = train_step(model, batch, loss_fn, opt, lr=lr, step=step, hard_negatives=hard_negatives,
                                 grad_clip=loop.grad_clip, autocast=bundle.autocast, ctx=ctx,
                                 distributed_loss=mode, compute_stats=log_now)
            except NonFiniteLossError as err:
                where = (f"the last good checkpoint is {checkpoint_path} with state {last_good[0]} at step "
                         f"{last_good[1]}") if last_good else "no checkpoint was written before it"
                raise NonFiniteLossError(f"{err} of {live_dir}; {where}") from None
            step += 1
            batch_pos += 1
            if batch_pos == steps_per_epoch:
                epoch, batch_pos = epoch + 1, 0
            seen += batch["texts"].shape[0] * ctx.world_size  # training rows: 2N with hard negatives, else N
            if bar is not None:
                bar.update(1)
            if log_now:
                last = {k: float(v) for k, v in out["losses"].items()}
                last["loss"] = float(out["loss"])
                last["logit_scale_exp"] = float(raw.logit_scale.detach().exp())
                last["lr"] = lr
                if out["grad_norm"] is not None:
                    last["grad_norm"] = float(out["grad_norm"])
                stats = getattr(loss_fn, "stats", None)
                if isinstance(stats, dict):
                    last.update({k: float(v) for k, v in stats.items()})
                log_rows.append([step, dict(last)])
                if live is not None:
                    _rewrite_tsv_history(live, log_rows[-1:])
                    bar.set_postfix(loss=f"{last['loss']:.3f}")
            if checkpoint_every and step % checkpoint_every == 0 and step < total:
                write_checkpoint(complete=False)
                last_good = (state_path, step)
            if on_step_end is not None:
                on_step_end(step)
    finally:  # logs and the progress bar are closed even when a step fails
        if bar is not None:
            bar.close()
        if live is not None:
            live.end()
    elapsed = time.time() - t0
    write_checkpoint(complete=True)
    if ctx.enabled:
        torch.distributed.barrier()
    return {"steps": step, "samples_per_s": (seen - seen_start) / max(elapsed, 1e-9), "wall_s": elapsed,
            "resumed_from_step": resumed_from, **last}
