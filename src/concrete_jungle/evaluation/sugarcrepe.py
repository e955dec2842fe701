"""SugarCrepe evaluation (Hsieh et al. 2023; the paper's compositional benchmark, Sec. 3 and Tab. 2).

The dataset side and the metric side are separate, as in clip_benchmark:

* :func:`load_sugarcrepe` / :func:`prepare_benchmark` read and filter SugarCrepe's subset JSONs
  (``{"<id>": {"filename", "caption", "negative_caption"}}``);
* :func:`sugarcrepe_verdicts` / :func:`summarize` turn embeddings into per-item verdicts and accuracies;
* :func:`score_sugarcrepe` scores one model from its :class:`~concrete_jungle.evaluation.suite.EmbeddingCache`
  (the embed stage encoded every unique image and caption once), so this module holds no model code.

An item is answered correctly (I2T) iff the image is closer to the positive caption than to the
hard negative caption in cosine space, **strictly**: a tie counts as wrong.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from concrete_jungle.evaluation.suite import EmbeddingCache, check_embeddings
from concrete_jungle.io import check_image, confined_path, read_json, write_json

__all__ = [
    "SUGARCREPE_SUBSETS",
    "load_sugarcrepe",
    "prepare_benchmark",
    "sugarcrepe_verdicts",
    "summarize",
    "benchmark_inputs",
    "require_items",
    "score_sugarcrepe",
    "keep_items_with_images",
    "subset_set",
]

logger = logging.getLogger(__name__)

#: The seven subsets of the refined SugarCrepe benchmark, in the order the paper's Tab. 2 uses.
SUGARCREPE_SUBSETS = ("add_att", "add_obj", "replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")

_ITEM_KEYS = ("filename", "caption", "negative_caption")


def _subset_names(bench_dir: Path, subsets: Sequence[str] | None) -> list[str]:
    if subsets is None:
        meta = bench_dir / "meta.json"
        listed = read_json(meta).get("n_items") if meta.is_file() else None
        if isinstance(listed, dict) and listed:  # a prepared benchmark names its subsets
            return sorted(listed)
        names = sorted(p.stem for p in bench_dir.glob("*.json") if p.name not in ("meta.json", "scenes.json"))
        if not names:
            raise FileNotFoundError(f"no SugarCrepe subset JSON (<subset>.json) in {bench_dir}")
        return names
    if isinstance(subsets, str) or len(subsets) == 0:
        raise ValueError(f"subsets must be a non-empty list of subset names, got {subsets!r}")
    if len(set(subsets)) != len(subsets):
        raise ValueError(f"subsets lists a name twice: {list(subsets)}")
    for name in subsets:
        if not (bench_dir / f"{name}.json").is_file():
            raise FileNotFoundError(f"SugarCrepe subset {name!r} not found: {bench_dir / (name + '.json')}")
    return list(subsets)


def _read_subset(path: Path) -> dict[str, dict]:
    """One SugarCrepe-format subset file ``{id: item}``.

    Raises:
        ValueError: not an object of items, an item lacking a non-empty string field, or an id (or an item's field)
            written twice, which ``json`` would silently resolve to the last one (file and id named; issue 22)."""
    data = read_json(path, unique_keys=True)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object {{id: item}}, got {type(data).__name__}")
    for iid, item in data.items():
        if not isinstance(item, dict):
            raise ValueError(f"{path}: item {iid!r} is {type(item).__name__}, expected an object")
        for key in _ITEM_KEYS:
            if not isinstance(item.get(key), str) or not item[key].strip():
                raise ValueError(f"{path}: item {iid!r} lacks a non-empty string {key!r}")
    return data


def _default_image_root(bench_dir: Path) -> Path:
    meta = bench_dir / "meta.json"
    if meta.is_file():
        root = read_json(meta).get("image_root")
        if root:
            return Path(root)
    return bench_dir / "images"


def keep_items_with_images(
    id_items: Iterable[tuple[str, dict]], root: Path, text_keys: Sequence[str], checked: dict[str, str | None],
    where: str = "benchmark subset", decode: bool = True,
) -> tuple[list[dict], dict[str, int]]:
    """The ``(id, item)`` pairs whose ``root / item["filename"]`` is a file that decodes, as ``{"id", "filename",
    "image", *text_keys}`` dicts in order, and the skip counts by reason (``{}`` when none): ``image_missing``,
    ``image_unreadable`` (empty, truncated, corrupt, not an image), ``image_too_large``
    (:func:`concrete_jungle.io.check_image`; issue 22: a damaged image used to pass preparation and fail the whole
    model's encoding later). ``checked`` caches each file's verdict across subsets (updated in place); ``where``
    names the subset in errors and in the warning logged for each damaged file (naming the item and the file).
    ``decode=False`` checks existence only: for a folder prepared here, whose images were decoded at prepare
    (scoring every model would otherwise decode every image again).

    Raises:
        ValueError: an item whose ``filename`` is absolute or resolves outside ``root`` (``..``, a symlink out of
            it), naming ``where``, the item id and the filename (:func:`concrete_jungle.io.confined_path`).
    """
    kept, counts = [], Counter()
    for iid, item in id_items:
        fname = item["filename"]
        if fname not in checked:
            path = confined_path(root, fname, f"{where} item {str(iid)!r}")
            checked[fname] = (check_image(path) if decode else None) if path.is_file() else "image_missing"
            if checked[fname] not in (None, "image_missing"):
                logger.warning("%s item %r: image %s skipped (%s)", where, str(iid), path, checked[fname])
        if checked[fname] is not None:
            counts[checked[fname]] += 1
            continue
        kept.append({"id": str(iid), "filename": fname, "image": str(root / fname),
                     **{key: item[key] for key in text_keys}})
    return kept, dict(counts)


def load_sugarcrepe(
    bench_dir: str | os.PathLike,
    image_root: str | os.PathLike | None = None,
    subsets: Sequence[str] | None = None,
    decode: bool = True,
) -> tuple[dict[str, list[dict]], dict[str, dict[str, int]]]:
    """Read SugarCrepe subset JSONs and keep the items whose image file exists and decodes (exists only, with
    ``decode=False``: a folder prepared by :func:`prepare_benchmark`, whose images were decoded then).

    Args:
        bench_dir: folder with ``<subset>.json`` files in SugarCrepe's format
            ``{"<id>": {"filename", "caption", "negative_caption"}}`` (and optionally ``meta.json``).
        image_root: folder of the images. Default: ``meta.json["image_root"]`` in ``bench_dir`` if
            present (a relative root is relative to the working directory, i.e. the repo root), else
            ``bench_dir/images``.
        subsets: subset names to load; default every ``*.json`` in ``bench_dir`` but ``meta.json``,
            sorted by name.

    Returns:
        ``(items_by_subset, skipped)``. ``items_by_subset[subset]`` is a list, in file order, of
        ``{"id", "filename", "image", "caption", "negative_caption"}`` (``image`` = image_root /
        filename, as a string). ``skipped[subset]`` is a dict reason -> count, reasons ``image_missing``,
        ``image_unreadable``, ``image_too_large`` (:func:`keep_items_with_images`); every loaded subset has an
        entry (``{}`` when nothing was skipped). A subset may end up with no items.

    Raises:
        FileNotFoundError: if ``bench_dir`` or a requested subset file is missing, or there is none.
        ValueError: if a subset file is not ``{id: item}``, repeats an id, an item lacks a non-empty
            ``filename``/``caption``/``negative_caption``, or an item's ``filename`` is absolute or resolves
            outside the image root (naming the subset, the item id and the filename).
    """
    bench_dir = Path(bench_dir)
    if not bench_dir.is_dir():
        raise FileNotFoundError(f"SugarCrepe folder not found: {bench_dir}")
    root = Path(image_root) if image_root is not None else _default_image_root(bench_dir)
    items: dict[str, list[dict]] = {}
    skipped: dict[str, dict[str, int]] = {}
    checked: dict[str, str | None] = {}
    for name in _subset_names(bench_dir, subsets):
        items[name], skipped[name] = keep_items_with_images(
            _read_subset(bench_dir / f"{name}.json").items(), root, _ITEM_KEYS[1:], checked,
            f"SugarCrepe subset {name!r}", decode)
    return items, skipped


def prepare_benchmark(
    src_dir: str | os.PathLike,
    image_root: str | os.PathLike,
    out_dir: str | os.PathLike,
    source_name: str,
    subsets: Sequence[str] | None = None,
) -> dict:
    """Write the SugarCrepe items whose image exists under ``image_root`` as a benchmark folder.

    Used for real SugarCrepe: ``src_dir=../shared/data/sugarcrepe`` with
    ``image_root=../shared/data/coco/val2017`` keeps 875 of the 7,511 items.

    Args:
        src_dir: folder of the original subset JSONs.
        image_root: folder of the images; stored verbatim (``str(image_root)``) in ``meta.json``.
        out_dir: output folder; receives ``<subset>.json`` (original ids and fields kept, items whose
            image is absent dropped) and ``meta.json``.
        source_name: free-text provenance stored as ``meta["source"]``.
        subsets: as in :func:`load_sugarcrepe`.

    Returns:
        The meta dict written to ``out_dir/meta.json``: ``{"image_root": str, "source": str,
        "n_items": {subset: int}, "skipped": {subset: {reason: int}}, "dropped_empty_subsets": [subset]}``;
        a subset none of whose images exists is dropped (listed there) instead of being written empty.

    Raises:
        FileNotFoundError / ValueError: as :func:`load_sugarcrepe` (including an item whose ``filename``
        escapes ``image_root``); ``FileNotFoundError`` also when ``image_root`` is not a folder; ``ValueError``
        when no item at all has its image.
    """
    if not Path(image_root).is_dir():
        raise FileNotFoundError(f"prepare_benchmark: image_root is not a folder: {image_root}")
    items, skipped = load_sugarcrepe(src_dir, image_root=image_root, subsets=subsets)
    out_dir = Path(out_dir)
    empty = sorted(name for name, kept in items.items() if not kept)
    if len(empty) == len(items):
        raise ValueError(f"prepare_benchmark: no item of {src_dir} has its image under {image_root}")
    for name, kept in items.items():
        if kept:
            write_json(out_dir / f"{name}.json", {it["id"]: {k: it[k] for k in _ITEM_KEYS} for it in kept})
    meta = {
        "image_root": str(image_root),
        "source": source_name,
        "n_items": {name: len(kept) for name, kept in items.items() if kept},
        "skipped": skipped,
        "dropped_empty_subsets": empty,  # every item's image was absent; left out rather than scored on 0 items
    }
    write_json(out_dir / "meta.json", meta)
    return meta


def sugarcrepe_verdicts(image_emb, pos_emb, neg_emb) -> np.ndarray:
    """Per-item SugarCrepe verdicts (I2T): is the image closer to its caption than to the hard negative?

    Args:
        image_emb: ``[M, D]`` image embeddings (NumPy array or CPU tensor, any scale; L2-normalised here).
        pos_emb: ``[M, D]`` embeddings of the positive captions.
        neg_emb: ``[M, D]`` embeddings of the hard negative captions.

    Returns:
        bool array ``[M]``: True iff cos(image, positive) > cos(image, negative) **strictly** (cosine space,
        computed in float64; a tie is wrong).

    Raises:
        ValueError: if an input is not 2-D, the shapes differ, a value is NaN/Inf, or a row is zero.
    """
    img, pos, neg = (check_embeddings(name, x) for name, x in
                     (("image_emb", image_emb), ("pos_emb", pos_emb), ("neg_emb", neg_emb)))
    if not (img.shape == pos.shape == neg.shape):
        raise ValueError(f"image_emb, pos_emb and neg_emb must share shape [M, D]; got {img.shape}, {pos.shape}, "
                         f"{neg.shape}")
    return (img * pos).sum(axis=1) > (img * neg).sum(axis=1)


def summarize(verdicts_by_subset: Mapping[str, Sequence[bool]]) -> dict:
    """Accuracy per subset, micro average (over items) and macro average (mean of subset accuracies).

    Args:
        verdicts_by_subset: subset name -> ``[M_s]`` bool verdicts (array, tensor or list of bools).

    Returns:
        ``{"subsets": {name: {"accuracy": float, "n": int, "correct": int}}, "micro_accuracy": float,
        "macro_accuracy": float, "n_items": int}``; accuracies are fractions in [0, 1]. The macro
        average is the paper's "M.Avg" (Tab. 2) taken over the subsets given.

    Raises:
        ValueError: if there is no subset, a subset has no item (its accuracy is undefined), or a
            verdict array is not 1-D.
    """
    if not verdicts_by_subset:
        raise ValueError("summarize: verdicts_by_subset is empty")
    subsets, total_n, total_correct = {}, 0, 0
    for name, v in verdicts_by_subset.items():
        v = np.asarray(v, dtype=bool)
        if v.ndim != 1:
            raise ValueError(f"summarize: verdicts of subset {name!r} must be 1-D, got shape {v.shape}")
        n = int(v.size)
        if n == 0:
            raise ValueError(f"summarize: subset {name!r} has no items; its accuracy is undefined")
        correct = int(v.sum())
        subsets[name] = {"accuracy": correct / n, "n": n, "correct": correct}
        total_n += n
        total_correct += correct
    return {
        "subsets": subsets,
        "micro_accuracy": total_correct / total_n,
        "macro_accuracy": sum(s["accuracy"] for s in subsets.values()) / len(subsets),
        "n_items": total_n,
    }


def require_items(items: Mapping[str, list], skipped: Mapping, what: str) -> None:
    """Raise ``ValueError`` naming the subsets of ``items`` (``{subset: [item, ...]}``) left without an item, with the
    loader's skip counts (a subset every image of which is absent cannot be scored)."""
    empty = [name for name, kept in items.items() if not kept]
    if empty:
        raise ValueError(f"{what} subsets with no item whose image exists: {empty} (skipped: {dict(skipped)})")


def subset_set(bench_dir: str | os.PathLike, scored: Sequence[str], benchmark: Sequence[str]) -> dict:
    """The record of which subsets a score's ``all`` is taken over (issue 22 item 4): a deleted, emptied or added
    subset file changes ``all``, and the result says so instead of a reader finding out from the numbers.

    Args:
        bench_dir: the prepared folder (its ``meta.json`` lists the subsets dropped at prepare for want of items).
        scored: the subsets scored. benchmark: the benchmark's own set (e.g. :data:`SUGARCREPE_SUBSETS`).

    Returns:
        ``{"scored": [...], "absent": [benchmark subsets not scored], "extra": [scored subsets not of the benchmark],
        "dropped_empty": [subsets dropped at prepare], "complete": not absent and not extra}``.
    """
    meta = Path(bench_dir) / "meta.json"
    dropped = read_json(meta).get("dropped_empty_subsets", []) if meta.is_file() else []
    absent = [s for s in benchmark if s not in scored]
    extra = [s for s in scored if s not in benchmark]
    return {"scored": list(scored), "absent": absent, "extra": extra, "dropped_empty": list(dropped),
            "complete": not absent and not extra}


def benchmark_inputs(items: Mapping[str, list[dict]], text_keys: Sequence[str]) -> tuple[list[str], list[str]]:
    """The unique image paths and captions of SugarCrepe-format items (what the embed stage encodes)."""
    images = sorted({it["image"] for kept in items.values() for it in kept})
    texts = sorted({it[k] for kept in items.values() for it in kept for k in text_keys})
    return images, texts


def score_sugarcrepe(bench_dir: str | os.PathLike, cache: EmbeddingCache) -> dict:
    """SugarCrepe accuracy of one model from its embeddings (paper Sec. 3, Tab. 2).

    Args:
        bench_dir: the prepared benchmark folder (``<subset>.json`` + ``meta.json``).
        cache: the model's embeddings of the benchmark's images and captions.

    Returns:
        ``{"metrics": summarize(...) without n_items, "n": {subset: items, "all": items},
        "verdicts": {subset: {item id: bool}}, "skipped": loader skip counts, "subset_set": :func:`subset_set`
        against the seven of :data:`SUGARCREPE_SUBSETS`}``.

    Raises:
        ValueError: a subset with no item left; KeyError: an input the cache lacks.
    """
    items, skipped = load_sugarcrepe(bench_dir, decode=False)  # decoded at prepare
    require_items(items, skipped, "benchmark")
    verdicts = {name: sugarcrepe_verdicts(cache.image([it["image"] for it in kept]),
                                          cache.text([it["caption"] for it in kept]),
                                          cache.text([it["negative_caption"] for it in kept]))
                for name, kept in items.items()}
    summary = summarize(verdicts)
    n = {name: s["n"] for name, s in summary["subsets"].items()}
    n["all"] = summary.pop("n_items")
    return {"metrics": summary, "n": n, "skipped": skipped,
            "subset_set": subset_set(bench_dir, list(items), SUGARCREPE_SUBSETS),
            "verdicts": {name: {it["id"]: bool(v) for it, v in zip(kept, verdicts[name].tolist())}
                         for name, kept in items.items()}}
