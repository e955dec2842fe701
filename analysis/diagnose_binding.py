"""Diagnosis (docs/instrument.md, H12): does the image side hold layout in a form a text tower could bind to?

For the relation pairs of a profile's D_lc ConcreteBatch ("A to the left of B" -> "A to the right of B", the image
re-rendered with A and B exchanged), an *oracle text side* is fitted on the training pairs and scored on the
held-out pairs: a caption is reduced to its ideal relational features phi(t) = sign * (words(A) - words(B)) in the
block of its axis (left / right: horizontal, above / below: vertical; sign +1 when the subject is left of / above
the reference), where words() is the one-hot bag of A's size, colour, material and shape words. The score
s(v, t) = e(v)^T G phi(t) is bilinear in an image representation e(v) and phi(t); G is a logistic regression on the
outer products (no intercept, so s(v, t') = -s(v, t) since phi(t') = -phi(t)), with labels +1 for (v, t) and -1 for
(v', t). Held-out I2T is correct when s(v, t) > 0 (= s(v, t) > s(v, t')), T2I when s(v, t) > s(v', t).

If this oracle scores near 100 % on a representation, the layout is there, bound linearly to what each object
looks like, and a text tower that computes phi could use it; near 50 %, no text tower can. Representations:
``pixels`` (the image averaged to an 8 x 8 x 3 grid: position-bound colour by construction, the sanity check),
``trunk_map`` (the locked EfficientNet-Lite0 2 x 2 feature map, flattened, PCA 128), ``trunk_avg`` (its average pool,
PCA 128: what the average-pooled tower sees), ``embedding`` (the trained base's image embedding, 128-d).

    python analysis/diagnose_binding.py --params pipelines/world_effnet_attn/params.yaml \\
        --out docs/instrument/binding_oracle.json
"""

from __future__ import annotations

import argparse
import re
import time

import numpy as np

AXIS = {"left": (0, 1.0), "right": (0, -1.0), "above": (1, 1.0), "below": (1, -1.0)}


def object_words(phrase: str, vocab: dict[str, int]) -> np.ndarray:
    """One-hot bag (len(vocab),) of the vocabulary words in an object phrase."""
    v = np.zeros(len(vocab))
    for w in re.findall(r"[a-z]+", phrase.lower()):
        if w in vocab:
            v[vocab[w]] = 1.0
    return v


def relational_features(record: dict, vocab: dict[str, int]) -> np.ndarray | None:
    """phi(t) (2 * len(vocab),) of a relation record, or None when its lemma is not left / right / above / below."""
    if record["lemma"] not in AXIS:
        return None
    axis, sign = AXIS[record["lemma"]]
    caption, (start, end) = record["caption"], record["span"]
    subject = re.sub(r"^there is ", "", caption[:start]).split(" and ")[0]
    subject = re.split(r" (?:to the (?:left|right) of|above|below|next to) ", subject)[0]
    reference = caption[end:].split(" and ")[0]
    phi = np.zeros(2 * len(vocab))
    phi[axis * len(vocab):(axis + 1) * len(vocab)] = sign * (object_words(subject, vocab)
                                                             - object_words(reference, vocab))
    return phi


def main(argv=None) -> dict:
    import torch
    from PIL import Image
    from sklearn.decomposition import PCA
    from sklearn.linear_model import LogisticRegression

    from concrete_jungle.io import read_jsonl, write_json
    from concrete_jungle.machine import machine_info
    from concrete_jungle.models.checkpoints import load_model
    from concrete_jungle.params import load_params

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--params", required=True)
    ap.add_argument("--dataset", default="lc")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    t0 = time.time()
    params = load_params(args.params)
    w = params.world
    vocab = {t: i for i, t in enumerate([*w.sizes, *w.colours, *w.materials, *w.shapes])}
    folder = params.data_dir / "concreteplant" / args.dataset
    heldout = [r for r in read_jsonl(folder / "heldout.jsonl") if r["type"] == "relation"]
    held_ids = {r["anchor_id"] for r in heldout}
    train = [r for r in read_jsonl(folder / "concretebatch.jsonl")
             if r["type"] == "relation" and r["anchor_id"] not in held_ids]
    sets = {}
    for name, rows in (("train", train), ("heldout", heldout)):
        kept = [(r, phi) for r in rows if (phi := relational_features(r, vocab)) is not None]
        sets[name] = {"rows": [r for r, _ in kept], "phi": np.stack([phi for _, phi in kept])}

    bundle = load_model(params.models_dir / "base" / "checkpoint.pt")
    model = bundle.model.eval()
    trunk = getattr(model.visual, "trunk", None)

    def represent(paths: list[str]) -> dict[str, np.ndarray]:
        out: dict[str, list] = {"pixels": [], "embedding": [], "trunk_map": [], "trunk_avg": []}
        for i in range(0, len(paths), 256):
            ims = [Image.open(p).convert("RGB") for p in paths[i:i + 256]]
            out["pixels"] += [np.asarray(im.resize((8, 8), Image.BOX), dtype=np.float32).ravel() / 255 for im in ims]
            x = torch.stack([bundle.preprocess_val(im) for im in ims])
            with torch.no_grad():
                out["embedding"].append(torch.nn.functional.normalize(model.encode_image(x), dim=-1).numpy())
                if trunk is not None:
                    fmap = trunk.forward_features(x)
                    out["trunk_map"].append(fmap.flatten(1).numpy())
                    out["trunk_avg"].append(fmap.mean((2, 3)).numpy())
        return {k: np.concatenate(v) if isinstance(v[0], np.ndarray) and v[0].ndim == 2 else np.stack(v)
                for k, v in out.items() if v}

    reps = {}
    for name, s in sets.items():
        a = represent([r["image"] for r in s["rows"]])
        n = represent([r["negative_image"] for r in s["rows"]])
        reps[name] = {k: (a[k], n[k]) for k in a}
    result = {"params": args.params, "dataset": args.dataset, "vocab": list(vocab),
              "n_train": len(sets["train"]["rows"]), "n_heldout": len(sets["heldout"]["rows"]),
              "machine": machine_info(timing=False), "representations": {}}
    for rep in reps["train"]:
        ea, en = reps["train"][rep]
        ha, hn = reps["heldout"][rep]
        if ea.shape[1] > 128:  # PCA on the training images (anchors and negatives), then unit norm
            pca = PCA(128, random_state=0).fit(np.concatenate([ea, en]))
            ea, en, ha, hn = (pca.transform(z) for z in (ea, en, ha, hn))
        ea, en, ha, hn = (z / np.linalg.norm(z, axis=1, keepdims=True) for z in (ea, en, ha, hn))
        phi, hphi = sets["train"]["phi"], sets["heldout"]["phi"]

        def outer(e, p):
            return np.einsum("ni,nj->nij", e, p).reshape(len(e), -1)

        x = np.concatenate([outer(ea, phi), outer(en, phi)])
        y = np.concatenate([np.ones(len(ea)), -np.ones(len(en))])
        best = None
        for c in (0.01, 0.1, 1.0, 10.0, 100.0):
            clf = LogisticRegression(C=c, fit_intercept=False, max_iter=2000).fit(x, y)
            sa, sn = outer(ha, hphi) @ clf.coef_[0], outer(hn, hphi) @ clf.coef_[0]
            row = {"C": c, "train_acc": round(100 * float(clf.score(x, y)), 1),
                   "heldout_i2t": round(100 * float(np.mean(sa > 0)), 1),
                   "heldout_t2i": round(100 * float(np.mean(sa > sn)), 1)}
            result["representations"].setdefault(rep, {"grid": []})["grid"].append(row)
            print(rep, row, flush=True)
            if best is None or row["heldout_i2t"] + row["heldout_t2i"] > best["heldout_i2t"] + best["heldout_t2i"]:
                best = row
        result["representations"][rep]["best"] = best
    result["wall_s"] = round(time.time() - t0, 1)
    write_json(args.out, result, indent=1)
    return result


if __name__ == "__main__":
    main()
