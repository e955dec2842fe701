"""Diagnosis (docs/instrument.md, H5): is the fine-tune too short, too slow, or is the image-side negative in the way?

From a profile's trained base model, fine-tunes one hard-negative model (``--dataset``, ``--loss``) and the ``clip``
baseline under the same loop overrides (``--epochs``, ``--lr``, ``--max-steps``), with the held-out learning curve
of :mod:`concrete_jungle.learning_curve` on the dataset's held-out pairs, and writes the curves and the final held-out
accuracies by keyword type, I2T and T2I, to ``--out`` (JSON). Nothing is written into the pipeline's folders.

    python analysis/diagnose_finetune.py --params pipelines/world_effnet/params.yaml --dataset lc --loss infonce \\
        --epochs 4 --lr 2e-4 --out docs/instrument/finetune_effnet_lc_4ep.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def main(argv=None) -> dict:
    from concrete_jungle.corpus.splits import training_records
    from concrete_jungle.io import read_jsonl
    from concrete_jungle.learning_curve import HeldoutCurve
    from concrete_jungle.losses import HARD_NEGATIVE_LOSSES, LOSSES, build_loss
    from concrete_jungle.machine import machine_info
    from concrete_jungle.models.checkpoints import load_model, save_checkpoint
    from concrete_jungle.params import load_params
    from concrete_jungle.training import AnchorDataset, ConcreteBatchDataset, train_contrastive

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--params", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--loss", default="infonce", choices=sorted(HARD_NEGATIVE_LOSSES))
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--max-steps", type=int, default=None)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--train-pairs", type=int, default=0,
                    help="also score this many of the fine-tune's own training pairs (seeded draw), as '<d>-train': "
                         "tells a fine-tune that cannot fit its pairs from one that fits them without generalising")
    ap.add_argument("--only-scored", action="store_true",
                    help="train the hard-negative model on the scored training pairs alone (with --train-pairs K and "
                         "--batch-size K: can the loss fit K pairs at all?)")
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--seed", type=int, default=None, help="training and pair-draw seed (default: the params' seed)")
    ap.add_argument("--unlock-groups", type=int, default=None,
                    help="re-lock the base's image trunk with this many last layer groups trainable (both runs)")
    ap.add_argument("--logit-scale", type=float, default=None,
                    help="start both fine-tunes from this logit scale (exp of the parameter; the base's otherwise)")
    ap.add_argument("--fixed-logit-scale", action="store_true", help="keep --logit-scale fixed during training")
    ap.add_argument("--freeze-image", action="store_true",
                    help="train the text tower alone (image tower and logit scale frozen; both runs)")
    ap.add_argument("--types", default=None,
                    help="comma-separated keyword types: train the hard-negative model on these pairs only")
    ap.add_argument("--no-clip", action="store_true", help="skip the clip baseline run")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    params = load_params(args.params)
    seed = params.seed if args.seed is None else args.seed
    loop = params.train.model_copy(update={"epochs": args.epochs, "max_steps": args.max_steps,
                                           **({"lr": args.lr} if args.lr else {}),
                                           **({"batch_size": args.batch_size} if args.batch_size else {})})
    pairs = {args.dataset: read_jsonl(params.data_dir / "concreteplant" / args.dataset / "heldout.jsonl")}
    concretebatch = read_jsonl(params.data_dir / "concreteplant" / args.dataset / "concretebatch.jsonl")
    if args.types:  # before the draw of scored training pairs, so --only-scored trains on those types too
        concretebatch = [b for b in concretebatch if b["type"] in args.types.split(",")]
    if args.train_pairs:
        import random

        heldout_ids = {p["anchor_id"] for p in pairs[args.dataset]}
        own = [b for b in concretebatch if b["anchor_id"] not in heldout_ids]
        pairs[f"{args.dataset}-train"] = random.Random(seed).sample(own, min(args.train_pairs, len(own)))
    result = {"params": args.params, "dataset": args.dataset, "loss": args.loss, "epochs": args.epochs,
              "train_pairs": args.train_pairs, "only_scored": args.only_scored, "seed": seed,
              "batch_size": loop.batch_size, "unlock_groups": args.unlock_groups,
              "logit_scale": args.logit_scale, "fixed_logit_scale": args.fixed_logit_scale,
              "freeze_image": args.freeze_image, "types": args.types,
              "lr": loop.lr, "max_steps": args.max_steps, "machine": machine_info(timing=False), "runs": {}}
    runs = [(f"{args.dataset}-{args.loss}", args.loss)] + ([] if args.only_scored or args.no_clip
                                                            else [("clip", "clip")])
    for label, family in runs:
        t0 = time.time()
        bundle = load_model(params.models_dir / "base" / "checkpoint.pt")
        if args.unlock_groups is not None:
            from concrete_jungle.models.build import lock_image_tower

            bundle.model.visual.trunk.requires_grad_(True)  # open_clip's lock only locks; start from all trainable
            lock_image_tower(bundle.model, args.unlock_groups, True)
            result["trainable_image_params"] = sum(p.numel() for p in bundle.model.visual.parameters()
                                                   if p.requires_grad)
        if args.freeze_image:
            bundle.model.visual.requires_grad_(False)
            bundle.model.logit_scale.requires_grad_(False)
        if args.logit_scale is not None:
            import math

            import torch

            with torch.no_grad():
                bundle.model.logit_scale.fill_(math.log(args.logit_scale))
            bundle.model.logit_scale.requires_grad_(not (args.fixed_logit_scale or args.freeze_image))
        if family in HARD_NEGATIVE_LOSSES:
            batch = pairs[f"{args.dataset}-train"] if args.only_scored else concretebatch
            ds = ConcreteBatchDataset(batch, bundle.preprocess_val, bundle.tokenizer, cache=True,
                                      negative_images=LOSSES[family].needs_hard_negative_images)
        else:
            ds = AnchorDataset(training_records(read_jsonl(params.data_dir / "corpus" / "manifest.jsonl")),
                               bundle.preprocess_val, bundle.tokenizer, caption="anchor", seed=params.seed, cache=True)
        with tempfile.TemporaryDirectory() as tmp:
            curve = HeldoutCurve(bundle, pairs, Path(tmp) / "live", every=args.every,
                                 precision=params.evaluate.precision, batch_size=params.evaluate.batch_size)
            curve.start()
            summary = train_contrastive(bundle, ds, build_loss(family, params.margin.to_config()), loop,
                                        seed=seed, live_dir=Path(tmp) / "live",
                                        checkpoint_path=Path(tmp) / "model" / "checkpoint.pt", params_dump={},
                                        save_checkpoint=save_checkpoint, hard_negatives=family in HARD_NEGATIVE_LOSSES,
                                        on_step_end=curve)
            curve.finish(summary["steps"])
        result["runs"][label] = {"steps": summary["steps"], "final_loss": summary.get("loss"),
                                 "final_logit_scale": round(float(bundle.model.logit_scale.exp()), 3),
                                 "wall_s": round(time.time() - t0, 1),
                                 "curves": {f"{d}/{name}": series for (d, name), series in curve.rows.items()}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    out = main()
    for label, run in out["runs"].items():
        last = {k.split("/", 1)[1]: round(100 * v[-1][1], 1) for k, v in run["curves"].items()}
        print(label, run["steps"], run["wall_s"], last)
