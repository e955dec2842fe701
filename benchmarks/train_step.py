"""Training-step throughput of our trainer against open_clip's own training loop (target: >= 1.0x, CPU).

Two model shapes, each with one seeded init copied to both loops:

- ``world``: the world model ``cj-world-vit`` (64 px, context 32);
- ``vit-b-32-quickgelu``: the paper profile's architecture (open_clip ``ViT-B-32-quickgelu``, 224 px, context 77),
  **random init** (``pretrained=None``; the shape, not the openai weights, decides the cost of a step).

Same 2N batch for both loops (N anchors + N hard negatives: images ``[2N, 3, S, S]``, tokens ``[2N, L]``), same
AdamW settings (betas 0.9/0.98, eps 1e-6, weight decay off for gains, biases and the logit scale), same gradient
clipping (1.0), same torch threads.

- ``ours``: :func:`concrete_jungle.training.train_step` as ``train_contrastive`` runs a step that is not logged:
  forward under ``ModelBundle.autocast``, Cement loss on the 2N x 2N logits without statistics, the deferred
  non-finite guard (``check_finite=False`` + the loop's device-side record), backward, clipping, AdamW step,
  logit-scale clamp; no host read of any value.
- ``ours_logged`` (information): a logged step: statistics (``return_stats=True``), immediate non-finite checks and
  every logged value read to the host.
- ``reference``: the body of open_clip_train's ``train_one_epoch`` (open_clip_train is not installed here, so it is
  written out): set the lr, ``zero_grad``, ``model(images, texts)`` and ``ClipLoss(**model_out)`` under
  ``torch.autocast`` (bf16) or none (fp32), ``backward``, ``clip_grad_norm_``, ``step``, clamp the logit scale.
  With bf16 on CPU our ``ModelBundle.autocast`` also selects the MATH attention kernel (its docstring: torch's CPU
  flash-attention backward in bf16 is several times slower); the reference keeps torch's default choice, as
  open_clip_train does.

Data loading is not timed (both get the same prepared batch; ``benchmarks/input_pipeline.py`` times it). Steps are
interleaved (the order of the loops rotates every repeat) after a warm-up, and the median step time of each is kept;
throughput = 2N / median, ratio = throughput(ours) / throughput(reference) = median(reference) / median(ours). On a
shared machine the step times drift with the load, which moves a median of either loop alone; the steps of one
repeat run back to back, so ``paired_ratio_median`` (median over repeats of t_reference / t_ours) is the load-robust
figure, and the one ``--check`` uses.

    python benchmarks/train_step.py                                  # both models -> results/train_step.json
    python benchmarks/train_step.py --models world --runs 1 --check  # exit 1 when an fp32 paired ratio < --limit
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
from concrete_jungle.training import _DeferredGuard, build_optimizer, cosine_lr, train_step
from concrete_jungle.machine import machine_info

RESULT = Path(__file__).resolve().parent / "results" / "train_step.json"
MODELS = {
    "world": {"spec": {"kind": "world", "name": "cj-world-vit", "context_length": 32}, "image_size": 64, "n": 64},
    "vit-b-32-quickgelu": {"spec": {"kind": "open_clip", "name": "ViT-B-32-quickgelu", "pretrained": None},
                           "image_size": 224, "n": 8},
}


def _batch(bundle, n: int, size: int, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    words = ["red", "blue", "large", "small", "circle", "square", "left", "right", "of", "a", "the", "metal"]
    captions = [" ".join(words[int(j)] for j in torch.randint(len(words), (8,), generator=g)) for _ in range(2 * n)]
    return {"images": torch.randn(2 * n, 3, size, size, generator=g), "texts": bundle.tokenizer(captions),
            "concreteness": 1.0 + 4.0 * torch.rand(n, generator=g), "valid": torch.ones(n, dtype=torch.bool)}


def _reference_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """open_clip_train's split: ndim < 2, 'bn', 'ln', 'bias', 'logit_scale' -> no weight decay."""
    def exclude(name, p):
        return p.ndim < 2 or "bn" in name or "ln" in name or "bias" in name or "logit_scale" in name

    named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    return [{"params": [p for name, p in named if exclude(name, p)], "weight_decay": 0.0},
            {"params": [p for name, p in named if not exclude(name, p)], "weight_decay": weight_decay}]


def one_run(model_key: str, n: int, precision: str, repeats: int, warmup: int, grad_clip: float, seed: int,
            logged: bool) -> dict:
    cfg = MODELS[model_key]
    bundle = build_model(ModelSpec(**cfg["spec"], precision=precision), seed=0)
    # every loop trains its own deep copy of the one init (same memory layout for all of them)
    names = ["ours", "reference"] + (["ours_logged"] if logged else [])
    models = {k: copy.deepcopy(bundle.model) for k in names}
    for m in models.values():
        m.train()
    batch = _batch(bundle, n, cfg["image_size"], seed)
    # ours: the trainer's optimiser (fused AdamW); reference: open_clip_train's (per-tensor AdamW, its groups)
    opts = {k: torch.optim.AdamW(_reference_groups(m, 0.1), lr=1e-4, betas=(0.9, 0.98), eps=1e-6)
            if k == "reference" else build_optimizer(m, 1e-4, 0.1) for k, m in models.items()}
    cement, clip = CementLoss(MarginConfig()), ClipLoss()
    total = warmup + repeats
    guard = _DeferredGuard(torch.device("cpu"))

    def ref_autocast():
        return torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()

    def ours(step: int) -> float:
        t0 = time.perf_counter()
        out = train_step(models["ours"], batch, cement, opts["ours"], lr=cosine_lr(step, total, 1, 1e-4), step=step,
                         hard_negatives=True, grad_clip=grad_clip, autocast=bundle.autocast, check_finite=False)
        guard.update(step, out)
        return time.perf_counter() - t0

    def ours_logged(step: int) -> float:
        t0 = time.perf_counter()
        model = models["ours_logged"]
        out = train_step(model, batch, cement, opts["ours_logged"], lr=cosine_lr(step, total, 1, 1e-4), step=step,
                         hard_negatives=True, grad_clip=grad_clip, autocast=bundle.autocast, return_stats=True)
        values = [*out["losses"].values(), out["loss"], model.logit_scale.detach().exp(), out["grad_norm"],
                  *out["stats"].values()]
        torch.stack([v.to(torch.float64) for v in values]).tolist()
        return time.perf_counter() - t0

    def reference(step: int) -> float:
        t0 = time.perf_counter()
        model, opt = models["reference"], opts["reference"]
        for group in opt.param_groups:  # open_clip's scheduler(step) assigns the lr
            group["lr"] = cosine_lr(step, total, 1, 1e-4)
        images, texts = batch["images"], batch["texts"]
        opt.zero_grad()
        with ref_autocast():
            model_out = model(images, texts)
            losses = clip(**model_out, output_dict=True)
            total_loss = sum(losses.values())
            losses["loss"] = total_loss
        total_loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip, norm_type=2.0)
        opt.step()
        with torch.no_grad():
            model.logit_scale.clamp_(0, math.log(100))
        return time.perf_counter() - t0

    fns = {"ours": ours, "reference": reference, **({"ours_logged": ours_logged} if logged else {})}
    names = list(fns)
    samples = {k: [] for k in names}
    load_before = os.getloadavg()
    for step in range(total):
        k = step % len(names)
        for name in names[k:] + names[:k]:  # rotate the order every repeat
            dt = fns[name](step)
            if step >= warmup:
                samples[name].append(dt)
    guard.check(True, total - 1)  # every step was finite
    med = {k: statistics.median(v) for k, v in samples.items()}
    # the loops of one repeat run back to back, under the same machine load: their ratio is robust to load drift
    paired = [r / o for r, o in zip(samples["reference"], samples["ours"])]
    res = {
        "model": model_key,
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
    if logged:
        res["ratio_logged_step"] = round(med["reference"] / med["ours_logged"], 4)
    return res


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--n", type=int, default=None, help="anchors N (the batch has 2N rows); default per model "
                        "(" + ", ".join(f"{k}: {v['n']}" for k, v in MODELS.items()) + ")")
    parser.add_argument("--precision", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--grad-clip", type=float, default=1.0)
    parser.add_argument("--no-logged", action="store_true", help="skip the logged-step variant of ours")
    parser.add_argument("--note", default="", help="free text stored in the JSON (e.g. what else ran on the machine)")
    parser.add_argument("--out", type=Path, default=RESULT)
    parser.add_argument("--check", action="store_true", help="exit 1 when an fp32 run's paired ratio is below --limit")
    parser.add_argument("--limit", type=float, default=1.0)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    runs = []
    for model_key in args.models:
        n = args.n or MODELS[model_key]["n"]
        for r in range(args.runs):
            for precision in args.precision:
                res = one_run(model_key, n, precision, args.repeats, args.warmup, args.grad_clip, seed=r,
                              logged=not args.no_logged)
                runs.append({"run": r, **res})
                print(f"{model_key} run {r} {precision} 2N={2 * n}: ours {res['median_step_ms']['ours']} ms, "
                      f"open_clip loop {res['median_step_ms']['reference']} ms, throughput ratio {res['ratio']:.3f} "
                      f"(median of paired ratios {res['paired_ratio_median']:.3f}; logged step "
                      f"{res.get('ratio_logged_step', float('nan')):.3f}; load {res['loadavg_before'][0]})",
                      flush=True)
    keys = [(m, p) for m in args.models for p in args.precision]
    result = {
        "target": f"throughput(ours) / throughput(open_clip loop) >= {args.limit}",
        "models": {m: {**MODELS[m]["spec"], "image_size": MODELS[m]["image_size"], "init": "seeded random"}
                   for m in args.models},
        "loss": {"ours": "cement (2N x 2N, hard negatives; statistics on logged steps only)",
                 "reference": "open_clip ClipLoss (2N x 2N)"},
        "threads": args.threads, "repeats": args.repeats, "warmup": args.warmup, "grad_clip": args.grad_clip,
        "torch": torch.__version__, "python": platform.python_version(), "cpus": os.cpu_count(),
        "note": args.note, "runs": runs,
        "ratios": {f"{m}/{p}": [x["ratio"] for x in runs if (x["model"], x["precision"]) == (m, p)] for m, p in keys},
        "paired_ratio_medians": {f"{m}/{p}": [x["paired_ratio_median"] for x in runs
                                              if (x["model"], x["precision"]) == (m, p)] for m, p in keys},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result["machine_info"] = machine_info()  # CPU model, ISA flags and caps, torch threads
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"ratios": result["ratios"], "paired_ratio_medians": result["paired_ratio_medians"]}))
    if args.check and any(x < args.limit for k, v in result["paired_ratio_medians"].items() if k.endswith("/fp32")
                          for x in v):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
