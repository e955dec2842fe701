"""DVC stages `prepare_probe` and `score_probe`: linear probes on frozen image features (paper Sec. 3, Tab. 3:
ImageNet-1k top-1 / top-5, COCO multi-label mAP, VTAB-1k), logistic regression with the regularisation chosen on the
800/200 split of 1,000 training images, then refit on all of them (:mod:`concrete_jungle.evaluation.linear_probe`).
Scene-world attribute tasks in the world; CIFAR-10 under the VTAB-1k protocol on real data; ImageNet, COCO and the
19 VTAB tasks when params point at local copies.

``prepare`` writes ``data/<p>/suites/probe``; ``score`` writes ``metrics/<p>/evaluate/probe/<model>.json`` and
``data/<p>/verdicts/probe/``.
"""

from concrete_jungle.cli import run_stage
from concrete_jungle.evaluation.scoring import corpus_exclusions, prepare_suite, score_suite
from concrete_jungle.params import Params


def prepare(params: Params) -> dict:
    """Prepare the training and test images of every task of ``evaluate.probe.tasks``."""
    from concrete_jungle.evaluation.linear_probe import prepare_probe

    cfg = params.evaluate.probe
    exclude = corpus_exclusions(params, used=any(t.format == "scene_world" for t in cfg.tasks.values()))
    return prepare_suite(params, "probe", lambda out, seed: prepare_probe(cfg, params.world, out, seed,
                                                                  exclude_signatures=exclude), 4_000_037)


def score(params: Params) -> dict:
    """Probe accuracy of every model of the grid on every available task."""
    from concrete_jungle.evaluation.linear_probe import score_probe

    cfg = params.evaluate.probe
    return score_suite(params, "probe", lambda folder, meta, cache: {"probe": score_probe(folder, cache, cfg)})


if __name__ == "__main__":
    run_stage(__doc__, {"prepare": prepare, "score": score})
