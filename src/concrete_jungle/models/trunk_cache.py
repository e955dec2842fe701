"""Training over a locked image trunk's cached feature maps (LiT-style: the trunk is a fixed function of the image).

When the image tower is an open_clip ``TimmModel`` (``visual.trunk`` then ``visual.head``) whose trunk is wholly
locked (no trainable parameter, BatchNorm statistics frozen: ``lock_image_tower(unlocked_groups=0,
freeze_bn_stats=True)``) and preprocessing is deterministic (``augment: false``), the trunk's output for an image
never changes during training. A fine-tune then needs it once per image: :func:`trunk_map_transform` turns a
PIL image into its trunk map ``[C, h, w]`` (computed in fp32, eval mode, no grad), which the datasets' decoded-input
cache keeps, and :func:`head_on_trunk_maps` lets the tower take such maps in place of pixels for the duration of a
training run. The model, its state dict and its checkpoints are unchanged; only the cost of a step falls (the
world_effnet_attn fine-tune: about 0.4 s a step of 128 anchors + 128 hard negatives, against 1.3 s with the trunk
in the loop, 2 CPU cores; docs/instrument.md H15).

What differs from running the trunk in the loop: under bf16 autocast the in-loop trunk would compute in bf16, the
cached maps are fp32 (the head still runs under the loop's autocast).

:func:`fill_trunk_maps` fills a dataset's cache before training instead of one image at a time inside the loader
(about 13 ms an image on 2 cores, docs/instrument.md H18), in batches, and shares the maps between the members of a
training family (one process, one base trunk, the same corpus anchors), so each image's map is computed once per
process. Batched and one-at-a-time maps agree to float rounding (not bit for bit).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator

import torch

__all__ = ["trunk_cache_blocker", "trunk_map_transform", "fill_trunk_maps", "head_on_trunk_maps",
           "training_preprocess"]

logger = logging.getLogger(__name__)
_WARNED: set[str] = set()  # the reasons training_preprocess has warned of in this process


def trunk_cache_blocker(model: torch.nn.Module, augment: bool) -> str | None:
    """Why the image trunk of ``model`` may NOT be cached, or None when it may.

    Args:
        model: open_clip ``CLIP`` / ``CustomTextCLIP``.
        augment: whether training images are randomly augmented (``LoopParams.augment``).

    Returns:
        None when ``model.visual`` has a ``trunk`` and a ``head``, no trunk parameter requires a gradient, no trunk
        module is a (trainable-statistics) BatchNorm, no trunk module is a dropout or drop-path in effect, and
        ``augment`` is False; otherwise a one-line reason.
    """
    visual = getattr(model, "visual", None)
    trunk, head = getattr(visual, "trunk", None), getattr(visual, "head", None)
    if trunk is None or head is None:
        return "the image tower has no separate trunk and head (not an open_clip TimmModel)"
    if augment:
        return "training images are augmented (augment: true), so the trunk's input changes every epoch"
    if any(p.requires_grad for p in trunk.parameters()):
        return "part of the image trunk is trainable (lock_image false or lock_image_unlocked_groups > 0)"
    for name, module in trunk.named_modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            return f"trunk BatchNorm {name!r} updates its running statistics (lock_image_bn_stats false)"
        if isinstance(module, torch.nn.Dropout) and module.p > 0:
            return f"trunk module {name!r} is a dropout with p = {module.p}"
        if type(module).__name__ == "DropPath" and getattr(module, "drop_prob", 0.0) > 0:
            return f"trunk module {name!r} drops paths with p = {module.drop_prob}"
    return None


def trunk_map_transform(model: torch.nn.Module, preprocess: Callable) -> Callable:
    """PIL image -> its trunk map: ``model.visual.trunk(preprocess(image)[None])[0]``, float32 ``[C, h, w]`` (``[C]``
    for a trunk that pools), computed in eval mode without gradient (for a trunk that :func:`trunk_cache_blocker`
    clears)."""
    trunk = model.visual.trunk

    def transform(image) -> torch.Tensor:
        x = preprocess(image)[None]
        was_training = trunk.training
        trunk.eval()
        try:
            with torch.no_grad():
                return trunk(x.to(next(trunk.parameters()).device, torch.float32))[0].float().cpu()
        finally:
            trunk.train(was_training)

    return transform


def fill_trunk_maps(dataset, model: torch.nn.Module, preprocess: Callable, maps: dict | None = None,
                    batch_size: int = 64) -> dict[str, torch.Tensor]:
    """Put the locked trunk's map of every image of ``dataset`` into its decoded-input cache before training.

    Args:
        dataset: a training dataset with a decoded-input cache (``AnchorDataset`` / ``ConcreteBatchDataset`` built
            with ``cache=True`` and the transform of :func:`trunk_map_transform`).
        model: the model whose ``visual.trunk`` :func:`trunk_cache_blocker` clears (the same locked weights that
            computed any map already in ``maps``).
        preprocess: PIL image -> ``[3, H, W]`` pixels (``preprocess_val``: deterministic).
        maps: ``{image path: [C, h, w] float32 map}`` computed earlier in this process (another member of the
            family); None starts an empty one. Maps of paths not in it are computed, ``batch_size`` images at a time
            (fp32, eval mode, no gradient), and added to it.
        batch_size: images per trunk forward, >= 1.

    Returns:
        ``maps``, now holding every image path of ``dataset``.

    Raises:
        ValueError: ``batch_size < 1``, or a dataset without its decoded-input cache (``cache=False``).
        OSError: naming an unreadable image file.
    """
    from tqdm.auto import tqdm

    from concrete_jungle.io import load_rgb

    if batch_size < 1:
        raise ValueError(f"fill_trunk_maps: batch_size must be >= 1, got {batch_size}")
    if not dataset.cache:
        raise ValueError("fill_trunk_maps: the dataset was built with cache=False; its maps would not be kept")
    maps = {} if maps is None else maps
    paths = dataset.image_paths()
    todo = [p for p in paths if p not in maps]
    trunk = model.visual.trunk
    device = next(trunk.parameters()).device
    was_training = trunk.training
    trunk.eval()
    try:
        with torch.no_grad():
            for start in tqdm(range(0, len(todo), batch_size), desc="trunk maps", unit="batch",
                              disable=not todo):
                chunk = todo[start:start + batch_size]
                x = torch.stack([preprocess(load_rgb(p)) for p in chunk]).to(device, torch.float32)
                for p, m in zip(chunk, trunk(x).float().cpu()):
                    maps[p] = m
    finally:
        trunk.train(was_training)
    dataset.prefill_images({p: maps[p] for p in paths})
    return maps


@contextlib.contextmanager
def head_on_trunk_maps(model: torch.nn.Module) -> Iterator[None]:
    """Within the block, ``model.visual`` takes trunk maps — ``[B, C, h, w]`` (C != 3), or ``[B, C]`` from a trunk
    that pools (the real profile's LiT EfficientNet-Lite0, ``num_classes=0``) — and applies only its head; pixel
    batches ``[B, 3, H, W]`` still go through trunk and head (so held-out curves measured during training encode
    images as before). The instance's ``forward`` is restored on exit; parameters and state dict are
    untouched.

    Raises:
        ValueError: ``model.visual`` has no trunk / head, or its trunk takes 3-channel maps (ambiguous).
    """
    visual = model.visual
    if getattr(visual, "trunk", None) is None or getattr(visual, "head", None) is None:
        raise ValueError("head_on_trunk_maps needs an image tower with a trunk and a head (open_clip TimmModel)")
    channels = getattr(visual.trunk, "num_features", None)
    if channels == 3:
        raise ValueError("the trunk's maps have 3 channels: they cannot be told from pixels")
    full = visual.forward

    def forward(x: torch.Tensor) -> torch.Tensor:
        if x.ndim == 4 and x.shape[1] == 3:  # pixels
            return full(x)
        return visual.head(x)

    visual.forward = forward
    try:
        yield
    finally:
        del visual.forward


def training_preprocess(bundle, augment: bool, cache: bool, uncached: str | None = None) -> tuple[Callable, bool]:
    """The per-image transform of a training dataset, and whether it yields trunk maps (then train inside
    :func:`head_on_trunk_maps`): trunk maps when the datasets cache decoded inputs (``cache``) and
    :func:`trunk_cache_blocker` clears the model, else ``bundle.preprocess_train`` / ``preprocess_val``.

    ``uncached``: why the caller's datasets cache nothing, in its params' words (``"train.num_workers 2: DataLoader
    workers hold no shared cache; train.num_workers 0 caches the maps"``). A trunk that could be cached but is not
    then runs on every image of every step (the real profile's steps took 2.2x longer so, docs/instrument.md H34):
    a logged warning gives the reason, once a process. None: no warning."""
    preprocess = bundle.preprocess_train if augment else bundle.preprocess_val
    if trunk_cache_blocker(bundle.model, augment) is not None:
        return preprocess, False
    if not cache:
        if uncached is not None and uncached not in _WARNED:
            _WARNED.add(uncached)
            logger.warning("the image trunk is locked, but its maps are not cached (%s): the trunk runs on every "
                           "image of every step instead of once an image", uncached)
        return preprocess, False
    return trunk_map_transform(bundle.model, preprocess), True
