"""The study's DVC stages as library calls: corpus -> benchmark -> ConcretePlant -> base model -> train ->
evaluate -> report. Each ``stages/<name>.py`` parses arguments, loads :class:`~concrete_jungle.params.Params`
and calls exactly one function here. Paths are relative to the repository root (``Params.data_dir`` etc.).
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

from concrete_jungle.io import atomic_write, read_json, read_jsonl, write_json, write_jsonl, write_metrics
from concrete_jungle.params import Params

__all__ = [
    "model_labels",
    "model_label",
    "build_corpus",
    "build_benchmark",
    "run_concreteplant_stage",
    "dataset_stats_stage",
    "train_base_model",
    "train_model",
    "gradient_ratio_stage",
    "evaluate_model",
    "render_reports",
    "dump_json",
    "run_stage",
]


def model_labels(params: Params) -> list[str]:
    """Labels of every evaluated model: ``base``, the baselines (``clip``), then ``<dataset>-<loss>`` for the
    training grid (``train.losses`` then ``train.margin_losses`` per dataset)."""
    t = params.train
    return ["base", *t.baselines] + [f"{d}-{loss}" for d in t.datasets for loss in [*t.losses, *t.margin_losses]]


def model_label(dataset: str, loss: str) -> str:
    """``<dataset>-<loss>`` for a ConcreteBatch fine-tune; the loss name alone for a corpus baseline."""
    return loss if dataset == "corpus" else f"{dataset}-{loss}"


def _fresh_dir(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


# --------------------------------------------------------------------------------------------- corpus
def build_corpus(params: Params) -> dict:
    """Stage ``corpus``: write ``data/<profile>/corpus/manifest.jsonl`` (one manifest record per image).

    Sources: the scene world (images rendered into ``corpus/images``), COCO captions JSON, Karpathy
    ``dataset_coco.json`` or Flickr8k. Skipped images are counted by reason in
    ``metrics/<profile>/corpus.json``.

    Raises:
        ValueError: if the source yields no records.
    """
    from concrete_jungle.corpus import loaders

    out = _fresh_dir(params.data_dir / "corpus")
    c = params.corpus
    skipped: Counter = Counter()
    if c.source == "scene_world":
        from concrete_jungle.corpus.scene_world import generate_corpus

        records = generate_corpus(params.world, c.n_scenes, out, seed=params.seed, id_prefix="w")
    elif c.source == "coco":
        exclude = loaders.read_filename_list(c.coco.exclude_filenames) if c.coco.exclude_filenames else None
        records = []
        for cap, img in zip(c.coco.captions, c.coco.images):
            recs, sk = loaders.load_coco_captions(cap, img, exclude_filenames=exclude)
            records += recs
            skipped.update(sk)
    elif c.source == "karpathy":
        records, sk = loaders.load_karpathy(c.karpathy.dataset_json, c.karpathy.image_root, c.karpathy.splits)
        skipped.update(sk)
    else:
        records, sk = loaders.load_flickr8k(c.flickr8k.token_file, c.flickr8k.split_file, c.flickr8k.image_dir)
        skipped.update(sk)
    if not records:
        raise ValueError(f"corpus source {c.source!r} produced no records (skipped: {dict(skipped)})")
    ids = Counter(r["id"] for r in records)
    dup = [k for k, v in ids.items() if v > 1]
    if dup:
        raise ValueError(f"corpus has duplicate ids, e.g. {dup[:3]}")
    write_jsonl(out / "manifest.jsonl", records)
    stats = {"source": c.source, "n_images": len(records),
             "n_captions": sum(len(r["captions"]) for r in records), "skipped": dict(skipped)}
    write_metrics(params.metrics_dir / "corpus.json", stats)
    return stats


def build_benchmark(params: Params) -> dict:
    """Stage ``benchmark``: SugarCrepe-format subsets in ``data/<profile>/benchmark`` (+ ``meta.json``), and
    SugarCrepe++ in ``data/<profile>/benchmark/sugarcrepe_pp`` when ``benchmark.sugarcrepe_pp`` is set.

    The scene world generates its seven subsets on scenes whose signatures never occur in the corpus; real
    SugarCrepe and SugarCrepe++ are filtered to the items whose image is present.
    """
    out = _fresh_dir(params.data_dir / "benchmark")
    b = params.benchmark
    if b.source == "scene_world":
        from concrete_jungle.corpus.scene_world import Scene, generate_benchmark, scene_signature

        corpus = read_jsonl(params.data_dir / "corpus" / "manifest.jsonl")
        exclude = {scene_signature(Scene.from_dict(r["scene"])) for r in corpus if "scene" in r}
        counts = generate_benchmark(params.world, b.n_per_subset, out, seed=params.seed + 1_000_003,
                                    exclude=exclude)
        skipped = read_json(out / "scenes.json").get("skipped", {}) if (out / "scenes.json").exists() else {}
        meta = {"image_root": str(out / "images"), "source": "scene_world", "n_items": counts, "skipped": skipped}
        write_json(out / "meta.json", meta)
    else:
        from concrete_jungle.evaluation.sugarcrepe import prepare_benchmark

        meta = prepare_benchmark(b.sugarcrepe.dir, b.sugarcrepe.image_root, out, source_name="sugarcrepe")
    if b.sugarcrepe_pp is not None:
        from concrete_jungle.evaluation.sugarcrepe_pp import prepare_sugarcrepe_pp

        meta = {**meta, "sugarcrepe_pp": prepare_sugarcrepe_pp(b.sugarcrepe_pp.dir, b.sugarcrepe_pp.image_root,
                                                                out / "sugarcrepe_pp")}
    write_metrics(params.metrics_dir / "benchmark.json", meta)
    return meta


# ------------------------------------------------------------------------------------- ConcretePlant
def run_concreteplant_stage(params: Params, dataset: str) -> dict:
    """Stage ``concreteplant@<dataset>``: ConcreteBatch for D_hc / D_lc / D_wo (paper Sec. 2.2, A.1)."""
    from concrete_jungle.concreteplant.pipeline import run_concreteplant

    records = read_jsonl(params.data_dir / "corpus" / "manifest.jsonl")
    out = _fresh_dir(params.data_dir / "concreteplant" / dataset)
    batch, stats = run_concreteplant(records, dataset, params.concreteplant, params.world, out, seed=params.seed)
    if batch is None:  # this process' shards are done; others (concreteplant.shard_index) are still missing
        return stats
    write_jsonl(out / "concretebatch.jsonl", batch)
    write_metrics(params.metrics_dir / "concreteplant" / f"{dataset}.json", stats)
    return stats


def dataset_stats_stage(params: Params, dataset: str) -> dict:
    """Stage ``dataset_stats@<dataset>``: paper Table 1 figures of one ConcreteBatch (mean / median c_i, I2T / T2I
    accuracy, BERTScore, CLIP-L / CLIP-V, DINOScore, unique keywords) under the reference model
    (:func:`~concrete_jungle.evaluation.dataset_stats.dataset_statistics`). Writes
    ``metrics/<p>/dataset_stats/<dataset>.json``, the per-record logit gaps ``<dataset>_gaps.csv`` beside it and the
    c_i histogram ``reports/<p>/dataset_stats/<dataset>.png``."""
    import pandas as pd

    from analysis.dataset_stats import plot_concreteness_histogram
    from concrete_jungle.evaluation.dataset_stats import dataset_statistics, reference_checkpoint
    from concrete_jungle.models import load_model

    cfg = params.dataset_stats
    bundle = load_model(reference_checkpoint(cfg.reference_model, params.models_dir))
    records = read_jsonl(params.data_dir / "concreteplant" / dataset / "concretebatch.jsonl")
    stats = dataset_statistics(records, bundle, cfg, dataset=dataset)
    gaps = pd.DataFrame(stats.pop("per_record"), columns=["anchor_id", "type", "c_i", "cos_gap", "logit_gap"])
    with atomic_write(params.metrics_dir / "dataset_stats" / f"{dataset}_gaps.csv") as fh:
        gaps.to_csv(fh, index=False, float_format="%.6g")  # per-record logit gap vs c_i (Fig. 4; dvc plots)
    write_metrics(params.metrics_dir / "dataset_stats" / f"{dataset}.json", stats)
    plot_concreteness_histogram({dataset: [r["c_i"] for r in records]},
                                params.reports_dir / "dataset_stats" / f"{dataset}.png")
    return stats


# ------------------------------------------------------------------------------------------ training
def _state_path(params: Params, label: str) -> Path:
    """Resumable training state of run ``label``: outside the DVC outputs (DVC deletes those before a re-run), so
    a killed ``dvc repro`` resumes from the last checkpoint (``checkpoint_every``); removed when the run ends."""
    return params.models_dir / "resume" / label / "state.pt"


def train_base_model(params: Params) -> dict:
    """Stage ``base_model``: build the starting model and (unless ``base_model.train`` is false) train it
    contrastively (open_clip ClipLoss, N x N) on the corpus anchors alone. Writes ``models/<p>/base/checkpoint.pt``
    and dvclive logs in ``metrics/<p>/train/base``."""
    from open_clip.loss import ClipLoss

    from concrete_jungle.models import build_model, save_checkpoint
    from concrete_jungle.training import AnchorDataset, train_contrastive

    bp = params.base_model
    bundle = build_model(bp.model, seed=params.seed)  # seeded init: a re-run writes the same weights
    ckpt = params.models_dir / "base" / "checkpoint.pt"
    live_dir = params.metrics_dir / "train" / "base"
    if not bp.train:
        save_checkpoint(ckpt, bundle, params=params.model_dump(), step=0)
        write_metrics(live_dir / "metrics.json", {"steps": 0})
        return {"steps": 0}
    records = read_jsonl(params.data_dir / "corpus" / "manifest.jsonl")
    preprocess = bundle.preprocess_train if bp.augment else bundle.preprocess_val
    ds = AnchorDataset(records, preprocess, bundle.tokenizer, caption=bp.caption, seed=params.seed,
                       cache=not bp.augment)
    return train_contrastive(bundle, ds, ClipLoss(), bp, seed=params.seed, live_dir=live_dir, checkpoint_path=ckpt,
                             params_dump=params.model_dump(), save_checkpoint=save_checkpoint, hard_negatives=False,
                             state_path=_state_path(params, "base"), keep_state=False)


def train_model(params: Params, dataset: str, loss: str) -> dict:
    """Stage ``train@<dataset>-<loss>`` / ``train_margin@<dataset>-<loss>``: fine-tune the base model on
    ConcreteBatch ``dataset`` with a hard-negative ``loss`` (2N x 2N; :data:`~concrete_jungle.losses.LOSSES`), or
    stage ``train_baseline@<loss>`` (``dataset`` = ``corpus``): fine-tune on the corpus anchors without hard
    negatives (``clip``: N x N). Writes ``models/<p>/<label>/checkpoint.pt`` and dvclive logs in
    ``metrics/<p>/train/<label>`` (:func:`model_label`).

    Raises:
        ValueError: for a baseline loss on a ConcreteBatch or a hard-negative loss on the corpus.
    """
    from concrete_jungle.losses import HARD_NEGATIVE_LOSSES, LOSSES, build_loss
    from concrete_jungle.models import load_model, save_checkpoint
    from concrete_jungle.training import AnchorDataset, ConcreteBatchDataset, train_contrastive

    tp = params.train
    label = model_label(dataset, loss)
    hard = loss in HARD_NEGATIVE_LOSSES
    if hard == (dataset == "corpus"):
        raise ValueError(f"loss {loss!r} {'needs' if hard else 'takes no'} hard negatives: dataset {dataset!r} "
                         f"{'has none' if hard else 'is a ConcreteBatch'}")
    bundle = load_model(params.models_dir / "base" / "checkpoint.pt")
    preprocess = bundle.preprocess_train if tp.augment else bundle.preprocess_val
    if hard:
        batch = read_jsonl(params.data_dir / "concreteplant" / dataset / "concretebatch.jsonl")
        # losses without hard-negative images (NegCLIP) never decode them, so text-only ConcreteBatches work
        ds = ConcreteBatchDataset(batch, preprocess, bundle.tokenizer, cache=not tp.augment,
                                  negative_images=LOSSES[loss].needs_hard_negative_images)
    else:
        records = read_jsonl(params.data_dir / "corpus" / "manifest.jsonl")
        ds = AnchorDataset(records, preprocess, bundle.tokenizer, caption="anchor", seed=params.seed,
                           cache=not tp.augment)
    live_dir = params.metrics_dir / "train" / label
    return train_contrastive(bundle, ds, build_loss(loss, params.margin.to_config()), tp, seed=params.seed,
                             live_dir=live_dir, checkpoint_path=params.models_dir / label / "checkpoint.pt",
                             params_dump=params.model_dump(), save_checkpoint=save_checkpoint, hard_negatives=hard,
                             state_path=_state_path(params, label), keep_state=False)


def gradient_ratio_stage(params: Params) -> dict:
    """Stage ``gradient_ratio``: the hard-negative gradient ratio of InfoNCE, Cement loss and static margins for
    each N of ``gradient_ratio.batch_sizes`` on real ConcreteBatch pairs embedded by the base model (paper Fig. 3 and
    Fig. 6; :mod:`concrete_jungle.gradient_ratio`). Writes ``metrics/<p>/gradient_ratio.json``."""
    import random

    import torch

    from concrete_jungle.gradient_ratio import gradient_ratio_study, study_losses
    from concrete_jungle.models import encode_image_files, encode_images, encode_texts, load_model

    gp = params.gradient_ratio
    bundle = load_model(params.models_dir / "base" / "checkpoint.pt")
    batch = [r for r in read_jsonl(params.data_dir / "concreteplant" / gp.dataset / "concretebatch.jsonl")
             if r.get("negative_image")]
    if len(batch) > gp.max_pairs:
        batch = random.Random(params.seed).sample(batch, gp.max_pairs)
    bs = params.evaluate.batch_size

    def images(paths):
        return encode_image_files(paths, lambda ims: encode_images(bundle, ims, bs), bs, "gradient_ratio: images")

    feats = [images([r["image"] for r in batch]), encode_texts(bundle, [r["caption"] for r in batch], bs),
             images([r["negative_image"] for r in batch]),
             encode_texts(bundle, [r["negative_caption"] for r in batch], bs)]
    c = torch.tensor([r["c_i"] for r in batch], dtype=torch.float32)
    scale = float(bundle.model.logit_scale.exp().clamp(max=100.0))
    result = gradient_ratio_study(*feats, c, scale, gp.batch_sizes, study_losses(params.margin.to_config(),
                                  gp.static_margins), n_batches=gp.n_batches, seed=params.seed)
    result = {"dataset": gp.dataset, "model": "base", **result}
    write_metrics(params.metrics_dir / "gradient_ratio.json", result)
    return {k: v for k, v in result.items() if k != "rows"}


# ---------------------------------------------------------------------------------------- evaluation
def evaluate_model(params: Params, label: str) -> dict:
    """Stage ``evaluate@<label>``: SugarCrepe-format accuracy per subset, micro and macro averages (and
    SugarCrepe++ ITT / TOT under ``sugarcrepe_pp`` when the benchmark has it), written to
    ``metrics/<profile>/evaluate/<label>.json``; per-item verdicts to ``data/<profile>/verdicts/<label>.json``."""
    import torch

    from concrete_jungle.evaluation.sugarcrepe import evaluate_sugarcrepe
    from concrete_jungle.models import encode_images, encode_texts, load_model

    torch.manual_seed(params.seed)
    bundle = load_model(params.models_dir / label / "checkpoint.pt")
    bs = params.evaluate.batch_size
    enc_img, enc_txt = (lambda ims: encode_images(bundle, ims, bs)), (lambda txt: encode_texts(bundle, txt, bs))
    cache: dict = {}  # SugarCrepe++ reuses SugarCrepe's image / caption embeddings
    result = evaluate_sugarcrepe(enc_img, enc_txt, params.data_dir / "benchmark", batch_size=bs, cache=cache)
    verdicts = {"model": label, "verdicts": result.pop("verdicts", {})}
    pp_dir = params.data_dir / "benchmark" / "sugarcrepe_pp"
    if (pp_dir / "meta.json").is_file():
        from concrete_jungle.evaluation.sugarcrepe_pp import evaluate_sugarcrepe_pp

        result["sugarcrepe_pp"] = evaluate_sugarcrepe_pp(enc_img, enc_txt, pp_dir, batch_size=bs, cache=cache)
        verdicts["sugarcrepe_pp"] = result["sugarcrepe_pp"].pop("verdicts")
    # Per-item verdicts (for paired comparisons between models) go to a DVC-cached file, not the metrics JSON.
    write_json(params.data_dir / "verdicts" / f"{label}.json", verdicts)
    result = {"model": label, "profile": params.profile, **result}
    write_metrics(params.metrics_dir / "evaluate" / f"{label}.json", result)
    return result


def comparison_pairs(params: Params) -> list[tuple[str, str]]:
    """The ``(model, reference)`` pairs the report compares paired on the benchmark items: every fine-tune
    against ``base``; every hard-negative fine-tune against each baseline (same steps, no hard negatives);
    every margin loss against InfoNCE on the same dataset (the paper's Cement-vs-InfoNCE question) when
    ``infonce`` is in ``train.losses``."""
    labels = model_labels(params)
    tp = params.train
    pairs = [(lab, "base") for lab in labels if lab != "base"]
    hard = [lab for lab in labels if lab != "base" and lab not in tp.baselines]
    pairs += [(lab, bl) for bl in tp.baselines for lab in hard]
    if "infonce" in tp.losses:
        pairs += [(model_label(d, m), model_label(d, "infonce")) for d in tp.datasets for m in tp.margin_losses]
    return pairs


def render_reports(params: Params) -> dict:
    """Stage ``report``: ``reports/<profile>/sugarcrepe.md`` (every model x subset, then the paired comparisons
    of :func:`comparison_pairs` from ``data/<profile>/verdicts``), ``gradient_ratio.png`` (the logged ratio of
    each hard-negative run), ``gradient_ratio_study.png`` (ratio vs N, Fig. 6), ``concreteness_gap.png`` (logit
    gap vs c_i with LOWESS trends, Fig. 4) and ``table1.md``."""
    from analysis.report import render_report

    labels = model_labels(params)
    evals = {lab: params.metrics_dir / "evaluate" / f"{lab}.json" for lab in labels}
    hard = [lab for lab in labels if lab != "base" and lab not in params.train.baselines]
    train_dirs = {lab: params.metrics_dir / "train" / lab for lab in hard}
    out = render_report(evals, train_dirs, params.reports_dir,
                        gradient_study=params.metrics_dir / "gradient_ratio.json",
                        verdicts={lab: params.data_dir / "verdicts" / f"{lab}.json" for lab in labels},
                        pairs=comparison_pairs(params))
    from analysis.dataset_stats import table1_markdown

    table = table1_markdown({d: read_json(params.metrics_dir / "dataset_stats" / f"{d}.json")
                             for d in params.concreteplant.datasets})
    import pandas as pd

    from analysis.dataset_stats import plot_concreteness_gap

    unit = "logit"
    gaps = {}
    for d in params.concreteplant.datasets:
        df = pd.read_csv(params.metrics_dir / "dataset_stats" / f"{d}_gaps.csv")
        if df["logit_gap"].isna().any():  # a reference model without a scalar logit scale: cosine gaps
            unit = "cosine"
        gaps[d] = df
    col = "logit_gap" if unit == "logit" else "cos_gap"
    out["concreteness_gap"] = plot_concreteness_gap(
        {d: {"c_i": df["c_i"].tolist(), "gap": df[col].tolist()} for d, df in gaps.items()},
        params.reports_dir / "concreteness_gap.png", unit=unit)
    out["table1"] = params.reports_dir / "table1.md"
    with atomic_write(out["table1"]) as fh:
        fh.write("# Table 1: ConcreteBatch statistics\n\n" + table)
    return out


def dump_json(obj) -> str:
    """Pretty JSON for stage logs."""
    return json.dumps(obj, indent=2, default=str)


def run_stage(description: str, fn, argv=None, **arguments) -> dict:
    """Thin CLI shared by ``stages/*.py``: parse ``--params`` plus ``arguments`` (name -> argparse kwargs), load
    and validate params, call ``fn(params, **parsed)`` and print its result as JSON.

    Raises:
        SystemExit: on bad command-line arguments (argparse).
        ParamsError: on invalid params, naming the key.
    """
    import argparse

    from concrete_jungle.params import load_params

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--params", default="params.yaml", help="params file (default: params.yaml)")
    for name, kwargs in arguments.items():
        parser.add_argument(f"--{name}", required=True, **kwargs)
    args = vars(parser.parse_args(argv))
    params = load_params(args.pop("params"))
    result = fn(params, **args)
    print(dump_json(result))
    return result

