"""The study's DVC pipelines, written from one spec, and the check that their locks are true.

Each profile is one pipeline with its own params, DAG and lock: the embedded world at the repository root
(``params.yaml``, ``dvc.yaml``, ``dvc.lock``: what a bare ``dvc repro`` runs) and ``pipelines/<profile>/`` for the
others (``real``, ``paper``; run with ``dvc repro pipelines/real/dvc.yaml``). Every stage runs from the repository
root (``wdir``) and depends on exactly

* the code it runs: its ``stages/<name>.py`` and the transitive closure of the ``concrete_jungle`` / ``analysis``
  modules it imports (module level or inside functions; parent packages' ``__init__.py`` included), plus the data
  those modules read (the non-Python files of a package in the closure, e.g. ``concreteplant/lexicon/*.yaml``, and
  a non-Python folder beside a module whose name the module spells, e.g. ``model_configs``, narrowed to the config
  files the profile names by :func:`model_config_deps`) — computed by :func:`code_deps` from the source, never
  listed by hand;
* the params keys it reads, by name (``train.lr``, ``margin.tau``; nested config objects down to their fields);
* the source data it reads (captions JSON, image folders, benchmark JSON named in its params) and the outputs of
  the stages before it.

The reviewers' controls (issue 12) are more pipelines of the same spec: profiles **derived** from another by a
few overrides (:data:`DERIVED`: ``world_seed1`` / ``world_seed2``, ``world_type``, ``world_n64`` / ``world_n256`` /
``world_n1024``, ``real_seed1`` / ``real_seed2``, ``paper_n256``), whose ``pipelines/<name>/params.yaml`` is written
from the source profile, and the **controls** pipeline (``pipelines/controls/``) that gathers the seeds (world and
real) and the batch sizes; ``dvc repro pipelines/controls/dvc.yaml`` runs them all (the world ones: 2.3 h measured on
2 cores shared with the real profile's run, ``benchmarks/results/dvc_repro_controls.json``; each real seed:
``benchmarks/results/dvc_repro_real_seed<s>.json``).

``python -m concrete_jungle.lineage write`` regenerates every derived ``params.yaml``, every ``dvc.yaml`` and the
provenance of results (:data:`INDEX` and the README's ``<!-- provenance: ... -->`` blocks, from the pending-re-run
ledger ``pipelines/pending.yaml`` and which locks exist: :mod:`concrete_jungle.ledger`). A pipeline is stale when
any stage of its committed lock has code, data, params or metrics that differ from what the lock records, or a
stage's recorded dep on an upstream output differs from that output's recorded hash, or the lock records a stage
the pipeline no longer has; outputs absent from a fresh clone (``data/``, ``models/``, DVC-cached) are not
staleness. ``python -m concrete_jungle.lineage check`` (run by ``.ci/run``) fails when (a) a generated file
differs from the spec, (b) a stale pipeline is not in the ledger, (c) the ledger names a fresh or never-run
pipeline (or a ``results_at`` whose lock is not the committed one), (d) the world pipeline is stale: it is never
pending. ``python -m concrete_jungle.lineage status [--plan MINUTES]`` prints each pipeline's state with its
estimated re-run time, and which pending re-runs fit the budget.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from concrete_jungle import ledger
from concrete_jungle.code_closure import MODEL_CONFIG_DIR, REPO, code_deps, model_config_deps  # noqa: F401 (API)
from concrete_jungle.grid import member_path
from concrete_jungle.params import Params, load_params
from concrete_jungle.parking import PARKED, move_pipeline, parking_problems, pipeline_file
from concrete_jungle.profiles import (  # noqa: F401 (the study's profiles, re-exported)
    BATCH_PROFILES,
    CONTROLS,
    DERIVED,
    PROFILE_FILES,
    REAL_SEED_PROFILES,
    SEED_PROFILES,
    SOURCE_PROFILES,
)

__all__ = ["REPO", "DERIVED", "PROFILE_FILES", "CONTROLS", "SEED_PROFILES", "REAL_SEED_PROFILES",
           "BATCH_PROFILES", "SOURCE_PROFILES", "code_deps",
           "param_keys", "pipeline", "controls_pipeline", "derived_params", "render", "write", "check", "prune",
           "stale_pipelines", "status", "INDEX", "enable", "park", "main"]

#: Stages run with a fixed string hash seed: ``bert_score`` batches the unique sentences in ``set`` order, which
#: follows Python's per-process hash randomisation, so its scores otherwise differ between runs in the 9th digit.
HASH_SEEDED = frozenset({"dataset_stats"})
#: train keys that shape the grid (which stages exist), read by no training run
_GRID_KEYS = ("datasets", "losses", "margin_losses", "baselines")


# ----------------------------------------------------------------------------------------------- params
def param_keys(params: Params, *sections: str, exclude: tuple[str, ...] = ()) -> list[str]:
    """Leaf keys of ``sections`` (dotted, e.g. ``"train"`` or ``"corpus.coco"``) in field order: nested config
    objects are walked down to their fields; free mappings and lists are one key. ``exclude``: field names of the
    sections to leave out (e.g. the grid lists of ``train``).

    Raises:
        AttributeError: a section that ``Params`` does not have.
    """
    keys: list[str] = []

    def walk(obj: Any, prefix: str) -> None:
        if isinstance(obj, BaseModel):
            for name in type(obj).model_fields:
                if prefix.count(".") == 0 and name in exclude:
                    continue
                walk(getattr(obj, name), f"{prefix}.{name}")
        else:
            keys.append(prefix)

    for section in sections:
        obj = params
        for part in section.split("."):
            obj = getattr(obj, part)
        walk(obj, section)
    return keys


# --------------------------------------------------------------------------------------------- pipeline
def _paths(obj: BaseModel | None, fields: tuple[str, ...]) -> list[str]:
    """The path values set among ``fields`` of a config object (None-valued and absent ones left out)."""
    if obj is None:
        return []
    return [getattr(obj, f) for f in fields if getattr(obj, f, None)]


_RETRIEVAL_PATHS = ("dataset_json", "image_root", "token_file", "split_file", "image_dir", "captions_json",
                    "filenames")
_PROBE_PATHS = ("root", "test_root", "instances_train", "instances_val", "image_root", "test_image_root")


def _source_data(params: Params, stage: str) -> list[str]:
    """Source files / folders a stage reads (from its params): the corpus' captions and images, the benchmark
    JSON and images, the files of each evaluation suite. Unset paths are not deps (the suite is then skipped)."""
    if stage == "corpus":
        c = params.corpus
        x = c.exclude  # benchmark images never trained on (corpus.splits)
        excluded = [*_paths(x, ("sugarcrepe", "sugarcrepe_pp", "karpathy_coco", "karpathy_flickr30k")), *x.filenames]
        if c.source == "coco":
            paths = [*c.coco.captions, *c.coco.images]
            paths += [c.coco.exclude_filenames] if c.coco.exclude_filenames else []
        elif c.source == "karpathy":
            paths = [c.karpathy.dataset_json, c.karpathy.image_root]
        elif c.source == "flickr8k":
            paths = [c.flickr8k.token_file, c.flickr8k.split_file, c.flickr8k.image_dir]
        else:
            paths = []
        return list(dict.fromkeys(paths + excluded))
    e = params.evaluate
    if stage == "winoground":
        return _paths(e.winoground, ("dir", "meta_csv", "diwan_tags")) if e.winoground.source != "none" else []
    if stage == "retrieval":
        paths = [p for s in e.retrieval.sets.values() for p in _paths(s, _RETRIEVAL_PATHS)]
        return list(dict.fromkeys(paths))
    if stage == "probe":
        return list(dict.fromkeys(p for t in e.probe.tasks.values() for p in _paths(t, _PROBE_PATHS)))
    b = params.benchmark
    srcs = [b.sugarcrepe] if b.source == "sugarcrepe" else []
    srcs += [b.sugarcrepe_pp] if b.sugarcrepe_pp is not None else []
    return list(dict.fromkeys(p for s in srcs for p in (s.dir, s.image_root)))


#: The evaluation suites: prepared by ``benchmark`` / ``prepare_<name>``, encoded by the ``embed`` stages, scored by
#: ``score_<name>`` (``stages/<script>.py prepare|score``), in the encoding order of ``evaluation.embed``.
SUITE_STAGES = {"benchmark": "benchmark", "winoground": "winoground", "retrieval": "retrieval", "probe": "probe",
                "heldout": "heldout"}
#: What each suite's ``score`` step writes (result suites of ``metrics/<p>/evaluate/``).
SUITE_RESULTS = {"benchmark": ("sugarcrepe", "sugarcrepe_pp"), "winoground": ("winoground",),
                 "retrieval": ("retrieval",), "probe": ("probe",), "heldout": ("heldout", "heldout_text")}


def _corpus_image_dirs(params: Params) -> list[str]:
    """The folders a real corpus' images are read from (the stages that decode anchor images depend on them)."""
    c = params.corpus
    if c.source == "coco":
        return list(c.coco.images)
    if c.source == "karpathy":
        return [c.karpathy.image_root]
    if c.source == "flickr8k":
        return [c.flickr8k.image_dir]
    return []


def pipeline(params_file: str, repo: Path = REPO) -> dict:
    """The ``dvc.yaml`` of the profile whose params are ``params_file`` (relative to the repository root).

    Raises:
        ParamsError / FileNotFoundError: the params file is invalid or missing.
    """
    p = load_params(repo / params_file)
    world = p.corpus.source == "scene_world"
    d, m, r = f"data/{p.profile}", f"models/{p.profile}", f"metrics/{p.profile}"
    nocache = {"cache": False}

    checked = f"{d}/params_checked.txt"  # the pre-flight's marker: every stage runs after the params file is valid

    def stage(script: str, cmd_args: str, keys: list[str], deps: list[str], **rest) -> dict:
        env = "PYTHONHASHSEED=0 " if script in HASH_SEEDED else ""
        st = {"cmd": f"{env}python stages/{script}.py" + cmd_args
                     + ("" if params_file == "params.yaml" else f" --params {params_file}")}
        if params_file != "params.yaml":
            st["wdir"] = "../.."
        st["deps"] = (model_config_deps(code_deps(f"stages/{script}.py", repo), [p], repo) + deps
                      + ([checked] if script != "check_params" else []))
        keys = ["profile", *keys]
        st["params"] = keys if params_file == "params.yaml" else [{params_file: keys}]
        return {**st, **rest}

    seed_world = (["seed", *param_keys(p, "world")] if world else [])
    # the corpus is two outputs: the manifest (what most stages read) and, in the world, the rendered images (read by
    # the stages that decode anchor images); a real corpus' images are its source folders
    manifest = f"{d}/corpus/manifest.jsonl"
    images = [f"{d}/corpus/images"] if world else _corpus_image_dirs(p)
    corpus_in = [manifest, *images]
    grid = [f"train.{k}" for k in _GRID_KEYS]
    loop_keys = ["seed", *param_keys(p, "train", exclude=_GRID_KEYS)]
    stages: dict[str, Any] = {}
    # the pre-flight (issue 22): the whole params file validated before any stage runs, whenever it changes
    stages["check_params"] = stage("check_params", "", [], [params_file], outs=[checked])
    stages["corpus"] = stage(
        "corpus", "", seed_world + ["corpus.source"]
        + (["corpus.n_scenes"] if world else param_keys(p, f"corpus.{p.corpus.source}"))
        + (["seed"] if not world else []) + ["corpus.heldout_fraction", *param_keys(p, "corpus.exclude")],
        _source_data(p, "corpus"), outs=[manifest, *([f"{d}/corpus/images"] if world else [])],
        metrics=[{f"{r}/corpus.json": nocache}])
    stages["keywords"] = stage(
        "keywords", "", ["concreteplant.spacy_model", "concreteplant.batch_size"], [manifest],
        outs=[f"{d}/keywords"], metrics=[{f"{r}/keywords.json": nocache}])
    # one process for every dataset (they share the manifest, the candidates, the Brysbaert table and the rewriter)
    visual = p.concreteplant.concreteness == "visual"
    if visual:  # the paper's future work: keyword concreteness measured on the corpus images (ImageNet features)
        base_in = [f"{m}/base"] if p.concreteplant.visual.features == "base" else []
        stages["visual_concreteness"] = stage(
            "visual_concreteness", "", ["concreteplant.concreteness", *param_keys(p, "concreteplant.visual"),
                                        "evaluate.batch_size"],
            [*corpus_in, f"{d}/keywords", *base_in], outs=[f"{d}/visual_concreteness"],
            metrics=[{f"{r}/visual_concreteness.json": nocache}])
    stages["concreteplant"] = stage(
        "concreteplant", "", seed_world + param_keys(p, "concreteplant", exclude=("shard_index", "shard_count",
                                                                                  "spacy_model", "batch_size",
                                                                                  "visual")),
        [*corpus_in, f"{d}/keywords", *([f"{d}/visual_concreteness"] if visual else [])],
        outs=[f"{d}/concreteplant"], metrics=[{f"{r}/concreteplant": nocache}])

    # ---- evaluation suites: prepare (no model)
    b = p.benchmark
    bench_keys = ["benchmark.source"] + (["benchmark.n_per_subset"] if b.source == "scene_world"
                                         else param_keys(p, "benchmark.sugarcrepe"))
    stages["benchmark"] = stage(
        "benchmark", " prepare", (seed_world if b.source == "scene_world" else []) + bench_keys
        + param_keys(p, "benchmark.sugarcrepe_pp"),
        ([manifest] if b.source == "scene_world" else []) + _source_data(p, "benchmark"),
        outs=[f"{d}/benchmark"], metrics=[{f"{r}/benchmark.json": nocache}])
    e = p.evaluate
    world_suite = {"winoground": e.winoground.source == "scene_world",
                   "retrieval": any(s.format == "scene_world" for s in e.retrieval.sets.values()),
                   "probe": any(t.format == "scene_world" for t in e.probe.tasks.values())}
    prep_keys = {"winoground": param_keys(p, "evaluate.winoground"),
                 "retrieval": ["evaluate.retrieval.sets"],
                 "probe": ["evaluate.probe.tasks", "evaluate.probe.train_size", "evaluate.probe.val_size",
                           "evaluate.probe.seed"]}
    for suite in ("winoground", "retrieval", "probe"):
        uses_world = world_suite[suite]
        stages[f"prepare_{suite}"] = stage(
            suite, " prepare", (seed_world if uses_world else []) + prep_keys[suite],
            ([manifest] if uses_world else []) + _source_data(p, suite), outs=[f"{d}/suites/{suite}"])
    # held-out pairs list corpus anchor images and ConcretePlant negatives (suite.json records their MD5s), and where
    # the profile has a text side, its text-side pairs (rewrites of text_side, positives from its captions file)
    text_side = p.text_side.captions is not None
    stages["prepare_heldout"] = stage(
        "heldout", " prepare", ["concreteplant.datasets"]
        + (["text_side.captions", "evaluate.heldout.max_text_pairs"] if text_side else []),
        [*corpus_in, f"{d}/concreteplant", *([f"{d}/text_side", p.text_side.captions] if text_side else [])],
        outs=[f"{d}/suites/heldout"])

    # ---- models: base, then one stage per family (grid.py)
    stages["base_model"] = stage(
        "base_model", "", ["seed", *param_keys(p, "base_model")], corpus_in, outs=[f"{m}/base"],
        metrics=[{f"{r}/train/base.json": nocache}], plots=[{f"{r}/train/base": {"cache": False, "x": "step"}}])

    def family_files(family: str) -> dict:
        return {"outs": [f"{m}/{family}"], "metrics": [{f"{r}/train/{family}.json": nocache}],
                "plots": [{f"{r}/train/{family}": {"cache": False, "x": "step"}}]}

    cb_in, anchors_in = [f"{d}/concreteplant"], []  # with webdataset, their tar shards too (issue 21): one folder each
    if p.train.data_format == "webdataset":
        shard_outs = [f"{d}/shards/{x}" for x in [*p.train.datasets, *(["anchors"] if p.train.baselines else [])]]
        stages["shards"] = stage("shards", "", ["train.datasets", "train.baselines", "train.samples_per_shard"],
                                 [*corpus_in, *cb_in], outs=shard_outs)
        cb_in, anchors_in = cb_in + shard_outs[:len(p.train.datasets)], shard_outs[len(p.train.datasets):]
    hard_inputs = [f"{m}/base", *images, *cb_in]  # anchor images, pairs and negative images
    curve_keys = ["evaluate.precision", "evaluate.batch_size"]  # the learning curves' encoding
    stages["train"] = {"foreach": "${train.losses}", "do": stage(
        "train", " --family ${item}", loop_keys + ["train.datasets", *curve_keys], hard_inputs,
        **family_files("${item}"))}
    stages["train_margin"] = {"foreach": "${train.margin_losses}", "do": stage(
        "train", " --family ${item}", loop_keys + ["train.datasets", *param_keys(p, "margin"), *curve_keys],
        hard_inputs, **family_files("${item}"))}
    stages["train_baseline"] = {"foreach": "${train.baselines}", "do": stage(
        "train", " --family ${item}", loop_keys + ["concreteplant.datasets", "evaluate.precision", "evaluate.batch_size"],
        [f"{m}/base", *corpus_in, f"{d}/concreteplant", *anchors_in], **family_files("${item}"))}  # + held-out (curves)

    # ---- embed: every suite once per model, one process a family (suite.json names each image by path and MD5)
    suite_dirs = [f"{d}/benchmark", *(f"{d}/suites/{s}" for s in ("winoground", "retrieval", "probe", "heldout"))]
    embed_keys = ["seed", "evaluate.batch_size", "evaluate.precision"]

    def embedding(family: str, extra_keys: list[str] = ()) -> dict:
        return stage("embed", f" --family {family}", embed_keys + list(extra_keys), [f"{m}/{family}", *suite_dirs],
                     outs=[f"{d}/embeddings/{s}/{family}" for s in SUITE_STAGES])

    stages["embed_base"] = embedding("base")
    stages["embed"] = {"foreach": "${train.losses}", "do": embedding("${item}", ["train.datasets"])}
    stages["embed_margin"] = {"foreach": "${train.margin_losses}", "do": embedding("${item}", ["train.datasets"])}
    stages["embed_baseline"] = {"foreach": "${train.baselines}", "do": embedding("${item}")}

    # ---- score: one stage a suite over every model (no torch)
    score_keys = {"benchmark": [], "winoground": [], "retrieval": ["evaluate.retrieval.ks"],
                  "probe": ["evaluate.probe.Cs", "evaluate.probe.max_iter", "evaluate.probe.seed"],
                  "heldout": ["evaluate.heldout.c_bins"]}
    for suite, script in SUITE_STAGES.items():
        results = SUITE_RESULTS[suite]
        stages[f"score_{suite}"] = stage(
            script, " score", [*grid, "evaluate.precision", *score_keys[suite]],
            [p.suite_dir(suite).as_posix(), f"{d}/embeddings/{suite}"],
            outs=[f"{d}/verdicts/{name}" for name in results],
            metrics=[{f"{r}/evaluate/{name}": nocache} for name in results])

    # ---- analyses and the report
    ds = p.dataset_stats
    model_files = [f"{m}/{member_path(label).as_posix()}" for label in
                   dict.fromkeys([ds.reference_model, *([ds.clip_model.checkpoint] if ds.clip_model.checkpoint else [])])
                   if not label.endswith(".pt")]
    model_files += [x for x in (ds.reference_model, ds.clip_model.checkpoint) if x and x.endswith(".pt")]
    model_files += _paths(ds.clip_model, ("weights_path",)) + _paths(ds.dino, ("checkpoint_path",))
    stages["dataset_stats"] = stage(
        "dataset_stats", "", ["concreteplant.datasets", *param_keys(p, "dataset_stats")],
        [*dict.fromkeys(model_files), f"{d}/concreteplant"],
        metrics=[{f"{r}/dataset_stats": nocache}],
        plots=[{f"{r}/dataset_gaps": {"cache": False, "x": "c_i", "y": "logit_gap", "template": "scatter"}}],
        outs=[{f"reports/{p.profile}/dataset_stats": nocache}])
    if text_side:  # the text-side check on a COCO captions file (no images); its rewrites feed prepare_heldout
        stages["text_side"] = stage(
            "text_side", "", ["seed", *param_keys(p, "concreteplant", exclude=("shard_index", "shard_count",
                                                                             "image_negatives", "image_edit",
                                                                             "max_anchors", "concreteness",
                                                                             "visual")),
                              *param_keys(p, "text_side")],
            [p.text_side.captions],
            metrics=[{f"{r}/concreteness_coco_val2017.json": nocache}, {f"{r}/lc_concreteness.json": nocache}],
            outs=[f"{d}/text_side", {f"reports/{p.profile}/coco_val2017_rewrites.md": nocache}])
    stages["gradient_ratio"] = stage(
        "gradient_ratio", "", ["seed", *param_keys(p, "margin", "gradient_ratio"), "evaluate.batch_size"],
        [f"{m}/base", f"{d}/concreteplant"],
        metrics=[{f"{r}/gradient_ratio.json": nocache}])
    stages["positive_control"] = stage(
        "positive_control", "", ["seed", *grid, *param_keys(p, "evaluate.positive_control")],
        [p.suite_dir("heldout").as_posix(), f"{d}/verdicts/heldout", f"{d}/verdicts/heldout_text"],
        metrics=[{f"{r}/positive_control.json": nocache}])
    stages["visibility"] = stage(
        "visibility", "", [*grid, "concreteplant.datasets", "evaluate.probe.Cs", "evaluate.probe.max_iter",
                           "evaluate.probe.seed"],
        [f"{d}/concreteplant", p.suite_dir("heldout").as_posix(), f"{d}/embeddings/heldout"],
        metrics=[{f"{r}/visibility.json": nocache}])
    stages["report"] = stage(
        "report", "", ["concreteplant.datasets", *grid, "evaluate.positive_control.power"],
        [f"{r}/evaluate", f"{d}/verdicts", f"{r}/train", f"{r}/gradient_ratio.json", f"{r}/dataset_stats",
         f"{r}/dataset_gaps", f"{r}/positive_control.json", f"{r}/visibility.json"],
        outs=[{f"reports/{p.profile}/{name}": nocache} for name in REPORT_OUTPUTS])
    return {"stages": stages}


#: The files the report stage renders (``reports/<profile>/``).
REPORT_OUTPUTS = ("table2.md", "table2.tex", "table3.md", "table3.tex", "comparisons.md", "gradient_ratio.png",
                  "gradient_ratio_study.png", "table1.md", "concreteness_gap.png", "heldout.png", "fig5_def.png",
                  "learning_curves.png")


def controls_pipeline(repo: Path = REPO) -> dict:
    """The ``dvc.yaml`` of the controls pipeline (:data:`CONTROLS`): stage ``seeds`` gathers the world study over
    :data:`SEED_PROFILES` (mean ± sd per model, paired tests pooled over every seed's items), stage ``real_seeds``
    the real profile over :data:`REAL_SEED_PROFILES` (the models every seed trains), stage ``batch_size``
    the D_hc fine-tunes of :data:`BATCH_PROFILES` (Fig. 6 during training, the N ablation), stage
    ``concreteness_source`` D_hc / D_lc built from Brysbaert and from visual concreteness (:data:`SOURCE_PROFILES`).
    Each depends on its profiles' evaluation metrics and verdicts (training logs, dataset statistics) and on their
    grid keys."""
    names = [name for results in SUITE_RESULTS.values() for name in results]

    def stage(what: str, files: tuple[str, ...], outs: list[str], *, train_logs: bool = False, stats: bool = False,
              extra_keys: tuple[str, ...] = ()) -> dict:
        profiles = [load_params(repo / f) for f in files]
        deps = model_config_deps(code_deps("stages/controls.py", repo), profiles, repo)
        for p in profiles:  # the exact outputs of the profiles' stages, so the lock check compares their hashes
            deps += [f"metrics/{p.profile}/evaluate/{n}" for n in names]
            deps += [f"data/{p.profile}/verdicts/{n}" for n in names]
            if train_logs:
                deps += [f"metrics/{p.profile}/train/{f}" for f in [*p.train.losses, *p.train.margin_losses]]
            if stats:
                deps += [f"metrics/{p.profile}/dataset_stats"]
        keys = ["profile", "seed", *extra_keys, "train.batch_size", *(f"train.{k}" for k in _GRID_KEYS)]
        return {"cmd": f"python stages/controls.py {what} --params {' '.join(files)}", "wdir": "../..",
                "deps": deps, "params": [{f: keys} for f in files],
                "metrics": [{f"metrics/controls/{what}.json": {"cache": False}}],
                "outs": [{f"reports/controls/{name}": {"cache": False}} for name in outs]}
    return {"stages": {
        # the seed stages read benchmark.source: a fixed benchmark means the seeds share items (item-clustered tests)
        "seeds": stage("seeds", SEED_PROFILES, ["seeds.md"], extra_keys=("benchmark.source",)),
        "real_seeds": stage("real_seeds", REAL_SEED_PROFILES, ["real_seeds.md"], extra_keys=("benchmark.source",)),
        "batch_size": stage("batch_size", BATCH_PROFILES, ["batch_size.md", "fig6_training.png"], train_logs=True),
        "concreteness_source": stage("concreteness_source", SOURCE_PROFILES, ["concreteness_source.md"], stats=True,
                                     extra_keys=("concreteplant.concreteness",))}}


_DERIVED_HEADER = """# GENERATED by `python -m concrete_jungle.lineage write` from {source} and DERIVED in
# src/concrete_jungle/lineage.py: do not edit (edit {source} or DERIVED). Overrides: {overrides}
"""


def derived_params(name: str, repo: Path = REPO) -> str:
    """The text of ``pipelines/<name>/params.yaml``: the source profile's params with ``DERIVED[name]``'s overrides
    and ``profile: <name>`` (so its data, models, metrics and reports live in their own folders).

    Raises:
        KeyError: ``name`` is not in :data:`DERIVED`, or an override names a key the source params lack (a typo).
    """
    source, overrides = DERIVED[name]
    data = yaml.safe_load((repo / source).read_text())
    for dotted, value in {"profile": name, **overrides}.items():
        *parents, leaf = dotted.split(".")
        node = data
        for key in parents:
            node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict) or leaf not in node or isinstance(node[leaf], dict) != isinstance(value, dict):
            raise KeyError(f"DERIVED[{name!r}]: {source} has no key {dotted!r} of that kind (a section is replaced "
                           "key by key, a value by a value)")
        node[leaf] = value
    head = _DERIVED_HEADER.format(source=source, overrides=json.dumps(overrides))
    return head + yaml.dump(data, Dumper=_NoAliases, sort_keys=False, width=120)


class _NoAliases(yaml.SafeDumper):
    """Writes a shared sub-mapping in full each time (no ``&id001`` anchors in a file people read)."""

    def ignore_aliases(self, data) -> bool:
        return True


_HEADER = """# GENERATED by `python -m concrete_jungle.lineage write` from src/concrete_jungle/lineage.py: do not edit.
# The {profile} pipeline: params {params}, lock {lock}. Code deps are each stage's import closure;
# params are tracked by key; source data under ../shared/data are deps too. `.ci/run` checks this file and the lock.
"""


def render(params_file: str, repo: Path = REPO) -> str:
    """The text of the profile's ``dvc.yaml`` (header comment + YAML); ``params_file`` :data:`CONTROLS` renders
    the controls pipeline."""
    if params_file == CONTROLS:
        head = _HEADER.format(profile="controls", params="those of the gathered profiles",
                              lock=str(Path(CONTROLS).with_suffix(".lock")))
        return head + yaml.dump(controls_pipeline(repo), Dumper=_NoAliases, sort_keys=False, width=120)
    dvc_yaml = PROFILE_FILES[params_file]
    profile = load_params(repo / params_file).profile
    head = _HEADER.format(profile=profile, params=params_file, lock=str(Path(dvc_yaml).with_suffix(".lock")))
    return head + yaml.dump(pipeline(params_file, repo), Dumper=_NoAliases, sort_keys=False, width=120)


def enable(name: str, repo: Path = REPO) -> str:
    """Un-park pipeline ``name`` (:func:`~concrete_jungle.parking.move_pipeline`); returns its ``dvc.yaml``.
    Raises: KeyError (no such pipeline), ValueError (not parked)."""
    dvc_yaml = _dvc_yaml_of(name)
    return move_pipeline(dvc_yaml, render(_params_of(dvc_yaml), repo), repo, park=False)


def park(name: str, repo: Path = REPO) -> str:
    """Park pipeline ``name``, one that never ran; returns the parked path. Raises: KeyError (no such pipeline),
    ValueError (the world or the controls, a pipeline with a lock, or parked already)."""
    dvc_yaml = _dvc_yaml_of(name)
    if name == ledger.WORLD or dvc_yaml == CONTROLS:
        raise ValueError(f"the {name} pipeline is never parked")
    return move_pipeline(dvc_yaml, render(_params_of(dvc_yaml), repo), repo, park=True)


def _params_of(dvc_yaml: str) -> str:
    return next(f for f, d in PROFILE_FILES.items() if d == dvc_yaml)


def _generated(repo: Path) -> dict[str, Any]:
    """Every generated file of the checkout: ``{path: text function}`` (derived params first: the pipelines read
    them; then the dvc.yaml files; then the provenance of results, :data:`INDEX` and the README's provenance blocks,
    written from the ledger and which locks exist)."""
    files: dict[str, Any] = {f"pipelines/{name}/params.yaml": (lambda n=name: derived_params(n, repo)) for name in DERIVED}
    files.update({pipeline_file(dvc_yaml, repo): (lambda f=params_file: render(f, repo))
                  for params_file, dvc_yaml in PROFILE_FILES.items()})
    files[CONTROLS] = lambda: render(CONTROLS, repo)
    files[INDEX] = lambda: ledger.render_index(_names(), ledger.read_ledger(repo)[0], _locked(repo), repo,
                                               _upstream(repo))
    files["README.md"] = lambda: ledger.fill_blocks((repo / "README.md").read_text(), ledger.read_ledger(repo)[0],
                                                    _locked(repo), _names(), _upstream(repo), _controls(repo))
    return files


def _controls(repo: Path) -> dict[str, str]:
    """``{pipeline: one line}``: the positive control of every locked profile pipeline, from its committed
    ``metrics/<name>/positive_control.json`` (:func:`~concrete_jungle.evaluation.positive_control.summary_line`), or
    that its results predate the control (no such file)."""
    from concrete_jungle.evaluation.positive_control import summary_line

    out = {}
    for name in sorted(_locked(repo) - {ledger.pipeline_name(CONTROLS)}):
        path = repo / "metrics" / name / "positive_control.json"
        if not path.is_file():
            out[name] = "not measured: the results predate the positive_control stage (pending re-run)"
            continue
        try:
            out[name] = summary_line(json.loads(path.read_text()))
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"{path.relative_to(repo)}: not a positive-control result ({type(err).__name__}: "
                             f"{err}); re-run the positive_control stage") from None
    return out


#: the index of every pipeline's results and their provenance (generated; outside the DAG)
INDEX = "reports/README.md"
#: outputs committed to git (``cache: false``): a difference from the lock there is a changed result, not staleness
COMMITTED_OUTS = ("metrics/", "reports/")


def _names() -> list[str]:
    """Every pipeline's name (:func:`ledger.pipeline_name`), in :func:`_pipelines` order."""
    return [ledger.pipeline_name(d) for d in _pipelines()]


def _locked(repo: Path) -> set[str]:
    """Names of the pipelines with a committed lock."""
    return {ledger.pipeline_name(d) for d in _pipelines() if (repo / d).with_suffix(".lock").is_file()}


def write(repo: Path = REPO) -> list[str]:
    """Write every derived profile's ``params.yaml``, every pipeline's ``dvc.yaml`` and the provenance of results
    (:data:`INDEX`, the README's provenance blocks) of the checkout ``repo``; returns the paths written."""
    for path, text in _generated(repo).items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text())
    return list(_generated(repo))


# ------------------------------------------------------------------------------------------------ check
_LOCKS: dict[str, tuple[tuple[int, int, int, int], dict]] = {}


def _read_lock(path) -> dict:
    """A ``dvc.lock`` parsed (libyaml when present), once per path and version (inode, mtime, ctime, size): the check reads every
    lock once per pipeline (:func:`_lock_coherence`), 2 MB of YAML in all."""
    st = Path(path).stat()
    key, stamp = str(Path(path).resolve()), (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
    if key not in _LOCKS or _LOCKS[key][0] != stamp:  # the latest version of each lock only
        _LOCKS[key] = (stamp, _fast_yaml(Path(path).read_text()) or {})
    return _LOCKS[key][1]


def _fast_yaml(text: str):
    """``yaml.safe_load`` through libyaml when PyYAML has it (the check parses every pipeline's dvc.yaml and
    lock, ~2 MB; the pure-Python parser took most of a check's 13 s)."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader


def _recorded_outs(lock_paths) -> dict[str, tuple[str, str | None]]:
    """``{output path: (stage, md5)}`` over the locks ``lock_paths`` (absent ones skipped)."""
    outs = {}
    for path in lock_paths:
        if Path(path).is_file():
            for name, st in (_read_lock(path).get("stages") or {}).items():
                for o in st.get("outs", []):
                    outs[o["path"]] = (name, o.get("md5"))
    return outs


def _lock_coherence(lock_path: Path, others=()) -> list[str]:
    """Problems of one lock: a stage whose recorded dep on another stage's output (of this lock or of the locks
    ``others``: the controls gather other pipelines) has another hash than that output's recorded hash (a
    downstream result made from an older upstream)."""
    lock = _read_lock(lock_path)
    outs = _recorded_outs([*others, lock_path])
    problems = []
    for name, st in (lock.get("stages") or {}).items():
        for dep in st.get("deps", []):
            if dep["path"] in outs and outs[dep["path"]][1] != dep.get("md5"):
                problems.append(f"{lock_path}: {name} was made from {dep['path']} {dep.get('md5')}, but "
                                f"{outs[dep['path']][0]} records {outs[dep['path']][1]}")
    return problems


def _made_here(path: str, produced: set[str]) -> bool:
    """True when ``path`` is an output of the pipeline or a folder holding only such outputs (for example the
    report's ``data/world/verdicts``, filled by every evaluation): absent from a fresh clone, checked by
    :func:`_lock_coherence` instead."""
    prefix = path.rstrip("/") + "/"
    return path in produced or any(p.startswith(prefix) for p in produced)


def _status_problems(dvc_yaml: str, lock: dict, repo: Path, everywhere: dict | None = None) -> list[str]:
    """``dvc status`` of one pipeline, keeping what is a real difference: changed code / data / params / command /
    committed metrics, a stage missing from the lock; not outputs absent from a fresh clone (outputs of this lock
    or of the lock-shaped ``everywhere``: every pipeline's)."""
    proc = subprocess.run([sys.executable, "-m", "dvc", "status", "--json", dvc_yaml], cwd=repo,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return [f"dvc status {dvc_yaml} failed: {proc.stderr.strip()[-2000:]}"]
    status = json.loads(proc.stdout or "{}")
    produced = {o["path"] for lk in (lock, everywhere or {}) for st in (lk.get("stages") or {}).values()
                for o in st.get("outs", [])}
    problems = []
    try:
        names = _stage_names(dvc_yaml, repo)
    except subprocess.CalledProcessError as err:
        problems.append(f"dvc stage list {dvc_yaml} failed: {err.stderr.strip()[-2000:]}")
    else:
        problems += [f"{dvc_yaml}: the lock records stage {name!r}, which the pipeline no longer has (python -m "
                     f"concrete_jungle.lineage prune)" for name in lock.get("stages") or {} if name not in names]
    for stage, changes in status.items():
        for change in changes:
            if isinstance(change, str):  # "changed command", "always changed"
                problems.append(f"{dvc_yaml}:{stage}: {change}")
                continue
            for kind, items in change.items():
                if kind == "changed outs":
                    bad = {k: v for k, v in items.items() if v not in ("deleted", "not in cache")}
                    committed = {k: v for k, v in bad.items() if k.startswith(COMMITTED_OUTS)}
                    if committed:  # results in git that differ from their lock: never excused by the ledger
                        problems.append(f"{dvc_yaml}:{stage}: {ledger.CHANGED_RESULTS} {committed}")
                    bad = {k: v for k, v in bad.items() if k not in committed}
                elif kind == "changed deps":
                    bad = {k: v for k, v in items.items() if not (v == "deleted" and _made_here(k, produced))}
                else:
                    bad = items
                if bad:
                    problems.append(f"{dvc_yaml}:{stage}: {kind} {bad}")
    return problems


def stale_pipelines(repo: Path = REPO, only: set[str] | None = None) -> dict[str, list[str]]:
    """``{pipeline name: its problems}`` for every pipeline with a committed lock whose lock does not hold (changed
    code / data / params / command / committed metrics, a stage missing from the lock or gone from the pipeline,
    a stage made from another upstream output than the one recorded); fresh pipelines are left out. ``only``:
    the names to look at (default every pipeline; ``dvc status`` costs seconds a pipeline)."""
    locks = [(repo / dvc_yaml).with_suffix(".lock") for dvc_yaml in _pipelines()]
    produced = {"stages": {"all": {"outs": [{"path": p} for p in _recorded_outs(locks)]}}}
    stale = {}
    for dvc_yaml, lock_path in zip(_pipelines(), locks):
        name = ledger.pipeline_name(dvc_yaml)
        if not lock_path.is_file() or (only is not None and name not in only):
            continue  # a pipeline never run here (paper: GPU) has no lock to check
        problems = [p.replace(f"{repo}/", "") for p in _lock_coherence(lock_path, [x for x in locks if x != lock_path])]
        problems += _status_problems(dvc_yaml, _read_lock(lock_path), repo, produced)
        if problems:
            stale[name] = problems
    return stale


def check(repo: Path = REPO, only: set[str] | None = None) -> list[str]:
    """Every problem with the committed pipelines of the checkout ``repo`` (empty when all hold); see the module
    docstring: (a) a generated file that differs from the spec or cannot be rendered, (b) a stale pipeline not in
    the ledger, (c) a ledger entry for a fresh, never-run or unknown pipeline or with a wrong results_at, (d) the
    world pipeline stale or without a lock; a malformed ledger, a pending pipeline whose committed results differ
    from its lock, a pipeline with committed results but no lock. ``only``: the pipelines whose locks are looked at
    (tests; the ledger's other entries are then not checked)."""
    entries, problems = ledger.read_ledger(repo)
    for path, text in _generated(repo).items():
        try:
            same = (repo / path).is_file() and (repo / path).read_text() == text()
        except (OSError, ValueError) as err:  # a derived params file absent or invalid, a bad provenance block
            problems.append(f"{path}: cannot render it ({type(err).__name__}: {err}); mend what it names, then "
                            "python -m concrete_jungle.lineage write")
            continue
        if not same:
            problems.append(f"{path} differs from the spec: run python -m concrete_jungle.lineage write")
    locked = _locked(repo)
    problems += [p for dvc_yaml in PROFILE_FILES.values() for p in parking_problems(dvc_yaml, repo)]
    for name in _names():  # a deleted lock must not hide a stale pipeline
        if name not in locked and (name == ledger.WORLD or any((repo / d / name).is_dir() for d in COMMITTED_OUTS)):
            problems.append(f"{name} pipeline has no lock {_lock_of(name)}, " + (
                "and the world always has one" if name == ledger.WORLD else
                f"yet committed results (metrics/{name}/ or reports/{name}/): restore the lock or remove them"))
    if only is not None:
        entries = {k: v for k, v in entries.items() if k in only}
    return problems + ledger.ledger_problems(repo, stale_pipelines(repo, only), locked, _names(), entries)


def _lock_of(name: str) -> str:
    return str(Path(_dvc_yaml_of(name)).with_suffix(".lock"))


def _stage_of(problem: str) -> str | None:
    """The stage a :func:`stale_pipelines` problem names (``<dvc.yaml>:<stage>: ...``, where DVC may repeat the
    ``dvc.yaml`` path before the stage, or ``<lock>: <stage> was made from ...``), else None."""
    head = problem.split(": ", 1)[0]
    if " was made from " in problem:
        return problem.split(": ", 1)[1].split(" ", 1)[0]
    if ":" in head:
        return head.rsplit(":", 1)[-1]
    return None


def _minutes(m: float) -> str:
    return "<1 min" if m < 1 else f"~{m:.0f} min"


def _upstream(repo: Path) -> dict[str, set[str]]:
    """``{pipeline: names of the other pipelines whose outputs its dvc.yaml reads}`` (by the profile folder of each
    dep: ``metrics/<profile>/...``, ``data/<profile>/...``)."""
    names = set(_names())
    up = {}
    for dvc_yaml in _pipelines():
        name = ledger.pipeline_name(dvc_yaml)
        stages = (_fast_yaml((repo / pipeline_file(dvc_yaml, repo)).read_text()) or {}).get("stages") or {}
        found = set()
        for st in stages.values():
            for dep in st.get("do", st).get("deps", []):
                parts = Path(str(dep)).parts
                if len(parts) > 1 and parts[0] in ("metrics", "data", "models") and parts[1] in names:
                    found.add(parts[1])
        up[name] = found - {name}
    return up


def status(repo: Path = REPO, plan_minutes: float | None = None) -> str:
    """The text of ``lineage status``: per pipeline fresh / pending (results at, why, stale stages) / stale and
    undeclared / never run, with its estimated re-run time (:func:`ledger.estimate`); with ``plan_minutes``,
    which pending pipelines fit that budget, in dependency order (:func:`ledger.plan`)."""
    entries, malformed = ledger.read_ledger(repo)
    stale, locked = stale_pipelines(repo), _locked(repo)
    sources = {ledger.pipeline_name(PROFILE_FILES[f"pipelines/{n}/params.yaml"]): ledger.pipeline_name(
        PROFILE_FILES[src]) for n, (src, _) in DERIVED.items()}
    lines, minutes = [], {}
    for name in _names():
        est = ledger.estimate(repo, name, sources.get(name))
        minutes[name] = None if est is None else est["minutes"]
        eta = "no measured run" if est is None else (
            f"{_minutes(est['minutes'])} ({est['how']}: {est['from']}; CPU {est['cpu'] or 'not recorded'})")
        if name not in locked:
            parked = pipeline_file(_dvc_yaml_of(name), repo).endswith(PARKED)
            lines.append(f"{name:14} never run" + (f" (parked: python -m concrete_jungle.lineage enable {name}, "
                                                   f"then dvc repro {_dvc_yaml_of(name)})" if parked else ""))
            continue
        if name not in stale:
            lines.append(f"{name:14} fresh" + (f"   [stale? no; but listed in {ledger.LEDGER}]" if name in entries else ""))
            continue
        stages = sorted({s for s in map(_stage_of, stale[name]) if s})
        state = (f"pending: results at {entries[name].short}, why: {entries[name].why}" if name in entries else
                 ("STALE (the world is never pending: re-run it)" if name == ledger.WORLD
                  else f"STALE and not in {ledger.LEDGER}"))
        lines.append(f"{name:14} {state}\n{'':14} stale stages ({len(stages)}): {', '.join(stages[:6]) or '-'}"
                     f"{f', ... (+{len(stages) - 6})' if len(stages) > 6 else ''}\n"
                     f"{'':14} re-run: dvc repro {Path(_dvc_yaml_of(name))}   {eta}")
    if plan_minutes is not None:
        pending = [n for n in _names() if n in stale and n != ledger.WORLD]
        must = [ledger.WORLD] if ledger.WORLD in stale else []
        budget = plan_minutes - sum(minutes.get(n) or 0.0 for n in must)
        upstream = _upstream(repo)
        taken, left = ledger.plan(pending, budget, upstream, minutes)
        # a fresh pipeline that gathers one re-run here goes stale with it: it is re-run too (or declared pending)
        follow = [n for n in _names() if n not in stale and n in locked
                  and upstream.get(n, set()) & {*must, *taken}]
        lines.append(f"\nplan for {plan_minutes:g} min (dependency order; estimates are whole-pipeline times):")
        if budget < 0:
            lines.append(f"  the stale world alone needs {_minutes(plan_minutes - budget)}: over the budget")
        for i, name in enumerate([*must, *taken, *follow], 1):
            m = minutes.get(name)
            why = (f"   [it gathers {', '.join(sorted(upstream[name] & {*must, *taken}))}: stale once they are "
                   "re-run; re-run it too or declare it pending]") if name in follow else ""
            lines.append(f"  {i}. dvc repro {_dvc_yaml_of(name)}   ({_minutes(m) if m is not None else 'no estimate'})"
                         + why)
        if not must and not taken:
            lines.append("  nothing fits")
        if left:
            lines.append(f"  left for later: {', '.join(left)}")
        lines.append(f"  then remove each re-run pipeline from {ledger.LEDGER}, python -m concrete_jungle.lineage "
                     "write, and commit the locks with their results")
    lines += [f"LEDGER PROBLEM: {m}" for m in malformed]
    return "\n".join(lines)


def _dvc_yaml_of(name: str) -> str:
    """The ``dvc.yaml`` path of pipeline ``name``. Raises: KeyError naming the pipelines there are."""
    for dvc_yaml in _pipelines():
        if ledger.pipeline_name(dvc_yaml) == name:
            return dvc_yaml
    raise KeyError(f"no pipeline named {name!r}: choose from {', '.join(_names())}")


def _pipelines() -> list[str]:
    """Every pipeline's ``dvc.yaml``: the profiles', then the controls'."""
    return [*PROFILE_FILES.values(), CONTROLS]


def _stage_names(dvc_yaml: str, repo: Path) -> set[str]:
    listed = subprocess.run([sys.executable, "-m", "dvc", "stage", "list", "--name-only", dvc_yaml], cwd=repo,
                            capture_output=True, text=True, check=True)
    return {line.split(":")[-1].strip() for line in listed.stdout.splitlines() if line.strip()}


def prune(dvc_yaml: str, repo: Path = REPO) -> list[str]:
    """Drop from the lock of ``dvc_yaml`` the entries of stages the pipeline no longer has (DVC keeps them after a
    stage is renamed or removed); returns the names dropped. The other entries are kept byte for byte.

    Raises:
        subprocess.CalledProcessError: ``dvc stage list`` fails (an invalid ``dvc.yaml``).
    """
    lock_path = (repo / dvc_yaml).with_suffix(".lock")
    if not lock_path.is_file():
        return []
    names = _stage_names(dvc_yaml, repo)
    lock = yaml.safe_load(lock_path.read_text()) or {}
    gone = [name for name in lock.get("stages") or {} if name not in names]
    if gone:
        lock["stages"] = {k: v for k, v in lock["stages"].items() if k not in gone}
        lock_path.write_text(yaml.dump(lock, Dumper=_NoAliases, sort_keys=False, width=4096))
    return gone


def main(argv: list[str] | None = None) -> int:
    """``python -m concrete_jungle.lineage write|check|prune|status``; ``check`` exits 1 naming every problem;
    ``prune`` drops lock entries of stages a pipeline no longer has (``--pipeline``, default every pipeline);
    ``status [--plan MINUTES]`` prints each pipeline's state and, with ``--plan``, the pending re-runs that fit;
    ``enable NAME`` / ``park NAME`` un-park / park a pipeline that never ran (:mod:`concrete_jungle.parking`)."""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=["write", "check", "prune", "status", "enable", "park"])
    ap.add_argument("name", nargs="?", help="enable / park: the pipeline (e.g. paper)")
    ap.add_argument("--pipeline", action="append", help="prune: a dvc.yaml (repeatable; default every pipeline)")
    ap.add_argument("--plan", type=float, metavar="MINUTES",
                    help="status: which pending re-runs fit this many minutes, in dependency order")
    ap.add_argument("--repo", type=Path, default=REPO, help="the checkout (default: this package's)")
    args = ap.parse_args(argv)
    if args.plan is not None and (args.command != "status" or args.plan <= 0):
        ap.error("--plan takes a positive number of minutes, with status")
    if (args.name is None) == (args.command in ("enable", "park")):
        ap.error("enable and park take a pipeline name; the other commands take none")
    if args.command in ("enable", "park"):
        try:
            print((enable if args.command == "enable" else park)(args.name, args.repo.resolve()))
        except (KeyError, ValueError) as err:
            ap.error(err.args[0])
        return 0
    if args.command == "write":
        print("\n".join(write(args.repo.resolve())))
        return 0
    if args.command == "prune":
        for dvc_yaml in args.pipeline or _pipelines():
            print(f"{dvc_yaml}: pruned {prune(dvc_yaml, args.repo.resolve()) or 'nothing'}")
        return 0
    if args.command == "status":
        print(status(args.repo.resolve(), args.plan))
        return 0
    problems = check(args.repo.resolve())
    for line in problems:
        print(line, file=sys.stderr)
    print(f"lineage check: {len(problems)} problem(s) in {len(_pipelines())} pipelines")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
