"""Paired comparison of two models' per-item verdicts on the same benchmark items.

SugarCrepe-style benchmarks give one binary verdict per item (the positive caption beats the hard negative for
the image). Two fine-tunes of one base model are scored on the *same* items, so their difference is measured
paired: with n items, p01 the share only model A gets right and p10 the share only model B gets right,

    delta = acc_A - acc_B = p01 - p10,        SE_paired = sqrt(p01 + p10 - (p01 - p10)^2) / sqrt(n),

which is smaller than the unpaired SE whenever the models agree on most items (``../shared/notes``,
"measuring small effects"). The exact McNemar test (binomial on the discordant items, statsmodels) gives a
two-sided p-value for "A and B are equally accurate". :func:`paired_bootstrap_ci` gives a bootstrap 95 % CI of
delta that resamples *items* (both models' verdicts on an item stay together), :func:`holm` adjusts the
p-values of a family of comparisons for multiple testing (Holm 1979, step-down, controls the family-wise error),
and :func:`mcnemar_mde` gives the minimal detectable effect of a comparison: the smallest |delta| that McNemar's
test at level alpha would find with the given power on n items at the observed discordance (Connor 1987).

Verdicts are the files the evaluation stages write (``data/<profile>/verdicts/<model>.json``):
``{"model": str, "verdicts": {subset: {item_id: bool}}}``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = ["paired_comparison", "paired_bootstrap_ci", "holm", "mcnemar_mde", "mde_from_ci"]

#: Resamples drawn per batch by :func:`paired_bootstrap_ci` (bounds memory: BCa's jackknife is n x n otherwise).
_BATCH = 500


def _flatten(verdicts: Mapping[str, Mapping[str, bool]], name: str,
             who: str = "paired_comparison") -> dict[tuple[str, str], bool]:
    if not isinstance(verdicts, Mapping) or not verdicts:
        raise ValueError(f"{who}: verdicts of {name} must be a non-empty {{subset: {{item: bool}}}}")
    flat = {}
    for subset, items in verdicts.items():
        if not isinstance(items, Mapping):
            raise ValueError(f"{who}: verdicts of {name}, subset {subset!r} is not a mapping")
        for item, ok in items.items():
            if not isinstance(ok, bool):
                raise ValueError(f"{who}: verdict of {name} for {subset}/{item} is {ok!r}, not a bool")
            flat[(str(subset), str(item))] = ok
    return flat


def _aligned(a, b, who: str) -> tuple[dict, dict]:
    fa, fb = _flatten(a, "A", who), _flatten(b, "B", who)
    if fa.keys() != fb.keys():
        only_a, only_b = len(fa.keys() - fb.keys()), len(fb.keys() - fa.keys())
        raise ValueError(f"{who}: the models were scored on different items ({only_a} only in A, "
                         f"{only_b} only in B); a paired comparison needs the same items")
    return fa, fb


def paired_comparison(a: Mapping[str, Mapping[str, bool]], b: Mapping[str, Mapping[str, bool]]) -> dict:
    """Paired accuracy difference of model A over model B on the same items (micro over all subsets).

    Args:
        a, b: per-item verdicts ``{subset: {item_id: bool}}`` (True = correct), over the same items.

    Returns:
        ``{"n", "accuracy_a", "accuracy_b", "delta", "se_paired", "only_a", "only_b", "mcnemar_p"}``: ``delta``
        and ``se_paired`` are fractions (multiply by 100 for points); ``only_a`` / ``only_b`` count the items only
        A / only B gets right; ``mcnemar_p`` is the exact two-sided McNemar p-value (1.0 when no item is
        discordant). Every value is finite.

    Raises:
        ValueError: if either input is empty or malformed, or the two cover different items (naming how many
            items only one of them has).
    """
    fa, fb = _aligned(a, b, "paired_comparison")
    n = len(fa)
    n01 = sum(fa[k] and not fb[k] for k in fa)
    n10 = sum(fb[k] and not fa[k] for k in fa)
    p01, p10 = n01 / n, n10 / n
    if n01 + n10:
        from statsmodels.stats.contingency_tables import mcnemar

        n11 = sum(fa[k] and fb[k] for k in fa)
        n00 = n - n11 - n01 - n10
        p = float(mcnemar([[n11, n01], [n10, n00]], exact=True).pvalue)
    else:
        p = 1.0
    return {
        "n": n,
        "accuracy_a": sum(fa.values()) / n,
        "accuracy_b": sum(fb.values()) / n,
        "delta": p01 - p10,
        "se_paired": math.sqrt(max(p01 + p10 - (p01 - p10) ** 2, 0.0) / n),
        "only_a": n01,
        "only_b": n10,
        "mcnemar_p": min(max(p, 0.0), 1.0),
    }


def _difference(x, y, axis=-1):
    return x.mean(axis=axis) - y.mean(axis=axis)


def paired_bootstrap_ci(a: Mapping[str, Mapping[str, bool]], b: Mapping[str, Mapping[str, bool]], *,
                        n_resamples: int = 9999, confidence_level: float = 0.95, method: str = "BCa",
                        seed: int = 0) -> dict:
    """Bootstrap confidence interval of the paired accuracy difference of model A over model B (micro, all subsets).

    Items are resampled with replacement, each item carrying both models' verdicts (``scipy.stats.bootstrap`` with
    ``paired=True``), so the interval reflects the same paired design as ``se_paired`` of :func:`paired_comparison`
    (paper Tab. 2 / Tab. 3 differences; ``../shared/notes/measuring-small-effects.md``). The generator is
    ``numpy.random.default_rng(seed)``: equal inputs and seed give the same interval.

    Degenerate cases, so that every returned number is finite:

    * every item has the same difference (e.g. the models agree on every item: delta = 0): every resample has that
      difference, so the interval is ``[delta, delta]`` (``method`` = ``"degenerate"``; scipy would return NaN);
    * ``method="BCa"`` whose interval is not finite or that scipy flags as degenerate (its bias / acceleration
      terms are 0/0 on near-constant data): the percentile interval of the *same* resamples is returned instead
      (``method`` = ``"percentile"`` in the result, ``"fallback": True``).

    Args:
        a, b: per-item verdicts ``{subset: {item_id: bool}}`` (True = correct), over the same items.
        n_resamples: bootstrap resamples (>= 1; scipy's default 9999).
        confidence_level: two-sided level in (0, 1), e.g. 0.95.
        method: ``"BCa"`` (bias-corrected and accelerated, default) or ``"percentile"``.
        seed: seed of the resampling generator.

    Returns:
        ``{"n", "delta", "low", "high", "confidence_level", "n_resamples", "method", "fallback"}``: ``delta`` =
        acc_A - acc_B and the bounds ``low`` <= ``high`` are fractions in [-1, 1] (multiply by 100 for points);
        ``method`` is the one that produced the interval (``"BCa"``, ``"percentile"`` or ``"degenerate"``).

    Raises:
        ValueError: as :func:`paired_comparison` (empty / malformed verdicts, different items), an unknown
            ``method``, ``n_resamples`` < 1 or ``confidence_level`` outside (0, 1).
    """
    if method not in ("BCa", "percentile"):
        raise ValueError(f"paired_bootstrap_ci: method must be 'BCa' or 'percentile', got {method!r}")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 1:
        raise ValueError(f"paired_bootstrap_ci: n_resamples must be an int >= 1, got {n_resamples!r}")
    if not 0 < confidence_level < 1:
        raise ValueError(f"paired_bootstrap_ci: confidence_level must lie in (0, 1), got {confidence_level!r}")
    import warnings

    import numpy as np
    from scipy.stats import bootstrap

    fa, fb = _aligned(a, b, "paired_bootstrap_ci")
    keys = sorted(fa)
    x = np.fromiter((fa[k] for k in keys), dtype=np.float64, count=len(keys))
    y = np.fromiter((fb[k] for k in keys), dtype=np.float64, count=len(keys))
    d = x - y
    delta = float(d.mean())
    out = {"n": len(keys), "delta": delta, "confidence_level": float(confidence_level),
           "n_resamples": n_resamples, "fallback": False}
    if np.all(d == d[0]):
        return {**out, "low": delta, "high": delta, "method": "degenerate"}

    def run(how: str, previous=None):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            res = bootstrap((x, y), _difference, n_resamples=0 if previous is not None else n_resamples,
                            batch=_BATCH, vectorized=True, paired=True, confidence_level=confidence_level,
                            method=how, bootstrap_result=previous, rng=np.random.default_rng(seed))
        ci = res.confidence_interval
        ok = math.isfinite(ci.low) and math.isfinite(ci.high) and not any(
            issubclass(w.category, RuntimeWarning) or "Degenerate" in w.category.__name__ for w in caught)
        return res, float(ci.low), float(ci.high), ok

    res, low, high, ok = run(method)
    used = method
    if not ok and method == "BCa":
        # Same resamples (n_resamples=0 + bootstrap_result reuses them), percentile interval.
        res, low, high, ok = run("percentile", previous=res)
        used, out["fallback"] = "percentile", True
    if not ok:  # cannot happen for non-constant differences; keep the promise of finite numbers anyway
        boot = np.asarray(res.bootstrap_distribution, dtype=np.float64)
        alpha = (1 - confidence_level) / 2
        low, high = (float(np.quantile(boot, alpha)), float(np.quantile(boot, 1 - alpha))) if boot.size else \
            (delta, delta)
        used, out["fallback"] = "percentile", True
    low, high = max(-1.0, min(low, high)), min(1.0, max(low, high))
    return {**out, "low": low, "high": high, "method": used}


def holm(pvalues) -> list[float]:
    """Holm-adjusted p-values of one family of tests (``statsmodels.stats.multitest.multipletests``, ``"holm"``).

    The family-wise error rate is controlled at alpha when the adjusted values are compared with alpha: sorted
    ascending, p_(k) is multiplied by (m - k + 1), made monotone and capped at 1. The report applies it per suite
    headline to all pairs of models compared on it (paper Tab. 2 / Tab. 3 comparisons).

    Args:
        pvalues: raw p-values (any iterable of finite numbers in [0, 1]), in the family's order.

    Returns:
        The adjusted p-values, same order and length (fractions in [0, 1]); ``[]`` for an empty family.

    Raises:
        ValueError: a value that is not a finite number in [0, 1] (naming its position).
    """
    values = []
    for k, p in enumerate(pvalues):
        try:
            value = float(p) if not isinstance(p, (bool, str)) else math.nan
        except (TypeError, ValueError):
            value = math.nan
        if not (math.isfinite(value) and 0 <= value <= 1):
            raise ValueError(f"holm: p-value {k} is {p!r}, not a finite number in [0, 1]")
        values.append(value)
    if not values:
        return []
    from statsmodels.stats.multitest import multipletests

    adjusted = multipletests(values, method="holm")[1]
    return [min(max(float(p), 0.0), 1.0) for p in adjusted]


def mcnemar_mde(n: int, discordance: float, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """Minimal detectable effect of a paired comparison: the smallest accuracy difference |delta| = |p01 - p10|
    that a two-sided McNemar test at level ``alpha`` detects with probability ``power`` on ``n`` items.

    Connor's (1987) normal approximation of the McNemar sample size, solved for delta at fixed n:

        sqrt(n) * delta = z_{1-alpha/2} * sqrt(psi) + z_{power} * sqrt(psi - delta^2),

    with psi = p01 + p10 the share of discordant items (the items only one model gets right). The observed
    discordance is the planning value, and since |delta| <= psi always, psi is taken as max(psi, delta): two
    models that agree on every item still get a finite MDE (the effect that would need delta discordant items).
    The root is found with :func:`scipy.optimize.brentq`. With n = 875 and psi = 0.2 at alpha = 0.05 and power 0.8
    the MDE is about 4.2 points; it shrinks as 1 / sqrt(n) and grows as sqrt(psi).

    Args:
        n: items compared (>= 1).
        discordance: psi in [0, 1] (a fraction, not points).
        alpha: two-sided level in (0, 1).
        power: in (0, 1).

    Returns:
        The MDE as a fraction in (0, 1] (multiply by 100 for points); 1.0 when no effect up to 100 points is
        detectable (n too small for ``alpha``). Always finite.

    Raises:
        ValueError: n < 1, discordance outside [0, 1], alpha or power outside (0, 1) (each named).
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"mcnemar_mde: n must be an int >= 1, got {n!r}")
    if not (isinstance(discordance, (int, float)) and 0 <= discordance <= 1):
        raise ValueError(f"mcnemar_mde: discordance must be a fraction in [0, 1], got {discordance!r}")
    for name, value in (("alpha", alpha), ("power", power)):
        if not 0 < value < 1:
            raise ValueError(f"mcnemar_mde: {name} must lie in (0, 1), got {value!r}")
    from scipy.optimize import brentq
    from scipy.stats import norm

    z_a, z_b = float(norm.ppf(1 - alpha / 2)), float(norm.ppf(power))

    def excess(delta: float) -> float:
        psi = max(float(discordance), delta)
        return math.sqrt(n) * delta - z_a * math.sqrt(psi) - z_b * math.sqrt(max(psi - delta * delta, 0.0))

    if excess(1.0) <= 0:
        return 1.0
    if excess(1e-12) >= 0:  # power below alpha / 2: "detecting" needs no effect at all, a meaningless MDE
        raise ValueError(f"mcnemar_mde: power {power!r} is too low for alpha {alpha!r} (z_power + z_(1-alpha/2) <= 0); "
                         "use power >= 0.5")
    return float(min(max(brentq(excess, 1e-12, 1.0, xtol=1e-10), 0.0), 1.0))


def mde_from_ci(low: float, high: float, *, confidence_level: float = 0.95, alpha: float = 0.05,
                power: float = 0.8) -> float:
    """Minimal detectable effect from a confidence interval of a difference, for tests that are not McNemar's (the
    seeds' item-clustered Δ with its bootstrap CI): the normal approximation SE = (high - low) / (2 z_{(1+cl)/2}),
    MDE = (z_{1-alpha/2} + z_{power}) * SE. Same units as the bounds (fractions or points). For a 95 % CI at
    alpha 0.05 and 80 % power the MDE is 0.71 of the CI's width.

    Raises:
        ValueError: ``high < low``, non-finite bounds, or a level / alpha / power outside (0, 1).
    """
    if not (math.isfinite(low) and math.isfinite(high)) or high < low:
        raise ValueError(f"mde_from_ci: need finite bounds with low <= high, got [{low!r}, {high!r}]")
    for name, value in (("confidence_level", confidence_level), ("alpha", alpha), ("power", power)):
        if not 0 < value < 1:
            raise ValueError(f"mde_from_ci: {name} must lie in (0, 1), got {value!r}")
    from scipy.stats import norm

    se = (high - low) / (2 * float(norm.ppf((1 + confidence_level) / 2)))
    return float((norm.ppf(1 - alpha / 2) + norm.ppf(power)) * se)
