"""Contrastive training of open_clip models: the base model (anchors only) and fine-tuning on ConcreteBatch.

One loop serves both (paper Sec. 2.3 / 3):
- ``hard_negatives=False``: N image-caption pairs a batch, open_clip ``ClipLoss`` (N x N logits).
- ``hard_negatives=True``: N anchors plus their N hard negatives, 2N x 2N logits, InfoNCE or Cement loss
  (``concrete_jungle.losses``).

Per logged step dvclive receives every loss term, the logit scale (``train/logit_scale``: exponentiated, i.e. the
multiplier of cosine similarities), the learning rate, and for hard-negative losses the gradient ratio
p_{i,i'} / (1 - p_{i,i}) (``train/gradient_ratio``), the easy-negative share, the mean margin and the mean logit gap.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from concrete_jungle.losses import HardNegativeContrastiveLoss

__all__ = [
    "AnchorDataset",
    "ConcreteBatchDataset",
    "collate_pairs",
    "collate_hard_negatives",
    "cosine_lr",
    "train_contrastive",
    "NonFiniteLossError",
]

LOGIT_SCALE_MAX = math.log(100.0)


class NonFiniteLossError(RuntimeError):
    """Raised when a training step produces a NaN or Inf loss; the last good checkpoint is left in place."""


def _load_rgb(path: str) -> Image.Image:
    try:
        with Image.open(path) as im:
            return im.convert("RGB")
    except (OSError, ValueError) as err:
        raise OSError(f"cannot read image {path}: {err}") from err


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
            return self.preprocess(_load_rgb(path))
        row = self._image_row[path]
        if not self._image_done[row]:
            x = self.preprocess(_load_rgb(path))
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
    to the anchor's (its hard-negative entries are then masked, never pushed away).
    """

    def __init__(self, records: Sequence[dict], preprocess: Callable, tokenizer: Callable, cache: bool = True) -> None:
        if not records:
            raise ValueError("ConcreteBatchDataset: the ConcreteBatch has no records")
        for idx, rec in enumerate(records):
            for key in ("image", "caption", "negative_caption", "negative_image", "c_i"):
                if rec.get(key) is None:
                    hint = (" (text-only hard negatives, image_negatives: none: the 2N x 2N losses need a negative"
                            " image; use image_negatives scene or retrieval)") if key == "negative_image" else ""
                    raise ValueError(f"ConcreteBatch record {idx} ({rec.get('anchor_id')}) lacks {key!r}{hint}")
        _check_files([p for r in records for p in (r["image"], r["negative_image"])], "ConcreteBatch")
        self.records = list(records)
        self._init_cache(preprocess, tokenizer, cache,
                         [p for r in self.records for p in (r["image"], r["negative_image"])],
                         [t for r in self.records for t in (r["caption"], r["negative_caption"])])

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int):
        r = self.records[i]
        tok, neg_tok = self._text(r["caption"]), self._text(r["negative_caption"])
        valid = not torch.equal(tok, neg_tok)
        return self._image(r["image"]), tok, self._image(r["negative_image"]), neg_tok, float(r["c_i"]), valid


def collate_pairs(batch):
    """Stack ``(image, tokens)`` items into ``{"images": [N,3,H,W], "texts": [N,L]}``."""
    images, texts = zip(*batch)
    return {"images": torch.stack(images), "texts": torch.stack(texts)}


def collate_hard_negatives(batch):
    """Stack ConcreteBatch items into the 2N layout: anchors first, then their hard negatives.

    Returns ``{"images": [2N,3,H,W], "texts": [2N,L], "concreteness": [N], "valid": [N] bool}``.
    """
    img, tok, nimg, ntok, c, valid = zip(*batch)
    return {
        "images": torch.stack(list(img) + list(nimg)),
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


def train_contrastive(
    bundle: Any,
    dataset: Dataset,
    loss_fn: torch.nn.Module,
    loop: Any,
    *,
    seed: int,
    live_dir: str | Path,
    checkpoint_path: str | Path,
    params_dump: dict,
    save_checkpoint: Callable[..., None],
    hard_negatives: bool,
    device: str = "cpu",
) -> dict:
    """Train ``bundle.model`` in place and save a checkpoint; returns a summary dict of finite floats.

    Args:
        bundle: a ``concrete_jungle.models.ModelBundle`` (model + preprocessing + tokenizer).
        dataset: :class:`AnchorDataset` (``hard_negatives=False``) or :class:`ConcreteBatchDataset`.
        loss_fn: ``open_clip.loss.ClipLoss`` for pairs, a :class:`HardNegativeContrastiveLoss` for ConcreteBatch.
        loop: ``LoopParams`` (epochs, max_steps, batch_size = N anchors, lr, weight_decay, warmup_frac, grad_clip,
            precision, log_every, num_threads).
        seed: seeds shuffling and initial RNG state.
        live_dir: dvclive folder (metrics.json + plots/metrics/train/*.tsv).
        checkpoint_path: where the final checkpoint is written (atomically).
        params_dump: the resolved params saved inside the checkpoint.
        save_checkpoint: ``models.save_checkpoint``.
        hard_negatives: selects the 2N layout.

    Raises:
        NonFiniteLossError: when a loss is NaN/Inf (names the step); nothing is saved for that run.
        ValueError: when the dataset is smaller than one batch.
    """
    from dvclive import Live

    if loop.num_threads:
        torch.set_num_threads(loop.num_threads)
    torch.manual_seed(seed)
    np.random.seed(seed % (2**32))
    model = bundle.model.to(device)
    model.train()
    n = loop.batch_size
    if len(dataset) < n:
        raise ValueError(f"dataset has {len(dataset)} items, fewer than one batch (batch_size={n})")
    gen = torch.Generator().manual_seed(seed)
    collate = collate_hard_negatives if hard_negatives else collate_pairs
    loader = DataLoader(dataset, batch_size=n, shuffle=True, drop_last=True, generator=gen, collate_fn=collate,
                        num_workers=0)
    steps_per_epoch = len(loader)
    total = steps_per_epoch * loop.epochs
    if loop.max_steps:
        total = min(total, loop.max_steps)
    warmup = int(round(loop.warmup_frac * total))
    opt = torch.optim.AdamW(_param_groups(model, loop.weight_decay), lr=loop.lr, betas=(0.9, 0.98), eps=1e-6)
    # The loop's precision decides autocast; ModelBundle.autocast also picks the fast CPU attention kernel for bf16.
    bundle.spec = bundle.spec.model_copy(update={"precision": loop.precision})
    live = Live(dir=str(live_dir), save_dvc_exp=False, dvcyaml=None, report=None)
    step, t0, seen = 0, time.time(), 0
    last: dict[str, float] = {}
    bar = tqdm(total=total, desc=f"train {Path(str(live_dir)).name}", unit="step")
    epoch = 0
    try:
        while step < total:
            if hasattr(dataset, "set_epoch"):
                dataset.set_epoch(epoch)
            for batch in loader:
                if step >= total:
                    break
                lr = cosine_lr(step, total, warmup, loop.lr)
                for g in opt.param_groups:
                    g["lr"] = lr
                images, texts = batch["images"].to(device), batch["texts"].to(device)
                with bundle.autocast():
                    out = model(images, texts)
                    img_f, txt_f, scale = out["image_features"], out["text_features"], out["logit_scale"]
                img_f, txt_f = img_f.float(), txt_f.float()
                if hard_negatives:
                    losses = loss_fn(img_f, txt_f, scale, batch["concreteness"].to(device), batch["valid"].to(device))
                else:
                    losses = loss_fn(img_f, txt_f, scale, output_dict=True)
                total_loss = sum(losses.values())
                if not torch.isfinite(total_loss):
                    raise NonFiniteLossError(
                        f"non-finite loss {total_loss.item()} at step {step} of {live_dir}; no checkpoint written")
                opt.zero_grad(set_to_none=True)
                total_loss.backward()
                if loop.grad_clip:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), loop.grad_clip)
                opt.step()
                with torch.no_grad():
                    model.logit_scale.clamp_(0, LOGIT_SCALE_MAX)
                seen += images.shape[0]
                step += 1
                bar.update(1)
                if step % loop.log_every == 0 or step == total:
                    last = {k: float(v.detach()) for k, v in losses.items()}
                    last["loss"] = float(total_loss.detach())
                    last["logit_scale"] = float(model.logit_scale.detach().exp())
                    last["lr"] = lr
                    if isinstance(loss_fn, HardNegativeContrastiveLoss):
                        last.update(loss_fn.stats)
                    live.step = step
                    for k, v in last.items():
                        live.log_metric(f"train/{k}", v)
                    bar.set_postfix(loss=f"{last['loss']:.3f}")
            epoch += 1
    finally:  # logs and the progress bar are closed even when a step fails
        bar.close()
        live.end()
    elapsed = time.time() - t0
    summary = {"steps": step, "samples_per_s": seen / max(elapsed, 1e-9), "wall_s": elapsed, **last}
    # Wall-clock figures stay out of the checkpoint so that a re-run with the same seed writes identical bytes.
    save_checkpoint(checkpoint_path, bundle, params=params_dump, step=step,
                    extra={"summary": {k: v for k, v in summary.items() if k not in ("wall_s", "samples_per_s")}})
    return summary
