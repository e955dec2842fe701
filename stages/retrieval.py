"""DVC stages `prepare_retrieval` and `score_retrieval`: image->text and text->image R@K with every caption of each
image (paper Sec. 3, Tab. 3: Flickr30k; :mod:`concrete_jungle.evaluation.retrieval`), one result per set of
``evaluate.retrieval.sets`` (held-out scenes in the world; Flickr8k's test split and the SugarCrepe COCO images
on real data; Flickr30k or the COCO Karpathy test split when params point at a local copy).

``prepare`` writes ``data/<p>/suites/retrieval``; ``score`` writes ``metrics/<p>/evaluate/retrieval/<model>.json``
and ``data/<p>/verdicts/retrieval/``.
"""

from concrete_jungle.cli import run_stage
from concrete_jungle.evaluation.scoring import corpus_exclusions, prepare_suite, score_suite
from concrete_jungle.params import Params


def prepare(params: Params) -> dict:
    """Prepare every retrieval set (scene-world sets never repeat a corpus scene)."""
    from concrete_jungle.evaluation.retrieval import prepare_retrieval

    cfg = params.evaluate.retrieval
    exclude = corpus_exclusions(params, used=any(s.format == "scene_world" for s in cfg.sets.values()))
    return prepare_suite(params, "retrieval", lambda out, seed: prepare_retrieval(cfg, params.world, out, seed,
                                                                  exclude_signatures=exclude), 3_000_017)


def score(params: Params) -> dict:
    """R@K of every model of the grid on every available set (K: ``evaluate.retrieval.ks``)."""
    from concrete_jungle.evaluation.retrieval import score_retrieval

    ks = params.evaluate.retrieval.ks
    return score_suite(params, "retrieval", lambda folder, meta, cache: {"retrieval": score_retrieval(folder, cache, ks)})


if __name__ == "__main__":
    run_stage(__doc__, {"prepare": prepare, "score": score})
