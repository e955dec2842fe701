"""Zero-shot image-text retrieval, R@K in both directions (paper Sec. 3 and Tab. 3: Flickr30k Recall@K).

The dataset side and the metric side are separate (:mod:`concrete_jungle.evaluation.suite`):

* readers turn a source into :class:`RetrievalData` ``(images, captions, caption_image, skipped)``: Karpathy's
  split files (``dataset_flickr30k.json`` / ``dataset_coco.json``, :func:`read_karpathy_retrieval`), Flickr8k's
  official text files (:func:`read_flickr8k_retrieval`) and a COCO captions JSON restricted to a list of file
  names (:func:`read_coco_retrieval`); the parsing is the corpus loaders' (:mod:`concrete_jungle.corpus.loaders`);
* :func:`prepare_retrieval` writes one prepared folder for every configured set (``evaluate.retrieval.sets``),
  the scene world's held-out scenes included;
* :func:`retrieval_ranks` / :func:`retrieval_recall` score fixed embeddings (cosine space) and
  :func:`score_retrieval` scores a prepared folder from an :class:`~concrete_jungle.evaluation.suite.EmbeddingCache`.

Every caption of an image is a positive of it; in the scene world a caption is a positive of **every image it
truly describes** (``caption_positives``: "a green heart" of all the scenes holding a green heart, under the strict
semantics captions are generated with), as COCO's five captions are all positives of their image (multi-positive
R@K, clip_benchmark's ``positive_pairs``). **Image -> text** R@K is the share of images with *any* of their positive
captions among the K captions most similar to the image; **text -> image** R@K is the share of captions with any of
their positive images among the K images most similar to the caption. Identical captions then share their
positives, so an exact tie never sits between a positive and a negative of the same text and R@K does not depend on
how ties are ordered (issue 29: 2,058 of the world's 4,248 caption rows repeat another image's text). Ties that
remain (different texts or images with equal similarity, e.g. a collapsed encoder) are ranked **pessimistically**:
a wrong candidate whose similarity equals the best positive's counts as ranked above it.

Prepared folder (``data/<p>/suites/retrieval/``)::

    suite.json        {"suite": "retrieval", "available", "reason", "images": [...], "texts": [...], "ks": [1, 5, 10],
                       "sets": {name: {"available", "reason", "format", "file", "n_images", "n_captions",
                                       "skipped", "n_shared_captions", "n_multi_positive_captions"?}}}
    sets/<name>.json  {"set", "format", "image_ids": [I], "images": [I paths], "captions": [T],
                       "caption_image": [T ints], "skipped": {reason: n}, "scenes"?: {image id: scene dict},
                       "caption_positives"?: [T lists of image rows]}   (scene_world sets; else own image only)
    images/<name>/    the rendered PNGs of a scene_world set (r000001.png, ...)
"""

from __future__ import annotations

import os
import re
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from concrete_jungle.corpus.loaders import load_coco_captions, load_flickr8k, load_karpathy, read_filename_list
from concrete_jungle.evaluation.suite import (
    DataAbsent,
    EmbeddingCache,
    check_embeddings,
    read_suite,
    require_path,
    unavailable,
    write_suite,
)
from concrete_jungle.io import confined_path, read_json, save_png, write_json

__all__ = [
    "RETRIEVAL_STREAM",
    "RetrievalData",
    "retrieval_ranks",
    "retrieval_recall",
    "read_karpathy_retrieval",
    "read_flickr8k_retrieval",
    "read_coco_retrieval",
    "generate_world_retrieval",
    "world_caption_positives",
    "prepare_retrieval",
    "score_retrieval",
]

#: Seed-stream tag of the retrieval scenes (``scene_rng(seed, RETRIEVAL_STREAM, k)``): disjoint from the corpus
#: (0xC0) and benchmark (0xBE) streams of :mod:`concrete_jungle.corpus.scene_world.graph`.
RETRIEVAL_STREAM = 0x7E7

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_BLOCK = 1 << 23  # similarity entries per block (float64: 64 MiB), so COCO 5k x 25k never builds one matrix


class RetrievalData(NamedTuple):
    """One retrieval set (Tab. 3): ``images`` (paths, row order), ``captions`` (row order), ``caption_image`` (for
    each caption the row of its image), ``skipped`` (reason -> count, the loaders' reasons) and
    ``caption_positives`` (scene_world: every image row each caption truly describes; None: its own image)."""

    images: list[str]
    captions: list[str]
    caption_image: list[int]
    skipped: dict[str, int]
    caption_positives: list[list[int]] | None = None


# ------------------------------------------------------------------------------------------------
# metrics
# ------------------------------------------------------------------------------------------------
def _caption_index(text_image, n_images: int, n_texts: int) -> np.ndarray:
    ti = np.asarray(text_image)
    if ti.ndim != 1 or len(ti) != n_texts:
        raise ValueError(f"text_image must be 1-D with one entry per caption ({n_texts}), got shape {ti.shape}")
    if n_texts and not np.issubdtype(ti.dtype, np.integer):
        raise ValueError(f"text_image must hold integer image rows, got dtype {ti.dtype}")
    ti = ti.astype(np.int64)
    bad = np.flatnonzero((ti < 0) | (ti >= n_images))
    if len(bad):
        raise ValueError(f"caption {int(bad[0])} points to image {int(ti[bad[0]])}, outside 0..{n_images - 1}")
    return ti


def _positive_matrix(ti: np.ndarray, caption_positives, n_images: int):
    """Sparse bool ``[T, I]`` of the positive (caption, image) pairs: each caption's own image, and with
    ``caption_positives`` every image row listed for it (which must include its own)."""
    from scipy.sparse import csr_matrix

    n_txt = len(ti)
    if caption_positives is None:
        rows, cols = np.arange(n_txt), ti
    else:
        if len(caption_positives) != n_txt:
            raise ValueError(f"caption_positives must hold one list of image rows per caption ({n_txt}), got "
                             f"{len(caption_positives)}")
        lists = []
        for j, p in enumerate(caption_positives):
            arr = np.asarray(p)
            if (isinstance(p, (str, bytes, Mapping)) or arr.ndim != 1
                    or (arr.size and not np.issubdtype(arr.dtype, np.integer))):  # 1.5, "3", True: named, not cast
                raise ValueError(f"caption_positives of caption {j} must be a list of integer image rows, got {p!r}")
            lists.append(arr.astype(np.int64))
        rows = np.repeat(np.arange(n_txt), [len(p) for p in lists])
        cols = np.concatenate(lists) if lists else np.zeros(0, np.int64)
        bad = np.flatnonzero((cols < 0) | (cols >= n_images))
        if len(bad):
            raise ValueError(f"caption_positives of caption {int(rows[bad[0]])} names image {int(cols[bad[0]])}, "
                             f"outside 0..{n_images - 1}")
        own = set(zip(rows.tolist(), cols.tolist()))
        missing = [j for j in range(n_txt) if (j, int(ti[j])) not in own]
        if missing:
            raise ValueError(f"caption_positives of caption {missing[0]} lacks its own image {int(ti[missing[0]])}")
    return csr_matrix((np.ones(len(rows), bool), (rows, cols)), shape=(n_txt, n_images))


def retrieval_ranks(image_emb: np.ndarray, text_emb: np.ndarray, text_image,
                    caption_positives=None) -> tuple[np.ndarray, np.ndarray]:
    """Pessimistic 0-based rank of the best positive, per image (image -> text) and per caption (text -> image);
    the ranks behind R@K (Sec. 3, Tab. 3).

    Args:
        image_emb: ``[I, D]`` image embeddings (cosine space: rows are L2-normalised here).
        text_emb: ``[T, D]`` caption embeddings.
        text_image: int array ``[T]``: the image row of each caption (every image needs >= 1 caption).
        caption_positives: optional ``T`` sequences of image rows: every image each caption truly describes,
            its own ``text_image`` row included (multi-positive R@K); None: each caption's own image only.

    Returns:
        ``(i2t [I], t2i [T])`` int64: ``i2t[i]`` = number of captions *not* positive for image i whose cosine
        similarity to it is >= that of its best positive caption; ``t2i[j]`` = number of images not positive for
        caption j whose similarity to it is >= that of its best positive image. A hit at K is ``rank < K``; ties
        with a negative count against the positive (pessimistic); ties among positives do not matter.

    Raises:
        ValueError: no image or caption, bad embeddings (:func:`~concrete_jungle.evaluation.suite.check_embeddings`,
            widths that differ), a ``text_image`` entry outside ``0..I-1``, an image without caption (named),
            ``caption_positives`` of the wrong length, naming an image outside ``0..I-1`` or leaving out a
            caption's own image (named).
    """
    img = check_embeddings("image_emb", image_emb)
    txt = check_embeddings("text_emb", text_emb, img.shape[1])
    n_img, n_txt = len(img), len(txt)
    if n_img == 0 or n_txt == 0:
        raise ValueError(f"retrieval needs at least one image and one caption, got {n_img} and {n_txt}")
    ti = _caption_index(text_image, n_img, n_txt)
    lonely = np.flatnonzero(np.bincount(ti, minlength=n_img) == 0)
    if len(lonely):
        raise ValueError(f"image {int(lonely[0])} has no caption: its image->text recall is undefined")
    pos_ti = _positive_matrix(ti, caption_positives, n_img)  # [T, I]
    pos_it = pos_ti.T.tocsr()  # [I, T]

    def ranks(query: np.ndarray, cand: np.ndarray, positive) -> np.ndarray:
        out = np.empty(len(query), np.int64)
        step = max(1, _BLOCK // len(cand))
        for s in range(0, len(query), step):
            sims = query[s:s + step] @ cand.T  # [B, candidates]
            pos = positive[s:s + step].toarray()
            best = np.where(pos, sims, -np.inf).max(axis=1)
            out[s:s + len(sims)] = ((sims >= best[:, None]) & ~pos).sum(axis=1)
        return out

    return ranks(img, txt, pos_it), ranks(txt, img, pos_ti)


def _check_ks(ks: Iterable[int]) -> list[int]:
    ks = list(ks)
    if not ks or any(isinstance(k, bool) or int(k) != k or k < 1 for k in ks) or len(set(ks)) != len(ks):
        raise ValueError(f"ks must be a non-empty list of distinct positive ints, got {ks}")
    return sorted(int(k) for k in ks)


def _recalls(i2t: np.ndarray, t2i: np.ndarray, ks: Sequence[int]) -> dict:
    out = {"i2t": {f"R@{k}": float(np.mean(i2t < k)) for k in ks},
           "t2i": {f"R@{k}": float(np.mean(t2i < k)) for k in ks}}
    out["rsum"] = float(sum(out["i2t"].values()) + sum(out["t2i"].values()))
    out["mean_recall"] = out["rsum"] / (2 * len(ks))
    return out


def retrieval_recall(image_emb: np.ndarray, text_emb: np.ndarray, text_image, ks: Iterable[int] = (1, 5, 10),
                     caption_positives=None) -> dict:
    """Image -> text and text -> image Recall@K with several captions per image (paper Sec. 3, Tab. 3).

    Args:
        image_emb: ``[I, D]`` image embeddings (cosine space).
        text_emb: ``[T, D]`` caption embeddings.
        text_image: int array ``[T]``, the image row of each caption.
        ks: the cut-offs K (distinct positive ints; a K above the candidate count gives 1.0).
        caption_positives: every image each caption truly describes (:func:`retrieval_ranks`); None: its own.

    Returns:
        ``{"i2t": {"R@K": f}, "t2i": {"R@K": f}, "rsum": f, "mean_recall": f}``: recalls are fractions in [0, 1]
        (i2t over the I images, t2i over the T captions), ``rsum`` their sum (in [0, 2 len(ks)]) and
        ``mean_recall`` = rsum / (2 len(ks)). Ties are ranked pessimistically (:func:`retrieval_ranks`).

    Raises:
        ValueError: bad ``ks``, or as :func:`retrieval_ranks`.
    """
    ks = _check_ks(ks)
    return _recalls(*retrieval_ranks(image_emb, text_emb, text_image, caption_positives), ks)


# ------------------------------------------------------------------------------------------------
# readers
# ------------------------------------------------------------------------------------------------
def _from_records(records: Sequence[dict], skipped: Mapping[str, int]) -> RetrievalData:
    images, captions, caption_image = [], [], []
    for row, rec in enumerate(records):
        images.append(rec["image"])
        captions += rec["captions"]
        caption_image += [row] * len(rec["captions"])
    return RetrievalData(images, captions, caption_image, dict(skipped))


def read_karpathy_retrieval(dataset_json: str | os.PathLike, image_root: str | os.PathLike,
                            split: str = "test") -> RetrievalData:
    """One split of Karpathy's ``dataset_flickr30k.json`` / ``dataset_coco.json`` (the paper's Flickr30k test set,
    Sec. 3 / Tab. 3: 1,000 images, 5,000 captions).

    Format: ``{"images": [{"filename", "filepath"?, "split", "sentences": [{"raw"}, ...]}, ...]}``; the image of an
    entry is ``image_root/filepath/filename``. Parsing and skip reasons are
    :func:`~concrete_jungle.corpus.loaders.load_karpathy`'s (``other_split``, ``image_missing``, ``no_caption``,
    ``caption_empty``, ``image_unreadable``, ``image_too_large``): a missing image is counted, not fatal.

    Returns:
        :class:`RetrievalData` in file order; image paths as ``image_root`` is spelled.

    Raises:
        FileNotFoundError: ``dataset_json`` is missing.
        ValueError: not a Karpathy file, an entry lacks its fields, or an entry of ``split`` whose path is absolute
            or resolves outside ``image_root`` (naming the file and the entry index).
    """
    data = read_json(dataset_json)
    for k, img in enumerate(data.get("images", []) if isinstance(data, dict) else []):
        if isinstance(img, dict) and str(img.get("split")) == split and isinstance(img.get("filename"), str):
            rel = (Path(str(img.get("filepath", ""))) / img["filename"]).as_posix()
            confined_path(image_root, rel, f"{dataset_json} images[{k}]")
    del data
    return _from_records(*load_karpathy(dataset_json, image_root, [split], source="retrieval"))


def read_flickr8k_retrieval(token_file: str | os.PathLike, split_file: str | os.PathLike,
                            image_dir: str | os.PathLike) -> RetrievalData:
    """The Flickr8k images of one official split list (``Flickr_8k.testImages.txt``; 125 of its images are in
    ``../shared/data/flickr8k/images``) with their 5 captions each: a small stand-in for Tab. 3's Flickr30k.

    Parsing and skip reasons are :func:`~concrete_jungle.corpus.loaders.load_flickr8k`'s (``image_missing``,
    ``no_caption``, ``malformed_line``, ...): a listed image that is absent is counted, not fatal.

    Returns:
        :class:`RetrievalData` in split-list order, captions in ``#k`` order.

    Raises:
        FileNotFoundError: a file or ``image_dir`` is missing.
        ValueError: the split list names a file twice, or a name that is absolute or resolves outside ``image_dir``
            (naming the split file and the line).
    """
    for k, name in enumerate(read_filename_list(split_file), 1):
        confined_path(image_dir, name, f"{split_file} line {k}")
    return _from_records(*load_flickr8k(token_file, split_file, image_dir, source="retrieval"))


def read_coco_retrieval(captions_json: str | os.PathLike, image_root: str | os.PathLike,
                        filenames: Sequence[str] | None = None) -> RetrievalData:
    """COCO images with all their captions from a ``captions_*.json``, restricted to ``filenames`` (e.g. the 167
    SugarCrepe val2017 images present, ``sugarcrepe_images_present.txt``): a COCO retrieval set as in Tab. 3.

    Parsing is :func:`~concrete_jungle.corpus.loaders.load_coco_captions`'s. With ``filenames``, the images follow
    its order and the skip reasons count its names: ``image_missing`` (no file under ``image_root``) and
    ``not_captioned`` (the file exists but the JSON gives it no caption, or it does not decode; the loader logs
    which). Without, every captioned image present on disk is used and the loader's reasons are returned.

    Returns:
        :class:`RetrievalData`.

    Raises:
        FileNotFoundError: ``captions_json`` or ``image_root`` is missing.
        ValueError: not a COCO captions file, a name listed twice, or a name that is absolute or resolves outside
            ``image_root`` (naming it).
    """
    if filenames is not None:
        if isinstance(filenames, str):
            raise ValueError("filenames must be a list of file names, not a string")
        for k, name in enumerate(filenames):
            confined_path(image_root, name, f"COCO retrieval file name {k}")
        dup = [n for n, c in Counter(filenames).items() if c > 1]
        if dup:
            raise ValueError(f"COCO retrieval file names listed twice: {dup[:5]}")
    records, skipped = load_coco_captions(captions_json, image_root, source="retrieval")
    if filenames is None:
        return _from_records(records, skipped)
    by_name = {Path(r["image"]).relative_to(Path(image_root)).as_posix(): r for r in records}
    kept, counts = [], Counter()
    for name in filenames:
        if name in by_name:
            kept.append(by_name[name])
        elif not (Path(image_root) / name).is_file():
            counts["image_missing"] += 1
        else:
            counts["not_captioned"] += 1
    return _from_records(kept, counts)


# ------------------------------------------------------------------------------------------------
# the scene world
# ------------------------------------------------------------------------------------------------
def generate_world_retrieval(world_cfg, n_images: int, image_dir: str | os.PathLike, seed: int,
                             exclude_signatures: Iterable[str] = frozenset(),
                             max_draws: int | None = None) -> tuple[RetrievalData, dict[str, dict]]:
    """``n_images`` held-out scenes of the scene world with all their true captions, rendered as PNGs: the world's
    stand-in for Tab. 3's Flickr30k retrieval.

    Scene k is drawn from ``scene_rng(seed, RETRIEVAL_STREAM, k)`` (a stream of its own), then captioned with
    :func:`~concrete_jungle.corpus.scene_world.captions.scene_captions` (every caption it returns is a positive).
    A scene whose :func:`~concrete_jungle.corpus.scene_world.graph.scene_signature` is in ``exclude_signatures``
    (the corpus's) or already drawn is skipped (counted as ``seen_signature`` / ``duplicate_signature``).

    Args:
        world_cfg: the :class:`~concrete_jungle.params.WorldConfig`.
        n_images: scenes to keep (>= 2).
        image_dir: the PNGs go to ``image_dir/r000001.png`` ... (``world_cfg.image_size`` pixels square).
        seed: the profile seed (>= 0).
        exclude_signatures: scene signatures never to use.
        max_draws: give up after this many draws (default ``50 * n_images + 1000``).

    Returns:
        ``(RetrievalData, scenes)``: ``scenes`` maps the file name (``r000001.png``) to the scene dict; the data's
        ``caption_positives`` lists for each caption every scene it truly describes
        (:func:`world_caption_positives`).

    Raises:
        ValueError: ``n_images`` < 2. RuntimeError: ``max_draws`` draws gave fewer than ``n_images`` new scenes.
    """
    from concrete_jungle.corpus.scene_world.captions import scene_captions
    from concrete_jungle.corpus.scene_world.graph import sample_scene, scene_rng, scene_signature
    from concrete_jungle.corpus.scene_world.render import render_scene

    if n_images < 2:
        raise ValueError(f"a retrieval set needs at least 2 images, got n_images={n_images}")
    max_draws = 50 * n_images + 1000 if max_draws is None else max_draws
    excluded, used, skipped = set(exclude_signatures), set(), Counter()
    image_dir = Path(image_dir)
    image_dir.mkdir(parents=True, exist_ok=True)
    images, captions, caption_image, scenes, drawn = [], [], [], {}, []
    draw = 0
    while len(images) < n_images:
        if draw >= max_draws:
            raise RuntimeError(f"scene_world retrieval: only {len(images)} of {n_images} unseen scenes in "
                               f"{max_draws} draws (skipped: {dict(skipped)})")
        rng = scene_rng(seed, RETRIEVAL_STREAM, draw)
        draw += 1
        scene = sample_scene(rng, world_cfg)
        sig = scene_signature(scene)
        if sig in excluded or sig in used:
            skipped["seen_signature" if sig in excluded else "duplicate_signature"] += 1
            continue
        used.add(sig)
        texts = [c.text for c in scene_captions(scene, rng, world_cfg)]
        fname = f"r{len(images) + 1:06d}.png"
        save_png(render_scene(scene, world_cfg), image_dir / fname, optimize=False, compress_level=1)
        scenes[fname] = scene.to_dict()
        drawn.append(scene)
        captions += texts
        caption_image += [len(images)] * len(texts)
        images.append((image_dir / fname).as_posix())
    positives = world_caption_positives(captions, caption_image, drawn, world_cfg)
    return RetrievalData(images, captions, caption_image, dict(sorted(skipped.items())), positives), scenes


def world_caption_positives(captions: Sequence[str], caption_image: Sequence[int], scenes: Sequence,
                            world_cfg) -> list[list[int]]:
    """Every scene each caption truly describes: the positives of multi-positive R@K on a scene_world set.

    A caption is parsed once per distinct text (:func:`~concrete_jungle.corpus.scene_world.captions.parse_caption`)
    and checked against every scene under the strict semantics captions are generated with
    (:func:`~concrete_jungle.corpus.scene_world.captions.spec_holds`, ``strict=True``); scenes lacking one of its
    words are passed over unchecked.

    Args:
        captions: ``T`` caption texts; caption_image: their ``T`` image rows.
        scenes: the ``I`` :class:`~concrete_jungle.corpus.scene_world.graph.Scene` objects, in row order.
        world_cfg: the :class:`~concrete_jungle.params.WorldConfig`.

    Returns:
        ``T`` sorted lists of scene rows, each holding its own ``caption_image`` row.

    Raises:
        ValueError: a caption outside the world's grammar (named), or one false of its own scene (named).
    """
    from concrete_jungle.corpus.scene_world.captions import _words_of, parse_caption, spec_holds

    having: dict[tuple[str, str], set[int]] = {}
    for row, scene in enumerate(scenes):
        for o in scene.objects:
            for kind in ("shape", "size", "colour", "material"):
                having.setdefault((kind, getattr(o, kind)), set()).add(row)
    everyone = set(range(len(scenes)))
    by_text: dict[str, list[int]] = {}
    out = []
    for j, (text, own) in enumerate(zip(captions, caption_image)):
        if text not in by_text:
            spec = parse_caption(text, world_cfg)
            cand = set(everyone)
            for m in spec.mentions:
                for kw in _words_of(m, None):
                    cand &= having.get(kw, set())
            by_text[text] = sorted(r for r in cand if spec_holds(scenes[r], spec, strict=True))
        rows = by_text[text]
        if own not in rows:
            raise ValueError(f"caption {j} ({text!r}) is not true of its own scene (row {own})")
        out.append(rows)
    return out


# ------------------------------------------------------------------------------------------------
# prepare / score
# ------------------------------------------------------------------------------------------------
def _read_set(name: str, s, world_cfg, out_dir: Path, seed: int,
              exclude: set[str]) -> tuple[RetrievalData, list[str], dict | None]:
    """The set's data, its image ids, and its scenes (scene_world only)."""
    if s.format == "scene_world":
        if world_cfg is None:
            raise ValueError(f"retrieval set {name!r}: format scene_world needs the world config")
        data, scenes = generate_world_retrieval(world_cfg, s.n_images, out_dir / "images" / name, seed, exclude)
        return data, list(scenes), scenes
    if s.format in ("flickr30k_karpathy", "coco_karpathy"):
        root = require_path(s.image_root, "image_root", folder=True)
        data = read_karpathy_retrieval(require_path(s.dataset_json, "dataset_json"), s.image_root, s.split)
    elif s.format == "flickr8k":
        root = require_path(s.image_dir, "image_dir", folder=True)
        data = read_flickr8k_retrieval(require_path(s.token_file, "token_file"),
                                       require_path(s.split_file, "split_file"), s.image_dir)
    elif s.format == "coco_captions":
        root = require_path(s.image_root, "image_root", folder=True)
        names = read_filename_list(require_path(s.filenames, "filenames")) if s.filenames is not None else None
        data = read_coco_retrieval(require_path(s.captions_json, "captions_json"), s.image_root, names)
    else:  # pragma: no cover - RetrievalSet validates the format
        raise ValueError(f"retrieval set {name!r}: unknown format {s.format!r}")
    if s.n_images is not None and len(data.images) > s.n_images:  # a seeded sample, kept in source order
        rng = np.random.default_rng(np.random.SeedSequence(entropy=int(seed),
                                                           spawn_key=(RETRIEVAL_STREAM, zlib.crc32(name.encode()))))
        keep = sorted(rng.choice(len(data.images), size=s.n_images, replace=False).tolist())
        new_row = {old: new for new, old in enumerate(keep)}
        pairs = [(c, new_row[i]) for c, i in zip(data.captions, data.caption_image) if i in new_row]
        data = RetrievalData([data.images[i] for i in keep], [c for c, _ in pairs], [i for _, i in pairs],
                             {**data.skipped, "over_cap": len(data.images) - s.n_images})
    return data, [Path(p).relative_to(root).as_posix() for p in data.images], None


def prepare_retrieval(cfg, world_cfg, out_dir: str | os.PathLike, seed: int,
                      exclude_signatures: Iterable[str] = frozenset()) -> dict:
    """Write the prepared retrieval suite (paper Tab. 3) for every set of ``cfg.sets`` into ``out_dir``.

    Formats (:class:`~concrete_jungle.params.RetrievalSet`): ``flickr30k_karpathy`` / ``coco_karpathy``
    (:func:`read_karpathy_retrieval`, split ``split``), ``flickr8k`` (:func:`read_flickr8k_retrieval`),
    ``coco_captions`` (:func:`read_coco_retrieval`, restricted to the names listed in ``filenames``) and
    ``scene_world`` (:func:`generate_world_retrieval`: ``n_images`` scenes, none of ``exclude_signatures``). For a
    file-based set ``n_images`` caps the images (a seeded sample, source order kept; ``over_cap`` counts the rest).

    A set whose files are absent, or with fewer than 2 images present, is recorded with ``available: false`` and
    its reason; the suite is unavailable only when no set is (or none is configured). Layout: module docstring.

    Args:
        cfg: :class:`~concrete_jungle.params.RetrievalParams` (``sets``, ``ks``).
        world_cfg: :class:`~concrete_jungle.params.WorldConfig` (used by scene_world sets only; may be None else).
        out_dir: the prepared folder (created).
        seed: the profile seed; draws the scenes and the capped samples.
        exclude_signatures: scene signatures of the corpus, never used for a scene_world set.

    Returns:
        The ``suite.json`` written (:func:`~concrete_jungle.evaluation.suite.write_suite`).

    Raises:
        ValueError: a set name that is not a plain file name, a source file that is malformed or names a path
            outside its root (named), a scene_world set without ``world_cfg``.
        RuntimeError: too few unseen scenes (:func:`generate_world_retrieval`).
    """
    out_dir = Path(out_dir)
    exclude = set(exclude_signatures)
    sets: dict[str, dict] = {}
    images: set[str] = set()
    texts: set[str] = set()
    for name, s in cfg.sets.items():
        if not _NAME_RE.match(name):
            raise ValueError(f"retrieval set name {name!r} must be a plain file name ([A-Za-z0-9_.-])")
        try:
            data, ids, scenes = _read_set(name, s, world_cfg, out_dir, seed, exclude)
            if len(data.images) < 2:
                raise DataAbsent(f"only {len(data.images)} image(s) present (skipped: {data.skipped})")
        except DataAbsent as why:
            sets[name] = {"available": False, "reason": str(why), "format": s.format}
            continue
        shared = Counter(c for c, _ in {(c, i) for c, i in zip(data.captions, data.caption_image)})
        item = {"set": name, "format": s.format, "image_ids": ids, "images": data.images, "captions": data.captions,
                "caption_image": data.caption_image, "skipped": data.skipped}
        if scenes is not None:
            item["scenes"] = scenes
        if data.caption_positives is not None:
            item["caption_positives"] = data.caption_positives
        write_json(out_dir / "sets" / f"{name}.json", item)
        images.update(data.images)
        texts.update(data.captions)
        sets[name] = {"available": True, "reason": None, "format": s.format, "file": f"sets/{name}.json",
                      "n_images": len(data.images), "n_captions": len(data.captions), "skipped": data.skipped,
                      # caption rows whose text also captions another image of the set
                      "n_shared_captions": sum(1 for c in data.captions if shared[c] > 1),
                      # caption rows with more than one positive image (scene_world: true of several scenes)
                      "n_multi_positive_captions": sum(1 for p in data.caption_positives or () if len(p) > 1)}
    ks = list(cfg.ks)
    if any(v["available"] for v in sets.values()):
        meta = {"suite": "retrieval", "available": True, "reason": None, "images": sorted(images),
                "texts": sorted(texts), "ks": ks, "sets": sets}
    else:
        why = "; ".join(f"{n}: {v['reason']}" for n, v in sets.items()) or "evaluate.retrieval.sets is empty"
        meta = unavailable("retrieval", f"no retrieval set is available ({why})", ks=ks, sets=sets)
    out_dir.mkdir(parents=True, exist_ok=True)
    return write_suite(out_dir, meta)


def score_retrieval(suite_dir: str | os.PathLike, cache: EmbeddingCache, ks: Iterable[int] | None = None) -> dict:
    """Recall@K of every available set of a prepared retrieval suite from one model's embeddings (Tab. 3).

    Args:
        suite_dir: the folder :func:`prepare_retrieval` wrote.
        cache: the model's :class:`~concrete_jungle.evaluation.suite.EmbeddingCache` of this suite (cosine space).
        ks: the cut-offs; default the suite's ``ks``.

    Returns:
        ``{"available", "reason", "metrics": {set: retrieval_recall dict}, "n": {"<set>_images": I,
        "<set>_captions": T, "<set>_positive_pairs": P}, "verdicts": {set: {"i2t": {image id: hit@1},
        "t2i": {"<image id>#<k>": hit@1}}},
        "unavailable": {set: reason}}`` (caption ids: the k-th caption, from 0, of that image); recalls are
        fractions. An unavailable suite gives empty metrics and its reason.

    A set with ``caption_positives`` (scene_world) is scored multi-positive (:func:`retrieval_ranks`).

    Raises:
        FileNotFoundError: the suite was never prepared. KeyError: an input the cache lacks.
        ValueError: bad ``ks``, or as :func:`retrieval_ranks`.
    """
    suite_dir = Path(suite_dir)
    meta = read_suite(suite_dir)
    out = {"available": bool(meta["available"]), "reason": meta.get("reason"), "metrics": {}, "n": {},
           "verdicts": {}, "unavailable": {n: v["reason"] for n, v in meta.get("sets", {}).items()
                                           if not v["available"]}}
    if not meta["available"]:
        return out
    ks = _check_ks(meta["ks"] if ks is None else ks)
    for name, sm in meta["sets"].items():
        if not sm["available"]:
            continue
        item = read_json(suite_dir / sm["file"])
        positives = item.get("caption_positives")
        i2t, t2i = retrieval_ranks(cache.image(item["images"]), cache.text(item["captions"]), item["caption_image"],
                                   positives)
        out["metrics"][name] = _recalls(i2t, t2i, ks)
        out["n"][f"{name}_images"] = len(i2t)
        out["n"][f"{name}_captions"] = len(t2i)
        out["n"][f"{name}_positive_pairs"] = sum(map(len, positives)) if positives is not None else len(t2i)
        ids = item["image_ids"]
        seen: Counter = Counter()
        cap_ids = []
        for row in item["caption_image"]:
            cap_ids.append(f"{ids[row]}#{seen[row]}")
            seen[row] += 1
        out["verdicts"][name] = {"i2t": {i: bool(r < 1) for i, r in zip(ids, i2t.tolist())},
                                 "t2i": {c: bool(r < 1) for c, r in zip(cap_ids, t2i.tolist())}}
    return out
