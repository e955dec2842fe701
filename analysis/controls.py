"""The reviewers' controls gathered over several pipelines (issue 12): the seed spread of the world study and batch
size in training (paper Sec. 3.2, Fig. 6 and the N = 256 vs 1024 ablation).

Both read the files the per-profile pipelines write (``metrics/<p>/evaluate``, ``data/<p>/verdicts``,
``metrics/<p>/train``) through :mod:`analysis.tables` and never re-score anything:

* :func:`seeds_summary`: per model, each headline (SugarCrepe micro accuracy, Table 2 M.Avg, Table 3 M.Avg) per seed
  with its mean ± sd (sd with ddof = 1 over seeds); the paired comparisons of the profile's grid **pooled over every
  seed** (:func:`pool_runs`: an item is ``(seed, item)``, so the McNemar test and the bootstrap CI use every seed's
  items; the seeds draw their own scenes and benchmark, so pooled items are distinct) and the per-seed Δ beside
  them, to show whether the sign holds in each seed.
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

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import scipy.stats  # noqa: E402

from analysis.report import read_gradient_ratio, save_figure  # noqa: E402
from analysis.tables import comparisons_markdown, table_mavg  # noqa: E402
from concrete_jungle.evaluation.paired import paired_comparison  # noqa: E402

__all__ = ["HEADLINES", "COMPARED_SUITES", "headline_values", "pool_runs", "mean_sd", "seeds_summary",
           "batch_size_summary", "plot_fig6_training"]

#: Headlines summarised per run, all fractions in [0, 1]: SugarCrepe micro accuracy, Table 2 and Table 3 M.Avg.
HEADLINES = ("sugarcrepe", "table2_mavg", "table3_mavg")
#: Suites whose per-item verdicts the pooled comparisons use.
COMPARED_SUITES = ("sugarcrepe", "sugarcrepe_pp", "winoground", "heldout")
_NAMES = {"sugarcrepe": "SugarCrepe micro", "table2_mavg": "Table 2 M.Avg", "table3_mavg": "Table 3 M.Avg"}


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
    side = {}
    for r, results in runs.items():
        for suite, per in results.items():
            for m in models:
                if m in (per or {}):
                    side.setdefault(suite, {})[f"{m}@{r}"] = per[m]
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


def seeds_summary(runs: Mapping[str, tuple[Mapping, Mapping]], models: Sequence[str],
                  pairs: Sequence[tuple[str, str]], *, n_resamples: int = 2000, seed: int = 0) -> tuple[dict, str]:
    """The world study over seeds (issue 12, item 2).

    Args:
        runs: ``{seed label: (results, verdicts)}``: each run's ``{suite: {model: result JSON}}`` and ``{suite:
            {model: verdicts}}``; every run has the same grid.
        models: the grid's model labels (rows).
        pairs: the ``(model, reference)`` pairs to compare (:func:`concrete_jungle.grid.comparison_pairs`).
        n_resamples, seed: of the pooled bootstrap CIs (percentile method).

    Returns:
        ``(metrics, markdown)``: metrics ``{"seeds", "models": {model: {headline: mean_sd}}, "sugarcrepe_pairs":
        [{"model", "reference", "pooled": {delta, p, n}, "per_seed": {seed: {delta, p, n}}, "seed_level": {mean,
        sd, t_p}, "same_sign"}]}`` (Δ as fractions; ``pooled.p`` exact McNemar over every seed's items, conditional
        on the trained models; ``seed_level.t_p`` the one-sample t-test of the per-seed Δ against 0), and the report
        (mean ± sd table in %, per-seed SugarCrepe Δ, pooled paired comparisons of every headline).

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
    sc_pairs = []
    pooled = pool_runs(verdicts, models)
    for model, ref in pairs:
        whole = _sugarcrepe_delta(pooled, model, ref)
        if whole is None:
            continue
        each = {s: _sugarcrepe_delta(v, model, ref) for s, v in verdicts.items()}
        deltas = [r["delta"] for r in each.values()]
        spread = mean_sd(deltas)
        if len(set(deltas)) > 1:
            t_p = float(scipy.stats.ttest_1samp(deltas, 0.0).pvalue)
        else:
            t_p = 1.0 if deltas[0] == 0 else 0.0
        sc_pairs.append({"model": model, "reference": ref, "pooled": whole, "per_seed": each,
                         "seed_level": {"mean": spread["mean"], "sd": spread["sd"], "t_p": t_p},
                         "same_sign": all(d > 0 for d in deltas) or all(d < 0 for d in deltas)})
    dropped = sorted({s for v in verdicts.values() for s in v if s in COMPARED_SUITES} - set(pooled))
    metrics = {"seeds": list(runs), "models": table, "sugarcrepe_pairs": sc_pairs}
    seeds = ", ".join(runs)
    lines = [f"# The world study over {len(runs)} seeds ({seeds})", "",
             "Each seed re-draws the whole study: scenes, benchmark items, base model, ConcretePlant sampling and "
             "fine-tunes. Values in %: mean ± sd over seeds (sd with ddof = 1), the seeds' values in brackets.", "",
             "| model | " + " | ".join(_NAMES[h] for h in HEADLINES) + " |",
             "|---|" + "---|" * len(HEADLINES)]
    for m in models:
        cells = []
        for h in HEADLINES:
            s = table[m].get(h)
            cells.append("—" if s is None else f"{100 * s['mean']:.1f} ± {100 * s['sd']:.1f} ("
                         + " / ".join(f"{100 * v:.1f}" for v in s["values"]) + ")")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines += ["", "## SugarCrepe Δ per seed and pooled", "",
              "Δ = accuracy of the model minus the reference's, in points, on the same items; p = exact McNemar. "
              "Pooled: every seed's items together (item = seed/item); its p is conditional on the trained models "
              "(items resampled, training not). Seed level: mean ± sd of the per-seed Δ and the one-sample t-test "
              f"p over the {len(runs)} seeds (training randomness included, little power). Same sign: every seed's Δ "
              "is on the same side of 0 (a 0 is not).", "",
              "| model | reference | " + " | ".join(f"Δ {s} (p)" for s in runs)
              + " | pooled Δ (p) | seed level Δ (t p) | same sign |", "|---|---|" + "---|" * (len(runs) + 3)]
    for row in sc_pairs:
        cells = [f"{100 * r['delta']:+.1f} ({r['p']:.2g})" for r in row["per_seed"].values()]
        sl = row["seed_level"]
        lines.append(f"| {row['model']} | {row['reference']} | " + " | ".join(cells)
                     + f" | {100 * row['pooled']['delta']:+.1f} ({row['pooled']['p']:.2g}) | "
                     + f"{100 * sl['mean']:+.1f} ± {100 * sl['sd']:.1f} ({sl['t_p']:.2g}) | "
                     + ("yes" if row["same_sign"] else "no") + " |")
    known = {m for per in pooled.values() for m in per}
    body = comparisons_markdown(pooled, [(m, r) for m, r in pairs if m in known and r in known],
                                include=[s for s in COMPARED_SUITES if pooled.get(s)],
                                n_resamples=n_resamples, method="percentile", seed=seed)
    lines += ["", "Pooled over every seed's items (item = seed/item; p conditional on the trained models):", "",
              body.replace("## Paired", "### Paired")]
    if dropped:
        lines += ["", "Not pooled (a model of the grid lacks verdicts in some seed): " + ", ".join(dropped) + "."]
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
        verdicts: dict[str, dict] = {}
        for n in (small, large):
            for suite, per in runs[n][1].items():
                for m in models:
                    if m in (per or {}):
                        verdicts.setdefault(suite, {})[f"{m}@N{n}"] = per[m]
        pairs = [(f"{m}@N{small}", f"{m}@N{large}") for m in models
                 if any(f"{m}@N{small}" in v and f"{m}@N{large}" in v for v in verdicts.values())]
        if pairs:
            body = comparisons_markdown(verdicts, pairs, include=[s for s in COMPARED_SUITES if verdicts.get(s)],
                                        n_resamples=n_resamples, method="percentile", seed=seed)
            lines += ["", body.replace("## Paired", "### Paired")]
    return {"rows": rows, "ablation": abl}, "\n".join(lines).rstrip() + "\n"
