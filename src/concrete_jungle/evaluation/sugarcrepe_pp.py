"""SugarCrepe++ evaluation (Dumpala et al., NeurIPS 2024; one of the paper's compositional benchmarks, Sec. 3).

SugarCrepe++ adds a second, lexically different positive caption to SugarCrepe's replace / swap items, so every
item is a triplet (p1 = ``caption``, p2 = ``caption2``, n = ``negative_caption``) with an image. Two tasks:

* **ITT** (image-text task): correct iff the image is closer to *both* positives than to the negative,
  cos(v, p1) > cos(v, n) and cos(v, p2) > cos(v, n);
* **TOT** (text-only task, the text encoder alone): correct iff the two positives are closer to each other than
  either is to the negative, cos(p1, p2) > cos(p1, n) and cos(p1, p2) > cos(p2, n).

Comparisons are strict (a tie is wrong) and in cosine space. As in :mod:`.sugarcrepe`, data and metrics are
separate: :func:`score_sugarcrepe_pp` scores one model from its embedding cache. Subset files are SugarCrepe++'s own format:
a JSON list of ``{"id", "filename", "caption", "caption2", "negative_caption"}``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from concrete_jungle.evaluation.suite import EmbeddingCache, check_embeddings
from concrete_jungle.evaluation.sugarcrepe import (_default_image_root, keep_items_with_images, require_items,
                                                   subset_set, summarize)
from concrete_jungle.io import read_json, write_json

__all__ = [
    "SUGARCREPE_PP_SUBSETS",
    "load_sugarcrepe_pp",
    "prepare_sugarcrepe_pp",
    "sugarcrepe_pp_verdicts",
    "score_sugarcrepe_pp",
]

#: The five subsets of SugarCrepe++ (SugarCrepe's replace and swap families).
SUGARCREPE_PP_SUBSETS = ("replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")

_ITEM_KEYS = ("filename", "caption", "caption2", "negative_caption")


def _read_subset(path: Path) -> list[dict]:
    data = read_json(path)
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of items, got {type(data).__name__}")
    seen = set()
    for k, item in enumerate(data):
        if not isinstance(item, dict):
            raise ValueError(f"{path}: item {k} is {type(item).__name__}, expected an object")
        for key in _ITEM_KEYS:
            if not isinstance(item.get(key), str) or not item[key].strip():
                raise ValueError(f"{path}: item {k} (id {item.get('id')!r}) lacks a non-empty string {key!r}")
        iid = str(item.get("id", k))
        if iid in seen:
            raise ValueError(f"{path}: id {iid!r} occurs twice")
        seen.add(iid)
    return data


def load_sugarcrepe_pp(
    src_dir: str | os.PathLike,
    image_root: str | os.PathLike | None = None,
    subsets: Sequence[str] | None = None,
    decode: bool = True,
) -> tuple[dict[str, list[dict]], dict[str, dict[str, int]]]:
    """Read SugarCrepe++ subset files and keep the items whose image file exists and decodes (exists only, with
    ``decode=False``: a prepared folder, as :func:`~concrete_jungle.evaluation.sugarcrepe.load_sugarcrepe`).

    Args:
        src_dir: folder with ``<subset>.json`` lists (and optionally ``meta.json`` naming ``image_root``).
        image_root: folder of the images; default ``meta.json["image_root"]``, else ``src_dir/images``.
        subsets: subset names; default those of :data:`SUGARCREPE_PP_SUBSETS` present in ``src_dir``.

    Returns:
        ``(items_by_subset, skipped)``: lists of ``{"id", "filename", "image", "caption", "caption2",
        "negative_caption"}`` in file order, and ``{subset: {reason: count}}`` (``{}`` if none; the reasons of
        :func:`~concrete_jungle.evaluation.sugarcrepe.keep_items_with_images`).

    Raises:
        FileNotFoundError: ``src_dir`` or a requested subset file is missing, or no subset file exists.
        ValueError: a file is not a list of complete items (naming the file, item and key), repeats an id, or has
            an item whose ``filename`` is absolute or resolves outside the image root (naming the subset, the item
            id and the filename).
    """
    src_dir = Path(src_dir)
    if not src_dir.is_dir():
        raise FileNotFoundError(f"SugarCrepe++ folder not found: {src_dir}")
    root = Path(image_root) if image_root is not None else _default_image_root(src_dir)
    names = list(subsets) if subsets is not None else [s for s in SUGARCREPE_PP_SUBSETS
                                                        if (src_dir / f"{s}.json").is_file()]
    if not names:
        raise FileNotFoundError(f"no SugarCrepe++ subset file ({', '.join(SUGARCREPE_PP_SUBSETS)}) in {src_dir}")
    items, skipped, checked = {}, {}, {}
    for name in names:
        path = src_dir / f"{name}.json"
        if not path.is_file():
            raise FileNotFoundError(f"SugarCrepe++ subset {name!r} not found: {path}")
        id_items = ((item.get("id", k), item) for k, item in enumerate(_read_subset(path)))
        items[name], skipped[name] = keep_items_with_images(id_items, root, _ITEM_KEYS[1:], checked,
                                                            f"SugarCrepe++ subset {name!r}", decode)
    return items, skipped


def prepare_sugarcrepe_pp(src_dir: str | os.PathLike, image_root: str | os.PathLike,
                          out_dir: str | os.PathLike) -> dict:
    """Write the SugarCrepe++ items whose image exists under ``image_root`` to ``out_dir`` (same list format)
    plus ``meta.json``. With ``../shared/data`` this keeps 544 of the 4,757 items (164 images).

    Returns:
        ``{"image_root", "source": "sugarcrepe_pp", "n_items": {subset: int}, "skipped": {...},
        "dropped_empty_subsets": [...]}`` (also written to ``out_dir/meta.json``).

    Raises:
        FileNotFoundError: ``image_root`` is not a folder; errors of :func:`load_sugarcrepe_pp`.
        ValueError: no item at all has its image; an item's ``filename`` escapes ``image_root`` (as
            :func:`load_sugarcrepe_pp`).
    """
    if not Path(image_root).is_dir():
        raise FileNotFoundError(f"prepare_sugarcrepe_pp: image_root is not a folder: {image_root}")
    items, skipped = load_sugarcrepe_pp(src_dir, image_root=image_root)
    empty = sorted(name for name, kept in items.items() if not kept)
    if len(empty) == len(items):
        raise ValueError(f"prepare_sugarcrepe_pp: no item of {src_dir} has its image under {image_root}")
    out_dir = Path(out_dir)
    for name, kept in items.items():
        if kept:
            write_json(out_dir / f"{name}.json", [{"id": it["id"], **{k: it[k] for k in _ITEM_KEYS}} for it in kept])
    meta = {"image_root": str(image_root), "source": "sugarcrepe_pp",
            "n_items": {name: len(kept) for name, kept in items.items() if kept}, "skipped": skipped,
            "dropped_empty_subsets": empty}
    write_json(out_dir / "meta.json", meta)
    return meta


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1)


def sugarcrepe_pp_verdicts(image_emb, pos1_emb, pos2_emb, neg_emb) -> dict[str, np.ndarray]:
    """Per-item ITT and TOT verdicts (module docstring), in cosine space, float64, strict.

    Args:
        image_emb, pos1_emb, pos2_emb, neg_emb: ``[M, D]`` embeddings (NumPy arrays or CPU tensors, any scale) of
            the image, the two positive captions and the negative caption.

    Returns:
        ``{"itt": bool array [M], "tot": bool array [M]}``.

    Raises:
        ValueError: as :func:`~concrete_jungle.evaluation.sugarcrepe.sugarcrepe_verdicts` (not 2-D, NaN/Inf, zero
            rows, shapes that differ).
    """
    names = ("image_emb", "pos1_emb", "pos2_emb", "neg_emb")
    v, p1, p2, n = (check_embeddings(name, x) for name, x in zip(names, (image_emb, pos1_emb, pos2_emb, neg_emb)))
    if len({x.shape for x in (v, p1, p2, n)}) != 1:
        raise ValueError("image_emb, pos1_emb, pos2_emb and neg_emb must share shape [M, D]; got "
                         + ", ".join(str(x.shape) for x in (v, p1, p2, n)))
    vp1, vp2, vn = _cos(v, p1), _cos(v, p2), _cos(v, n)
    p1p2, p1n, p2n = _cos(p1, p2), _cos(p1, n), _cos(p2, n)
    return {"itt": (vp1 > vn) & (vp2 > vn), "tot": (p1p2 > p1n) & (p1p2 > p2n)}


def score_sugarcrepe_pp(bench_dir: str | os.PathLike, cache: EmbeddingCache) -> dict:
    """SugarCrepe++ ITT and TOT of one model from its embeddings (paper Sec. 3, Tab. 2).

    Args:
        bench_dir: the prepared SugarCrepe++ folder (``<subset>.json`` lists + ``meta.json``).
        cache: the model's embeddings of the folder's images and captions.

    Returns:
        ``{"metrics": {"itt": summarize(...), "tot": summarize(...)}, "n": {subset: items, "all": items},
        "verdicts": {"itt": {subset: {id: bool}}, "tot": {...}}, "skipped": ..., "subset_set": the record of which
        subsets ``all`` is taken over (:func:`~concrete_jungle.evaluation.sugarcrepe.subset_set` against
        :data:`SUGARCREPE_PP_SUBSETS`)}``.

    Raises:
        ValueError: a subset with no item left; KeyError: an input the cache lacks.
    """
    items, skipped = load_sugarcrepe_pp(bench_dir, decode=False)  # decoded at prepare
    require_items(items, skipped, "SugarCrepe++")
    per = {name: sugarcrepe_pp_verdicts(cache.image([it["image"] for it in kept]),
                                        *(cache.text([it[k] for it in kept])
                                          for k in ("caption", "caption2", "negative_caption")))
           for name, kept in items.items()}
    metrics = {}
    for task in ("itt", "tot"):
        metrics[task] = summarize({name: v[task] for name, v in per.items()})
        n_items = metrics[task].pop("n_items")
    n = {name: len(kept) for name, kept in items.items()}
    n["all"] = n_items
    verdicts = {task: {name: {it["id"]: bool(x) for it, x in zip(kept, per[name][task].tolist())}
                       for name, kept in items.items()} for task in ("itt", "tot")}
    return {"metrics": metrics, "n": n, "verdicts": verdicts, "skipped": skipped,
            "subset_set": subset_set(bench_dir, list(items), SUGARCREPE_PP_SUBSETS)}
