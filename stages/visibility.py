"""DVC stage `visibility`: can each model see each edit? (:mod:`concrete_jungle.evaluation.visibility`, the first
diagnosis of the positive control). Writes ``metrics/<p>/visibility.json``: per model and keyword type, the mean
cosine of anchor and edit in the image and the text tower against random pairs, and a cross-validated linear probe of
the edited value on the frozen image embeddings against the majority class.
"""

from concrete_jungle.cli import run_stage
from concrete_jungle.params import Params


def visibility_stage(params: Params) -> dict:
    """Read every model's held-out embedding cache and the held-out pairs of ``concreteplant.datasets``; the probes
    use ``evaluate.probe.Cs`` / ``max_iter`` / ``seed``.

    Raises:
        FileNotFoundError: a dataset's ``heldout.jsonl`` or a model's cache is missing (named).
    """
    from concrete_jungle.evaluation.suite import EmbeddingCache, read_suite
    from concrete_jungle.evaluation.visibility import edit_visibility
    from concrete_jungle.grid import member_path, model_labels
    from concrete_jungle.io import read_jsonl, write_metrics

    pairs = {}
    for d in params.concreteplant.datasets:
        path = params.data_dir / "concreteplant" / d / "heldout.jsonl"
        if not path.is_file():
            raise FileNotFoundError(f"held-out pairs not found: {path} (re-run concreteplant)")
        pairs[d] = read_jsonl(path)
    pr = params.evaluate.probe
    meta = read_suite(params.suite_dir("heldout"))
    out = {}
    for label in model_labels(params):
        if not meta.get("available") or not any(pairs.values()):
            out[label] = {"skipped": meta.get("reason") or "no held-out pair"}
            continue
        cache = EmbeddingCache.load(params.data_dir / "embeddings" / "heldout" / member_path(label))
        out[label] = edit_visibility(pairs, cache, Cs=pr.Cs, max_iter=pr.max_iter, seed=pr.seed)
    write_metrics(params.metrics_dir / "visibility.json", out)
    return {label: r.get("cosine", r) for label, r in out.items()}


if __name__ == "__main__":
    run_stage(__doc__, visibility_stage)
