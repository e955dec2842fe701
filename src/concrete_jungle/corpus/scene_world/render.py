"""Rendering of scene graphs with Pillow and NumPy: shapes as polygons, materials as textures.

:func:`render_scene` draws a :class:`~concrete_jungle.corpus.scene_world.graph.Scene` as an RGB image of
``cfg.image_size`` x ``cfg.image_size`` pixels. Shapes are unit polygons (the circle an ellipse) scaled to
the object's size (a fraction of a grid cell); materials are textures anchored at the object's centre
(:data:`concrete_jungle.params.SUPPORTED_SHAPES` / :data:`concrete_jungle.params.SUPPORTED_MATERIALS`).
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image, ImageDraw

from concrete_jungle.corpus.scene_world.graph import Scene, WorldObject, validate_scene
from concrete_jungle.params import SUPPORTED_SHAPES, WorldConfig

__all__ = ["render_scene"]


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
    interior pixels are exactly its colour's RGB. An object's extent is ``cfg.sizes[size]`` (a fraction of
    the grid cell's shorter side), shifted from the cell centre by ``dx`` / ``dy`` x ``cfg.jitter`` of the
    free room. Glass is a translucent fill (45 %) with an opaque rim and a white highlight; other materials
    are opaque textures (:data:`concrete_jungle.params.SUPPORTED_MATERIALS`).

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

