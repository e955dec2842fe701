"""Concreteness-aware keyword sampling of ConcretePlant (paper Sec. 2.2 and Appendix A.1).

For each anchor caption t_i with rated keyword candidates, one keyword is chosen in two steps:

1. **Compositional type** (A.1, "Balancing Compositional Class"): relation when the anchor has a rated
   relation candidate (relations are sparse, so they take priority); otherwise deficit-based quota sampling
   between attribute and object: with running counts n_attr, n_obj of the keywords chosen so far, the type
   whose count lies further below its quota (half of the attribute+object total) is taken; equal deficits are
   broken by a seeded coin flip. When only one of the two types is present it is taken, and the other
   type's deficit grows, so it is preferred at the next anchor that has both. With ``cut="type"``, on a
   stream where both are always available the two counts never differ by more than one.
2. **Keyword within the type**, by the sampler's mode (the three ConcreteBatch variants of Sec. 3.1):

   * ``"hc"`` (D_hc): keep the top-K candidates by concreteness c, sample from softmax(c / T);
   * ``"lc"`` (D_lc): the mirror image — the bottom-K, sampled from softmax(−c / T);
   * ``"wo"`` (D_wo): uniform over all the type's rated candidates (concreteness ignored).

Only rated candidates are eligible: c_i of the chosen keyword feeds the Cement loss adaptive margin
(Sec. 2.3). Ties in the top-K / bottom-K cut are resolved by caption order (earlier candidate first).

Order of the two steps (``cut`` argument). ``cut="type"`` (this class's default) is the order above: type
first, then the top-K cut inside the type. The pipeline's default (``concreteplant.cut`` in params.yaml) is
``"global"``. Sec. 2.2 can also be read the other way round — "Top-K sampling is first
performed ..., then c_i = sample(top-K(c_i^{1:n})) is defined by simple rule based sampling to balance ARO"
— which is ``cut="global"``:

* ``hc`` / ``lc``: the top-K (bottom-K) of ALL the anchor's rated candidates form the pool; the type rule
  (relation first, else quota) chooses among the types present in the pool; the keyword is drawn from
  softmax(±c/T) over the pool's candidates of that type;
* ``wo``: a uniformly random rated candidate of the anchor (no concreteness, no type rule).

On 2,000 COCO val2017 anchors (K = 3, T = 1) ``cut="global"`` gives mean / median c_i of 4.70 / 4.85
(hc), 3.58 / 3.68 (lc), 4.33 / 4.69 (wo), close to the paper's Table 1 (4.77 / 4.85, 3.81 / 3.89,
4.29 / 4.63); ``cut="type"`` gives 3.79 / 3.77, 3.60 / 3.68, 3.70 / 3.75, because every anchor with a
relation (about half) is forced to a relation keyword, whose ratings are low ("next" 2.56, "front" 3.77).

``cut="matched"`` (the type-matched control D_hc^type / D_lc^type, ``params.DATASET_SAMPLING``): as ``"type"``,
but only types with at least two distinct ratings among the anchor's rated candidates are available, so that
the top-K and bottom-K picks can differ; an anchor without such a type is skipped (``"no_type_contrast"``). Two
samplers with the same seed and anchors choose the same type for every anchor whatever their mode, since the type
rule reads only the available types, the counts of types chosen and its own coin. On 300 COCO val2017 anchors
``cut="type"`` gave the pair only 0.13 points of mean c_i apart (most anchors have a single candidate of their
relation-first type).

Caveat of ``cut="global"``: inside a pool of K candidates the attribute/object quota can rarely act, so the
type mix follows concreteness (on 600 COCO anchors: hc 13 % attribute / 4 % relation / 83 % object, lc 26 /
49 / 26 %). ConcretePlant therefore reports ``type_share`` per dataset next to c_i, so that a D_hc vs D_lc
difference can be read against the type mix.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections import Counter
from collections.abc import Sequence

import numpy as np

from concrete_jungle.concreteplant.keywords import Candidate

__all__ = ["SAMPLING_MODES", "CUT_ORDERS", "KeywordSampler", "within_type_probabilities"]

SAMPLING_MODES = ("hc", "lc", "wo")
CUT_ORDERS = ("type", "global", "matched")


def within_type_probabilities(
    concreteness: Sequence[float], mode: str, top_k: int, temperature: float
) -> np.ndarray:
    """Selection probabilities of the candidates of one type (paper A.1: top-K, then softmax(C/T)).

    Args:
        concreteness: c^1..c^n of the candidates (Brysbaert units, 1–5), shape (n,), n >= 1.
        mode: ``"hc"`` (top-K, softmax(c/T)), ``"lc"`` (bottom-K, softmax(−c/T)) or ``"wo"`` (uniform, K and T
            unused).
        top_k: K >= 1; candidates outside the top-/bottom-K get probability 0.
        temperature: T > 0.

    Returns:
        float64 array of shape (n,) summing to 1. Example: c = [5, 4, 3], ``"hc"``, K = 2, T = 1 gives
        softmax([5, 4]) = [0.731, 0.269, 0].

    Raises:
        ValueError: on an empty input, non-finite concreteness, or an invalid mode / K / T.
    """
    _check_params(mode, top_k, temperature)
    c = np.asarray(concreteness, dtype=np.float64)
    if c.ndim != 1 or c.size == 0:
        raise ValueError(f"concreteness must be a non-empty 1-D sequence, got shape {c.shape}")
    if not np.all(np.isfinite(c)):
        raise ValueError(f"concreteness must be finite, got {c.tolist()}")
    p = np.zeros_like(c)
    if mode == "wo":
        p[:] = 1.0 / c.size
        return p
    signed = c if mode == "hc" else -c
    order = np.argsort(-signed, kind="stable")  # stable: ties keep caption order
    keep = order[: min(top_k, c.size)]
    # shift before dividing: a tiny T gives -inf (weight 0) for all but the best, never inf - inf = NaN
    with np.errstate(over="ignore"):  # -x / tiny T overflows to -inf on purpose: weight exp(-inf) = 0
        z = (signed[keep] - signed[keep].max()) / temperature
    w = np.exp(z)
    p[keep] = w / w.sum()
    return p


def _check_params(mode: str, top_k: int, temperature: float) -> None:
    if mode not in SAMPLING_MODES:
        raise ValueError(f"sampling mode must be one of {SAMPLING_MODES}, got {mode!r}")
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise ValueError(f"top_k must be an int >= 1, got {top_k!r}")
    if not isinstance(temperature, (int, float)) or not np.isfinite(temperature) or temperature <= 0:
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")


class KeywordSampler:
    """Choose one keyword per anchor: relation priority, attribute/object quota, concreteness-biased pick.

    Args:
        mode: ``"hc"``, ``"lc"`` or ``"wo"`` (see the module docstring).
        top_k: K of the top-K (``hc``) / bottom-K (``lc``) cut, >= 1.
        temperature: T of softmax(±c / T), > 0.
        seed: seed of the sampler's private ``numpy.random.Generator`` (keyword draws) and
            ``random.Random`` (quota ties). The same seed and the same stream of anchors give the same picks.
        cut: ``"type"`` (choose the type, then cut top-K inside it; default), ``"global"`` (cut top-K over
            all candidates, then choose the type inside the cut) or ``"matched"`` (``"type"`` among the types
            whose candidates' ratings differ) — see the module docstring.

    Attributes:
        type_counts: ``Counter`` of the types chosen so far ("attribute", "relation", "object").
        skip_counts: ``Counter`` of skip reasons returned so far.

    Raises:
        ValueError: on an invalid mode, top_k, temperature or cut (names the parameter).
    """

    def __init__(self, mode: str, top_k: int, temperature: float, seed: int, cut: str = "type") -> None:
        _check_params(mode, top_k, temperature)
        if cut not in CUT_ORDERS:
            raise ValueError(f"cut must be one of {CUT_ORDERS}, got {cut!r}")
        self.cut = cut
        self.mode = mode
        self.top_k = int(top_k)
        self.temperature = float(temperature)
        self.seed = seed
        self._rng = np.random.default_rng(seed)
        self._coin = random.Random(seed)
        self._cdf_cache: dict[tuple, list[float]] = {}
        self.type_counts: Counter[str] = Counter()
        self.skip_counts: Counter[str] = Counter()

    def choose_type(self, available: set[str]) -> str:
        """Compositional type for an anchor whose rated candidates have the types ``available`` (A.1).

        Relation first; otherwise the attribute/object type with the larger quota deficit (seeded coin on a
        tie). Does not update :attr:`type_counts` (``sample`` does).

        Raises:
            ValueError: if ``available`` holds no known type.
        """
        if "relation" in available:
            return "relation"
        has_attr, has_obj = "attribute" in available, "object" in available
        if has_attr and has_obj:
            n_attr, n_obj = self.type_counts["attribute"], self.type_counts["object"]
            quota = (n_attr + n_obj + 1) / 2.0
            d_attr, d_obj = quota - n_attr, quota - n_obj
            if d_attr == d_obj:
                return "attribute" if self._coin.random() < 0.5 else "object"
            return "attribute" if d_attr > d_obj else "object"
        if has_attr:
            return "attribute"
        if has_obj:
            return "object"
        raise ValueError(f"choose_type: no known compositional type in {sorted(available)}")

    def sample(self, candidates: Sequence[Candidate]) -> tuple[Candidate | None, str | None]:
        """Pick the keyword of one anchor caption from its candidates (paper Sec. 2.2 / A.1).

        Args:
            candidates: the anchor's candidates from :func:`~concrete_jungle.concreteplant.keywords.
                extract_candidates`; unrated ones (concreteness ``None``) are never chosen.

        Returns:
            ``(keyword, None)``, or ``(None, reason)`` with reason ``"no_candidate"`` (empty list),
            ``"no_rated_candidate"`` (no candidate has a Brysbaert rating) or, with ``cut="matched"``,
            ``"no_type_contrast"`` (no type has two candidates of different ratings). Reasons are counted in
            :attr:`skip_counts`, chosen types in :attr:`type_counts`.

        Raises:
            TypeError: if an element is not a ``Candidate``.
        """
        for k, cand in enumerate(candidates):
            if not isinstance(cand, Candidate):
                raise TypeError(f"sample: candidates[{k}] is a {type(cand).__name__}, expected Candidate")
        if len(candidates) == 0:
            self.skip_counts["no_candidate"] += 1
            return None, "no_candidate"
        rated = [c for c in candidates if c.concreteness is not None]
        if not rated:
            self.skip_counts["no_rated_candidate"] += 1
            return None, "no_rated_candidate"
        if self.cut == "global":
            if self.mode == "wo":
                chosen = rated[int(self._rng.integers(len(rated)))]
                self.type_counts[chosen.type] += 1
                return chosen, None
            if len(rated) > self.top_k:  # otherwise the cut keeps every candidate, in order
                sign = 1.0 if self.mode == "hc" else -1.0
                order = sorted(range(len(rated)), key=lambda i: -sign * rated[i].concreteness)  # stable
                rated = [rated[i] for i in sorted(order[: self.top_k])]
        if self.cut == "matched":
            ratings: dict[str, set[float]] = {}
            for c in rated:
                ratings.setdefault(c.type, set()).add(c.concreteness)
            available = {t for t, values in ratings.items() if len(values) > 1}
            if not available:
                self.skip_counts["no_type_contrast"] += 1
                return None, "no_type_contrast"
            rated = [c for c in rated if c.type in available]
        ctype = self.choose_type({c.type for c in rated})
        pool = [c for c in rated if c.type == ctype]
        idx = self._draw(pool)
        self.type_counts[ctype] += 1
        return pool[idx], None

    def _draw(self, pool: Sequence[Candidate]) -> int:
        """Index into ``pool`` drawn from :func:`within_type_probabilities`, one uniform draw of ``_rng``.

        Same index and same generator stream as ``self._rng.choice(len(pool), p=p)``: NumPy draws one uniform
        u and returns ``searchsorted(cumsum(p) / cumsum(p)[-1], u, side="right")``. The normalised cdf of
        each distinct pool (tuple of concreteness values, with mode, K and T) is computed once with the same
        float operations — the softmax's ``exp`` and sum as NumPy calls on the same arrays as in
        :func:`within_type_probabilities` (bit-identical p) — and cached; a one-candidate pool still consumes
        its draw. ``tests/test_sampling.py`` checks the equivalence with ``Generator.choice``.
        """
        u = self._rng.random()
        n = len(pool)
        if n == 1:
            return 0
        key = (self.mode, self.top_k, self.temperature, *[c.concreteness for c in pool])
        cdf = self._cdf_cache.get(key)
        if cdf is None:
            if len(self._cdf_cache) >= _CDF_CACHE_SIZE:
                self._cdf_cache.clear()
            cdf = self._cdf_cache[key] = _normalised_cdf(key[3:], self.mode, self.top_k, self.temperature)
        return bisect.bisect_right(cdf, u)


_CDF_CACHE_SIZE = 100_000


def _normalised_cdf(concreteness: Sequence[float], mode: str, top_k: int, temperature: float) -> list[float]:
    """``cumsum(p) / cumsum(p)[-1]`` of ``p = within_type_probabilities(...)``, bit for bit, as a list."""
    n = len(concreteness)
    if mode == "wo":
        p = [1.0 / n] * n
    else:
        score = [c / temperature for c in concreteness]
        if mode == "lc":
            score = [-x for x in score]
        keep = sorted(range(n), key=lambda i: -score[i])[:top_k]  # stable, as np.argsort(kind="stable")
        top = max(score[i] for i in keep)
        w = np.exp(np.array([score[i] - top for i in keep], dtype=np.float64))
        p = [0.0] * n
        for i, wi in zip(keep, (w / w.sum()).tolist()):
            p[i] = wi
    cdf = list(itertools.accumulate(p))
    return [x / cdf[-1] for x in cdf]
