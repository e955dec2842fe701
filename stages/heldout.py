"""DVC stages `prepare_heldout` and `score_heldout`: the held-out hard-negative pairs (ConcreteBatch pairs of anchors
never trained on) scored like SugarCrepe, per dataset, keyword type and concreteness bin
(:mod:`concrete_jungle.evaluation.heldout`).

``prepare`` writes ``data/<p>/suites/heldout``; ``score`` writes ``metrics/<p>/evaluate/heldout/<model>.json`` and
``data/<p>/verdicts/heldout/``.
"""

from concrete_jungle.cli import run_stage
from concrete_jungle.evaluation.scoring import prepare_suite, score_suite
from concrete_jungle.params import Params


def prepare(params: Params) -> dict:
    """Gather ``data/<p>/concreteplant/<d>/heldout.jsonl`` of every dataset of ``concreteplant.datasets``."""
    from concrete_jungle.evaluation.heldout import prepare_heldout

    dirs = {d: params.data_dir / "concreteplant" / d for d in params.concreteplant.datasets}
    return prepare_suite(params, "heldout", lambda out, seed: prepare_heldout(dirs, out), 0)


def score(params: Params) -> dict:
    """Held-out accuracy of every model of the grid (bins: ``evaluate.heldout.c_bins``)."""
    from concrete_jungle.evaluation.heldout import score_heldout

    edges = params.evaluate.heldout.c_bins
    return score_suite(params, "heldout", lambda folder, meta, cache: {"heldout": score_heldout(folder, cache, edges)})


if __name__ == "__main__":
    run_stage(__doc__, {"prepare": prepare, "score": score})
