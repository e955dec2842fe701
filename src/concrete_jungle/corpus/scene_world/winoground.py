"""A Winoground-style benchmark drawn from the scene world (Thrush et al. 2022; the paper's Sec. 3, Tab. 2).

Winoground pairs two images (I0, I1) with two captions (C0, C1) that use **exactly the same words in another
order**; C0 describes I0 and not I1, C1 describes I1 and not I0. :func:`generate_winoground` builds such items
from scene graphs: a fresh scene A (never one of the corpus's, by
:func:`~concrete_jungle.corpus.scene_world.graph.scene_signature`), a caption C0 true of A, a caption C1 made by
exchanging words of C0, and the scene B obtained by applying the same exchange to A's scene graph. Both images are
rendered and every item is checked against the scene graphs: C0 holds of A and C1 of B under the strict reading
the captions are generated with, while C0 is false of B and C1 false of A even under the loose relation reading
(:func:`~concrete_jungle.corpus.scene_world.captions.caption_holds`), so each caption is true of exactly one
of its two images. A draw that fails a check is redrawn.

Tags follow Winoground's linguistic tags, with its collapsed tag (``Object``: noun phrases / nouns exchanged;
``Relation``: non-noun words exchanged; ``Both``: nouns and non-nouns exchanged together). :data:`WORLD_TAGS`:

* ``Noun`` (Object): the two objects' shape words; the attributes stay in place ("a red circle to the left of a
  blue square" / "a red square to the left of a blue circle"). B = A with the two shapes exchanged.
* ``Noun Phrase`` (Object): the two whole noun phrases across the relation, i.e. the objects' roles ("a red
  circle to the left of a blue square" / "a blue square to the left of a red circle"). B = A with the two
  objects' cells exchanged. The relation is never "next to" (symmetric, so both captions would hold of both).
* ``Adjective-Color`` / ``Adjective-Size`` / ``Adjective-Material`` (Relation): the two objects' colour, size
  (small / large) or material words (both non-plain). B = A with those two values exchanged.
* ``Preposition`` (Relation): the two relation phrases of a three-object caption ("a X to the left of a Y and
  above a Z" / "a X above a Y and to the left of a Z"). B = A with the cells of Y and Z exchanged.
* ``Noun, Adjective-<Kind>`` (Both; Kind = Color / Size / Material): the shape words *and* one attribute kind,
  while another attribute, written in both noun phrases, stays in place. B = A with both values exchanged.

The tags are apportioned over the items by :data:`TAG_WEIGHTS` (largest remainders, then interleaved), whose
collapsed totals follow Winoground's 233 Relation / 141 Object / 26 Both of 400 items, so ``n_items=400``
gives exactly those counts when the world can make every tag (``Preposition`` needs three-object scenes on a
grid of at least 2 x 2 cells; when it cannot be made its weight is dropped and the rest renormalised).

Scenes come from their own seed stream (:data:`WINOGROUND_STREAM`), disjoint from the corpus
(:data:`~concrete_jungle.corpus.scene_world.graph.CORPUS_STREAM`) and SugarCrepe-format benchmark
(:data:`~concrete_jungle.corpus.scene_world.graph.BENCHMARK_STREAM`) streams, and everything is deterministic in
the seed.
"""

from __future__ import annotations

import copy
import os
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from concrete_jungle.corpus.scene_world.captions import (
    CaptionSpec,
    Mention,
    caption_holds,
    realize_caption,
    relation_word,
)
from concrete_jungle.corpus.scene_world.graph import (
    ATTRIBUTE_KINDS,
    hub_object,
    pick,
    relation_between,
    sample_scene,
    scene_rng,
    scene_signature,
)
from concrete_jungle.corpus.scene_world.render import render_scene
from concrete_jungle.io import save_png
from concrete_jungle.params import WorldConfig

__all__ = ["WINOGROUND_STREAM", "WORLD_TAGS", "TAG_WEIGHTS", "world_tags_for", "generate_winoground"]

#: Seed-stream tag of Winoground scenes (``scene_rng``): distinct from the corpus (0xC0) and benchmark (0xBE) ones.
WINOGROUND_STREAM = 0x57

_KIND_TAG = {"colour": "Color", "size": "Size", "material": "Material"}

#: Fine tag -> Winoground collapsed tag (see the module docstring for what each exchanges).
WORLD_TAGS: dict[str, str] = {
    "Noun": "Object",
    "Noun Phrase": "Object",
    "Adjective-Color": "Relation",
    "Adjective-Size": "Relation",
    "Adjective-Material": "Relation",
    "Preposition": "Relation",
    **{f"Noun, Adjective-{k}": "Both" for k in _KIND_TAG.values()},
}

#: Share of the items per generator tag; ``Both`` is one share split over its three kinds by the draw.
#: Collapsed totals: Relation 233, Object 141, Both 26 (Winoground's counts of 400 items).
TAG_WEIGHTS: dict[str, float] = {
    "Adjective-Color": 70.0, "Adjective-Size": 50.0, "Adjective-Material": 50.0, "Preposition": 63.0,
    "Noun": 90.0, "Noun Phrase": 51.0, "Both": 26.0,
}


def world_tags_for(cfg: WorldConfig) -> dict[str, float]:
    """The generator tags (keys of :data:`TAG_WEIGHTS`) this world can make, with their weights.

    ``Preposition`` needs three related objects (``cfg.max_objects == 3`` and at least 2 x 2 cells). Never raises.
    """
    out = dict(TAG_WEIGHTS)
    if cfg.max_objects < 3 or cfg.grid_rows < 2 or cfg.grid_cols < 2:
        out.pop("Preposition")
    return out


def _schedule(weights: dict[str, float], n: int) -> list[str]:
    """``n`` tags apportioned by ``weights`` (largest remainders, ties by weight order) and interleaved so every
    prefix of the list keeps about the same proportions (tag j's k-th item sits at (k + 0.5) / count_j)."""
    names = list(weights)
    w = np.array([weights[k] for k in names], dtype=float)
    quota = w / w.sum() * n
    counts = np.floor(quota).astype(int)
    rest = n - int(counts.sum())
    order = sorted(range(len(names)), key=lambda j: (-(quota[j] - counts[j]), j))
    for j in order[:rest]:
        counts[j] += 1
    slots = [((k + 0.5) / c, j) for j, c in enumerate(counts) for k in range(c)]
    return [names[j] for _, j in sorted(slots)]


def _attrs(rng: np.random.Generator, must: Iterable[str] = ()) -> tuple[str, ...]:
    """A random subset of the attribute kinds (each with probability 1/2, one draw per kind), always holding
    ``must``, in caption order."""
    must = set(must)
    return tuple(k for k in ATTRIBUTE_KINDS if rng.random() < 0.5 or k in must)


def _mentionable(o, kind: str) -> bool:
    """Whether the object's ``kind`` word is written in a caption ("plain" never is)."""
    return kind != "material" or o.material != "plain"


def _swap_values(a: Mention, b: Mention, oa, ob, kinds: Iterable[str]) -> tuple[Mention, Mention]:
    """Mentions a, b with the words of ``kinds`` exchanged between objects oa and ob (as value overrides)."""
    va, vb = dict(a.values), dict(b.values)
    for kind in kinds:
        va[kind], vb[kind] = getattr(ob, kind), getattr(oa, kind)
    return Mention(a.obj, a.attrs, tuple(va.items())), Mention(b.obj, b.attrs, tuple(vb.items()))


def _draw_item(rng: np.random.Generator, cfg: WorldConfig, tag: str) -> tuple | str:
    """One candidate item ``(fine_tag, scene_a, scene_b, spec0, spec1)`` for a generator tag, or the reason it
    failed (``"no_swap"``: the drawn scene has nothing to exchange for this tag)."""
    there = bool(rng.random() < cfg.there_is_prob)
    if tag == "Preposition":
        a = sample_scene(rng, cfg, 3)
        hub, others = hub_object(a)
        p, q = others if rng.random() < 0.5 else others[::-1]
        rp, rq = relation_word(a, hub, p, rng, cfg), relation_word(a, hub, q, rng, cfg)
        if rp == rq:
            return "no_swap"
        ms = (Mention(hub, _attrs(rng)), Mention(p, _attrs(rng)), Mention(q, _attrs(rng)))
        spec0 = CaptionSpec(ms, ((rp, 0, 1), (rq, 0, 2)), there_is=there)
        spec1 = CaptionSpec(ms, ((rq, 0, 1), (rp, 0, 2)), there_is=there)
        b = copy.deepcopy(a)
        op, oq = b.objects[p], b.objects[q]
        (op.row, op.col), (oq.row, oq.col) = oq.cell, op.cell
        return tag, a, b, spec0, spec1
    lo = max(2, cfg.min_objects)
    a = sample_scene(rng, cfg, int(rng.integers(lo, cfg.max_objects + 1)))
    hub, others = hub_object(a)
    partner = pick(rng, others)
    s, t = (hub, partner) if rng.random() < 0.5 else (partner, hub)
    os_, ot = a.objects[s], a.objects[t]
    b = copy.deepcopy(a)
    if tag == "Noun Phrase":
        rel = relation_between(os_, ot)  # never "next to": it is symmetric, so the swap would stay true
        ms, mt = Mention(s, _attrs(rng, ("colour",))), Mention(t, _attrs(rng, ("colour",)))
        spec0 = CaptionSpec((ms, mt), ((rel, 0, 1),), there_is=there)
        spec1 = CaptionSpec((mt, ms), ((rel, 0, 1),), there_is=there)
        bs, bt = b.objects[s], b.objects[t]
        (bs.row, bs.col), (bt.row, bt.col) = bt.cell, bs.cell
        return tag, a, b, spec0, spec1
    rel = relation_word(a, s, t, rng, cfg)
    if tag == "Noun":
        kinds, must = ["shape"], ()
        fine = tag
    elif tag.startswith("Adjective-"):
        kind = {v: k for k, v in _KIND_TAG.items()}[tag.split("-", 1)[1]]
        kinds, must = [kind], (kind,)
        fine = tag
    elif tag == "Both":
        opts = [k for k in ATTRIBUTE_KINDS if getattr(os_, k) != getattr(ot, k)
                and _mentionable(os_, k) and _mentionable(ot, k)]
        if not opts:
            return "no_swap"
        kind = pick(rng, opts)
        kept = pick(rng, [k for k in ATTRIBUTE_KINDS if k != kind])  # an attribute that stays in place
        kinds, must = ["shape", kind], (kind, kept)
        fine = f"Noun, Adjective-{_KIND_TAG[kind]}"
    else:
        raise ValueError(f"unknown Winoground world tag {tag!r}; expected one of {list(TAG_WEIGHTS)}")
    if any(getattr(os_, k) == getattr(ot, k) or not (_mentionable(os_, k) and _mentionable(ot, k)) for k in kinds):
        return "no_swap"
    if tag == "Both" and not (_mentionable(os_, must[1]) and _mentionable(ot, must[1])):
        return "no_swap"  # the kept attribute must be written in both noun phrases
    ms, mt = Mention(s, _attrs(rng, must)), Mention(t, _attrs(rng, must))
    spec0 = CaptionSpec((ms, mt), ((rel, 0, 1),), there_is=there)
    spec1 = CaptionSpec(_swap_values(ms, mt, os_, ot, kinds), ((rel, 0, 1),), there_is=there)
    for kind in kinds:
        bs, bt = b.objects[s], b.objects[t]
        va, vb = getattr(bs, kind), getattr(bt, kind)
        setattr(bs, kind, vb)
        setattr(bt, kind, va)
    return fine, a, b, spec0, spec1


def generate_winoground(cfg: WorldConfig, n_items: int, out_dir: str | os.PathLike, seed: int,
                        exclude_signatures: Iterable[str] = frozenset(), max_tries_per_item: int = 200
                        ) -> list[dict]:
    """Generate ``n_items`` Winoground items on fresh scenes and write their two images each.

    Args:
        cfg: the scene world (two related objects are needed: ``cfg.max_objects >= 2``).
        n_items: number of items (each two scenes and two captions), >= 1.
        out_dir: the images go to ``out_dir/images/w<id:05d>_0.png`` and ``..._1.png`` (``cfg.image_size``
            pixels square).
        seed: the seed (>= 0); items come from the stream :data:`WINOGROUND_STREAM`, so the same seed and
            config give the same items and byte-identical PNGs.
        exclude_signatures: scene signatures never used for either image (the corpus's); the scenes of one run
            are also all distinct.
        max_tries_per_item: draws allowed in a row before giving up on an item.

    Returns:
        The items in order, each ``{"id": "<k>", "image_0": <path>, "image_1": <path>, "caption_0",
        "caption_1", "tag", "collapsed_tag", "secondary_tag": "", "num_main_preds": 1 | 2, "scene_0",
        "scene_1"}`` (paths are ``str(Path(out_dir) / "images" / name)``; scenes as
        :meth:`~concrete_jungle.corpus.scene_world.graph.Scene.to_dict`; ``num_main_preds`` counts the
        caption's relations). Tags: :data:`WORLD_TAGS`. caption_1 is a permutation of caption_0's words;
        caption_i holds (strictly) of scene_i and is false (even loosely) of the other scene.

    Raises:
        ValueError: ``n_items`` < 1, ``seed`` < 0 or ``cfg.max_objects`` < 2.
        RuntimeError: naming the tag when ``max_tries_per_item`` draws in a row give no valid item (too many
            excluded signatures, or a world too small).
    """
    if int(n_items) < 1:
        raise ValueError(f"n_items must be >= 1, got {n_items}")
    if int(seed) < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    if cfg.max_objects < 2:
        raise ValueError(f"Winoground items need two related objects but max_objects={cfg.max_objects}")
    img_dir = Path(out_dir) / "images"
    img_dir.mkdir(parents=True, exist_ok=True)
    excluded = set(exclude_signatures)
    skipped: Counter = Counter()
    items: list[dict] = []
    draw = 0
    for k, tag in enumerate(_schedule(world_tags_for(cfg), int(n_items))):
        for _ in range(max_tries_per_item):
            rng = scene_rng(seed, WINOGROUND_STREAM, draw)
            draw += 1
            got = _draw_item(rng, cfg, tag)
            if isinstance(got, str):
                skipped[got] += 1
                continue
            fine, a, b, spec0, spec1 = got
            sig_a, sig_b = scene_signature(a), scene_signature(b)
            if sig_a in excluded or sig_b in excluded or sig_a == sig_b:
                skipped["seen_signature"] += 1
                continue
            c0, c1 = realize_caption(spec0, a).text, realize_caption(spec1, a).text
            if c0 == c1 or sorted(c0.split()) != sorted(c1.split()):
                skipped["same_caption"] += 1
                continue
            if not (caption_holds(a, c0, cfg, strict=True) and caption_holds(b, c1, cfg, strict=True)):
                skipped["caption_false"] += 1
                continue
            if caption_holds(b, c0, cfg, strict=False) or caption_holds(a, c1, cfg, strict=False):
                skipped["caption_true_of_both"] += 1
                continue
            break
        else:
            raise RuntimeError(f"Winoground world tag {tag!r}: no valid item in {max_tries_per_item} draws (too "
                               "many excluded signatures or a world too small for this tag)")
        excluded.update((sig_a, sig_b))
        names = [f"w{k:05d}_{j}.png" for j in (0, 1)]
        for name, scene in zip(names, (a, b)):
            save_png(render_scene(scene, cfg), img_dir / name, compress_level=1)
        items.append({
            "id": str(k), "image_0": str(img_dir / names[0]), "image_1": str(img_dir / names[1]),
            "caption_0": c0, "caption_1": c1, "tag": fine, "collapsed_tag": WORLD_TAGS[fine],
            "secondary_tag": "", "num_main_preds": len(spec0.relations),
            "scene_0": a.to_dict(), "scene_1": b.to_dict(),
        })
    return items
