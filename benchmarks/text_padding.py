"""Padding in the real profile's text tower: MiniLM-L6 fed captions padded to the context (64 tokens, as the trainer
and the encoders did before the cut) against the same tokens cut after the batch's longest caption
(``models/encoding.py`` cut_padding, and padding_width in the trainer, which now apply it; docs/instrument.md H29).

The LiT base's text tower (open_clip ``HFTextEncoder``: MiniLM-L6, mean pooling over the attention mask, linear
projection; ``cj-lit-effnetlite0-minilm``, the offline pretrained weights) masks padding, so both give the same
embeddings (checked here: ``max_abs_difference``). Timed on real COCO val2017 captions (the first ``--n`` of
``captions_val2017.json``, which the real profile trains and scores on), per batch of ``--n`` captions:

- ``encode``: a forward pass under ``torch.no_grad`` (the embed stage, the held-out and text-side scoring);
- ``train``: forward, a loss (the mean of the embeddings' squares, a stand-in: the cost is the tower's), backward
  (a training step's text side; the AdamW step is the same for both and not timed).

Repeats interleave the two (the order rotates) after a warm-up; ``paired_ratio_median`` is the median over repeats
of t_padded / t_cut (above 1: cutting is faster), robust to a load that drifts across a shared machine.

    python benchmarks/text_padding.py                  # -> results/text_padding.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

RESULT = Path(__file__).resolve().parent / "results" / "text_padding.json"
CAPTIONS = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "coco" / "annotations" / \
    "captions_val2017.json"


def main(argv=None) -> dict:
    import torch

    from concrete_jungle.machine import machine_info
    from concrete_jungle.models.encoding import cut_padding, text_pad_id
    from concrete_jungle.models.build import build_model
    from concrete_jungle.params import ModelSpec

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=64, help="captions a batch (the hard-negative step's 2N at N = 32)")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--out", default=str(RESULT))
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    bundle = build_model(ModelSpec(kind="lit", name="cj-lit-effnetlite0-minilm", pretrained=None, precision="fp32"))
    model = bundle.model.float()
    text = model.text
    captions = [a["caption"].strip() for a in json.loads(CAPTIONS.read_text(encoding="utf-8"))["annotations"]]
    tokens = bundle.tokenizer(captions[:args.n])
    pad_id = text_pad_id(model)
    cut = cut_padding(tokens, pad_id)
    with torch.no_grad():
        diff = float((text(tokens) - text(cut)).abs().max())

    def encode(t):
        with torch.no_grad():
            text(t)

    def train(t):
        text.zero_grad(set_to_none=True)
        text(t).square().mean().backward()

    result = {"n": args.n, "context_length": int(tokens.shape[1]), "cut_length": int(cut.shape[1]),
              "max_abs_difference": diff, "repeats": args.repeats,
              "machine": machine_info(timing=True), "torch_threads": torch.get_num_threads()}
    for name, fn in (("encode", encode), ("train", train)):
        fn(tokens), fn(cut)  # warm-up
        times = {"padded": [], "cut": []}
        for r in range(args.repeats):
            for key in (("padded", "cut") if r % 2 == 0 else ("cut", "padded")):
                t0 = time.perf_counter()
                fn(tokens if key == "padded" else cut)
                times[key].append(time.perf_counter() - t0)
        result[name] = {"padded_median_s": round(statistics.median(times["padded"]), 4),
                        "cut_median_s": round(statistics.median(times["cut"]), 4),
                        "paired_ratio_median": round(statistics.median(
                            p / c for p, c in zip(times["padded"], times["cut"])), 2)}
        print(name, result[name], flush=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
