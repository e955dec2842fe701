"""DVC stage `concreteplant@<dataset>`: ConcretePlant hard negatives for one ConcreteBatch dataset (D_hc, D_lc or
D_wo; paper Sec. 2.2, A.1, A.2), from the keyword candidates of the ``keywords`` stage.

Writes ``data/<profile>/concreteplant/<dataset>/concretebatch.jsonl`` (the pairs of training anchors),
``heldout.jsonl`` (the pairs of held-out anchors, never trained on: the held-out hard-negative suite), the negative
images, and ``metrics/<profile>/concreteplant/<dataset>.json``.
"""

from concrete_jungle.cli import clear_outputs, run_stage
from concrete_jungle.io import read_jsonl, write_jsonl, write_metrics
from concrete_jungle.params import Params


def run_concreteplant_stage(params: Params, dataset: str) -> dict:
    """Sample, rewrite and edit one ConcreteBatch (:func:`~concrete_jungle.concreteplant.pipeline.run_concreteplant`).
    Shards are written under ``data/<profile>/concreteplant-shards`` so a killed run resumes; with
    ``concreteplant.shard_count`` > 1 only the process that finds every shard present writes the outputs.

    Raises:
        ValueError: the keyword candidates do not belong to the manifest (another record order or ids).
    """
    from concrete_jungle.concreteplant.keywords import candidate_from_row
    from concrete_jungle.concreteplant.pipeline import run_concreteplant

    records = read_jsonl(params.data_dir / "corpus" / "manifest.jsonl")
    mined = read_jsonl(params.data_dir / "keywords" / "candidates.jsonl")
    if [m["id"] for m in mined] != [r["id"] for r in records]:
        raise ValueError("concreteplant: data/<profile>/keywords/candidates.jsonl does not list the manifest's "
                         "records in order; re-run the keywords stage")
    candidates = [[candidate_from_row(row) for row in m["candidates"]] for m in mined]
    out = params.data_dir / "concreteplant" / dataset
    metrics = params.metrics_dir / "concreteplant" / f"{dataset}.json"
    clear_outputs(out, metrics)
    out.mkdir(parents=True)
    batch, stats = run_concreteplant(records, dataset, params.concreteplant, params.world, out, seed=params.seed,
                                     candidates=candidates)
    if batch is None:  # this process' shards are done; others (concreteplant.shard_index) are still missing
        return stats
    heldout = {r["id"] for r in records if r.get("split") == "heldout"}
    write_jsonl(out / "concretebatch.jsonl", [b for b in batch if b["anchor_id"] not in heldout])
    write_jsonl(out / "heldout.jsonl", [b for b in batch if b["anchor_id"] in heldout])
    stats["n_heldout"] = sum(b["anchor_id"] in heldout for b in batch)
    write_metrics(metrics, stats)
    return stats


if __name__ == "__main__":
    run_stage(__doc__, run_concreteplant_stage, dataset={"choices": ["hc", "lc", "wo"]})
