"""Speed of Cement loss against open_clip's ``ClipLoss`` (issue target: forward + backward <= 1.10x, CPU).

Both losses get the same ConcreteBatch-shaped features, ``[2N, D]`` L2-normalised images and texts (N = 1024,
D = 512 by default) and a logit scale that requires grad, as in training. One sample is the wall time of
``loss(...)`` plus ``backward()`` (Cement's ``stats`` are part of its forward). Samples are interleaved (the order of
the two losses alternates every repeat) after a warm-up, in the same process and with the same torch threads, and
the median of each is reported; the ratio is median(Cement) / median(ClipLoss). The machine may be shared, so the
script makes several independent runs and keeps each one's figures (and the load average around it).

    python benchmarks/loss_speed.py                  # 3 runs x 21 repeats -> benchmarks/results/loss_speed.json
    python benchmarks/loss_speed.py --runs 1 --check # exit 1 when the ratio exceeds --limit
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import open_clip
import torch
import torch.nn.functional as F
from open_clip.loss import ClipLoss

from concrete_jungle.losses import MarginConfig, build_loss, stats_to_floats
from concrete_jungle.machine import machine_info

RESULT = Path(__file__).resolve().parent / "results" / "loss_speed.json"


def _features(n: int, d: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    img = F.normalize(torch.randn(2 * n, d, generator=g), dim=-1)
    txt = F.normalize(torch.randn(2 * n, d, generator=g), dim=-1)
    c = 1.0 + 4.0 * torch.rand(n, generator=g)
    return img, txt, c


def _time_once(call, img, txt, scale) -> float:
    """Milliseconds of one forward + backward on fresh leaves."""
    i = img.clone().requires_grad_(True)
    t = txt.clone().requires_grad_(True)
    s = scale.clone().requires_grad_(True)
    t0 = time.perf_counter()
    loss = call(i, t, s.exp())
    loss.backward()
    return (time.perf_counter() - t0) * 1e3


def one_run(n: int, d: int, repeats: int, warmup: int, seed: int, variant: str) -> dict:
    """One interleaved comparison; returns raw samples (ms), medians and the ratio."""
    img, txt, c = _features(n, d, seed)
    valid = torch.ones(n, dtype=torch.bool)
    scale = torch.tensor(100.0).log()
    clip = ClipLoss()
    ours = build_loss(variant, MarginConfig())
    calls = {
        "clip_loss": lambda i, t, s: clip(i, t, s, output_dict=True)["contrastive_loss"],
        variant: lambda i, t, s: ours(i, t, s, concreteness=c, hard_negative_valid=valid)["contrastive_loss"],
    }
    names = list(calls)
    for _ in range(warmup):
        for name in names:
            _time_once(calls[name], img, txt, scale)
    samples = {name: [] for name in names}
    load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
    for r in range(repeats):
        for name in (names if r % 2 == 0 else names[::-1]):
            samples[name].append(_time_once(calls[name], img, txt, scale))
    load_after = os.getloadavg() if hasattr(os, "getloadavg") else None
    med = {name: statistics.median(v) for name, v in samples.items()}
    paired = [a / b for a, b in zip(samples[variant], samples["clip_loss"])]
    return {
        "median_ms": {k: round(v, 2) for k, v in med.items()},
        "min_ms": {k: round(min(v), 2) for k, v in samples.items()},
        "ratio": round(med[variant] / med["clip_loss"], 4),
        "paired_ratio_median": round(statistics.median(paired), 4),
        "samples_ms": {k: [round(x, 2) for x in v] for k, v in samples.items()},
        "loadavg_1_5_15_before": load_before,
        "loadavg_1_5_15_after": load_after,
        "stats_last": stats_to_floats(ours(img, txt, scale.exp(), concreteness=c, hard_negative_valid=valid,
                                           return_stats=True)["stats"]),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1024, help="anchors per batch N (features are [2N, D])")
    parser.add_argument("--d", type=int, default=512, help="embedding size D")
    parser.add_argument("--runs", type=int, default=3, help="independent runs (the machine may be shared)")
    parser.add_argument("--repeats", type=int, default=21, help="timed repeats per loss and run")
    parser.add_argument("--warmup", type=int, default=2, help="untimed repeats per loss and run")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's current)")
    parser.add_argument("--variant", default="cement", help="loss of the registry to compare (default cement)")
    parser.add_argument("--limit", type=float, default=1.10, help="target ratio (issue: 1.10)")
    parser.add_argument("--out", type=Path, default=RESULT, help=f"result JSON (default {RESULT})")
    parser.add_argument("--check", action="store_true", help="exit 1 when the worst run's ratio exceeds --limit")
    args = parser.parse_args(argv)
    for name in ("n", "d", "runs", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    runs = []
    for k in range(args.runs):
        run = one_run(args.n, args.d, args.repeats, args.warmup, seed=k, variant=args.variant)
        runs.append(run)
        print(f"run {k + 1}/{args.runs}: clip_loss {run['median_ms']['clip_loss']:.1f} ms, {args.variant} "
              f"{run['median_ms'][args.variant]:.1f} ms, ratio {run['ratio']:.3f} "
              f"(paired {run['paired_ratio_median']:.3f}), load {run['loadavg_1_5_15_before']}", flush=True)
    worst = max(r["ratio"] for r in runs)
    result = {
        "what": f"forward+backward ms of {args.variant} vs open_clip ClipLoss on the same [2N, D] features, CPU",
        "variant": args.variant,
        "n": args.n, "rows": 2 * args.n, "d": args.d,
        "torch_threads": torch.get_num_threads(),
        "runs": args.runs, "repeats": args.repeats, "warmup": args.warmup,
        "ratio_per_run": [r["ratio"] for r in runs],
        "ratio_worst": worst,
        "limit": args.limit,
        "within_limit": worst <= args.limit,
        "per_run": runs,
        "torch": torch.__version__, "open_clip": open_clip.__version__,
        "cpus": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result["machine_info"] = machine_info()  # CPU model, ISA flags and caps, torch threads
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"ratios {result['ratio_per_run']} (limit {args.limit}); wrote {args.out}")
    return 1 if args.check and not result["within_limit"] else 0


if __name__ == "__main__":
    sys.exit(main())
