"""One evaluation interface for every benchmark suite (clip_benchmark's split: datasets / metrics / models).

The paper's Tables 2 and 3 (Sec. 3.3) come from several suites: SugarCrepe, SugarCrepe++, Winoground, retrieval
(R@K), linear probes (ImageNet / COCO / VTAB-1k) and the held-out ConcreteBatch pairs. They share three steps:

1. **Prepare** (no model): a suite's reader turns its source files into a folder ``data/<p>/suites/<suite>/`` with
   ``suite.json`` — ``{"suite", "available", "reason", "images": [path, ...], "texts": [caption, ...], ...}`` —
   plus whatever item files its scorer reads. ``images`` / ``texts`` list every unique input the suite needs,
   so the embed stage can encode the union once. A suite whose data is absent is written with
   ``available: false`` and the reason; it is skipped, never a failure (:func:`unavailable`).
2. **Embed** (the model, once per model across all suites): every listed image and text is encoded in fp32 by
   default (``evaluate.precision``) into an :class:`EmbeddingCache` per suite.
3. **Score** (no torch): a metric function per task takes precomputed, L2-normalised embeddings (float32
   ``[M, D]`` NumPy arrays, cosine space), so every scorer can be checked on fixed embeddings. The result of every
   suite has one schema (:func:`suite_result`): ``{"suite", "model", "checkpoint", "precision", "available",
   "reason", "metrics", "n"}`` with finite numbers only, plus the per-item ``verdicts`` written beside it for the
   paired tests of the report.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from concrete_jungle.io import atomic_write, check_finite, read_json, write_json

__all__ = ["SUITE_FILE", "EmbeddingCache", "DataAbsent", "require_path", "unavailable", "read_suite", "write_suite",
           "suite_result", "check_embeddings", "image_digests"]

#: The file a prepared suite folder holds (see the module docstring).
SUITE_FILE = "suite.json"


class DataAbsent(Exception):
    """A suite's (or one of its sets' / tasks') source data is absent: it is recorded as unavailable with this
    message, never a failure."""


def require_path(path: str | os.PathLike | None, field: str, folder: bool = False) -> Path:
    """``path`` as a Path when it exists (a folder when ``folder``).

    Raises:
        DataAbsent: ``path`` is None (the params key ``field`` is null) or does not exist (naming ``field``).
    """
    if path is None:
        raise DataAbsent(f"{field} is null (point it at a local copy)")
    p = Path(path)
    if not (p.is_dir() if folder else p.is_file()):
        raise DataAbsent(f"{field} {'folder' if folder else 'file'} not found: {p}")
    return p


def check_embeddings(name: str, x: np.ndarray, dim: int | None = None) -> np.ndarray:
    """Validate an embedding matrix and return it as float64 for scoring.

    Args:
        name: what ``x`` is, for messages (e.g. ``"winoground image_0"``).
        x: ``[M, D]`` array (cosine space: rows are re-normalised here, so any positive scale works).
        dim: the expected width D, or None.

    Returns:
        float64 ``[M, D]`` with L2-normalised rows.

    Raises:
        ValueError: ``x`` is not 2-D, has the wrong width, holds NaN / Inf, or has a zero row (naming the row).
    """
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D [M, D], got shape {x.shape}")
    if dim is not None and x.shape[1] != dim:
        raise ValueError(f"{name} has width {x.shape[1]}, expected {dim}")
    if not np.isfinite(x).all():
        raise ValueError(f"{name} contains NaN or Inf")
    x = x.astype(np.float64)
    norms = np.linalg.norm(x, axis=1)
    if x.shape[0] and (norms == 0).any():
        raise ValueError(f"{name} row {int(np.flatnonzero(norms == 0)[0])} is a zero vector")
    return x / np.where(norms == 0, 1.0, norms)[:, None]


@dataclass
class EmbeddingCache:
    """Embeddings of one model for one suite: unique images and texts, each encoded once.

    Attributes:
        image_keys: the image identifiers (paths exactly as the prepared suite lists them), row order of ``images``.
        text_keys: the captions, row order of ``texts``.
        images: float32 ``[I, D]``, L2-normalised rows (cosine space; multiply dot products by the model's
            exponentiated logit scale for logits).
        texts: float32 ``[T, D]``, L2-normalised rows.
    """

    image_keys: list[str]
    text_keys: list[str]
    images: np.ndarray
    texts: np.ndarray

    def __post_init__(self) -> None:
        if len(self.image_keys) != len(self.images) or len(self.text_keys) != len(self.texts):
            raise ValueError(f"EmbeddingCache: {len(self.image_keys)} image keys for {len(self.images)} rows, "
                             f"{len(self.text_keys)} text keys for {len(self.texts)} rows")
        self._img = {k: i for i, k in enumerate(self.image_keys)}
        self._txt = {k: i for i, k in enumerate(self.text_keys)}

    @property
    def dim(self) -> int:
        """Embedding width D (0 for an empty cache)."""
        return int(self.images.shape[1] if len(self.images) else self.texts.shape[1] if len(self.texts) else 0)

    def image(self, keys: Sequence[str]) -> np.ndarray:
        """Rows ``[len(keys), D]`` of the images ``keys``.

        Raises:
            KeyError: naming the first key that was never encoded (the suite did not list it).
        """
        return self.images[self._rows(self._img, keys, "image")]

    def text(self, keys: Sequence[str]) -> np.ndarray:
        """Rows ``[len(keys), D]`` of the captions ``keys``.

        Raises:
            KeyError: naming the first caption that was never encoded.
        """
        return self.texts[self._rows(self._txt, keys, "text")]

    @staticmethod
    def _rows(index: Mapping[str, int], keys: Sequence[str], what: str) -> np.ndarray:
        try:
            return np.fromiter((index[k] for k in keys), dtype=np.int64, count=len(keys))
        except KeyError as err:
            raise KeyError(f"EmbeddingCache: {what} {err.args[0]!r} was not encoded (not listed by its suite)") \
                from None

    def save(self, folder: str | os.PathLike) -> Path:
        """Write ``images.npy``, ``texts.npy`` and ``index.json`` into ``folder`` (byte-identical for equal
        content: ``np.save`` stores no timestamp). Returns the folder."""
        folder = Path(folder)
        for name, arr in (("images.npy", self.images), ("texts.npy", self.texts)):
            with atomic_write(folder / name, "wb") as fh:
                np.save(fh, np.ascontiguousarray(arr, dtype=np.float32), allow_pickle=False)
        write_json(folder / "index.json", {"images": list(self.image_keys), "texts": list(self.text_keys)})
        return folder

    @classmethod
    def load(cls, folder: str | os.PathLike) -> EmbeddingCache:
        """Read a folder written by :meth:`save`.

        Raises:
            FileNotFoundError: a file is missing; ValueError: the arrays do not match the index, or a row holds NaN
                or Inf (naming the file, the row and its key: issue 22).
        """
        folder = Path(folder)
        index = read_json(folder / "index.json")
        images = np.load(folder / "images.npy", allow_pickle=False)
        texts = np.load(folder / "texts.npy", allow_pickle=False)
        for name, arr, keys in (("images.npy", images, index["images"]), ("texts.npy", texts, index["texts"])):
            bad = np.flatnonzero(~np.isfinite(arr).all(axis=-1)) if arr.ndim == 2 else []
            if len(bad):
                key = keys[bad[0]] if bad[0] < len(keys) else "?"
                raise ValueError(f"{folder / name}: {len(bad)} row(s) hold NaN or Inf, the first row {int(bad[0])} "
                                 f"({key!r}); re-run the embed stage of this model")
        return cls(list(index["images"]), list(index["texts"]), images, texts)


def unavailable(suite: str, reason: str, **extra: Any) -> dict:
    """The ``suite.json`` of a suite whose data is absent: nothing to encode, scored as skipped with ``reason``."""
    return {"suite": suite, "available": False, "reason": reason, "images": [], "texts": [], **extra}


def image_digests(paths: Sequence[str]) -> dict[str, str]:
    """MD5 of each image file's bytes, by path: ``suite.json`` names every input by path *and* content, so a changed
    image changes the prepared suite (and the DVC dependency of the embed stages) even where its path does not.

    Raises:
        OSError: an image file that cannot be read (named by the OS error).
    """
    out = {}
    for p in paths:
        with open(p, "rb") as fh:
            out[p] = hashlib.md5(fh.read()).hexdigest()
    return out


def write_suite(folder: str | os.PathLike, meta: Mapping[str, Any]) -> dict:
    """Write a prepared suite's ``suite.json`` (sorted, de-duplicated ``images`` / ``texts``, and the MD5 of every
    image, :func:`image_digests`, as ``image_md5``) and return it.

    Raises:
        ValueError: ``meta`` lacks ``suite`` / ``available``, or an available suite lists no image and no text.
        OSError: a listed image cannot be read.
    """
    meta = dict(meta)
    for key in ("suite", "available"):
        if key not in meta:
            raise ValueError(f"write_suite: suite.json needs {key!r}")
    meta["images"] = sorted(set(meta.get("images", [])))
    meta["texts"] = sorted(set(meta.get("texts", [])))
    meta["image_md5"] = image_digests(meta["images"])
    meta.setdefault("reason", None)
    if meta["available"] and not (meta["images"] or meta["texts"]):
        raise ValueError(f"write_suite: suite {meta['suite']!r} is available but lists no inputs")
    write_json(Path(folder) / SUITE_FILE, meta)
    return meta


def read_suite(folder: str | os.PathLike) -> dict:
    """Read a prepared suite's ``suite.json``.

    Raises:
        FileNotFoundError: the folder was never prepared (names the file).
    """
    path = Path(folder) / SUITE_FILE
    if not path.is_file():
        raise FileNotFoundError(f"prepared suite not found: {path}")
    return read_json(path)


def suite_result(suite: str, model: str, checkpoint: str | None, metrics: Mapping[str, Any],
                 n: Mapping[str, int], *, precision: str = "fp32", available: bool = True,
                 reason: str | None = None, **extra: Any) -> dict:
    """The one result schema of every suite (``metrics/<p>/evaluate/<suite>/<model>.json``).

    Args:
        suite: suite name (``sugarcrepe``, ``winoground``, ``retrieval``, ``probe``, ``heldout``, ...).
        model: model label (``base``, ``clip``, ``hc-cement``, ...).
        checkpoint: the checkpoint that was encoded (repository-relative path), None when skipped.
        metrics: nested mapping of finite numbers (accuracies / recalls as fractions in [0, 1]); ``{}`` when skipped.
        n: items per subset / task (ints).
        precision: the encoding precision (``fp32`` unless ``evaluate.precision`` says otherwise).
        available: False when the suite's data is absent (then ``reason`` says why and ``metrics`` is empty).

    Raises:
        ValueError: a NaN / Inf anywhere (naming where), or a skipped result without a reason.
    """
    if not available and not reason:
        raise ValueError(f"suite_result: {suite}/{model} is skipped but gives no reason")
    out = {"suite": suite, "model": model, "checkpoint": checkpoint, "precision": precision,
           "available": bool(available), "reason": reason, "metrics": dict(metrics),
           "n": {k: int(v) for k, v in n.items()}, **extra}
    check_finite(out, f"{suite} result of {model}")
    return out

