"""Winoground evaluation (Thrush et al. 2022; the paper's compositional benchmark, Sec. 3 and Tab. 2).

A Winoground item is two images (I0, I1) and two captions (C0, C1) with the same words in another order; C0
describes I0 and C1 describes I1. With s(c, i) the cosine similarity of caption and image embeddings:

* **text score**: s(C0, I0) > s(C1, I0) and s(C1, I1) > s(C0, I1) (each image picks its caption);
* **image score**: s(C0, I0) > s(C0, I1) and s(C1, I1) > s(C1, I0) (each caption picks its image);
* **group score**: both.

Inequalities are **strict** (a tie is wrong) and computed in float64. The dataset side and the metric side are
separate, as in :mod:`concrete_jungle.evaluation.sugarcrepe` and the suite contract
(:mod:`concrete_jungle.evaluation.suite`):

* readers: :func:`read_winoground_hf` (the Hugging Face release: ``data/test-*.parquet`` or the original
  ``examples.jsonl`` + ``images/``), :func:`read_winoground_tags` (``winoground_meta.csv`` and Diwan et al.
  2022's per-id tags) and the scene world's generator
  (:func:`concrete_jungle.corpus.scene_world.winoground.generate_winoground`);
* :func:`prepare_winoground` writes the prepared suite folder: ``suite.json`` (:func:`~.suite.write_suite`:
  ``{"suite": "winoground", "available", "reason", "images", "texts", "source", "n_items", "items_file":
  "items.json", "tag_counts": {family: {label: n}}}``) and ``items.json`` (``{"suite": "winoground", "source",
  "items": [{"id", "image_0", "image_1", "caption_0", "caption_1", "tags": {family: [label, ...]}}, ...]}``;
  scene-world items also keep ``scene_0`` / ``scene_1``);
* metrics: :func:`winoground_scores` (per-item booleans) and :func:`summarize_winoground` (fractions overall
  and per tag); :func:`score_winoground` ties them to an :class:`~.suite.EmbeddingCache`.

Tag families an item may carry (each a list of labels; an item counts in every group it lists):
``collapsed_tag`` (Relation / Object / Both), ``tag`` (the fine linguistic tag as released, e.g. "Noun",
"Adjective-Color", "Scope, Noun, Preposition"), ``secondary_tag`` (split at commas: Symbolic / Series /
Pragmatics / Morpheme-Level), ``num_main_preds`` ("1" / "2") and ``diwan`` (Diwan et al. 2022: "Non Minimal",
"Visually Difficult", ..., or "No Tag" for an item with none).
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from concrete_jungle.evaluation.suite import EmbeddingCache, check_embeddings, read_suite, unavailable, write_suite
from concrete_jungle.io import atomic_write, check_image, confined_path, read_json, read_jsonl, write_json
from concrete_jungle.params import WinogroundParams, WorldConfig

__all__ = [
    "SUITE",
    "ITEMS_FILE",
    "TAG_FAMILIES",
    "NO_DIWAN_TAG",
    "winoground_scores",
    "summarize_winoground",
    "read_winoground_hf",
    "read_winoground_tags",
    "prepare_winoground",
    "score_winoground",
]

SUITE = "winoground"
#: The item file of a prepared Winoground folder (beside ``suite.json``).
ITEMS_FILE = "items.json"
#: Tag families, in the order results list them.
TAG_FAMILIES = ("collapsed_tag", "tag", "secondary_tag", "num_main_preds", "diwan")
#: The ``diwan`` label of an item Diwan et al. (2022) gave no tag.
NO_DIWAN_TAG = "No Tag"
_SCORES = ("text", "image", "group")
_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


# ------------------------------------------------------------------------------------------------
# metrics
# ------------------------------------------------------------------------------------------------
def winoground_scores(img0: np.ndarray, img1: np.ndarray, cap0: np.ndarray, cap1: np.ndarray) -> dict[str, np.ndarray]:
    """Per-item Winoground text, image and group scores (Thrush et al. 2022; paper Sec. 3, Tab. 2).

    Args:
        img0, img1: ``[M, D]`` embeddings of each item's image 0 and image 1 (any positive scale: rows are
            L2-normalised here, so similarities are cosines).
        cap0, cap1: ``[M, D]`` embeddings of caption 0 and caption 1.

    Returns:
        ``{"text", "image", "group"}``, each a bool array ``[M]``: text = s(c0,i0) > s(c1,i0) and
        s(c1,i1) > s(c0,i1); image = s(c0,i0) > s(c0,i1) and s(c1,i1) > s(c1,i0); group = text and image.
        Cosines are taken in float64 and every inequality is strict (a tie is wrong).

    Raises:
        ValueError: an input is not 2-D, holds NaN / Inf or a zero row (:func:`~.suite.check_embeddings`), or the
            four shapes differ.
    """
    names = ("img0", "img1", "cap0", "cap1")
    arrays = [np.asarray(x) for x in (img0, img1, cap0, cap1)]
    shapes = [a.shape for a in arrays]
    i0, i1, c0, c1 = (check_embeddings(f"winoground {n}", a) for n, a in zip(names, arrays))
    if len(set(shapes)) != 1:
        raise ValueError(f"winoground: img0, img1, cap0, cap1 must share shape [M, D], got {shapes}")
    s00 = np.einsum("md,md->m", c0, i0)  # s(c0, i0)
    s01 = np.einsum("md,md->m", c0, i1)  # s(c0, i1)
    s10 = np.einsum("md,md->m", c1, i0)  # s(c1, i0)
    s11 = np.einsum("md,md->m", c1, i1)  # s(c1, i1)
    text = (s00 > s10) & (s11 > s01)
    image = (s00 > s01) & (s11 > s10)
    return {"text": text, "image": image, "group": text & image}


def _fractions(scores: Mapping[str, np.ndarray], mask: np.ndarray) -> dict:
    n = int(mask.sum())
    return {**{k: float(scores[k][mask].sum()) / n for k in _SCORES}, "n": n}


def _labels(entry: Any, family: str, index: int) -> list[str]:
    if isinstance(entry, str):
        entry = [entry]
    if not isinstance(entry, (list, tuple)) or not all(isinstance(x, str) and x for x in entry):
        raise ValueError(f"summarize_winoground: tags[{family!r}][{index}] must be a label or a list of non-empty "
                         f"labels, got {entry!r}")
    return list(dict.fromkeys(entry))


def summarize_winoground(scores: Mapping[str, np.ndarray | Sequence[bool]],
                         tags: Mapping[str, Sequence[str | Sequence[str]]] | None = None) -> dict:
    """Text, image and group scores as fractions of items, overall and per tag value (paper Sec. 3, Tab. 2).

    Args:
        scores: :func:`winoground_scores`' dict: ``"text"``, ``"image"``, ``"group"`` -> bool ``[M]``.
        tags: tag family (e.g. ``"collapsed_tag"``, ``"diwan"``) -> per-item labels, aligned with the score
            arrays (length M); an entry is one label or a list of labels (the item counts in each group; an
            empty list counts in none). None: overall only.

    Returns:
        ``{"text": f, "image": f, "group": f, "n": M, "by_tag": {family: {label: {"text", "image", "group",
        "n"}}}}`` with fractions in [0, 1] (finite floats) and labels sorted; ``by_tag`` is ``{}`` without tags.

    Raises:
        ValueError: no items (a fraction of none is undefined), a score missing / not 1-D / of another length,
            group not equal to text and image, or a tag family of the wrong length / with a malformed entry
            (naming the family and the item index).
    """
    arrs = {}
    for k in _SCORES:
        if k not in scores:
            raise ValueError(f"summarize_winoground: scores lack {k!r}")
        a = np.asarray(scores[k])
        if a.ndim != 1 or (a.size and a.dtype != np.bool_):
            raise ValueError(f"summarize_winoground: scores[{k!r}] must be a 1-D bool array, got "
                             f"{a.dtype} {a.shape}")
        arrs[k] = a.astype(bool)
    m = len(arrs["text"])
    if any(len(a) != m for a in arrs.values()):
        raise ValueError(f"summarize_winoground: score lengths differ: {[len(a) for a in arrs.values()]}")
    if m == 0:
        raise ValueError("summarize_winoground: no items; the scores of an empty suite are undefined")
    if not np.array_equal(arrs["group"], arrs["text"] & arrs["image"]):
        raise ValueError("summarize_winoground: scores['group'] is not scores['text'] & scores['image']")
    out = {**_fractions(arrs, np.ones(m, dtype=bool)), "by_tag": {}}
    for family, entries in (tags or {}).items():
        if isinstance(entries, str) or len(entries) != m:
            raise ValueError(f"summarize_winoground: tags[{family!r}] must list one entry per item ({m}), got "
                             f"{len(entries) if not isinstance(entries, str) else 'a string'}")
        members: dict[str, list[int]] = {}
        for i, entry in enumerate(entries):
            for label in _labels(entry, family, i):
                members.setdefault(label, []).append(i)
        groups = {}
        for label in sorted(members):
            mask = np.zeros(m, dtype=bool)
            mask[members[label]] = True
            groups[label] = _fractions(arrs, mask)
        out["by_tag"][str(family)] = groups
    return out


# ------------------------------------------------------------------------------------------------
# readers
# ------------------------------------------------------------------------------------------------
def _blank(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip())


def _split_labels(v: Any) -> list[str]:
    if _blank(v):
        return []
    return [p.strip() for p in str(v).split(",") if p.strip()]


def _item_id(raw: Any, where: str) -> str:
    if _blank(raw) or isinstance(raw, bool):
        raise ValueError(f"{where}: missing id")
    if isinstance(raw, (float, np.floating)):
        if not float(raw).is_integer():
            raise ValueError(f"{where}: id {raw!r} is not an integer")
        raw = int(raw)
    if isinstance(raw, (int, np.integer)):
        return str(int(raw))
    return str(raw).strip()


def _release_tags(rec: Mapping[str, Any], what: str) -> dict[str, list[str]]:
    """The tag families a release record carries (absent fields give no family)."""
    tags: dict[str, list[str]] = {}
    for key in ("collapsed_tag", "tag"):
        if key in rec and not _blank(rec[key]):
            if not isinstance(rec[key], str):
                raise ValueError(f"{what}: {key} must be a string, got {rec[key]!r}")
            tags[key] = [rec[key].strip()]
    if "secondary_tag" in rec:
        tags["secondary_tag"] = _split_labels(rec["secondary_tag"])
    if "num_main_preds" in rec and not _blank(rec["num_main_preds"]):
        v = rec["num_main_preds"]
        try:
            if isinstance(v, bool) or float(v) != int(float(v)):
                raise ValueError
            tags["num_main_preds"] = [str(int(float(v)))]
        except (TypeError, ValueError):
            raise ValueError(f"{what}: num_main_preds {v!r} is not an integer") from None
    return tags


def _caption(rec: Mapping[str, Any], key: str, what: str) -> str:
    v = rec.get(key)
    if not isinstance(v, str) or not v.strip():
        raise ValueError(f"{what}: {key} must be a non-empty string, got {v!r}")
    return v


def _write_png(data: bytes, path: Path, what: str) -> None:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            fmt = im.format
            im.load()
            rgb = None if fmt == "PNG" else im.convert("RGB")
    except Exception as err:  # PIL raises OSError, SyntaxError, ValueError, ... for broken bytes
        raise ValueError(f"{what}: image bytes do not decode ({err})") from err
    with atomic_write(path, "wb") as fh:
        if rgb is None:
            fh.write(data)  # already a PNG: kept byte for byte
        else:
            rgb.save(fh, format="PNG")


def _require_decodable(path: Path, what: str) -> None:
    """Decode ``path`` now (:func:`concrete_jungle.io.check_image`) rather than fail the whole model's encoding later
    (issue 22); Winoground is a fixed set of 400 items, so a damaged image is an error naming the item, not a skip.

    Raises:
        ValueError: naming ``what``, the file and the reason (``image_unreadable``, ``image_too_large``)."""
    reason = check_image(path)
    if reason:
        raise ValueError(f"{what}: image file {path} does not decode ({reason})")


def _parquet_image(cell: Any, folder: Path, image_dir: Path | None, name: str, what: str) -> str:
    """The path of one parquet image cell (``{"bytes", "path"}``): bytes are written to ``image_dir/name``."""
    if not isinstance(cell, Mapping):
        raise ValueError(f"{what}: expected an image dict with 'bytes' and/or 'path', got {type(cell).__name__}")
    data, rel = cell.get("bytes"), cell.get("path")
    if isinstance(data, (bytes, bytearray, memoryview)) and len(data):
        if image_dir is None:
            raise ValueError(f"{what}: the image is given as bytes but no image_dir was given to write it to")
        path = confined_path(image_dir, name, what)
        _write_png(bytes(data), path, what)
        return str(path)
    if isinstance(rel, str) and rel.strip():
        path = confined_path(folder, rel, what)
        if not path.is_file():
            raise FileNotFoundError(f"{what}: image file not found: {path}")
        _require_decodable(path, what)
        return str(path)
    raise ValueError(f"{what}: the image dict has neither bytes nor a path")


def _parquet_files(folder: Path) -> list[Path]:
    return sorted((folder / "data").glob("test-*.parquet"))


def _read_parquet_rows(files: Sequence[Path]) -> list[dict]:
    import pandas as pd

    try:
        frames = [pd.read_parquet(f) for f in files]
    except ImportError as err:
        raise ImportError(f"reading Winoground's {files[0]} needs pyarrow or fastparquet ({err}); install one or "
                          "use the examples.jsonl + images/ layout") from err
    return [row for df in frames for row in df.to_dict(orient="records")]


def _hf_layout(folder: Path) -> str | None:
    """``"parquet"``, ``"jsonl"`` or None (neither ``data/test-*.parquet`` nor ``examples.jsonl``)."""
    if _parquet_files(folder):
        return "parquet"
    if (folder / "examples.jsonl").is_file():
        return "jsonl"
    return None


def read_winoground_hf(folder: str | os.PathLike, image_dir: str | os.PathLike | None = None) -> list[dict]:
    """Read Winoground as released on Hugging Face (facebook/winoground; paper Sec. 3, Tab. 2).

    Two layouts (the first found wins):

    * ``folder/data/test-*.parquet``: columns id, image_0, image_1 (dicts with ``bytes`` and / or ``path``),
      caption_0, caption_1, tag, secondary_tag, num_main_preds, collapsed_tag. Image bytes are written as PNG
      (PNG bytes verbatim, other formats re-encoded as RGB PNG) to ``image_dir/ex_<id>_img_<k>.png``; an image
      given by path only is looked up relative to ``folder``. Needs pyarrow or fastparquet.
    * ``folder/examples.jsonl`` + ``folder/images/``: the original release, whose ``image_0`` / ``image_1`` name
      files without extension (``ex_0_img_0`` -> ``images/ex_0_img_0.png``; a name ending in .png / .jpg / .jpeg
      is used as it is).

    Args:
        folder: the release folder.
        image_dir: where parquet image bytes are written (created if needed); unused for the JSONL layout.

    Returns:
        The items in file order: ``{"id": str, "image_0": path, "image_1": path, "caption_0", "caption_1",
        "tags": {family: [label, ...]}}`` with the families the release carries (``collapsed_tag``, ``tag``,
        ``secondary_tag`` split at commas, ``num_main_preds`` as a string). Paths are strings in the caller's
        spelling (``folder`` / ``image_dir`` joined with the name).

    Raises:
        FileNotFoundError: ``folder`` is not a folder, holds neither layout, or an item's image file is missing
            (naming the item id).
        ImportError: the parquet layout without pyarrow / fastparquet.
        ValueError: naming the item id (or row number): a missing or duplicate id, an empty / non-string caption,
            a malformed image field (no bytes and no path, bytes that do not decode, bytes without
            ``image_dir``), an image path that is absolute or escapes its root (``..``, a symlink out), a
            malformed tag.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"Winoground folder not found: {folder}")
    layout = _hf_layout(folder)
    if layout is None:
        raise FileNotFoundError(f"Winoground folder {folder} holds neither data/test-*.parquet nor examples.jsonl")
    if layout == "parquet":
        rows = _read_parquet_rows(_parquet_files(folder))
        if image_dir is not None:
            Path(image_dir).mkdir(parents=True, exist_ok=True)
    else:
        rows = read_jsonl(folder / "examples.jsonl")
    items, seen = [], set()
    for n, rec in enumerate(rows):
        if not isinstance(rec, Mapping):
            raise ValueError(f"Winoground {layout} row {n}: expected an object, got {type(rec).__name__}")
        iid = _item_id(rec.get("id"), f"Winoground {layout} row {n}")
        what = f"Winoground item {iid!r}"
        if iid in seen:
            raise ValueError(f"{what}: duplicate id")
        seen.add(iid)
        paths = []
        for k in (0, 1):
            cell = rec.get(f"image_{k}")
            here = f"{what} image_{k}"
            if layout == "parquet":
                paths.append(_parquet_image(cell, folder, None if image_dir is None else Path(image_dir),
                                            f"ex_{iid}_img_{k}.png", here))
                continue
            if not isinstance(cell, str) or not cell.strip():
                raise ValueError(f"{here}: expected an image name, got {cell!r}")
            name = cell if cell.lower().endswith(_IMAGE_SUFFIXES) else cell + ".png"
            path = confined_path(folder / "images", name, here)
            if not path.is_file():
                raise FileNotFoundError(f"{here}: image file not found: {path}")
            _require_decodable(path, here)
            paths.append(str(path))
        items.append({"id": iid, "image_0": paths[0], "image_1": paths[1],
                      "caption_0": _caption(rec, "caption_0", what), "caption_1": _caption(rec, "caption_1", what),
                      "tags": _release_tags(rec, what)})
    return items


def read_winoground_tags(meta_csv: str | os.PathLike | None,
                         diwan_json: str | os.PathLike | None = None) -> dict[str, dict]:
    """Per-id captions and tags of Winoground (paper Sec. 3, Tab. 2): ``winoground_meta.csv`` (id, caption_0,
    caption_1, tag, secondary_tag, collapsed_tag, num_main_preds; 400 items) and / or Diwan et al. (2022)'s
    ``diwan_new_tag_assignments.json`` (``{"<id>": [tag, ...]}``).

    Returns:
        ``{id: {"caption_0": str | None, "caption_1": str | None, "tags": {family: [label, ...]}}}`` with the
        families ``collapsed_tag``, ``tag``, ``secondary_tag`` (split at commas), ``num_main_preds`` from the CSV
        and ``diwan`` from the JSON (``[NO_DIWAN_TAG]`` for an id with an empty list). Ids only in the JSON have
        no captions (None).

    Raises:
        FileNotFoundError: a given file is missing. ValueError: both arguments None, a CSV without the columns
            id / caption_0 / caption_1, a row with a missing / duplicate id or empty caption, a malformed tag
            (naming the id), or a JSON that is not ``{id: [str, ...]}`` (naming the id).
    """
    if meta_csv is None and diwan_json is None:
        raise ValueError("read_winoground_tags: give meta_csv and / or diwan_json")
    out: dict[str, dict] = {}
    if meta_csv is not None:
        path = Path(meta_csv)
        if not path.is_file():
            raise FileNotFoundError(f"Winoground meta CSV not found: {path}")
        with open(path, encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in ("id", "caption_0", "caption_1") if c not in (reader.fieldnames or [])]
            if missing:
                raise ValueError(f"{path}: lacks the columns {missing}")
            for n, row in enumerate(reader):
                iid = _item_id(row.get("id"), f"{path} row {n}")
                what = f"{path}: item {iid!r}"
                if iid in out:
                    raise ValueError(f"{what}: duplicate id")
                out[iid] = {"caption_0": _caption(row, "caption_0", what),
                            "caption_1": _caption(row, "caption_1", what), "tags": _release_tags(row, what)}
    if diwan_json is not None:
        data = read_json(diwan_json)
        if not isinstance(data, dict):
            raise ValueError(f"{diwan_json}: expected {{id: [tag, ...]}}, got {type(data).__name__}")
        for iid, labels in data.items():
            if not isinstance(labels, list) or not all(isinstance(x, str) and x.strip() for x in labels):
                raise ValueError(f"{diwan_json}: item {iid!r}: expected a list of tag strings, got {labels!r}")
            rec = out.setdefault(str(iid), {"caption_0": None, "caption_1": None, "tags": {}})
            rec["tags"]["diwan"] = [x.strip() for x in labels] or [NO_DIWAN_TAG]
    return out


# ------------------------------------------------------------------------------------------------
# prepare / score (the suite contract)
# ------------------------------------------------------------------------------------------------
def _merge_tags(items: list[dict], per_id: Mapping[str, dict], source: str) -> None:
    """Add the tag families of ``per_id`` an item lacks; a caption that disagrees is an error."""
    for it in items:
        rec = per_id.get(it["id"])
        if rec is None:
            continue
        for k in ("caption_0", "caption_1"):
            if rec.get(k) is not None and rec[k] != it[k]:
                raise ValueError(f"Winoground item {it['id']!r}: {k} {it[k]!r} differs from {source}'s {rec[k]!r}")
        for family, labels in rec["tags"].items():
            it["tags"].setdefault(family, list(labels))


def _tag_counts(items: Sequence[dict]) -> dict[str, dict[str, int]]:
    counts: dict[str, Counter] = {}
    for it in items:
        for family, labels in it["tags"].items():
            counts.setdefault(family, Counter()).update(labels)
    order = [f for f in TAG_FAMILIES if f in counts] + sorted(f for f in counts if f not in TAG_FAMILIES)
    return {f: dict(sorted(counts[f].items())) for f in order}


def _write_prepared(out_dir: Path, source: str, items: list[dict], **extra: Any) -> dict:
    write_json(out_dir / ITEMS_FILE, {"suite": SUITE, "source": source, "items": items})
    return write_suite(out_dir, {
        "suite": SUITE, "available": True, "reason": None,
        "images": [it[k] for it in items for k in ("image_0", "image_1")],
        "texts": [it[k] for it in items for k in ("caption_0", "caption_1")],
        "source": source, "n_items": len(items), "items_file": ITEMS_FILE, "tag_counts": _tag_counts(items),
        **extra,
    })


def prepare_winoground(cfg: WinogroundParams, world_cfg: WorldConfig | None, out_dir: str | os.PathLike, seed: int,
                       exclude_signatures: Iterable[str] = frozenset()) -> dict:
    """Write the prepared Winoground suite folder (paper Sec. 3, Tab. 2; no model involved).

    By ``cfg.source`` (``evaluate.winoground.source``):

    * ``none``: ``suite.json`` marks the suite unavailable, with the reason.
    * ``hf``: :func:`read_winoground_hf` on ``cfg.dir`` (parquet image bytes are written to ``out_dir/images/``);
      ``cfg.meta_csv`` / ``cfg.diwan_tags`` (:func:`read_winoground_tags`), when given, add the tag families the
      release lacks and must agree with its captions. A folder that is absent or holds neither layout makes the
      suite unavailable, naming ``evaluate.winoground.dir``.
    * ``scene_world``: ``cfg.n_items`` items of
      :func:`~concrete_jungle.corpus.scene_world.winoground.generate_winoground` on ``world_cfg`` with ``seed``,
      images in ``out_dir/images/``, never on a scene whose signature is in ``exclude_signatures`` (the
      corpus's). Its tags: ``collapsed_tag``, ``tag``, ``num_main_preds``.

    Files: ``out_dir/suite.json`` (:func:`~.suite.write_suite`: ``images`` = every image path, ``texts`` = every
    caption, plus ``source``, ``n_items``, ``items_file``, ``tag_counts``) and, when available,
    ``out_dir/items.json`` = ``{"suite", "source", "items": [{"id", "image_0", "image_1", "caption_0",
    "caption_1", "tags": {family: [label, ...]}, ...}]}`` (image paths as the embed stage encodes them).

    Returns:
        The ``suite.json`` dict written.

    Raises:
        ValueError: ``scene_world`` without ``world_cfg``, or a malformed release / tag file (naming the item);
        ImportError: a parquet release without pyarrow / fastparquet; FileNotFoundError: a release item whose
        image is missing, or a given ``meta_csv`` / ``diwan_tags`` file that is missing; errors of the
        generator propagate.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / ITEMS_FILE).unlink(missing_ok=True)  # never leave the items of an earlier preparation behind
    if cfg.source == "none":
        return write_suite(out_dir, unavailable(SUITE, "evaluate.winoground.source is 'none' (set it to 'hf' with "
                                                       "evaluate.winoground.dir, or to 'scene_world')"))
    if cfg.source == "scene_world":
        if world_cfg is None:
            raise ValueError("prepare_winoground: evaluate.winoground.source 'scene_world' needs the world config")
        from concrete_jungle.corpus.scene_world.winoground import generate_winoground

        raw = generate_winoground(world_cfg, cfg.n_items, out_dir, seed, exclude_signatures=exclude_signatures)
        items = [{"id": r["id"], "image_0": r["image_0"], "image_1": r["image_1"], "caption_0": r["caption_0"],
                  "caption_1": r["caption_1"],
                  "tags": {"collapsed_tag": [r["collapsed_tag"]], "tag": [r["tag"]],
                           "num_main_preds": [str(r["num_main_preds"])]},
                  "scene_0": r["scene_0"], "scene_1": r["scene_1"]} for r in raw]
        return _write_prepared(out_dir, "scene_world", items, seed=int(seed))
    folder = Path(cfg.dir)
    if not folder.is_dir():
        return write_suite(out_dir, unavailable(SUITE, f"evaluate.winoground.dir = {cfg.dir!r}: folder not found "
                                                       "(Winoground's images are gated on Hugging Face)"))
    layout = _hf_layout(folder)
    if layout is None:
        return write_suite(out_dir, unavailable(SUITE, f"evaluate.winoground.dir = {cfg.dir!r} holds neither "
                                                       "data/test-*.parquet nor examples.jsonl + images/"))
    items = read_winoground_hf(folder, image_dir=out_dir / "images")
    if not items:
        return write_suite(out_dir, unavailable(SUITE, f"evaluate.winoground.dir = {cfg.dir!r}: the release lists "
                                                       "no item"))
    if cfg.meta_csv is not None or cfg.diwan_tags is not None:
        _merge_tags(items, read_winoground_tags(cfg.meta_csv, cfg.diwan_tags),
                    " / ".join(str(p) for p in (cfg.meta_csv, cfg.diwan_tags) if p is not None))
    return _write_prepared(out_dir, f"hf:{layout}", items, dir=str(cfg.dir))


def score_winoground(suite_dir: str | os.PathLike, cache: EmbeddingCache) -> dict:
    """Score a prepared Winoground folder from precomputed embeddings (paper Sec. 3, Tab. 2; no torch).

    Args:
        suite_dir: a folder written by :func:`prepare_winoground`.
        cache: the model's embeddings of the suite's images and captions (cosine space; rows are re-normalised).

    Returns:
        ``{"available": True, "reason": None, "metrics": {"text", "image", "group": fraction in [0, 1],
        "by_tag": {family: {label: {"text", "image", "group"}}}}, "n": {"items": M, "<family>/<label>": n, ...},
        "verdicts": {"text": {id: bool}, "image": {id: bool}, "group": {id: bool}}}`` (:func:`summarize_winoground`
        over every tag family the items carry), ready for :func:`~.suite.suite_result`. An unavailable suite
        gives ``available: False``, its ``reason`` and empty ``metrics`` / ``n`` / ``verdicts`` (as the retrieval
        suite does), nothing being read from ``cache``.

    Raises:
        FileNotFoundError: the folder was never prepared or lacks ``items.json``.
        ValueError: an available suite with no item, or embeddings that are malformed / of different widths;
        KeyError: an image or caption the cache never encoded.
    """
    suite_dir = Path(suite_dir)
    meta = read_suite(suite_dir)
    if not meta.get("available"):
        return {"available": False, "reason": meta.get("reason") or "unavailable", "metrics": {}, "n": {},
                "verdicts": {}}
    items = read_json(suite_dir / meta.get("items_file", ITEMS_FILE))["items"]
    if not items:
        raise ValueError(f"score_winoground: {suite_dir} lists no item")
    dim = cache.dim
    emb = {}
    for key in ("image_0", "image_1", "caption_0", "caption_1"):
        keys = [it[key] for it in items]
        rows = cache.image(keys) if key.startswith("image") else cache.text(keys)
        emb[key] = check_embeddings(f"winoground {key}", rows, dim)
    scores = winoground_scores(emb["image_0"], emb["image_1"], emb["caption_0"], emb["caption_1"])
    families = [f for f in TAG_FAMILIES if any(f in it["tags"] for it in items)]
    families += sorted({f for it in items for f in it["tags"]} - set(families))
    tags = {f: [it["tags"].get(f, []) for it in items] for f in families}
    summary = summarize_winoground(scores, tags)
    metrics = {**{k: summary[k] for k in _SCORES},
               "by_tag": {f: {label: {k: g[k] for k in _SCORES} for label, g in groups.items()}
                          for f, groups in summary["by_tag"].items()}}
    n = {"items": summary["n"]}
    n.update({f"{f}/{label}": g["n"] for f, groups in summary["by_tag"].items() for label, g in groups.items()})
    ids = [it["id"] for it in items]
    verdicts = {k: {iid: bool(v) for iid, v in zip(ids, scores[k].tolist())} for k in _SCORES}
    return {"available": True, "reason": None, "metrics": metrics, "n": n, "verdicts": verdicts}
