"""Paired comparison of two models' per-item verdicts on the same benchmark items.

SugarCrepe-style benchmarks give one binary verdict per item (the positive caption beats the hard negative for
the image). Two fine-tunes of one base model are scored on the *same* items, so their difference is measured
paired: with n items, p01 the share only model A gets right and p10 the share only model B gets right,

    delta = acc_A - acc_B = p01 - p10,        SE_paired = sqrt(p01 + p10 - (p01 - p10)^2) / sqrt(n),

which is smaller than the unpaired SE whenever the models agree on most items (``../shared/notes``,
"measuring small effects"). The exact McNemar test (binomial on the discordant items, statsmodels) gives a
two-sided p-value for "A and B are equally accurate".

Verdicts are the files the evaluation stages write (``data/<profile>/verdicts/<model>.json``):
``{"model": str, "verdicts": {subset: {item_id: bool}}}``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = ["paired_comparison"]


def _flatten(verdicts: Mapping[str, Mapping[str, bool]], name: str) -> dict[tuple[str, str], bool]:
    if not isinstance(verdicts, Mapping) or not verdicts:
        raise ValueError(f"paired_comparison: verdicts of {name} must be a non-empty {{subset: {{item: bool}}}}")
    flat = {}
    for subset, items in verdicts.items():
        if not isinstance(items, Mapping):
            raise ValueError(f"paired_comparison: verdicts of {name}, subset {subset!r} is not a mapping")
        for item, ok in items.items():
            if not isinstance(ok, bool):
                raise ValueError(f"paired_comparison: verdict of {name} for {subset}/{item} is {ok!r}, not a bool")
            flat[(str(subset), str(item))] = ok
    return flat


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
    fa, fb = _flatten(a, "A"), _flatten(b, "B")
    if fa.keys() != fb.keys():
        only_a, only_b = len(fa.keys() - fb.keys()), len(fb.keys() - fa.keys())
        raise ValueError(f"paired_comparison: the models were scored on different items ({only_a} only in A, "
                         f"{only_b} only in B); a paired comparison needs the same items")
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
