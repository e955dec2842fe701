"""The real profile's fine-tune step with DataLoader workers (the locked trunk run every step) against the same step
over the locked trunk's cached maps in the main process (docs/instrument.md H34).

``stages/train.py`` caches decoded inputs, and so the maps of a wholly locked image trunk
(``models/trunk_cache.py``), only with ``train.num_workers: 0`` (a worker's cache is its own). The real profile set
``num_workers: 2``: each step then decodes 32 COCO JPEGs in the workers and runs EfficientNet-Lite0 on them in the
training process. This times, with the stage's own building blocks and the pipeline's base checkpoint and
ConcreteBatch, one member (``<dataset>-<loss>``) for ``--steps`` steps under:

- ``workers_<W>_no_cache``: as the stage trains with ``train.num_workers: W`` (> 0): JPEGs decoded by the workers,
  the trunk run every step;
- ``workers_0_trunk_maps``: as it trains with ``num_workers: 0``: the trunk's maps filled before the loop
  (``fill_trunk_maps``, timed apart as ``fill_s``), the head and text tower every step.

The step time is the median interval between successive ``on_step_end`` calls after ``--warmup`` steps; each
config runs ``--repeats`` times in ABBA order; ratio = the configs' medians of those step times. Both train the
same seeded model on the same batches; the final logged losses are recorded (equal up to float order: the trunk
runs in batches of 64 for the maps, 32 a step otherwise).

    python benchmarks/trunk_cache_workers.py --params pipelines/real_long_seed2/params.yaml --dataset lc
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")  # before tqdm is imported (by the trainer)

from concrete_jungle.io import read_jsonl  # noqa: E402
from concrete_jungle.losses import LOSSES, build_loss  # noqa: E402
from concrete_jungle.machine import machine_info  # noqa: E402
from concrete_jungle.models.checkpoints import load_model, save_checkpoint  # noqa: E402
from concrete_jungle.models.trunk_cache import fill_trunk_maps, head_on_trunk_maps, training_preprocess  # noqa: E402
from concrete_jungle.params import load_params  # noqa: E402
from concrete_jungle.training import ConcreteBatchDataset, train_contrastive  # noqa: E402

RESULT = Path(__file__).resolve().parent / "results" / "trunk_cache_workers.json"


def run_config(params, dataset: str, loss: str, workers: int, steps: int, warmup: int, work: Path) -> dict:
    """One member's first ``steps`` steps with ``workers`` DataLoader workers (0: the trunk's maps cached)."""
    cache = not params.train.augment and workers == 0  # stages/train.py's rule (JSONL: the stream never caches)
    bundle = load_model(params.models_dir / "base" / "checkpoint.pt")
    preprocess, trunk_maps = training_preprocess(bundle, params.train.augment, cache)
    batch = read_jsonl(params.data_dir / "concreteplant" / dataset / "concretebatch.jsonl")
    ds = ConcreteBatchDataset(batch, preprocess, bundle.tokenizer, cache=cache,
                              negative_images=LOSSES[loss].needs_hard_negative_images)
    fill_s = None
    if trunk_maps:
        t0 = time.perf_counter()
        fill_trunk_maps(ds, bundle.model, bundle.preprocess_val)
        fill_s = round(time.perf_counter() - t0, 2)
    loop = params.train.model_copy(update={"max_steps": steps, "num_workers": workers, "log_every": steps,
                                           "checkpoint_every": None, "curve_every": None})
    name = f"workers_{workers}_" + ("trunk_maps" if trunk_maps else "no_cache")
    stamps: list[float] = []
    t0 = time.perf_counter()
    with head_on_trunk_maps(bundle.model) if trunk_maps else contextlib.nullcontext():
        summary = train_contrastive(bundle, ds, build_loss(loss, params.margin.to_config()), loop, seed=params.seed,
                                    live_dir=work / name / "live", checkpoint_path=work / name / "c.pt",
                                    params_dump={}, save_checkpoint=save_checkpoint, hard_negatives=True,
                                    device="cpu", keep_state=False,
                                    on_step_end=lambda step: stamps.append(time.perf_counter()))
    wall = time.perf_counter() - t0
    intervals = [b - a for a, b in zip(stamps[warmup:], stamps[warmup + 1:])]
    return {"config": name, "workers": workers, "trunk_maps": trunk_maps, "images": len(ds.image_paths()),
            "steps": summary["steps"],
            "median_step_s": round(statistics.median(intervals), 3),
            "step_s": [round(x, 3) for x in intervals], "fill_s": fill_s, "wall_s_incl_startup": round(wall, 2),
            "final_loss": summary["loss"], "precision": summary["precision"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=Path, required=True, help="a real-profile pipeline whose base is trained")
    parser.add_argument("--dataset", default="lc")
    parser.add_argument("--loss", default="negclip", choices=sorted(LOSSES))
    parser.add_argument("--workers", type=int, default=2, help="workers of the uncached run (the profile's value)")
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--warmup", type=int, default=3, help="step intervals left out at the start")
    parser.add_argument("--repeats", type=int, default=2,
                        help="runs of each config, in ABBA order (cached, workers, workers, cached, ...)")
    parser.add_argument("--note", default="", help="free text stored in the JSON (e.g. what else ran on the machine)")
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args(argv)
    params = load_params(args.params)
    if not LOSSES[args.loss].needs_hard_negatives:
        raise SystemExit(f"trunk_cache_workers: --loss {args.loss} trains without hard negatives")
    if params.train.data_format != "jsonl" or params.train.augment:
        raise SystemExit(f"trunk_cache_workers: {args.params} streams shards or augments: nothing is cached")
    load_before = os.getloadavg()
    order = [w for k in range(args.repeats) for w in ((0, args.workers) if k % 2 == 0 else (args.workers, 0))]
    with tempfile.TemporaryDirectory() as tmp:
        runs = [run_config(params, args.dataset, args.loss, w, args.steps, args.warmup, Path(tmp) / str(k))
                for k, w in enumerate(order)]
    median = {w: statistics.median(r["median_step_s"] for r in runs if r["workers"] == w) for w in (0, args.workers)}
    for r in runs:
        r["ratio_to_trunk_maps"] = round(r["median_step_s"] / median[0], 3)
        print(f"{r['config']:22s} median step {r['median_step_s']:7.3f} s  ratio {r['ratio_to_trunk_maps']:.2f}  "
              f"final loss {r['final_loss']:.9f}  fill {r['fill_s']}", flush=True)
    result = {
        "ratio_workers_to_trunk_maps": round(median[args.workers] / median[0], 3),
        "what": "the real profile's fine-tune step: DataLoader workers and the trunk every step vs its cached maps",
        "params": str(args.params), "member": f"{args.dataset}-{args.loss}", "batch_size": params.train.batch_size,
        "steps": args.steps, "warmup_intervals_dropped": args.warmup, "note": args.note, "runs": runs,
        "final_loss_abs_difference": max(r["final_loss"] for r in runs) - min(r["final_loss"] for r in runs),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "machine_info": machine_info(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
