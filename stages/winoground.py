"""DVC stages `prepare_winoground` and `score_winoground`: Winoground's text, image and group scores (Thrush et al.
2022; paper Sec. 3, Tab. 2), per tag (:mod:`concrete_jungle.evaluation.winoground`): a scene-world Winoground in the
world, the Hugging Face release when ``evaluate.winoground.dir`` points at a local copy, else skipped with the
reason recorded.

``prepare`` writes ``data/<p>/suites/winoground``; ``score`` writes ``metrics/<p>/evaluate/winoground/<model>.json``
and ``data/<p>/verdicts/winoground/``.
"""

from concrete_jungle.cli import run_stage
from concrete_jungle.evaluation.scoring import corpus_exclusions, prepare_suite, score_suite
from concrete_jungle.params import Params


def prepare(params: Params) -> dict:
    """Prepare the Winoground items of ``evaluate.winoground`` (scene-world items never repeat a corpus scene)."""
    from concrete_jungle.evaluation.winoground import prepare_winoground

    cfg = params.evaluate.winoground
    exclude = corpus_exclusions(params, used=cfg.source == "scene_world")
    return prepare_suite(params, "winoground", lambda out, seed: prepare_winoground(cfg, params.world, out, seed,
                                                                  exclude_signatures=exclude), 2_000_003)


def score(params: Params) -> dict:
    """Winoground scores of every model of the grid from its embeddings."""
    from concrete_jungle.evaluation.winoground import score_winoground

    return score_suite(params, "winoground", lambda folder, meta, cache: {"winoground": score_winoground(folder, cache)})


if __name__ == "__main__":
    run_stage(__doc__, {"prepare": prepare, "score": score})
