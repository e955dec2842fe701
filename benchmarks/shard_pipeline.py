"""WebDataset input vs the JSONL loader (issue 21 item 6, target >= 1.0x): ConcreteBatch quadruples read through
a ``DataLoader`` either from the JSONL records (map-style :class:`~concrete_jungle.datasets.ConcreteBatchDataset`,
every image decoded from its own file, ``cache=False``, shuffled indices) or from tar shards
(:class:`~concrete_jungle.shards.ShardStream` with :class:`~concrete_jungle.shards.ConcreteBatchDecoder`, a seeded
shuffle buffer), the same preprocessing (open_clip's ``ViT-B-32`` 224-px eval transform and tokenizer, no model),
the same workers and batch size, collated into the 2N layout. Throughput = quadruples / s over whole epochs after a
warm-up epoch; ratio = shards / JSONL (> 1: the shards are faster). Rounds alternate the two readers.

Data: COCO val2017 images and captions of the shared data folder as ConcreteBatch-shaped records (anchor k, the
image of record k + 1 as its negative image, its second caption as the negative caption, c_i = 4).

    python benchmarks/shard_pipeline.py --records 400 --workers 2 --rounds 3
    python benchmarks/shard_pipeline.py --records 400 --workers 0 --rounds 3 --name shard_pipeline_w0
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")

import open_clip  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from concrete_jungle.datasets import ConcreteBatchDataset, collate_hard_negatives  # noqa: E402
from concrete_jungle.machine import machine_info  # noqa: E402
from concrete_jungle.shards import ConcreteBatchDecoder, ShardStream, write_shards  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
COCO = Path(__file__).resolve().parents[2] / "shared" / "data" / "coco"


def coco_records(root: Path, count: int) -> list[dict]:
    """``count`` ConcreteBatch-shaped records from val2017 (anchor = record k, negative image = record k + 1)."""
    pairs = []
    with open(root / "coco_pairs.jsonl", encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            path = root / rec["image"]
            if rec.get("coco_split") == "val2017" and path.is_file() and len(rec["captions"]) >= 2:
                pairs.append((str(path), rec["captions"], rec["image_id"]))
    if len(pairs) < count + 1:
        raise SystemExit(f"shard_pipeline: {root} has {len(pairs)} usable val2017 images, {count + 1} needed")
    return [{"anchor_id": f"coco_{pairs[k][2]:012d}", "image": pairs[k][0], "caption": pairs[k][1][0],
             "keyword": "x", "lemma": "x", "type": "object", "span": [0, 1], "c_i": 4.0,
             "negative_image": pairs[k + 1][0], "negative_caption": pairs[k][1][1]} for k in range(count)]


def epoch_rate(loader) -> float:
    """Quadruples a second over one pass of ``loader``."""
    t0, n = time.perf_counter(), 0
    for batch in loader:
        n += batch["texts"].shape[0] // 2
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=400)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--samples-per-shard", type=int, default=100)
    ap.add_argument("--buffer", type=int, default=100)
    ap.add_argument("--name", default="shard_pipeline", help="benchmarks/results/<name>.json")
    args = ap.parse_args()

    records = coco_records(COCO, args.records)
    preprocess = open_clip.image_transform(224, is_train=False)
    tokenizer = open_clip.get_tokenizer("ViT-B-32")
    with tempfile.TemporaryDirectory() as tmp:
        write_shards(records, Path(tmp) / "shards", "concretebatch", args.samples_per_shard)

        def jsonl_loader():
            return DataLoader(ConcreteBatchDataset(records, preprocess, tokenizer, cache=False), batch_size=args.batch,
                              shuffle=True, num_workers=args.workers, collate_fn=collate_hard_negatives,
                              drop_last=True, persistent_workers=False)

        def shard_loader():
            stream = ShardStream(Path(tmp) / "shards", seed=0, shuffle_buffer=args.buffer,
                                 decode=ConcreteBatchDecoder(preprocess, tokenizer))
            return DataLoader(stream, batch_size=args.batch, num_workers=args.workers,
                              collate_fn=collate_hard_negatives, drop_last=True)

        epoch_rate(jsonl_loader()), epoch_rate(shard_loader())  # warm-up: page cache, worker start
        rates = {"jsonl": [], "shards": []}
        for _ in range(args.rounds):
            rates["jsonl"].append(epoch_rate(jsonl_loader()))
            rates["shards"].append(epoch_rate(shard_loader()))
    ratios = [s / j for s, j in zip(rates["shards"], rates["jsonl"])]
    result = {"records": args.records, "batch": args.batch, "workers": args.workers, "rounds": args.rounds,
              "samples_per_shard": args.samples_per_shard, "shuffle_buffer": args.buffer,
              "quadruples_per_s": {k: [round(x, 1) for x in v] for k, v in rates.items()},
              "ratio_shards_over_jsonl_median": round(statistics.median(ratios), 3),
              "ratios": [round(r, 3) for r in ratios], "target": ">= 1.0", "machine": machine_info()}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=2))


if __name__ == "__main__":
    main()
