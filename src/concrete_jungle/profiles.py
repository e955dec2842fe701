"""The study's profiles (issue 12): the derived pipelines' overrides and the groups the controls read.

:data:`DERIVED` maps each derived profile to the params file it is derived from and the dotted keys it overrides;
``python -m concrete_jungle.lineage write`` writes ``pipelines/<name>/params.yaml`` from it (edit the source profile
or this table, never the written file). No torch, no I/O: a table.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DERIVED", "PROFILE_FILES", "CONTROLS", "SEED_PROFILES", "REAL_SEED_PROFILES", "SOURCE_PROFILES",
           "BATCH_PROFILES"]

#: Profiles derived from another one by a few overrides (the reviewers' controls, issue 12): ``name -> (params
#: file it is derived from, {dotted key: value})``. ``lineage write`` writes ``pipelines/<name>/params.yaml`` from
#: them (edit the source profile or this table, never the written file; ``check`` fails when it differs).
# the fix candidates' shared setting: a locked pretrained image trunk (LiT), D_hc / D_lc only
_EFFNET_WORLD: dict[str, Any] = {"base_model.model.lock_image": True, "concreteplant.datasets": ["hc", "lc"],
                                 "train.datasets": ["hc", "lc"]}
# fix candidate 4's setting: fix candidate 2 (the attention-pooled locked trunk) fine-tuned 800 steps at lr 1e-3
_EFFNET_ATTN_LONG: dict[str, Any] = {"base_model.model.name": "cj-world-effnet-attn", **_EFFNET_WORLD, "train.lr": 1e-3,
                                     "train.epochs": 22, "train.max_steps": 800, "train.curve_every": 100}

# H27: fix candidate 4 on D_hc alone (its control arm and `clip`) in a cluttered world (see the profile below)
_CLUTTER: dict[str, Any] = {
    **_EFFNET_ATTN_LONG, "concreteplant.datasets": ["hc"], "train.datasets": ["hc"], "train.margin_losses": [],
    "concreteplant.rewriter.prefer_in_caption": True, "world.object_count_weights": [0.0, 0.0, 1.0],
    "world.distractor_prob": 0.0, "world.shapes": ["circle", "square", "triangle", "star"],
    "world.colours": {"red": [220, 40, 40], "green": [40, 170, 60], "blue": [45, 85, 225], "yellow": [240, 210, 40]},
    "world.materials": ["plain", "striped", "dotted"]}

DERIVED: dict[str, tuple[str, dict[str, Any]]] = {
    # seeds: the whole world study replicated (scenes, benchmark, base model, ConcretePlant sampling, fine-tunes)
    "world_seed1": ("params.yaml", {"seed": 1}),
    "world_seed2": ("params.yaml", {"seed": 2}),
    # type-matched concreteness: D_hc^type / D_lc^type beside D_hc / D_lc (same scenes and base model as world)
    "world_type": ("params.yaml", {"concreteplant.datasets": ["hc", "lc", "hc_type", "lc_type"],
                                   "train.datasets": ["hc", "lc", "hc_type", "lc_type"]}),
    # batch size in training (Fig. 6 during training, the N = 256 vs 1024 ablation): D_hc, InfoNCE and Cement,
    # 4 epochs at every N (same anchors seen; N = 1024 takes 22 steps), no step cap
    **{f"world_n{n}": ("params.yaml", {"train.batch_size": n, "train.epochs": 4, "train.max_steps": None,
                                        "train.log_every": 1, "train.datasets": ["hc"],
                                        "train.baselines": []})
       for n in (64, 256, 1024)},
    # seeds of the real profile: the whole real study re-drawn (base model, ConcretePlant sampling, fine-tunes) on the
    # default pair D_hc / D_lc only (35 min each on 2 cores; the seed-0 run is pipelines/real with every dataset)
    **{f"real_seed{s}": ("pipelines/real/params.yaml", {"seed": s, "concreteplant.datasets": ["hc", "lc"],
                                                         "train.datasets": ["hc", "lc"]})
       for s in (1, 2)},
    # H32 (docs/instrument.md): the real profile's control arm on D_lc under the world's lever (H29: 300 steps at
    # lr 1e-4 lifted held-out TOT 69.0 -> 74.2 % on real_seed1, underpowered at 920 text-side pairs), decided on 4,000
    # text-side pairs; NegCLIP's layout (H31) beside InfoNCE as a treatment; no margin losses (time)
    "real_long_seed1": ("pipelines/real/params.yaml", {
        "seed": 1, "concreteplant.datasets": ["hc", "lc"], "train.datasets": ["lc"],
        "train.losses": ["infonce", "negclip"], "train.margin_losses": [], "train.epochs": 30, "train.lr": 1e-4,
        "train.curve_every": 25, "train.checkpoint_every": 100, "evaluate.heldout.max_text_pairs": 4000}),
    # H33: NegCLIP's layout as the real profile's control arm (its ConcreteBatch's images are retrieved, not edited),
    # decided on a seed that did not choose it: seed 2, D_hc and D_lc, H32's schedule, 4,000 text-side pairs each
    "real_long_seed2": ("pipelines/real/params.yaml", {
        "seed": 2, "concreteplant.datasets": ["hc", "lc"], "train.datasets": ["hc", "lc"],
        "train.losses": ["negclip"], "train.margin_losses": [], "train.epochs": 30, "train.lr": 1e-4,
        "train.curve_every": 25, "train.checkpoint_every": 100, "evaluate.heldout.max_text_pairs": 4000,
        "evaluate.positive_control.control_losses": ["negclip"]}),
    # visual concreteness (Hessel et al. 2018) instead of Brysbaert: D_hc / D_lc built from it (paper Sec. 5)
    "world_visual": ("params.yaml", {"concreteplant.concreteness": "visual", "concreteplant.datasets": ["hc", "lc"],
                                     "train.datasets": ["hc", "lc"]}),
    # the positive control's fix candidate (docs/instrument.md, H3): an ImageNet-pretrained, locked EfficientNet-Lite0
    # image trunk (64 px, trainable linear projection) and the world text tower from scratch, on D_hc / D_lc
    "world_effnet": ("params.yaml", {"base_model.model.name": "cj-world-effnet", **_EFFNET_WORLD}),
    # fix candidate 2 (docs/instrument.md, H7): the same locked ImageNet trunk, pooled by a trainable attention pool
    # with learned positions over its 2 x 2 map (one token a world cell at 64 px), so layout reaches the embedding
    "world_effnet_attn": ("params.yaml", {"base_model.model.name": "cj-world-effnet-attn", **_EFFNET_WORLD}),
    # fix candidate 4 (docs/instrument.md, H15): fix candidate 2 fine-tuned 800 steps at lr 1e-3 (about 20 passes
    # over a ConcreteBatch; the trunk's maps are cached, models/trunk_cache.py), `clip` under the same schedule
    "world_effnet_attn_long": ("params.yaml", _EFFNET_ATTN_LONG),
    # its seeds 1 and 2: the whole study re-drawn (scenes, base, ConcretePlant sampling, fine-tunes)
    "world_effnet_attn_long_seed1": ("params.yaml", {**_EFFNET_ATTN_LONG, "seed": 1}),
    "world_effnet_attn_long_seed2": ("params.yaml", {**_EFFNET_ATTN_LONG, "seed": 2}),
    # H16: fix candidate 4 with binding negatives: the world rewriter puts substitutes already in the caption first
    # ("a red heart above a green circle" -> "a red circle above a green circle"), so that D_hc's held-out pairs
    # leave `clip` headroom
    "world_effnet_attn_long_bind": ("params.yaml", {**_EFFNET_ATTN_LONG,
                                                    "concreteplant.rewriter.prefer_in_caption": True}),
    # H17: fix candidate 4 with four times the held-out anchors (~1,240 D_hc pairs against 310): the arm is decided
    "world_effnet_attn_long_h20": ("params.yaml", {**_EFFNET_ATTN_LONG, "corpus.heldout_fraction": 0.2}),
    # H18's lever 2: fix candidate 4 at batch 64 (800 steps, ~9 passes over a ConcreteBatch); H20 measured it
    "world_effnet_attn_long_b64": ("params.yaml", {**_EFFNET_ATTN_LONG, "train.batch_size": 64}),
    # H24: fix candidate 4 where corpus captions name size / colour / material with p 0.3 / 0.4 / 0.2 (reporting bias)
    "world_effnet_attn_long_rb": ("params.yaml", {**_EFFNET_ATTN_LONG, **{f"world.caption_attribute_probs.{k}": v
                                                  for k, v in (("size", 0.3), ("colour", 0.4), ("material", 0.2))}}),
    # H27: fix candidate 4 in a cluttered world: every corpus scene holds 3 objects, all named
    # (min_objects stays 1: the probes draw single-object scenes), drawn from a small palette
    # (4 colours, 4 shapes, 3 materials), so random in-batch scenes share most of a caption's words and a D_hc edit
    # with a substitute already in the caption (prefer_in_caption) needs binding; D_hc, its control arm and `clip`
    "world_effnet_attn_long_clutter": ("params.yaml", _CLUTTER),
    # H27 decided as H17 decided seed 0: the cluttered world with four times the held-out anchors (~1,240 D_hc pairs)
    "world_effnet_attn_long_clutter_h20": ("params.yaml", {
        **_CLUTTER, "corpus.heldout_fraction": 0.2}),
    # issue 21: the world study with its fine-tunes streaming WebDataset tar shards (stage shards) instead of the
    # JSONL: the same inputs, another order (each rank and worker its own part of an epoch, a shuffle buffer)
    "world_wds": ("params.yaml", {"train.data_format": "webdataset", "train.samples_per_shard": 500}),
    # the paper's N = 256 ablation of its N = 1024 setting (GPU)
    "paper_n256": ("pipelines/paper/params.yaml", {"train.batch_size": 256}),
}
#: params file -> dvc.yaml of each profile's pipeline (relative to the repository root)
PROFILE_FILES = {"params.yaml": "dvc.yaml", "pipelines/real/params.yaml": "pipelines/real/dvc.yaml",
                 "pipelines/paper/params.yaml": "pipelines/paper/dvc.yaml",
                 **{f"pipelines/{name}/params.yaml": f"pipelines/{name}/dvc.yaml" for name in DERIVED}}
#: The controls pipeline: gathers the derived world pipelines (seed spread, batch size); no params file of its own
CONTROLS = "pipelines/controls/dvc.yaml"
SEED_PROFILES = ("params.yaml", "pipelines/world_seed1/params.yaml", "pipelines/world_seed2/params.yaml")
#: The real profile over seeds: seed 0 is the real pipeline (every dataset), seeds 1 and 2 train D_hc / D_lc
REAL_SEED_PROFILES = ("pipelines/real/params.yaml", "pipelines/real_seed1/params.yaml",
                      "pipelines/real_seed2/params.yaml")
#: The concreteness sources compared on the same world (seed 0): Brysbaert (the world) and visual (world_visual)
SOURCE_PROFILES = ("params.yaml", "pipelines/world_visual/params.yaml")
BATCH_PROFILES = tuple(f"pipelines/world_n{n}/params.yaml" for n in (64, 256, 1024))
