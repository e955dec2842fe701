"""The reviewers' controls gathered over several pipelines (issue 12): the seed spread of the world study and batch
size in training (paper Sec. 3.2, Fig. 6 and the N = 256 vs 1024 ablation).

Both read the files the per-profile pipelines write (``metrics/<p>/evaluate``, ``data/<p>/verdicts``,
``metrics/<p>/train``) through :mod:`analysis.tables` and never re-score anything:

* :func:`seeds_summary`: per model, each headline (SugarCrepe micro accuracy, Table 2 M.Avg, Table 3 M.Avg) per seed
  with its mean ± sd (sd with ddof = 1 over seeds); the paired comparisons of the profile's grid **pooled over every
  seed** (:func:`pool_runs`: an item is ``(seed, item)``, so the McNemar test and the bootstrap CI use every seed's
  items; the world's seeds draw their own scenes and benchmark, so pooled items are distinct) and the per-seed Δ
  beside them, to show whether the sign holds in each seed. Where the seeds score the same items (the real
  profile's SugarCrepe), the comparisons are item-clustered instead (:func:`item_clustered_delta`).
* :func:`batch_size_summary`: the gradient ratio logged at every training step of the D_hc fine-tunes at each N
  (InfoNCE, Cement), drawn against the fraction of training done and against N (:func:`plot_fig6_training`), and the
  accuracy ablation (headlines per N, relative change of M.Avg between two N, paired tests of the same model
  trained at two N on the same items).
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import scipy.stats  # noqa: E402

from analysis.report import read_gradient_ratio, save_figure  # noqa: E402
from analysis.tables import comparisons_markdown, table_mavg  # noqa: E402
from concrete_jungle.evaluation.paired import mde_from_ci, paired_comparison  # noqa: E402

__all__ = ["HEADLINES", "COMPARED_SUITES", "side_by_side", "headline_values", "pool_runs", "mean_sd", "item_clustered_delta", "seeds_summary",
           "sources_summary",
           "batch_size_summary", "plot_fig6_training"]

#: Headlines summarised per run, all fractions in [0, 1]: SugarCrepe micro accuracy, Table 2 and Table 3 M.Avg.
HEADLINES = ("sugarcrepe", "table2_mavg", "table3_mavg")
#: Suites whose per-item verdicts the pooled comparisons use.
COMPARED_SUITES = ("sugarcrepe", "sugarcrepe_pp", "winoground", "heldout")
_NAMES = {"sugarcrepe": "SugarCrepe micro", "table2_mavg": "Table 2 M.Avg", "table3_mavg": "Table 3 M.Avg"}


def side_by_side(runs: Mapping[str, Mapping[str, Mapping]], models: Sequence[str]) -> dict[str, dict]:
    """Several runs' per-model trees put side by side in one ``{suite: {label: tree}}``: model ``m`` of run ``r``
    becomes ``m@r`` (results for :func:`analysis.tables.table_mavg`, verdicts for
    :func:`analysis.tables.comparisons_markdown`). ``runs``: ``{run label: {suite: {model: tree}}}``; a model a
    run lacks in a suite is left out there. Raises nothing."""
    side: dict[str, dict] = {}
    for r, per_suite in runs.items():
        for suite, per in per_suite.items():
            for m in models:
                if m in (per or {}):
                    side.setdefault(suite, {})[f"{m}@{r}"] = per[m]
    return side


def headline_values(runs: Mapping[str, Mapping[str, Mapping]], models: Sequence[str]) -> dict[str, dict[str, dict]]:
    """``{run: {model: {headline: value}}}`` (:data:`HEADLINES`, fractions) of several runs, each given as its
    ``{suite: {model: result JSON}}`` (:func:`analysis.tables.read_results`). The M.Avg of every run averages the
    **same** columns: those every model has in every run (the runs' results are put side by side, model ``m`` of run
    ``r`` as ``m@r``, before :func:`analysis.tables.table_mavg`), so a spread or a change over runs never compares
    averages of different column sets. A headline without a number is left out.

    Raises:
        ValueError: a recorded value outside [0, 1] (naming run, model and headline), or as
            :func:`analysis.tables.table_mavg`.
    """
    out: dict[str, dict[str, dict]] = {r: {m: {} for m in models} for r in runs}
    for r, results in runs.items():
        for m in models:
            res = (results.get("sugarcrepe") or {}).get(m) or {}
            value = (res.get("metrics") or {}).get("micro_accuracy")
            if res.get("available", True) and isinstance(value, (int, float)):
                if not (math.isfinite(value) and 0.0 <= value <= 1.0):
                    raise ValueError(f"headline_values: SugarCrepe micro accuracy of model {m!r} in run {r!r} is "
                                     f"{value!r}, not a fraction in [0, 1]")
                out[r][m]["sugarcrepe"] = float(value)
    side = side_by_side(runs, models)
    labels = [f"{m}@{r}" for r in runs for m in models]
    for key, table in (("table2_mavg", "table2"), ("table3_mavg", "table3")):
        try:
            mavg = table_mavg(side, labels, table)
        except ValueError as err:
            if "hold none of the suites" not in str(err) and "no probe task" not in str(err):
                raise
            continue
        for r in runs:
            for m in models:
                if f"{m}@{r}" in mavg:
                    out[r][m][key] = float(mavg[f"{m}@{r}"])
    return out


def _prefixed(tree, prefix: str):
    """``tree`` with every per-item leaf ``{item: bool}`` re-keyed ``<prefix>/<item>``."""
    if isinstance(tree, Mapping) and tree and all(isinstance(v, bool) for v in tree.values()):
        return {f"{prefix}/{k}": v for k, v in tree.items()}
    if isinstance(tree, Mapping):
        return {k: _prefixed(v, prefix) for k, v in tree.items()}
    raise ValueError(f"pool_runs: a verdict tree holds {type(tree).__name__} where a mapping was expected")


def _merge(a, b):
    out = dict(a)
    for k, v in b.items():
        if k in out and isinstance(out[k], Mapping) and isinstance(v, Mapping):
            out[k] = _merge(out[k], v)
        elif k in out:
            raise ValueError(f"pool_runs: item {k!r} appears in two runs")
        else:
            out[k] = v
    return out


def pool_runs(runs: Mapping[str, Mapping[str, Mapping[str, Mapping]]],
              models: Sequence[str] | None = None) -> dict[str, dict[str, dict]]:
    """Pool the per-item verdicts of several runs into one item set: item ``i`` of run ``r`` becomes ``r/i``.

    Args:
        runs: ``{run label: {suite: {model: verdicts}}}`` (:func:`analysis.tables.read_verdicts` per run).
        models: keep these models (default: every model); a model is kept in a suite only when every run has it
            there, so a pooled comparison is paired over all runs or not made.

    Returns:
        ``{suite: {model: pooled verdicts}}``, the shape :func:`analysis.tables.comparisons_markdown` reads.

    Raises:
        ValueError: ``runs`` is empty, or a verdict tree is malformed.
    """
    if not runs:
        raise ValueError("pool_runs: no runs")
    suites = sorted({s for per in runs.values() for s in per})
    pooled: dict[str, dict[str, dict]] = {}
    for suite in suites:
        common = set.intersection(*(set((per.get(suite) or {})) for per in runs.values()))
        keep = [m for m in (models if models is not None else sorted(common)) if m in common]
        for m in keep:
            merged: dict = {}
            for label, per in runs.items():
                merged = _merge(merged, _prefixed(per[suite][m], label))
            pooled.setdefault(suite, {})[m] = merged
    return pooled


def mean_sd(values: Sequence[float]) -> dict:
    """``{"values", "mean", "sd", "n"}`` of ``values`` (sd with ddof = 1; 0.0 for a single value).

    Raises:
        ValueError: ``values`` is empty or holds a non-finite number.
    """
    values = [float(v) for v in values]
    if not values or not all(math.isfinite(v) for v in values):
        raise ValueError(f"mean_sd: need finite values, got {values}")
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"values": values, "mean": statistics.fmean(values), "sd": sd, "n": len(values)}


def _sugarcrepe_delta(verdicts: Mapping, model: str, ref: str) -> dict | None:
    sc = verdicts.get("sugarcrepe") or {}
    if model not in sc or ref not in sc:
        return None
    r = paired_comparison(sc[model], sc[ref])
    return {"delta": r["delta"], "p": r["mcnemar_p"], "n": r["n"]}


def _leaves(tree, path: tuple = ()) -> dict[tuple, bool]:
    """``{(key, ..., item): verdict}`` of a verdict tree whose leaves are ``{item: bool}``."""
    if isinstance(tree, Mapping) and tree and all(isinstance(v, bool) for v in tree.values()):
        return {(*path, k): v for k, v in tree.items()}
    if isinstance(tree, Mapping):
        return {k: v for key, sub in tree.items() for k, v in _leaves(sub, (*path, key)).items()}
    raise ValueError(f"item_clustered_delta: a verdict tree holds {type(tree).__name__} at {'/'.join(map(str, path))}")


def item_clustered_delta(model_trees: Sequence[Mapping], ref_trees: Sequence[Mapping], *, n_resamples: int = 2000,
                         seed: int = 0) -> dict:
    """Paired accuracy difference of two models over seeds that score the **same** items, clustered by item.

    Each item's difference d_i = mean over seeds of (model correct − reference correct) lies in [−1, 1]; the
    items are the units: Δ = mean d_i, its 95 % CI the percentile bootstrap over items
    (``scipy.stats.bootstrap``) and p the two-sided sign-flip permutation test of the d_i against 0
    (``scipy.stats.permutation_test``, one sample). Unlike McNemar over the seeds' copies of an item, this does not
    count an item once per seed; training randomness enters through the averaging only (the seed-level t-test
    reads it).

    Args:
        model_trees, ref_trees: per seed (same order), each model's verdict tree ``{subset: {item: bool}}`` (or
            nested deeper, e.g. SugarCrepe++ ``{"itt": {subset: {item: bool}}}``).
        n_resamples, seed: of the bootstrap and the permutation test.

    Returns:
        ``{"delta", "ci": [low, high], "p", "n_items", "n_seeds"}``: Δ and CI as fractions of items.

    Raises:
        ValueError: no seeds, different numbers of trees, no item common to every tree, or a malformed tree.
    """
    if not model_trees or len(model_trees) != len(ref_trees):
        raise ValueError(f"item_clustered_delta: {len(model_trees)} model and {len(ref_trees)} reference trees")
    leaves = [(_leaves(m), _leaves(r)) for m, r in zip(model_trees, ref_trees)]
    items = sorted(set.intersection(*(set(m) & set(r) for m, r in leaves)), key=str)
    if not items:
        raise ValueError("item_clustered_delta: no item is scored in every seed for both models")
    d = np.array([[float(m[i]) - float(r[i]) for i in items] for m, r in leaves]).mean(axis=0)
    delta = float(d.mean())
    if np.all(d == d[0]):  # no spread over items: the bootstrap is degenerate and every sign flip ties or beats it
        ci, p = [delta, delta], (1.0 if delta == 0 else 2.0 ** (1 - len(d)))
    else:
        rng = np.random.default_rng(seed)
        boot = scipy.stats.bootstrap((d,), np.mean, n_resamples=n_resamples, method="percentile", random_state=rng)
        ci = [float(boot.confidence_interval.low), float(boot.confidence_interval.high)]
        perm = scipy.stats.permutation_test((d,), lambda x, axis: np.mean(x, axis=axis), vectorized=True,
                                            permutation_type="samples", n_resamples=n_resamples, random_state=rng)
        p = float(perm.pvalue)
    return {"delta": delta, "ci": ci, "p": min(1.0, p), "n_items": len(items), "n_seeds": len(leaves)}


#: Parts of the suites compared item-clustered when the seeds share items: (suite, key inside its verdict tree).
SHARED_PARTS = (("sugarcrepe", None), ("sugarcrepe_pp", "itt"), ("sugarcrepe_pp", "tot"))


def seeds_summary(runs: Mapping[str, tuple[Mapping, Mapping]], models: Sequence[str],
                  pairs: Sequence[tuple[str, str]], *, n_resamples: int = 2000, seed: int = 0,
                  study: str = "world", shared_items: bool = False) -> tuple[dict, str]:
    """A study over seeds (issue 12, item 2): the world's, or the real profile's.

    Args:
        runs: ``{seed label: (results, verdicts)}``: each run's ``{suite: {model: result JSON}}`` and ``{suite:
            {model: verdicts}}``; every run has the models of ``models``.
        models: the model labels every run trained (rows).
        pairs: the ``(model, reference)`` pairs to compare (:func:`concrete_jungle.grid.comparison_pairs`).
        n_resamples, seed: of the bootstrap CIs (percentile method) and permutation tests.
        study: the study's name in the report's title.
        shared_items: ``False`` (the world): every seed draws its own benchmark items, so the seeds' items are
            pooled (item = seed/item) into one paired comparison per pair and suite (McNemar, bootstrap CI).
            ``True`` (the real profile: SugarCrepe is fixed, only training is re-drawn): pooling would count each
            item once per seed, so the pairs are compared item-clustered instead (:func:`item_clustered_delta`,
            SugarCrepe and SugarCrepe++ ITT / TOT); suites whose items differ per seed (the held-out pairs) are
            left to each profile's own report.

    Returns:
        ``(metrics, markdown)``: metrics ``{"seeds", "models": {model: {headline: mean_sd}}, "sugarcrepe_pairs":
        [{"model", "reference", "per_seed": {seed: {delta, p, n}}, "seed_level": {mean, sd, t_p}, "same_sign",
        and "pooled": {delta, p, n} (distinct items) or "item_clustered": {delta, ci, p, n_items, n_seeds} (shared
        items)}]}``, plus ``"item_clustered": [{"model", "reference", "suite", **result}]`` when the items are
        shared (Δ as fractions; ``pooled.p`` exact McNemar over every seed's items, conditional on the trained
        models; ``seed_level.t_p`` the one-sample t-test of the per-seed Δ against 0, ``None`` when every seed
        has the same Δ), and the report (mean ± sd table in %, per-seed SugarCrepe Δ, paired comparisons).

    Raises:
        ValueError: fewer than two runs, or a model of ``models`` missing a headline in some run.
    """
    if len(runs) < 2:
        raise ValueError(f"seeds_summary: need at least two seeds, got {list(runs)}")
    per_seed = headline_values({label: results for label, (results, _) in runs.items()}, models)
    table: dict[str, dict[str, dict]] = {}
    for m in models:
        table[m] = {}
        for h in HEADLINES:
            have = [per_seed[s][m][h] for s in runs if h in per_seed[s][m]]
            if len(have) == len(runs):
                table[m][h] = mean_sd(have)
            elif have:
                raise ValueError(f"seeds_summary: {_NAMES[h]} of model {m!r} is missing in some seeds")
    verdicts = {label: v for label, (_, v) in runs.items()}

    def clustered(model: str, ref: str, suite: str, part: str | None) -> dict | None:
        trees = [((v.get(suite) or {}).get(model), (v.get(suite) or {}).get(ref)) for v in verdicts.values()]
        if any(m is None or r is None for m, r in trees):
            return None
        if part is not None:
            if any(part not in m or part not in r for m, r in trees):
                return None
            trees = [(m[part], r[part]) for m, r in trees]
        return item_clustered_delta([m for m, _ in trees], [r for _, r in trees], n_resamples=n_resamples, seed=seed)

    sc_pairs = []
    pooled = {} if shared_items else pool_runs(verdicts, models)  # the seeds' items pooled only when distinct
    for model, ref in pairs:
        whole = clustered(model, ref, "sugarcrepe", None) if shared_items else _sugarcrepe_delta(pooled, model, ref)
        if whole is None:
            continue
        each = {s: _sugarcrepe_delta(v, model, ref) for s, v in verdicts.items()}
        deltas = [r["delta"] for r in each.values()]
        spread = mean_sd(deltas)
        if len(set(deltas)) > 1:
            t_p = float(scipy.stats.ttest_1samp(deltas, 0.0).pvalue)
        else:  # no spread over seeds: the t statistic is undefined (0 / 0, or Δ / 0)
            t_p = None
        sc_pairs.append({"model": model, "reference": ref, ("item_clustered" if shared_items else "pooled"): whole,
                         "per_seed": each, "seed_level": {"mean": spread["mean"], "sd": spread["sd"], "t_p": t_p},
                         "same_sign": all(d > 0 for d in deltas) or all(d < 0 for d in deltas)})
    metrics = {"seeds": list(runs), "models": table, "sugarcrepe_pairs": sc_pairs}
    seeds = ", ".join(runs)
    if shared_items:
        drawn = ("Each seed re-draws the base model, the ConcretePlant sampling and the fine-tunes; the benchmark items "
                 "are the same in every seed.")
        whole_note = ("Item-clustered: the seeds score the same items, so each item's Δ is averaged over the seeds "
                      "and the items are the units (percentile bootstrap CI over items, sign-flip permutation p); "
                      "pooling the seeds' copies of an item as distinct items would overstate the evidence.")
        whole_head = "item-clustered Δ [95 % CI] (p)"
    else:
        drawn = ("Each seed re-draws the whole study: scenes, benchmark items, base model, ConcretePlant sampling and "
                 "fine-tunes.")
        whole_note = ("Pooled: every seed's items together (item = seed/item; the seeds draw their own items, so "
                      "pooled items are distinct); its p is conditional on the trained models (items resampled, "
                      "training not).")
        whole_head = "pooled Δ (p)"
    lines = [f"# The {study} study over {len(runs)} seeds ({seeds})", "",
             f"{drawn} Values in %: mean ± sd over seeds (sd with ddof = 1), the seeds' values in brackets.", "",
             "| model | " + " | ".join(_NAMES[h] for h in HEADLINES) + " |",
             "|---|" + "---|" * len(HEADLINES)]
    for m in models:
        cells = []
        for h in HEADLINES:
            s = table[m].get(h)
            cells.append("—" if s is None else f"{100 * s['mean']:.1f} ± {100 * s['sd']:.1f} ("
                         + " / ".join(f"{100 * v:.1f}" for v in s["values"]) + ")")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines += ["", "## SugarCrepe Δ per seed and over the seeds", "",
              f"Δ = accuracy of the model minus the reference's, in points, on the same items; p = exact McNemar. "
              f"{whole_note} Seed level: mean ± sd of the per-seed Δ and the one-sample t-test p over the {len(runs)} "
              "seeds (training randomness included, little power; n/a when every seed has the same Δ). Same sign: "
              "every seed's Δ is on the same side of 0 (a 0 is not).", "",
              "| model | reference | " + " | ".join(f"Δ {s} (p)" for s in runs)
              + f" | {whole_head} | seed level Δ (t p) | same sign |", "|---|---|" + "---|" * (len(runs) + 3)]
    for row in sc_pairs:
        cells = [f"{100 * r['delta']:+.1f} ({r['p']:.2g})" for r in row["per_seed"].values()]
        sl = row["seed_level"]
        w = row.get("pooled") or row["item_clustered"]
        whole_cell = (f"{100 * w['delta']:+.1f} ({w['p']:.2g})" if not shared_items else
                      f"{100 * w['delta']:+.1f} [{100 * w['ci'][0]:+.1f}, {100 * w['ci'][1]:+.1f}] ({w['p']:.2g})")
        t_cell = "n/a" if sl["t_p"] is None else f"{sl['t_p']:.2g}"
        lines.append(f"| {row['model']} | {row['reference']} | " + " | ".join(cells)
                     + f" | {whole_cell} | {100 * sl['mean']:+.1f} ± {100 * sl['sd']:.1f} ({t_cell}) | "
                     + ("yes" if row["same_sign"] else "no") + " |")
    if shared_items:
        rows = []
        for suite, part in SHARED_PARTS:
            for model, ref in pairs:
                r = clustered(model, ref, suite, part)
                if r is not None:
                    rows.append({"model": model, "reference": ref,
                                 "suite": suite if part is None else f"{suite}/{part}", **r})
        metrics["item_clustered"] = rows
        lines += ["", "## Paired comparisons over the seeds, item-clustered", "",
                  "Per suite: Δ in points with its 95 % CI (percentile bootstrap over items) and the sign-flip "
                  "permutation p; each item's Δ is the mean over the seeds. MDE = minimal detectable effect at "
                  "α = 0.05 and 80 % power from the CI's width (normal approximation): a |Δ| below it could not have "
                  "been seen. The held-out pairs are drawn per seed and dataset: see each profile's `comparisons.md`.",
                  "", "| suite | model | reference | Δ | 95 % CI | p | MDE | items |", "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            mde = mde_from_ci(r["ci"][0], r["ci"][1])
            lines.append(f"| {r['suite']} | {r['model']} | {r['reference']} | {100 * r['delta']:+.1f} | "
                         f"[{100 * r['ci'][0]:+.1f}, {100 * r['ci'][1]:+.1f}] | {r['p']:.2g} | {100 * mde:.1f} | "
                         f"{r['n_items']} |")
        return metrics, "\n".join(lines).rstrip() + "\n"
    dropped = sorted({s for v in verdicts.values() for s in v if s in COMPARED_SUITES} - set(pooled))
    known = {m for per in pooled.values() for m in per}
    body = comparisons_markdown(pooled, [(m, r) for m, r in pairs if m in known and r in known],
                                include=[s for s in COMPARED_SUITES if pooled.get(s)],
                                n_resamples=n_resamples, method="percentile", seed=seed)
    lines += ["", "Pooled over every seed's items (item = seed/item; p conditional on the trained models):", "",
              body.replace("## Paired", "### Paired")]
    if dropped:
        lines += ["", "Not pooled (a model of the grid lacks verdicts in some seed): " + ", ".join(dropped) + "."]
    return metrics, "\n".join(lines).rstrip() + "\n"


#: Suites scored on the same items under every concreteness source (the held-out pairs are each source's own).
SOURCE_SUITES = ("sugarcrepe", "sugarcrepe_pp", "winoground")


def sources_summary(runs: Mapping[str, tuple[Mapping, Mapping, Mapping[str, Mapping]]], models: Sequence[str],
                    pairs: Sequence[tuple[str, str]], *, n_resamples: int = 2000,
                    seed: int = 0) -> tuple[dict, str]:
    """D_hc / D_lc built from different concreteness sources on the same world (issue 12, item 9): Brysbaert's
    ratings against visual concreteness (:mod:`concrete_jungle.visual_concreteness`).

    The runs share the scenes, the benchmark items and the base model (same seed), so model ``m`` of source ``s``
    (label ``m@s``) is compared paired on the same items with :func:`analysis.tables.comparisons_markdown`.

    Args:
        runs: ``{source: (results, verdicts, stats)}``: the run's ``{suite: {model: result JSON}}``, ``{suite:
            {model: verdicts}}`` and ``{dataset: dataset_stats JSON}`` (mean_c on the 1-5 scale the source rates,
            type_share as fractions).
        models: the fine-tunes every source trained (``hc-infonce``, ...).
        pairs: ``(model@source, reference@source)`` labels to compare.
        n_resamples, seed: of the bootstrap CIs (percentile method).

    Returns:
        ``(metrics, markdown)``: metrics ``{"sources", "models": {model: {source: {headline: value}}},
        "datasets": {source: {dataset: {"mean_c", "median_c", "type_share"}}}}`` (fractions, concreteness 1-5).

    Raises:
        ValueError: fewer than two sources; errors of :func:`headline_values`.
    """
    if len(runs) < 2:
        raise ValueError(f"sources_summary: need two concreteness sources, got {list(runs)}")
    heads = headline_values({s: r for s, (r, _, _) in runs.items()}, models)
    datasets = {s: {d: {"mean_c": st["mean_c"], "median_c": st["median_c"], "type_share": st["type_share"]}
                    for d, st in stats.items()} for s, (_, _, stats) in runs.items()}
    metrics = {"sources": list(runs), "models": {m: {s: heads[s][m] for s in runs} for m in models},
               "datasets": datasets}
    lines = [f"# Concreteness sources: {' vs '.join(runs)}", "",
             "The same world (scenes, benchmark items, base model), D_hc / D_lc sampled from each source's ratings "
             "(visual concreteness is quantile-mapped onto the Brysbaert 1-5 scale, so c_i reads the same).", "",
             "| source | dataset | mean c_i | median c_i | attribute / relation / object |", "|---|---|---|---|---|"]
    for s, per in datasets.items():
        for d, st in per.items():
            ts = st["type_share"]
            lines.append(f"| {s} | {d} | {st['mean_c']:.2f} | {st['median_c']:.2f} | "
                         + " / ".join(f"{100 * ts.get(t, 0.0):.0f} %" for t in ("attribute", "relation", "object"))
                         + " |")
    lines += ["", "| model | " + " | ".join(f"{_NAMES[h]} ({s})" for h in HEADLINES for s in runs) + " |",
              "|---|" + "---|" * (len(HEADLINES) * len(runs))]
    for m in models:
        lines.append(f"| {m} | " + " | ".join(f"{100 * heads[s][m][h]:.1f}" if h in heads[s][m] else "—"
                                              for h in HEADLINES for s in runs) + " |")
    verdicts = side_by_side({s: v for s, (_, v, _) in runs.items()}, models)
    known = {m for per in verdicts.values() for m in per}
    body = comparisons_markdown(verdicts, [(m, r) for m, r in pairs if m in known and r in known],
                                include=[s for s in SOURCE_SUITES if verdicts.get(s)],
                                n_resamples=n_resamples, method="percentile", seed=seed)
    lines += ["", body.replace("## Paired", "### Paired"), "",
              "The held-out pairs are not compared here: each source builds its own D_hc / D_lc, so their held-out "
              "pairs differ (see each profile's `comparisons.md`)."]
    return metrics, "\n".join(lines).rstrip() + "\n"


def plot_fig6_training(curves: Mapping[tuple[int, str], Sequence[tuple[int, float]]],
                       out_png: str | os.PathLike) -> Path:
    """Fig. 6 during training: the hard-negative gradient ratio of each fine-tune against the fraction of its
    training done (left; colour = N, line style = loss) and its mean over training against N (right, log2 axis).

    Args:
        curves: ``{(N, model or loss): [(step, gradient ratio), ...]}`` (ratio unitless, in [0, 1]).
        out_png: output PNG (written atomically).

    Raises:
        ValueError: ``curves`` is empty or a curve has no point.
    """
    if not curves or any(not c for c in curves.values()):
        raise ValueError("plot_fig6_training: need at least one non-empty curve")
    ns = sorted({n for n, _ in curves})
    losses = list(dict.fromkeys(loss for _, loss in curves))
    colours = plt.get_cmap("viridis")([i / max(1, len(ns) - 1) * 0.85 for i in range(len(ns))])
    styles = ["-", "--", ":", "-."]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.5, 4.0))
    try:
        for (n, loss), points in curves.items():
            steps = [s for s, _ in points]
            last = max(steps) or 1
            left.plot([s / last for s in steps], [r for _, r in points], color=colours[ns.index(n)],
                      ls=styles[losses.index(loss) % len(styles)], label=f"N={n} {loss}",
                      marker="." if len(points) <= 30 else None)
        left.set_xlabel("fraction of training done (step / last step)")
        left.set_ylabel("hard-negative gradient ratio")
        left.set_title("During training (D_hc fine-tunes)")
        left.grid(alpha=0.3)
        left.legend(fontsize="x-small", ncol=2)
        for loss in losses:
            xs = [n for n in ns if (n, loss) in curves]
            ys = [statistics.fmean(r for _, r in curves[(n, loss)]) for n in xs]
            right.plot(xs, ys, marker="o", ls=styles[losses.index(loss) % len(styles)], color="k", label=loss)
        right.set_xscale("log", base=2)
        right.set_xlabel("batch size N (anchors)")
        right.set_ylabel("mean gradient ratio over training")
        right.set_title("Against N (paper Fig. 6)")
        right.grid(alpha=0.3)
        right.legend(fontsize="small")
    except BaseException:
        plt.close(fig)
        raise
    return save_figure(fig, out_png)


def batch_size_summary(runs: Mapping[int, tuple[Mapping, Mapping, Mapping[str, str | os.PathLike]]],
                       models: Sequence[str], out_png: str | os.PathLike, *, ablation: tuple[int, int] = (256, 1024),
                       n_resamples: int = 2000, seed: int = 0) -> tuple[dict, str]:
    """Batch size in training (issue 12, item 3; paper Sec. 3.2).

    Args:
        runs: ``{N: (results, verdicts, {model: gradient_ratio.tsv})}`` per batch size: the run's ``{suite: {model:
            result JSON}}``, ``{suite: {model: verdicts}}`` and the dvclive ratio series of its hard-negative
            fine-tunes (model labels ``hc-infonce``, ``hc-cement``, ...).
        models: the fine-tunes compared across N (``base`` is the same model in every run and is left out).
        out_png: where :func:`plot_fig6_training` draws the curves.
        ablation: ``(small N, large N)`` of the accuracy ablation (paper: 256 vs 1024); skipped when one is absent.

    Returns:
        ``(metrics, markdown)``: metrics ``{"rows": [{"N", "model", "gradient_ratio_first", "gradient_ratio_last",
        "gradient_ratio_mean", "steps", <headlines>}], "ablation": {model: {"sugarcrepe", "table2_mavg",
        "table3_mavg"}: relative change of the small N over the large N in %}}``.

    Raises:
        ValueError: ``runs`` is empty; errors of :func:`analysis.report.read_gradient_ratio` (missing or
            malformed series).
    """
    if not runs:
        raise ValueError("batch_size_summary: no runs")
    ns = sorted(runs)
    curves, rows = {}, []
    heads_all = headline_values({n: runs[n][0] for n in ns}, models)
    for n in ns:
        _, _, series = runs[n]
        heads = heads_all[n]
        for m in models:
            df = read_gradient_ratio(series[m])
            curves[(n, m)] = list(zip(df["step"].tolist(), df["gradient_ratio"].tolist()))
            rows.append({"N": n, "model": m, "steps": int(df["step"].max()),
                         "gradient_ratio_first": float(df["gradient_ratio"].iloc[0]),
                         "gradient_ratio_last": float(df["gradient_ratio"].iloc[-1]),
                         "gradient_ratio_mean": float(df["gradient_ratio"].mean()), **heads[m]})
    plot_fig6_training(curves, out_png)
    small, large = ablation
    abl = {}
    if small in runs and large in runs:
        at = {(r["N"], r["model"]): r for r in rows}
        for m in models:
            a, b = at[(small, m)], at[(large, m)]
            abl[m] = {h: 100 * (a[h] - b[h]) / b[h] for h in HEADLINES if h in a and h in b and b[h] > 0}
    lines = ["# Batch size in training (paper Sec. 3.2, Fig. 6)", "",
             "D_hc fine-tunes of the same base model at each N (anchors per batch; 2N x 2N logits), 4 epochs each "
             "(the same anchors seen; fewer steps at larger N). Gradient ratio = the hard-negative push over the "
             "positive pull, logged at every step; headlines in %.", "",
             f"![Fig. 6 during training]({Path(out_png).name})", "",
             "| N | model | steps | ratio first | ratio mean | ratio last | " + " | ".join(_NAMES[h] for h in HEADLINES)
             + " |", "|---|---|---|---|---|---|" + "---|" * len(HEADLINES)]
    for r in rows:
        lines.append(f"| {r['N']} | {r['model']} | {r['steps']} | {r['gradient_ratio_first']:.3f} | "
                     f"{r['gradient_ratio_mean']:.3f} | {r['gradient_ratio_last']:.3f} | "
                     + " | ".join(f"{100 * r[h]:.1f}" if h in r else "—" for h in HEADLINES) + " |")
    if abl:
        lines += ["", f"## N = {small} against N = {large}", "",
                  "Relative change of the headline, (small − large) / large in %. Paper (ViT-B-32, COCO): −1.18 % "
                  "compositional, −2.16 % general representation.", "",
                  "| model | " + " | ".join(_NAMES[h] for h in HEADLINES) + " |", "|---|" + "---|" * len(HEADLINES)]
        for m, ch in abl.items():
            lines.append(f"| {m} | " + " | ".join(f"{ch[h]:+.2f} %" if h in ch else "—" for h in HEADLINES) + " |")
        verdicts = side_by_side({f"N{n}": runs[n][1] for n in (small, large)}, models)
        pairs = [(f"{m}@N{small}", f"{m}@N{large}") for m in models
                 if any(f"{m}@N{small}" in v and f"{m}@N{large}" in v for v in verdicts.values())]
        if pairs:
            body = comparisons_markdown(verdicts, pairs, include=[s for s in COMPARED_SUITES if verdicts.get(s)],
                                        n_resamples=n_resamples, method="percentile", seed=seed)
            lines += ["", body.replace("## Paired", "### Paired")]
    return {"rows": rows, "ablation": abl}, "\n".join(lines).rstrip() + "\n"
