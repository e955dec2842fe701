"""Evaluating one model on every suite against encoding the union of its inputs once (issue: <= 1.15x).

Reference: one pass that decodes, preprocesses and encodes every unique image and text that the prepared suites
of a profile list (the least any evaluation must do). Measured: the evaluation as the DAG runs it for one model —
:func:`~concrete_jungle.evaluation.embed.embed_suites` (caches written to a temporary folder) and every suite's
scorer (SugarCrepe, SugarCrepe++, Winoground, retrieval, linear probes, held-out pairs). Rounds alternate between
the two; the ratio of the medians is reported, with every round, in ``benchmarks/results/evaluate_suites.json``.

    python benchmarks/evaluate_suites.py --params params.yaml --label base --rounds 3

Needs the prepared suites and the model of a profile run (``dvc repro``).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from concrete_jungle.evaluation.embed import SUITE_ORDER, embed_suites, set_precision
from concrete_jungle.evaluation.heldout import score_heldout
from concrete_jungle.evaluation.linear_probe import score_probe
from concrete_jungle.evaluation.retrieval import score_retrieval
from concrete_jungle.evaluation.suite import EmbeddingCache, read_suite
from concrete_jungle.evaluation.sugarcrepe import score_sugarcrepe
from concrete_jungle.evaluation.sugarcrepe_pp import score_sugarcrepe_pp
from concrete_jungle.evaluation.winoground import score_winoground
from concrete_jungle.grid import model_dir
from concrete_jungle.io import load_rgb
from concrete_jungle.models.checkpoints import load_model
from concrete_jungle.params import load_params
from concrete_jungle.machine import machine_info


def encode_union(bundle, images: list[str], texts: list[str], batch_size: int) -> None:
    """The reference: decode + preprocess + encode every unique input once, nothing written (captions cut after each
    batch's longest for a tower that masks padding, as the evaluation does)."""
    from concrete_jungle.models.encoding import cut_padding, text_pad_id

    pad_id = text_pad_id(bundle.model)
    with torch.no_grad(), bundle.autocast():
        for s in range(0, len(images), batch_size):
            x = torch.stack([bundle.preprocess_val(load_rgb(p)) for p in images[s:s + batch_size]])
            bundle.model.encode_image(x)
        for s in range(0, len(texts), batch_size):
            bundle.model.encode_text(cut_padding(bundle.tokenizer(texts[s:s + batch_size]), pad_id))


def evaluate_all(params, bundle, label: str, suite_dirs: dict, work: Path) -> None:
    """The DAG's evaluation of one model: embed every suite, then score each one."""
    out = {s: {label: work / s} for s in suite_dirs}
    embed_suites({label: bundle}, suite_dirs, out, batch_size=params.evaluate.batch_size)
    e = params.evaluate
    for suite, folder in suite_dirs.items():
        meta = read_suite(folder)
        if not meta.get("available"):
            continue
        cache = EmbeddingCache.load(work / suite)
        if suite == "benchmark":
            score_sugarcrepe(folder, cache)
            if meta.get("sugarcrepe_pp"):
                score_sugarcrepe_pp(folder / "sugarcrepe_pp", cache)
        elif suite == "winoground":
            score_winoground(folder, cache)
        elif suite == "retrieval":
            score_retrieval(folder, cache, e.retrieval.ks)
        elif suite == "probe":
            score_probe(folder, cache, e.probe)
        elif suite == "heldout":
            score_heldout(folder, cache, e.heldout.c_bins)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--label", default="base")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="benchmarks/results/evaluate_suites.json")
    args = ap.parse_args(argv)
    params = load_params(args.params)
    bundle = load_model(model_dir(params, args.label) / "checkpoint.pt")
    bundle.model.eval()
    set_precision(bundle, params.evaluate.precision)
    suite_dirs = {s: params.suite_dir(s) for s in SUITE_ORDER}
    images = sorted({p for d in suite_dirs.values() for p in read_suite(d).get("images", [])})
    texts = sorted({t for d in suite_dirs.values() for t in read_suite(d).get("texts", [])})
    rounds = []
    for _ in range(args.rounds):
        t = time.perf_counter()
        encode_union(bundle, images, texts, params.evaluate.batch_size)
        ref = time.perf_counter() - t
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            evaluate_all(params, bundle, args.label, suite_dirs, Path(tmp))
            full = time.perf_counter() - t
        rounds.append({"encode_union_s": ref, "evaluate_all_s": full, "ratio": full / ref})
        print(json.dumps(rounds[-1]), flush=True)
    result = {"params": args.params, "model": args.label, "images": len(images), "texts": len(texts),
              "median_encode_union_s": statistics.median(r["encode_union_s"] for r in rounds),
              "median_evaluate_all_s": statistics.median(r["evaluate_all_s"] for r in rounds), "rounds": rounds,
              "cpus": torch.get_num_threads(), "machine": platform.machine(), "python": platform.python_version()}
    result["ratio_of_medians"] = result["median_evaluate_all_s"] / result["median_encode_union_s"]
    result["machine_info"] = machine_info()  # CPU model, ISA flags and caps, torch threads
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "rounds"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
