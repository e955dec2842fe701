"""Visual concreteness of keywords measured on the corpus itself (Hessel, Mimno & Lee 2018), a pluggable alternative
to the Brysbaert ratings (the paper's future work, Sec. 5; issue 12, item 9).

A word is visually concrete when the images whose captions use it look alike: their nearest neighbours in an
image-embedding space are, more often than chance, images whose captions use the word too. With ``n`` images, the
set ``I_w`` of images whose captions contain word ``w`` and the ``k`` nearest neighbours ``NN_k(i)`` of image ``i``
(cosine similarity of L2-normalised embeddings, ``i`` itself excluded),

    overlap(w) = mean over i in I_w of |NN_k(i) ∩ I_w| / k,       chance(w) = (|I_w| - 1) / (n - 1),
    concreteness(w) = overlap(w) / chance(w),

so 1 is what randomly placed images give and larger is more concrete (Hessel et al.'s MNI_k ratio; ``chance``
counts the other images, as the neighbour set does). Words with fewer than ``min_images`` images are not scored
(their ratio is noise).

:func:`to_rating_scale` maps the scores onto the Brysbaert 1-5 scale by **quantile mapping** against reference
ratings (the Brysbaert ratings of the same words): the i-th smallest visual score gets the i-th smallest reference
rating, so the sampler's top-K, the Cement loss's c̃ = 4 and the report's concreteness bins keep their meaning
while the **order** of the words is the visual one. Imports no torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

__all__ = ["word_images", "visual_concreteness", "to_rating_scale"]


def word_images(words_per_image: Sequence[Iterable[str]]) -> dict[str, np.ndarray]:
    """``{word: sorted indices of the images whose word set holds it}``.

    Args:
        words_per_image: per image (row ``i`` of the embeddings), the words of its captions (e.g. the lemmas of its
            keyword candidates); duplicates are counted once.

    Raises:
        TypeError: an entry is a plain string (a word set is expected, not one caption).
    """
    index: dict[str, list[int]] = {}
    for i, words in enumerate(words_per_image):
        if isinstance(words, str):
            raise TypeError(f"word_images: image {i} has the string {words!r}; give each image a set of words")
        for w in set(words):
            index.setdefault(w, []).append(i)
    return {w: np.asarray(sorted(ix), dtype=np.int64) for w, ix in index.items()}


def _neighbours(features: np.ndarray, k: int, block: int = 256) -> np.ndarray:
    """``(n, k)`` indices of each row's ``k`` most cosine-similar other rows (ties: lower index first).

    Per block of rows: the k-th largest similarity by ``np.partition`` (O(n) per row), then only the rows at or above
    it are sorted by (-similarity, index), so memory is one ``(block, n)`` float64 matrix."""
    n = features.shape[0]
    out = np.empty((n, k), dtype=np.int64)
    for start in range(0, n, block):
        sims = features[start:start + block] @ features.T  # (b, n) cosine similarities
        rows = np.arange(sims.shape[0])
        sims[rows, start + rows] = -np.inf  # never one's own neighbour
        kth = np.partition(sims, n - k, axis=1)[:, n - k]  # the k-th largest similarity of each row
        for r in rows:
            cand = np.flatnonzero(sims[r] >= kth[r])
            out[start + r] = cand[np.lexsort((cand, -sims[r, cand]))][:k]
    return out


def visual_concreteness(features: np.ndarray, words_per_image: Sequence[Iterable[str]], *, k: int = 10,
                        min_images: int = 5) -> dict[str, float]:
    """Hessel et al. (2018) visual concreteness of every word used by at least ``min_images`` images.

    Args:
        features: ``(n, d)`` image embeddings, L2-normalised rows (cosine space), finite.
        words_per_image: ``n`` word collections, aligned with the rows.
        k: neighbours per image (``1 <= k < n``).
        min_images: the fewest images a scored word must have (``>= 2``).

    Returns:
        ``{word: concreteness}``: the neighbour overlap over chance (unitless, ``>= 0``; 1 = chance), finite.

    Raises:
        ValueError: a shape mismatch, non-finite or non-normalised features, ``k`` or ``min_images`` out of range.
    """
    features = np.asarray(features, dtype=np.float64)
    if features.ndim != 2 or features.shape[0] != len(words_per_image):
        raise ValueError(f"visual_concreteness: features of shape {features.shape} for {len(words_per_image)} "
                         "word sets; need (n, d) with one row per image")
    n = features.shape[0]
    if not np.isfinite(features).all():
        raise ValueError("visual_concreteness: features hold NaN or Inf")
    if not np.allclose(np.linalg.norm(features, axis=1), 1.0, atol=1e-4):
        raise ValueError("visual_concreteness: feature rows must be L2-normalised (cosine space)")
    if not 1 <= k < n:
        raise ValueError(f"visual_concreteness: k={k} must be in [1, n - 1] with n={n} images")
    if min_images < 2:
        raise ValueError(f"visual_concreteness: min_images={min_images} must be at least 2")
    nn = _neighbours(features, k)
    scores = {}
    for word, members in word_images(words_per_image).items():
        if len(members) < min_images:
            continue
        inside = np.zeros(n, dtype=bool)
        inside[members] = True
        overlap = inside[nn[members]].sum(axis=1).mean() / k
        chance = (len(members) - 1) / (n - 1)
        scores[word] = float(overlap / chance)
    return scores


def to_rating_scale(scores: Mapping[str, float], reference: Mapping[str, float]) -> dict[str, float]:
    """Quantile-map visual scores onto the reference rating scale (Brysbaert 1-5).

    The scored words that the reference rates give the target distribution: their reference ratings, sorted. A
    rated word at average rank r among them (ties in score share their mean rank, so equal scores get equal
    ratings) sits at quantile q = (r - 1) / (m - 1) and gets the target's value at q (linear interpolation between
    neighbouring order statistics); a word the reference does not rate gets the quantile of its score among the
    rated words' scores (linear interpolation, clamped at the ends), then the same mapping.

    Args:
        scores: ``{word: visual concreteness}`` (:func:`visual_concreteness`), finite.
        reference: ``{word: rating}`` on the target scale (e.g. ``load_concreteness()``), looked up by the word.

    Returns:
        ``{word: rating}`` for every scored word, in the range of the reference ratings used.

    Raises:
        ValueError: a non-finite score (naming the word), or fewer than two scored words rated by the reference.
    """
    import scipy.stats

    for w, v in scores.items():
        if not np.isfinite(v):
            raise ValueError(f"to_rating_scale: score of {w!r} is {v!r}, not finite")
    rated = sorted(w for w in scores if w in reference)
    if len(rated) < 2:
        raise ValueError(f"to_rating_scale: {len(rated)} scored words have a reference rating; need at least 2")
    target = np.sort(np.asarray([reference[w] for w in rated], dtype=np.float64))
    grid = np.linspace(0.0, 1.0, len(rated))
    x = np.asarray([scores[w] for w in rated], dtype=np.float64)
    q = (scipy.stats.rankdata(x, method="average") - 1) / (len(rated) - 1)
    out = {w: float(np.interp(qi, grid, target)) for w, qi in zip(rated, q)}
    ux, first = np.unique(x, return_index=True)  # strictly increasing scores and their (shared) quantiles
    for w in scores:
        if w not in out:
            out[w] = float(np.interp(np.interp(scores[w], ux, q[first]), grid, target))
    return out
