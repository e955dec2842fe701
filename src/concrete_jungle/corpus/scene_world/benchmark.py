"""A compositional benchmark in SugarCrepe's format, drawn from the scene world.

:func:`generate_benchmark` writes the seven SugarCrepe subsets (:data:`SUGARCREPE_SUBSETS`): for each item a
fresh scene (never one of the corpus's, by :func:`~concrete_jungle.corpus.scene_world.graph.scene_signature`),
a positive caption true of it and a negative made by one SugarCrepe perturbation of the positive's structure,
provably false of the scene (:func:`~concrete_jungle.corpus.scene_world.captions.spec_holds`).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from concrete_jungle.corpus.scene_world.captions import (
    CaptionSpec,
    Mention,
    realize_caption,
    relation_word,
    spec_holds,
)
from concrete_jungle.corpus.scene_world.graph import (
    ATTRIBUTE_KINDS,
    BENCHMARK_STREAM,
    OPPOSITE_RELATION,
    Scene,
    hub_object,
    pick,
    sample_scene,
    scene_rng,
    scene_signature,
    world_vocabulary,
)
from concrete_jungle.corpus.scene_world.render import render_scene
from concrete_jungle.io import save_png, write_json
from concrete_jungle.params import WorldConfig

__all__ = ["SUGARCREPE_SUBSETS", "generate_benchmark"]

SUGARCREPE_SUBSETS = ("add_att", "add_obj", "replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")


def _positive_spec(scene: Scene, rng: np.random.Generator, cfg: WorldConfig, subset: str) -> CaptionSpec | None:
    """A true caption structure for the subset's positive: two related objects when the subset needs a
    pair, otherwise one or two objects, fully described (add_att: some attributes left out)."""
    n = len(scene.objects)
    A = ATTRIBUTE_KINDS
    need_pair = subset in ("replace_rel", "swap_att", "swap_obj")
    if n == 1:
        if need_pair:
            return None
        attrs = A if subset != "add_att" else tuple(k for k in A if rng.random() < 0.5 or k == "colour")
        return CaptionSpec((Mention(0, attrs),), there_is=bool(rng.random() < cfg.there_is_prob))
    hub, others = hub_object(scene)
    partner = pick(rng, others)
    s, t = (hub, partner) if rng.random() < 0.5 else (partner, hub)
    if subset == "add_att":
        ms = tuple(Mention(k, tuple(a for a in A if a == "colour" or rng.random() < 0.5)) for k in (s, t))
    else:
        ms = (Mention(s, A), Mention(t, A))
    return CaptionSpec(ms, ((relation_word(scene, s, t, rng, cfg), 0, 1),),
                       there_is=bool(rng.random() < cfg.there_is_prob))


def _with_value(m: Mention, kind: str, word: str, add: bool = False) -> Mention:
    vals = dict(m.values)
    vals[kind] = word
    attrs = m.attrs
    if add and kind not in attrs:
        attrs = tuple(k for k in ATTRIBUTE_KINDS if k in attrs or k == kind)
    return Mention(m.obj, attrs, tuple(vals.items()))


def _negative_spec(scene: Scene, spec: CaptionSpec, rng: np.random.Generator, cfg: WorldConfig,
                   subset: str) -> CaptionSpec | None:
    """One SugarCrepe-style perturbation of a positive caption structure (None when none applies)."""
    vocab = world_vocabulary(cfg)
    objs = scene.objects
    ms = list(spec.mentions)
    idx = list(range(len(ms)))
    rng.shuffle(idx)
    if subset == "add_att":
        for mi in idx:
            o = objs[ms[mi].obj]
            opts = []
            if "size" not in ms[mi].attrs:
                opts += [("size", w) for w in vocab["size"] if w != o.size]
            if "material" not in ms[mi].attrs or o.material == "plain":
                opts += [("material", w) for w in vocab["material"] if w != o.material]
            if opts:
                kind, word = pick(rng, opts)
                ms[mi] = _with_value(ms[mi], kind, word, add=True)
                return CaptionSpec(tuple(ms), spec.relations, spec.extra, spec.there_is)
        return None
    if subset == "add_obj":
        present = {o.shape for o in objs}
        absent = [s for s in vocab["shape"] if s not in present]
        if not absent:
            return None
        new = Mention(None, ("colour",), (("colour", pick(rng, vocab["colour"])),
                                          ("shape", pick(rng, absent))))
        return CaptionSpec((*ms, new), spec.relations, len(ms), spec.there_is)
    if subset in ("replace_att", "replace_obj"):
        for mi in idx:
            o = objs[ms[mi].obj]
            kinds = ["shape"] if subset == "replace_obj" else [
                k for k in ms[mi].attrs if not (k == "material" and o.material == "plain")]
            if not kinds:
                continue
            kind = pick(rng, kinds)
            opts = [w for w in vocab[kind] if w != getattr(o, kind)]
            ms[mi] = _with_value(ms[mi], kind, pick(rng, opts))
            return CaptionSpec(tuple(ms), spec.relations, spec.extra, spec.there_is)
        return None
    if subset == "replace_rel":
        if not spec.relations:
            return None
        rels = list(spec.relations)
        k = int(rng.integers(len(rels)))
        rel, a, b = rels[k]
        opts = [r for r in vocab["relation"] if r != rel]
        if rel in OPPOSITE_RELATION and rng.random() < 0.5:
            opts = [OPPOSITE_RELATION[rel]]
        rels[k] = (pick(rng, opts), a, b)
        return CaptionSpec(tuple(ms), tuple(rels), spec.extra, spec.there_is)
    if subset in ("swap_att", "swap_obj"):
        if len(ms) < 2:
            return None
        a, b = 0, 1
        oa, ob = objs[ms[a].obj], objs[ms[b].obj]
        if subset == "swap_obj":
            kinds = ["shape"]
        else:
            kinds = [k for k in ATTRIBUTE_KINDS if k in ms[a].attrs and k in ms[b].attrs
                     and not (k == "material" and "plain" in (oa.material, ob.material))]
        kinds = [k for k in kinds if getattr(oa, k) != getattr(ob, k)]
        if not kinds:
            return None
        kind = pick(rng, kinds)
        ms[a] = _with_value(ms[a], kind, getattr(ob, kind))
        ms[b] = _with_value(ms[b], kind, getattr(oa, kind))
        return CaptionSpec(tuple(ms), spec.relations, spec.extra, spec.there_is)
    raise ValueError(f"unknown subset {subset!r}; expected one of {SUGARCREPE_SUBSETS}")


def generate_benchmark(cfg: WorldConfig, n_per_subset: int, out_dir: str | os.PathLike, seed: int,
                       exclude: Iterable[str] = frozenset(), max_tries_per_item: int = 50) -> dict:
    """Write a compositional benchmark in SugarCrepe's JSON format for its seven subsets.

    ``out_dir/<subset>.json`` = ``{"0": {"filename": "b000001.png", "caption": <true>, "negative_caption":
    <false>}, ...}``; images (``cfg.image_size`` x ``cfg.image_size`` pixels) in ``out_dir/images/`` (one
    fresh scene per item, numbered across subsets in :data:`SUGARCREPE_SUBSETS` order);
    ``out_dir/scenes.json`` = ``{"scenes": {filename: scene dict}, "skipped": {reason: n}}`` for checking.
    Scenes come from a seed stream disjoint from
    :func:`~concrete_jungle.corpus.scene_world.corpus.generate_corpus`'s, and a scene whose
    :func:`scene_signature` is in ``exclude`` (or already used) is redrawn. Every positive holds strictly for
    its scene and every negative is false even under the loose relation reading (:func:`spec_holds`).

    Subsets (SugarCrepe's definitions): add_att - an attribute the object lacks is inserted (a material on a
    plain object, a wrong size/material where the positive omits it); add_obj - "and a <colour> <shape>"
    with a shape absent from the scene; replace_att / replace_obj / replace_rel - one colour/size/material,
    shape or relation word replaced; swap_att - two objects' attribute words exchanged; swap_obj - two
    objects' shape words exchanged.

    Returns:
        ``{subset: n_items}`` for the seven subsets. Redrawn scenes are counted by reason ("seen_signature",
        "no_perturbation", "negative_true") in ``scenes.json`` under ``"skipped"``.

    Raises:
        ValueError: when ``n_per_subset`` < 1, ``seed`` is negative, or ``cfg.max_objects`` < 2 (replace_rel,
            swap_att and swap_obj need two related objects).
        RuntimeError: naming the subset when ``max_tries_per_item`` draws in a row give no valid item.
    """
    if n_per_subset < 1:
        raise ValueError(f"n_per_subset must be >= 1, got {n_per_subset}")
    out_dir = Path(out_dir)
    (out_dir / "images").mkdir(parents=True, exist_ok=True)
    excluded = set(exclude)
    skipped: Counter = Counter()
    counts: dict[str, int] = {}
    scenes_out: dict[str, dict] = {}
    draw = 0
    number = 0
    for si, subset in enumerate(SUGARCREPE_SUBSETS):
        items: dict[str, dict] = {}
        min_n = 2 if subset in ("replace_rel", "swap_att", "swap_obj") else cfg.min_objects
        min_n = max(min_n, cfg.min_objects)
        if min_n > cfg.max_objects:
            raise ValueError(f"{subset}: needs scenes of >= 2 objects but max_objects={cfg.max_objects}")
        while len(items) < n_per_subset:
            for _ in range(max_tries_per_item):
                rng = scene_rng(seed, BENCHMARK_STREAM, draw)
                draw += 1
                n_obj = int(rng.integers(min_n, cfg.max_objects + 1))
                scene = sample_scene(rng, cfg, n_obj)
                sig = scene_signature(scene)
                if sig in excluded:
                    skipped["seen_signature"] += 1
                    continue
                pos = _positive_spec(scene, rng, cfg, subset)
                neg = None if pos is None else _negative_spec(scene, pos, rng, cfg, subset)
                if neg is None:
                    skipped["no_perturbation"] += 1
                    continue
                if spec_holds(scene, neg, strict=False) or not spec_holds(scene, pos, strict=True):
                    skipped["negative_true"] += 1
                    continue
                break
            else:
                raise RuntimeError(f"{subset}: no valid item in {max_tries_per_item} draws (too many excluded "
                                   "signatures or a world too small for this subset)")
            excluded.add(sig)
            number += 1
            fname = f"b{number:06d}.png"
            save_png(render_scene(scene, cfg), out_dir / "images" / fname, compress_level=1)
            scenes_out[fname] = scene.to_dict()
            items[str(len(items))] = {
                "filename": fname,
                "caption": realize_caption(pos, scene).text,
                "negative_caption": realize_caption(neg, scene).text,
            }
        counts[subset] = len(items)
        write_json(out_dir / f"{subset}.json", items)
    write_json(out_dir / "scenes.json", {"scenes": scenes_out, "skipped": dict(sorted(skipped.items()))})
    return counts

