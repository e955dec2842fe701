"""Diagnosis (docs/instrument.md): does an ImageNet-pretrained image tower see the world's edits that the world base
model does not? Embeds the held-out pairs of the world with EfficientNet-Lite0 (offline ImageNet weights, the real
profile's LiT image tower; timm ``tf_efficientnet_lite0``, global-average-pooled 1280-d features, no projection) at
the world's 64 px and at 224 px (the tower's training size), and measures what the ``visibility`` stage measures for
the trained models (:func:`concrete_jungle.evaluation.visibility.edit_visibility`): the image cosine of anchor and
edit per keyword type against random pairs, and the linear probe of the edited value. Writes
``docs/instrument/towers.json``.

    python analysis/diagnose_towers.py [--params params.yaml]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def heldout_cli(doc: str, default_out: str, argv=None):
    """The command line shared by the diagnosis scripts: ``--params`` (a profile) and ``--out`` (a JSON file).

    Returns:
        ``(args, params, pairs)``: the parsed arguments, the profile's params and its held-out pairs
        ``{dataset: [pair]}`` (``data/<p>/concreteplant/<d>/heldout.jsonl``).
    """
    from concrete_jungle.io import read_jsonl
    from concrete_jungle.params import load_params

    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--out", default=default_out)
    args = ap.parse_args(argv)
    params = load_params(args.params)
    pairs = {d: read_jsonl(params.data_dir / "concreteplant" / d / "heldout.jsonl") for d in params.concreteplant.datasets}
    return args, params, pairs


def main(argv=None) -> dict:
    import timm
    import torch
    from torchvision import transforms as T

    from concrete_jungle.evaluation.suite import EmbeddingCache
    from concrete_jungle.evaluation.visibility import edit_visibility
    from concrete_jungle.io import load_rgb
    from concrete_jungle.machine import machine_info
    from concrete_jungle.models.build import LIT_IMAGE_MEAN, LIT_IMAGE_STD, efficientnet_lite0_state_dict

    args, params, pairs = heldout_cli(__doc__, "docs/instrument/towers.json", argv)
    paths = sorted({p[k] for ps in pairs.values() for p in ps for k in ("image", "negative_image") if p.get(k)})
    texts = sorted({p[k] for ps in pairs.values() for p in ps for k in ("caption", "negative_caption")})
    trunk = timm.create_model("tf_efficientnet_lite0", pretrained=False, num_classes=0)
    trunk.load_state_dict(efficientnet_lite0_state_dict(trunk), strict=True)
    trunk.eval()
    torch.manual_seed(0)
    out = {"machine": machine_info(timing=False), "towers": {}}
    pr = params.evaluate.probe
    for size in (64, 224):
        t0 = time.time()
        tf = T.Compose([T.Resize(size, interpolation=T.InterpolationMode.BICUBIC), T.CenterCrop(size), T.ToTensor(),
                        T.Normalize(LIT_IMAGE_MEAN, LIT_IMAGE_STD)])
        feats = []
        with torch.no_grad():
            for s in range(0, len(paths), 128):
                x = torch.stack([tf(load_rgb(p)) for p in paths[s:s + 128]])
                feats.append(torch.nn.functional.normalize(trunk(x).float(), dim=-1))
        img = torch.cat(feats).numpy()
        # the captions are not embedded here (an image-tower diagnosis): a constant text row keeps the cache whole
        cache = EmbeddingCache(paths, texts, img, np.ones((len(texts), 1), np.float32))
        res = edit_visibility(pairs, cache, Cs=pr.Cs, max_iter=pr.max_iter, seed=pr.seed)
        for entry in res["cosine"].values():
            entry.pop("text", None)
        out["towers"][f"efficientnet_lite0_imagenet_{size}px"] = {**res, "encode_s": round(time.time() - t0, 1)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    print(json.dumps({k: v["cosine"] for k, v in main()["towers"].items()}, indent=1))
