"""Figures and figure helpers shared by the reports: the hard-negative gradient ratio logged during training
(paper Fig. 6) and the gradient-ratio study (ratio against batch size N, Fig. 3 / Fig. 6). The paper's tables are
rendered by :mod:`analysis.tables`.

Inputs are the files other stages write: the dvclive folders of the training runs, where the trainer logged
``live.log_metric("train/gradient_ratio", value)`` once per step (dvclive 3 writes that series to
``<dvclive_dir>/plots/metrics/train/gradient_ratio.tsv`` with a header ``step<TAB>gradient_ratio``, plus a
``timestamp`` column when logged with ``timestamp=True``), and ``metrics/<p>/gradient_ratio.json``.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from concrete_jungle.io import atomic_write  # noqa: E402

__all__ = ["GRADIENT_RATIO_TSV", "read_gradient_ratio", "plot_gradient_ratio", "plot_gradient_ratio_study",
           "plot_learning_curves", "save_figure", "figure_axes"]

#: Where dvclive stores the ``train/gradient_ratio`` series inside a dvclive folder.
GRADIENT_RATIO_TSV = Path("plots") / "metrics" / "train" / "gradient_ratio.tsv"


def save_figure(fig, out_png: str | os.PathLike) -> Path:
    """Lay out ``fig``, write it as a PNG atomically (120 dpi; parent folders created) and close it."""
    try:
        fig.tight_layout()
        out_png = Path(out_png)
        with atomic_write(out_png, "wb") as fh:
            fig.savefig(fh, format="png", dpi=120)
    finally:
        plt.close(fig)
    return out_png


@contextlib.contextmanager
def figure_axes(out_png: str | os.PathLike, figsize: tuple[float, float] = (6.4, 4.0)) -> Iterator:
    """Yield the axes of a new one-panel figure; when the block ends normally the figure is saved to ``out_png``
    (:func:`save_figure`), when it raises the figure is closed and the error propagates (no file is written)."""
    fig, ax = plt.subplots(figsize=figsize)
    try:
        yield ax
    except BaseException:
        plt.close(fig)
        raise
    save_figure(fig, out_png)


def read_gradient_ratio(tsv_path: str | os.PathLike) -> pd.DataFrame:
    """Read a dvclive metric TSV of the hard-negative gradient ratio (paper Sec. 3.2, Fig. 6).

    Returns:
        DataFrame with columns ``step`` (int) and ``gradient_ratio`` (float, unitless: hard-negative
        gradient magnitude over the total positive pull), in file order.

    Raises:
        FileNotFoundError: naming the missing file.
        ValueError: naming the file if it has no ``step`` column, no value column, no rows, or a
            non-finite value.
    """
    tsv_path = Path(tsv_path)
    if not tsv_path.is_file():
        raise FileNotFoundError(f"gradient-ratio TSV not found: {tsv_path}")
    df = pd.read_csv(tsv_path, sep="\t")
    if "step" not in df.columns:
        raise ValueError(f"{tsv_path}: no 'step' column (columns: {list(df.columns)})")
    value_cols = [c for c in df.columns if c not in ("step", "timestamp")]
    col = "gradient_ratio" if "gradient_ratio" in value_cols else (value_cols[0] if len(value_cols) == 1 else None)
    if col is None:
        raise ValueError(f"{tsv_path}: cannot tell the value column among {list(df.columns)}")
    if df.empty:
        raise ValueError(f"{tsv_path}: no rows")
    values = pd.to_numeric(df[col], errors="coerce")
    if not values.map(math.isfinite).all():
        bad = int((~values.map(math.isfinite)).to_numpy().nonzero()[0][0])
        raise ValueError(f"{tsv_path}: row {bad + 1} has a non-finite or non-numeric {col} ({df[col].iloc[bad]!r})")
    return pd.DataFrame({"step": df["step"].astype(int), "gradient_ratio": values.astype(float)})


def plot_gradient_ratio(runs: Mapping[str, str | os.PathLike], out_png: str | os.PathLike) -> Path:
    """Plot the hard-negative gradient ratio against the training step, one line per run (Fig. 6 style).

    Args:
        runs: run label -> path of its dvclive ``gradient_ratio.tsv`` (see :data:`GRADIENT_RATIO_TSV`).
        out_png: output PNG (written atomically; parent folders are created).

    Returns:
        ``Path(out_png)``.

    Raises:
        ValueError: if ``runs`` is empty; errors of :func:`read_gradient_ratio` propagate.
    """
    if not runs:
        raise ValueError("plot_gradient_ratio: runs is empty; nothing to plot")
    series = {label: read_gradient_ratio(path) for label, path in runs.items()}
    with figure_axes(out_png) as ax:
        for label, df in series.items():
            ax.plot(df["step"], df["gradient_ratio"], label=str(label), marker="." if len(df) <= 50 else None)
        ax.set_xlabel("training step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("hard-negative gradient ratio")
        ax.set_title("Gradient toward the hard negative / positive pull")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    return Path(out_png)


def plot_gradient_ratio_study(study: Mapping, out_png: str | os.PathLike) -> Path:
    """Plot the gradient-ratio study (paper Fig. 6): ratio against batch size N (log axis), one line per loss
    variant (InfoNCE, Cement, static margins), with the spread over batches as error bars.

    Args:
        study: the ``metrics/<p>/gradient_ratio.json`` dict (``rows`` of ``N``, ``loss``, ``gradient_ratio``,
            ``gradient_ratio_sd``).
        out_png: output PNG (written atomically).

    Raises:
        ValueError: if the study has no rows.
    """
    rows = pd.DataFrame(study.get("rows", []))
    if rows.empty:
        raise ValueError("plot_gradient_ratio_study: the study has no rows (every N skipped?)")
    with figure_axes(out_png) as ax:
        for loss, df in rows.groupby("loss", sort=False):
            df = df.sort_values("N")
            style = "-" if loss in ("infonce", "cement") else ":"
            ax.errorbar(df["N"], df["gradient_ratio"], yerr=df["gradient_ratio_sd"], label=str(loss), ls=style,
                        marker="o", capsize=2)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size N (anchors; 2N x 2N logits)")
        ax.set_ylabel("hard-negative gradient ratio")
        ax.set_ylim(0, 1)
        ax.set_title(f"Gradient ratio on {study.get('dataset', '?')} pairs, {study.get('model', '?')} model")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    return Path(out_png)


def plot_learning_curves(curves: Mapping[str, Mapping[str, Mapping[str, list]]], models: Mapping[str, str],
                         baselines: list[str], out_png: str | os.PathLike, direction: str = "i2t") -> Path:
    """Held-out pair accuracy against the training step (the learning curves of
    :mod:`concrete_jungle.learning_curve`): one row of panels per ConcreteBatch dataset, one column per
    group (all pairs, then each keyword type); in each panel the hard-negative fine-tunes on that dataset (solid) and
    the baselines (dashed) on the same pairs, so a reader sees whether and when the hard negatives are learned.

    Args:
        curves: ``{label: read_curves(run folder)}`` (``{dataset: {"<group>_<direction>": [(step, acc)]}}``).
        models: hard-negative label -> its dataset.
        baselines: baseline labels (their curves cover every dataset).
        out_png: output PNG (written atomically).
        direction: ``"i2t"`` or ``"t2i"``.

    Raises:
        ValueError: no curve at all (every run was trained with ``train.curve_every: null``).
    """
    datasets = list(dict.fromkeys(models.values()))
    groups = [g for g in ("all", "attribute", "relation", "object")
              if any(f"{g}_{direction}" in c.get(d, {}) for c in curves.values() for d in datasets)]
    if not datasets or not groups:
        raise ValueError("plot_learning_curves: no learning curve logged (train.curve_every is null?)")
    fig, axes = plt.subplots(len(datasets), len(groups), figsize=(3.2 * len(groups), 2.6 * len(datasets)),
                             squeeze=False, sharex=True, sharey=True)
    try:
        for r, d in enumerate(datasets):
            for c, g in enumerate(groups):
                ax, key = axes[r][c], f"{g}_{direction}"
                for label in [*(m for m, ds in models.items() if ds == d), *baselines]:
                    series = curves.get(label, {}).get(d, {}).get(key)
                    if series:
                        steps, acc = zip(*series)
                        base = label in baselines
                        ax.plot(steps, [100 * a for a in acc], "--" if base else "-", marker=".", label=label,
                                color="black" if base else None)
                ax.axhline(50, color="grey", lw=0.6, ls=":")
                ax.set_title(f"D_{d} {g}", fontsize="small")
                ax.grid(alpha=0.3)
                if c == 0:
                    ax.set_ylabel(f"held-out {direction.upper()} (%)")
                    ax.legend(fontsize="x-small")
                if r == len(datasets) - 1:
                    ax.set_xlabel("training step")
        fig.suptitle("Learning curves on held-out pairs (dashed: no hard negatives; dotted: chance)", fontsize="small")
    except BaseException:
        plt.close(fig)
        raise
    return save_figure(fig, out_png)
