"""ConcretePlant's Ray Data engine vs the local engine on the world (issue 21 item 6; targets: 1 worker <= 1.2x the
local wall time, 2 workers >= 1.7x faster than local on the CPU path).

What is timed is what the ``concreteplant`` stage does: every dataset of ``concreteplant.datasets`` (D_hc, D_lc,
D_wo) from the world's manifest and keyword candidates (``data/world``, as ``dvc repro`` left them), each into a
fresh shard work folder; for the Ray engine, once per run, a local Ray started with 2 cores and shut down after
(``ray_start_s`` says how much of the wall time that is), one Ray Data pipeline over every dataset's shards
(``pregenerate``), then the merge per dataset. Rounds alternate local, ray x 1 worker, ray x 2 workers.
Every run's ConcreteBatch is checked equal to the local one (rows and negative-image bytes).

    python benchmarks/ray_engine.py --shard-size 500 --rounds 2
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")

from concrete_jungle.concreteplant.keywords import candidate_from_row  # noqa: E402
from concrete_jungle.concreteplant.pipeline import run_concreteplant  # noqa: E402
from concrete_jungle.io import read_jsonl  # noqa: E402
from concrete_jungle.machine import machine_info  # noqa: E402
from concrete_jungle.params import load_params  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def digest(batch: list[dict]) -> str:
    """SHA-256 over the rows (negative image paths replaced by their bytes' hash)."""
    h = hashlib.sha256()
    for r in batch:
        img = r["negative_image"]
        row = dict(r, negative_image=hashlib.sha256(Path(img).read_bytes()).hexdigest() if img else img)
        h.update(json.dumps(row, sort_keys=True).encode())
    return h.hexdigest()


def run(engine: str, workers: int, shard_size: int, records, candidates, tmp: Path) -> tuple[float, float, dict]:
    """Wall seconds of every dataset, the Ray start-up inside it, and each dataset's digest."""
    params = load_params(REPO / "params.yaml", overrides={"concreteplant": {
        "shard_size": shard_size, "engine": engine, "ray": {"workers": workers, "num_cpus": 2}}})
    cp = params.concreteplant
    t0, start = time.perf_counter(), 0.0
    if engine == "ray":
        import ray

        from concrete_jungle.concreteplant.ray_engine import connect

        connect(cp.ray)
        start = time.perf_counter() - t0
    out = {}
    try:
        if engine == "ray":  # as the stage does: one Ray Data pipeline for every dataset's shards, then merges
            from concrete_jungle.concreteplant.pipeline import pregenerate

            pregenerate(records, {d: tmp / f"{engine}{workers}" / "cp" / d for d in cp.datasets}, cp, params.world,
                        seed=params.seed, candidates=candidates)
        for d in cp.datasets:
            batch, _ = run_concreteplant(records, d, cp, params.world, tmp / f"{engine}{workers}" / "cp" / d,
                                         seed=params.seed, candidates=candidates)
            out[d] = digest(batch)
    finally:
        if engine == "ray":
            ray.shutdown()
    return time.perf_counter() - t0, start, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shard-size", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--name", default="ray_engine", help="benchmarks/results/<name>.json")
    args = ap.parse_args()
    data = REPO / "data" / "world"
    records = read_jsonl(data / "corpus" / "manifest.jsonl")
    candidates = [[candidate_from_row(row) for row in m["candidates"]]
                  for m in read_jsonl(data / "keywords" / "candidates.jsonl")]
    configs = [("local", 1), ("ray", 1), ("ray", 2)]
    walls = {f"{e}_{w}": [] for e, w in configs}
    starts = {f"{e}_{w}": [] for e, w in configs if e == "ray"}
    digests = set()
    for _ in range(args.rounds):
        for engine, workers in configs:
            with tempfile.TemporaryDirectory() as tmp:
                wall, start, out = run(engine, workers, args.shard_size, records, candidates, Path(tmp))
            walls[f"{engine}_{workers}"].append(round(wall, 1))
            if engine == "ray":
                starts[f"{engine}_{workers}"].append(round(start, 1))
            digests.add(json.dumps(out, sort_keys=True))
            print(engine, workers, round(wall, 1), flush=True)
    med = {k: statistics.median(v) for k, v in walls.items()}
    result = {
        "records": len(records), "datasets": ["hc", "lc", "wo"], "shard_size": args.shard_size,
        "shards_per_dataset": -(-len(records) // args.shard_size), "rounds": args.rounds, "wall_s": walls,
        "ray_start_s": starts,
        "ray1_over_local": round(med["ray_1"] / med["local_1"], 3), "target_ray1_over_local": "<= 1.2",
        "speedup_ray2_over_local": round(med["local_1"] / med["ray_2"], 3), "target_speedup_ray2": ">= 1.7",
        "speedup_ray2_over_ray1": round(med["ray_1"] / med["ray_2"], 3),
        "identical_concretebatch": len(digests) == 1, "machine": machine_info(),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=2))


if __name__ == "__main__":
    main()
