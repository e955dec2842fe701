"""DVC stages `train@<loss>`, `train_margin@<loss>` and `train_baseline@<loss>`: fine-tune the base model, one
process a model family (:mod:`concrete_jungle.grid`): a hard-negative loss (InfoNCE, NegCLIP, Cement, static /
inverse margin; paper Sec. 2.3, 3.3) on every ConcreteBatch of ``train.datasets``, or a baseline (``clip``) on the
corpus anchors without hard negatives.

Writes ``models/<p>/<loss>/<dataset>/checkpoint.pt`` (``models/<p>/clip/checkpoint.pt`` for a baseline), the
dvclive step curves in ``metrics/<p>/train/<loss>/<dataset>/plots`` (``metrics/<p>/train/clip/plots``) and the
final logged values of every member in ``metrics/<p>/train/<loss>.json``. With ``train.data_format: webdataset`` the
members stream their inputs from stage ``shards``' tar shards instead of the JSONL (:mod:`concrete_jungle.shards`).
Held-out anchors
(``corpus.heldout_fraction``) are never trained on; their ConcreteBatch pairs give each run's learning curves
(held-out accuracy by keyword type every ``train.curve_every`` steps, under ``plots/metrics/heldout/``).
"""

import contextlib

from concrete_jungle.cli import clear_outputs, is_main_rank, pop_live_summary, run_stage
from concrete_jungle.grid import family_members, model_dir, train_metrics_dir
from concrete_jungle.io import read_jsonl, write_metrics
from concrete_jungle.losses import HARD_NEGATIVE_LOSSES, LOSSES, build_loss
from concrete_jungle.params import Params


def train_family(params: Params, family: str) -> dict:
    """Fine-tune ``models/<p>/base`` once per member of ``family`` (2N x 2N logits with hard negatives, N x N for
    a baseline), one after another in this process. A killed run resumes from ``models/<p>/resume/<label>``. The
    process holds the family's lock (``models/<p>/resume/<family>.family/.lock``) from start to end, so a second run
    of the same family fails at once naming it, whenever it starts (issue 22: two direct runs started a little apart
    used to interleave their members, one deleting the other's summary file).

    Returns:
        ``{label: training summary}``.

    Raises:
        ValueError: ``family`` is not in the grid; a base checkpoint that is not marked complete; a ConcreteBatch
            record whose c_i is not a finite value in [1, 5].
        RuntimeError: another run of this family holds its lock (naming the lock file and the holder's pid).
    """
    from concrete_jungle.training import exclusive_run

    main = is_main_rank()  # under torchrun the family's lock is rank 0's
    with exclusive_run(params.models_dir / "resume" / f"{family}.family") if main else contextlib.nullcontext():
        return _train_family(params, family)


def _train_family(params: Params, family: str) -> dict:
    from concrete_jungle.corpus.splits import training_records
    from concrete_jungle.models.checkpoints import load_model, save_checkpoint
    from concrete_jungle.models.trunk_cache import fill_trunk_maps, head_on_trunk_maps, training_preprocess
    from concrete_jungle.training import AnchorDataset, ConcreteBatchDataset, train_contrastive

    tp = params.train
    stream = tp.data_format == "webdataset"  # WebDataset shards (stage shards), streamed: nothing cached
    # the decoded-input cache pays off over epochs in one process; DataLoader workers would each hold a copy
    cache = not tp.augment and tp.num_workers == 0 and not stream
    uncached = ("train.data_format webdataset: streamed shards are never cached" if stream else
                f"train.num_workers {tp.num_workers}: DataLoader workers hold no shared cache; train.num_workers 0 "
                "caches the maps")
    out = {}
    maps: dict = {}  # locked-trunk maps shared by the members (one base trunk, the same anchors)
    summary_file = params.metrics_dir / "train" / f"{family}.json"
    # every output of the family (checkpoints, step curves, summary): a family failing part-way leaves the earlier
    # run's outputs (run_stage's transaction), never a new checkpoint beside older ones; resume states live apart
    clear_outputs(summary_file, params.models_dir / family, params.metrics_dir / "train" / family)
    for label in family_members(params, family):
        bundle = load_model(params.models_dir / "base" / "checkpoint.pt")
        # a wholly locked trunk is run once per image (its maps cached), the head and text tower every step
        preprocess, trunk_maps = training_preprocess(bundle, tp.augment, cache, uncached=uncached)
        if stream:
            ds = _shard_stream(params, bundle, preprocess, family, label)
        elif family in HARD_NEGATIVE_LOSSES:
            dataset = label.split("-", 1)[0]
            batch = read_jsonl(params.data_dir / "concreteplant" / dataset / "concretebatch.jsonl")
            # losses without hard-negative images (NegCLIP) never decode them, so text-only ConcreteBatches work
            ds = ConcreteBatchDataset(batch, preprocess, bundle.tokenizer, cache=cache,
                                      negative_images=LOSSES[family].needs_hard_negative_images)
        else:
            records = training_records(read_jsonl(params.data_dir / "corpus" / "manifest.jsonl"))
            ds = AnchorDataset(records, preprocess, bundle.tokenizer, caption="anchor", seed=params.seed,
                               cache=cache)
        if trunk_maps:  # in batches before the loop, each image once per process (docs/instrument.md H18)
            fill_trunk_maps(ds, bundle.model, bundle.preprocess_val, maps)
        curve = _curve(params, bundle, label, family in HARD_NEGATIVE_LOSSES)
        with head_on_trunk_maps(bundle.model) if trunk_maps else contextlib.nullcontext():
            out[label] = train_contrastive(
                bundle, ds, build_loss(family, params.margin.to_config()), tp, seed=params.seed,
                live_dir=train_metrics_dir(params, label), checkpoint_path=model_dir(params, label) / "checkpoint.pt",
                params_dump=params.sections("profile", "seed", "base_model", "train", "margin"),
                save_checkpoint=save_checkpoint, hard_negatives=family in HARD_NEGATIVE_LOSSES,
                state_path=params.resume_state(label), keep_state=False, on_step_end=curve)
        if curve is not None:
            curve.finish(out[label]["steps"])
    # the dvclive summary, with the precision computed in (``auto`` resolved) and the machine it ran on
    write_metrics(summary_file, {label: {**pop_live_summary(train_metrics_dir(params, label)),
                                         "precision": out[label]["precision"], "machine": out[label]["machine"]}
                                 for label in family_members(params, family)})
    return out


def _shard_stream(params: Params, bundle, preprocess, family: str, label: str):
    """The :class:`~concrete_jungle.shards.ShardStream` a member trains on (``train.data_format: webdataset``): its
    ConcreteBatch's shards (``data/<p>/shards/<dataset>``), or the corpus anchors' for a baseline
    (``data/<p>/shards/anchors``), decoded to the JSONL datasets' items (random transforms seeded per sample in
    DataLoader workers)."""
    from concrete_jungle.shards import AnchorDecoder, ConcreteBatchDecoder, ShardStream, check_shards, read_index

    needs_negatives = family in HARD_NEGATIVE_LOSSES and LOSSES[family].needs_hard_negative_images
    folder = params.data_dir / "shards" / (label.split("-", 1)[0] if family in HARD_NEGATIVE_LOSSES else "anchors")
    check_shards(folder)  # every shard as the index says (SHA-256, samples) before any rank reads one
    if needs_negatives and not read_index(folder).get("negative_images"):
        raise ValueError(f"{folder}: some samples have no hard-negative image, and {family} trains on them")
    if family in HARD_NEGATIVE_LOSSES:
        decode = ConcreteBatchDecoder(preprocess, bundle.tokenizer, negative_images=needs_negatives)
    else:
        decode = AnchorDecoder(preprocess, bundle.tokenizer)
    return ShardStream(folder, seed=params.seed, shuffle_buffer=params.train.shuffle_buffer, seed_items=True,
                       decode=decode)


def _curve(params: Params, bundle, label: str, hard: bool):
    """The learning curve of run ``label`` (:class:`~concrete_jungle.learning_curve.HeldoutCurve`): the
    held-out pairs of its own dataset for a hard-negative fine-tune, of every ConcreteBatch dataset for a baseline;
    None when ``train.curve_every`` is null or there is no held-out pair. Step 0 (the base model) is measured here."""
    from concrete_jungle.learning_curve import HeldoutCurve

    if params.train.curve_every is None:
        return None
    datasets = [label.split("-", 1)[0]] if hard else list(params.concreteplant.datasets)
    pairs = {d: read_jsonl(params.data_dir / "concreteplant" / d / "heldout.jsonl") for d in datasets}
    if not any(pairs.values()):
        return None
    curve = HeldoutCurve(bundle, pairs, train_metrics_dir(params, label), every=params.train.curve_every,
                         precision=params.evaluate.precision, batch_size=params.evaluate.batch_size,
                         is_main=is_main_rank())
    curve.start()
    return curve


if __name__ == "__main__":
    run_stage(__doc__, train_family, family={"choices": sorted(LOSSES),
                                             "help": "a loss of train.losses / train.margin_losses, or a baseline"})
