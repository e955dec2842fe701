"""The training inputs (paper Sec. 2.2-2.3): corpus image-caption pairs (:class:`AnchorDataset`, the base model and
the ``clip`` baseline) and ConcreteBatch quadruples (:class:`ConcreteBatchDataset`, the hard-negative fine-tunes),
their 2N collation, and the input pipeline: a torch ``DataLoader`` over the batches of a seeded, resumable order
(:class:`ResumableBatches`, :func:`make_loader`), decoding off the main process when it has workers.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler, get_worker_info

from concrete_jungle.concreteness import is_rating
from concrete_jungle.io import load_rgb

__all__ = ["AnchorDataset", "ConcreteBatchDataset", "collate_pairs", "collate_hard_negatives", "ResumableBatches",
           "make_loader"]


def _check_files(paths: Sequence[str], what: str) -> None:
    """Raise ``FileNotFoundError`` naming up to three missing image files of ``what`` (checked before training)."""
    missing = sorted({p for p in paths if not Path(p).is_file()})
    if missing:
        raise FileNotFoundError(f"{what}: {len(missing)} image file(s) missing, e.g. {missing[:3]}")


class _CachedInputs:
    """Memoises preprocessed images and token rows, so every epoch after the first skips decoding, resizing and
    BPE. The cache is one contiguous tensor per kind, allocated on first use (many small long-lived tensors
    interleaved with per-step activations fragmented the heap: +0.7 GiB an epoch on the world base model). Only
    for deterministic preprocessing (``augment: false``): with random augmentation set ``cache=False``.

    In ``DataLoader`` worker processes (``train_contrastive(num_workers > 0)``) each worker starts its own, empty
    cache (:meth:`_private_cache`): nothing is shared between processes, so there is no race, and items equal the
    uncached ones because the preprocessing is deterministic."""

    def _private_cache(self) -> None:
        """Drop the cache inherited from the parent process (a worker's cache is its own, filled lazily)."""
        self._images = self._tokens = None
        self._image_done = torch.zeros(len(self._image_row), dtype=torch.bool)
        self._text_done = torch.zeros(len(self._text_row), dtype=torch.bool)

    def _init_cache(self, preprocess: Callable, tokenizer: Callable, cache: bool, image_paths: Sequence[str],
                    texts: Sequence[str]) -> None:
        self.preprocess, self.tokenizer, self.cache = preprocess, tokenizer, cache
        self._image_row = {p: i for i, p in enumerate(dict.fromkeys(image_paths))}
        self._text_row = {t: i for i, t in enumerate(dict.fromkeys(texts))}
        self._images: torch.Tensor | None = None
        self._tokens: torch.Tensor | None = None
        self._image_done = torch.zeros(len(self._image_row), dtype=torch.bool)
        self._text_done = torch.zeros(len(self._text_row), dtype=torch.bool)

    def image_paths(self) -> list[str]:
        """The dataset's distinct image files, in first-use order."""
        return list(self._image_row)

    def prefill_images(self, items: Mapping[str, torch.Tensor]) -> None:
        """Put precomputed items (``{path: tensor}``, each what ``preprocess(load_rgb(path))`` returns, e.g. a
        locked trunk's map: :func:`~concrete_jungle.models.trunk_cache.fill_trunk_maps`) into the decoded-input
        cache; paths the dataset does not use are ignored, paths not given are decoded on first use as before.

        Raises:
            ValueError: the dataset has no cache (``cache=False``), or an item's shape or dtype differs from the
                others'.
        """
        if not self.cache:
            raise ValueError("prefill_images: the dataset was built with cache=False")
        for path, x in items.items():
            row = self._image_row.get(path)
            if row is None:
                continue
            if self._images is None:
                self._images = torch.empty((len(self._image_row), *x.shape), dtype=x.dtype)
            elif x.shape != self._images.shape[1:] or x.dtype != self._images.dtype:
                raise ValueError(f"prefill_images: {path}: item {tuple(x.shape)} {x.dtype} differs from the cached "
                                 f"{tuple(self._images.shape[1:])} {self._images.dtype}")
            self._images[row] = x
            self._image_done[row] = True

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
            if not is_rating(c):
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


# --------------------------------------------------------------------------------------------------------------
# Input pipeline
# --------------------------------------------------------------------------------------------------------------
def seed_item(seed: int, epoch: int, index: int) -> None:
    """Seed torch, numpy and ``random`` of this (worker) process from (seed, epoch, item index) only."""
    words = np.random.SeedSequence([int(seed), int(epoch), int(index)]).generate_state(2, dtype=np.uint32)
    s64 = (int(words[0]) << 32) | int(words[1])
    torch.manual_seed(s64)
    np.random.seed(int(words[0]))
    random.seed(s64)


class _EpochItems(Dataset):
    """``dataset`` addressed by ``(epoch, index)`` keys: sets the dataset's epoch (``set_epoch``, e.g. the
    AnchorDataset caption draw) when it changes, then returns ``dataset[index]``. In a ``DataLoader`` worker it
    first seeds the worker's RNGs from (seed, epoch, index) (:func:`seed_item`); in the main process it draws from
    the global RNGs as they are."""

    def __init__(self, dataset: Dataset, seed: int) -> None:
        self.dataset, self.seed, self._epoch = dataset, seed, None

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, int]):
        epoch, index = key
        if epoch != self._epoch:
            if hasattr(self.dataset, "set_epoch"):
                self.dataset.set_epoch(epoch)
            self._epoch = epoch
        if get_worker_info() is not None:
            seed_item(self.seed, epoch, index)
        return self.dataset[index]


def _worker_init(worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: give the worker its own, empty decoded-input cache."""
    items = get_worker_info().dataset
    inner = getattr(items, "dataset", None)
    if hasattr(inner, "_private_cache"):
        inner._private_cache()


class ResumableBatches(Sampler):
    """Batch sampler of the training loop: the batches of ``sampler``'s epochs from a position on.

    Epoch e's order is ``list(sampler)`` after ``sampler.set_epoch(e)``
    (:func:`concrete_jungle.distributed.anchor_sampler`: depends on (seed, e) only); batch b of the epoch is its
    positions [b*n, (b+1)*n). Iteration starts at (``epoch``, ``batch_pos``) and yields ``steps`` batches, moving
    to the next epoch after ``steps_per_epoch`` batches; each batch is a list of ``(epoch, dataset index)`` keys
    (for :class:`_EpochItems`). Runs in the main process (the DataLoader draws indices there).

    Raises:
        ValueError: ``n`` < 1, ``steps_per_epoch`` < 1, a negative ``steps``, or ``batch_pos`` outside
            [0, steps_per_epoch).
    """

    def __init__(self, sampler, n: int, steps_per_epoch: int, epoch: int, batch_pos: int, steps: int) -> None:
        if n < 1 or steps_per_epoch < 1 or steps < 0 or not 0 <= batch_pos < steps_per_epoch:
            raise ValueError(f"ResumableBatches: bad position or sizes (n={n}, steps_per_epoch={steps_per_epoch}, "
                             f"batch_pos={batch_pos}, steps={steps})")
        self.sampler, self.n, self.steps_per_epoch = sampler, n, steps_per_epoch
        self.epoch, self.batch_pos, self.steps = epoch, batch_pos, steps

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        epoch, pos, n = self.epoch, self.batch_pos, self.n
        order_epoch, order = None, []
        for _ in range(self.steps):
            if order_epoch != epoch:
                self.sampler.set_epoch(epoch)
                order, order_epoch = list(self.sampler), epoch
            yield [(epoch, int(i)) for i in order[pos * n:(pos + 1) * n]]
            pos += 1
            if pos == self.steps_per_epoch:
                epoch, pos = epoch + 1, 0


def make_loader(dataset: Dataset, batches: ResumableBatches, collate: Callable, *, seed: int, num_workers: int = 0,
                pin_memory: bool = False, prefetch_factor: int = 2) -> DataLoader:
    """The training ``DataLoader``: ``batches`` of ``dataset`` collated by ``collate`` (module docstring).

    Args:
        dataset: an :class:`AnchorDataset` / :class:`ConcreteBatchDataset` (or any map-style dataset).
        batches: the :class:`ResumableBatches` to draw.
        collate: :func:`collate_pairs` or :func:`collate_hard_negatives`.
        seed: the run's seed: per-item RNG seeds of the workers; also seeds the loader's own generator, so that
            creating the loader never draws from the global RNG.
        num_workers: worker processes (0: in the main process, on demand).
        pin_memory: copy batches into pinned memory (use with CUDA, for non-blocking host-to-device copies).
        prefetch_factor: batches each worker prepares ahead (workers only).

    Raises:
        ValueError: a negative ``num_workers``.
    """
    if num_workers < 0:
        raise ValueError(f"num_workers must be >= 0, got {num_workers}")
    extra = {"prefetch_factor": prefetch_factor, "worker_init_fn": _worker_init} if num_workers else {}
    return DataLoader(_EpochItems(dataset, seed), batch_sampler=batches, collate_fn=collate,
                      num_workers=num_workers, pin_memory=pin_memory,
                      generator=torch.Generator().manual_seed(int(seed)), **extra)


class _WorkerTagged:
    """``collate`` that also records which DataLoader worker built the batch (``batch["worker"]``, 0 in the main
    process): picklable, it runs in the worker."""

    def __init__(self, collate: Callable) -> None:
        self.collate = collate

    def __call__(self, items):
        info = get_worker_info()
        return {**self.collate(items), "worker": 0 if info is None else info.id}


def stream_batches(stream, n: int, steps_per_epoch: int, epoch: int, batch_pos: int, steps: int,
                   collate: Callable, *, seed: int, num_workers: int = 0, pin_memory: bool = False,
                   prefetch_factor: int = 2) -> Iterator[dict]:
    """The training batches of a :class:`~concrete_jungle.shards.ShardStream` (WebDataset shards, issue 21), the
    streaming counterpart of :class:`ResumableBatches` + :func:`make_loader`: ``steps`` batches of ``n`` samples
    from batch ``batch_pos`` of ``epoch`` on, ``steps_per_epoch`` batches an epoch
    (:func:`~concrete_jungle.shards.stream_steps`: the same on every rank).

    Each epoch a ``DataLoader`` (``batch_size=n``, ``drop_last``) reads the stream with ``num_workers`` workers, each
    worker its own contiguous range of the epoch's samples; batch b of the epoch is the next batch of worker
    :func:`~concrete_jungle.shards.batch_order` ``[b]`` (batches that arrive early wait in a queue), so the sequence
    does not depend on worker timing. Resuming at (epoch, batch_pos), every worker first skips the samples it had
    yielded in the epoch's first ``batch_pos`` batches (``stream.start``): the rest of the epoch is the same batches
    in the same order, each sample once.

    Raises:
        ValueError: ``n`` < 1, ``steps_per_epoch`` < 1, a negative ``steps`` or ``num_workers``, or ``batch_pos``
            outside [0, steps_per_epoch).
    """
    import collections

    from concrete_jungle.shards import batch_order

    if n < 1 or steps_per_epoch < 1 or steps < 0 or num_workers < 0 or not 0 <= batch_pos < steps_per_epoch:
        raise ValueError(f"stream_batches: bad position or sizes (n={n}, steps_per_epoch={steps_per_epoch}, "
                         f"batch_pos={batch_pos}, steps={steps}, num_workers={num_workers})")
    workers = max(1, num_workers)
    extra = {"prefetch_factor": prefetch_factor} if num_workers else {}
    order = batch_order(len(stream), n, stream.rank, stream.world_size, num_workers)[:steps_per_epoch]
    while steps > 0:
        stream.set_epoch(epoch)
        stream.start = [n * order[:batch_pos].count(w) for w in range(workers)]
        loader = DataLoader(stream, batch_size=n, drop_last=True, collate_fn=_WorkerTagged(collate),
                            num_workers=num_workers, pin_memory=pin_memory,
                            generator=torch.Generator().manual_seed(int(seed) * 1_000_003 + epoch), **extra)
        batches, waiting = iter(loader), collections.defaultdict(collections.deque)
        try:
            for w in order[batch_pos:batch_pos + steps]:
                while not waiting[w]:
                    batch = next(batches)
                    waiting[batch.pop("worker")].append(batch)
                yield waiting[w].popleft()
                steps -= 1
        finally:  # the epoch's workers end here, also when the consumer stops early
            shutdown = getattr(batches, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
        epoch, batch_pos = epoch + 1, 0
