"""ConcretePlant end to end (paper Sec. 2.2, Fig. 2, A.1): anchor caption -> keyword candidates with
concreteness -> one sampled keyword -> rewritten caption t'_i -> hard-negative image v'_i -> ConcreteBatch.
"""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from concrete_jungle.concreteplant.image_negatives import RetrievalNegatives, SceneNegatives
from concrete_jungle.concreteplant.keywords import load_spacy, mine_keywords
from concrete_jungle.concreteplant.lexical import LexicalRewriter
from concrete_jungle.concreteplant.rewrite import RewriteRequest, validate_rewrite
from concrete_jungle.concreteplant.sampling import KeywordSampler
from concrete_jungle.concreteness import load_concreteness

__all__ = ["run_concreteplant", "DATASET_SEED_OFFSET"]

# Distinct, fixed random streams per dataset so that D_hc, D_lc and D_wo never share sampling noise.
DATASET_SEED_OFFSET = {"hc": 11, "lc": 23, "wo": 37}
_TEXT_ONLY = ""  # marker of a text-only hard negative (image_negatives: none)


def _image_mode(cp: Any, records: list[dict]) -> str:
    if cp.image_negatives != "auto":
        return cp.image_negatives
    return "scene" if all("scene" in r for r in records) else "retrieval"


def run_concreteplant(
    records: list[dict], dataset: str, cp: Any, world_cfg: Any, out_dir: Path, seed: int = 0
) -> tuple[list[dict], dict]:
    """Generate the ConcreteBatch ``dataset`` (``hc`` | ``lc`` | ``wo``) from corpus manifest records.

    Args:
        records: manifest records (``id``, ``image``, ``anchor``; scene-world records also ``scene`` and
            ``anchor_slots``).
        dataset: keyword sampling mode: high concreteness, low concreteness, or concreteness ignored.
        cp: ``ConcretePlantParams`` (top_k, temperature, cut, rewriter, image_negatives, spacy_model, batch_size,
            max_anchors).
        world_cfg: the scene world's ``WorldConfig`` (used for ``scene`` image negatives).
        out_dir: the dataset folder; negative images go to ``out_dir/images``.

    Returns:
        ``(batch, stats)``: ConcreteBatch records (docs/architecture.md) and finite statistics: kept / skipped by
        reason, share of each type, mean and median c_i (Brysbaert 1-5), number of unique keywords.

    Raises:
        ValueError: for an unknown dataset or an empty corpus.
    """
    if dataset not in DATASET_SEED_OFFSET:
        raise ValueError(f"unknown ConcreteBatch dataset {dataset!r}; expected one of {sorted(DATASET_SEED_OFFSET)}")
    if not records:
        raise ValueError("run_concreteplant: the corpus manifest is empty")
    if cp.max_anchors:
        records = records[: cp.max_anchors]
    ds_seed = seed * 1000 + DATASET_SEED_OFFSET[dataset]
    mode = _image_mode(cp, records)
    nlp = load_spacy(cp.spacy_model)
    table = load_concreteness()
    anchors = [r["anchor"] for r in records]
    candidates = mine_keywords(anchors, nlp=nlp, table=table, batch_size=cp.batch_size)

    skipped: Counter = Counter()
    sampler = KeywordSampler(dataset, top_k=cp.top_k, temperature=cp.temperature, seed=ds_seed, cut=cp.cut)
    chosen = []
    for rec, cands in zip(records, candidates):
        kw, reason = sampler.sample(cands)
        if kw is None:
            skipped[reason or "no_keyword"] += 1
        else:
            chosen.append((rec, kw))

    vocabulary = None
    scene_neg = None
    if mode == "scene":
        from concrete_jungle.corpus.scene_world import world_vocabulary

        vocabulary = world_vocabulary(world_cfg)
        scene_neg = SceneNegatives(world_cfg, out_dir / "images")
    retrieval = RetrievalNegatives(records) if mode == "retrieval" else None
    rewriter = LexicalRewriter(seed=ds_seed, vocabulary=vocabulary)
    requests = [RewriteRequest(caption=r["anchor"], keyword=k.text, start=k.start, end=k.end, type=k.type,
                               lemma=k.lemma) for r, k in chosen]
    results = rewriter.rewrite(requests)

    rewritten = []
    for (rec, kw), res in zip(chosen, results):
        if res.negative_caption is None:
            skipped[f"rewrite_{res.reason or 'failed'}"] += 1
            continue
        reason = validate_rewrite(rec["anchor"], kw.start, kw.end, res.negative_caption)
        if reason:
            skipped[f"rewrite_{reason}"] += 1
            continue
        rewritten.append((rec, kw, res.negative_caption))

    neg_images: list[str | None]
    if mode == "retrieval":
        neg_images = list(retrieval.find([t for _, _, t in rewritten], [r["id"] for r, _, _ in rewritten]))
    elif mode == "scene":
        neg_images = []
        for rec, kw, neg in tqdm(rewritten, desc=f"concreteplant {dataset}: scene negatives", unit="img"):
            path, reason = scene_neg.render_negative(rec, kw.start, kw.end, rec["anchor"], neg)
            if path is None:
                skipped[f"image_{reason}"] += 1
            neg_images.append(path)
    else:  # "none": text-only hard negatives; negative_image is null (the 2N x 2N losses refuse such records)
        neg_images = [_TEXT_ONLY] * len(rewritten)

    batch = []
    for (rec, kw, neg), neg_img in zip(rewritten, neg_images):
        if neg_img is None:
            continue
        batch.append({
            "anchor_id": rec["id"], "image": rec["image"], "caption": rec["anchor"], "keyword": kw.text,
            "lemma": kw.lemma, "type": kw.type, "span": [kw.start, kw.end], "c_i": float(kw.concreteness),
            "negative_caption": neg, "negative_image": None if neg_img is _TEXT_ONLY else neg_img,
        })
    cs = [b["c_i"] for b in batch]
    types = Counter(b["type"] for b in batch)
    stats = {
        "dataset": dataset,
        "image_negatives": mode,
        "n_anchors": len(records),
        "n_kept": len(batch),
        "skipped": dict(sorted(skipped.items())),
        "type_share": {t: types.get(t, 0) / max(len(batch), 1) for t in ("attribute", "relation", "object")},
        "mean_c": statistics.fmean(cs) if cs else 0.0,
        "median_c": statistics.median(cs) if cs else 0.0,
        "n_unique_keywords": len({b["lemma"] for b in batch}),
    }
    return batch, stats
