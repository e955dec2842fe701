"""DVC stages `prepare_heldout` and `score_heldout`: the held-out hard-negative pairs (ConcreteBatch pairs of anchors
never trained on) scored like SugarCrepe, per dataset, keyword type and concreteness bin
(:mod:`concrete_jungle.evaluation.heldout`).

``prepare`` writes ``data/<p>/suites/heldout`` (with the text-side pairs of ``data/<p>/text_side`` where the profile
has ``text_side.captions``); ``score`` writes ``metrics/<p>/evaluate/{heldout,heldout_text}/<model>.json`` and
``data/<p>/verdicts/{heldout,heldout_text}/`` (``heldout_text``: TOT on the text-side pairs, or skipped with its
reason).
"""

from pathlib import Path

from concrete_jungle.cli import run_stage
from concrete_jungle.evaluation.scoring import prepare_suite, score_suite
from concrete_jungle.io import read_jsonl
from concrete_jungle.params import Params


def _text_pairs(params: Params) -> tuple[dict | None, dict | None]:
    """The text-side pairs (:func:`~concrete_jungle.evaluation.heldout.coco_text_pairs`) of every dataset of
    ``concreteplant.datasets``, or ``(None, None)`` without ``text_side.captions``.

    Raises:
        FileNotFoundError: a dataset's rewrites ``data/<p>/text_side/<d>.jsonl`` are missing (run text_side).
    """
    from concrete_jungle.evaluation.heldout import coco_text_pairs

    if params.text_side.captions is None:
        return None, None
    rewrites = {}
    for d in params.concreteplant.datasets:
        path = params.data_dir / "text_side" / f"{d}.jsonl"
        if not path.is_file():
            raise FileNotFoundError(f"text-side rewrites not found: {path} (run the text_side stage)")
        rewrites[d] = read_jsonl(path)
    corpus = {Path(r["image"]).name for r in read_jsonl(params.data_dir / "corpus" / "manifest.jsonl")}
    return coco_text_pairs(params.text_side.captions, rewrites, corpus, params.evaluate.heldout.max_text_pairs)


def prepare(params: Params) -> dict:
    """Gather ``data/<p>/concreteplant/<d>/heldout.jsonl`` of every dataset of ``concreteplant.datasets``, and its
    text-side pairs where the profile has them."""
    from concrete_jungle.evaluation.heldout import prepare_heldout

    dirs = {d: params.data_dir / "concreteplant" / d for d in params.concreteplant.datasets}
    text, stats = _text_pairs(params)
    return prepare_suite(params, "heldout", lambda out, seed: prepare_heldout(dirs, out, text, stats), 0)


def score(params: Params) -> dict:
    """Held-out accuracy of every model of the grid (bins: ``evaluate.heldout.c_bins``): I2T / T2I on the held-out
    pairs (``heldout``), TOT on the text-side pairs (``heldout_text``)."""
    from concrete_jungle.evaluation.heldout import score_heldout, score_heldout_text

    edges = params.evaluate.heldout.c_bins
    return score_suite(params, "heldout", lambda folder, meta, cache: {
        "heldout": score_heldout(folder, cache, edges), "heldout_text": score_heldout_text(folder, cache, edges)},
        results=("heldout", "heldout_text"))


if __name__ == "__main__":
    run_stage(__doc__, {"prepare": prepare, "score": score})
