"""Hard negative images v'_i for ConcretePlant (paper Sec. 2.2 "Hard Negative Mining").

The paper edits the anchor image with SDXL-Turbo, v'_i = f_gen(v_i, t'_i). Three backends:

* :class:`SdxlTurboNegatives` (the paper's f_gen, needs the ``stabilityai/sdxl-turbo`` weights and in practice
  a GPU): diffusers' SDXL img2img pipeline edits the anchor image v_i so that it matches the rewritten caption
  t'_i, configured by :class:`SdxlTurboParams` (``concreteplant.image_edit``).
* :class:`RetrievalNegatives` (real profile, offline stand-in): v'_i is the corpus image, other than the
  anchor's, whose human captions best match the rewritten caption t'_i, as NegCLIP (Yuksekgonul et al. 2023)
  retrieved its negative images from the training set. Matching is TF-IDF cosine over word
  uni- and bi-grams (scikit-learn).
* :class:`SceneNegatives` (world profile): the rewrite t'_i is applied to the anchor's scene graph and the
  edited scene is re-rendered, so v'_i differs from v_i in exactly the rewritten element.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer

from concrete_jungle.io import save_png
from concrete_jungle.params import _PARAMS_KEY, SdxlTurboParams  # noqa: F401 (config lives in params)

__all__ = [
    "RetrievalNegatives",
    "SceneNegatives",
    "SdxlTurboNegatives",
    "SdxlTurboParams",
    "degeneracy",
    "item_seed",
    "replacement_text",
]


class RetrievalNegatives:
    """Retrieve a hard negative image for each rewritten caption from a captioned image corpus.

    Each corpus image is one TF-IDF document: the word 1- and 2-grams of each of its captions (n-grams
    never span two captions), lower-cased, with scikit-learn's default tokenisation, smooth IDF and
    L2-normalised rows, so a dot product is a cosine similarity in [0, 1].

    Args:
        records: manifest records (docs/architecture.md) with ``id``, ``image`` and ``captions``.

    Raises:
        ValueError: if fewer than 2 records are given (there would be no image other than the
            anchor's), a record lacks ``id``/``image``/a non-empty ``captions`` list of strings, or
            two records share an id.
    """

    def __init__(self, records: Sequence[dict]):
        if len(records) < 2:
            raise ValueError(
                f"RetrievalNegatives needs a corpus of at least 2 images (one besides the anchor), got {len(records)}"
            )
        ids, images, docs = [], [], []
        for k, rec in enumerate(records):
            for key in ("id", "image", "captions"):
                if key not in rec:
                    raise ValueError(f"RetrievalNegatives: records[{k}] lacks {key!r}")
            caps = rec["captions"]
            if isinstance(caps, str) or not caps or not all(isinstance(c, str) for c in caps):
                raise ValueError(f"RetrievalNegatives: records[{k}] ({rec['id']}) needs a non-empty list of caption strings")
            ids.append(str(rec["id"]))
            images.append(str(rec["image"]))
            docs.append(list(caps))
        if len(set(ids)) != len(ids):
            dup = sorted(i for i, n in Counter(ids).items() if n > 1)
            raise ValueError(f"RetrievalNegatives: duplicate record ids {dup[:5]}")
        self.ids = ids
        self.images = images
        self._row = {rid: i for i, rid in enumerate(ids)}
        base = TfidfVectorizer(ngram_range=(1, 2)).build_analyzer()

        def analyze(doc):  # a caption list (corpus image) or a single caption (query)
            if isinstance(doc, str):
                return base(doc)
            return [g for cap in doc for g in base(cap)]

        self._vectorizer = TfidfVectorizer(analyzer=analyze)
        self._doc_matrix = self._vectorizer.fit_transform(docs)  # [n_images, vocab], rows L2-normalised
        img = np.asarray(images)
        self._same_image = {rid: np.flatnonzero(img == images[i]) for i, rid in enumerate(ids)}

    def __len__(self) -> int:
        return len(self.ids)

    def find_with_scores(
        self, negative_captions: Sequence[str], anchor_ids: Sequence[str], chunk: int = 1024
    ) -> tuple[list[str], np.ndarray]:
        """Like :meth:`find`, also returning the TF-IDF cosine of each chosen image (``[Q]`` float64).

        A score of 0.0 means the rewritten caption shares no n-gram with any eligible image; the
        image then chosen is simply the first eligible one in corpus order. Count these if they matter.
        """
        if isinstance(negative_captions, str) or isinstance(anchor_ids, str):
            raise TypeError("negative_captions and anchor_ids must be lists of strings, not a single string")
        if len(negative_captions) != len(anchor_ids):
            raise ValueError(
                f"negative_captions ({len(negative_captions)}) and anchor_ids ({len(anchor_ids)}) differ in length"
            )
        rows = []
        for k, aid in enumerate(anchor_ids):
            if str(aid) not in self._row:
                raise KeyError(f"anchor_ids[{k}] = {aid!r} is not a record id of the corpus")
            rows.append(str(aid))
        for k, cap in enumerate(negative_captions):
            if not isinstance(cap, str):
                raise TypeError(f"negative_captions[{k}] is {type(cap).__name__}, expected str")
        paths: list[str] = []
        scores = np.zeros(len(rows), dtype=np.float64)
        for start in range(0, len(rows), chunk):
            q = self._vectorizer.transform(list(negative_captions[start : start + chunk]))
            sims = (q @ self._doc_matrix.T).toarray().astype(np.float64)  # [q, n_images] cosine
            for j, aid in enumerate(rows[start : start + chunk]):
                row = sims[j]
                row[self._same_image[aid]] = -np.inf  # never the anchor's own image
                best = int(np.argmax(row))  # first maximum = deterministic tie-break by corpus order
                if not np.isfinite(row[best]):
                    raise ValueError(f"anchor {aid!r}: every corpus image is the anchor's own image")
                paths.append(self.images[best])
                scores[start + j] = row[best]
        return paths, scores

    def find(self, negative_captions: Sequence[str], anchor_ids: Sequence[str]) -> list[str]:
        """Hard negative image path for each rewritten caption t'_i.

        Args:
            negative_captions: ``[Q]`` rewritten captions t'_i.
            anchor_ids: ``[Q]`` record ids of the anchors; the anchor's image (and any record with the
                same image path) is never returned.

        Returns:
            ``[Q]`` image paths (the records' ``image`` strings): for each query, the image with the
            highest TF-IDF cosine between t'_i and its concatenated captions; ties go to the image
            that comes first in the corpus order given to the constructor.

        Raises:
            ValueError: if the two lists differ in length, or every image is the anchor's.
            KeyError: if an anchor id is not in the corpus.
            TypeError: if a caption is not a string or a bare string is passed instead of a list.
        """
        return self.find_with_scores(negative_captions, anchor_ids)[0]


_ARTICLES = {"a", "an", "the"}


def replacement_text(caption: str, negative_caption: str) -> str:
    """The words the rewrite put in place of the keyword: ``negative_caption``'s words that differ from
    ``caption``'s (word-level diff, case-insensitive, a changed article dropped).

    >>> replacement_text("a red circle above a square", "a blue circle above a square")
    'blue'
    """
    import difflib

    a = caption.lower().rstrip(".").split()
    b = negative_caption.lower().rstrip(".").split()
    words = []
    for op, _, _, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op in ("replace", "insert"):
            words += b[j1:j2]
    while words and words[0] in _ARTICLES:
        words = words[1:]
    return " ".join(words)


class SceneNegatives:
    """Scene-world hard-negative images: edit the anchor's scene graph as the caption rewrite says, re-render.

    Args:
        world_cfg: the scene world's ``WorldConfig``.
        out_dir: folder for the rendered negatives (``<anchor id>.png``); created if missing.
    """

    def __init__(self, world_cfg, out_dir) -> None:
        from pathlib import Path

        self.cfg = world_cfg
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)

    def render_negative(
        self, record: dict, start: int, end: int, caption: str, negative_caption: str
    ) -> tuple[str | None, str | None]:
        """Render v'_i for the keyword at ``caption[start:end]`` rewritten into ``negative_caption``.

        Returns:
            ``(path, None)`` on success, else ``(None, reason)`` with reason ``no_scene`` (record without a
            scene graph), ``no_slot`` (the keyword touches no caption slot), ``unrenderable`` (the new words
            are not a value of this world for the slot's kind, or the relation cannot be realised),
            ``negative_off_grammar`` (the negative caption is not of the world's grammar, so its truth cannot be
            checked), ``negative_true_of_anchor`` (t' is true of v under the loose reading, e.g. "a red cross to
            the right of a red cross" rewritten to "... left of ...", or a reworded object that another object
            of v matches) or ``anchor_true_of_negative`` (t is still true of v'): either way the pair would
            not be a hard negative, and a held-out verdict on it would be a coin toss.
        """
        from concrete_jungle.corpus.scene_world.captions import caption_holds
        from concrete_jungle.corpus.scene_world.graph import Scene, edit_scene
        from concrete_jungle.corpus.scene_world.render import render_scene

        if "scene" not in record or "anchor_slots" not in record:
            return None, "no_scene"
        best, best_overlap = None, 0
        for slot in record["anchor_slots"]:
            overlap = min(end, slot["end"]) - max(start, slot["start"])
            if overlap > best_overlap:
                best, best_overlap = slot, overlap
        if best is None:
            return None, "no_slot"
        scene = Scene.from_dict(record["scene"])
        edited = edit_scene(scene, best, replacement_text(caption, negative_caption), self.cfg)
        if edited is None:
            return None, "unrenderable"
        try:
            if caption_holds(scene, negative_caption, self.cfg):
                return None, "negative_true_of_anchor"
        except ValueError:
            return None, "negative_off_grammar"
        if caption_holds(edited, caption, self.cfg):
            return None, "anchor_true_of_negative"
        path = self.out_dir / f"{record['id']}.png"
        save_png(render_scene(edited, self.cfg), path)
        return str(path), None


# ---------------------------------------------------------------------------------------------------------------
# SDXL-Turbo img2img: the paper's hard negative image generator f_gen (Sec. 2.2, Fig. 2)

#: an 8-bit output whose every channel value is <= this is "black" (4/255 ~ 1.6 % of the range)
BLACK_MAX = 4
#: an 8-bit output whose values span <= this many levels (over all pixels and channels) is "constant"
CONSTANT_PTP = 2


def item_seed(seed: int, anchor_id: str, attempt: int = 0) -> int:
    """Seed of the noise for one anchor's edit: the first 8 bytes (little endian) of
    SHA-256(``"{seed}:{anchor_id}:{attempt}"``), masked to 63 bits.

    Depends only on the base seed, the anchor id and the attempt (0 = first try, 1 = the retry after a
    degenerate output), never on batching or on the order of the anchors.
    """
    digest = hashlib.sha256(f"{int(seed)}:{anchor_id}:{int(attempt)}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def degeneracy(image: np.ndarray) -> str | None:
    """Why a generated image is unusable as a hard negative v'_i, or ``None`` if it is fine.

    Args:
        image: ``[H, W, C]`` float array in [0, 1] (diffusers' ``output_type="np"``), possibly NaN.

    Returns:
        ``"nan"`` if any value is NaN or infinite (e.g. a float16 VAE overflow); ``"black"`` if every value of the
        8-bit image ``round(255 x)`` is <= :data:`BLACK_MAX` (4); ``"constant"`` if the 8-bit values span
        <= :data:`CONSTANT_PTP` (2) levels over all pixels and channels (a flat image of any colour); else ``None``.

    Raises:
        ValueError: if ``image`` is not 3-dimensional or is empty.
    """
    image = np.asarray(image)
    if image.ndim != 3 or image.size == 0:
        raise ValueError(f"degeneracy: expected a non-empty [H, W, C] image, got shape {image.shape}")
    if not np.isfinite(image).all():
        return "nan"
    u8 = _to_uint8(image)
    if int(u8.max()) <= BLACK_MAX:
        return "black"
    if int(u8.max()) - int(u8.min()) <= CONSTANT_PTP:
        return "constant"
    return None


def _to_uint8(image: np.ndarray) -> np.ndarray:
    """``[H, W, C]`` float in [0, 1] -> uint8 ``round(255 x)`` (diffusers' own ``numpy_to_pil`` rounding)."""
    return (np.clip(image, 0.0, 1.0) * 255.0).round().astype(np.uint8)


def _load_square(path: str | os.PathLike, size: int):
    """The anchor image as a ``size`` x ``size`` RGB PIL image (centre square crop, bicubic resize), or ``None``
    when the file is missing, truncated or not an image. No EXIF rotation is applied, as in training."""
    from PIL import Image, ImageOps

    try:
        with Image.open(path) as im:
            rgb = im.convert("RGB")  # forces a full decode: a truncated file fails here
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        return None
    if rgb.width < 1 or rgb.height < 1:
        return None
    return ImageOps.fit(rgb, (size, size), method=Image.Resampling.BICUBIC, centering=(0.5, 0.5))


class SdxlTurboNegatives:
    """Hard negative images v'_i = f_gen(v_i, t'_i) by SDXL-Turbo img2img (paper Sec. 2.2, Fig. 2).

    For each anchor the image v_i is centre-cropped to a square and resized to ``cfg.size`` (bicubic), then edited
    by diffusers' SDXL img2img pipeline with the rewritten caption t'_i as the prompt (no negative prompt,
    ``guidance_scale`` 0, ``strength`` and ``num_inference_steps`` from ``cfg``) and one ``torch.Generator``
    (on the CPU, so results match across devices up to kernel numerics) seeded by :func:`item_seed` per anchor.

    **Sizes.** The stored edit ``out_dir/<anchor id>.png`` is a ``cfg.size`` x ``cfg.size`` 8-bit RGB PNG. The
    anchor image stays untouched on disk (no second copy of the corpus): the edit covers the anchor's central
    square, the same region (up to one pixel of rounding) that open_clip's default preprocessing (resize_mode
    ``shortest``: resize the shortest side, then centre crop) keeps of the anchor, so after preprocessing v_i and
    v'_i show the same field of view at the model's input size. (With ``augment: true`` both images get
    independent random crops anyway.)

    **Failures are counted, never padded.** An anchor image that is missing, truncated or not an image gives
    ``(None, "unreadable")``. A degenerate output (:func:`degeneracy`: NaN, black or constant) is regenerated once
    with the attempt-1 seed; if that is degenerate too the anchor gives ``(None, "degenerate")``. ``counts``
    (a ``Counter``, cumulative over calls) holds ``edited``, ``unreadable``, ``degenerate``, ``retried`` and
    ``degenerate_<nan|black|constant>`` for every degenerate output seen (first tries and retries).

    Args:
        cfg: the :class:`SdxlTurboParams`.
        out_dir: folder for the edits; created if missing.
        pipeline: an already built img2img pipeline (tests); ``None`` loads
            ``AutoPipelineForImage2Image.from_pretrained(cfg.model, dtype=..., variant=cfg.variant)`` on
            ``cfg``'s device at the first :meth:`edit` that has a readable image.

    Raises:
        TypeError: if ``cfg`` is not a :class:`SdxlTurboParams`.
    """

    def __init__(self, cfg: SdxlTurboParams, out_dir: str | os.PathLike, pipeline: Any = None) -> None:
        if not isinstance(cfg, SdxlTurboParams):
            raise TypeError(f"SdxlTurboNegatives: cfg must be SdxlTurboParams, got {type(cfg).__name__}")
        self.cfg = cfg
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._pipeline = pipeline
        self.counts: Counter = Counter()

    @property
    def pipeline(self) -> Any:
        """The img2img pipeline, loaded on first use (see the class docstring).

        Raises:
            RuntimeError: naming ``concreteplant.image_edit.model`` when diffusers cannot load it (no weights
                offline, a wrong id or variant).
        """
        if self._pipeline is None:
            self._pipeline = self._load_pipeline()
        return self._pipeline

    def _load_pipeline(self) -> Any:
        from diffusers import AutoPipelineForImage2Image

        device = self.cfg.resolve_device()
        dtype = self.cfg.resolve_dtype(device)
        try:
            # diffusers 0.42 names the argument ``dtype`` (``torch_dtype`` is its deprecated alias)
            pipe = AutoPipelineForImage2Image.from_pretrained(self.cfg.model, dtype=dtype, variant=self.cfg.variant)
        except Exception as err:  # hub/network/file errors come in many types; re-raised with the key named
            raise RuntimeError(
                f"{_PARAMS_KEY}.model: diffusers cannot load {self.cfg.model!r} (variant {self.cfg.variant!r}, "
                f"dtype {dtype}): {type(err).__name__}: {err}"
            ) from err
        pipe = pipe.to(device)
        pipe.set_progress_bar_config(disable=True)
        return pipe

    def edit(
        self,
        items: Sequence[tuple[str, str | os.PathLike, str]],
        desc: str = "concreteplant: SDXL-Turbo negatives",
        progress: bool = True,
    ) -> list[tuple[str | None, str | None]]:
        """Edit each anchor image to match its rewritten caption t'_i.

        Args:
            items: ``[Q]`` tuples ``(anchor_id, image_path, negative_caption)``. The anchor id names the output
                file ``out_dir/<anchor_id>.png`` (written atomically, replacing an existing one).
            desc: label of the progress bar (tqdm; its rate is in images per second).
            progress: ``False`` hides the bar (when the caller keeps its own).

        Returns:
            ``[Q]`` results in input order: ``(path, None)`` with ``path = str(out_dir / f"{anchor_id}.png")`` for
            a stored edit, else ``(None, reason)`` with reason ``"unreadable"`` or ``"degenerate"``.

        Raises:
            ValueError: naming the item index, for an item that is not a 3-tuple, an anchor id that is empty, is
                ``.``/``..`` or contains a path separator, an empty caption, or an anchor id given twice.
            TypeError: naming the item index, for a non-string anchor id or caption.
            RuntimeError: if the pipeline cannot be loaded or returns images of the wrong shape.
        """
        from tqdm.auto import tqdm

        items = list(items)
        self._check_items(items)
        results: list[tuple[str | None, str | None]] = [(None, None)] * len(items)
        bs = self.cfg.batch_size
        with tqdm(total=len(items), desc=desc, unit="img", disable=not progress) as bar:
            for start in range(0, len(items), bs):
                chunk = []
                for k in range(start, min(start + bs, len(items))):
                    anchor_id, path, caption = items[k]
                    image = _load_square(path, self.cfg.size)
                    if image is None:
                        results[k] = (None, "unreadable")
                        self.counts["unreadable"] += 1
                    else:
                        chunk.append((k, str(anchor_id), image, caption))
                retry = []
                for entry, out in zip(chunk, self._generate(chunk, attempt=0)):
                    kind = degeneracy(out)
                    if kind is None:
                        results[entry[0]] = (self._write(entry[1], out), None)
                    else:
                        self.counts[f"degenerate_{kind}"] += 1
                        retry.append(entry)
                self.counts["retried"] += len(retry)
                for entry, out in zip(retry, self._generate(retry, attempt=1)):
                    kind = degeneracy(out)
                    if kind is None:
                        results[entry[0]] = (self._write(entry[1], out), None)
                    else:
                        self.counts[f"degenerate_{kind}"] += 1
                        self.counts["degenerate"] += 1
                        results[entry[0]] = (None, "degenerate")
                bar.update(min(start + bs, len(items)) - start)
        self.counts["edited"] += sum(path is not None for path, _ in results)
        return results

    @staticmethod
    def _check_items(items: list) -> None:
        seen: dict[str, int] = {}
        for k, item in enumerate(items):
            if isinstance(item, (str, bytes)) or not isinstance(item, Sequence) or len(item) != 3:
                raise ValueError(f"SdxlTurboNegatives.edit: items[{k}] must be (anchor_id, image_path, "
                                 f"negative_caption), got {item!r}")
            anchor_id, _, caption = item
            if not isinstance(anchor_id, str):
                raise TypeError(f"items[{k}]: anchor_id is {type(anchor_id).__name__}, expected str")
            if not isinstance(caption, str):
                raise TypeError(f"items[{k}]: negative_caption is {type(caption).__name__}, expected str")
            if anchor_id in ("", ".", "..") or any(sep in anchor_id for sep in ("/", "\\", os.sep, "\0")):
                raise ValueError(f"items[{k}]: anchor_id {anchor_id!r} cannot name a file in out_dir")
            if not caption.strip():
                raise ValueError(f"items[{k}] ({anchor_id}): negative_caption is empty")
            if anchor_id in seen:
                raise ValueError(f"items[{k}]: anchor_id {anchor_id!r} repeats items[{seen[anchor_id]}] "
                                 "(both would write the same file)")
            seen[anchor_id] = k

    def _generate(self, chunk: list, attempt: int) -> np.ndarray:
        """One pipeline call; returns ``[B, size, size, 3]`` float32 in [0, 1] (NaN possible)."""
        size = self.cfg.size
        if not chunk:
            return np.zeros((0, size, size, 3), dtype=np.float32)
        import torch

        generators = [torch.Generator(device="cpu").manual_seed(item_seed(self.cfg.seed, aid, attempt))
                      for _, aid, _, _ in chunk]
        out = self.pipeline(
            prompt=[caption for _, _, _, caption in chunk],
            image=[image for _, _, image, _ in chunk],
            strength=self.cfg.strength,
            num_inference_steps=self.cfg.num_inference_steps,
            guidance_scale=self.cfg.guidance_scale,
            generator=generators,
            output_type="np",
        )
        images = np.asarray(out.images, dtype=np.float32)
        if images.shape != (len(chunk), size, size, 3):
            raise RuntimeError(
                f"SDXL-Turbo pipeline returned images of shape {images.shape}, expected {(len(chunk), size, size, 3)}"
            )
        return images

    def _write(self, anchor_id: str, image: np.ndarray) -> str:
        from PIL import Image

        from concrete_jungle.io import atomic_write

        path = self.out_dir / f"{anchor_id}.png"
        with atomic_write(path, "wb", encoding=None) as fh:
            Image.fromarray(_to_uint8(image)).save(fh, format="PNG")
        return str(path)
