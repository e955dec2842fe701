"""Held-out hard-negative pairs: ConcreteBatch pairs of anchors never trained on, scored like SugarCrepe.

The corpus holds out a share of its anchors from every training run (:mod:`concrete_jungle.corpus.splits`);
ConcretePlant still makes their hard negatives (``data/<p>/concreteplant/<d>/heldout.jsonl``). On these pairs a
model is right (I2T) when the anchor image is strictly closer, in cosine, to the anchor caption t_i than to its
rewrite t'_i, and right (T2I) when the anchor caption is strictly closer to the anchor image v_i than to the
hard-negative image v'_i. Accuracies are reported per ConcreteBatch dataset, per keyword type (attribute /
relation / object) and per concreteness bin of c_i (Brysbaert 1-5): a more sensitive figure than the public
benchmarks for what hard-negative training teaches (``../shared/notes/measuring-small-effects.md``; paper Sec. 2.1's
hypothesis that concrete keywords make more distinguishable negatives).

**Text-side pairs** (a real profile with ``text_side.captions``, e.g. COCO val2017: thousands of images whose
captions exist offline but whose pixels do not). For every image of the captions file that the corpus does not hold
(so no model trained on it), ConcretePlant's text side (stage ``text_side``) rewrote the longest caption t_i into
t'_i; a second caption of the same image, the longest of the others, is the positive p_i. A model is right (TOT,
SugarCrepe++'s text-only direction) when cos(g(p_i), g(t_i)) > cos(g(p_i), g(t'_i)): the text tower, which the LiT
base trains, must keep the rewrite further from a paraphrase than the anchor. These pairs are the result suite
``heldout_text`` and give the positive control thousands of pairs where the held-out image pairs number tens
(``evaluate.heldout.max_text_pairs`` caps them).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from concrete_jungle.concreteness import is_rating
from concrete_jungle.evaluation.suite import EmbeddingCache, check_embeddings, unavailable, write_suite
from concrete_jungle.io import read_json, read_jsonl, write_json

__all__ = ["prepare_heldout", "heldout_verdicts", "bin_label", "summarize_heldout", "score_heldout",
           "coco_text_pairs", "text_verdicts", "score_heldout_text", "TEXT_ITEMS"]

_FIELDS = ("anchor_id", "image", "caption", "negative_caption", "type", "c_i")
_TEXT_FIELDS = ("anchor_id", "image", "caption", "positive_caption", "negative_caption", "type", "c_i", "keyword",
                "positive_names_keyword")
#: The text-side pairs' file of a prepared held-out suite (``{dataset: [text pair]}``).
TEXT_ITEMS = "text_items.json"


def coco_text_pairs(captions_json: str | os.PathLike, rewrites: Mapping[str, Sequence[Mapping]],
                    exclude_images: set[str], max_pairs: int | None = None) -> tuple[dict[str, list[dict]], dict]:
    """The text-side held-out pairs of every dataset: each rewrite of an image the corpus does not hold, with a
    second caption of that image as its positive.

    Args:
        captions_json: the COCO captions file the rewrites were made from (``images`` + ``annotations``).
        rewrites: dataset -> ConcreteBatch records of the text side (``anchor_id``, ``image`` file name,
            ``caption`` = the longest caption, ``negative_caption``, ``type``, ``c_i``; stage ``text_side``).
        exclude_images: file names (no folder) of the corpus' images: their captions were trained on.
        max_pairs: keep the first so many eligible images in image-id order (one pool of images for every dataset;
            each dataset keeps the rewrites its sampling and rewriter accepted among them, so its count is at most
            this and differs between datasets); None: all.

    The positive is the longest other caption, whether or not it names the rewritten keyword (a caption that names it
    would make TOT a word-overlap test); ``positive_names_keyword`` records whether it does (whole word, any case), so
    a reader can split the verdicts by it. Captions that differ from the anchor only in case, punctuation or spacing
    are not a second caption.

    Returns:
        ``(pairs, stats)``: ``{dataset: [{"anchor_id", "image", "caption", "positive_caption",
        "negative_caption", "type", "c_i", "keyword", "positive_names_keyword"}]}`` and ``{"n_images", "skipped":
        {reason: count}}`` (reasons ``in_corpus``, ``no_second_caption``, ``beyond_max_pairs``, counted over images).

    Raises:
        ValueError: a file without ``images`` / ``annotations``, or an annotation of an image it does not list; a
            rewrite of an image the file does not list, or whose caption is not that image's longest caption
            (rewrites of another file, named).
    """
    from concrete_jungle.corpus.loaders import select_anchor

    data = read_json(captions_json)
    if not isinstance(data, dict) or "images" not in data or "annotations" not in data:
        raise ValueError(f"{captions_json}: not a COCO captions file (needs 'images' and 'annotations')")
    by_id = {im["id"]: im["file_name"] for im in data["images"]}
    caps: dict[str, list[str]] = {}
    for a in data["annotations"]:
        if a.get("image_id") not in by_id:
            raise ValueError(f"{captions_json}: annotation {a.get('id')} names image_id {a.get('image_id')}, "
                             f"which 'images' does not list")
        caps.setdefault(by_id[a["image_id"]], []).append(a["caption"].strip())
    skipped = {"in_corpus": 0, "no_second_caption": 0, "beyond_max_pairs": 0}
    positive: dict[str, str] = {}
    for name in (by_id[i] for i in sorted(by_id) if by_id[i] in caps):
        if name in exclude_images:
            skipped["in_corpus"] += 1
            continue
        anchor = select_anchor(caps[name])
        others = [c for c in caps[name] if _norm(c) != _norm(anchor)]  # a repeat of the anchor is no second caption
        if not others:
            skipped["no_second_caption"] += 1
            continue
        if max_pairs is not None and len(positive) >= max_pairs:
            skipped["beyond_max_pairs"] += 1
            continue
        positive[name] = select_anchor(others)
    pairs: dict[str, list[dict]] = {}
    for dataset, records in rewrites.items():
        rows = []
        for r in records:
            name = Path(r["image"]).name
            if name not in caps:
                raise ValueError(f"text-side rewrite {r.get('anchor_id')} of {dataset}: image {name} is not in "
                                 f"{captions_json}")
            if r["caption"] != select_anchor(caps[name]):
                raise ValueError(f"text-side rewrite {r.get('anchor_id')} of {dataset}: its caption is not the longest "
                                 f"caption of {name} in {captions_json} (rewrites of another file?)")
            if name in positive:
                word = re.compile(rf"\b{re.escape(_norm(r['keyword']))}\b")
                rows.append({"anchor_id": str(r["anchor_id"]), "image": name, "caption": r["caption"],
                             "positive_caption": positive[name], "negative_caption": r["negative_caption"],
                             "type": r["type"], "c_i": float(r["c_i"]), "keyword": r["keyword"],
                             "positive_names_keyword": bool(word.search(_norm(positive[name])))})
        pairs[dataset] = rows
    return pairs, {"n_images": len(positive), "skipped": skipped}


def _norm(text: str) -> str:
    """Lower case, punctuation dropped, spaces collapsed: two captions equal under it say the same thing."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def _check_c_i(c, where: str) -> None:
    """Refuse a pair's concreteness ``c`` unless it is a finite number in [1, 5] (Brysbaert's scale, which
    ``evaluate.heldout.c_bins`` covers), naming ``where``."""
    if not is_rating(c):
        raise ValueError(f"{where} has c_i {c!r}: a pair's concreteness must be a finite rating in [1, 5]")


def prepare_heldout(concreteplant_dirs: Mapping[str, str | os.PathLike], out_dir: str | os.PathLike,
                    text_pairs: Mapping[str, Sequence[Mapping]] | None = None, text_stats: Mapping | None = None
                    ) -> dict:
    """Gather the held-out pairs of every ConcreteBatch dataset into a prepared suite folder (``items.json``:
    ``{dataset: [pair, ...]}``; ``suite.json`` listing every image and caption), and the text-side pairs, if any,
    into :data:`TEXT_ITEMS`.

    Args:
        concreteplant_dirs: dataset (``hc`` / ``lc`` / ``wo``) -> its ConcretePlant output folder (with
            ``heldout.jsonl``).
        out_dir: the prepared folder.
        text_pairs: ``{dataset: [text pair]}`` of :func:`coco_text_pairs`, or None (no text side: no
            :data:`TEXT_ITEMS` file); ``text_stats``: its statistics, recorded in ``suite.json``.

    Returns:
        The ``suite.json`` dict; unavailable (with the reason) when no dataset has a held-out pair
        (``corpus.heldout_fraction: 0``) and there is no text-side pair.

    Raises:
        FileNotFoundError: a dataset folder without ``heldout.jsonl``; ValueError: a pair or a text pair lacking a
            field, or whose ``c_i`` is not a finite concreteness in [1, 5] (file, pair and anchor named: issue 22;
            it used to fail at scoring, after every model was trained, naming neither).
    """
    items: dict[str, list[dict]] = {}
    for dataset, folder in concreteplant_dirs.items():
        path = Path(folder) / "heldout.jsonl"
        if not path.is_file():
            raise FileNotFoundError(f"held-out pairs not found: {path} (re-run concreteplant@{dataset})")
        pairs = read_jsonl(path)
        for k, pair in enumerate(pairs):
            missing = [f for f in _FIELDS if pair.get(f) is None]
            if missing:
                raise ValueError(f"{path}: pair {k} ({pair.get('anchor_id')}) lacks {missing}")
            _check_c_i(pair["c_i"], f"{path}: pair {k} ({pair.get('anchor_id')})")
        items[dataset] = [{**{f: p[f] for f in _FIELDS}, "negative_image": p.get("negative_image") or None}
                          for p in pairs]
    for d, ps in (text_pairs or {}).items():
        for k, p in enumerate(ps):
            missing = [f for f in _TEXT_FIELDS if p.get(f) is None]
            if missing:
                raise ValueError(f"text-side pair {k} ({p.get('anchor_id')}) of {d} lacks {missing}")
            _check_c_i(p["c_i"], f"text-side pair {k} ({p.get('anchor_id')}) of {d}")
    write_json(Path(out_dir) / "items.json", items)
    text_items = {d: [{f: p[f] for f in _TEXT_FIELDS} for p in ps] for d, ps in (text_pairs or {}).items()}
    if text_pairs is not None:
        write_json(Path(out_dir) / TEXT_ITEMS, text_items)
    if not any(items.values()) and not any(text_items.values()):
        return write_suite(out_dir, unavailable("heldout", "no held-out ConcreteBatch pair (corpus.heldout_fraction "
                                                "is 0, or every held-out anchor was skipped)"))
    pairs = [p for ps in items.values() for p in ps]
    text_side = [p for ps in text_items.values() for p in ps]
    images = [p["image"] for p in pairs] + [p["negative_image"] for p in pairs if p["negative_image"]]
    texts = [p["caption"] for p in pairs] + [p["negative_caption"] for p in pairs]
    texts += [t for p in text_side for t in (p["caption"], p["positive_caption"], p["negative_caption"])]
    meta = {"suite": "heldout", "available": True, "images": images, "texts": texts,
            "n_pairs": {d: len(ps) for d, ps in items.items()}}
    if text_pairs is not None:
        meta.update(n_text_pairs={d: len(ps) for d, ps in text_items.items()}, text_side=dict(text_stats or {}))
    return write_suite(out_dir, meta)


def heldout_verdicts(anchor_img, caption, negative_caption, negative_img=None) -> dict[str, np.ndarray]:
    """Per-pair verdicts in cosine space, strict (a tie is wrong).

    Args:
        anchor_img, caption, negative_caption: ``[M, D]`` embeddings of v_i, t_i, t'_i.
        negative_img: ``[M, D]`` embeddings of v'_i, or None (text-only hard negatives: no T2I verdict).

    Returns:
        ``{"i2t": bool [M] (cos(v, t) > cos(v, t')), "t2i": bool [M] (cos(t, v) > cos(t, v'))}`` (no ``t2i`` without
        ``negative_img``).

    Raises:
        ValueError: shapes that differ, NaN / Inf, zero rows.
    """
    v, t, tn = (check_embeddings(n, x) for n, x in (("anchor_img", anchor_img), ("caption", caption),
                                                     ("negative_caption", negative_caption)))
    if not (v.shape == t.shape == tn.shape):
        raise ValueError(f"held-out embeddings must share shape [M, D]; got {v.shape}, {t.shape}, {tn.shape}")
    out = {"i2t": (v * t).sum(1) > (v * tn).sum(1)}
    if negative_img is not None:
        vn = check_embeddings("negative_img", negative_img)
        if vn.shape != v.shape:
            raise ValueError(f"negative_img has shape {vn.shape}, expected {v.shape}")
        out["t2i"] = (t * v).sum(1) > (t * vn).sum(1)
    return out


def bin_label(c: float, edges: Sequence[float]) -> str:
    """The concreteness bin of ``c`` among ``edges`` (e.g. ``[1, 3, 4, 4.5, 5]`` -> ``"[4.0, 4.5)"``; the last bin is
    closed, ``"[4.5, 5.0]"``).

    Raises:
        ValueError: ``c`` outside ``[edges[0], edges[-1]]``.
    """
    if not edges[0] <= c <= edges[-1]:
        raise ValueError(f"concreteness {c} is outside the bins [{edges[0]}, {edges[-1]}]")
    k = min(int(np.searchsorted(edges, c, side="right")) - 1, len(edges) - 2)
    return f"[{float(edges[k])}, {float(edges[k + 1])}{']' if k == len(edges) - 2 else ')'}"


def summarize_heldout(pairs: Sequence[Mapping], verdicts: Mapping[str, np.ndarray], edges: Sequence[float]) -> dict:
    """Accuracies of one dataset's pairs: overall, by keyword type and by concreteness bin.

    Returns:
        ``{"i2t": acc, "t2i": acc?, "by_type": {type: {"i2t", "t2i"?, "n"}}, "by_c_bin": {bin: {...}}}``, one
        accuracy per direction of ``verdicts`` (``{"tot": ...}`` for text-side pairs), fractions in [0, 1];
        groups without a pair are left out.
    """
    def acc(mask: np.ndarray) -> dict:
        return {**{k: float(v[mask].mean()) for k, v in verdicts.items()}, "n": int(mask.sum())}

    types = np.array([p["type"] for p in pairs])
    bins = np.array([bin_label(float(p["c_i"]), edges) for p in pairs])
    whole = acc(np.ones(len(pairs), bool))
    return {**{k: v for k, v in whole.items() if k != "n"},
            "by_type": {t: acc(types == t) for t in ("attribute", "relation", "object") if (types == t).any()},
            "by_c_bin": {b: acc(bins == b) for b in sorted(set(bins.tolist()), key=lambda s: float(s[1:].split(",")[0]))}}


def score_heldout(suite_dir: str | os.PathLike, cache: EmbeddingCache, edges: Sequence[float]) -> dict:
    """Held-out accuracy of one model per dataset (:func:`summarize_heldout`).

    Returns:
        ``{"metrics": {dataset: summary}, "n": {dataset: pairs}, "verdicts": {dataset: {anchor_id: bool (I2T)}},
        "verdicts_extra": {"t2i": {dataset: {anchor_id: bool}}}}`` (``t2i`` only for datasets with negative images;
        the extra verdicts go to the verdict file beside ``verdicts``, for the positive control), or
        ``{"available": False, "reason"}`` when the suite holds no image pair (text-side pairs only).

    Raises:
        KeyError: an input the cache lacks.
    """
    items = read_json(Path(suite_dir) / "items.json")
    if not any(items.values()):
        return {"available": False, "reason": "no held-out image pair (corpus.heldout_fraction is 0, or every held-out "
                                              "anchor was skipped); the suite holds text-side pairs only"}
    metrics, n, verdicts, t2i = {}, {}, {}, {}
    for dataset, pairs in items.items():
        if not pairs:
            continue
        with_img = all(p["negative_image"] for p in pairs)
        v = heldout_verdicts(cache.image([p["image"] for p in pairs]), cache.text([p["caption"] for p in pairs]),
                             cache.text([p["negative_caption"] for p in pairs]),
                             cache.image([p["negative_image"] for p in pairs]) if with_img else None)
        metrics[dataset] = summarize_heldout(pairs, v, edges)
        n[dataset] = len(pairs)
        verdicts[dataset] = {p["anchor_id"]: bool(x) for p, x in zip(pairs, v["i2t"].tolist())}
        if "t2i" in v:
            t2i[dataset] = {p["anchor_id"]: bool(x) for p, x in zip(pairs, v["t2i"].tolist())}
    return {"metrics": metrics, "n": n, "verdicts": verdicts, "verdicts_extra": {"t2i": t2i}}


def text_verdicts(positive, caption, negative_caption) -> np.ndarray:
    """TOT verdicts of text-side pairs in cosine space, strict (a tie is wrong): bool ``[M]``, True where
    cos(g(p_i), g(t_i)) > cos(g(p_i), g(t'_i)).

    It is :func:`heldout_verdicts`' I2T rule with the positive caption in the anchor image's place (whose error
    messages name it ``anchor_img``).

    Args:
        positive, caption, negative_caption: ``[M, D]`` L2-normalised text embeddings of p_i, t_i, t'_i.

    Raises:
        ValueError: shapes that differ, NaN / Inf, zero rows.
    """
    return heldout_verdicts(positive, caption, negative_caption)["i2t"]


def score_heldout_text(suite_dir: str | os.PathLike, cache: EmbeddingCache, edges: Sequence[float]) -> dict:
    """Text-side (TOT) accuracy of one model per dataset (:func:`summarize_heldout` with the one direction
    ``tot``), the result suite ``heldout_text``.

    Returns:
        ``{"metrics": {dataset: summary}, "n": {dataset: pairs}, "verdicts": {dataset: {anchor_id: bool (TOT)}}}``,
        or ``{"available": False, "reason"}`` when the suite has no text-side pairs.

    Raises:
        KeyError: a text the cache lacks.
    """
    path = Path(suite_dir) / TEXT_ITEMS
    if not path.is_file():
        return {"available": False, "reason": "no text-side pairs in this profile (text_side.captions is null)"}
    items = {d: ps for d, ps in read_json(path).items() if ps}
    if not items:
        return {"available": False, "reason": "no text-side pair: every rewritten image is in the corpus or has "
                                              "one caption"}
    metrics, n, verdicts = {}, {}, {}
    for dataset, pairs in items.items():
        v = text_verdicts(*(cache.text([p[k] for p in pairs])
                            for k in ("positive_caption", "caption", "negative_caption")))
        metrics[dataset] = summarize_heldout(pairs, {"tot": v}, edges)
        n[dataset] = len(pairs)
        verdicts[dataset] = {p["anchor_id"]: bool(x) for p, x in zip(pairs, v.tolist())}
    return {"metrics": metrics, "n": n, "verdicts": verdicts}
