"""Why D_lc is less concrete here than in the paper (Table 1: mean / median c_i 3.81 / 3.89; COCO val2017 here
3.63 / 3.68 while D_hc and D_wo are within 0.12): the keyword candidates of the 5,000 val2017 anchors (longest
caption) are mined once with the ``real`` profile's settings, then the D_lc sampler runs under variants that each
change one ingredient, and the rewriter's effect is read off as the mean c_i of the sampled keywords against the
accepted ones.

Variants (D_lc unless named): ``default``; ``no_relations`` (relation candidates removed: no spatial
prepositions, phrases or interaction verbs); ``relations_rated_at_least`` (relation candidates rated below 3 removed:
"next" 2.56, "near" ...); ``cut_type`` (type first, then bottom-K: relation priority for every anchor with a
relation); ``top_k_1`` / ``top_k_5``; ``temperature_0.5`` / ``temperature_2``; ``generic_prepositions`` ("on",
"in", "at" also make relations); and D_hc / D_wo for reference.

Writes ``metrics/real/lc_concreteness.json``: per variant mean / median c_i, type shares and the share of the mean
gap to the paper it closes. Run by the ``text_side`` stage of the real pipeline (``python stages/text_side.py
--params pipelines/real/params.yaml``).
"""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path

from concrete_jungle.concreteplant.keywords import GENERIC_SPATIAL_PREPOSITIONS, SPATIAL_PREPOSITIONS, mine_keywords
from concrete_jungle.concreteplant.sampling import KeywordSampler
from concrete_jungle.io import read_json, write_metrics
from concrete_jungle.params import load_params

__all__ = ["sample_variant", "run"]

PAPER_LC = (3.81, 3.89)


def sample_variant(candidates: list[list], mode: str, top_k: int, temperature: float, cut: str, seed: int,
                   keep=None) -> dict:
    """Mean / median c_i and type shares of the keywords one :class:`KeywordSampler` picks over ``candidates``
    (one list per anchor), after dropping the candidates ``keep`` rejects (``keep(candidate) -> bool``)."""
    sampler = KeywordSampler(mode, top_k=top_k, temperature=temperature, seed=seed, cut=cut)
    picked = []
    for cands in candidates:
        kw, _ = sampler.sample([c for c in cands if keep is None or keep(c)])
        if kw is not None:
            picked.append(kw)
    cs = [k.concreteness for k in picked]
    types = Counter(k.type for k in picked)
    top = Counter((k.lemma, k.concreteness) for k in picked if k.type == "relation").most_common(8)
    return {"n": len(picked), "mean_c": statistics.fmean(cs), "median_c": statistics.median(cs),
            "type_share": {t: types[t] / len(picked) for t in ("attribute", "relation", "object")},
            "top_relation_keywords": [{"lemma": lem, "c": c, "share": n / len(picked)} for (lem, c), n in top],
            "skipped": dict(sampler.skip_counts)}


def run(captions_json: str | Path, params="pipelines/real/params.yaml", max_anchors: int | None = None,
        out: str | Path = "metrics/real/lc_concreteness.json",
        accepted_metrics: str | Path = "metrics/real/concreteness_coco_val2017.json") -> dict:
    """Mine once, sample every variant, write ``out`` (see the module docstring). ``params``: the profile's
    :class:`~concrete_jungle.params.Params` or its params file."""
    from analysis.coco_concreteness import coco_anchor_records

    if not hasattr(params, "concreteplant"):
        params = load_params(params)
    cp = params.concreteplant
    records = coco_anchor_records(captions_json)[:max_anchors]
    texts = [r["anchor"] for r in records]
    default = mine_keywords(texts, batch_size=cp.batch_size, context_length=cp.context_length)
    generic = mine_keywords(texts, batch_size=cp.batch_size, context_length=cp.context_length,
                            spatial_prepositions=SPATIAL_PREPOSITIONS | GENERIC_SPATIAL_PREPOSITIONS)
    k, t, cut, seed = cp.top_k, cp.temperature, cp.cut, params.seed
    variants = {
        "default": sample_variant(default, "lc", k, t, cut, seed),
        "no_relations": sample_variant(default, "lc", k, t, cut, seed, keep=lambda c: c.type != "relation"),
        "relations_rated_at_least_3": sample_variant(
            default, "lc", k, t, cut, seed,
            keep=lambda c: c.type != "relation" or (c.concreteness is not None and c.concreteness >= 3.0)),
        "cut_type": sample_variant(default, "lc", k, t, "type", seed),
        "top_k_1": sample_variant(default, "lc", 1, t, cut, seed),
        "top_k_5": sample_variant(default, "lc", 5, t, cut, seed),
        "temperature_0.5": sample_variant(default, "lc", k, 0.5, cut, seed),
        "temperature_2": sample_variant(default, "lc", k, 2.0, cut, seed),
        "generic_prepositions": sample_variant(generic, "lc", k, t, cut, seed),
        "hc_default": sample_variant(default, "hc", k, t, cut, seed),
        "wo_default": sample_variant(default, "wo", k, t, cut, seed),
    }
    gap = PAPER_LC[0] - variants["default"]["mean_c"]
    for v in variants.values():
        v["closes_share_of_paper_gap"] = (v["mean_c"] - variants["default"]["mean_c"]) / gap if gap else 0.0
    result = {"captions": str(captions_json), "n_anchors": len(records), "paper_lc": {"mean_c": PAPER_LC[0],
              "median_c": PAPER_LC[1]}, "settings": {"top_k": k, "temperature": t, "cut": cut,
              "context_length": cp.context_length}, "variants": variants}
    if Path(accepted_metrics).is_file():  # the rewriter's effect: sampled vs accepted keywords
        acc = read_json(accepted_metrics)["datasets"]["lc"]
        result["after_rewriting"] = {"mean_c": acc["mean_c"], "median_c": acc["median_c"],
                                     "source": str(accepted_metrics),
                                     "shift_from_sampled": acc["mean_c"] - variants["default"]["mean_c"]}
    write_metrics(out, result)
    return result

