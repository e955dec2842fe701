"""Training-step throughput of our trainer against open_clip's own training loop (issue target: >= 0.95x, CPU).

Same tiny model (the world model ``cj-world-vit``, 64 px, seeded init, one copy each), same 2N batch (N anchors +
N hard negatives: images ``[2N, 3, 64, 64]``, tokens ``[2N, 32]``), same AdamW settings (betas 0.9/0.98, eps 1e-6,
weight decay off for gains, biases and the logit scale), same gradient clipping (1.0), same torch threads.

- ours: :func:`concrete_jungle.training.train_step` exactly as ``train_contrastive`` calls it (forward under
  ``ModelBundle.autocast``, Cement loss on the 2N x 2N logits with its statistics, non-finite guards, backward,
  clipping, AdamW step, logit-scale clamp), with the learning rate from ``cosine_lr``.
- reference: the body of open_clip_train's ``train_one_epoch`` (open_clip_train is not installed here, so it is
  written out): set the lr, ``zero_grad``, ``model(images, texts)`` and ``ClipLoss(**model_out)`` under
  ``torch.autocast`` (bf16) or none (fp32), ``backward``, ``clip_grad_norm_``, ``step``, clamp the logit scale.

Data loading is not timed (both get the same prepared batch). Steps are interleaved (the order of the two loops
alternates every repeat) after a warm-up, and the median step time of each is kept; throughput = 2N / median, the
ratio = throughput(ours) / throughput(reference) = median(reference) / median(ours). On a shared machine the step
times drift with the load (bimodal samples), which moves a median of either loop alone; the two steps of one repeat
run back to back, so ``paired_ratio_median`` (median over repeats of t_reference / t_ours) is the load-robust figure,
and the one ``--check`` uses. The script makes several independent runs and records each one's figures with the load
average around it.

    python benchmarks/train_step.py                    # 3 runs, fp32 and bf16 -> benchmarks/results/train_step.json
    python benchmarks/train_step.py --runs 1 --check   # exit 1 when an fp32 paired ratio is below --limit
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from open_clip.loss import ClipLoss

from concrete_jungle.losses import CementLoss, MarginConfig
from concrete_jungle.models.build import build_model
from concrete_jungle.params import ModelSpec
from concrete_jungle.training import _param_groups, cosine_lr, train_step

RESULT = Path(__file__).resolve().parent / "results" / "train_step.json"


def _batch(bundle, n: int, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    words = ["red", "blue", "large", "small", "circle", "square", "left", "right", "of", "a", "the", "metal"]
    captions = [" ".join(words[int(j)] for j in torch.randint(len(words), (8,), generator=g)) for _ in range(2 * n)]
    return {"images": torch.randn(2 * n, 3, 64, 64, generator=g), "texts": bundle.tokenizer(captions),
            "concreteness": 1.0 + 4.0 * torch.rand(n, generator=g), "valid": torch.ones(n, dtype=torch.bool)}


def _reference_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """open_clip_train's split: ndim < 2, 'bn', 'ln', 'bias', 'logit_scale' -> no weight decay."""
    def exclude(name, p):
        return p.ndim < 2 or "bn" in name or "ln" in name or "bias" in name or "logit_scale" in name

    named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    return [{"params": [p for name, p in named if exclude(name, p)], "weight_decay": 0.0},
            {"params": [p for name, p in named if not exclude(name, p)], "weight_decay": weight_decay}]


def one_run(n: int, precision: str, repeats: int, warmup: int, grad_clip: float, seed: int) -> dict:
    bundle = build_model(ModelSpec(kind="world", name="cj-world-vit", context_length=32, precision=precision), seed=0)
    ours_model, ref_model = bundle.model, copy.deepcopy(bundle.model)
    ours_model.train(), ref_model.train()
    batch = _batch(bundle, n, seed)
    ours_opt = torch.optim.AdamW(_param_groups(ours_model, 0.1), lr=1e-4, betas=(0.9, 0.98), eps=1e-6)
    ref_opt = torch.optim.AdamW(_reference_groups(ref_model, 0.1), lr=1e-4, betas=(0.9, 0.98), eps=1e-6)
    cement, clip = CementLoss(MarginConfig()), ClipLoss()
    total = warmup + repeats

    def ref_autocast():
        return torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()

    def ours(step: int) -> float:
        t0 = time.perf_counter()
        train_step(ours_model, batch, cement, ours_opt, lr=cosine_lr(step, total, 1, 1e-4), step=step,
                   hard_negatives=True, grad_clip=grad_clip, autocast=bundle.autocast)
        return time.perf_counter() - t0

    def reference(step: int) -> float:
        t0 = time.perf_counter()
        for group in ref_opt.param_groups:  # open_clip's scheduler(step) assigns the lr
            group["lr"] = cosine_lr(step, total, 1, 1e-4)
        images, texts = batch["images"], batch["texts"]
        ref_opt.zero_grad()
        with ref_autocast():
            model_out = ref_model(images, texts)
            losses = clip(**model_out, output_dict=True)
            total_loss = sum(losses.values())
            losses["loss"] = total_loss
        total_loss.backward()
        torch.nn.utils.clip_grad_norm_(ref_model.parameters(), grad_clip, norm_type=2.0)
        ref_opt.step()
        with torch.no_grad():
            ref_model.logit_scale.clamp_(0, math.log(100))
        return time.perf_counter() - t0

    samples = {"ours": [], "reference": []}
    load_before = os.getloadavg()
    for step in range(total):
        order = (("ours", ours), ("reference", reference)) if step % 2 == 0 else \
            (("reference", reference), ("ours", ours))
        for name, fn in order:
            dt = fn(step)
            if step >= warmup:
                samples[name].append(dt)
    med = {k: statistics.median(v) for k, v in samples.items()}
    # both loops of one repeat run back to back, under the same machine load: their ratio is robust to load drift
    paired = [r / o for r, o in zip(samples["reference"], samples["ours"])]
    return {
        "precision": precision,
        "rows_2n": 2 * n,
        "median_step_ms": {k: round(v * 1e3, 2) for k, v in med.items()},
        "throughput_rows_per_s": {k: round(2 * n / v, 1) for k, v in med.items()},
        "ratio": round(med["reference"] / med["ours"], 4),
        "paired_ratio_median": round(statistics.median(paired), 4),
        "samples_ms": {k: [round(x * 1e3, 2) for x in v] for k, v in samples.items()},
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=64, help="anchors N (the batch has 2N rows)")
    parser.add_argument("--precision", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--grad-clip", type=float, default=1.0)
    parser.add_argument("--out", type=Path, default=RESULT)
    parser.add_argument("--check", action="store_true", help="exit 1 when an fp32 run's paired ratio is below --limit")
    parser.add_argument("--limit", type=float, default=0.95)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    runs = []
    for r in range(args.runs):
        for precision in args.precision:
            res = one_run(args.n, precision, args.repeats, args.warmup, args.grad_clip, seed=r)
            runs.append({"run": r, **res})
            print(f"run {r} {precision}: ours {res['median_step_ms']['ours']} ms, open_clip loop "
                  f"{res['median_step_ms']['reference']} ms, throughput ratio {res['ratio']:.3f} (median of "
                  f"paired ratios {res['paired_ratio_median']:.3f}; load {res['loadavg_before'][0]})", flush=True)
    result = {
        "target": f"throughput(ours) / throughput(open_clip loop) >= {args.limit}",
        "model": "cj-world-vit (64 px, context 32), seeded init",
        "loss": {"ours": "cement (2N x 2N, hard negatives, stats)", "reference": "open_clip ClipLoss (2N x 2N)"},
        "n": args.n, "threads": args.threads, "repeats": args.repeats, "warmup": args.warmup,
        "grad_clip": args.grad_clip, "torch": torch.__version__, "python": platform.python_version(),
        "cpus": os.cpu_count(), "runs": runs,
        "ratios": {p: [x["ratio"] for x in runs if x["precision"] == p] for p in args.precision},
        "paired_ratio_medians": {p: [x["paired_ratio_median"] for x in runs if x["precision"] == p]
                                 for p in args.precision},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"ratios": result["ratios"], "paired_ratio_medians": result["paired_ratio_medians"]}))
    if args.check and any(x < args.limit for x in result["paired_ratio_medians"].get("fp32", [])):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
