"""Report rendering: the SugarCrepe table (paper Tab. 2) and the hard-negative gradient ratio plot (Fig. 6).

Inputs are the files other stages write:

* evaluation result JSONs (``metrics/<p>/evaluate/<model>.json``), i.e. the dict returned by
  ``concrete_jungle.evaluation.sugarcrepe.evaluate_sugarcrepe`` / ``summarize``:
  ``{"subsets": {name: {"accuracy", "n", "correct"}}, "micro_accuracy", "macro_accuracy", "n_items", ...}``;
* dvclive folders of the training runs, where the trainer logged
  ``live.log_metric("train/gradient_ratio", value)`` once per step. dvclive 3 writes that series to
  ``<dvclive_dir>/plots/metrics/train/gradient_ratio.tsv`` with a header ``step<TAB>gradient_ratio``
  (plus a ``timestamp`` column when logged with ``timestamp=True``).
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from concrete_jungle.evaluation.paired import paired_comparison  # noqa: E402
from concrete_jungle.io import atomic_write, read_json  # noqa: E402

__all__ = ["GRADIENT_RATIO_TSV", "sugarcrepe_table", "read_gradient_ratio", "plot_gradient_ratio",
           "plot_gradient_ratio_study", "render_report", "save_figure", "figure_axes", "paired_table"]

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


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|")


def _accuracy(label: str, where: str, value) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or not 0 <= value <= 1:
        raise ValueError(f"sugarcrepe_table: model {label!r}: {where} = {value!r} is not an accuracy in [0, 1]")
    return f"{value:.3f}"


def sugarcrepe_table(results: Mapping[str, dict]) -> str:
    """Markdown table of SugarCrepe accuracies: one row per model, one column per subset, micro, macro.

    Accuracies are fractions in [0, 1] with 3 decimals (I2T; ties count as wrong). A last row ``n``
    gives the item count of each subset and, under ``micro``, the total; the ``macro`` cell of that row
    is ``-`` (macro weights every subset equally). Subset columns are sorted by name (for SugarCrepe
    this is the paper's Tab. 2 order); model rows follow the order of ``results``.

    Args:
        results: model label -> evaluation result dict with ``subsets: {name: {"accuracy", "n"}}``,
            ``micro_accuracy``, ``macro_accuracy`` and ``n_items``.

    Returns:
        The table as a string ending with a newline.

    Raises:
        ValueError: if ``results`` is empty, a result lacks a key, an accuracy is not a finite number
            in [0, 1], or the models were evaluated on different subsets or item counts (their
            numbers would not be comparable).
    """
    if not results:
        raise ValueError("sugarcrepe_table: results is empty")
    ref_label, ref_counts, ref_total = None, None, None
    for label, res in results.items():
        for key in ("subsets", "micro_accuracy", "macro_accuracy", "n_items"):
            if not isinstance(res, Mapping) or key not in res:
                raise ValueError(f"sugarcrepe_table: result of model {label!r} lacks {key!r}")
        try:
            counts = {name: int(s["n"]) for name, s in res["subsets"].items()}
        except (KeyError, TypeError) as err:
            raise ValueError(f"sugarcrepe_table: model {label!r}: a subset lacks 'n' ({err})") from err
        if not counts:
            raise ValueError(f"sugarcrepe_table: model {label!r} has no subset")
        if ref_counts is None:
            ref_label, ref_counts, ref_total = label, counts, int(res["n_items"])
        elif counts != ref_counts or int(res["n_items"]) != ref_total:
            raise ValueError(
                f"sugarcrepe_table: model {label!r} was evaluated on other items than {ref_label!r} "
                f"({counts}, n_items={res['n_items']} vs {ref_counts}, n_items={ref_total})"
            )
    names = sorted(ref_counts)
    header = ["model", *names, "micro", "macro"]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|",
    ]
    for label, res in results.items():
        row = [_cell(label)]
        for name in names:
            row.append(_accuracy(label, f"{name} accuracy", res["subsets"][name].get("accuracy")))
        row.append(_accuracy(label, "micro_accuracy", res["micro_accuracy"]))
        row.append(_accuracy(label, "macro_accuracy", res["macro_accuracy"]))
        lines.append("| " + " | ".join(row) + " |")
    lines.append("| " + " | ".join(["n", *(str(ref_counts[n]) for n in names), str(ref_total), "-"]) + " |")
    return "\n".join(lines) + "\n"


def paired_table(verdicts: Mapping[str, Mapping], pairs: Sequence[tuple[str, str]]) -> str:
    """Markdown table of paired comparisons (:func:`~concrete_jungle.evaluation.paired.paired_comparison`), one
    row per ``(model, reference)`` pair: accuracies, difference and paired standard error in points (1 point =
    0.01 accuracy), items only one of the two gets right, exact McNemar p.

    Args:
        verdicts: model label -> per-item verdicts ``{subset: {item_id: bool}}``.
        pairs: ``(model, reference)`` labels, both keys of ``verdicts``.

    Returns:
        The table as a string ending with a newline (header only when ``pairs`` is empty).

    Raises:
        KeyError: naming a label of ``pairs`` that has no verdicts.
        ValueError: as :func:`~concrete_jungle.evaluation.paired.paired_comparison` (e.g. different items).
    """
    lines = ["| model | vs | accuracy | reference | Δ (points) | paired SE | only model right | "
             "only reference right | McNemar p |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for model, ref in pairs:
        for label in (model, ref):
            if label not in verdicts:
                raise KeyError(f"paired_table: no verdicts for model {label!r}")
        c = paired_comparison(verdicts[model], verdicts[ref])
        lines.append(f"| {_cell(model)} | {_cell(ref)} | {c['accuracy_a']:.3f} | {c['accuracy_b']:.3f} | "
                     f"{100 * c['delta']:+.1f} | {100 * c['se_paired']:.1f} | {c['only_a']} | {c['only_b']} | "
                     f"{'<0.001' if c['mcnemar_p'] < 0.001 else format(c['mcnemar_p'], '.3f')} |")
    return "\n".join(lines) + "\n"


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


def render_report(
    eval_results: Mapping[str, str | os.PathLike],
    train_dirs: Mapping[str, str | os.PathLike],
    out_dir: str | os.PathLike,
    gradient_study: str | os.PathLike | None = None,
    verdicts: Mapping[str, str | os.PathLike] | None = None,
    pairs: Sequence[tuple[str, str]] = (),
) -> dict[str, Path]:
    """Write ``out_dir/sugarcrepe.md`` (the SugarCrepe table, the SugarCrepe++ ITT / TOT tables when the results
    have them, then the paired comparisons of ``pairs`` when ``verdicts`` are given) and
    ``out_dir/gradient_ratio.png``.

    Args:
        eval_results: model label -> evaluation result JSON path.
        train_dirs: run label -> dvclive folder of a training run (its ``train/gradient_ratio`` series
            is read from :data:`GRADIENT_RATIO_TSV` inside it).
        out_dir: report folder (created if needed).
        gradient_study: the gradient-ratio study JSON, plotted to ``gradient_ratio_study.png`` when given.
        verdicts: model label -> per-item verdicts file (``{"model", "verdicts": {subset: {item: bool}}}``).
        pairs: ``(model, reference)`` labels compared paired (:func:`paired_table`) when ``verdicts`` is given.

    Returns:
        ``{"sugarcrepe": path of the Markdown file, "gradient_ratio": path of the PNG}`` (+
        ``"gradient_ratio_study"``).

    Raises:
        FileNotFoundError: naming a missing result JSON, verdicts file or gradient-ratio TSV.
        ValueError: as :func:`sugarcrepe_table`, :func:`paired_table` and :func:`plot_gradient_ratio`; also
            when only some models have a SugarCrepe++ result.
    """
    out_dir = Path(out_dir)
    results = {label: read_json(path) for label, path in eval_results.items()}
    table = sugarcrepe_table(results)
    text = (
        "# SugarCrepe\n\n"
        "I2T accuracy (fraction of items whose image is strictly closer, in cosine, to the positive caption "
        "than to the hard negative; ties count as wrong). micro = over items, macro = mean over subsets "
        "(the paper's M.Avg). Row `n` = items per subset.\n\n" + table
    )
    with_pp = [label for label, res in results.items() if "sugarcrepe_pp" in res]
    if with_pp:
        if len(with_pp) != len(results):
            missing = [label for label in results if label not in with_pp]
            raise ValueError(f"render_report: models {missing} have no SugarCrepe++ result while {with_pp} do")
        text += (
            "\n## SugarCrepe++\n\n"
            "ITT: the image must be closer to both positive captions than to the negative. TOT (text encoder "
            "only): the two positives must be closer to each other than either is to the negative. Strict, "
            "cosine space.\n\n### ITT\n\n"
            + sugarcrepe_table({label: res["sugarcrepe_pp"]["itt"] for label, res in results.items()})
            + "\n### TOT\n\n"
            + sugarcrepe_table({label: res["sugarcrepe_pp"]["tot"] for label, res in results.items()})
        )
    if verdicts is not None and pairs:
        per_item = {label: read_json(path)["verdicts"] for label, path in verdicts.items()}
        text += (
            "\n## Paired comparisons\n\n"
            "The same items scored by two models: Δ = micro accuracy of the model minus the reference's, in "
            "points; paired SE = sqrt((p01 + p10 - (p01 - p10)^2) / n) with p01 / p10 the shares only one model gets "
            "right; McNemar p = exact two-sided test on those items. A Δ within about two paired SEs is no "
            "evidence of a difference.\n\n" + paired_table(per_item, pairs)
        )
    md = out_dir / "sugarcrepe.md"
    with atomic_write(md) as fh:
        fh.write(text)
    png = plot_gradient_ratio({label: Path(d) / GRADIENT_RATIO_TSV for label, d in train_dirs.items()}, out_dir / "gradient_ratio.png")
    out = {"sugarcrepe": md, "gradient_ratio": png}
    if gradient_study is not None:
        out["gradient_ratio_study"] = plot_gradient_ratio_study(read_json(gradient_study),
                                                                out_dir / "gradient_ratio_study.png")
    return out
