"""Input pipeline cost: a training step on real JPEGs (decoded by DataLoader workers) against a step on pre-decoded
tensors (target: <= 1.1x), with the real trainer (:func:`concrete_jungle.training.train_contrastive`), CPU.

Data: COCO val2017 images and captions of the shared data folder (``/work/shared/data/coco``, ``coco_pairs.jsonl``)
as ConcreteBatch records: anchor image and first caption, the next record's image and the second caption as the
"hard negative" (the timing only needs 2N real JPEGs a step), c_i = 4. Every configuration trains the same seeded
model for the same steps on the same batches, ``log_every`` larger than the run (no logged step until the last):

- ``pre_decoded``: ``ConcreteBatchDataset(cache=True)`` whose decoded-input cache is filled before the run
  (every item read once, untimed), 0 workers: the batch is stacked from tensors in memory;
- ``jpeg_workers_<W>``: ``cache=False`` (every image decoded from its JPEG and preprocessed in every step) with
  W DataLoader worker processes (and ``jpeg_workers_0``: decoding in the main process, for reference).

The step time is the median interval between successive ``on_step_end`` calls after ``--warmup`` steps (worker
start-up and the first batches are outside it); ratio = median(jpeg) / median(pre_decoded). The script also times
the decode + preprocess of one image in one process, and extrapolates how many worker cores the paper's N = 1024
(2N = 2048 images a step) needs to keep up with a given step time.

    python benchmarks/input_pipeline.py                         # ViT-B-32-quickgelu (224 px), N = 8
    python benchmarks/input_pipeline.py --model world --n 32    # the 64 px world model
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")  # before tqdm is imported (by the trainer)

import torch  # noqa: E402

from concrete_jungle.io import load_rgb  # noqa: E402
from concrete_jungle.losses import CementLoss, MarginConfig  # noqa: E402
from concrete_jungle.models.build import build_model  # noqa: E402
from concrete_jungle.models.checkpoints import save_checkpoint  # noqa: E402
from concrete_jungle.params import LoopParams, ModelSpec  # noqa: E402
from concrete_jungle.training import ConcreteBatchDataset, train_contrastive  # noqa: E402
from concrete_jungle.machine import machine_info  # noqa: E402

RESULT = Path(__file__).resolve().parent / "results" / "input_pipeline.json"
COCO = Path("/work/shared/data/coco")
SPECS = {"vit-b-32-quickgelu": {"kind": "open_clip", "name": "ViT-B-32-quickgelu", "pretrained": None},
         "world": {"kind": "world", "name": "cj-world-vit", "context_length": 32}}


def coco_records(root: Path, count: int) -> list[dict]:
    """``count`` ConcreteBatch-shaped records from val2017 (anchor = record k, negative image = record k + 1)."""
    pairs = []
    with open(root / "coco_pairs.jsonl") as fh:
        for line in fh:
            rec = json.loads(line)
            path = root / rec["image"]
            if rec.get("coco_split") == "val2017" and path.is_file() and len(rec["captions"]) >= 2:
                pairs.append((str(path), rec["captions"]))
    if len(pairs) < count + 1:
        raise SystemExit(f"input_pipeline: {root} has {len(pairs)} usable val2017 images, {count + 1} needed")
    return [{"anchor_id": f"coco{k}", "image": pairs[k][0], "caption": pairs[k][1][0],
             "negative_image": pairs[k + 1][0], "negative_caption": pairs[k][1][1], "c_i": 4.0}
            for k in range(count)]


def run_config(model_key: str, records: list[dict], n: int, steps: int, warmup: int, threads: int, *,
               cached: bool, workers: int, work: Path) -> dict:
    bundle = build_model(ModelSpec(**SPECS[model_key]), seed=0)
    ds = ConcreteBatchDataset(records, bundle.preprocess_val, bundle.tokenizer, cache=cached)
    if cached:  # pre-decode every input (untimed): the run then stacks tensors from memory
        for i in range(len(ds)):
            ds[i]
    loop = LoopParams(epochs=1, max_steps=steps, batch_size=n, lr=1e-5, warmup_frac=0.0, log_every=10**6,
                      num_threads=threads)
    stamps = []
    name = "pre_decoded" if cached else f"jpeg_workers_{workers}"
    t0 = time.perf_counter()
    summary = train_contrastive(bundle, ds, CementLoss(MarginConfig()), loop, seed=0, live_dir=work / name / "live",
                                checkpoint_path=work / name / "c.pt", params_dump={}, save_checkpoint=save_checkpoint,
                                hard_negatives=True, device="cpu", keep_state=False, num_workers=workers,
                                on_step_end=lambda step: stamps.append(time.perf_counter()))
    wall = time.perf_counter() - t0
    intervals = [b - a for a, b in zip(stamps[warmup:], stamps[warmup + 1:])]
    return {"config": name, "workers": workers, "steps": summary["steps"], "rows_2n": 2 * n,
            "median_step_ms": round(statistics.median(intervals) * 1e3, 2),
            "step_ms": [round(x * 1e3, 2) for x in intervals], "wall_s_incl_startup": round(wall, 2),
            "final_loss": summary["loss"]}


def decode_rate(model_key: str, records: list[dict], count: int) -> dict:
    """Images a second one process decodes and preprocesses (JPEG -> normalised tensor)."""
    bundle = build_model(ModelSpec(**SPECS[model_key]), seed=0)
    paths = [r["image"] for r in records[:count]]
    bundle.preprocess_val(load_rgb(paths[0]))
    t0 = time.perf_counter()
    for p in paths:
        bundle.preprocess_val(load_rgb(p))
    dt = (time.perf_counter() - t0) / len(paths)
    return {"ms_per_image": round(dt * 1e3, 2), "images_per_s_per_process": round(1 / dt, 1)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="vit-b-32-quickgelu", choices=list(SPECS))
    parser.add_argument("--n", type=int, default=8, help="anchors N a step (2N images)")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=1, help="step intervals left out at the start")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2], help="worker counts for the JPEG runs")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the training process")
    parser.add_argument("--coco", type=Path, default=COCO)
    parser.add_argument("--limit", type=float, default=1.1)
    parser.add_argument("--note", default="", help="free text stored in the JSON (e.g. what else ran on the machine)")
    parser.add_argument("--out", type=Path, default=RESULT)
    parser.add_argument("--check", action="store_true", help="exit 1 when the ratio with the most workers > --limit")
    args = parser.parse_args(argv)
    records = coco_records(args.coco, args.n * args.steps)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        runs = [run_config(args.model, records, args.n, args.steps, args.warmup, args.threads, cached=True,
                           workers=0, work=Path(tmp))]
        for w in args.workers:
            runs.append(run_config(args.model, records, args.n, args.steps, args.warmup, args.threads, cached=False,
                                   workers=w, work=Path(tmp)))
    base = runs[0]["median_step_ms"]
    for r in runs:
        r["ratio_to_pre_decoded"] = round(r["median_step_ms"] / base, 4)
        print(f"{r['config']:16s} median step {r['median_step_ms']:9.2f} ms  ratio {r['ratio_to_pre_decoded']:.3f}",
              flush=True)
    same_loss = len({r["final_loss"] for r in runs}) == 1
    rate = decode_rate(args.model, records, 32)
    result = {
        "target": f"median step on JPEGs with workers / on pre-decoded tensors <= {args.limit}",
        "model": {**SPECS[args.model], "init": "seeded random"}, "n": args.n, "steps": args.steps,
        "warmup_intervals_dropped": args.warmup, "threads": args.threads, "cpus": os.cpu_count(),
        "torch": torch.__version__, "python": platform.python_version(), "note": args.note,
        "data": f"{args.coco}/val2017 JPEGs + captions (coco_pairs.jsonl)", "runs": runs,
        "same_final_loss_in_every_config": same_loss,
        "decode_preprocess": rate,
        "paper_scale_estimate": {
            "images_per_step_at_N_1024": 2048,
            "decode_seconds_per_step_one_process": round(2048 / rate["images_per_s_per_process"], 2),
            "note": "worker cores needed to decode 2N = 2048 JPEGs within a step time T: "
                    "2048 / (images_per_s_per_process * T); with the decoded-input cache (augment off) each "
                    "worker decodes an image only once",
        },
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result["machine_info"] = machine_info()  # CPU model, ISA flags and caps, torch threads
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({r["config"]: r["ratio_to_pre_decoded"] for r in runs}), "decode", rate)
    if args.check and runs[-1]["ratio_to_pre_decoded"] > args.limit:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
