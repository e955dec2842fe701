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
discordance (:func:`concrete_jungle.evaluation.paired.mcnemar_mde`, at level ``alpha``).

**Control arms and treatments** (docs/instrument.md, "What the control reads"). The control asks whether the study
can see hard negatives being learned at all; it is asked of the plainest hard-negative objective, the fine-tune of
each ConcreteBatch with a loss of ``control_losses`` (``<d>-infonce``): its **control arm**. The other fine-tunes
(Cement, static and inverse margins) are **treatments**, compared against their control arm in the report; their
gains over ``clip`` are reported beside, but a treatment that does not beat ``clip`` is a result, not a broken
instrument (the paper itself expects the inverse margin to degrade, Sec. 3.3, and Cement's adaptive margin is
negative on low-concreteness keywords, Sec. 2.3).

**Headroom.** A control arm passes when, in every direction over all its pairs and against every baseline, its
gain reaches the **required gain** with McNemar p < ``alpha``: ``min_gain`` points, or ``headroom_share`` of the
baseline's errors (``headroom_share * (100 - baseline accuracy)``) when that is smaller, since a baseline at 92 %
leaves no room for +10 points.

**Underpowered** (docs/instrument.md, "Decision: a control arm that cannot be decided"). A comparison that misses
its required gain *fails* only when its data exclude that gain: the upper end of the gain's bootstrap CI lies below
the required gain. A miss whose CI still holds the required gain (neither reached with p < ``alpha`` nor ruled out)
is **underpowered** — neither passed nor failed. Each verdict is ``passed`` (every direction against every
baseline passes), ``failed`` (some direction rules the required gain out) or ``underpowered`` (the rest).
The **study passes** when no control arm failed or went unmeasured and at least one passed; when every arm is
underpowered its status is ``underpowered``. Every comparison of a model on a dataset whose control arm did not
pass (failed, underpowered or unmeasured) cannot be read (the report marks them, :func:`failed_models`).

**Text-side pairs** (a real profile with ``text_side.captions``: :mod:`concrete_jungle.evaluation.heldout`). Where
the held-out image pairs number tens, the same rule is asked a second time of the text-side pairs (thousands of
COCO captions of images no model trained on, scored TOT: a second caption of the image closer to the anchor caption
than to its rewrite), written as the ``text_side`` block of the file with its own verdicts and MDEs. A control arm
that is underpowered or unmeasured on the image pairs but passes on its text-side pairs makes its dataset's
comparisons readable (:func:`failed_models`); one that *failed* on the image pairs does not.

Inputs: the prepared held-out suite (``items.json``: ``{dataset: [pair with anchor_id, type]}``; ``text_items.json``
for the text side) and the verdict files of ``score_heldout`` (``{"verdicts": {dataset: {anchor_id: bool (I2T)}},
"t2i": {...}}``; in ``verdicts/heldout_text``, ``verdicts`` are TOT).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from concrete_jungle.evaluation.paired import mcnemar_mde, paired_bootstrap_ci, paired_comparison
from concrete_jungle.io import read_json

__all__ = ["TYPES", "VERDICTS", "DIRECTIONS", "control_stats", "positive_control", "read_heldout_verdicts", "has_control_arms",
           "verdict", "failed_models", "summary_line"]

#: Keyword types in report order (paper Sec. 2.1).
TYPES = ("attribute", "relation", "object")
#: Verdict-file keys of each direction, per result suite (``heldout_text``: the text-side pairs, TOT only).
_DIRECTIONS = {"heldout": {"i2t": "verdicts", "t2i": "t2i"}, "heldout_text": {"tot": "verdicts"}}
#: Every direction a control row may hold, in report order.
DIRECTIONS = ("i2t", "t2i", "tot")
#: A comparison's, a model's and a control arm's verdicts (``unmeasured``: no verdicts to judge).
VERDICTS = ("passed", "failed", "underpowered", "unmeasured")


def _combine(verdicts: Sequence[str]) -> str:
    """One verdict of several that must all pass: ``passed`` if all passed, ``failed`` if any failed, else
    ``underpowered``."""
    if all(v == "passed" for v in verdicts):
        return "passed"
    return "failed" if "failed" in verdicts else "underpowered"


def control_stats(model: Mapping[str, bool], reference: Mapping[str, bool], *, min_gain: float, alpha: float,
                  power: float, n_resamples: int, confidence_level: float, seed: int,
                  headroom_share: float | None = None) -> dict:
    """Paired gain of ``model`` over ``reference`` on the same pairs (one direction, one group of pairs).

    Args:
        model, reference: ``{pair_id: bool}`` verdicts (True = right) over the same pair ids.
        min_gain: points the gain must reach; alpha: McNemar level; power: of the MDE;
        n_resamples, confidence_level, seed: of the percentile bootstrap CI.
        headroom_share: with it, the required gain is ``min(min_gain, headroom_share * (100 - reference
            accuracy in %))``: that share of the reference's errors where the reference leaves little room; None:
            ``min_gain`` always.

    Returns:
        ``{"n", "accuracy_pct", "reference_accuracy_pct", "gain_points", "required_gain_points", "ci_points": [low,
        high], "mcnemar_p", "mde_points", "only_model", "only_reference", "passed", "verdict"}``: accuracies in %,
        gain / required gain / CI / MDE in points (the MDE at level ``alpha`` and ``power`` for this n and
        discordance), every number finite; ``verdict`` ``passed``, else ``failed`` when the CI's upper end is
        below the required gain (the data rule it out), else ``underpowered`` (the CI still holds it).

    Raises:
        ValueError: the two cover different pairs, or no pair (as :func:`paired_comparison`).
    """
    a, b = {"pairs": dict(model)}, {"pairs": dict(reference)}
    c = paired_comparison(a, b)
    ci = paired_bootstrap_ci(a, b, n_resamples=n_resamples, confidence_level=confidence_level,
                             method="percentile", seed=seed)
    mde = mcnemar_mde(c["n"], (c["only_a"] + c["only_b"]) / c["n"], alpha=alpha, power=power)
    gain = 100 * c["delta"]
    n, ref_errors = c["n"], c["n"] - sum(bool(v) for v in reference.values())
    # required gain times n, in integers where it can be (a gain of exactly the requirement must not fail on a
    # rounding error of (n01 - n10) / n)
    need_n = min_gain * n if headroom_share is None else min(min_gain * n, headroom_share * 100 * ref_errors)
    reaches = 100 * (c["only_a"] - c["only_b"]) >= need_n - 1e-9 * n
    passed = bool(reaches and c["mcnemar_p"] < alpha)
    return {"n": n, "accuracy_pct": 100 * c["accuracy_a"], "reference_accuracy_pct": 100 * c["accuracy_b"],
            "gain_points": gain, "required_gain_points": need_n / n, "ci_points": [100 * ci["low"], 100 * ci["high"]],
            "mcnemar_p": c["mcnemar_p"],
            "mde_points": 100 * mde, "only_model": c["only_a"], "only_reference": c["only_b"],
            "passed": passed,
            "verdict": "passed" if passed else "failed" if 100 * ci["high"] < need_n / n - 1e-9 else "underpowered"}


def read_heldout_verdicts(verdicts_dir: str | os.PathLike, label: str) -> dict[str, dict[str, dict[str, bool]]] | None:
    """``{direction: {dataset: {anchor_id: bool}}}`` of model ``label`` from ``<verdicts_dir>/<label>.json``, or None
    when the model was not scored (no file: its suite was unavailable). Directions ``i2t`` / ``t2i`` in a
    ``heldout`` file, ``tot`` in a ``heldout_text`` file (its ``suite`` key).

    Raises:
        ValueError: a file without a ``verdicts`` mapping, or of another suite (named).
    """
    path = Path(verdicts_dir) / f"{label}.json"
    if not path.is_file():
        return None
    data = read_json(path)
    if not isinstance(data.get("verdicts"), Mapping):
        raise ValueError(f"{path}: no 'verdicts' mapping (re-run score_heldout)")
    suite = data.get("suite", "heldout")
    if suite not in _DIRECTIONS:
        raise ValueError(f"{path}: verdicts of suite {suite!r}, not of {sorted(_DIRECTIONS)}")
    return {d: data[key] for d, key in _DIRECTIONS[suite].items() if isinstance(data.get(key), Mapping)}


def positive_control(items: Mapping[str, Sequence[Mapping]], verdicts: Mapping[str, Mapping | None],
                     models: Sequence[str], baselines: Sequence[str], *, control_losses: Sequence[str] = ("infonce",),
                     min_gain: float = 10.0, headroom_share: float | None = 0.5, alpha: float = 0.001,
                     power: float = 0.8, n_resamples: int = 2000, confidence_level: float = 0.95,
                     seed: int = 0) -> dict:
    """The positive control of one profile (see the module docstring).

    Args:
        items: the held-out suite's ``{dataset: [pair]}`` (each pair with ``anchor_id`` and ``type``).
        verdicts: ``{label: read_heldout_verdicts(...) or None}`` for every label of ``models`` and ``baselines``.
        models: the hard-negative fine-tunes, labelled ``<dataset>-<loss>`` (:func:`concrete_jungle.grid.model_label`).
        baselines: the references (``clip``).
        control_losses: the losses whose fine-tunes are the control arms (``infonce``); every other model is a
            treatment.
        min_gain, headroom_share, alpha, power, n_resamples, confidence_level, seed: ``evaluate.positive_control``
            and the seed (:func:`control_stats`).

    Returns:
        ``{"criterion", "passed", "status", "reason", "failed", "underpowered", "control_arms", "models": {label:
        {"dataset", "role", "passed", "verdict", "reason", "vs": {baseline: {"passed", "verdict", "i2t": stats,
        "t2i": stats, "by_type": {type: {"i2t": stats, ...}}}}}}}``, stats as :func:`control_stats`, ``role``
        ``control`` or ``treatment``, ``verdict`` one of :data:`VERDICTS` (``passed`` is True only for ``passed``,
        None for ``unmeasured``). ``status`` is ``passed``, ``failed``, ``underpowered`` (every control arm) or
        ``unavailable`` (no baseline, no control arm, or a control arm without held-out pairs or without the
        verdicts of a direction the criterion needs — T2I whenever the pairs have negative images: ``passed``
        False, ``reason`` says why and that model's own ``passed`` is None); ``failed`` / ``underpowered`` list the
        control arms with that verdict; a treatment's verdict says only whether it beat the baselines by the same
        rule.

    Raises:
        ValueError: a model label without a dataset part; verdicts over other pairs than the suite's, or a dataset
            whose pairs repeat an anchor_id (named).
    """
    losses = ", ".join(control_losses)
    text = any(p.get("positive_caption") for ps in items.values() for p in ps)
    share = "" if headroom_share is None else (
        f" (or {headroom_share:g} of the baseline's errors where that is less)")
    criterion = {"min_gain_points": float(min_gain),
                 "headroom_share": None if headroom_share is None else float(headroom_share),
                 "control_losses": list(control_losses), "alpha": float(alpha), "power": float(power),
                 "reference": list(baselines), "bootstrap_resamples": int(n_resamples),
                 "confidence_level": float(confidence_level),
                 "pairs": "text-side" if text else "held-out",
                 "rule": f"the control arm of each ConcreteBatch (its {losses} fine-tune) beats every baseline on "
                         f"the {'text-side' if text else 'held-out'} pairs of its own ConcreteBatch by >= "
                         f"{min_gain:g} points{share} with McNemar p < {alpha:g}, "
                         f"{'in TOT' if text else 'in I2T and T2I'}; a miss whose {100 * confidence_level:g} % CI "
                         f"still holds the required gain is underpowered, not failed"}
    out: dict = {"criterion": criterion, "models": {}}
    for label in models:
        if "-" not in label:
            raise ValueError(f"positive_control: {label!r} is not a <dataset>-<loss> label")
    role = {lab: "control" if lab.split("-", 1)[1] in control_losses else "treatment" for lab in models}
    arms = [lab for lab in models if role[lab] == "control"]
    out["control_arms"] = arms
    if not baselines or not arms:
        why = ("no baseline (train.baselines is empty)" if not baselines else
               f"no control arm: no fine-tune with a loss of {list(control_losses)} in the grid")
        out["models"] = {lab: {"dataset": lab.split("-", 1)[0], "role": role[lab], "passed": None,
                               "verdict": "unmeasured", "reason": why, "vs": {}}
                         for lab in models}  # not judged: their comparisons cannot be read either
        return {**out, "passed": False, "status": "unavailable", "reason": why, "failed": [], "underpowered": []}
    kw = dict(min_gain=min_gain, headroom_share=headroom_share, alpha=alpha, power=power, n_resamples=n_resamples,
              confidence_level=confidence_level, seed=seed)
    for label in models:
        dataset = label.split("-", 1)[0]
        pairs = list(items.get(dataset) or [])
        entry: dict = {"dataset": dataset, "role": role[label], "passed": None, "verdict": "unmeasured",
                       "reason": None, "vs": {}}
        out["models"][label] = entry
        missing = [x for x in (label, *baselines) if verdicts.get(x) is None]
        kind = "text-side" if text else "held-out"
        if not pairs or missing:
            entry["reason"] = (f"no {kind} pair of dataset {dataset}" if not pairs
                               else f"no {kind} verdicts for {', '.join(missing)}")
            continue
        types = {str(p["anchor_id"]): p["type"] for p in pairs}
        if len(types) != len(pairs):
            raise ValueError(f"positive_control: the held-out pairs of {dataset} repeat an anchor_id "
                             f"({len(pairs)} pairs, {len(types)} ids); re-run prepare_heldout")
        # T2I is part of the criterion whenever the pairs have negative images; text-side pairs have TOT alone
        expected = (("tot",) if all(p.get("positive_caption") for p in pairs)
                    else ("i2t", "t2i") if all(p.get("negative_image") for p in pairs) else ("i2t",))
        lacking = [f"{direction.upper()} verdicts of {who} on {dataset}" for direction in expected
                   for who in (label, *baselines) if verdicts[who].get(direction, {}).get(dataset) is None]
        if lacking:
            entry["reason"] = f"no {'; no '.join(lacking)} (re-run score_heldout)"
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
            row["verdict"] = _combine([row[d]["verdict"] for d in expected])
            row["passed"] = row["verdict"] == "passed"
            entry["vs"][ref] = row
        entry["verdict"] = _combine([r["verdict"] for r in entry["vs"].values()])
        entry["passed"] = entry["verdict"] == "passed"
        if entry["verdict"] == "underpowered":
            entry["reason"] = _underpowered_reason(entry)
    by = {v: [lab for lab in arms if out["models"][lab]["verdict"] == v] for v in VERDICTS}
    out.update(failed=by["failed"], underpowered=by["underpowered"])
    weak = "; ".join(f"{lab} {out['models'][lab]['reason']}" for lab in by["underpowered"])
    if by["unmeasured"]:
        return {**out, "passed": False, "status": "unavailable",
                "reason": "; ".join(f"{lab}: {out['models'][lab]['reason']}" for lab in by["unmeasured"])}
    if by["failed"]:
        return {**out, "passed": False, "status": "failed",
                "reason": f"{len(by['failed'])} of {len(arms)} control arms failed"
                          + (f"; {weak}" if weak else "")}
    if not by["passed"]:
        return {**out, "passed": False, "status": "underpowered",
                "reason": f"no control arm could be decided: {weak}"}
    return {**out, "passed": True, "status": "passed",
            "reason": f"passed on {', '.join(by['passed'])}; {weak}" if weak else None}


def _underpowered_reason(entry: Mapping) -> str:
    """Why an arm is underpowered, e.g. ``is underpowered vs clip: gain +3.5 / +3.2 points, CI [+0.3, +6.5] / [+0.6,
    +6.1] holds the required 5.3 / 4.0``."""
    parts = []
    for ref, row in entry["vs"].items():
        ci = " / ".join(f"[{row[d]['ci_points'][0]:+.1f}, {row[d]['ci_points'][1]:+.1f}]"
                        for d in DIRECTIONS if d in row)
        parts.append(f"vs {ref}: gain {_gains(row)} points, CI {ci} "
                     f"holds the required {_gains(row, 'required_gain_points', '.1f')}")
    return "is underpowered " + "; ".join(parts)


def has_control_arms(control: Mapping) -> bool:
    """Whether a ``positive_control.json`` dict was written with control arms (its criterion names
    ``control_losses``); files of pending re-runs written before them read every model as its own arm."""
    return "control_losses" in (control.get("criterion") or {})


def verdict(entry: Mapping) -> str:
    """A model entry's verdict (:data:`VERDICTS`), also for files written before ``verdict`` was recorded (read
    from ``passed``: True, False, None)."""
    return entry.get("verdict") or {True: "passed", False: "failed"}.get(entry.get("passed"), "unmeasured")


def failed_models(control: Mapping | None) -> dict[str, str]:
    """``{label: why}`` of the models whose comparisons cannot be read, from a ``positive_control.json`` dict: every
    model on a dataset whose control arm failed, was underpowered or could not be judged (or that has no control
    arm), unless the file's ``text_side`` block passed that dataset's control arms and none of them failed on the
    held-out pairs (underpowered or unmeasured there: the text-side pairs decide it). ``{}`` when ``control`` is
    None (no control was run). A file written before control arms (the results of a pending re-run) reads each
    model as its own control arm."""
    if not control:
        return {}
    out = _unreadable(control)
    text = control.get("text_side") or {}
    if not out or not has_control_arms(text):
        return out
    main, side = control.get("models") or {}, text.get("models") or {}

    def decided_by_text(dataset: str) -> bool:
        arms = [lab for lab, e in side.items() if e.get("role") == "control" and e.get("dataset") == dataset]
        failed = [lab for lab, e in main.items() if e.get("role") == "control" and e.get("dataset") == dataset
                  and verdict(e) == "failed"]
        return bool(arms) and all(verdict(side[a]) == "passed" for a in arms) and not failed

    return {lab: why for lab, why in out.items() if not decided_by_text((main.get(lab) or {}).get("dataset", ""))}


def _unreadable(control: Mapping) -> dict[str, str]:
    """:func:`failed_models` of one block (the held-out pairs' or the text side's), without the other."""
    models = control.get("models") or {}
    with_arms = has_control_arms(control)
    arms: dict[str, list[str]] = {}
    for label, e in models.items():
        if not with_arms or e.get("role") == "control":
            arms.setdefault(label if not with_arms else e.get("dataset"), []).append(label)
    out = {}
    for label, e in models.items():
        mine = arms.get(label if not with_arms else e.get("dataset"), [])
        if not mine:
            out[label] = f"no control arm on {e.get('dataset')}"
            continue
        bad = [a for a in mine if verdict(models[a]) != "passed"]
        if bad:
            v = verdict(models[bad[0]])
            what = {"failed": "failed", "underpowered": "was underpowered"}.get(
                v, f"was not measured ({models[bad[0]].get('reason')})")
            out[label] = (f"the positive control {what}" if bad[0] == label
                          else f"its dataset's control arm {bad[0]} {what.replace('was ', '')}")
    return out


def _gains(row: Mapping, key: str = "gain_points", fmt: str = "+.1f") -> str:
    return " / ".join(format(row[d][key], fmt) for d in DIRECTIONS if d in row)


def summary_line(control: Mapping) -> str:
    """One line for the README's result sections: the verdict, the criterion, then each control arm's gain over the
    baseline on all its held-out pairs, I2T / T2I in points with the required gain and the MDE, then the treatments'
    gains, e.g. ``FAILED (control arms: ...): hc-infonce +3.5 / +3.2 (needs 5.3 / 4.0, MDE 6.6 / 5.6) ✗;
    lc-infonce +16.0 / +17.1 (needs 10.0 / 10.0, MDE 13.6 / 13.9). Treatments, gain over clip: hc-cement +2.6 /
    -0.3; ...``; an underpowered arm is marked ``✗ underpowered``. A ``text_side`` block (text-side pairs, TOT)
    follows as ``Text-side pairs (TOT): <its own line>``. Files written before control arms (no ``role``) read as
    every model a control arm."""
    crit = control.get("criterion") or {}
    status = control.get("status", "unavailable")
    head = {"passed": "PASSED", "failed": "FAILED", "underpowered": "UNDERPOWERED"}.get(status, "NOT MEASURED")
    need = crit.get("min_gain_points")
    alpha = crit.get("alpha")
    share = crit.get("headroom_share")
    models = control.get("models") or {}
    arms, treatments = [], []
    for label, e in models.items():
        if verdict(e) == "unmeasured":
            (arms if e.get("role", "control") == "control" else treatments).append(
                f"{label} not measured ({e.get('reason')}) ✗")
            continue
        for ref, row in (e.get("vs") or {}).items():
            who = label if len(e["vs"]) == 1 else f"{label} vs {ref}"
            if e.get("role", "control") == "control":
                needs = f"needs {_gains(row, 'required_gain_points', '.1f')}, " if has_control_arms(control) else ""
                mark = {"passed": "", "underpowered": " ✗ underpowered"}.get(verdict(row), " ✗")
                arms.append(f"{who} {_gains(row)} ({needs}MDE {_gains(row, 'mde_points', '.1f')}){mark}")
            else:
                treatments.append(f"{who} {_gains(row)}")
    refs = ", ".join(crit.get("reference") or [])
    losses = "/".join(crit.get("control_losses") or [])
    room = "" if share is None else f", or {share:g} of its errors where that is less,"
    text = crit.get("pairs") == "text-side"
    directions = ("tot",) if text else ("i2t", "t2i")
    line = (f"**{head}** ({'control arms: the ' + losses + ' fine-tune of each ConcreteBatch; ' if losses else ''}"
            f"gain over {refs or 'the baseline'} on the model's own {'text-side' if text else 'held-out'} pairs, "
            f"{' / '.join(d.upper() for d in directions)} in points, needs >= "
            f"{'?' if need is None else format(need, 'g')}{room} with McNemar p < "
            f"{'?' if alpha is None else format(alpha, 'g')})")
    if arms:
        line += ": " + "; ".join(arms)
    if treatments:
        line += f". Treatments, gain over {refs or 'the baseline'}: " + "; ".join(treatments)
    if status != "passed" or _unreadable(control):
        why = control.get("reason") or "not every dataset has a passing control arm"
        line += f". {why}: the comparisons of the models marked ✗ cannot be read"
        if losses:
            line += ", nor those of the treatments on their datasets"
        if control.get("text_side"):
            line += ", unless the text-side pairs below pass their dataset"
    if control.get("text_side"):
        line += ". Text-side pairs (TOT): " + summary_line(control["text_side"])
    return line
