"""Diagnosis (docs/instrument.md, H19): what caps D_hc's control arm — edits that no model of this design can see
(a resolution ceiling), or edits that ``clip`` learns from the corpus anchors as well as the hard negatives teach
them (no headroom)?

For the models of a profile (base, ``clip``, each fine-tune on D_hc and D_lc) this scores D_hc pairs (anchor v, t;
hard negative v', t'): I2T is correct when s(v, t) > s(v, t'), T2I when s(v, t) > s(v', t) (cosine of the embeddings).
It scores the held-out pairs and, as a fit check, a sample of the pairs the D_hc fine-tunes trained on, each broken
down by the edited word's kind (colour, shape, material, size, from the world's own vocabulary) and by whether the
substitute already occurs in the caption (a binding edit: the bag of words is unchanged in kind) and by how far the
edit moves the locked trunk's 2 x 2 maps (cosine of the flattened maps of v and v', against random image pairs).

Readings: if the hard-negative fine-tune fits its *training* pairs no better than held-out ones and its misses sit
where the trunk's maps barely move, the ceiling is what the trunk lets through; if it fits its training pairs
(near 100 %) but ``clip`` matches it held-out, the anchors teach what the negatives teach (no headroom).

    python analysis/diagnose_hc_ceiling.py --params pipelines/world_effnet_attn_long/params.yaml \\
        --out docs/instrument/hc_ceiling.json
"""

from __future__ import annotations

import argparse
import random
import re
import time
from collections import defaultdict

WORD = re.compile(r"[a-z]+")
#: bins of the trunk-map cosine of v and v' (label, upper end): how much the locked trunk's maps move under the edit
COS_BINS = [("< 0.7", 0.7), ("0.7-0.8", 0.8), ("0.8-0.9", 0.9), (">= 0.9", 2.0)]


def edited_words(caption: str, negative: str) -> tuple[str, str]:
    """(original word, substitute) of a one-word rewrite; ("", "") when the captions differ otherwise."""
    a, b = WORD.findall(caption.lower()), WORD.findall(negative.lower())
    if len(a) != len(b):
        return "", ""
    diff = [(x, y) for x, y in zip(a, b) if x != y]
    return diff[0] if len(diff) == 1 else ("", "")


def word_kind(word: str, world) -> str:
    """The world vocabulary a word belongs to: colour, shape, material, size, or other."""
    if word in world.colours:
        return "colour"
    if word in world.shapes:
        return "shape"
    if word in world.materials:
        return "material"
    if word in world.sizes:
        return "size"
    return "other"


def main(argv=None) -> dict:
    import torch

    from concrete_jungle.io import load_rgb, read_jsonl, write_json
    from concrete_jungle.machine import machine_info
    from concrete_jungle.models.checkpoints import load_model
    from concrete_jungle.models.encoding import encode_images, encode_texts
    from concrete_jungle.params import load_params

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", required=True)
    ap.add_argument("--train-sample", type=int, default=600, help="training pairs scored (the fit check)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    t0 = time.time()
    params = load_params(args.params)
    world = params.world
    folder = params.data_dir / "concreteplant" / "hc"
    rng = random.Random(0)
    train = read_jsonl(folder / "concretebatch.jsonl")
    sets = {"heldout": read_jsonl(folder / "heldout.jsonl"), "train": rng.sample(train, min(args.train_sample,
                                                                                               len(train)))}
    models = {"base": "base", "clip": "clip"}
    for loss in [*params.train.losses, *params.train.margin_losses]:
        for ds in params.train.datasets:
            models[f"{ds}-{loss}"] = f"{loss}/{ds}"
    out = {"params": args.params, "machine": machine_info(), "sets": {}, "trunk": {}}
    images = {name: ([load_rgb(r["image"]) for r in rows], [load_rgb(r["negative_image"]) for r in rows])
              for name, rows in sets.items()}
    meta = {name: [(*edited_words(r["caption"], r["negative_caption"]), r["caption"]) for r in rows]
            for name, rows in sets.items()}

    edit_cos = {}

    def groups(name):
        by = defaultdict(list)
        for i, (old, new, caption) in enumerate(meta[name]):
            by["all"].append(i)
            by[f"kind={word_kind(old, world)}"].append(i)
            by["binding" if new in WORD.findall(caption.lower()) else "new word"].append(i)
            if name in edit_cos:
                c = edit_cos[name][i]
                by[next(f"trunk cos {lab}" for lab, hi in COS_BINS if c < hi)].append(i)
        return by

    # the locked trunk's view of each edit: cosine of the flattened maps of v and v'
    base = load_model(params.models_dir / "base" / "checkpoint.pt")
    trunk = base.model.visual.trunk.eval()

    def maps(ims):
        with torch.no_grad():
            return torch.cat([trunk(torch.stack([base.preprocess_val(im) for im in ims[i:i + 64]])).flatten(1)
                              for i in range(0, len(ims), 64)])

    for name in sets:
        a, b = maps(images[name][0]), maps(images[name][1])
        cos = edit_cos[name] = torch.nn.functional.cosine_similarity(a, b).tolist()
        rand = torch.nn.functional.cosine_similarity(a, b.roll(1, 0)).tolist()
        out["trunk"][name] = {g: {"edit_cos_mean": sum(cos[i] for i in idx) / len(idx), "n": len(idx)}
                              for g, idx in groups(name).items()}
        out["trunk"][name]["random_pairs_cos_mean"] = sum(rand) / len(rand)
        out["trunk"][name]["_cos"] = cos
    for label, sub in models.items():
        path = params.models_dir / sub / "checkpoint.pt"
        if not path.exists():
            continue
        bundle = load_model(path)
        for name, rows in sets.items():
            v, vn = (encode_images(bundle, ims) for ims in images[name])
            t = encode_texts(bundle, [r["caption"] for r in rows])
            tn = encode_texts(bundle, [r["negative_caption"] for r in rows])
            s, s_t, s_v = (v * t).sum(1), (v * tn).sum(1), (vn * t).sum(1)
            i2t, t2i = (s > s_t).tolist(), (s > s_v).tolist()
            res = out["sets"].setdefault(name, {}).setdefault(label, {})
            for g, idx in groups(name).items():
                res[g] = {"n": len(idx), "i2t_pct": 100 * sum(i2t[i] for i in idx) / len(idx),
                          "t2i_pct": 100 * sum(t2i[i] for i in idx) / len(idx)}
            # where the misses sit: mean trunk-map cosine of the pairs it gets wrong (I2T) vs right
            cos = out["trunk"][name]["_cos"]
            wrong = [cos[i] for i in range(len(rows)) if not i2t[i]]
            right = [cos[i] for i in range(len(rows)) if i2t[i]]
            res["trunk_cos_of_misses"] = sum(wrong) / len(wrong) if wrong else None
            res["trunk_cos_of_hits"] = sum(right) / len(right) if right else None
        print(label, {n: round(out["sets"][n][label]["all"]["i2t_pct"], 1) for n in sets}, flush=True)
    for name in sets:
        del out["trunk"][name]["_cos"]
    out["seconds"] = round(time.time() - t0, 1)
    write_json(args.out, out)
    return out


if __name__ == "__main__":
    main()
