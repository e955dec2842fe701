"""Embeddings in cosine space: :func:`encode_images`, :func:`encode_texts` and the chunked
:func:`encode_image_files`.

Embeddings are L2-normalised float32 CPU tensors ``[M, D]`` (D = the bundle's ``embed_dim``); multiply their dot
products by ``model.logit_scale.exp()`` to get logits. Only a built :class:`~concrete_jungle.models.build.ModelBundle`
is needed: this module imports neither open_clip nor the builder.

A text tower that masks its padding (a Hugging Face tower, the real profile's MiniLM-L6) is fed each batch's tokens
cut after the batch's longest caption (:func:`cut_padding`): the same embeddings, 3.3x faster to encode 64 COCO
captions and 3.0x faster to train on (benchmarks/results/text_padding.json; docs/instrument.md H29). open_clip's own
causal tower is fed its tokens as built.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Callable, Sequence

import torch
from PIL import Image

from concrete_jungle.io import load_rgb

if TYPE_CHECKING:
    from concrete_jungle.models.build import ModelBundle

__all__ = ["cut_padding", "encode_image_files", "encode_images", "encode_texts", "padding_width", "text_pad_id"]


def text_pad_id(model: torch.nn.Module) -> int | None:
    """The pad token id of ``model``'s text tower when that tower masks padding, else None.

    A Hugging Face text tower (open_clip ``HFTextEncoder``, ``model.text`` with a ``config``) attends only to tokens
    ``!= config.pad_token_id`` and pools over them, and its positions count from the first token, so columns after
    every caption's last real token change nothing it returns. open_clip's own causal tower (``CLIP``, or a
    ``TextTransformer`` without ``config``) gives None: it is fed its tokens as built. ``model`` may be wrapped in
    ``DistributedDataParallel`` (``.module``). Never raises.
    """
    model = getattr(model, "module", model)
    pad = getattr(getattr(getattr(model, "text", None), "config", None), "pad_token_id", None)
    return int(pad) if isinstance(pad, int) and not isinstance(pad, bool) else None


def padding_width(tokens: torch.Tensor, pad_id: int | None) -> int | None:
    """How many columns of ``tokens`` ``[M, L]`` (token ids) reach the last non-pad token of any row: ``L'``,
    ``1 <= L' <= L`` (``L`` where the last column holds a real token; 1 for a batch of pad tokens only). None where no
    width applies: ``pad_id`` None (a tower that does not mask padding, :func:`text_pad_id`), a tensor that is not
    2-D or has no rows or no columns. Reads the ids: call it on CPU tokens (on an accelerator it waits for the device).
    Never raises.
    """
    if pad_id is None or tokens.ndim != 2 or 0 in tokens.shape:
        return None
    real = (tokens != pad_id).any(0).nonzero()
    return int(real.max()) + 1 if len(real) else 1


def cut_padding(tokens: torch.Tensor, pad_id: int | None) -> torch.Tensor:
    """``tokens`` ``[M, L]`` (token ids) without the columns after the last non-pad token of any row: ``[M, L']``, a
    view of ``tokens`` at :func:`padding_width`'s width; ``tokens`` itself where no width applies (``pad_id`` None,
    not 2-D, no rows or columns). A view narrower than ``tokens`` is not contiguous (more than one row): to copy
    pinned CPU tokens to an accelerator asynchronously, copy the whole tensor and cut it there at
    :func:`padding_width`'s width (as ``training.py`` train_step does). Never raises.
    """
    width = padding_width(tokens, pad_id)
    return tokens if width is None else tokens[:, :width]


def _check_batch_size(batch_size: int) -> None:
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")


@contextlib.contextmanager
def _eval_mode(model: torch.nn.Module):
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def encode_images(bundle: ModelBundle, images: Sequence[Image.Image], batch_size: int = 64) -> torch.Tensor:
    """Embed images with ``bundle.preprocess_val`` and the image tower; eval mode, no grad, spec precision.

    Args:
        bundle: the model.
        images: M PIL images (any mode; converted to RGB by the transform).
        batch_size: images per forward pass.

    Returns:
        float32 CPU tensor [M, D], rows L2-normalised (cosine space). M = 0 gives [0, D].

    Raises:
        TypeError: an item is not a PIL image (the message gives its index).
        ValueError: ``batch_size`` < 1.
    """
    _check_batch_size(batch_size)
    for i, im in enumerate(images):
        if not isinstance(im, Image.Image):
            raise TypeError(f"images[{i}] must be a PIL.Image.Image, got {type(im).__name__}")
    out = []
    with _eval_mode(bundle.model), torch.no_grad():
        for start in range(0, len(images), batch_size):
            batch = torch.stack([bundle.preprocess_val(im) for im in images[start : start + batch_size]])
            with bundle.autocast():
                feats = bundle.model.encode_image(batch.to(bundle.device))
            out.append(torch.nn.functional.normalize(feats.float(), dim=-1).cpu())
    if not out:
        return torch.zeros(0, bundle.embed_dim)
    return torch.cat(out)


def encode_texts(bundle: ModelBundle, texts: Sequence[str], batch_size: int = 256) -> torch.Tensor:
    """Embed captions with ``bundle.tokenizer`` and the text tower; eval mode, no grad, spec precision.

    Args:
        bundle: the model.
        texts: M captions (truncated to the tokenizer's context length; a tower that masks padding gets each
            batch cut after its longest caption, :func:`cut_padding`).
        batch_size: captions per forward pass.

    Returns:
        float32 CPU tensor [M, D], rows L2-normalised (cosine space). M = 0 gives [0, D].

    Raises:
        TypeError: an item is not a str (the message gives its index).
        ValueError: ``batch_size`` < 1.
    """
    _check_batch_size(batch_size)
    if isinstance(texts, str):
        raise TypeError("texts must be a list of str, got a single str")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"texts[{i}] must be a str, got {type(t).__name__}")
    out = []
    pad_id = text_pad_id(bundle.model)
    with _eval_mode(bundle.model), torch.no_grad():
        for start in range(0, len(texts), batch_size):
            tokens = cut_padding(bundle.tokenizer(list(texts[start : start + batch_size])), pad_id).to(bundle.device)
            with bundle.autocast():
                feats = bundle.model.encode_text(tokens)
            out.append(torch.nn.functional.normalize(feats.float(), dim=-1).cpu())
    if not out:
        return torch.zeros(0, bundle.embed_dim)
    return torch.cat(out)


def encode_image_files(
    paths: Sequence[str],
    encode: Callable[[list[Image.Image]], torch.Tensor],
    batch_size: int = 64,
    desc: str = "images",
) -> torch.Tensor:
    """Embed image files in chunks of ``batch_size`` (only one chunk of decoded images in memory at a time).

    Args:
        paths: M image files (read with :func:`concrete_jungle.io.load_rgb`).
        encode: list of PIL images -> ``[m, D]`` embeddings, e.g. ``lambda ims: encode_images(bundle, ims)``.
        batch_size: images per chunk, >= 1.
        desc: progress-bar label.

    Returns:
        ``[M, D]`` embeddings in the order of ``paths`` (as ``encode`` returns them: cosine space for
        :func:`encode_images`).

    Raises:
        OSError: naming an unreadable image file.
        ValueError: if ``paths`` is empty (D would be unknown) or ``batch_size < 1``.
    """
    from tqdm.auto import tqdm

    if not paths:
        raise ValueError("encode_image_files: no image paths")
    if batch_size < 1:
        raise ValueError(f"encode_image_files: batch_size must be >= 1, got {batch_size}")
    chunks = []
    for start in tqdm(range(0, len(paths), batch_size), desc=desc, unit="batch"):
        chunks.append(encode([load_rgb(p) for p in paths[start : start + batch_size]]))
    return torch.cat(chunks)
