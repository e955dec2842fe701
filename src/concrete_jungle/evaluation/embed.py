"""Encode every prepared suite once per model: the embed step of :mod:`concrete_jungle.evaluation.suite`.

One process encodes the members of a model family (:mod:`concrete_jungle.grid`; e.g. ``hc-cement``, ``lc-cement``,
``wo-cement``). Suites are visited in a fixed order (:data:`SUITE_ORDER`); for each, the images and texts it lists
that no earlier suite listed are encoded in batches of that suite's own inputs, the rest are reused from the earlier
suite. So a suite's embeddings never depend on a later suite's contents (changing a later suite leaves the earlier
caches byte-identical), and every unique input is encoded once per model. An image batch is decoded and
preprocessed once and fed to every member model (they share the architecture and its transform).

Embeddings are float32 ``[M, D]`` with L2-normalised rows (cosine space), computed in ``precision`` (fp32 by
default, ``evaluate.precision``), never the training precision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from concrete_jungle.evaluation.suite import EmbeddingCache, read_suite
from concrete_jungle.io import load_rgb
from concrete_jungle.models.encoding import cut_padding, text_pad_id

__all__ = ["SUITE_ORDER", "embed_suites", "set_precision"]

#: Prepared suites in encoding order (``benchmark`` = SugarCrepe and SugarCrepe++ from the benchmark stage).
SUITE_ORDER = ("benchmark", "winoground", "retrieval", "probe", "heldout")


def set_precision(bundle, precision: str) -> None:
    """Make ``bundle`` encode in ``precision`` (``"fp32"`` or ``"bf16"``) whatever precision it was trained in.

    Raises:
        ValueError: an unknown precision.
    """
    if precision not in ("fp32", "bf16"):
        raise ValueError(f"evaluate.precision must be 'fp32' or 'bf16', got {precision!r}")
    bundle.spec = bundle.spec.model_copy(update={"precision": precision})


def _encode(bundles: Mapping[str, object], inputs: Sequence[str], kind: str, batch_size: int,
            desc: str) -> dict[str, np.ndarray]:
    """``{label: float32 [len(inputs), D]}``: each batch prepared once (decoded + preprocessed images, or tokens
    per tokenizer, cut after the batch's longest caption for a tower that masks padding) and encoded by every
    model."""
    out: dict[str, list[np.ndarray]] = {label: [] for label in bundles}
    first = next(iter(bundles.values()))
    shared = all(repr(b.preprocess_val) == repr(first.preprocess_val) for b in bundles.values())
    for start in tqdm(range(0, len(inputs), batch_size), desc=desc, unit="batch", disable=not inputs):
        chunk = list(inputs[start:start + batch_size])
        if kind == "image":
            pil = [load_rgb(p) for p in chunk]
            pixels = torch.stack([first.preprocess_val(im) for im in pil]) if shared else None
        for label, bundle in bundles.items():
            with torch.no_grad(), bundle.autocast():
                if kind == "image":
                    x = pixels if pixels is not None else torch.stack([bundle.preprocess_val(im) for im in pil])
                    feats = bundle.model.encode_image(x.to(bundle.device))
                else:
                    tokens = cut_padding(bundle.tokenizer(chunk), text_pad_id(bundle.model))
                    feats = bundle.model.encode_text(tokens.to(bundle.device))
            out[label].append(torch.nn.functional.normalize(feats.float(), dim=-1).cpu().numpy())
    dim = {label: int(b.embed_dim) for label, b in bundles.items()}
    return {label: (np.concatenate(rows) if rows else np.zeros((0, dim[label]), np.float32))
            for label, rows in out.items()}


def embed_suites(bundles: Mapping[str, object], suite_dirs: Mapping[str, str | Path],
                 out_dirs: Mapping[str, Mapping[str, str | Path]], batch_size: int = 128) -> dict:
    """Encode the inputs of every prepared suite with every model and save one :class:`EmbeddingCache` per
    (suite, model).

    Args:
        bundles: model label -> :class:`~concrete_jungle.models.build.ModelBundle` (already in eval precision,
            :func:`set_precision`).
        suite_dirs: suite name -> prepared folder (``suite.json``); visited in :data:`SUITE_ORDER` (names not in
            it last, sorted).
        out_dirs: suite name -> model label -> output folder of that cache.
        batch_size: inputs per forward pass.

    Returns:
        ``{suite: {"images": n, "texts": n, "new_images": n, "new_texts": n, "available": bool}}``.

    Raises:
        FileNotFoundError: a suite folder was never prepared; OSError: an unreadable image (named).
        ValueError: ``batch_size`` < 1 or no model given.
    """
    if batch_size < 1:
        raise ValueError(f"evaluate.batch_size must be >= 1, got {batch_size}")
    if not bundles:
        raise ValueError("embed_suites: no model")
    order = [s for s in SUITE_ORDER if s in suite_dirs] + sorted(set(suite_dirs) - set(SUITE_ORDER))
    seen_img: dict[str, dict[str, np.ndarray]] = {label: {} for label in bundles}
    seen_txt: dict[str, dict[str, np.ndarray]] = {label: {} for label in bundles}
    stats = {}
    for suite in order:
        meta = read_suite(suite_dirs[suite])
        images, texts = list(meta.get("images", [])), list(meta.get("texts", []))
        first = next(iter(bundles))
        new_img = [p for p in images if p not in seen_img[first]]
        new_txt = [t for t in texts if t not in seen_txt[first]]
        for kind, new, seen in (("image", new_img, seen_img), ("text", new_txt, seen_txt)):
            encoded = _encode(bundles, new, kind, batch_size, f"embed {suite}: {kind}s")
            for label, rows in encoded.items():
                seen[label].update(zip(new, rows))
        for label, bundle in bundles.items():
            dim = int(bundle.embed_dim)
            img = np.stack([seen_img[label][p] for p in images]) if images else np.zeros((0, dim), np.float32)
            txt = np.stack([seen_txt[label][t] for t in texts]) if texts else np.zeros((0, dim), np.float32)
            EmbeddingCache(images, texts, img, txt).save(out_dirs[suite][label])
        stats[suite] = {"available": bool(meta.get("available")), "images": len(images), "texts": len(texts),
                        "new_images": len(new_img), "new_texts": len(new_txt)}
    return stats

