"""DVC stage `concreteplant@<dataset>`: ConcretePlant hard negatives for one ConcreteBatch dataset (D_hc, D_lc or
D_wo; paper Sec. 2.2, A.1, A.2).

Writes ``data/<profile>/concreteplant/<dataset>/concretebatch.jsonl`` (+ negative images) and
``metrics/<profile>/concreteplant/<dataset>.json``.
"""

from concrete_jungle.cli import clear_outputs, run_stage
from concrete_jungle.io import read_jsonl, write_jsonl, write_metrics
from concrete_jungle.params import Params


def run_concreteplant_stage(params: Params, dataset: str) -> dict:
    """Mine, sample, rewrite and edit one ConcreteBatch (:func:`~concrete_jungle.concreteplant.pipeline.run_concreteplant`).
    Shards are written under ``data/<profile>/concreteplant-shards`` so a killed run resumes; with
    ``concreteplant.shard_count`` > 1 only the process that finds every shard present writes the outputs."""
    from concrete_jungle.concreteplant.pipeline import run_concreteplant

    records = read_jsonl(params.data_dir / "corpus" / "manifest.jsonl")
    out = params.data_dir / "concreteplant" / dataset
    metrics = params.metrics_dir / "concreteplant" / f"{dataset}.json"
    clear_outputs(out, metrics)
    out.mkdir(parents=True)
    batch, stats = run_concreteplant(records, dataset, params.concreteplant, params.world, out, seed=params.seed)
    if batch is None:  # this process' shards are done; others (concreteplant.shard_index) are still missing
        return stats
    write_jsonl(out / "concretebatch.jsonl", batch)
    write_metrics(metrics, stats)
    return stats


if __name__ == "__main__":
    run_stage(__doc__, run_concreteplant_stage, dataset={"choices": ["hc", "lc", "wo"]})
