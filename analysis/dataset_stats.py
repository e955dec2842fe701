"""Rendering of the ConcreteBatch dataset statistics: the c_i histogram (paper Fig. 5(a)), Table 1 (Sec. 3.1) and the
logit gap against c_i with LOWESS trends (Sec. 2.3, Fig. 4).

Inputs are the dicts written by ``concrete_jungle.evaluation.dataset_stats.dataset_statistics``
(``metrics/<p>/dataset_stats/<dataset>.json``) and the ``c_i`` values of the ConcreteBatch records.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from concrete_jungle.concreteness import C_BIN_EDGES  # noqa: E402
from analysis.report import figure_axes  # noqa: E402

__all__ = ["DATASET_LABELS", "PAPER_TABLE1", "TABLE1_COLUMNS", "plot_concreteness_histogram", "table1_markdown", "plot_fig5",
           "lowess_curve", "plot_concreteness_gap"]

#: Paper notation of the three ConcreteBatch variants (Sec. 3.1), in Table 1's row order here.
DATASET_LABELS = {"hc": "D_hc", "lc": "D_lc", "wo": "D_wo", "hc_type": "D_hc^type", "lc_type": "D_lc^type"}

#: Table 1 of the paper (COCO Karpathy train, PE-Core-L-14-336 reference, DINOv2, RoBERTa-large BERTScore rescaled).
PAPER_TABLE1 = {
    "wo": {"mean_c": 4.29, "median_c": 4.63, "i2t_acc": 0.8712, "t2i_acc": 0.4433, "bertscore": 0.8992,
           "clip_l": 0.9197, "dino_score": 0.6514, "clip_v": 0.7168, "n_unique_keywords": 11050},
    "lc": {"mean_c": 3.81, "median_c": 3.89, "i2t_acc": 0.8357, "t2i_acc": 0.4020, "bertscore": 0.8981,
           "clip_l": 0.9279, "dino_score": 0.6707, "clip_v": 0.7270, "n_unique_keywords": 11034},
    "hc": {"mean_c": 4.77, "median_c": 4.85, "i2t_acc": 0.9225, "t2i_acc": 0.5087, "bertscore": 0.8907,
           "clip_l": 0.9029, "dino_score": 0.6225, "clip_v": 0.7000, "n_unique_keywords": 11190},
}

#: (result key, column header, number format) of Table 1, in the paper's row order.
TABLE1_COLUMNS = (
    ("mean_c", "Mean c_i", "{:.2f}"),
    ("median_c", "Median c_i", "{:.2f}"),
    ("i2t_acc", "I2T acc.", "{:.4f}"),
    ("t2i_acc", "T2I acc.", "{:.4f}"),
    ("bertscore", "BERTScore", "{:.4f}"),
    ("clip_l", "CLIP-L", "{:.4f}"),
    ("dino_score", "DINOScore", "{:.4f}"),
    ("clip_v", "CLIP-V", "{:.4f}"),
    ("n_unique_keywords", "# Unique", "{:d}"),
)


def _label(name: str) -> str:
    return DATASET_LABELS.get(name, str(name))


def _ordered(names) -> list[str]:
    known = [k for k in DATASET_LABELS if k in names]
    return known + sorted(k for k in names if k not in DATASET_LABELS)


def plot_concreteness_histogram(c_by_dataset: Mapping[str, Sequence[float]], path: str | os.PathLike) -> Path:
    """One PNG with the c_i histograms of the datasets (paper Fig. 5(a)): same bins, mean lines.

    Bins are ``concrete_jungle.concreteness.C_BIN_EDGES`` (16 bins of 0.25 on the Brysbaert 1-5 scale);
    each histogram is normalised to the share of its dataset's records per bin, so datasets of different sizes
    compare; a dashed vertical line marks each dataset's mean c_i.

    Args:
        c_by_dataset: dataset name (``"hc"``, ``"lc"``, ``"wo"`` or any label) -> its records' c_i values (1-5).
        path: output PNG (written atomically; parent folders are created).

    Returns:
        ``Path(path)``.

    Raises:
        ValueError: no dataset, a dataset without values, or a value that is not a finite number in [1, 5]
            (the message names the dataset).
    """
    if not c_by_dataset:
        raise ValueError("plot_concreteness_histogram: c_by_dataset is empty; nothing to plot")
    data = {}
    for name in _ordered(list(c_by_dataset)):
        values = np.asarray([float(c) for c in c_by_dataset[name]], dtype=float)
        if values.size == 0:
            raise ValueError(f"plot_concreteness_histogram: dataset {name!r} has no c_i value")
        bad = values[~np.isfinite(values) | (values < 1.0) | (values > 5.0)]
        if bad.size:
            raise ValueError(f"plot_concreteness_histogram: dataset {name!r} has c_i outside [1, 5], e.g. {bad[0]!r}")
        data[name] = values
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    with figure_axes(path) as ax:
        for k, (name, values) in enumerate(data.items()):
            colour = colours[k % len(colours)]
            mean = float(values.mean())
            ax.hist(values, bins=C_BIN_EDGES, weights=np.full(values.size, 1.0 / values.size), histtype="step",
                    linewidth=1.8, color=colour, label=f"{_label(name)} (n={values.size}, mean {mean:.2f})")
            ax.axvline(mean, color=colour, linestyle="--", linewidth=1.2)
        ax.set_xlim(C_BIN_EDGES[0], C_BIN_EDGES[-1])
        ax.set_xlabel("keyword concreteness c_i (Brysbaert, 1-5)")
        ax.set_ylabel("share of records")
        ax.set_title("Concreteness of the perturbed keywords")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", loc="upper left")
    return Path(path)


def _cell(stats: Mapping, key: str, fmt: str, where: str) -> str:
    value = stats.get(key)
    if value is None:
        return "—"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"table1_markdown: {where}: {key} = {value!r} is not a finite number or null")
    if fmt == "{:d}":
        if int(value) != value:
            raise ValueError(f"table1_markdown: {where}: {key} = {value!r} is not a count")
        value = int(value)
    return fmt.format(value)


def lowess_curve(x: Sequence[float], y: Sequence[float], frac: float = 2 / 3) -> tuple[np.ndarray, np.ndarray]:
    """LOWESS trend of ``y`` in ``x`` (Cleveland 1979, as the paper's Fig. 4; statsmodels, 3 robustifying passes).

    Args:
        x, y: equal-length finite values (here c_i, 1-5, and the logit gap).
        frac: share of the points in each local fit, in (0, 1].

    Returns:
        ``(x_sorted [n], y_fitted [n])``.

    Raises:
        ValueError: fewer than 3 points, unequal lengths, non-finite values or ``frac`` outside (0, 1].
    """
    from statsmodels.nonparametric.smoothers_lowess import lowess

    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xa.shape != ya.shape or xa.ndim != 1 or xa.size < 3:
        raise ValueError(f"lowess_curve: need two equal 1-D arrays of >= 3 points, got {xa.shape} and {ya.shape}")
    if not (np.isfinite(xa).all() and np.isfinite(ya).all()):
        raise ValueError("lowess_curve: x and y must be finite")
    if not 0 < frac <= 1:
        raise ValueError(f"lowess_curve: frac must be in (0, 1], got {frac}")
    fitted = lowess(ya, xa, frac=frac, it=3, return_sorted=True)
    return fitted[:, 0], fitted[:, 1]


def plot_concreteness_gap(gaps_by_dataset: Mapping[str, Mapping[str, Sequence[float]]], path: str | os.PathLike,
                          unit: str = "logit") -> Path:
    """Logit gap s_{i,i} - s_{i,i'} of each scored ConcreteBatch pair against its keyword's c_i, one colour per dataset,
    each with its LOWESS trend, plus the LOWESS trend of all pairs pooled (black) - the paper's Fig. 4 / Sec. 2.3
    observation that the gap grows with c_i.

    Args:
        gaps_by_dataset: dataset -> ``{"c_i": [n], "gap": [n]}`` (c_i 1-5; gap in ``unit`` space).
        path: output PNG (written atomically).
        unit: ``"logit"`` or ``"cosine"``, for the axis label.

    Returns:
        ``Path(path)``.

    Raises:
        ValueError: no dataset, or a dataset with fewer than 3 pairs or non-finite values (naming it).
    """
    if not gaps_by_dataset:
        raise ValueError("plot_concreteness_gap: gaps_by_dataset is empty; nothing to plot")
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    curves = {}
    for name in _ordered(list(gaps_by_dataset)):
        d = gaps_by_dataset[name]
        try:
            curves[name] = (np.asarray(d["c_i"], float), np.asarray(d["gap"], float), lowess_curve(d["c_i"], d["gap"]))
        except ValueError as err:
            raise ValueError(f"plot_concreteness_gap: dataset {name!r}: {err}") from None
    pooled = lowess_curve(np.concatenate([c for c, _, _ in curves.values()]),
                          np.concatenate([g for _, g, _ in curves.values()]))
    with figure_axes(path) as ax:
        for k, (name, (c, g, (xs, ys))) in enumerate(curves.items()):
            colour = colours[k % len(colours)]
            ax.scatter(c, g, s=6, alpha=0.25, color=colour, linewidths=0)
            ax.plot(xs, ys, color=colour, linewidth=1.8, label=f"{_label(name)} (n={c.size})")
        ax.plot(*pooled, color="black", linewidth=2.2, linestyle="--", label="all pairs")
        ax.axhline(0.0, color="grey", linewidth=0.8)
        ax.set_xlabel("keyword concreteness c_i (Brysbaert, 1-5)")
        ax.set_ylabel(f"gap s(v,t) - s(v,t') ({unit} space)")
        ax.set_title("Logit gap vs concreteness, LOWESS trends")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", loc="upper left")
    return Path(path)


def plot_fig5(pairs_by_dataset: Mapping[str, "pd.DataFrame"], stats_by_dataset: Mapping[str, Mapping],
              path: str | os.PathLike) -> Path:
    """Paper Fig. 5(d)-(f) in one PNG of three panels, a colour per dataset:

    (d) mean BERTScore(t, t') (solid) and mean word edit distance (dashed, right axis) by concreteness bin
        (``fig5.by_c_bin`` of each dataset's statistics);
    (e) CLIP-L = cos(t, t') against CLIP-V = cos(v, v') of every scored pair, Spearman's rho in the legend;
    (f) BERTScore against the image-side similarity (DINOScore when computed, else CLIP-V), rho in the legend.

    Args:
        pairs_by_dataset: dataset -> per-pair rows with columns ``bertscore``, ``word_edit_distance``, ``clip_l``,
            ``clip_v``, ``dino`` (``metrics/<p>/dataset_gaps/<d>.csv``; empty cells = not computed).
        stats_by_dataset: dataset -> its ``metrics/<p>/dataset_stats/<d>.json`` (with ``fig5``).
        path: output PNG (written atomically).

    Returns:
        ``Path(path)``.

    Raises:
        ValueError: no dataset, or a dataset whose statistics lack ``fig5`` (naming it).
    """
    from analysis.report import save_figure

    if not pairs_by_dataset:
        raise ValueError("plot_fig5: pairs_by_dataset is empty; nothing to plot")
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, (ax_d, ax_e, ax_f) = plt.subplots(1, 3, figsize=(15.0, 4.2))
    ax_d2 = ax_d.twinx()
    try:
        for k, name in enumerate(_ordered(list(pairs_by_dataset))):
            colour, df = colours[k % len(colours)], pairs_by_dataset[name]
            fig5 = stats_by_dataset.get(name, {}).get("fig5")
            if fig5 is None:
                raise ValueError(f"plot_fig5: the statistics of dataset {name!r} have no 'fig5'")
            bins = [b for b in fig5["by_c_bin"] if b["n"]]
            mids = [(b["lo"] + b["hi"]) / 2 for b in bins]
            bert = [b["bertscore"] for b in bins]
            if any(v is not None for v in bert):
                ax_d.plot(mids, [np.nan if v is None else v for v in bert], "o-", color=colour, label=_label(name))
            ax_d2.plot(mids, [b["word_edit_distance"] for b in bins], "s--", color=colour, alpha=0.7)
            image_col = "dino" if fig5.get("image_side") == "dino" else "clip_v"
            for ax, x_col, y_col, key in ((ax_e, "clip_l", "clip_v", "clip_l_vs_clip_v"),
                                          (ax_f, "bertscore", image_col, "bertscore_vs_image")):
                sub = df[[x_col, y_col]].dropna()
                corr = fig5.get(key, {})
                rho = f"rho {corr['spearman_rho']:.2f}" if "spearman_rho" in corr else "rho —"
                if len(sub):
                    ax.scatter(sub[x_col], sub[y_col], s=6, alpha=0.3, color=colour, linewidths=0,
                               label=f"{_label(name)} ({rho}, n={len(sub)})")
        ax_d.set_xlabel("keyword concreteness c_i (bin centre)")
        ax_d.set_ylabel("BERTScore(t, t') (solid)")
        ax_d2.set_ylabel("word edit distance (dashed)")
        ax_d.set_title("(d) text-side change by concreteness")
        ax_e.set_xlabel("CLIP-L cos(t, t')")
        ax_e.set_ylabel("CLIP-V cos(v, v')")
        ax_e.set_title("(e) text vs image similarity")
        ax_f.set_xlabel("BERTScore(t, t')")
        ax_f.set_ylabel("image-side similarity")
        ax_f.set_title("(f) BERTScore vs image similarity")
        for ax in (ax_d, ax_e, ax_f):
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize="x-small", loc="best")
        if not ax_f.collections:
            ax_f.text(0.5, 0.5, "BERTScore not computed", ha="center", va="center", transform=ax_f.transAxes)
    except BaseException:
        plt.close(fig)
        raise
    save_figure(fig, path)
    return Path(path)


def table1_markdown(stats_by_dataset: Mapping[str, Mapping], with_paper: bool = True) -> str:
    """Markdown Table 1 (paper Sec. 3.1): one row per dataset (D_hc, D_lc, D_wo), a column per statistic.

    Columns, in the paper's order: Mean / Median c_i (1-5), I2T acc., T2I acc., BERTScore, CLIP-L, DINOScore,
    CLIP-V (cosine), # Unique (keywords by lemma). A figure that was not computed (None) shows as ``—`` and its reason
    is listed below the table. With ``with_paper`` each of our rows is followed by the paper's row for that dataset
    (``D_hc (paper)``); the notes say which paper figures our settings make comparable.

    Args:
        stats_by_dataset: dataset name (``"hc"``, ``"lc"``, ``"wo"``; other names sort after them) -> the dict of
            ``dataset_statistics`` (the ``metrics/<p>/dataset_stats/<dataset>.json`` content).
        with_paper: add the paper's rows.

    Returns:
        The Markdown (table + notes), ending with a newline.

    Raises:
        ValueError: no dataset, or a value that is neither null nor a finite number (names dataset and key).
    """
    if not stats_by_dataset:
        raise ValueError("table1_markdown: stats_by_dataset is empty")
    header = ["dataset", "n", *(h for _, h, _ in TABLE1_COLUMNS)]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    notes: dict[tuple[str, str], list[str]] = {}  # (figure, reason) -> datasets, so a shared reason shows once
    for name in _ordered(list(stats_by_dataset)):
        stats = stats_by_dataset[name]
        if not isinstance(stats, Mapping):
            raise ValueError(f"table1_markdown: statistics of {name!r} must be a mapping, got {type(stats).__name__}")
        row = [_label(name), _cell(stats, "n", "{:d}", name)]
        row += [_cell(stats, key, fmt, name) for key, _, fmt in TABLE1_COLUMNS]
        lines.append("| " + " | ".join(row) + " |")
        if with_paper and name in PAPER_TABLE1:
            paper = PAPER_TABLE1[name]
            lines.append("| " + " | ".join([f"{_label(name)} (paper)", "—", *(
                _cell(paper, key, fmt, f"paper {name}") for key, _, fmt in TABLE1_COLUMNS)]) + " |")
        n_scored, n_all = stats.get("n_scored"), stats.get("n")
        sample = stats.get("scored_sample") or {}
        if isinstance(n_scored, int) and isinstance(n_all, int) and n_scored < n_all:
            notes.setdefault(("model-based figures", f"a seeded sample of {n_scored} of {n_all} records "
                              f"(seed {sample.get('seed')})"), []).append(_label(name))
        for figure, reason in (stats.get("skipped") or {}).items():
            if figure in {key for key, _, _ in TABLE1_COLUMNS}:
                notes.setdefault((figure, str(reason)), []).append(_label(name))
    first = stats_by_dataset[_ordered(list(stats_by_dataset))[0]]
    ref = first.get("reference_model") or {}
    clip = first.get("clip_model") or {}
    clip_name = ref.get("name") if clip.get("shared_with_reference", True) else clip.get("name")
    bert = first.get("bertscore_info") or {}
    dino = first.get("dino_info") or {}
    text = [
        "\n".join(lines),
        "",
        f"- CLIP-score model (I2T, T2I, CLIP-L, CLIP-V): `{clip_name}`"
        + (f" (`{ref.get('checkpoint')}`, the reference model)" if clip.get("shared_with_reference", True) else
           f" (weights `{clip.get('weights')}`)")
        + f"; paper: PE-Core-L-14-336. Logit gaps (Fig. 4): the reference model `{ref.get('name')}`. "
        "Similarities are cosines of L2-normalised embeddings.",
        "- I2T acc. = share of anchors whose image v is strictly closer to its caption t than to the hard negative t'; "
        "T2I acc. = share whose caption t is strictly closer to v than to the hard-negative image v' (ties wrong). "
        "The paper does not define the rule; other readings are in `accuracy_variants`.",
        f"- BERTScore: F1 of (t', t) with `{bert.get('model_type')}` layer {bert.get('num_layers')}, "
        f"{'rescaled' if bert.get('rescaled') else 'not rescaled'}; paper: RoBERTa-large, rescaled — "
        + ("comparable." if bert.get("rescaled") and bert.get("model_type") == "roberta-large" else "not comparable."),
        f"- DINOScore: `{dino.get('model')}`; paper: DINOv2.",
        "- # Unique counts keyword lemmas; the paper's counts are over the full COCO Karpathy train split.",
        *(f"- {', '.join(names)} {figure}: " + (f"over {reason}" if figure == "model-based figures"
                                                  else f"not computed — {reason}")
          for (figure, reason), names in notes.items()),
    ]
    return "\n".join(text) + "\n"
