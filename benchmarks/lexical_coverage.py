"""Coverage of the offline ``lexical`` rewriter on COCO val2017 anchors (ConcretePlant, paper Sec. 2.2 / A.2).

For every val2017 image the anchor caption t_i is the longest caption (``select_anchor``, as ``load_coco_captions``
picks it); keyword candidates are mined with ``mine_keywords`` (spaCy + Brysbaert concreteness, A.1); one keyword per
anchor is sampled for each ConcreteBatch variant (hc / lc / wo) with the pipeline's sampler settings
(``top_k=3, temperature=1.0, cut="global"``, dataset seed ``seed * 1000 + DATASET_SEED_OFFSET[d]``); the
``RewriteRequest`` of each sampled keyword is built exactly as ``run_concreteplant`` builds it and rewritten with
``LexicalRewriter(seed=ds_seed)``. A rewrite counts as valid when it passes ``validate_rewrite``.

Reported per dataset: sampled keywords, valid rewrites and their share, the same per keyword type
(attribute / relation / object), how many requests attempts 1 and 2 (retries) rewrite and how many of those
differ from attempt 0, failures by reason and the most frequent failing keywords, sample rewrites, and the
rewriter's wall time (the WordNet load is timed apart, ``resource_load_seconds``); ``hand_lists_only`` gives the
coverage without the WordNet fallback. Writes ``benchmarks/results/lexical_coverage.json``.

    python benchmarks/lexical_coverage.py [--cache /tmp/coco_val2017_candidates.pkl] [--limit N]
        [--exclude-lemmas area,object:serve,attribute:one,...]

``--exclude-lemmas`` drops candidates by lemma before sampling (``type:lemma`` for one keyword type), a what-if
for the miner's stop lists (``keywords.NON_OBJECT_NOUNS`` etc.); the list and the number of dropped candidates
are recorded in the result.

Mining all 5,000 anchors takes about a minute on 2 cores; ``--cache`` pickles the candidates to iterate faster.
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import time
from collections import Counter
from pathlib import Path

from concrete_jungle.concreteplant.keywords import load_spacy, mine_keywords
from concrete_jungle.concreteplant.lexical import LexicalRewriter, load_wordnet_lexicon
from concrete_jungle.concreteplant.rewrite import RewriteRequest, validate_rewrite
from concrete_jungle.concreteplant.sampling import KeywordSampler
from concrete_jungle.concreteness import load_concreteness
from concrete_jungle.corpus.loaders import select_anchor
from concrete_jungle.io import read_json
from concrete_jungle.machine import machine_info

try:
    from concrete_jungle.concreteplant.pipeline import DATASET_SEED_OFFSET
except ImportError:  # pipeline.py mid-edit elsewhere: the same constants (pipeline.DATASET_SEED_OFFSET)
    DATASET_SEED_OFFSET = {"hc": 11, "lc": 23, "wo": 37}

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CAPTIONS = ROOT.parent / "shared" / "data" / "coco" / "annotations" / "captions_val2017.json"
TYPES = ("attribute", "relation", "object")


def coco_anchors(captions_json: Path) -> list[str]:
    """Anchor caption of every image of a COCO captions file, in ``images`` order (as ``load_coco_captions``)."""
    data = read_json(captions_json)
    caps: dict[int, list[str]] = {}
    for ann in data["annotations"]:
        cap = " ".join(str(ann["caption"]).split())
        if cap:
            caps.setdefault(int(ann["image_id"]), []).append(cap)
    return [select_anchor(caps[int(img["id"])]) for img in data["images"] if caps.get(int(img["id"]))]


def mined(anchors: list[str], cache: Path | None) -> list:
    """Keyword candidates of every anchor (``mine_keywords``), read from / written to ``cache`` when given."""
    if cache is not None and cache.is_file():
        with open(cache, "rb") as fh:
            stored_anchors, cands = pickle.load(fh)
        if stored_anchors == anchors:
            return cands
    cands = mine_keywords(anchors, nlp=load_spacy(), table=load_concreteness(), batch_size=256)
    if cache is not None:
        with open(cache, "wb") as fh:
            pickle.dump((anchors, cands), fh)
    return cands


def parse_exclusions(spec: str) -> list[str]:
    """Sorted, de-duplicated exclusion entries of ``--exclude-lemmas``: ``"lemma"`` (any keyword type) or
    ``"type:lemma"`` (that type only; type one of attribute / relation / object), lower-case.

    Raises:
        ValueError: naming an entry whose type prefix is not a keyword type, or whose lemma is empty.
    """
    out = set()
    for raw in spec.split(","):
        entry = " ".join(raw.split()).lower()
        if not entry:
            continue
        if ":" in entry:
            type_, _, lemma = entry.partition(":")
            if type_ not in TYPES or not lemma.strip():
                raise ValueError(f"--exclude-lemmas: bad entry {raw!r}, expected 'lemma' or 'TYPE:lemma' with "
                                 f"TYPE in {TYPES}")
            entry = f"{type_}:{lemma.strip()}"
        out.add(entry)
    return sorted(out)


def exclude_candidates(candidates: list, excluded: list[str]) -> list:
    """``candidates`` (one list per anchor) without those whose lemma is excluded (:func:`parse_exclusions`
    entries: ``"lemma"`` for every type, ``"type:lemma"`` for one type)."""
    drop = set(excluded)
    return [[c for c in cands if c.lemma.lower() not in drop and f"{c.type}:{c.lemma.lower()}" not in drop]
            for cands in candidates]


def measure(
    anchors: list[str], candidates: list, seed: int = 0, n_failing: int = 40, use_resource: bool = True
) -> dict:
    """Coverage figures per dataset (module docstring) for ``LexicalRewriter(seed=ds_seed, use_resource=...)``.

    Args:
        anchors: anchor captions; candidates: ``mine_keywords(anchors)``, one list per anchor.
        seed: the run seed (dataset seed = seed * 1000 + DATASET_SEED_OFFSET[d]).
        n_failing: how many failing keywords to list per dataset.
        use_resource: False measures the hand lists alone.
    """
    out: dict = {}
    for dataset in ("hc", "lc", "wo"):
        ds_seed = seed * 1000 + DATASET_SEED_OFFSET[dataset]
        sampler = KeywordSampler(dataset, top_k=3, temperature=1.0, seed=ds_seed, cut="global")
        chosen = []
        no_keyword: Counter = Counter()
        for anchor, cands in zip(anchors, candidates):
            kw, reason = sampler.sample(cands)
            if kw is None:
                no_keyword[reason or "no_keyword"] += 1
            else:
                chosen.append((anchor, kw))
        requests = [RewriteRequest.for_keyword(a, k) for a, k in chosen]
        rw = LexicalRewriter(seed=ds_seed, use_resource=use_resource)
        t0 = time.perf_counter()
        results = rw.rewrite(requests)
        seconds = time.perf_counter() - t0
        valid = [res.negative_caption is not None
                 and validate_rewrite(r.caption, r.start, r.end, res.negative_caption) is None
                 for r, res in zip(requests, results)]
        reasons = Counter(res.reason or "invalid" for res, ok in zip(results, valid) if not ok)
        failing = Counter(f"{r.type}:{r.keyword.lower()}" for r, ok in zip(requests, valid) if not ok)
        per_type = {}
        for t in TYPES:
            idx = [i for i, r in enumerate(requests) if r.type == t]
            n_ok = sum(valid[i] for i in idx)
            per_type[t] = {"sampled": len(idx), "valid": n_ok, "coverage": round(n_ok / max(len(idx), 1), 4)}
        retries = {}
        for attempt in (1, 2):
            res_k = rw.rewrite(requests, attempt=attempt)
            ok_k = [res.negative_caption is not None
                    and validate_rewrite(r.caption, r.start, r.end, res.negative_caption) is None
                    for r, res in zip(requests, res_k)]
            differs = sum(a.negative_caption != b.negative_caption for a, b, o in zip(results, res_k, ok_k) if o)
            retries[f"attempt_{attempt}"] = {"valid": sum(ok_k), "coverage": round(sum(ok_k) / len(requests), 4),
                                             "valid_and_differs_from_attempt_0": differs}
        examples = [(r.caption, r.keyword, res.negative_caption) for r, res, ok in zip(requests, results, valid) if ok]
        out[dataset] = {
            "anchors": len(anchors),
            "no_keyword": dict(no_keyword),
            "sampled": len(requests),
            "valid": sum(valid),
            "coverage": round(sum(valid) / max(len(requests), 1), 4),
            "per_type": per_type,
            "retries": retries,
            "failures_by_reason": dict(reasons.most_common()),
            "failing_keywords": dict(failing.most_common(n_failing)),
            "rewrite_seconds": round(seconds, 3),
            "examples": examples[:: max(len(examples) // 15, 1)][:15],
        }
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--captions", type=Path, default=DEFAULT_CAPTIONS, help="COCO captions_val2017.json")
    parser.add_argument("--cache", type=Path, default=None, help="pickle of the mined candidates (read/write)")
    parser.add_argument("--limit", type=int, default=0, help="first N images only (0 = all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "lexical_coverage.json")
    parser.add_argument("--failing", type=int, default=40, help="failing keywords listed per dataset")
    parser.add_argument("--exclude-lemmas", default="",
                        help="comma-separated candidate lemmas dropped before sampling (what-if for the miner's "
                             "stop lists); 'type:lemma' (e.g. 'object:serve', 'attribute:one') drops the lemma "
                             "for that keyword type only; the default measures the pipeline as it is")
    args = parser.parse_args(argv)
    anchors = coco_anchors(args.captions)
    if args.limit:
        anchors = anchors[: args.limit]
    t0 = time.perf_counter()
    candidates = mined(anchors, args.cache)
    mining_s = time.perf_counter() - t0
    excluded = parse_exclusions(args.exclude_lemmas)
    n_before = sum(len(c) for c in candidates)
    if excluded:
        candidates = exclude_candidates(candidates, excluded)
    n_dropped = n_before - sum(len(c) for c in candidates)
    t0 = time.perf_counter()
    load_wordnet_lexicon()  # loaded once, lazily, by the rewriter; timed apart from the rewriting
    load_s = time.perf_counter() - t0
    hand_only = measure(anchors, candidates, args.seed, args.failing, use_resource=False)
    result = {
        "captions": str(args.captions.name),
        "n_anchors": len(anchors),
        "seed": args.seed,
        "sampler": {"top_k": 3, "temperature": 1.0, "cut": "global"},
        "mining_seconds": round(mining_s, 1),
        "resource_load_seconds": round(load_s, 2),
        "excluded_lemmas": excluded,
        "excluded_candidates": n_dropped,
        "datasets": measure(anchors, candidates, args.seed, args.failing),
        "hand_lists_only": {
            d: {"coverage": r["coverage"], "valid": r["valid"], "sampled": r["sampled"],
                "per_type": {t: v["coverage"] for t, v in r["per_type"].items()}}
            for d, r in hand_only.items()
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result["machine_info"] = machine_info()  # CPU model, ISA flags and caps, torch threads
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    for d, r in result["datasets"].items():
        types = "  ".join(f"{t} {v['valid']}/{v['sampled']} ({v['coverage']:.1%})" for t, v in r["per_type"].items())
        print(f"{d}: {r['valid']}/{r['sampled']} = {r['coverage']:.1%}   {types}   [{r['rewrite_seconds']} s]",
              file=sys.stderr)
    return result


if __name__ == "__main__":
    main()
