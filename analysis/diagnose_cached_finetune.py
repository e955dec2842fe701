"""Diagnosis (docs/instrument.md, H15): a fine-tune over the locked trunk's cached feature maps — how many steps does
the control need, and does it pass against ``clip`` trained under the same schedule?

For a profile whose image trunk is locked (``base_model.model.lock_image``, BatchNorm statistics frozen, no
augmentation: ``world_effnet_attn``), the trunk's output is a fixed function of the image, so a fine-tune step only
needs the trainable parts: the image head (the attention pool and its projection), the text tower and the logit
scale. This harness computes the trunk maps once (``[M, C, h, w]``, fp32) for the ConcreteBatch's anchors and hard
negatives, the corpus anchors (``clip``'s data) and the held-out pairs, then trains, from the same base:

* ``hard``: the hard-negative InfoNCE of the fine-tunes (rows (v, t) and (v', t'), 2B x 2B logits, both directions)
  on the ConcreteBatch of ``--dataset``;
* ``clip``: the plain InfoNCE (B x B) on the corpus anchors, as ``train_baseline@clip``;
* ``negclip`` (``--runs negclip,clip``): NegCLIP's layout on the same ConcreteBatch (the loss ``negclip``: each anchor
  image against the B anchor and B hard-negative captions, each anchor caption against the B anchor images; no
  hard-negative image), compared with ``clip`` as ``hard`` is (H31);

with AdamW (``--lr``, weight decay 0.1 on matrices only), linear warmup over 5 % of the steps then cosine decay,
gradient clipping at 1, batches of ``--batch-size`` anchors drawn without replacement epoch by epoch. Every
``--every`` steps both are scored on the held-out pairs of the dataset by keyword type (I2T: s(v, t) > s(v, t');
T2I: s(v, t) > s(v', t)), and the gain hard - clip is reported with its exact McNemar p (the stage's criterion:
>= 10 points with p < 0.001 in both directions over all pairs). Beside them, ``--train-sample`` pairs of the
ConcreteBatch the hard run trains on (``fit_i2t`` / ``fit_t2i``: images seen against images unseen, H24-H25).
Against memorisation (H25): ``--text-only`` freezes the image head, ``--head-lr-scale`` slows it,
``--map-noise`` adds Gaussian noise (in units of each channel's spread) to every training map; ``--image-size``
feeds the trunk larger images (a finer map: what the trunk resolves, H25-H26).

A profile whose text tower is a Hugging Face encoder (the real profile's LiT base: locked EfficientNet-Lite0, whose
"maps" are its pooled ``[M, 1280]`` vectors, and MiniLM-L6) trains that tower, the image head and the logit scale,
and feeds it each batch's tokens cut after its longest caption (the tower masks padding, so the embeddings are the
same; checked at start, ``trim_check_max_abs``). ``--text-pairs`` also scores the dataset's text-side pairs of the
``heldout`` suite (TOT: cos(g(p), g(t)) > cos(g(p), g(t')), H22) every ``--every`` steps, judged by the control's
own rule (:func:`~concrete_jungle.evaluation.positive_control.control_stats` with the profile's
``evaluate.positive_control``).

    python analysis/diagnose_cached_finetune.py --params pipelines/world_effnet_attn/params.yaml --dataset lc \\
        --steps 800 --lr 1e-3 --out docs/instrument/cached_finetune_lc_lr1e-3.json   # hc: --dataset hc --steps 400
    python analysis/diagnose_cached_finetune.py --params pipelines/real_seed1/params.yaml --dataset hc \\
        --text-pairs --steps 300 --lr 1e-4 --batch-size 32 --every 50 --out docs/instrument/h29_real_hc.json
"""

from __future__ import annotations

import copy
import math
import time

from analysis.diagnose_text_binding import harness_parser


def main(argv=None) -> dict:
    import torch
    import torch.nn.functional as F
    from scipy.stats import binomtest

    from concrete_jungle.corpus.splits import training_records
    from concrete_jungle.io import load_rgb, read_jsonl, write_json
    from concrete_jungle.machine import machine_info
    from concrete_jungle.models.checkpoints import load_model
    from concrete_jungle.models.encoding import cut_padding, text_pad_id
    from concrete_jungle.params import load_params

    ap = harness_parser(__doc__, steps=600, lr=2e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", default="hard,clip")
    ap.add_argument("--text-only", action="store_true", help="keep the image head frozen too (only the text tower "
                                                             "and the logit scale train)")
    ap.add_argument("--map-noise", type=float, default=0.0,
                    help="augmentation on the cached maps: add Gaussian noise of this many times each channel's "
                         "standard deviation (over the training maps) to every training map, fresh each step")
    ap.add_argument("--head-lr-scale", type=float, default=1.0,
                    help="the image head's learning rate as a multiple of --lr (1: as the trainer)")
    ap.add_argument("--image-size", type=int, default=None,
                    help="feed the locked trunk images resized to this many pixels (bicubic) instead of the "
                         "profile's own size: a 128-px world image gives EfficientNet-Lite a 4 x 4 map, not 2 x 2")
    ap.add_argument("--train-sample", type=int, default=600,
                    help="pairs of the ConcreteBatch the hard run trains on, scored beside the held-out ones "
                         "(the fit check: accuracy on images seen against images unseen)")
    ap.add_argument("--text-pairs", action="store_true",
                    help="score the dataset's text-side pairs (TOT) of the heldout suite too (the real profile)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    runs = args.runs.split(",")
    bad = sorted(set(runs) - {"hard", "negclip", "clip"})
    if bad or ("hard" in runs and "negclip" in runs):
        ap.error(f"--runs {args.runs!r}: runs are hard, negclip and clip, at most one of hard / negclip")
    t0 = time.time()
    torch.manual_seed(args.seed)
    params = load_params(args.params)
    if not params.base_model.model.lock_image or params.base_model.augment:
        raise ValueError(f"{args.params}: the trunk must be locked and training unaugmented for cached maps")
    folder = params.data_dir / "concreteplant" / args.dataset
    heldout = read_jsonl(folder / "heldout.jsonl")
    train = read_jsonl(folder / "concretebatch.jsonl")
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(1)).tolist()
    fit = [train[i] for i in order[:args.train_sample]]
    corpus = training_records(read_jsonl(params.data_dir / "corpus" / "manifest.jsonl"))
    bundle = load_model(params.models_dir / "base" / "checkpoint.pt")
    base = bundle.model.float().eval()
    trunk = base.visual.trunk

    preprocess = bundle.preprocess_val
    if args.image_size:  # the profile's resize and crop replaced, its tensor conversion and normalisation kept
        from torchvision import transforms

        steps = [t for t in preprocess.transforms if not isinstance(t, (transforms.Resize, transforms.CenterCrop))]
        preprocess = transforms.Compose([transforms.Resize((args.image_size, args.image_size),
                                                           interpolation=transforms.InterpolationMode.BICUBIC),
                                         *steps])

    def maps(paths):  # [M, C, h, w] locked-trunk feature maps, fp32
        out = []
        with torch.no_grad():
            for s in range(0, len(paths), 256):
                x = torch.stack([preprocess(load_rgb(p)) for p in paths[s:s + 256]])
                out.append(trunk(x))
        return torch.cat(out)

    t_cache = time.time()
    tr_v, tr_n = maps([r["image"] for r in train]), maps([r["negative_image"] for r in train])
    ho_v, ho_n = maps([r["image"] for r in heldout]), maps([r["negative_image"] for r in heldout])
    ft_v, ft_n = maps([r["image"] for r in fit]), maps([r["negative_image"] for r in fit])
    # per-channel spread of the training maps ([1, C, 1, 1]; [1, C] for a pooling trunk's vectors)
    map_std = tr_v.std(dim=tuple(d for d in range(tr_v.ndim) if d != 1), keepdim=True)
    cp_v = maps([r["image"] for r in corpus]) if "clip" in runs else None
    cache_s = time.time() - t_cache
    tok = bundle.tokenizer
    tr_t, tr_tn = tok([r["caption"] for r in train]), tok([r["negative_caption"] for r in train])
    ho_t, ho_tn = tok([r["caption"] for r in heldout]), tok([r["negative_caption"] for r in heldout])
    ft_t, ft_tn = tok([r["caption"] for r in fit]), tok([r["negative_caption"] for r in fit])
    cp_t = tok([r["anchor"] for r in corpus])
    types = sorted({r["type"] for r in heldout})
    pad_id = text_pad_id(base)
    hf_text = pad_id is not None

    def encode_text(model, t):  # [M, D] unnormalised; an HF tower gets the tokens cut after the longest caption
        return model.encode_text(cut_padding(t, pad_id))

    trim_check = None
    if hf_text:
        with torch.no_grad():
            trim_check = float((encode_text(base, ho_t) - base.encode_text(ho_t)).abs().max())
        if trim_check > 1e-4:
            raise RuntimeError(f"cutting the padding changes the text embeddings by {trim_check:g}")
    text_pairs, tp_tok, tp_types = [], None, []
    if args.text_pairs:
        from concrete_jungle.evaluation.heldout import TEXT_ITEMS
        from concrete_jungle.evaluation.positive_control import control_stats
        from concrete_jungle.io import read_json

        text_pairs = read_json(params.data_dir / "suites" / "heldout" / TEXT_ITEMS).get(args.dataset) or []
        if not text_pairs:
            raise ValueError(f"{params.data_dir / 'suites' / 'heldout' / TEXT_ITEMS}: no text-side pairs of "
                             f"{args.dataset!r} (run text_side and prepare_heldout)")
        tp_tok = [tok([p[k] for p in text_pairs]) for k in ("positive_caption", "caption", "negative_caption")]
        tp_types = sorted({p["type"] for p in text_pairs})
    result = {"params": args.params, "dataset": args.dataset, "steps": args.steps, "batch_size": args.batch_size,
              "lr": args.lr, "seed": args.seed, "text_only": args.text_only, "map_noise": args.map_noise,
              "head_lr_scale": args.head_lr_scale, "image_size": args.image_size, "map_shape": list(tr_v.shape[1:]),
              "n_fit": len(fit), "n_train": len(train),
              "n_corpus": len(corpus), "n_heldout": len(heldout), "n_text_pairs": len(text_pairs),
              "trim_check_max_abs": trim_check, "cache_s": round(cache_s, 1),
              "machine": machine_info(timing=False), "runs": {}, "gain": []}

    def verdicts(model, v, n, t, tn):  # I2T s(v,t) > s(v,t'), T2I s(v,t) > s(v',t): bool [M] each
        with torch.no_grad():
            hv, hn = F.normalize(model.visual.head(v), dim=-1), F.normalize(model.visual.head(n), dim=-1)
            g, gn = F.normalize(encode_text(model, t), dim=-1), F.normalize(encode_text(model, tn), dim=-1)
        s_vt = (hv * g).sum(1)
        return s_vt > (hv * gn).sum(1), s_vt > (hn * g).sum(1)

    def correct(model) -> dict:  # {type_dir: bool tensor [n]} on the held-out pairs, plus the fit check's "fit_*"
        model.eval()
        i2t, t2i = verdicts(model, ho_v, ho_n, ho_t, ho_tn)
        fit_i2t, fit_t2i = verdicts(model, ft_v, ft_n, ft_t, ft_tn)
        out = {}
        for ty in ["all", *types]:
            m = torch.tensor([ty == "all" or r["type"] == ty for r in heldout])
            out[f"{ty}_i2t"], out[f"{ty}_t2i"] = i2t[m], t2i[m]
        out["fit_i2t"], out["fit_t2i"] = fit_i2t, fit_t2i
        if text_pairs:  # TOT: the positive caption nearer the anchor caption than its rewrite
            with torch.no_grad():
                gp, gt, gtn = (F.normalize(torch.cat([encode_text(model, x[s:s + 256]) for s in range(0, len(x), 256)]),
                                           dim=-1) for x in tp_tok)
            tot = (gp * gt).sum(1) > (gp * gtn).sum(1)
            for ty in ["all", *tp_types]:
                m = torch.tensor([ty == "all" or p["type"] == ty for p in text_pairs])
                out[f"text_{ty}_tot"] = tot[m]
        model.train()
        model.visual.trunk.eval()
        return out

    def pct(c: dict) -> dict:
        return {k: round(100 * float(v.float().mean()), 1) for k, v in c.items()}

    def trainable(model):
        for p in model.parameters():
            p.requires_grad_(False)
        if hf_text:  # LiT: the HF tower with its projection
            text = list(model.text.parameters()) + [model.logit_scale]
        else:
            parts = [model.transformer, model.token_embedding, model.ln_final]
            named = [model.positional_embedding, model.text_projection, model.logit_scale]
            text = [p for m in parts for p in m.parameters()] + named
        head = [] if args.text_only else list(model.visual.head.parameters())
        for p in text + head:
            p.requires_grad_(True)
        groups = []
        for ps, lr in ((text, args.lr), (head, args.lr * args.head_lr_scale)):
            groups += [{"params": [p for p in ps if p.ndim >= 2], "weight_decay": 0.1, "lr": lr},
                       {"params": [p for p in ps if p.ndim < 2], "weight_decay": 0.0, "lr": lr}]
        return torch.optim.AdamW([g for g in groups if g["params"]], lr=args.lr)

    def schedule(step):  # warmup 5 % then cosine, as training.train_contrastive
        warm = max(1, int(0.05 * args.steps))
        if step < warm:
            return (step + 1) / warm
        return 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, args.steps - warm)))

    state = {}
    for name in runs:
        model = copy.deepcopy(base)
        opt = trainable(model)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
        n = len(corpus) if name == "clip" else len(train)
        gen = torch.Generator().manual_seed(args.seed)
        state[name] = {"model": model, "opt": opt, "sched": sched, "n": n, "gen": gen, "noise": torch.Generator().manual_seed(args.seed + 1), "perm": [],
                       "curve": [(0, pct(correct(model)))], "correct": {0: correct(model)}, "time": 0.0}

    def batch(st):
        if len(st["perm"]) < args.batch_size:
            st["perm"] = torch.randperm(st["n"], generator=st["gen"]).tolist()
        idx, st["perm"] = st["perm"][:args.batch_size], st["perm"][args.batch_size:]
        return torch.tensor(idx)

    for step in range(1, args.steps + 1):
        for name in runs:
            st = state[name]
            model = st["model"]
            t1 = time.time()
            idx = batch(st)
            if name == "hard":
                img = torch.cat([tr_v[idx], tr_n[idx]])
                txt = torch.cat([tr_t[idx], tr_tn[idx]])
            elif name == "negclip":  # B anchor images; B anchor then B hard-negative captions
                img, txt = tr_v[idx], torch.cat([tr_t[idx], tr_tn[idx]])
            else:
                img, txt = cp_v[idx], cp_t[idx]
            if args.map_noise:
                img = img + args.map_noise * map_std * torch.randn(img.shape, generator=st["noise"])
            f = F.normalize(model.visual.head(img), dim=-1)
            g = F.normalize(encode_text(model, txt), dim=-1)
            logits = model.logit_scale.exp() * f @ g.T  # [B, B] or [2B, 2B]; NegCLIP [B, 2B]
            target = torch.arange(len(img))
            loss = (F.cross_entropy(logits, target) + F.cross_entropy(logits[:, :len(img)].T, target)) / 2
            st["opt"].zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
            st["opt"].step()
            st["sched"].step()
            with torch.no_grad():
                model.logit_scale.clamp_(0, math.log(100))
            st["time"] += time.time() - t1
            if step % args.every == 0 or step == args.steps:
                c = correct(model)
                st["correct"][step] = c
                st["curve"].append((step, {**pct(c), "loss": round(loss.item(), 4),
                                           "logit_scale": round(float(model.logit_scale.exp()), 2)}))
                print(name, step, st["curve"][-1][1], flush=True)
        arm = next((r for r in runs if r in ("hard", "negclip")), None)  # the hard-negative run set against clip
        if arm in state and "clip" in state and step in state[arm]["correct"]:
            row = {"step": step}
            for key in ("all_i2t", "all_t2i", "fit_i2t", "fit_t2i", "relation_i2t", "relation_t2i", "attribute_i2t",
                        "attribute_t2i", "object_i2t", "object_t2i"):
                if key not in state[arm]["correct"][step]:
                    continue
                a, b = state[arm]["correct"][step][key], state["clip"]["correct"][step][key]
                only_a, only_b = int((a & ~b).sum()), int((~a & b).sum())
                p = binomtest(only_a, only_a + only_b).pvalue if only_a + only_b else 1.0
                row[key] = {"gain": round(100 * float(a.float().mean() - b.float().mean()), 1),
                            "mcnemar_p": float(f"{p:.3g}")}
            for ty in ["all", *tp_types] if text_pairs else []:  # the control's own rule on the text-side pairs
                key = f"text_{ty}_tot"
                a, b = state[arm]["correct"][step][key], state["clip"]["correct"][step][key]
                pc = params.evaluate.positive_control
                st = control_stats(dict(enumerate(a.tolist())), dict(enumerate(b.tolist())), min_gain=pc.min_gain,
                                   alpha=pc.alpha, power=pc.power, n_resamples=pc.bootstrap_resamples,
                                   confidence_level=pc.confidence_level, seed=0, headroom_share=pc.headroom_share)
                row[key] = {k: (float(f"{v:.4g}") if isinstance(v, float) else v) for k, v in st.items()}
            result["gain"].append(row)
            print("gain", row, flush=True)
    for name in runs:
        st = state[name]
        result["runs"][name] = {"s_per_step": round(st["time"] / args.steps, 3), "curve": st["curve"]}
    result["wall_s"] = round(time.time() - t0, 1)
    write_json(args.out, result, indent=1)
    return result


if __name__ == "__main__":
    main()
