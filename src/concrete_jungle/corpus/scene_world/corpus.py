"""The scene-world training corpus: one manifest record and one PNG per random scene.

:func:`generate_corpus` draws scene k from its own seed stream (seed, corpus stream, k), captions it
(:func:`~concrete_jungle.corpus.scene_world.captions.scene_captions`), picks the anchor and renders the image,
in worker processes for large corpora; the benchmark draws from a disjoint stream.
"""

from __future__ import annotations

import functools
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from tqdm import tqdm

from concrete_jungle.corpus.scene_world.captions import scene_captions, select_anchor
from concrete_jungle.corpus.scene_world.graph import CORPUS_STREAM, sample_scene, scene_rng
from concrete_jungle.corpus.scene_world.render import render_scene
from concrete_jungle.io import save_png
from concrete_jungle.params import WorldConfig

__all__ = ["generate_corpus"]


def _corpus_item(index: int, cfg: WorldConfig, seed: int, id_prefix: str, out_dir: str) -> dict:
    rng = scene_rng(seed, CORPUS_STREAM, index)
    scene = sample_scene(rng, cfg)
    caps = scene_captions(scene, rng, cfg)
    texts = [c.text for c in caps]
    a = select_anchor(texts)
    sid = f"{id_prefix}{index:06d}"
    image = Path(out_dir, "images", f"{sid}.png")
    save_png(render_scene(scene, cfg), image, optimize=False, compress_level=1)
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
    """Draw ``n_scenes`` scenes, write their PNGs (``cfg.image_size`` x ``cfg.image_size`` pixels) to
    ``out_dir/images/<id>.png`` and return one manifest record per scene (``docs/architecture.md``): ``id``
    (``id_prefix`` + 6 digits), ``image`` (``out_dir`` as given joined with ``images/<id>.png``),
    ``captions``, ``anchor`` (:func:`~concrete_jungle.corpus.scene_world.captions.select_anchor`),
    ``source: "scene_world"``, ``scene`` (:meth:`~concrete_jungle.corpus.scene_world.graph.Scene.to_dict`),
    ``anchor_slots`` (character spans into ``anchor``).

    Scene k is drawn from its own seed stream (seed, corpus stream, k), so the result does not depend on
    ``workers`` (default: ``min(2, os.cpu_count())`` processes; a process pool is used from 256 scenes on).

    Raises:
        ValueError: when ``n_scenes`` < 1 or ``seed`` is negative.
    """
    if n_scenes < 1:
        raise ValueError(f"n_scenes must be >= 1, got {n_scenes}")
    Path(out_dir, "images").mkdir(parents=True, exist_ok=True)
    workers = min(2, os.cpu_count() or 1) if workers is None else workers
    fn = functools.partial(_corpus_item, cfg=cfg, seed=int(seed), id_prefix=id_prefix, out_dir=str(out_dir))
    return _run_items(fn, list(range(n_scenes)), workers, "scene world corpus")

