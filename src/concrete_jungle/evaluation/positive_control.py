"""The study's positive control: does each hard-negative fine-tune beat plain fine-tuning on its own kind of negatives?

A comparison between two hard-negative designs (Cement vs InfoNCE, D_hc vs D_lc, N = 256 vs 1024) means something
only if the study could have seen an effect. The control asks the least that every design must show: a fine-tune
on ConcreteBatch ``d`` with a hard-negative loss (``<d>-<loss>``) is more accurate than each baseline (``clip``:
the same steps on the corpus anchors, no hard negatives) on the **held-out pairs of its own dataset** ``d`` —
ConcretePlant pairs of anchors no model trained on (:mod:`concrete_jungle.evaluation.heldout`), scored like
SugarCrepe: I2T right when cos(v, t) > cos(v, t'), T2I right when cos(t, v) > cos(t, v').

Per (model, baseline), direction (I2T, T2I where the pairs have negative images) and keyword type (attribute /
relation / object, and all pairs): the paired gain in points (1 point = 0.01 accuracy) with its percentile
bootstrap CI over pairs, the exact McNemar p, and the minimal detectable effect (MDE) at ``power`` for that n and
discordance (:func:`concrete_jungle.evaluation.paired.mcnemar_mde`, at level ``alpha``). A model **passes** when, in
every direction over all its pairs, the gain is at least ``min_gain`` points with McNemar p < ``alpha``, against
every baseline; per-type verdicts are reported beside it. The **study passes** when every hard-negative fine-tune
does; a model that fails makes every comparison it takes part in "cannot be read" (the report marks them).

Inputs: the prepared held-out suite (``items.json``: ``{dataset: [pair with anchor_id, type]}``) and the verdict
files of ``score_heldout`` (``{"verdicts": {dataset: {anchor_id: bool (I2T)}}, "t2i": {...}}``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from concrete_jungle.evaluation.paired import mcnemar_mde, paired_bootstrap_ci, paired_comparison
from concrete_jungle.io import read_json

__all__ = ["TYPES", "control_stats", "positive_control", "read_heldout_verdicts", "failed_models", "summary_line"]

#: Keyword types in report order (paper Sec. 2.1).
TYPES = ("attribute", "relation", "object")
#: Verdict-file keys of each direction.
_DIRECTIONS = {"i2t": "verdicts", "t2i": "t2i"}


def control_stats(model: Mapping[str, bool], reference: Mapping[str, bool], *, min_gain: float, alpha: float,
                  power: float, n_resamples: int, confidence_level: float, seed: int) -> dict:
    """Paired gain of ``model`` over ``reference`` on the same pairs (one direction, one group of pairs).

    Args:
        model, reference: ``{pair_id: bool}`` verdicts (True = right) over the same pair ids.
        min_gain: points the gain must reach; alpha: McNemar level; power: of the MDE;
        n_resamples, confidence_level, seed: of the percentile bootstrap CI.

    Returns:
        ``{"n", "accuracy_pct", "reference_accuracy_pct", "gain_points", "ci_points": [low, high], "mcnemar_p",
        "mde_points", "only_model", "only_reference", "passed"}``: accuracies in %, gain / CI / MDE in points
        (the MDE at level ``alpha`` and ``power`` for this n and discordance), every number finite.

    Raises:
        ValueError: the two cover different pairs, or no pair (as :func:`paired_comparison`).
    """
    a, b = {"pairs": dict(model)}, {"pairs": dict(reference)}
    c = paired_comparison(a, b)
    ci = paired_bootstrap_ci(a, b, n_resamples=n_resamples, confidence_level=confidence_level,
                             method="percentile", seed=seed)
    mde = mcnemar_mde(c["n"], (c["only_a"] + c["only_b"]) / c["n"], alpha=alpha, power=power)
    gain = 100 * c["delta"]
    # the verdict in integers (a gain of exactly min_gain must not fail on a rounding error of (n01 - n10) / n)
    reaches = 100 * (c["only_a"] - c["only_b"]) >= min_gain * c["n"]
    return {"n": c["n"], "accuracy_pct": 100 * c["accuracy_a"], "reference_accuracy_pct": 100 * c["accuracy_b"],
            "gain_points": gain, "ci_points": [100 * ci["low"], 100 * ci["high"]], "mcnemar_p": c["mcnemar_p"],
            "mde_points": 100 * mde, "only_model": c["only_a"], "only_reference": c["only_b"],
            "passed": bool(reaches and c["mcnemar_p"] < alpha)}


def read_heldout_verdicts(verdicts_dir: str | os.PathLike, label: str) -> dict[str, dict[str, dict[str, bool]]] | None:
    """``{direction: {dataset: {anchor_id: bool}}}`` of model ``label`` from ``<verdicts_dir>/<label>.json``, or None
    when the model was not scored (no file: its suite was unavailable).

    Raises:
        ValueError: a file without I2T verdicts (named).
    """
    path = Path(verdicts_dir) / f"{label}.json"
    if not path.is_file():
        return None
    data = read_json(path)
    if not isinstance(data.get("verdicts"), Mapping):
        raise ValueError(f"{path}: no 'verdicts' mapping (re-run score_heldout)")
    return {d: data[key] for d, key in _DIRECTIONS.items() if isinstance(data.get(key), Mapping)}


def positive_control(items: Mapping[str, Sequence[Mapping]], verdicts: Mapping[str, Mapping | None],
                     models: Sequence[str], baselines: Sequence[str], *, min_gain: float = 10.0,
                     alpha: float = 0.001, power: float = 0.8, n_resamples: int = 2000,
                     confidence_level: float = 0.95, seed: int = 0) -> dict:
    """The positive control of one profile (see the module docstring).

    Args:
        items: the held-out suite's ``{dataset: [pair]}`` (each pair with ``anchor_id`` and ``type``).
        verdicts: ``{label: read_heldout_verdicts(...) or None}`` for every label of ``models`` and ``baselines``.
        models: the hard-negative fine-tunes, labelled ``<dataset>-<loss>`` (:func:`concrete_jungle.grid.model_label`).
        baselines: the references (``clip``).
        min_gain, alpha, power, n_resamples, confidence_level, seed: ``evaluate.positive_control`` and the seed.

    Returns:
        ``{"criterion", "passed", "status", "reason", "failed", "models": {label: {"dataset", "passed", "reason",
        "vs": {baseline: {"passed", "i2t": stats, "t2i": stats, "by_type": {type: {"i2t": stats, ...}}}}}}}``,
        stats as :func:`control_stats`. ``status`` is ``passed``, ``failed`` or ``unavailable`` (no baseline, no
        hard-negative fine-tune, or some model without held-out pairs or without the verdicts of a direction the
        criterion needs — T2I whenever the pairs have negative images: ``passed`` False, ``reason`` says why and
        the model's own ``passed`` is None); ``failed`` lists the models that did not pass.

    Raises:
        ValueError: a model label without a dataset part; verdicts over other pairs than the suite's, or a dataset
            whose pairs repeat an anchor_id (named).
    """
    criterion = {"min_gain_points": float(min_gain), "alpha": float(alpha), "power": float(power),
                 "reference": list(baselines), "bootstrap_resamples": int(n_resamples),
                 "confidence_level": float(confidence_level),
                 "rule": f"each hard-negative fine-tune beats every baseline on the held-out pairs of its own "
                         f"ConcreteBatch by >= {min_gain:g} points with McNemar p < {alpha:g}, in I2T and T2I"}
    out: dict = {"criterion": criterion, "models": {}}
    if not baselines or not models:
        why = "no baseline (train.baselines is empty)" if not baselines else "no hard-negative fine-tune in the grid"
        out["models"] = {lab: {"dataset": lab.split("-", 1)[0], "passed": None, "reason": why, "vs": {}}
                         for lab in models}  # not judged: their comparisons cannot be read either
        return {**out, "passed": False, "status": "unavailable", "reason": why, "failed": []}
    kw = dict(min_gain=min_gain, alpha=alpha, power=power, n_resamples=n_resamples,
              confidence_level=confidence_level, seed=seed)
    for label in models:
        if "-" not in label:
            raise ValueError(f"positive_control: {label!r} is not a <dataset>-<loss> label")
        dataset = label.split("-", 1)[0]
        pairs = list(items.get(dataset) or [])
        entry: dict = {"dataset": dataset, "passed": False, "reason": None, "vs": {}}
        out["models"][label] = entry
        missing = [x for x in (label, *baselines) if verdicts.get(x) is None]
        if not pairs or missing:
            entry["reason"] = (f"no held-out pair of dataset {dataset}" if not pairs
                               else f"no held-out verdicts for {', '.join(missing)}")
            entry["passed"] = None
            continue
        types = {str(p["anchor_id"]): p["type"] for p in pairs}
        if len(types) != len(pairs):
            raise ValueError(f"positive_control: the held-out pairs of {dataset} repeat an anchor_id "
                             f"({len(pairs)} pairs, {len(types)} ids); re-run prepare_heldout")
        # T2I is part of the criterion whenever the pairs have negative images
        expected = ("i2t", "t2i") if all(p.get("negative_image") for p in pairs) else ("i2t",)
        lacking = [f"{direction.upper()} verdicts of {who} on {dataset}" for direction in expected
                   for who in (label, *baselines) if verdicts[who].get(direction, {}).get(dataset) is None]
        if lacking:
            entry["reason"] = f"no {'; no '.join(lacking)} (re-run score_heldout)"
            entry["passed"] = None
            continue
        for ref in baselines:
            row: dict = {"by_type": {}}
            for direction in expected:
                mine, theirs = verdicts[label][direction][dataset], verdicts[ref][direction][dataset]
                for who, v in ((label, mine), (ref, theirs)):
                    if set(map(str, v)) != set(types):
                        raise ValueError(f"positive_control: {direction} verdicts of {who} on {dataset} cover other "
                                         f"pairs than the held-out suite's {len(types)} (re-run score_heldout)")
                mine, theirs = {str(k): v for k, v in mine.items()}, {str(k): v for k, v in theirs.items()}
                row[direction] = control_stats(mine, theirs, **kw)
                for t in TYPES:
                    ids = [i for i, ty in types.items() if ty == t]
                    if ids:
                        row["by_type"].setdefault(t, {})[direction] = control_stats(
                            {i: mine[i] for i in ids}, {i: theirs[i] for i in ids}, **kw)
            row["passed"] = all(row[d]["passed"] for d in expected)
            entry["vs"][ref] = row
        entry["passed"] = all(r["passed"] for r in entry["vs"].values())
    undecided = [lab for lab, e in out["models"].items() if e["passed"] is None]
    failed = [lab for lab, e in out["models"].items() if e["passed"] is False]
    if undecided:
        return {**out, "passed": False, "status": "unavailable", "failed": failed,
                "reason": "; ".join(f"{lab}: {out['models'][lab]['reason']}" for lab in undecided)}
    return {**out, "passed": not failed, "status": "failed" if failed else "passed", "failed": failed,
            "reason": None if not failed else f"{len(failed)} of {len(models)} hard-negative fine-tunes did not pass"}


def failed_models(control: Mapping | None) -> dict[str, str]:
    """``{label: why}`` of the models whose comparisons cannot be read, from a ``positive_control.json`` dict:
    each model that failed or could not be judged. ``{}`` when ``control`` is None (no control was run)."""
    if not control:
        return {}
    out = {}
    for label, e in (control.get("models") or {}).items():
        if e.get("passed") is False:
            out[label] = "failed the positive control"
        elif e.get("passed") is None:
            out[label] = f"positive control not measured ({e.get('reason')})"
    return out


def summary_line(control: Mapping) -> str:
    """One line for the README's result sections: the verdict, the criterion, then each model's gain over the
    baseline on all its held-out pairs, I2T / T2I in points with the MDE, e.g. ``FAILED (>= 10 points, McNemar p <
    0.001, I2T and T2I, vs clip): hc-infonce +0.3 / -1.0 (MDE 7.4 / 8.0), ...; comparisons of the models that fail
    cannot be read``."""
    crit = control.get("criterion") or {}
    status = control.get("status", "unavailable")
    head = {"passed": "PASSED", "failed": "FAILED"}.get(status, "NOT MEASURED")
    need = crit.get("min_gain_points")
    alpha = crit.get("alpha")
    parts = []
    for label, e in (control.get("models") or {}).items():
        if e.get("passed") is None:
            parts.append(f"{label} not measured ({e.get('reason')}) ✗")
            continue
        for ref, row in (e.get("vs") or {}).items():
            dirs = [d for d in ("i2t", "t2i") if d in row]
            gains = " / ".join(f"{row[d]['gain_points']:+.1f}" for d in dirs)
            mdes = " / ".join(f"{row[d]['mde_points']:.1f}" for d in dirs)
            who = label if len(e["vs"]) == 1 else f"{label} vs {ref}"
            parts.append(f"{who} {gains} (MDE {mdes}){'' if row.get('passed') else ' ✗'}")
    refs = ", ".join(crit.get("reference") or [])
    line = (f"**{head}** (gain over {refs or 'the baseline'} on the model's own held-out pairs, "
            f"{' / '.join(d.upper() for d in ('i2t', 't2i'))} in points, needs >= "
            f"{'?' if need is None else format(need, 'g')} with McNemar p < {'?' if alpha is None else format(alpha, 'g')})")
    if parts:
        line += ": " + "; ".join(parts)
    if status != "passed":
        line += f". {control.get('reason') or ''}: the comparisons of the models marked ✗ cannot be read"
    return line
