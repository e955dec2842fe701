"""DVC stage `concreteplant`: ConcretePlant hard negatives for every ConcreteBatch dataset of
``concreteplant.datasets`` (D_hc, D_lc, D_wo; paper Sec. 2.2, A.1, A.2), from the keyword candidates of the
``keywords`` stage, in one process (the manifest, the candidates, the Brysbaert table and the rewriter are loaded
once).

Writes, per dataset ``<d>``, ``data/<profile>/concreteplant/<d>/concretebatch.jsonl`` (the pairs of training
anchors), ``heldout.jsonl`` (the pairs of held-out anchors, never trained on: the held-out hard-negative suite), the
negative images, and ``metrics/<profile>/concreteplant/<d>.json``. ``--dataset <d>`` makes one dataset only (for a
shard of a corpus split over several machines, see the README's "Scaling out"). With ``concreteplant.engine: ray``
the shards are generated on a Ray Data actor pool (``concreteplant/ray_engine.py``; the same outputs).
"""

from concrete_jungle.cli import clear_outputs, run_stage
from concrete_jungle.io import read_jsonl, write_jsonl, write_metrics
from concrete_jungle.params import Params


def run_concreteplant_stage(params: Params, dataset: str | None = None) -> dict:
    """Sample, rewrite and edit the ConcreteBatch of ``dataset``, or of every dataset of
    ``concreteplant.datasets`` when it is None (:func:`~concrete_jungle.concreteplant.pipeline.run_concreteplant`).
    Shards are written under ``data/<profile>/concreteplant-shards`` so a killed run resumes; with
    ``concreteplant.shard_count`` > 1 only the process that finds every shard present writes the outputs.

    Returns:
        ``{dataset: ConcretePlant statistics}`` (the content of each dataset's metrics file).

    Raises:
        ValueError: the keyword candidates do not belong to the manifest (another record order or ids), or
            ``dataset`` is not one of ``concreteplant.datasets``.
    """
    from concrete_jungle.concreteplant.keywords import candidate_from_row
    from concrete_jungle.concreteplant.pipeline import pregenerate, run_concreteplant

    datasets = list(params.concreteplant.datasets) if dataset is None else [dataset]
    if dataset is not None and dataset not in params.concreteplant.datasets:
        raise ValueError(f"--dataset {dataset!r} is not one of concreteplant.datasets "
                         f"{list(params.concreteplant.datasets)}")
    records = read_jsonl(params.data_dir / "corpus" / "manifest.jsonl")
    mined = read_jsonl(params.data_dir / "keywords" / "candidates.jsonl")
    if [m["id"] for m in mined] != [r["id"] for r in records]:
        raise ValueError("concreteplant: data/<profile>/keywords/candidates.jsonl does not list the manifest's "
                         "records in order; re-run the keywords stage")
    candidates = [[candidate_from_row(row) for row in m["candidates"]] for m in mined]
    if params.concreteplant.concreteness == "visual":  # ratings of the visual_concreteness stage replace Brysbaert's
        import dataclasses

        from concrete_jungle.io import read_json

        visual = read_json(params.data_dir / "visual_concreteness" / "ratings.json")
        candidates = [[dataclasses.replace(c, concreteness=visual.get(c.lemma)) for c in cands] for cands in candidates]
    heldout = {r["id"] for r in records if r.get("split") == "heldout"}
    outs = {d: params.data_dir / "concreteplant" / d for d in datasets}
    metrics = {d: params.metrics_dir / "concreteplant" / f"{d}.json" for d in datasets}
    clear_outputs(*outs.values(), *metrics.values())  # no dataset new beside another from an earlier run
    summary = {}
    # engine ray: one Ray Data pipeline for every dataset's missing shards (Ray is joined only if one is missing)
    pregenerate(records, outs, params.concreteplant, params.world, seed=params.seed, candidates=candidates)
    for d in datasets:
        outs[d].mkdir(parents=True)
        batch, stats = run_concreteplant(records, d, params.concreteplant, params.world, outs[d], seed=params.seed,
                                         candidates=candidates)
        if batch is not None:  # None: this process' shards are done, others (concreteplant.shard_index) missing
            write_jsonl(outs[d] / "concretebatch.jsonl", [b for b in batch if b["anchor_id"] not in heldout])
            write_jsonl(outs[d] / "heldout.jsonl", [b for b in batch if b["anchor_id"] in heldout])
            stats["n_heldout"] = sum(b["anchor_id"] in heldout for b in batch)
            write_metrics(metrics[d], stats)
        summary[d] = stats
    return summary


if __name__ == "__main__":
    run_stage(__doc__, run_concreteplant_stage, dataset={"default": None, "required": False,
                                                         "help": "one dataset of concreteplant.datasets "
                                                                 "(default: every one)"})
