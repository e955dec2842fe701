"""Held-out hard-negative pairs: ConcreteBatch pairs of anchors never trained on, scored like SugarCrepe.

The corpus holds out a share of its anchors from every training run (:mod:`concrete_jungle.corpus.splits`);
ConcretePlant still makes their hard negatives (``data/<p>/concreteplant/<d>/heldout.jsonl``). On these pairs a
model is right (I2T) when the anchor image is strictly closer, in cosine, to the anchor caption t_i than to its
rewrite t'_i, and right (T2I) when the anchor caption is strictly closer to the anchor image v_i than to the
hard-negative image v'_i. Accuracies are reported per ConcreteBatch dataset, per keyword type (attribute /
relation / object) and per concreteness bin of c_i (Brysbaert 1-5): a more sensitive figure than the public
benchmarks for what hard-negative training teaches (``../shared/notes/measuring-small-effects.md``; paper Sec. 2.1's
hypothesis that concrete keywords make more distinguishable negatives).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from concrete_jungle.evaluation.suite import EmbeddingCache, check_embeddings, unavailable, write_suite
from concrete_jungle.io import read_json, read_jsonl, write_json

__all__ = ["prepare_heldout", "heldout_verdicts", "bin_label", "summarize_heldout", "score_heldout"]

_FIELDS = ("anchor_id", "image", "caption", "negative_caption", "type", "c_i")


def prepare_heldout(concreteplant_dirs: Mapping[str, str | os.PathLike], out_dir: str | os.PathLike) -> dict:
    """Gather the held-out pairs of every ConcreteBatch dataset into a prepared suite folder (``items.json``:
    ``{dataset: [pair, ...]}``; ``suite.json`` listing every image and caption).

    Args:
        concreteplant_dirs: dataset (``hc`` / ``lc`` / ``wo``) -> its ConcretePlant output folder (with
            ``heldout.jsonl``).
        out_dir: the prepared folder.

    Returns:
        The ``suite.json`` dict; unavailable (with the reason) when no dataset has a held-out pair
        (``corpus.heldout_fraction: 0``).

    Raises:
        FileNotFoundError: a dataset folder without ``heldout.jsonl``; ValueError: a pair lacking a field (named).
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
        items[dataset] = [{**{f: p[f] for f in _FIELDS}, "negative_image": p.get("negative_image") or None}
                          for p in pairs]
    write_json(Path(out_dir) / "items.json", items)
    if not any(items.values()):
        return write_suite(out_dir, unavailable("heldout", "no held-out ConcreteBatch pair (corpus.heldout_fraction "
                                                "is 0, or every held-out anchor was skipped)"))
    pairs = [p for ps in items.values() for p in ps]
    images = [p["image"] for p in pairs] + [p["negative_image"] for p in pairs if p["negative_image"]]
    texts = [p["caption"] for p in pairs] + [p["negative_caption"] for p in pairs]
    return write_suite(out_dir, {"suite": "heldout", "available": True, "images": images, "texts": texts,
                                 "n_pairs": {d: len(ps) for d, ps in items.items()}})


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
        ``{"i2t": acc, "t2i": acc?, "by_type": {type: {"i2t", "t2i"?, "n"}}, "by_c_bin": {bin: {...}}}``
        (fractions in [0, 1]; groups without a pair are left out).
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
        the extra verdicts go to the verdict file beside ``verdicts``, for the positive control).

    Raises:
        KeyError: an input the cache lacks.
    """
    items = read_json(Path(suite_dir) / "items.json")
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
