"""Scene graphs of the scene world: objects, cells, relations, random scenes and one-slot edits.

A :class:`Scene` holds 1-3 :class:`WorldObject` s in distinct cells of a ``cfg.grid_rows`` x ``cfg.grid_cols``
grid. Spatial relations are not stored; they follow from the cells (:func:`relation_between`,
:func:`relation_holds`). Attribute values are the world's words themselves ("red", "striped", ...);
:func:`world_vocabulary` lists them by kind, and :func:`edit_scene` sets one of them (or moves objects so a
relation holds), which is how a rewritten caption becomes a hard negative image.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from concrete_jungle.params import WORLD_ATTRIBUTE_KINDS, WorldConfig

__all__ = [
    "ATTRIBUTE_KINDS",
    "SLOT_KINDS",
    "RELATION_WORDS",
    "OPPOSITE_RELATION",
    "CORPUS_STREAM",
    "BENCHMARK_STREAM",
    "WorldObject",
    "Scene",
    "scene_signature",
    "corpus_signatures",
    "validate_scene",
    "relation_between",
    "relation_holds",
    "hub_object",
    "pick",
    "scene_rng",
    "sample_scene",
    "world_vocabulary",
    "edit_scene",
]

ATTRIBUTE_KINDS = WORLD_ATTRIBUTE_KINDS  # the attributes besides the shape, in caption word order
SLOT_KINDS = ("size", "colour", "material", "shape", "relation")  # scene elements a caption slot can name
RELATION_WORDS = ("left", "right", "above", "below", "next")
OPPOSITE_RELATION = {"left": "right", "right": "left", "above": "below", "below": "above"}

CORPUS_STREAM = 0xC0  # seed-stream tags (scene_rng): corpus and benchmark scenes come from disjoint streams
BENCHMARK_STREAM = 0xBE


# ------------------------------------------------------------------------------------------------
# scene graph
# ------------------------------------------------------------------------------------------------
@dataclass
class WorldObject:
    """One object of a scene: its four attributes and its place.

    ``row`` / ``col`` index the grid cell (0 = top / left). ``dx`` / ``dy`` in [-1, 1] shift the object
    inside its cell, as fractions of the cell's free room (so a size edit keeps it inside the cell);
    ``phase`` in [0, 1) shifts the texture pattern, as a fraction of its period.
    """

    shape: str
    colour: str
    size: str
    material: str
    row: int
    col: int
    dx: float = 0.0
    dy: float = 0.0
    phase: float = 0.0

    @property
    def cell(self) -> tuple[int, int]:
        """The (row, col) grid cell."""
        return (self.row, self.col)


_OBJECT_KEYS = ("shape", "colour", "size", "material", "row", "col")
_OBJECT_FIELDS = (*_OBJECT_KEYS, "dx", "dy", "phase")


@dataclass
class Scene:
    """A scene graph: 1-3 objects in distinct grid cells (JSON-serialisable).

    Spatial relations are not stored; they follow from the cells (:func:`relation_between`).
    """

    objects: list[WorldObject] = field(default_factory=list)

    def to_dict(self) -> dict:
        """Plain-JSON form: ``{"objects": [{"shape", "colour", "size", "material", "row", "col", "dx", "dy",
        "phase"}, ...]}``."""
        return {"objects": [{k: getattr(o, k) for k in _OBJECT_FIELDS} for o in self.objects]}

    @classmethod
    def from_dict(cls, d: dict) -> Scene:
        """Inverse of :meth:`to_dict`.

        Raises:
            ValueError: naming the object index and the missing key, or when ``d`` has no "objects" list.
        """
        if not isinstance(d, dict) or not isinstance(d.get("objects"), list):
            raise ValueError(f"scene dict must have an 'objects' list, got {type(d).__name__}: {d!r:.200}")
        objs = []
        for i, o in enumerate(d["objects"]):
            missing = [k for k in _OBJECT_KEYS if k not in o]
            if missing:
                raise ValueError(f"scene object {i}: missing keys {missing}")
            objs.append(
                WorldObject(
                    shape=str(o["shape"]), colour=str(o["colour"]), size=str(o["size"]),
                    material=str(o["material"]), row=int(o["row"]), col=int(o["col"]),
                    dx=float(o.get("dx", 0.0)), dy=float(o.get("dy", 0.0)), phase=float(o.get("phase", 0.0)),
                )
            )
        return cls(objects=objs)


def scene_signature(scene: Scene) -> str:
    """Canonical content string of a scene: cell and attributes of every object, order-free.

    Two scenes with the same signature look the same up to the in-cell jitter and texture phase, so the
    benchmark excludes corpus signatures to test on scenes never seen in training. Never raises.
    Example: ``"0,0:large/red/striped/circle|0,1:small/blue/plain/square"``.
    """
    parts = sorted(f"{o.row},{o.col}:{o.size}/{o.colour}/{o.material}/{o.shape}" for o in scene.objects)
    return "|".join(parts)


def corpus_signatures(records, used: bool = True) -> set[str]:
    """The :func:`scene_signature` of every scene-world manifest record (records without a ``scene`` are skipped):
    what held-out benchmark scenes must never repeat. ``used=False`` (a suite without world scenes) gives the empty
    set without reading anything; ``records`` may then be a callable that would produce them."""
    if not used:
        return set()
    records = records() if callable(records) else records
    return {scene_signature(Scene.from_dict(r["scene"])) for r in records if "scene" in r}


def validate_scene(scene: Scene, cfg: WorldConfig) -> None:
    """Check that every value of ``scene`` is a word of ``cfg``'s world and the cells are valid.

    Raises:
        ValueError: naming the object index and the bad field (unknown word, cell outside the grid,
            two objects in one cell, jitter outside [-1, 1], phase outside [0, 1), object count outside
            1..3).
    """
    if not 1 <= len(scene.objects) <= 3:
        raise ValueError(f"scene: has {len(scene.objects)} objects; the world holds 1-3")
    seen = {}
    for i, o in enumerate(scene.objects):
        for kind, vocab in (("shape", cfg.shapes), ("colour", cfg.colours), ("size", cfg.sizes),
                            ("material", cfg.materials)):
            if getattr(o, kind) not in vocab:
                raise ValueError(f"scene object {i}: {kind} {getattr(o, kind)!r} not in {list(vocab)}")
        if not (0 <= o.row < cfg.grid_rows and 0 <= o.col < cfg.grid_cols):
            raise ValueError(f"scene object {i}: cell ({o.row}, {o.col}) outside the "
                             f"{cfg.grid_rows}x{cfg.grid_cols} grid")
        if o.cell in seen:
            raise ValueError(f"scene objects {seen[o.cell]} and {i} share cell {o.cell}")
        seen[o.cell] = i
        if not (-1.0 <= o.dx <= 1.0 and -1.0 <= o.dy <= 1.0):
            raise ValueError(f"scene object {i}: dx/dy ({o.dx}, {o.dy}) outside [-1, 1]")
        if not 0.0 <= o.phase < 1.0:
            raise ValueError(f"scene object {i}: phase {o.phase} outside [0, 1)")


def relation_between(a: WorldObject, b: WorldObject) -> str | None:
    """The strict spatial relation of ``a`` to ``b``: "left"/"right" when they share a row, "above"/"below"
    when they share a column, None otherwise (diagonal cells: not captioned). "next to" is not returned;
    it holds (strictly) for "left"/"right" pairs in adjacent columns. Never raises."""
    if a.row == b.row and a.col != b.col:
        return "left" if a.col < b.col else "right"
    if a.col == b.col and a.row != b.row:
        return "above" if a.row < b.row else "below"
    return None


def relation_holds(rel: str, a: tuple[int, int], b: tuple[int, int], strict: bool) -> bool:
    """Whether relation ``rel`` (a word of :data:`RELATION_WORDS`) holds from cell ``a`` to cell ``b``
    ((row, col) grid indices).

    Strict semantics (what captions of a scene use): same row for left/right/next (next: adjacent
    columns), same column for above/below. Loose semantics (used to prove negatives false): only the
    ordering along one axis (left: a's column < b's), "next" = any neighbouring cell incl. diagonals.
    Strict-true implies loose-true, so a caption that is loose-false is false under either reading.

    Raises:
        ValueError: when ``rel`` is not a relation word.
    """
    (ra, ca), (rb, cb) = a, b
    if a == b:
        return False
    if rel == "left":
        return ca < cb and (ra == rb or not strict)
    if rel == "right":
        return ca > cb and (ra == rb or not strict)
    if rel == "above":
        return ra < rb and (ca == cb or not strict)
    if rel == "below":
        return ra > rb and (ca == cb or not strict)
    if rel == "next":
        if strict:
            return ra == rb and abs(ca - cb) == 1
        return max(abs(ra - rb), abs(ca - cb)) == 1
    raise ValueError(f"unknown relation {rel!r}; expected one of {RELATION_WORDS}")


def hub_object(scene: Scene) -> tuple[int, list[int]]:
    """The index of the first object related (same row or column) to every other one, and the other indices.

    Raises:
        ValueError: naming the scene's signature when no object is related to all others.
    """
    n = len(scene.objects)
    for h in range(n):
        others = [k for k in range(n) if k != h]
        if all(relation_between(scene.objects[h], scene.objects[k]) for k in others):
            return h, others
    raise ValueError(f"scene has no object related to all others: {scene_signature(scene)}")


# ------------------------------------------------------------------------------------------------
# sampling
# ------------------------------------------------------------------------------------------------
def pick(rng: np.random.Generator, seq: Sequence):
    """One element of ``seq``, drawn with a single ``rng.integers`` call (every seed stream of the world
    depends on this exact draw).

    Raises:
        ValueError: when ``seq`` is empty.
    """
    return seq[int(rng.integers(len(seq)))]


def scene_rng(seed: int, stream: int, index: int) -> np.random.Generator:
    """The generator of scene ``index`` of a seed stream (:data:`CORPUS_STREAM`, :data:`BENCHMARK_STREAM`):
    independent of every other (seed, stream, index), so results do not depend on the worker count.

    Raises:
        ValueError: when ``seed``, ``stream`` or ``index`` is negative.
    """
    return np.random.default_rng(np.random.SeedSequence(entropy=int(seed), spawn_key=(stream, int(index))))


def _sample_material(rng: np.random.Generator, cfg: WorldConfig) -> str:
    if rng.random() < cfg.plain_prob:
        return "plain"
    return pick(rng, [m for m in cfg.materials if m != "plain"])


def _sample_cells(rng: np.random.Generator, cfg: WorldConfig, n: int) -> list[tuple[int, int]]:
    """Cells for n objects: a hub cell, one partner in its row and (n = 3) one in its column, so every
    object is related to the hub by left/right or above/below."""
    R, C = cfg.grid_rows, cfg.grid_cols
    if n == 1:
        return [(int(rng.integers(R)), int(rng.integers(C)))]
    while True:
        hub = (int(rng.integers(R)), int(rng.integers(C)))
        row_mates = [(hub[0], c) for c in range(C) if c != hub[1]]
        col_mates = [(r, hub[1]) for r in range(R) if r != hub[0]]
        if n == 2:
            options = row_mates + col_mates
            return [hub, pick(rng, options)]
        if row_mates and col_mates:
            return [hub, pick(rng, row_mates), pick(rng, col_mates)]


def sample_scene(rng: np.random.Generator, cfg: WorldConfig, n_objects: int | None = None) -> Scene:
    """Draw a random scene: ``n_objects`` (default: from ``cfg.object_count_weights``) objects with random
    attributes, the first in a hub cell related to all others (object order is then shuffled). Jitter
    ``dx`` / ``dy`` (fractions of the free room in the cell) and texture ``phase`` are rounded to 4 decimals.

    Raises:
        ValueError: when ``n_objects`` is outside ``cfg.min_objects..cfg.max_objects``.
    """
    if n_objects is None:
        counts = list(range(cfg.min_objects, cfg.max_objects + 1))
        w = np.asarray(cfg.object_count_weights or [1.0] * len(counts), dtype=float)
        n_objects = int(counts[int(rng.choice(len(counts), p=w / w.sum()))])
    elif not cfg.min_objects <= n_objects <= cfg.max_objects:
        raise ValueError(f"n_objects={n_objects} outside {cfg.min_objects}..{cfg.max_objects}")
    cells = _sample_cells(rng, cfg, n_objects)
    order = rng.permutation(n_objects)
    objs = []
    colours = list(cfg.colours)
    sizes = list(cfg.sizes)
    for k in order:
        r, c = cells[int(k)]
        objs.append(
            WorldObject(
                shape=pick(rng, cfg.shapes), colour=pick(rng, colours), size=pick(rng, sizes),
                material=_sample_material(rng, cfg), row=r, col=c,
                dx=round(float(rng.uniform(-1, 1)), 4), dy=round(float(rng.uniform(-1, 1)), 4),
                phase=round(float(rng.uniform(0, 1)), 4) % 1.0,
            )
        )
    return Scene(objects=objs)


# ------------------------------------------------------------------------------------------------
# editing (hard negative images)
# ------------------------------------------------------------------------------------------------
def world_vocabulary(cfg: WorldConfig) -> dict[str, list[str]]:
    """Caption words of the world by slot kind: ``{"size", "colour", "material", "shape", "relation"}``.

    Materials exclude "plain" (never mentioned); relations are the slot words (left, right, above, below,
    and next when ``cfg.use_next_to``). A rewrite of a slot to a word of its kind's list can be rendered by
    :func:`edit_scene`. Never raises.
    """
    return {
        "size": list(cfg.sizes),
        "colour": list(cfg.colours),
        "material": [m for m in cfg.materials if m != "plain"],
        "shape": list(cfg.shapes),
        "relation": [r for r in RELATION_WORDS if r != "next" or cfg.use_next_to],
    }


# words that may surround a relation word in a rewrite ("to the left of", "the right of", "next to")
_RELATION_FILLERS = {"to", "the", "of", "on"}


def _move_for_relation(scene: Scene, i: int, j: int, rel: str, cfg: WorldConfig) -> Scene | None:
    """Reassign cells so that ``rel`` strictly holds from object i to object j, moving as few objects as
    possible (ties: fewest other objects moved, least total displacement, then cell order). An object
    displaced from its cell takes a cell freed by i or j. Jitter and phase travel with each object."""
    objs = scene.objects
    if relation_holds(rel, objs[i].cell, objs[j].cell, strict=True):
        return copy.deepcopy(scene)
    cells = [(r, c) for r in range(cfg.grid_rows) for c in range(cfg.grid_cols)]
    best, best_cost = None, None
    for ci, cj in itertools.permutations(cells, 2):
        if not relation_holds(rel, ci, cj, strict=True):
            continue
        new = {i: ci, j: cj}
        freed = [c for c in (objs[i].cell, objs[j].cell) if c not in (ci, cj)]
        ok = True
        for k, o in enumerate(objs):
            if k in (i, j):
                continue
            if o.cell in (ci, cj):
                if not freed:
                    ok = False
                    break
                new[k] = freed.pop(0)
            else:
                new[k] = o.cell
        if not ok:
            continue
        moved = [k for k in new if new[k] != objs[k].cell]
        disp = sum(abs(new[k][0] - objs[k].row) + abs(new[k][1] - objs[k].col) for k in moved)
        cost = (len(moved), sum(1 for k in moved if k not in (i, j)), disp, ci, cj)
        if best_cost is None or cost < best_cost:
            best, best_cost = new, cost
    if best is None:
        return None
    out = copy.deepcopy(scene)
    for k, (r, c) in best.items():
        out.objects[k].row, out.objects[k].col = r, c
    return out


def edit_scene(scene: Scene, slot: dict, new_text: str, cfg: WorldConfig) -> Scene | None:
    """Apply a caption rewrite of one slot to the scene graph, so the negative caption can be rendered
    (the hard negative image v'_i of Paper Sec. 2.2).

    * size / colour / material / shape slot (``"object": i``): object i gets the new word's value;
    * relation slot (``"object": [i, j]``): cells are reassigned so the new relation holds from i to j
      (its opposite swaps the two objects' cells; "next" makes them horizontal neighbours), moving as few
      objects as possible.

    Everything not edited stays identical (other objects, positions, jitter, texture phase). ``new_text``
    is matched case-insensitively; for a relation slot it may be a phrase holding exactly one relation word
    plus "to" / "the" / "of" / "on" (e.g. "to the right of", "the left of", "next to"). A rewrite to the
    current value returns an identical copy.

    Returns:
        The edited copy, or None when ``new_text`` is not a caption word of this world for the slot's kind
        (see :func:`world_vocabulary`) or the relation cannot be realised on the grid.

    Raises:
        ValueError: when the slot is malformed (unknown kind, object index out of range, a relation slot
            without two distinct indices) or the scene is invalid for ``cfg``.
    """
    validate_scene(scene, cfg)
    kind = slot.get("kind") if isinstance(slot, dict) else None
    if kind not in SLOT_KINDS:
        raise ValueError(f"slot: kind {kind!r} not one of {SLOT_KINDS} (slot={slot!r})")
    obj = slot.get("object")
    n = len(scene.objects)
    word = " ".join(str(new_text).strip().lower().split())
    vocab = world_vocabulary(cfg)
    if kind == "relation":
        if (not isinstance(obj, (list, tuple)) or len(obj) != 2
                or not all(isinstance(k, int) and 0 <= k < n for k in obj) or obj[0] == obj[1]):
            raise ValueError(f"slot: a relation slot needs two distinct object indices < {n}, got {obj!r}")
        toks = word.split()
        rels = [t for t in toks if t in vocab["relation"]]
        if len(rels) != 1 or not set(toks) - {rels[0]} <= _RELATION_FILLERS:
            return None
        rel = rels[0]
        return _move_for_relation(scene, obj[0], obj[1], rel, cfg)
    if not isinstance(obj, int) or isinstance(obj, bool) or not 0 <= obj < n:
        raise ValueError(f"slot: object index {obj!r} out of range for a scene of {n} objects")
    if word not in vocab[kind]:
        return None
    out = copy.deepcopy(scene)
    setattr(out.objects[obj], kind, word)
    return out
