"""The paper profile on one CUDA GPU: our training step against open_clip's loop at N = 1024 (paper Sec. 3: "a
single NVIDIA-H200 GPU with a batch size of 1024"), bf16.

Model: open_clip ``ViT-B-32-quickgelu`` with a **random init** (``pretrained=None``; the step costs what the
openai weights would), 224 px, context 77. Batch: N anchors + N hard negatives, images ``[2N, 3, 224, 224]`` and
tokens ``[2N, 77]``, i.e. 2N x 2N logits (2048 x 2048 at N = 1024), prepared once in pinned host memory and copied
to the GPU in every step (``non_blocking``), as a DataLoader with ``pin_memory`` hands them over.

- ``ours``: the steps of ``train_contrastive``: :func:`concrete_jungle.training.train_step` under the bundle's bf16
  autocast with the Cement loss; steps that are not logged run with ``check_finite=False`` and the loop's deferred
  non-finite record (no host synchronisation), every ``--log-every``-th step is logged (statistics, immediate
  checks, every value read to the host in one transfer).
- ``open_clip``: the step of open_clip_train's ``train_one_epoch``: ``zero_grad``, ``model(images, texts)`` and
  ``ClipLoss(**model_out)`` (2N x 2N) under ``torch.autocast("cuda", torch.bfloat16)``, ``backward``,
  ``clip_grad_norm_``, ``step``, logit-scale clamp; the loss read with ``.item()`` every ``--log-every`` steps.

Each loop gets a fresh model (same seed) and optimiser, ``--warmup`` untimed steps, then ``--steps`` timed ones
between two ``torch.cuda.synchronize()``; reported: steps/s, images/s (2N rows a step), the peak of
``torch.cuda.max_memory_allocated`` during the loop, and for ours the number of host synchronisations in one
non-logged step (``torch.cuda.set_sync_debug_mode("warn")``; expected 0). A third, optional part times the
DataLoader path of the trainer on pre-decoded tensors (``make_loader`` with workers and ``pin_memory``) to show
whether the input side keeps up with the step at this batch size.

Without a CUDA device the script prints why and exits with status 2. Result: ``benchmarks/results/
gpu_paper_profile.json``.

    python benchmarks/gpu_paper_profile.py                    # N = 1024, 20 timed steps a loop
    python benchmarks/gpu_paper_profile.py --n 512 --steps 10 --loader-workers 8
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import platform
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")

import torch  # noqa: E402
from concrete_jungle.machine import machine_info  # noqa: E402

RESULT = Path(__file__).resolve().parent / "results" / "gpu_paper_profile.json"
SPEC = {"kind": "open_clip", "name": "ViT-B-32-quickgelu", "pretrained": None}


def _batch(bundle, n: int, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    words = ["red", "blue", "large", "small", "dog", "table", "left", "right", "of", "a", "the", "wooden"]
    captions = [" ".join(words[int(j)] for j in torch.randint(len(words), (10,), generator=g)) for _ in range(2 * n)]
    batch = {"images": torch.randn(2 * n, 3, 224, 224, generator=g), "texts": bundle.tokenizer(captions),
             "concreteness": 1.0 + 4.0 * torch.rand(n, generator=g), "valid": torch.rand(n, generator=g) > 0.02}
    return {k: v.pin_memory() if torch.cuda.is_available() else v for k, v in batch.items()}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _fresh(device, precision):
    from concrete_jungle.models.build import build_model
    from concrete_jungle.params import ModelSpec

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    bundle = build_model(ModelSpec(**SPEC, precision=precision), device=device, seed=0)
    bundle.model.train()
    return bundle


def run_ours(device, n, steps, warmup, log_every, grad_clip, precision) -> dict:
    from concrete_jungle.losses import CementLoss, MarginConfig
    from concrete_jungle.training import _DeferredGuard, build_optimizer, cosine_lr, train_step

    bundle = _fresh(device, precision)
    model = bundle.model
    batch = _batch(bundle, n, 0)
    opt = build_optimizer(model, 1e-5, 0.1, device)
    loss_fn = CementLoss(MarginConfig())
    guard = _DeferredGuard(device)
    total = warmup + steps
    logged = []

    def step(i: int) -> None:
        log_now = (i + 1) % log_every == 0
        out = train_step(model, batch, loss_fn, opt, lr=cosine_lr(i, total, 2, 1e-5), step=i, hard_negatives=True,
                         grad_clip=grad_clip, autocast=bundle.autocast, return_stats=log_now, check_finite=log_now)
        if log_now:
            values = {**out["losses"], "loss": out["loss"], "logit_scale_exp": model.logit_scale.detach().exp(),
                      "grad_norm": out["grad_norm"], **out["stats"]}
            host = torch.cat([torch.stack([v.detach().to(torch.float64).reshape(()) for v in values.values()]),
                              guard.record]).tolist()
            guard.pending = False
            logged.append(dict(zip(values, host)))
        else:
            guard.update(i, out)

    for i in range(warmup):
        step(i)
    syncs = None
    if device.type == "cuda":  # count host synchronisations of one non-logged step
        i = warmup
        while (i + 1) % log_every == 0:
            i += 1
        _sync(device)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                step(i)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        syncs = [str(w.message).splitlines()[0] for w in caught if "synchroniz" in str(w.message).lower()]
    _sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    first = warmup + 1 if device.type != "cuda" else i + 1
    t0 = time.perf_counter()
    for i in range(first, first + steps):
        step(i)
    _sync(device)
    elapsed = time.perf_counter() - t0
    guard.check(True, warmup + steps)
    res = _figures("ours", n, steps, elapsed, device)
    res["host_syncs_in_one_non_logged_step"] = None if syncs is None else len(syncs)
    res["host_sync_messages"] = syncs[:5] if syncs else []
    res["last_logged"] = logged[-1] if logged else None
    return res


def run_open_clip(device, n, steps, warmup, log_every, grad_clip, precision) -> dict:
    from open_clip.loss import ClipLoss

    bundle = _fresh(device, precision)
    model = bundle.model
    batch = _batch(bundle, n, 0)
    named = [(k, p) for k, p in model.named_parameters() if p.requires_grad]
    exclude = [p for k, p in named if p.ndim < 2 or "bn" in k or "ln" in k or "bias" in k or "logit_scale" in k]
    ids = {id(p) for p in exclude}
    opt = torch.optim.AdamW([{"params": exclude, "weight_decay": 0.0},
                             {"params": [p for _, p in named if id(p) not in ids], "weight_decay": 0.1}],
                            lr=1e-5, betas=(0.9, 0.98), eps=1e-6)
    clip = ClipLoss()
    last = {}

    def autocast():
        return torch.autocast(device.type, dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()

    def step(i: int) -> None:
        images = batch["images"].to(device=device, non_blocking=True)
        texts = batch["texts"].to(device=device, non_blocking=True)
        opt.zero_grad()
        with autocast():
            model_out = model(images, texts)
            losses = clip(**model_out, output_dict=True)
            total_loss = sum(losses.values())
        total_loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip, norm_type=2.0)
        opt.step()
        with torch.no_grad():
            model.logit_scale.clamp_(0, math.log(100))
        if (i + 1) % log_every == 0:
            last["loss"] = total_loss.item()

    for i in range(warmup):
        step(i)
    _sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    for i in range(warmup, warmup + steps):
        step(i)
    _sync(device)
    res = _figures("open_clip", n, steps, time.perf_counter() - t0, device)
    res["last_logged"] = dict(last)
    return res


def _figures(name, n, steps, elapsed, device) -> dict:
    return {"loop": name, "steps": steps, "elapsed_s": round(elapsed, 4), "steps_per_s": round(steps / elapsed, 4),
            "images_per_s": round(2 * n * steps / elapsed, 1),
            "peak_memory_gib": (round(torch.cuda.max_memory_allocated(device) / 2**30, 3)
                                if device.type == "cuda" else None)}


class _PreDecoded(torch.utils.data.Dataset):
    """ConcreteBatch-shaped items from a pool of pre-decoded tensors (what a warm decoded-input cache returns)."""

    def __init__(self, size: int, n_items: int) -> None:
        g = torch.Generator().manual_seed(1)
        self.pool = torch.randn(16, 3, size, size, generator=g)
        self.tokens = torch.randint(1, 1000, (16, 77), generator=g)
        self.n_items = n_items

    def __len__(self) -> int:
        return self.n_items

    def __getitem__(self, i: int):
        k = i % 16
        return self.pool[k], self.tokens[k], self.pool[(k + 1) % 16], self.tokens[(k + 1) % 16], 4.0, True


def run_loader(device, n, batches, workers) -> dict:
    """Batches a second from the trainer's DataLoader (``make_loader``) on pre-decoded tensors, pinned."""
    from concrete_jungle.distributed import DistContext, anchor_sampler
    from concrete_jungle.training import ResumableBatches, collate_hard_negatives, make_loader

    ds = _PreDecoded(224, n * (batches + 2))
    sampler = anchor_sampler(ds, DistContext(), 0)
    loader = make_loader(ds, ResumableBatches(sampler, n, len(sampler) // n, 0, 0, batches + 2),
                         collate_hard_negatives, seed=0, num_workers=workers, pin_memory=device.type == "cuda")
    it = iter(loader)
    for _ in range(2):
        next(it)
    t0 = time.perf_counter()
    for _ in range(batches):
        b = next(it)
        b["images"].to(device, non_blocking=True)
    _sync(device)
    dt = time.perf_counter() - t0
    return {"workers": workers, "batches": batches, "batches_per_s": round(batches / dt, 3),
            "images_per_s": round(2 * n * batches / dt, 1), "batch_gib": round(2 * n * 3 * 224 * 224 * 4 / 2**30, 3)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1024, help="anchors N (2N x 2N logits); paper: 1024")
    parser.add_argument("--steps", type=int, default=20, help="timed steps a loop")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps a loop")
    parser.add_argument("--log-every", type=int, default=10, help="a logged step every this many steps (both loops)")
    parser.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
    parser.add_argument("--grad-clip", type=float, default=1.0)
    parser.add_argument("--loader-workers", type=int, default=min(4, max(0, (os.cpu_count() or 2) - 2)),
                        help="workers of the DataLoader part (-1: skip it)")
    parser.add_argument("--loader-batches", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULT)
    parser.add_argument("--allow-cpu", action="store_true", help=argparse.SUPPRESS)  # smoke test of the code path
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        if not args.allow_cpu:
            print("gpu_paper_profile: no CUDA device is available (torch.cuda.is_available() is False; torch "
                  f"{torch.__version__}, CUDA build {torch.version.cuda}). This benchmark profiles the paper's "
                  "N = 1024 step on a GPU; run it on a CUDA machine. Nothing was written.", file=sys.stderr)
            return 2
        device = torch.device("cpu")
    else:
        device = torch.device("cuda")
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    results = {}
    for name, fn in (("ours", run_ours), ("open_clip", run_open_clip)):
        try:
            results[name] = fn(device, args.n, args.steps, args.warmup, args.log_every, args.grad_clip,
                               args.precision)
        except torch.OutOfMemoryError as err:
            results[name] = {"loop": name, "error": f"out of memory: {str(err).splitlines()[0]}"}
        print(json.dumps(results[name]), flush=True)
    loader = None
    if args.loader_workers >= 0:
        try:  # 2N float images are ~1.2 GiB a batch at N = 1024: workers pass them through /dev/shm
            loader = run_loader(device, args.n, args.loader_batches, args.loader_workers)
        except Exception as err:  # noqa: BLE001 (record and keep the step figures)
            loader = {"workers": args.loader_workers, "error": f"{type(err).__name__}: {str(err).splitlines()[0]}"}
        print(json.dumps({"loader": loader}), flush=True)
    ratio = None
    if "steps_per_s" in results.get("ours", {}) and "steps_per_s" in results.get("open_clip", {}):
        ratio = round(results["ours"]["steps_per_s"] / results["open_clip"]["steps_per_s"], 4)
    result = {
        "what": "ViT-B-32-quickgelu (random init), 2N x 2N logits, one GPU: our train_step vs open_clip's loop",
        "n": args.n, "rows_2n": 2 * args.n, "precision": args.precision, "steps": args.steps,
        "warmup": args.warmup, "log_every": args.log_every, "grad_clip": args.grad_clip,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (smoke test only)",
        "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
        "cpus": os.cpu_count(), "loops": results, "throughput_ratio_ours_to_open_clip": ratio,
        "loader_pre_decoded": loader,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result["machine_info"] = machine_info()  # CPU model, ISA flags and caps, torch threads
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"ours / open_clip steps/s: {ratio}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
