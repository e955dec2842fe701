"""Diagnosis (docs/instrument.md, H13): can a text tower of the world's kind learn to bind a relation to its objects?

The image side is frozen at a profile's trained base (its normalised image embeddings of the D_lc anchors and
hard-negative images are computed once); only a text tower trains, with the hard-negative InfoNCE of the
fine-tunes (rows (v, t) and (v', t'), 2B x 2B logits, both directions) on the D_lc ConcreteBatch, and is scored on
the held-out pairs by keyword type: I2T correct when s(v, t) > s(v, t'), T2I when s(v, t) > s(v', t).
``analysis/diagnose_binding.py`` shows that an oracle text side (the ideal relational features) scores held-out
relation T2I about 90 % on the same frozen embedding, so what a tower reaches here is what its architecture and
optimisation allow. Variants (open_clip ``TextTransformer``, width 128, 4 heads, EOT pooling): the world's own
(2 layers, causal mask) fresh or warm-started from the base, without the causal mask, and 4 layers.

    python analysis/diagnose_text_binding.py --params pipelines/world_effnet_attn/params.yaml \\
        --out docs/instrument/text_binding.json
"""

from __future__ import annotations

import argparse
import math
import time

VARIANTS = {  # name: (layers, causal, warm start from the base's text tower)
    "causal2_warm": (2, True, True),
    "causal2_fresh": (2, True, False),
    "bidi2_fresh": (2, False, False),
    "causal4_fresh": (4, True, False),
    "bidi4_fresh": (4, False, False),
    "minilm_pretrained": (6, False, True),  # the real profile's LiT text tower (offline MiniLM-L6), mean pooled
}


def harness_parser(doc: str, steps: int, lr: float) -> argparse.ArgumentParser:
    """The arguments the training harnesses of docs/instrument.md share: ``--params`` (a profile's params file),
    ``--dataset`` (ConcreteBatch, default lc), ``--steps``, ``--every`` (steps between held-out scores),
    ``--batch-size`` (anchors a step), ``--lr``; the caller adds its own."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--params", required=True)
    ap.add_argument("--dataset", default="lc")
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=lr)
    return ap


def main(argv=None) -> dict:
    import torch
    import torch.nn.functional as F
    from open_clip.transformer import TextTransformer

    from concrete_jungle.evaluation.embed import set_precision
    from concrete_jungle.io import read_jsonl, write_json
    from concrete_jungle.machine import machine_info
    from concrete_jungle.models.checkpoints import load_model
    from concrete_jungle.models.encoding import encode_image_files, encode_images
    from concrete_jungle.params import load_params

    ap = harness_parser(__doc__, steps=600, lr=1e-3)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--loss", default="infonce", choices=("infonce", "pairwise", "both"),
                    help="infonce: the fine-tunes' hard-negative InfoNCE; pairwise: only the four comparisons of each "
                         "pair (v, t) / (v', t') that the held-out score makes (softplus of the scaled difference); "
                         "both: their sum")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    t0 = time.time()
    params = load_params(args.params)
    folder = params.data_dir / "concreteplant" / args.dataset
    heldout = read_jsonl(folder / "heldout.jsonl")
    train = read_jsonl(folder / "concretebatch.jsonl")
    bundle = load_model(params.models_dir / "base" / "checkpoint.pt")
    set_precision(bundle, params.evaluate.precision)  # encode as the evaluation does (fp32 unless params say)
    model = bundle.model.eval()

    def images(paths):  # [M, 128] unit-norm image embeddings
        return encode_image_files(paths, lambda ims: encode_images(bundle, ims, batch_size=256), batch_size=256)

    tr_v, tr_n = images([r["image"] for r in train]), images([r["negative_image"] for r in train])
    ho_v, ho_n = images([r["image"] for r in heldout]), images([r["negative_image"] for r in heldout])
    tok = bundle.tokenizer
    tr_t, tr_tn = tok([r["caption"] for r in train]), tok([r["negative_caption"] for r in train])
    ho_t, ho_tn = tok([r["caption"] for r in heldout]), tok([r["negative_caption"] for r in heldout])
    types = sorted({r["type"] for r in heldout})
    result = {"params": args.params, "dataset": args.dataset, "steps": args.steps, "batch_size": args.batch_size,
              "lr": args.lr, "seed": args.seed, "loss": args.loss, "n_train": len(train), "n_heldout": len(heldout),
              "machine": machine_info(timing=False), "variants": {}}

    def evaluate(text) -> dict:
        text.eval()
        with torch.no_grad():
            g, gn = F.normalize(text(ho_t), dim=-1), F.normalize(text(ho_tn), dim=-1)
        text.train()
        s_vt, s_vtn, s_nt = (ho_v * g).sum(1), (ho_v * gn).sum(1), (ho_n * g).sum(1)
        row = {}
        for ty in ["all", *types]:
            m = torch.tensor([ty == "all" or r["type"] == ty for r in heldout])
            row[f"{ty}_i2t"] = round(100 * float((s_vt > s_vtn)[m].float().mean()), 1)
            row[f"{ty}_t2i"] = round(100 * float((s_vt > s_nt)[m].float().mean()), 1)
        return row

    base_text = {k: v for k, v in model.state_dict().items()
                 if k.startswith(("transformer.", "token_embedding", "positional_embedding", "ln_final",
                                  "text_projection"))}
    tokens = (tr_t, tr_tn, ho_t, ho_tn)
    for name in args.variants.split(","):
        layers, causal, warm = VARIANTS[name]
        torch.manual_seed(args.seed)
        tr_t, tr_tn, ho_t, ho_tn = tokens
        if name.startswith("minilm"):
            from open_clip.hf_model import HFTextEncoder
            from open_clip.tokenizer import HFTokenizer

            from concrete_jungle.models.build import _minilm_path

            path = _minilm_path()
            text = HFTextEncoder(path, output_dim=128, pooler_type="mean_pooler", proj_type="linear",
                                 pretrained=True)
            hf_tok = HFTokenizer(path, context_length=tok.context_length)
            tr_t, tr_tn, ho_t, ho_tn = (hf_tok([r[k] for r in rows]) for rows, k in (
                (train, "caption"), (train, "negative_caption"), (heldout, "caption"),
                (heldout, "negative_caption")))
        else:
            text = TextTransformer(context_length=tok.context_length, vocab_size=49408, width=128, heads=4,
                                   layers=layers, output_dim=128, no_causal_mask=not causal)
        if warm and not name.startswith("minilm"):
            text.load_state_dict(base_text)  # strict: the world's text tower is this class's causal 2-layer one
        scale = torch.nn.Parameter(torch.tensor(math.log(float(model.logit_scale.exp()))))
        opt = torch.optim.AdamW([*text.parameters(), scale], lr=args.lr, weight_decay=0.1)
        gen = torch.Generator().manual_seed(args.seed)
        curve = [(0, evaluate(text))]
        t1 = time.time()
        for step in range(1, args.steps + 1):
            idx = torch.randint(len(train), (args.batch_size,), generator=gen)
            img = torch.cat([tr_v[idx], tr_n[idx]])
            txt = F.normalize(text(torch.cat([tr_t[idx], tr_tn[idx]])), dim=-1)
            logits = scale.exp() * img @ txt.T
            target = torch.arange(len(img))
            loss = torch.zeros(())
            if args.loss in ("infonce", "both"):
                loss = loss + (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2
            if args.loss in ("pairwise", "both"):
                b = len(idx)
                pos, neg = logits.diagonal()[:b], logits.diagonal()[b:]  # s(v, t), s(v', t')
                cross_t, cross_v = logits[:b, b:].diagonal(), logits[b:, :b].diagonal()  # s(v, t'), s(v', t)
                loss = loss + (F.softplus(cross_t - pos) + F.softplus(cross_v - pos) + F.softplus(cross_v - neg)
                               + F.softplus(cross_t - neg)).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % args.every == 0 or step == args.steps:
                curve.append((step, {**evaluate(text), "loss": round(float(loss), 4)}))
                print(name, step, curve[-1][1], flush=True)
        result["variants"][name] = {"layers": layers, "causal": causal, "warm_start": warm,
                                    "wall_s": round(time.time() - t1, 1), "curve": curve}
    result["wall_s"] = round(time.time() - t0, 1)
    write_json(args.out, result, indent=1)
    return result


if __name__ == "__main__":
    main()
