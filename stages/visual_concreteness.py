"""DVC stage `visual_concreteness` (profiles with ``concreteplant.concreteness: visual``): the visual concreteness
of every keyword lemma of the corpus (Hessel et al. 2018; :mod:`concrete_jungle.visual_concreteness`), measured on
the training images (held-out anchors excluded) with ImageNet features (``concreteplant.visual.features: imagenet``)
or the base model's image tower (``base``), and quantile-mapped onto the Brysbaert 1-5 scale, which ConcretePlant
then samples from instead of the Brysbaert ratings (the paper's future work, Sec. 5).

A word's images are those whose anchor caption has it among its keyword candidates (the sampler's own words; the
other captions of an image are not read). Writes ``data/<profile>/visual_concreteness/ratings.json``
(``{lemma: rating}``) and ``metrics/<profile>/visual_concreteness.json`` (counts, the Spearman correlation with
Brysbaert (``null`` when undefined), the candidate lemmas Brysbaert rates but too few images carry, the most and
least visually concrete words with both ratings).
"""

from concrete_jungle.cli import clear_outputs, run_stage
from concrete_jungle.io import read_jsonl, write_json, write_metrics
from concrete_jungle.params import Params


def visual_concreteness_stage(params: Params) -> dict:
    """Score the keyword lemmas of the training anchors by how alike their images look (``visual.features``).

    Raises:
        ValueError: the keyword candidates do not list the manifest's records in order, or no lemma is used by
            ``concreteplant.visual.min_images`` training images.
    """
    import math
    from collections import Counter

    import scipy.stats

    from concrete_jungle.concreteness import load_concreteness
    from concrete_jungle.models.checkpoints import load_model
    from concrete_jungle.models.encoding import encode_image_files, encode_images
    from concrete_jungle.visual_concreteness import to_rating_scale, visual_concreteness

    vp = params.concreteplant.visual
    records = read_jsonl(params.data_dir / "corpus" / "manifest.jsonl")
    mined = read_jsonl(params.data_dir / "keywords" / "candidates.jsonl")
    if [m["id"] for m in mined] != [r["id"] for r in records]:
        raise ValueError("visual_concreteness: data/<profile>/keywords/candidates.jsonl does not list the manifest's "
                         "records in order; re-run the keywords stage")
    train = [(r, m) for r, m in zip(records, mined) if r.get("split") != "heldout"]
    out = params.data_dir / "visual_concreteness" / "ratings.json"
    metrics = params.metrics_dir / "visual_concreteness.json"
    clear_outputs(out.parent, metrics)
    bs = params.evaluate.batch_size
    if vp.features == "base":
        bundle = load_model(params.models_dir / "base" / "checkpoint.pt")
        encode = lambda ims: encode_images(bundle, ims, bs)  # noqa: E731
    else:
        from concrete_jungle.models.imagenet import imagenet_encoder

        encode = imagenet_encoder()
    feats = encode_image_files([r["image"] for r, _ in train], encode, bs,
                               f"visual_concreteness: {vp.features} features").double().numpy()
    words = [{row[1] for row in m["candidates"]} for _, m in train]
    scores = visual_concreteness(feats, words, k=min(vp.k, len(train) - 1), min_images=vp.min_images)
    if not scores:
        raise ValueError(f"visual_concreteness: no keyword lemma is used by {vp.min_images} training images")
    brysbaert = load_concreteness()
    ratings = to_rating_scale(scores, brysbaert)
    write_json(out, dict(sorted(ratings.items())))
    both = sorted(w for w in scores if w in brysbaert)
    rho = float(scipy.stats.spearmanr([scores[w] for w in both], [brysbaert[w] for w in both]).statistic) \
        if len(both) > 2 else float("nan")
    ranked = sorted(scores, key=lambda w: (-scores[w], w))
    images_of = Counter(w for ws in words for w in ws)
    lost = sorted((w for w in images_of if w not in scores and w in brysbaert), key=lambda w: (-images_of[w], w))

    def row(w):
        return {"lemma": w, "visual": scores[w], "rating": ratings[w], "brysbaert": brysbaert.lookup(w)}
    result = {"features": vp.features, "n_images": len(train), "n_lemmas": len(images_of), "n_rated": len(scores),
              "n_brysbaert_rated": len(both), "k": min(vp.k, len(train) - 1), "min_images": vp.min_images,
              "spearman_vs_brysbaert": rho if math.isfinite(rho) else None,
              # candidates Brysbaert rates that the visual source leaves unrated: no longer sampled under `visual`
              "n_brysbaert_only": len(lost),
              "brysbaert_only": [{"lemma": w, "images": images_of[w]} for w in lost[:10]],
              "most_concrete": [row(w) for w in ranked[:10]], "least_concrete": [row(w) for w in ranked[-10:]]}
    write_metrics(metrics, result)
    return {k: v for k, v in result.items() if not k.endswith(("_concrete", "_only"))}


if __name__ == "__main__":
    run_stage(__doc__, visual_concreteness_stage)
