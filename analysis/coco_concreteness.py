"""Real-input check of ConcretePlant's text side on COCO val2017 (paper Table 1, columns mean / median c_i).

Runs keyword mining, concreteness-aware sampling and the configured caption rewriter (``concreteplant`` section
of the ``real`` profile, with text-only hard negatives: no images are read) over the longest caption of every
val2017 image, for D_hc, D_lc and D_wo, and writes:

* ``metrics/real/concreteness_coco_val2017.json`` — per dataset: mean / median c_i of the kept pairs beside the
  paper's Table 1, share of each type, unique keywords, and the rewriter's acceptance rate with rejections by
  reason;
* ``reports/real/coco_val2017_rewrites.md`` — ten example rewrites per type (attribute / relation / object);
* with ``pairs_dir``, ``<pairs_dir>/<d>.jsonl``: every kept rewrite (the ConcreteBatch records, text only), for the
  text-side held-out pairs of the positive control (:func:`concrete_jungle.evaluation.heldout.coco_text_pairs`).

Datasets: D_hc, D_lc and D_wo (Table 1), then any other dataset of ``concreteplant.datasets`` (the type-matched
ones, no paper figure).

The ``text_side`` stage of the real pipeline runs it (``stages/text_side.py``); by hand:
``python analysis/coco_concreteness.py [--captions PATH] [--max-anchors N]``.
"""

from __future__ import annotations

import argparse
import random
import tempfile
from collections import defaultdict
from pathlib import Path

from concrete_jungle.concreteplant.pipeline import run_concreteplant
from concrete_jungle.corpus.loaders import select_anchor
from concrete_jungle.io import atomic_write, read_json, write_jsonl, write_metrics
from concrete_jungle.params import load_params

__all__ = ["PAPER_TABLE1", "coco_anchor_records", "run"]

#: Paper Table 1: mean / median c_i of the ConcreteBatch variants (MS-COCO Karpathy train).
PAPER_TABLE1 = {"hc": (4.77, 4.85), "lc": (3.81, 3.89), "wo": (4.29, 4.63)}
_SAMPLING_SKIPS = ("no_candidate", "no_rated_candidate")


def coco_anchor_records(captions_json: str | Path) -> list[dict]:
    """One pseudo manifest record per image of a COCO captions file: ``id``, ``image`` (file name only: the text
    side needs no pixels), ``anchor`` (the longest caption, :func:`~concrete_jungle.corpus.loaders.select_anchor`).

    Raises:
        ValueError: if the file lacks ``images`` / ``annotations``.
    """
    data = read_json(captions_json)
    if not isinstance(data, dict) or "images" not in data or "annotations" not in data:
        raise ValueError(f"{captions_json}: not a COCO captions file (needs 'images' and 'annotations')")
    caps = defaultdict(list)
    for a in data["annotations"]:
        caps[a["image_id"]].append(a["caption"].strip())
    return [{"id": f"coco_{im['id']:012d}", "image": im["file_name"], "anchor": select_anchor(caps[im["id"]])}
            for im in sorted(data["images"], key=lambda im: im["id"]) if caps[im["id"]]]


def _acceptance(stats: dict) -> dict:
    skipped = stats["skipped"]
    sampled = stats["n_anchors"] - sum(skipped.get(k, 0) for k in _SAMPLING_SKIPS)
    rejected = {k[len("rewrite_"):]: v for k, v in skipped.items() if k.startswith("rewrite_")}
    accepted = sampled - sum(rejected.values())
    return {"sampled_keywords": sampled, "valid_rewrites": accepted,
            "rate": accepted / sampled if sampled else 0.0, "rejected_by_reason": rejected,
            "tokenize_equal_dropped": skipped.get("tokenize_equal", 0)}


def run(captions_json: str | Path, params, max_anchors: int | None = None,
        metrics_path: str | Path = "metrics/real/concreteness_coco_val2017.json",
        examples_path: str | Path = "reports/real/coco_val2017_rewrites.md",
        pairs_dir: str | Path | None = None) -> dict:
    """Run the text side of ConcretePlant on COCO captions and write the metrics and example files.

    Args:
        captions_json: a COCO captions file (``images`` + ``annotations``).
        params: the profile's :class:`~concrete_jungle.params.Params` (its ``concreteplant`` section and seed),
            or the path of its params file; images are never read (``image_negatives: none``).
        max_anchors: the first N images only (None = all).
        pairs_dir: where to write each dataset's kept rewrites (``<d>.jsonl``); None: not written.

    Raises:
        FileNotFoundError: if ``captions_json`` does not exist.
    """
    if not hasattr(params, "concreteplant"):
        params = load_params(params)
    params = params.model_copy(update={"concreteplant": params.concreteplant.model_copy(
        update={"image_negatives": "none", "max_anchors": max_anchors, "shard_index": 0, "shard_count": 1})})
    records = coco_anchor_records(captions_json)
    result = {"captions": str(captions_json), "n_anchors": min(len(records), max_anchors or len(records)),
              "rewriter": params.concreteplant.rewriter.backend, "datasets": {}}
    batches = {}
    with tempfile.TemporaryDirectory() as tmp:
        for ds in dict.fromkeys(("hc", "lc", "wo", *params.concreteplant.datasets)):
            batch, stats = run_concreteplant(records, ds, params.concreteplant, params.world,
                                             Path(tmp) / "cp" / ds, seed=params.seed)
            batches[ds] = batch
            if pairs_dir is not None:
                write_jsonl(Path(pairs_dir) / f"{ds}.jsonl", batch)
            paper_mean, paper_median = PAPER_TABLE1.get(ds, (None, None))
            result["datasets"][ds] = {
                "mean_c": stats["mean_c"], "median_c": stats["median_c"],
                "paper_mean_c": paper_mean, "paper_median_c": paper_median,
                "type_share": stats["type_share"], "n_unique_keywords": stats["n_unique_keywords"],
                "n_kept": stats["n_kept"], "acceptance": _acceptance(stats), "skipped": stats["skipped"],
            }
    write_metrics(metrics_path, result)
    _write_examples(batches, examples_path, seed=params.seed)
    return result


def _write_examples(batches: dict[str, list[dict]], path: str | Path, seed: int, per_type: int = 10) -> None:
    rng = random.Random(seed)
    lines = ["# ConcretePlant rewrites on COCO val2017 (ten per type)", "",
             "Drawn at random (seed {}) from every dataset; keyword concreteness c_i is Brysbaert (1-5).".format(
                 seed), ""]
    for t in ("attribute", "relation", "object"):
        pool = [(ds, r) for ds, b in batches.items() for r in b if r["type"] == t]
        lines += [f"## {t}", "", "| dataset | keyword | c_i | anchor caption t_i | hard negative t'_i |",
                  "|---|---|---|---|---|"]
        for ds, r in rng.sample(pool, min(per_type, len(pool))):
            lines.append(f"| {ds} | {r['keyword']} | {r['c_i']:.2f} | {r['caption']} | {r['negative_caption']} |")
        lines.append("")
    with atomic_write(path) as fh:
        fh.write("\n".join(lines))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--captions", default="../shared/data/coco/annotations/captions_val2017.json")
    ap.add_argument("--params", default="pipelines/real/params.yaml")
    ap.add_argument("--max-anchors", type=int, default=None)
    args = ap.parse_args()
    import json

    print(json.dumps(run(args.captions, args.params, args.max_anchors), indent=2))
