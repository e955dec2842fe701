"""Hard negative images v'_i for ConcretePlant (paper Sec. 2.2 "Hard Negative Mining").

The paper edits the anchor image with SDXL-Turbo, v'_i = f_gen(v_i, t'_i). This repository has no
image generator, so it offers two stand-ins:

* :class:`RetrievalNegatives` (real profile, here): v'_i is the corpus image, other than the anchor's,
  whose human captions best match the rewritten caption t'_i, as NegCLIP (Yuksekgonul et al. 2023)
  retrieved its negative images from the training set. Matching is TF-IDF cosine over word
  uni- and bi-grams (scikit-learn).
* :class:`SceneNegatives` (world profile): the rewrite t'_i is applied to the anchor's scene graph and the
  edited scene is re-rendered, so v'_i differs from v_i in exactly the rewritten element.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer

__all__ = ["RetrievalNegatives", "SceneNegatives", "replacement_text"]


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
            scene graph), ``no_slot`` (the keyword touches no caption slot) or ``unrenderable`` (the new words
            are not a value of this world for the slot's kind, or the relation cannot be realised).
        """
        from concrete_jungle.corpus.scene_world import Scene, edit_scene, render_scene

        if "scene" not in record or "anchor_slots" not in record:
            return None, "no_scene"
        best, best_overlap = None, 0
        for slot in record["anchor_slots"]:
            overlap = min(end, slot["end"]) - max(start, slot["start"])
            if overlap > best_overlap:
                best, best_overlap = slot, overlap
        if best is None:
            return None, "no_slot"
        edited = edit_scene(Scene.from_dict(record["scene"]), best, replacement_text(caption, negative_caption),
                            self.cfg)
        if edited is None:
            return None, "unrenderable"
        path = self.out_dir / f"{record['id']}.png"
        render_scene(edited, self.cfg).save(path)
        return str(path), None
