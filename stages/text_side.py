"""DVC stage `text_side` (real profile): ConcretePlant's text side on every image of a COCO captions file
(``text_side.captions``: keyword mining, sampling and the configured rewriter on the longest caption, no images;
paper Table 1's mean / median c_i), then the D_lc concreteness variants that explain why D_lc is less concrete
here than in the paper.

Writes ``metrics/<p>/concreteness_coco_val2017.json``, ``reports/<p>/coco_val2017_rewrites.md`` (ten example
rewrites per type), ``metrics/<p>/lc_concreteness.json`` and ``data/<p>/text_side/<d>.jsonl`` (every kept rewrite of
each dataset: the text-side held-out pairs of ``prepare_heldout``).
"""

from concrete_jungle.cli import run_stage
from concrete_jungle.params import Params


def text_side(params: Params) -> dict:
    """Run :func:`analysis.coco_concreteness.run` and :func:`analysis.lc_concreteness.run`; returns the mean /
    median c_i of each dataset and of each D_lc variant.

    Raises:
        ValueError: ``text_side.captions`` is not set in this profile.
        FileNotFoundError: the captions file does not exist.
    """
    from analysis.coco_concreteness import run as run_text_side
    from analysis.lc_concreteness import run as run_lc_variants

    cfg = params.text_side
    if cfg.captions is None:
        raise ValueError("text_side.captions is null: this profile has no text-side check")
    metrics = params.metrics_dir / "concreteness_coco_val2017.json"
    from concrete_jungle.cli import fresh_dir

    side = run_text_side(cfg.captions, params, cfg.max_anchors, metrics_path=metrics,
                         examples_path=params.reports_dir / "coco_val2017_rewrites.md",
                         pairs_dir=fresh_dir(params.data_dir / "text_side"))
    lc = run_lc_variants(cfg.captions, params, cfg.max_anchors, out=params.metrics_dir / "lc_concreteness.json",
                         accepted_metrics=metrics)
    return {"datasets": {d: {k: v[k] for k in ("mean_c", "median_c")} for d, v in side["datasets"].items()},
            "lc_variants": {name: {k: v[k] for k in ("mean_c", "median_c")} for name, v in lc["variants"].items()}}


if __name__ == "__main__":
    run_stage(__doc__, text_side)
