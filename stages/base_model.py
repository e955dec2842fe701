"""DVC stage `base_model`: the starting model, trained contrastively (open_clip ClipLoss, N x N) on the corpus
anchors alone (held-out anchors excluded), or saved as built (``base_model.train: false``, e.g. the paper's openai ViT-B-32).

Writes ``models/<profile>/base/checkpoint.pt``, the dvclive step curves in ``metrics/<profile>/train/base/plots`` and
the final logged values in ``metrics/<profile>/train/base.json``.
"""

import contextlib

from concrete_jungle.cli import clear_outputs, pop_live_summary, run_stage
from concrete_jungle.io import read_jsonl, write_metrics
from concrete_jungle.params import Params


def train_base_model(params: Params) -> dict:
    """Build the model of ``base_model.model`` with a seeded init (a re-run writes the same weights) and train it
    on the training anchors unless ``base_model.train`` is false. A killed run resumes from
    ``models/<profile>/resume/base``."""
    from open_clip.loss import ClipLoss

    from concrete_jungle.corpus.splits import training_records
    from concrete_jungle.models.build import build_model
    from concrete_jungle.models.checkpoints import save_checkpoint
    from concrete_jungle.models.trunk_cache import fill_trunk_maps, head_on_trunk_maps, training_preprocess
    from concrete_jungle.training import AnchorDataset, train_contrastive

    bp = params.base_model
    bundle = build_model(bp.model, seed=params.seed)
    ckpt = params.models_dir / "base" / "checkpoint.pt"
    live_dir = params.metrics_dir / "train" / "base"
    summary_file = params.metrics_dir / "train" / "base.json"
    clear_outputs(summary_file, live_dir, ckpt)
    read = params.sections("profile", "seed", "base_model")
    if not bp.train:
        save_checkpoint(ckpt, bundle, params=read, step=0)
        (live_dir / "plots").mkdir(parents=True)  # the plots output exists, with no curve
        write_metrics(summary_file, {"base": {"steps": 0}})
        return {"steps": 0}
    records = training_records(read_jsonl(params.data_dir / "corpus" / "manifest.jsonl"))
    cache = not bp.augment and bp.num_workers == 0  # workers would each hold a copy
    # a wholly locked trunk is run once per image (its maps cached), the head and text tower every step
    preprocess, trunk_maps = training_preprocess(
        bundle, bp.augment, cache, uncached=f"base_model.num_workers {bp.num_workers}: DataLoader workers hold no "
                                            "shared cache; base_model.num_workers 0 caches the maps")
    ds = AnchorDataset(records, preprocess, bundle.tokenizer, caption=bp.caption, seed=params.seed, cache=cache)
    if trunk_maps:  # in batches before the loop (docs/instrument.md H18)
        fill_trunk_maps(ds, bundle.model, bundle.preprocess_val)
    with head_on_trunk_maps(bundle.model) if trunk_maps else contextlib.nullcontext():
        result = train_contrastive(bundle, ds, ClipLoss(), bp, seed=params.seed, live_dir=live_dir,
                                   checkpoint_path=ckpt, params_dump=read, save_checkpoint=save_checkpoint,
                                   hard_negatives=False, state_path=params.resume_state("base"), keep_state=False)
    # the dvclive summary, with the precision computed in (``auto`` resolved) and the machine it ran on
    write_metrics(summary_file, {"base": {**pop_live_summary(live_dir), "precision": result["precision"],
                                          "machine": result["machine"]}})
    return result


if __name__ == "__main__":
    run_stage(__doc__, train_base_model)
