"""A stated projection of the paper profile's ConcretePlant generation time on N GPUs (issue 21 item 6), from
published throughputs (no GPU was lent to measure ours; ``benchmarks/gpu_paper_profile.py`` measures training, not
generation). Every input is a named assumption in the result JSON, so a reader with other figures re-runs it:

    python benchmarks/project_generation.py --gpus 1 8 64
    python benchmarks/project_generation.py --rewrites-per-s 25 --edit-s 0.25   # your own measurements

Work: ``anchors`` (COCO Karpathy train) x the ConcreteBatch datasets of ``pipelines/paper/params.yaml``, times
``1 + retry_share`` rewrites (rejected rewrites are retried) and one image edit a kept pair. Each Ray worker holds
one rewriter replica and one SDXL-Turbo pipeline on its GPU (``concreteplant.ray``), so a worker's time per pair is
the sum of the two; N workers divide it (the shards are independent). Keyword mining (spaCy, CPU) runs once for all
datasets in the ``keywords`` stage, at the measured rate of ``benchmarks/keyword_mining.py``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from concrete_jungle.params import load_params

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"

SOURCES = {
    "anchors": "COCO Karpathy train split: 113,287 images (Karpathy & Fei-Fei 2015; the paper trains on it)",
    "rewrites_per_s": "vLLM, Qwen3-32B bf16 on one H100, 'short prompt' case: about 4,000 total tokens/s "
                      "(GPUStack performance lab, docs.gpustack.ai/2.0/performance-lab/qwen3-32b/h100, vLLM "
                      "baseline without tuning); prompt A.2 plus caption ~350 tokens in, <= 64 out (thinking off): "
                      "about 400 tokens a rewrite, so ~10 rewrites/s; prefix caching of the shared prompt would "
                      "raise it",
    "edit_s": "SDXL-Turbo, 512 x 512, one step, fp16: 207 ms on an A100 (Stability AI's release figure); the "
              "paper profile's img2img runs int(4 x 0.75) = 3 UNet steps plus a VAE encode: ~0.5 s on an A100, "
              "taken as 0.3 s on an H100",
    "mining_captions_per_s": "benchmarks/results/keyword_mining.json: ~807 captions/s on 2 CPU cores",
}


def project(anchors: int, datasets: int, rewrites_per_s: float, edit_s: float, retry_share: float,
            mining_captions_per_s: float, gpus: list[int]) -> dict:
    """Hours of generation on each N of ``gpus`` (rewrite + edit per pair, N workers), and the mining minutes."""
    pairs = anchors * datasets
    rewrite_s = pairs * (1 + retry_share) / rewrites_per_s
    edit_total_s = pairs * edit_s
    gpu_hours = (rewrite_s + edit_total_s) / 3600
    return {"pairs": pairs, "rewrite_gpu_hours": round(rewrite_s / 3600, 1),
            "edit_gpu_hours": round(edit_total_s / 3600, 1), "gpu_hours": round(gpu_hours, 1),
            "mining_cpu_minutes": round(anchors / mining_captions_per_s / 60, 1),
            "wall_hours_by_gpus": {str(n): round(gpu_hours / n, 2) for n in gpus}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--anchors", type=int, default=113_287)
    ap.add_argument("--rewrites-per-s", type=float, default=10.0, help="one GPU's rewriter replica")
    ap.add_argument("--edit-s", type=float, default=0.3, help="seconds an image edit on one GPU")
    ap.add_argument("--retry-share", type=float, default=0.1, help="extra rewrites for rejected ones")
    ap.add_argument("--mining-captions-per-s", type=float, default=807.0)
    ap.add_argument("--gpus", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--name", default="paper_generation_projection")
    args = ap.parse_args()
    params = load_params(REPO / "pipelines" / "paper" / "params.yaml")
    datasets = list(params.concreteplant.datasets)
    result = {
        "what": "projection from published throughputs, not a measurement",
        "datasets": datasets, "anchors": args.anchors, "rewrites_per_s": args.rewrites_per_s,
        "edit_s": args.edit_s, "retry_share": args.retry_share, "sources": SOURCES,
        **project(args.anchors, len(datasets), args.rewrites_per_s, args.edit_s, args.retry_share,
                  args.mining_captions_per_s, args.gpus),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
