"""The paper's result tables (Sec. 3.3, Tab. 2 and Tab. 3), the paired statistics behind them, and the held-out plot.

Inputs are the files the evaluation stages write (one schema for every suite,
:func:`concrete_jungle.evaluation.suite.suite_result`):

* ``metrics/<p>/evaluate/<suite>/<model>.json``: ``{"suite", "model", "checkpoint", "precision", "available",
  "reason", "metrics", "n"}``; a skipped suite has ``available: false``, its ``reason`` and empty ``metrics``;
* ``data/<p>/verdicts/<suite>/<model>.json``: ``{"suite", "model", "verdicts"}`` (per-item booleans).

:func:`read_results` / :func:`read_verdicts` gather them into ``{suite: {model: ...}}``. :func:`table2` renders the
compositional table (SugarCrepe subsets, SugarCrepe++ ITT / TOT, Winoground text / image / group), :func:`table3`
the general-representation table (linear probes, VTAB groups, retrieval R@K), both in Markdown and LaTeX
(booktabs). Numbers are the recorded fractions shown as percentages with one decimal; nothing is invented: a
skipped suite, task or set shows "—" with a footnote giving the recorded reason. :func:`comparisons_markdown`
compares pairs of models paired on the same items (bootstrap CI, exact McNemar, Holm within each headline) and
:func:`plot_heldout` draws held-out accuracy against the concreteness bin.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from analysis.report import save_figure  # noqa: E402
from concrete_jungle.evaluation.paired import holm, mcnemar_mde, paired_bootstrap_ci, paired_comparison  # noqa: E402
from concrete_jungle.evaluation.positive_control import DIRECTIONS, failed_models, has_control_arms  # noqa: E402
from concrete_jungle.evaluation.positive_control import verdict as pc_verdict  # noqa: E402
from concrete_jungle.evaluation.sugarcrepe import SUGARCREPE_SUBSETS  # noqa: E402
from concrete_jungle.io import read_json  # noqa: E402

__all__ = ["DASH", "TABLE2_SUITES", "TABLE3_SUITES", "VTAB_GROUPS", "COMPARISON_SUITES", "latex_escape",
           "read_results", "read_verdicts", "table2", "table3", "table_mavg", "comparisons_markdown",
           "positive_control_markdown", "visibility_markdown", "plot_heldout"]

#: What a cell without a recorded number shows (its footnote gives the reason).
DASH = "—"
#: Suites of the compositional table (paper Tab. 2), in column order.
TABLE2_SUITES = ("sugarcrepe", "sugarcrepe_pp", "winoground")
#: Suites of the general-representation table (paper Tab. 3), in column order.
TABLE3_SUITES = ("probe", "retrieval")
#: The VTAB-1k task groups (Zhai et al. 2019), in the order the table shows them.
VTAB_GROUPS = ("natural", "specialized", "structured")
#: Suites :func:`comparisons_markdown` can compare paired (``probe`` and ``retrieval`` only when asked).
COMPARISON_SUITES = ("sugarcrepe", "sugarcrepe_pp", "winoground", "heldout", "probe", "retrieval")

_SUITE_LABEL = {"sugarcrepe": "SugarCrepe", "sugarcrepe_pp": "SugarCrepe++", "winoground": "Winoground",
                "probe": "linear probe", "retrieval": "retrieval", "heldout": "held-out pairs"}
_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                  "\u2212": "$-$", "\u00d7": r"$\times$"}


def latex_escape(text) -> str:
    r"""``text`` with LaTeX's special characters escaped (``_`` -> ``\_``, ``%`` -> ``\%``, ``&`` -> ``\&``, and
    ``\ $ # { } ~ ^``); "—" becomes ``---``, "−" ``$-$``, "×" ``$\times$``, Markdown backticks are dropped."""
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in str(text).replace("`", "")).replace(DASH, "---")


# ------------------------------------------------------------------------------------------------
# reading


def _read_tree(folder: str | os.PathLike, suites: Sequence[str], models: Sequence[str], key: str | None) -> dict:
    out: dict[str, dict] = {}
    for suite in suites:
        for model in models:
            path = Path(folder) / suite / f"{model}.json"
            if path.is_file():
                obj = read_json(path)
                out.setdefault(suite, {})[model] = obj if key is None else obj.get(key, {})
    return out


def read_results(evaluate_dir: str | os.PathLike, models: Sequence[str],
                 suites: Sequence[str] = (*TABLE2_SUITES, *TABLE3_SUITES, "heldout")) -> dict[str, dict]:
    """Read ``<evaluate_dir>/<suite>/<model>.json`` into ``{suite: {model: result}}`` for :func:`table2` /
    :func:`table3` (``evaluate_dir`` = ``metrics/<p>/evaluate``). A file that does not exist is left out (the tables
    then show "—" with the footnote "no result file"); a suite without any file is left out.

    Raises:
        ValueError: a file that is not valid JSON (naming it).
    """
    return _read_tree(evaluate_dir, suites, models, None)


def read_verdicts(verdicts_dir: str | os.PathLike, models: Sequence[str],
                  suites: Sequence[str] = COMPARISON_SUITES) -> dict[str, dict]:
    """Read ``<verdicts_dir>/<suite>/<model>.json`` into ``{suite: {model: verdicts}}`` (the files' ``verdicts``
    member) for :func:`comparisons_markdown` (``verdicts_dir`` = ``data/<p>/verdicts``); absent files are left out.

    Raises:
        ValueError: a file that is not valid JSON (naming it).
    """
    return _read_tree(verdicts_dir, suites, models, "verdicts")


# ------------------------------------------------------------------------------------------------
# table model


@dataclass(frozen=True)
class _Skip:
    """A cell without a number: ``what`` was not scored because of ``reason``."""

    what: str
    reason: str


@dataclass
class _Col:
    group: str  # header group (LaTeX spanning header; Markdown prefix)
    name: str  # column name under the group ("" for a placeholder column)
    suite: str
    value: Callable[[Mapping], float | _Skip]  # metrics -> fraction or why not
    in_mavg: bool = True
    short: str | None = None  # Markdown prefix of the group
    key: str | None = None  # the retrieval set / probe task the column reads

    @property
    def markdown(self) -> str:
        prefix = self.short if self.short is not None else self.group
        return f"{prefix} {self.name}".strip()


def _number(where: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 <= value <= 1:
        raise ValueError(f"{where} = {value!r} is not a fraction in [0, 1]")
    return float(value)


def _available(results: Mapping[str, Mapping], suite: str, models: Sequence[str]) -> list[Mapping]:
    """The metrics of every model whose ``suite`` result is available, in model order."""
    per = results.get(suite, {})
    return [per[m].get("metrics") or {} for m in models if m in per and per[m].get("available", True)]


def _union(keys_lists) -> list[str]:
    return list(dict.fromkeys(k for keys in keys_lists for k in keys))


def _placeholder(suite: str, group: str, why: str) -> _Col:
    return _Col(group, "", suite, lambda _m, why=why: _Skip(group, why))


def _unavailable_reason(entry, what: str) -> str:
    if isinstance(entry, Mapping) and entry.get("available") is False:
        return str(entry.get("reason") or "skipped (no reason recorded)")
    return f"{what} absent from the result"


def _table2_columns(results: Mapping[str, Mapping], models: Sequence[str]) -> list[_Col]:
    names = _union((m.get("subsets") or {}).keys() for m in _available(results, "sugarcrepe", models))
    names = [s for s in SUGARCREPE_SUBSETS if s in names] + sorted(s for s in names if s not in SUGARCREPE_SUBSETS)

    def subset(name):
        def get(metrics):
            subsets = metrics.get("subsets") or {}
            if not isinstance(subsets.get(name), Mapping) or "accuracy" not in subsets[name]:
                return _Skip(f"SugarCrepe {name}", "subset absent from the result")
            return subsets[name]["accuracy"]
        return get
    cols = [_Col("SugarCrepe", name, "sugarcrepe", subset(name), short="SC") for name in names]
    cols = cols or [_placeholder("sugarcrepe", "SugarCrepe", "no subset scored")]

    def pp(task):
        def get(metrics):
            t = metrics.get(task)
            if not isinstance(t, Mapping) or "macro_accuracy" not in t:
                return _Skip(f"SugarCrepe++ {task.upper()}", f"{task.upper()} absent from the result")
            return t["macro_accuracy"]
        return get
    cols += [_Col("SugarCrepe++", task.upper(), "sugarcrepe_pp", pp(task), short="SC++") for task in ("itt", "tot")]

    def wg(score):
        def get(metrics):
            return metrics[score] if score in metrics else _Skip(f"Winoground {score}", "score absent from the result")
        return get
    cols += [_Col("Winoground", score, "winoground", wg(score), short="WG") for score in ("text", "image", "group")]
    return cols


def _vtab_group(name) -> str | None:
    g = str(name).lower()
    for prefix in ("vtab-", "vtab_", "vtab/", "vtab "):
        g = g.removeprefix(prefix)
    return g if g in VTAB_GROUPS else None


_PROBE_METRICS = (("top1", "top-1"), ("top5", "top-5"), ("map", "mAP"))


def _probe_tasks(metrics: Mapping) -> dict[str, Mapping]:
    """Per-task entries of a probe result's metrics: ``metrics["tasks"]`` when there is one (``{"tasks": {task:
    ...}, "groups": ...}``), else every mapping member but ``groups`` (``{task: ..., "groups": ...}``, the layout of
    :func:`concrete_jungle.evaluation.linear_probe.score_probe`)."""
    tasks = metrics.get("tasks")
    if isinstance(tasks, Mapping):
        return dict(tasks)
    return {k: v for k, v in metrics.items() if k != "groups" and isinstance(v, Mapping)}


def _task_group(task: str, entry) -> str | None:
    """The VTAB group of a probe task: its recorded ``group``, else the VTAB-1k group of its name, else None."""
    if isinstance(entry, Mapping) and entry.get("group") is not None:
        return _vtab_group(entry["group"])
    try:
        from concrete_jungle.evaluation.linear_probe import vtab_task_group
    except ImportError:  # the probe module is optional here: without it only recorded groups count
        return None
    return vtab_task_group(task)


def _table3_columns(results: Mapping[str, Mapping], models: Sequence[str]) -> list[_Col]:
    cols: list[_Col] = []
    avail = [_probe_tasks(m) for m in _available(results, "probe", models)]
    recorded_off = [t for r in results.get("probe", {}).values() for t in (r.get("unavailable") or {})]
    tasks_all = _union([*(m.keys() for m in avail), recorded_off])
    group_of: dict[str, str | None] = {}
    for task in tasks_all:
        entries = [m[task] for m in avail if isinstance(m.get(task), Mapping)]
        group_of[task] = _task_group(task, next((e for e in entries if e.get("group") is not None),
                                                entries[0] if entries else None))
    scored = {t for t in tasks_all for m in avail if isinstance(m.get(t), Mapping) and m[t].get("available", True)}
    order = [t for t in tasks_all if group_of[t] is None and t in scored]
    order += [t for g in VTAB_GROUPS for t in tasks_all if group_of[t] == g and t in scored]
    order += [t for t in tasks_all if t not in order]  # unavailable for every model: last

    def probe(task, key):
        def get(metrics):
            entry = _probe_tasks(metrics).get(task)
            if not isinstance(entry, Mapping) or entry.get("available") is False:
                return _Skip(f"probe task {task}", _unavailable_reason(entry, "task"))
            if key not in entry:
                return _Skip(f"probe task {task}", f"{key} absent from the result")
            return entry[key]
        return get
    for task in order:
        keys = [(k, label) for k, label in _PROBE_METRICS if any(k in (m.get(task) or {}) for m in avail)]
        if not keys:  # unavailable for every model: one placeholder column with the reason
            cols.append(_Col(task, "", "probe", probe(task, "top1"), short=f"{task} (probe)", key=task))
            continue
        in_mavg = group_of[task] is None  # VTAB tasks count through their group means
        cols += [_Col(task, label, "probe", probe(task, k), in_mavg=in_mavg, key=task) for k, label in keys]

    groups = [g for g in VTAB_GROUPS if any(group_of[t] == g for t in scored)]
    if groups:
        def vtab(group):
            def get(metrics):
                recorded = {_vtab_group(k): v for k, v in (metrics.get("groups") or {}).items() if _vtab_group(k)}
                if group in recorded:
                    return recorded[group]
                tops = [e["top1"] for t, e in _probe_tasks(metrics).items()
                        if group_of.get(t) == group and "top1" in e]
                return sum(tops) / len(tops) if tops else _Skip(f"VTAB {group}", "no task of the group was scored")
            return get

        def vtab_mean(metrics):
            vals = [vtab(g)(metrics) for g in groups]
            if any(isinstance(v, _Skip) for v in vals):
                return _Skip("VTAB mean", "a VTAB group has no scored task")
            recorded = (metrics.get("groups") or {}).get("vtab_mean_of_groups")
            return recorded if recorded is not None else sum(vals) / len(vals)
        cols += [_Col("VTAB", g, "probe", vtab(g), short="VTAB") for g in groups]
        cols.append(_Col("VTAB", "mean", "probe", vtab_mean, in_mavg=False, short="VTAB"))
    if "probe" in results and not order:
        why = next((str(r["reason"]) for r in results["probe"].values() if r.get("reason")), "no task scored")
        cols.append(_placeholder("probe", "linear probe", why))

    ravail = _available(results, "retrieval", models)
    sets = _union(m.keys() for m in ravail)
    sets += [s for r in results.get("retrieval", {}).values() for s in (r.get("unavailable") or {}) if s not in sets]

    def recall(name, direction, k):
        def get(metrics):
            entry = metrics.get(name)
            if not isinstance(entry, Mapping) or direction not in entry:
                return _Skip(f"retrieval set {name}", _unavailable_reason(entry, "set"))
            if k not in entry[direction]:
                return _Skip(f"retrieval set {name}", f"{direction} {k} absent from the result")
            return entry[direction][k]
        return get
    for name in sets:
        ks = _union(
            sorted((k for k in m[name].get(d, {}) if str(k).startswith("R@")), key=lambda k: int(k[2:]))
            for m in ravail if isinstance(m.get(name), Mapping) for d in ("i2t", "t2i"))
        ks = sorted(ks, key=lambda k: int(k[2:]))
        group = f"{name} retrieval"
        if not ks:
            cols.append(_Col(group, "", "retrieval", recall(name, "i2t", "R@1"), key=name))
            continue
        cols += [_Col(group, f"{d.upper()} {k}", "retrieval", recall(name, d, k), short=name, key=name)
                 for d in ("i2t", "t2i") for k in ks]
    if "retrieval" in results and not sets:
        why = next((str(r.get("reason")) for r in results["retrieval"].values() if r.get("reason")), "no set scored")
        cols.append(_placeholder("retrieval", "retrieval", why))
    return cols


def _cell(results: Mapping[str, Mapping], col: _Col, model: str) -> float | _Skip:
    label = _SUITE_LABEL.get(col.suite, col.suite)
    res = results.get(col.suite, {}).get(model)
    if res is None:
        return _Skip(label, "no result file")
    if not res.get("available", True):
        return _Skip(label, str(res.get("reason") or "skipped (no reason recorded)"))
    metrics = res.get("metrics") or {}
    value = col.value(metrics)
    if isinstance(value, _Skip):
        # an unavailable retrieval set / probe task may be recorded beside the metrics only
        off = res.get("unavailable") or {}
        if col.key is not None and col.key in off:
            return _Skip(value.what, str(off[col.key]))
        return value
    return _number(f"{col.suite} result of model {model!r}, {col.markdown}", value)


@dataclass
class _Rendered:
    cols: list[_Col]
    rows: list[tuple[str, list[str], str, str]]  # model, cells, M.Avg, gain
    footnotes: list[str]
    mavg: dict[str, float]
    mavg_cols: list[_Col]


def _render(results: Mapping[str, Mapping], models: Sequence[str], cols: list[_Col], base: str) -> _Rendered:
    if not models:
        raise ValueError("the table needs at least one model")
    if len(set(models)) != len(models):
        raise ValueError(f"models lists a label twice: {list(models)}")
    notes: dict[tuple[str, str], list[str]] = {}

    def mark(skip: _Skip, model: str) -> int:
        key = (skip.what, " ".join(skip.reason.split()))
        notes.setdefault(key, [])
        if model not in notes[key]:
            notes[key].append(model)
        return list(notes).index(key) + 1

    values = {m: [_cell(results, c, m) for c in cols] for m in models}
    mavg_idx = [i for i, c in enumerate(cols) if c.in_mavg and all(not isinstance(values[m][i], _Skip) for m in models)]
    mavg = {m: sum(values[m][i] for i in mavg_idx) / len(mavg_idx) for m in models} if mavg_idx else {}
    rows = []
    for m in models:
        cells = [f"{100 * v:.1f}" if not isinstance(v, _Skip) else f"{DASH}[^{mark(v, m)}]" for v in values[m]]
        if mavg_idx:
            avg = f"{100 * mavg[m]:.1f}"
            if m == base:
                gain = "ref."
            elif base not in mavg:
                gain = f"{DASH}[^{mark(_Skip('relative gain', f'base model {base!r} is not a row of the table'), m)}]"
            elif mavg[base] <= 0:
                gain = f"{DASH}[^{mark(_Skip('relative gain', f'M.Avg of base model {base!r} is 0'), m)}]"
            else:
                gain = f"{100 * (mavg[m] - mavg[base]) / mavg[base]:+.2f}"
        else:
            why = _Skip("M.Avg", "no column has a number for every model")
            avg = gain = f"{DASH}[^{mark(why, m)}]"
        rows.append((m, cells, avg, gain))
    footnotes = [f"{what}: {reason} (models: {', '.join(ms)})" for (what, reason), ms in notes.items()]
    return _Rendered(cols, rows, footnotes, mavg, [cols[i] for i in mavg_idx])


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _markdown(title: str, caption: Sequence[str], r: _Rendered, notes: Sequence[str]) -> str:
    header = ["Model", *(c.markdown for c in r.cols), "M.Avg", "Rel. gain (%)"]
    lines = [f"**{title}**", "", *caption, "",
             "| " + " | ".join(_md_cell(h) for h in header) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join([_md_cell(m), *cells, avg, gain]) + " |" for m, cells, avg, gain in r.rows]
    if r.footnotes:
        lines += [""] + [f"[^{k}]: {_md_cell(text)}" for k, text in enumerate(r.footnotes, 1)]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"


def _latex_marks(text: str) -> str:
    # "—[^3]" -> "---\textsuperscript{3}"
    if text.startswith(DASH + "[^"):
        return "---\\textsuperscript{" + text[len(DASH) + 2:-1] + "}"
    return latex_escape(text)


def _latex(caption: str, label: str, r: _Rendered, notes: Sequence[str]) -> str:
    spans: list[tuple[str, int]] = []
    for c in r.cols:
        if spans and spans[-1][0] == c.group:
            spans[-1] = (c.group, spans[-1][1] + 1)
        else:
            spans.append((c.group, 1))
    group_row, rules, start = ["Model"], [], 2
    for group, width in spans:
        group_row.append(f"\\multicolumn{{{width}}}{{c}}{{{latex_escape(group)}}}")
        rules.append(f"\\cmidrule(lr){{{start}-{start + width - 1}}}")
        start += width
    group_row += ["M.Avg", "Rel.\\ gain (\\%)"]
    name_row = ["", *(latex_escape(c.name) for c in r.cols), "", ""]
    lines = ["\\begin{table}[t]", "\\centering", f"\\caption{{{caption}}}", f"\\label{{{label}}}",
             "\\begin{tabular}{l" + "r" * (len(r.cols) + 2) + "}", "\\toprule",
             " & ".join(group_row) + " \\\\", " ".join(rules), " & ".join(name_row) + " \\\\", "\\midrule"]
    lines += [" & ".join([latex_escape(m), *(_latex_marks(c) for c in cells), _latex_marks(avg), _latex_marks(gain)])
              + " \\\\" for m, cells, avg, gain in r.rows]
    lines += ["\\bottomrule", "\\end{tabular}"]
    if r.footnotes or notes:
        lines += ["\\par\\smallskip{\\footnotesize\\raggedright"]
        lines += [f"\\textsuperscript{{{k}}} {latex_escape(text)}\\\\" for k, text in enumerate(r.footnotes, 1)]
        lines += [f"{latex_escape(n)}\\\\" for n in notes]
        lines += ["}"]
    lines.append("\\end{table}")
    return "\n".join(lines) + "\n"


def _mavg_caption(r: _Rendered, base: str, extra: str = "") -> str:
    if not r.mavg_cols:
        return "M.Avg: no column has a number for every model, so no macro average is given."
    return (f"M.Avg = mean of the {len(r.mavg_cols)} columns that are available (a number, no \"—\") for every "
            f"model of the table{extra}, so that the rows average the same columns; a column with \"—\" in any row "
            f"is left out of every row's M.Avg. Rel. gain = (M.Avg − M.Avg of `{base}`) / M.Avg of `{base}` × 100, "
            f"in % (relative, not points).")


def _relative_here(r: _Rendered, model: str, ref: str) -> str | None:
    if model in r.mavg and ref in r.mavg and r.mavg[ref] > 0:
        return f"{100 * (r.mavg[model] - r.mavg[ref]) / r.mavg[ref]:+.2f} %"
    return None


def _columns(results: Mapping[str, Mapping], models: Sequence[str], table: str) -> tuple[dict, list[_Col]]:
    """The suites present and the columns of ``table`` (``"table2"`` or ``"table3"``) over ``results``."""
    if table == "table2":
        present = {s: results[s] for s in TABLE2_SUITES if s in results}
        cols = [c for c in _table2_columns(present, models) if c.suite in present]
        if not cols:
            raise ValueError(f"table2: results hold none of the suites {list(TABLE2_SUITES)}")
        return present, cols
    if table != "table3":
        raise ValueError(f"unknown table {table!r}: choose table2 or table3")
    present = {s: results[s] for s in TABLE3_SUITES if s in results}
    if not present:
        raise ValueError(f"table3: results hold none of the suites {list(TABLE3_SUITES)}")
    cols = _table3_columns(present, models)
    if not cols:
        raise ValueError("table3: no probe task and no retrieval set is listed in the results")
    return present, cols


def _subset_set_notes(results: Mapping[str, Mapping]) -> list[str]:
    """A note per suite scored over other subsets than the benchmark's own (a result's ``subset_set``, issue 22):
    its "all" and M.Avg are then not the paper's."""
    notes = []
    for suite, by_model in results.items():
        sets = {(tuple(r["subset_set"]["absent"]), tuple(r["subset_set"]["extra"])) for r in by_model.values()
                if isinstance(r, Mapping) and not r.get("subset_set", {}).get("complete", True)}
        for absent, extra in sorted(sets):
            notes.append(f"{_SUITE_LABEL.get(suite, suite)} scored over other subsets than the benchmark's own: "
                         + "; ".join(part for part in (absent and "absent " + ", ".join(absent),
                                                       extra and "added " + ", ".join(extra)) if part) + ".")
    return notes


def table_mavg(results: Mapping[str, Mapping[str, Mapping]], models: Sequence[str], table: str = "table2",
               base: str = "base") -> dict[str, float]:
    """Each model's **M.Avg** exactly as :func:`table2` / :func:`table3` compute it: the mean of the columns that
    have a number for every model of ``models`` (fractions in [0, 1], not percent).

    Args:
        results: ``{suite: {model: result JSON}}`` (:func:`read_results`).
        models: the rows; the columns averaged are those every one of them has.
        table: ``"table2"`` (compositional) or ``"table3"`` (general representation).
        base: as in :func:`table2` (only names the reference; the values do not depend on it).

    Returns:
        ``{model: M.Avg}``; empty when no column has a number for every model.

    Raises:
        ValueError: an unknown ``table``, results without its suites, or the errors of :func:`table2`.
    """
    present, cols = _columns(results, models, table)
    return dict(_render(present, models, cols, base).mavg)


def table2(results: Mapping[str, Mapping[str, Mapping]], models: Sequence[str], base: str = "base") -> tuple[str, str]:
    """The compositional-understanding table (paper Sec. 3.3, Tab. 2) in Markdown and LaTeX.

    Columns: SugarCrepe I2T accuracy per subset (the subsets present, in :data:`SUGARCREPE_SUBSETS` order),
    SugarCrepe++ ITT and TOT (macro over subsets), Winoground text / image / group, **M.Avg** (mean of the columns
    available for every model; the caption names how many) and the **relative gain** of M.Avg over ``base`` in %
    ((M.Avg − M.Avg_base) / M.Avg_base × 100, 2 decimals, the precision the paper quotes). Accuracies are shown as
    percentages with 1 decimal. A skipped suite (``available: false``), an absent subset or a model without a result
    file shows "—" and a footnote with the recorded reason; no number is invented. A note quotes the paper's figure
    (Slipform = D_hc + Cement loss: +13.13 % relative M.Avg over CLIP) and, when ``hc-cement`` and ``clip`` are rows,
    the same figure here.

    Args:
        results: ``{suite: {model: result JSON}}`` (:func:`read_results`) with suites ``sugarcrepe``,
            ``sugarcrepe_pp``, ``winoground``; a suite that is absent is left out (listed in a note).
        models: row labels, in row order (``base``, ``clip``, ``<dataset>-<loss>``).
        base: the reference of the relative gain (must be a row for the gain to be shown).

    Returns:
        ``(markdown, latex)``, each ending with a newline; the LaTeX is a ``table`` with a booktabs ``tabular``.

    Raises:
        ValueError: ``models`` is empty or repeats a label, or a recorded value is not a fraction in [0, 1]
            (naming suite, model and column).
    """
    present, cols = _columns(results, models, "table2")
    absent = [s for s in TABLE2_SUITES if s not in results]
    r = _render(present, models, cols, base)
    here = _relative_here(r, "hc-cement", "clip")
    notes = ["Paper (Sec. 3.3): Slipform (D_hc + Cement loss) gains 13.13 % relative M.Avg over the CLIP baseline"
             + (f"; here hc-cement vs clip: {here} relative M.Avg." if here else ".")]
    if absent:
        notes.append("Not evaluated (no result): " + ", ".join(_SUITE_LABEL[s] for s in absent) + ".")
    notes += _subset_set_notes(present)
    caption = ["Compositional understanding (paper Sec. 3.3, Tab. 2): accuracy in %, 1 decimal. SC = SugarCrepe "
               "(I2T accuracy per subset), SC++ = SugarCrepe++ (ITT / TOT, macro over subsets), WG = Winoground "
               "(text / image / group score). " + _mavg_caption(r, base)]
    md = _markdown("Table 2 (reproduction).", caption, r, notes)
    tex = _latex("Compositional understanding (paper Tab.~2): accuracy in \\%. " + latex_escape(_mavg_caption(r, base)),
                 "tab:compositional", r, notes)
    return md, tex


def _probe_c_note(results: Mapping[str, Mapping[str, Mapping]], models: Sequence[str]) -> str | None:
    """A note on the probes' chosen C (issue 29): how many fits the search for C left at a bound of the search while
    that end of the grid was still strictly best (``C_at_edge``), and how many fits predate the search (a result with
    a ``C`` but no ``C_at_edge`` key: a fixed grid, whose choice may be an end of it). None without a recorded C."""
    searched, older, edges = 0, 0, []
    for model in models:
        res = (results.get("probe") or {}).get(model) or {}
        if not res.get("available", True):
            continue
        for task, entry in _probe_tasks(res.get("metrics") or {}).items():
            if not (isinstance(entry, Mapping) and "C" in entry):
                continue
            if "C_at_edge" not in entry:
                older += 1
            else:
                searched += 1
                if entry["C_at_edge"]:
                    edges.append(f"{model} / {task} (C = {entry['C']:g}, {entry['C_at_edge']})")
    notes = []
    if searched:
        notes.append(f"Linear probes: the search for C stopped at its bound, that end still the best, in {len(edges)} "
                     f"of {searched} fits" + (": " + "; ".join(edges) if edges else "") + ".")
    if older:
        notes.append(f"{older} probe fits predate the search for C (a fixed grid; their C may be an end of it).")
    return " ".join(notes) or None


def table3(results: Mapping[str, Mapping[str, Mapping]], models: Sequence[str], base: str = "base") -> tuple[str, str]:
    """The general-representation table (paper Sec. 3.3, Tab. 3) in Markdown and LaTeX.

    Columns: every linear-probe task (top-1, and top-5 / mAP where the result has them; ImageNet-1k, COCO
    multi-label, VTAB-1k tasks ...), the VTAB groups natural / specialized / structured and their mean when VTAB
    tasks exist (a task's ``group``; the recorded group means, else the mean top-1 of the group's tasks), retrieval
    R@K image->text and text->image of every set, **M.Avg** and the **relative gain** over ``base`` in % as in
    :func:`table2`. M.Avg counts each probe metric of a non-VTAB task, each VTAB group mean (so VTAB tasks are not
    counted twice; the individual VTAB tasks and the VTAB mean are shown but not averaged) and each recall,
    over the columns available for every model. Values: percentages (accuracy, mAP, recall), 1 decimal. A skipped
    suite, task or set shows "—" with a footnote giving its recorded reason. A note quotes the paper's trade-off
    (Cement + D_hc trade general representation for compositional accuracy; Sec. 3.2: N = 256 instead of 1024 costs
    2.16 % relative in general representation and 1.18 % in compositional understanding), and another how many
    probe fits the search for C left at its bound (``C_at_edge``) or predate the search.

    Args:
        results: ``{suite: {model: result JSON}}`` with suites ``probe`` and / or ``retrieval``. Probe metrics
            may be ``{"tasks": {task: {...}}, "groups"}`` or ``{task: {...}, "groups"}`` (``score_probe``); a task's
            VTAB group is its ``group`` field, else the VTAB-1k group of its name. An unavailable task or set is an
            entry ``{"available": false, "reason"}`` or listed in the result's ``unavailable: {name: reason}``.
        models: row labels, in row order.
        base: the reference of the relative gain.

    Returns:
        ``(markdown, latex)``, each ending with a newline.

    Raises:
        ValueError: ``models`` is empty or repeats a label, results hold neither suite, or a recorded value is not
            a fraction in [0, 1] (naming suite, model and column).
    """
    present, cols = _columns(results, models, "table3")
    r = _render(present, models, cols, base)
    here = _relative_here(r, "hc-cement", "clip")
    notes = ["Paper (Sec. 3.3): the Cement loss with D_hc trades general visual representation for compositional "
             "accuracy (Slipform stays comparable to the other methods here)"
             + (f"; here hc-cement vs clip: {here} relative M.Avg." if here else "."),
             "Paper (Sec. 3.2): batch size N = 256 instead of 1024 costs 2.16 % relative in general representation "
             "and 1.18 % relative in compositional understanding."]
    edge = _probe_c_note(results, models)
    if edge:
        notes.append(edge)
    absent = [s for s in TABLE3_SUITES if s not in results]
    if absent:
        notes.append("Not evaluated (no result): " + ", ".join(_SUITE_LABEL[s] for s in absent) + ".")
    extra = " (VTAB through its group means)" if any(c.group == "VTAB" for c in r.cols) else ""
    caption = ["General visual representation (paper Sec. 3.3, Tab. 3): linear-probe top-1 / top-5 accuracy and "
               "mAP, VTAB-1k group means, zero-shot retrieval Recall@K (I2T = image->text, T2I = text->image), all "
               "in %, 1 decimal. " + _mavg_caption(r, base, extra)]
    md = _markdown("Table 3 (reproduction).", caption, r, notes)
    tex = _latex("General visual representation (paper Tab.~3), in \\%. "
                 + latex_escape(_mavg_caption(r, base, extra)), "tab:general", r, notes)
    return md, tex


# ------------------------------------------------------------------------------------------------
# paired comparisons


def _unwrap(v):
    if isinstance(v, Mapping) and "verdicts" in v and ("suite" in v or "model" in v):
        return v["verdicts"]
    return v


def _headlines(verdicts: Mapping[str, Mapping], include: Sequence[str]) -> list[tuple[str, Callable, str]]:
    """``(title, model verdicts -> {subset: {id: bool}} or None, suite)`` of every headline of the included
    suites, in order."""
    out: list[tuple[str, Callable, str]] = []
    for suite in include:
        if suite == "sugarcrepe":
            out.append(("SugarCrepe, I2T, all items (micro over subsets)", lambda v: v, suite))
        elif suite == "sugarcrepe_pp":
            out.append(("SugarCrepe++ ITT, all items", lambda v: v.get("itt"), suite))
        elif suite == "winoground":
            out.append(("Winoground group score",
                        lambda v: {"group": v["group"]} if isinstance(v.get("group"), Mapping) else None, suite))
        else:
            per = [_unwrap(v) for v in (verdicts.get(suite) or {}).values()]
            for name in _union((v or {}).keys() for v in per):
                if suite == "heldout":
                    out.append((f"Held-out pairs {name}, I2T", _member(name), suite))
                elif suite == "probe":
                    out.append((f"Linear probe {name}, top-1", _member(name), suite))
                else:
                    out.append((f"Retrieval {name}, I2T R@1", _retrieval_i2t(name), suite))
    return out


def _member(name: str) -> Callable:
    return lambda v: {name: v[name]} if isinstance(v.get(name), Mapping) else None


def _retrieval_i2t(name: str) -> Callable:
    def get(v):
        s = v.get(name)
        hits = s.get("i2t@1", s.get("i2t")) if isinstance(s, Mapping) else None
        return {name: hits} if isinstance(hits, Mapping) else None
    return get


def _p(p: float) -> str:
    return f"{p:.1e}" if p < 0.001 else f"{p:.3f}"


def _reading(model: str, ref: str, ci: Mapping, p_adj: float, alpha: float, mde: float,
             unreadable: Mapping[str, str]) -> str:
    """What a comparison row says: ✗ cannot be read (a model failed the positive control), a difference (Holm p
    below ``alpha``), or none detectable at its MDE (points)."""
    bad = [m for m in (model, ref) if m in unreadable]
    if bad:
        return f"✗ cannot be read ({', '.join(bad)})"
    if p_adj < alpha and (ci["low"] > 0 or ci["high"] < 0):
        return "higher" if ci["low"] > 0 else "lower"
    if abs(100 * ci["delta"]) >= mde:  # as large as the MDE, yet not significant once the family is adjusted
        return f"not significant after Holm (MDE {mde:.1f})"
    return f"none detectable (MDE {mde:.1f})"


def positive_control_markdown(control: Mapping, heading: str = "## Positive control") -> str:
    """The positive control section (``metrics/<p>/positive_control.json``, :mod:`concrete_jungle.evaluation.
    positive_control`): the verdict first, then a row per (hard-negative fine-tune, baseline, direction, keyword
    type or all pairs) with the model's role (control arm or treatment), n, both accuracies (%), the gain and its CI,
    the required gain (points), McNemar p, MDE (points) and whether the row meets the criterion (✓, ✗, or
    "underpowered": missed, with the required gain still inside the gain's bootstrap CI); then the file's
    ``text_side`` block (text-side pairs, TOT), if any, as a subsection of its own. Files written before control
    arms (no ``role``) show every model as a control arm. Returns Markdown ending with a newline."""
    text = control.get("text_side")
    body = _control_section(control, heading, bool(text))
    return body if not text else body + "\n" + _control_section(text, "### Text-side pairs (TOT)", False)


def _control_section(control: Mapping, heading: str, with_text: bool) -> str:
    """One block of :func:`positive_control_markdown`."""
    crit = control.get("criterion") or {}
    status = control.get("status", "unavailable")
    head = {"passed": "**PASSED**", "failed": "**FAILED**", "underpowered": "**UNDERPOWERED**"}.get(
        status, "**NOT MEASURED**")
    arms = has_control_arms(control)
    unread = ("The comparisons of a model whose dataset's control arm did not pass (✗ or underpowered) cannot be "
              "read: "
              if arms else "The comparisons of a model that fails it cannot be read (marked ✗): ")
    readable = status == "passed" and not failed_models(control)
    rescue = (" A dataset whose control arm is underpowered or unmeasured here but passes on its text-side pairs "
              "(below) can be read." if with_text else "")
    lines = [heading, "",
             f"{head}: {crit.get('rule', 'no criterion recorded')}. "
             + ("Every comparison below can be read." if readable else
                f"{control.get('reason') or ''}. {unread}"
                "a null result there cannot be told from an instrument that cannot see." + rescue), ""]
    models = control.get("models") or {}
    if not models:
        return "\n".join(lines) + "\n"
    level = f"{100 * crit.get('confidence_level', 0.95):g} %"
    share = crit.get("headroom_share")
    need = f"the required gain ({crit.get('min_gain_points', '?')} points" + (
        f", or {share:g} of the reference's errors where that is less)" if share is not None else ")")
    roles = (" A **control** arm is the fine-tune whose verdict the study needs; a **treatment** is compared against "
             "its dataset's control arm, its gain over the reference shown for reading, not judged." if arms else "")
    pairs = ("Text-side pairs of the model's own ConcreteBatch (captions of images no model trained on; TOT: a "
             "second caption of the image closer to the anchor caption than to its rewrite)"
             if crit.get("pairs") == "text-side" else
             "Held-out pairs of the model's own ConcreteBatch (anchors never trained on)")
    rows = "TOT rows" if crit.get("pairs") == "text-side" else "I2T and T2I rows"
    lines += [f"{pairs}. Gain = model − reference "
              f"in points, paired; {level} CI = percentile bootstrap over pairs "
              f"({crit.get('bootstrap_resamples', '?')} resamples); MDE at α = {crit.get('alpha', '?')} and "
              f"{100 * crit.get('power', 0.8):g} % power. ✓ = gain ≥ {need} "
              f"with McNemar p < {crit.get('alpha', '?')}; a model passes on its {rows} over all pairs."
              + roles, "",
              "| model | role | vs | pairs | direction | n | model acc. (%) | reference acc. (%) | gain (points) "
              "| CI (points) | needs (points) | McNemar p | MDE (points) | meets |",
              "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for label, e in models.items():
        role = e.get("role", "control")
        if pc_verdict(e) == "unmeasured":
            lines.append(f"| {_md_cell(label)} | {role} | {DASH} | {e.get('dataset')} | {DASH} | {DASH} | {DASH} | "
                         f"{DASH} | {DASH} | {DASH} | {DASH} | {DASH} | {DASH} | "
                         f"not measured: {_md_cell(str(e.get('reason')))} |")
            continue
        for ref, row in (e.get("vs") or {}).items():
            groups = [("all", row)] + [(t, row["by_type"][t]) for t in ("attribute", "relation", "object")
                                       if t in row.get("by_type", {})]
            for group, stats in groups:
                for direction in DIRECTIONS:
                    st = stats.get(direction)
                    if not st:
                        continue
                    name = f"**{label}**" if group == "all" else label
                    verdict = {"passed": "✓", "underpowered": "underpowered"}.get(pc_verdict(st), "✗")
                    req = st.get("required_gain_points", crit.get("min_gain_points"))
                    lines.append(
                        f"| {name} | {role} | {_md_cell(ref)} | {e.get('dataset')} {group} | {direction.upper()} | "
                        f"{st['n']} | {st['accuracy_pct']:.1f} | {st['reference_accuracy_pct']:.1f} | "
                        f"{st['gain_points']:+.1f} | [{st['ci_points'][0]:+.1f}, {st['ci_points'][1]:+.1f}] | "
                        f"{DASH if req is None else format(req, '.1f')} | {_p(st['mcnemar_p'])} | "
                        f"{st['mde_points']:.1f} | {verdict} |")
        v = pc_verdict(e)
        word = {"passed": "passed", "underpowered": "UNDERPOWERED"}.get(v, "FAILED") if role == "control" else (
            "beats the reference" if v == "passed" else "does not beat the reference (not judged)")
        lines.append(f"| {_md_cell(label)} | {role} | | | | | | | | | | | | **{word}** |")
    return "\n".join(lines) + "\n"


def comparisons_markdown(verdicts: Mapping[str, Mapping[str, Mapping]], pairs: Sequence[tuple[str, str]], *,
                         include: Sequence[str] = ("sugarcrepe", "sugarcrepe_pp", "winoground", "heldout"),
                         n_resamples: int = 9999, method: str = "BCa", confidence_level: float = 0.95,
                         seed: int = 0, power: float = 0.8, unreadable: Mapping[str, str] | None = None,
                         control: Mapping | None = None, diagnosis: str | None = None) -> str:
    """Markdown tables of paired comparisons, one per suite headline (paper Sec. 3.3: Tab. 2 / 3 differences).

    Headlines (families): SugarCrepe over all items, SugarCrepe++ ITT over all items, Winoground group score, the
    held-out ConcreteBatch pairs I2T per dataset; with ``include`` also ``probe`` (top-1 per task) and
    ``retrieval`` (I2T R@1 per set). Per pair ``(model, reference)``: both accuracies in %, Δ = model − reference
    in points (1 point = 0.01 accuracy), the bootstrap CI of Δ in points (:func:`paired_bootstrap_ci`: items
    resampled with both verdicts, ``method`` with the percentile fallback, marked †), the exact McNemar p
    (:func:`paired_comparison`), the Holm-adjusted p (:func:`holm`) and the minimal detectable effect in points
    (:func:`mcnemar_mde` at level 1 - ``confidence_level`` and ``power``, for the row's n and discordance): a Δ
    smaller than the MDE reads "no difference detectable", never "no effect". **Family** for Holm = all pairs
    compared on one headline (one table), so each table's adjusted p-values control that table's family-wise
    error; raw and adjusted p are both shown. A pair without per-item verdicts on a headline is listed below its
    table, not compared. With ``control`` (a ``positive_control.json`` dict) the text opens with the positive
    control (:func:`positive_control_markdown`); a row with a model of ``unreadable`` (label -> why, from
    :func:`concrete_jungle.evaluation.positive_control.failed_models`) reads "cannot be read".

    Args:
        verdicts: ``{suite: {model: verdicts}}`` (:func:`read_verdicts`; a whole verdicts file
            ``{"suite", "model", "verdicts"}`` is accepted too). Shapes: sugarcrepe ``{subset: {id: bool}}``,
            sugarcrepe_pp ``{"itt": {subset: {id: bool}}, "tot": ...}``, winoground ``{"group": {id: bool}, ...}``,
            heldout ``{dataset: {anchor_id: bool}}``, probe ``{task: {id: bool}}``, retrieval
            ``{set: {"i2t@1" or "i2t": {key: bool}, ...}}``.
        pairs: ``(model, reference)`` labels (:func:`concrete_jungle.grid.comparison_pairs`).
        include: the suites to compare (from :data:`COMPARISON_SUITES`); a suite without verdicts is left out.
        n_resamples, method, confidence_level, seed: of the bootstrap (:func:`paired_bootstrap_ci`).
        power: of the MDE column.
        unreadable: models whose comparisons cannot be read (failed positive control), with why.
        control: the positive control, rendered first.
        diagnosis: Markdown placed after the control and before the comparisons (e.g. :func:`visibility_markdown`).

    Returns:
        The Markdown text, ending with a newline.

    Raises:
        KeyError: a label of ``pairs`` that has verdicts in no suite (a typo, not a skipped suite).
        ValueError: an unknown suite in ``include``; two models scored on different items of one headline;
            malformed verdicts (as :func:`paired_comparison`).
    """
    unknown = [s for s in include if s not in COMPARISON_SUITES]
    if unknown:
        raise ValueError(f"comparisons_markdown: unknown suites {unknown}; choose from {list(COMPARISON_SUITES)}")
    known = {m for per in verdicts.values() for m in (per or {})}
    for model, ref in pairs:
        for label in (model, ref):
            if label not in known:
                raise KeyError(f"comparisons_markdown: no verdicts for model {label!r} in any suite")
    level = f"{100 * confidence_level:g} %"
    alpha = 1 - confidence_level
    unreadable = dict(unreadable or {})
    lines = positive_control_markdown(control).rstrip("\n").split("\n") + [""] if control is not None else []
    lines += diagnosis.rstrip("\n").split("\n") + [""] if diagnosis else []
    lines += ["## Paired comparisons", "",
              f"Same items, two models. Δ = accuracy of the model minus the reference's, in points; {level} CI = "
              f"bootstrap over items ({n_resamples} resamples, seed {seed}, {method}; † = percentile interval where "
              f"{method} is undefined, or a single value when every item has the same difference); McNemar p = exact "
              "two-sided test on the items only one model gets right. Holm p = Holm-adjusted over the family of "
              "comparisons, defined as all pairs of one headline (one table below); raw and adjusted p are both "
              f"shown. MDE = minimal detectable effect, the |Δ| a two-sided McNemar test at {alpha:.2g} finds with "
              f"{100 * power:g} % power at this n and discordance (Connor 1987), per comparison (before Holm). A Δ "
              "whose CI covers 0 is no evidence of a difference; a difference smaller than the MDE could not have been "
              "seen, so such a row reads \"none detectable (MDE ...)\", not \"no effect\"; a Δ as large as the MDE "
              "that the Holm-adjusted p does not carry reads \"not significant after Holm\"."]
    if unreadable:
        lines += ["", "**Cannot be read**: rows with " + ", ".join(f"{m} ({why})" for m, why in unreadable.items())
                  + ". A model that does not beat the baseline on its own kind of negatives gives no reading of how "
                  "its design compares with others: such rows are marked ✗ in the last column."]
    lines.append("")
    suites = [s for s in include if verdicts.get(s)]
    if not suites:
        return "\n".join(lines + ["No suite has per-item verdicts."]) + "\n"
    for title, get, suite in _headlines(verdicts, suites):
        per = {m: _unwrap(v) for m, v in verdicts[suite].items()}

        def items(label):
            v = per.get(label)
            if not isinstance(v, Mapping) or not v:
                return None
            got = get(v)
            if not isinstance(got, Mapping) or not any(isinstance(x, Mapping) and x for x in got.values()):
                return None
            return got
        rows, missing = [], []
        for model, ref in pairs:
            a, b = items(model), items(ref)
            if a is None or b is None:
                missing.append(f"{model} vs {ref} ({', '.join(x for x, y in ((model, a), (ref, b)) if y is None)} "
                               "has none)")
                continue
            c = paired_comparison(a, b)
            ci = paired_bootstrap_ci(a, b, n_resamples=n_resamples, method=method,
                                     confidence_level=confidence_level, seed=seed)
            rows.append((model, ref, c, ci))
        adjusted = holm([c["mcnemar_p"] for _, _, c, _ in rows])
        lines += [f"### {title}", ""]
        if rows:
            lines += [f"Family: the {len(rows)} pair(s) of this table (Holm over m = {len(rows)}).", "",
                      f"| model | vs | n | model acc. (%) | reference acc. (%) | Δ (points) | {level} CI (points) | "
                      "only model / only ref. right | McNemar p | Holm p | MDE (points) | reading |",
                      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
            for (model, ref, c, ci), p_adj in zip(rows, adjusted):
                mark = " †" if ci["method"] != method else ""
                mde = 100 * mcnemar_mde(c["n"], (c["only_a"] + c["only_b"]) / c["n"], alpha=alpha, power=power)
                lines.append(f"| {_md_cell(model)} | {_md_cell(ref)} | {c['n']} | {100 * c['accuracy_a']:.1f} | "
                             f"{100 * c['accuracy_b']:.1f} | {100 * c['delta']:+.1f} | "
                             f"[{100 * ci['low']:+.1f}, {100 * ci['high']:+.1f}]{mark} | "
                             f"{c['only_a']} / {c['only_b']} | {_p(c['mcnemar_p'])} | {_p(p_adj)} | {mde:.1f} | "
                             f"{_reading(model, ref, ci, p_adj, alpha, mde, unreadable)} |")
        else:
            lines.append("No pair has per-item verdicts on this headline.")
        if missing:
            lines += ["", "Not compared (no per-item verdicts): " + "; ".join(missing) + "."]
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def visibility_markdown(visibility: Mapping[str, Mapping]) -> str:
    """The first diagnosis of the positive control (``metrics/<p>/visibility.json``,
    :mod:`concrete_jungle.evaluation.visibility`): per model, the mean cosine of anchor and edit in the image and the
    text tower by keyword type beside that of random held-out anchor pairs, and the linear probe of the edited value
    on the image embedding beside the majority class. Returns Markdown ending with a newline."""
    types = ("attribute", "relation", "object")
    lines = ["## Can the models see the edits?", "",
             "Held-out pairs, every model. **cos image** = mean cos(f(v), f(v')) of anchor image and edited image, "
             "**cos text** = mean cos(g(t), g(t')) of anchor caption and rewrite, per keyword type; **random** = the "
             "same cosine between two different held-out anchors (how far apart unrelated inputs sit). An edit whose "
             "cosine is near 1 while random pairs sit far lower is one the tower barely sees. **probe** = linear probe "
             "on the frozen anchor image embedding predicting the edited value (the keyword lemma), cross-validated "
             "accuracy (%) / majority class on the same folds (%). The probe is kept for the record, not as a "
             "verdict: where an image holds several candidate values (captions naming several objects or attributes, "
             "relation roles drawn at random) the edited one is not a function of the image; the cosines are the "
             "verdict.", "",
             "| model | " + " | ".join(f"{t} cos image / text" for t in types) + " | random cos image / text | "
             + " | ".join(f"{t} probe / majority (%)" for t in types) + " |",
             "|---|" + "---:|" * (2 * len(types) + 1)]

    def fmt(x, spec=".3f"):
        return DASH if x is None else format(x, spec)
    for label, v in visibility.items():
        if "skipped" in v:
            lines.append(f"| {_md_cell(label)} | skipped: {_md_cell(' '.join(str(v['skipped']).split()))} | "
                         + " | ".join([DASH] * (2 * len(types))) + " |")
            continue
        cos, probe = v.get("cosine", {}), v.get("probe", {})
        cells = [f"{fmt(cos.get(t, {}).get('image'))} / {fmt(cos.get(t, {}).get('text'))}" if t in cos else DASH
                 for t in types]
        cells.append(f"{fmt(cos.get('random', {}).get('image'))} / {fmt(cos.get('random', {}).get('text'))}")
        for t in types:
            pr = probe.get(t)
            if not pr or "skipped" in pr:
                cells.append(DASH)
            else:
                cells.append(f"{100 * pr['accuracy']:.1f} / {100 * pr['majority']:.1f} (n = {pr['n']}, "
                             f"{pr['classes']} values)")
        lines.append(f"| {_md_cell(label)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------
# held-out plot


def _bin_low(label: str) -> float:
    try:
        return float(str(label).lstrip("[(").split(",")[0])
    except ValueError:
        return math.inf


def plot_heldout(results: Mapping[str, Mapping], out_png: str | os.PathLike, direction: str = "i2t") -> Path:
    """Held-out accuracy against the concreteness bin of c_i (Brysbaert 1-5), one panel per ConcreteBatch dataset
    (hc / lc / wo), one line per model (paper Sec. 2.1's hypothesis, on pairs of anchors never trained on).

    Args:
        results: model label -> held-out result JSON (``{"available", "metrics": {dataset: {"by_c_bin": {bin:
            {"i2t", "t2i"?, "n"}}, ...}}}``) or its ``metrics`` alone; skipped results are left out.
        out_png: output PNG (written atomically by :func:`analysis.report.save_figure`).
        direction: ``"i2t"`` (default) or ``"t2i"``; accuracies are plotted in %.

    Returns:
        ``Path(out_png)``.

    Raises:
        ValueError: no model has an available result with a concreteness bin, an unknown ``direction``, or an
            accuracy that is not a fraction in [0, 1].
    """
    if direction not in ("i2t", "t2i"):
        raise ValueError(f"plot_heldout: direction must be 'i2t' or 't2i', got {direction!r}")
    data: dict[str, dict[str, dict[str, tuple[float, int]]]] = {}
    for model, res in results.items():
        if isinstance(res, Mapping) and "metrics" in res:
            if not res.get("available", True):
                continue
            res = res["metrics"]
        for dataset, summary in (res or {}).items():
            for b, g in (summary.get("by_c_bin") or {}).items() if isinstance(summary, Mapping) else ():
                if direction in g:
                    acc = _number(f"held-out {dataset} of model {model!r}, bin {b} {direction}", g[direction])
                    data.setdefault(dataset, {}).setdefault(model, {})[b] = (acc, int(g.get("n", 0)))
    if not data:
        raise ValueError(f"plot_heldout: no model has an available held-out result with {direction} accuracies by "
                         "concreteness bin; nothing to plot")
    datasets = list(data)
    fig, axes = plt.subplots(1, len(datasets), figsize=(4.2 * len(datasets) + 1.0, 4.0), sharey=True, squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        bins = sorted(_union(m.keys() for m in data[dataset].values()), key=_bin_low)
        counts = {b: next((v[b][1] for v in data[dataset].values() if b in v), 0) for b in bins}
        for model, per in data[dataset].items():
            ys = [100 * per[b][0] if b in per else math.nan for b in bins]
            ax.plot(range(len(bins)), ys, marker="o", label=str(model))
        ax.set_xticks(range(len(bins)), [f"{b}\nn={counts[b]}" for b in bins], fontsize="small")
        ax.set_xlabel("concreteness c_i of the perturbed keyword (bin)")
        ax.set_title(f"held-out {dataset}")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"held-out {direction.upper()} accuracy (%)")
    axes[0][-1].legend(fontsize="small")
    fig.suptitle("Held-out hard-negative pairs by concreteness")
    return save_figure(fig, out_png)
