"""Linear probes on frozen image features (paper Sec. 3 and Tab. 3: ImageNet-1k top-1 / top-5, MS-COCO multi-label
mAP, VTAB-1k's 19 tasks).

The dataset side and the metric side are separate (:mod:`concrete_jungle.evaluation.suite`):

* readers: an ImageFolder tree (:func:`read_imagefolder`: ImageNet val, CIFAR-10), a VTAB-1k task folder of the
  VPT / NOAH release (:func:`read_vtab1k`) and a COCO instances JSON as multi-hot labels (:func:`read_coco_instances`);
* :func:`prepare_probe` writes one prepared folder for every task of ``evaluate.probe.tasks`` (scene world included);
* :func:`vtab_linear_probe` / :func:`multilabel_map` fit scikit-learn logistic regressions on fixed features, and
  :func:`score_probe` scores a prepared folder from an :class:`~concrete_jungle.evaluation.suite.EmbeddingCache`.

Protocol (VTAB-1k, Zhai et al. 2019): the L2 regularisation ``C`` is chosen on the 800 / 200 split of the 1,000
training images (highest validation accuracy; ties go to the smaller C, the stronger regularisation), the classifier
is refit on all 1,000 with that C and evaluated once on the test set. The grid ``evaluate.probe.Cs`` is where the
search starts: while the grid's smallest or largest value scores strictly above every other C, the grid widens by one
step (a factor of 10) on that side, up to :data:`C_BOUNDS` (:func:`select_c`); a fit whose search stopped at a bound
while that end was still strictly best records which (``C_at_edge``: ``"low"`` / ``"high"``), with the grid it
searched (a tie reaching an end is a plateau of the validation score: not widened, not flagged). The
paper's ImageNet / COCO probes run "10 epochs"; here every probe is a full-batch L-BFGS logistic regression
(deterministic). Top-k ranks are pessimistic: a class whose score ties the true class's counts as ranked above it.

Prepared folder (``data/<p>/suites/probe/``)::

    suite.json          {"suite": "probe", "available", "reason", "images": [...], "texts": [],
                         "tasks": {name: {"available", "reason", "format", "kind", "group", "file", "n_train",
                                          "n_val", "n_test", "n_classes", "skipped"}}}
    tasks/<name>.json   {"task", "format", "kind": "single" | "multilabel", "group", "protocol", "attribute"?,
                         "classes": [names], "skipped": {reason: n},
                         "train": [{"id", "image", "label" | "labels", "val": bool}], "test": [{"id", "image", ...}]}
    images/<pool>/      scene_world PNGs (pool ``single``: one object; ``count``: min..max objects)
    scenes/<pool>.json  {file name: scene dict} of a scene_world pool, for checking the labels
"""

from __future__ import annotations

import os
import warnings
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from concrete_jungle.evaluation.suite import (DataAbsent, EmbeddingCache, read_suite, require_path, unavailable,
                                              write_suite)
from concrete_jungle.io import check_image, confined_path, read_json, save_png, write_json
from concrete_jungle.suites_config import PROBE_C_BOUNDS, check_probe_cs, world_task_conflict

__all__ = ["VTAB1K_TASKS", "VTAB1K_ALIASES", "WORLD_ATTRIBUTES", "PROBE_STREAM", "IMAGE_EXTENSIONS", "LabelledImages",
           "C_BOUNDS", "C_STEP", "select_c", "vtab_task_group", "vtab_group_means", "vtab_linear_probe",
           "multilabel_map",
           "read_imagefolder", "read_vtab1k", "read_coco_instances", "world_label", "prepare_probe", "score_probe"]

#: The 19 VTAB-1k tasks by group (Zhai et al. 2019; TFDS-style names).
VTAB1K_TASKS: dict[str, tuple[str, ...]] = {
    "natural": ("caltech101", "cifar100", "dtd", "oxford_flowers102", "oxford_iiit_pet", "svhn", "sun397"),
    "specialized": ("patch_camelyon", "eurosat", "resisc45", "diabetic_retinopathy"),
    "structured": ("clevr_count", "clevr_distance", "dmlab", "kitti_distance", "dsprites_location",
                   "dsprites_orientation", "smallnorb_azimuth", "smallnorb_elevation"),
}
#: Folder names of the VPT / NOAH ``vtab-1k/`` release that differ from :data:`VTAB1K_TASKS`'s.
VTAB1K_ALIASES: dict[str, str] = {
    "cifar": "cifar100", "clevr_dist": "clevr_distance", "kitti": "kitti_distance", "dsprites_loc": "dsprites_location",
    "dsprites_ori": "dsprites_orientation", "smallnorb_azi": "smallnorb_azimuth",
    "smallnorb_ele": "smallnorb_elevation"}
#: Scene-world probe labels (``ProbeTask.attribute``): the single object's shape / colour / size / material /
#: grid cell ``"row,col"`` (``position``), or the number of objects (``count``).
WORLD_ATTRIBUTES = ("shape", "colour", "size", "material", "position", "count")
#: Seed-stream tag of every draw of this module (scenes, samples, validation splits); disjoint from the corpus
#: (0xC0) and benchmark (0xBE) streams of :mod:`concrete_jungle.corpus.scene_world.graph`.
PROBE_STREAM = 0x9B0
#: File endings an ImageFolder reader takes as images (case-insensitive).
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")

_POOLS = {"single": 1, "count": 2}  # scene-world pools (spawn-key entries)
_VTAB_SPLITS = ("train800", "val200", "train800val200", "test")


class LabelledImages(NamedTuple):
    """Probe images (Tab. 3): ``images`` (paths), ``labels`` (per image its class index into ``classes``, or for
    multi-label data the sorted list of them), ``classes`` (names), ``skipped`` (reason -> count)."""

    images: list[str]
    labels: list
    classes: list[str]
    skipped: dict[str, int]


# ---- VTAB groups -----------------------------------------------------------------------------------------------------
def vtab_task_group(task: str) -> str | None:
    """The VTAB-1k group (``natural`` / ``specialized`` / ``structured``; Tab. 3) of a task name (TFDS-style or a VPT
    / NOAH folder name, :data:`VTAB1K_ALIASES`), or None when it is not a VTAB-1k task. Never raises."""
    name = VTAB1K_ALIASES.get(task, task)
    return next((g for g, names in VTAB1K_TASKS.items() if name in names), None)


def vtab_group_means(per_task_accuracy: Mapping[str, float], groups: Mapping[str, str] | None = None) -> dict:
    """Mean accuracy per group and over VTAB-1k (Tab. 3's VTAB columns).

    Args:
        per_task_accuracy: task -> accuracy (fraction in [0, 1]).
        groups: task -> group; default (and for a task it does not list) :func:`vtab_task_group`.

    Returns:
        ``{group: mean over its tasks}`` for every group with a task, plus, when a VTAB group is present,
        ``"vtab_mean_of_groups"`` (mean of the natural / specialized / structured means present) and
        ``"vtab_mean_of_tasks"`` (mean over the tasks of those groups). Fractions.

    Raises:
        ValueError: a task with no group (not a VTAB-1k name and not in ``groups``), or a non-finite accuracy.
    """
    by_group: dict[str, list[float]] = {}
    for task, acc in per_task_accuracy.items():
        group = (groups or {}).get(task) or vtab_task_group(task)
        if group is None:
            raise ValueError(f"task {task!r} is not a VTAB-1k task and has no group")
        if not np.isfinite(acc):
            raise ValueError(f"task {task!r}: accuracy {acc!r} is not finite")
        by_group.setdefault(group, []).append(float(acc))
    out = {g: float(np.mean(v)) for g, v in by_group.items()}
    vtab = [g for g in VTAB1K_TASKS if g in by_group]
    if vtab:
        out["vtab_mean_of_groups"] = float(np.mean([out[g] for g in vtab]))
        out["vtab_mean_of_tasks"] = float(np.mean([a for g in vtab for a in by_group[g]]))
    return out


# ---- probes ----------------------------------------------------------------------------------------------------------
def _features(name: str, x, dim: int | None = None) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 2 or (dim is not None and x.shape[1] != dim) or not np.isfinite(x).all():
        raise ValueError(f"{name} must be a finite 2-D [N, {dim or 'D'}] array, got shape {x.shape}"
                         f"{'' if np.isfinite(x).all() else ' with NaN or Inf'}")
    return x.astype(np.float64)


def _int_labels(name: str, y, n: int) -> np.ndarray:
    y = np.asarray(y)
    if y.ndim != 1 or len(y) != n:
        raise ValueError(f"{name} must be 1-D with one label per row ({n}), got shape {y.shape}")
    if n and not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"{name} must hold integer class labels, got dtype {y.dtype}")
    return y.astype(np.int64)


def _val_split(y: np.ndarray, val_size: int, seed: int, val_mask=None,
               stratify: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Row indices (sorted) of the fitting and validation parts of the training rows."""
    n = len(y)
    if val_mask is not None:
        mask = np.asarray(val_mask, dtype=bool)
        if mask.shape != (n,) or mask.all() or not mask.any():
            raise ValueError(f"val_mask must be a bool array marking some but not all of the {n} training rows, got "
                             f"shape {mask.shape} with {int(mask.sum())} marked")
    elif not 1 <= val_size < n:
        raise ValueError(f"val_size must be in 1..{n - 1} for {n} training rows, got {val_size}")
    else:
        counts = np.unique(y, return_counts=True)[1]
        if stratify and counts.min() >= 2 and len(counts) <= val_size <= n - len(counts):
            from sklearn.model_selection import train_test_split

            val = train_test_split(np.arange(n), test_size=val_size, random_state=int(seed), stratify=y)[1]
        else:
            val = np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(PROBE_STREAM,))).permutation(n)
        mask = np.isin(np.arange(n), val[:val_size])
    return np.flatnonzero(~mask), np.flatnonzero(mask)


def _fit(x: np.ndarray, y: np.ndarray, C: float, max_iter: int, seed: int):
    """A fitted L2 logistic regression (L-BFGS; multinomial for > 2 classes) on standardised features (mean and sd
    of the fitting rows: unit-norm embeddings would otherwise need a huge C and many iterations) and whether it
    converged (one BLAS thread)."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from threadpoolctl import threadpool_limits

    clf = make_pipeline(StandardScaler(), LogisticRegression(C=float(C), max_iter=int(max_iter),
                                                             random_state=int(seed)))
    # one BLAS thread: these small problems run 10-40x slower when BLAS threads compete with other work
    with warnings.catch_warnings(record=True) as caught, threadpool_limits(1):
        warnings.simplefilter("always", ConvergenceWarning)
        clf.fit(x, y)
    return clf, not any(issubclass(w.category, ConvergenceWarning) for w in caught)


def _scores(clf, x: np.ndarray) -> np.ndarray:
    """Class scores ``[N, len(clf.classes_)]`` (logits; for two classes ``[0, decision]``), ranked like
    ``predict_proba`` but without its saturation to exact 0 / 1."""
    s = clf.decision_function(x)
    return np.column_stack([np.zeros_like(s), s]) if s.ndim == 1 else s


def _topk_hits(clf, x: np.ndarray, y: np.ndarray, k: int) -> np.ndarray:
    """Bool ``[N]``: the true class is among the top k, ranked pessimistically; a class the classifier never saw
    is a miss."""
    s = _scores(clf, x)
    col = {int(c): j for j, c in enumerate(clf.classes_)}
    idx = np.array([col.get(int(c), -1) for c in y], dtype=np.int64)
    known = idx >= 0
    true = np.where(known, s[np.arange(len(y)), np.maximum(idx, 0)], np.inf)
    above = (s >= true[:, None]).sum(axis=1) - 1  # classes scoring >= the true class, itself excluded
    return known & (above < k)


def _check_grid(Cs: Sequence[float], max_iter: int, bounds: tuple[float, float] = PROBE_C_BOUNDS) -> list[float]:
    if int(max_iter) < 1:
        raise ValueError(f"max_iter must be >= 1, got {max_iter}")
    return check_probe_cs(Cs, bounds)  # the config's own rule (evaluate.probe.Cs at start-up)


#: The widest C the probes' search reaches (:func:`select_c`): 6 decades either side of 1 (the config's rule too).
C_BOUNDS = PROBE_C_BOUNDS
#: The step of each widening of the grid (log-spaced).
C_STEP = 10.0


def _best_c(val: Mapping[float, float]) -> float:
    return min(c for c, v in val.items() if v == max(val.values()))  # ties: the smaller C (stronger regularisation)


def _strict_end(val: Mapping[float, float]) -> str | None:
    """``"low"`` / ``"high"`` when the smallest / largest C evaluated scores strictly above every other C, else None
    (an interior best, or a plateau reaching an end: widening cannot make that choice less arbitrary)."""
    lo, hi = min(val), max(val)
    rest_lo = [v for c, v in val.items() if c != lo]
    rest_hi = [v for c, v in val.items() if c != hi]
    if rest_lo and val[lo] > max(rest_lo):
        return "low"
    if rest_hi and val[hi] > max(rest_hi):
        return "high"
    return None


def select_c(evaluate: Callable[[float], tuple[float, bool]], Cs: Sequence[float],
             bounds: tuple[float, float] = C_BOUNDS, step: float = C_STEP) -> dict:
    """Choose the inverse L2 strength C on validation rows, widening the grid while an end of it is strictly best.

    The grid ``Cs`` is evaluated first; while the smallest evaluated C scores strictly above every other, ``min /
    step`` is evaluated too (and ``max * step`` while the largest does), as long as the new value stays within
    ``bounds``; a one-value grid is widened once each way. The choice is the best C (highest validation score, ties to
    the smaller C: the stronger regularisation). Issue 29: the fixed grid [0.1, 1, 10] chose one of its ends in 216
    of 269 recorded fits.

    Args:
        evaluate: ``C -> (validation score, converged)``; higher is better; the score must be finite.
        Cs: the starting grid (distinct values within ``bounds``: :func:`concrete_jungle.suites_config.check_probe_cs`).
        bounds: the smallest and largest C ever evaluated (``0 < low <= high``). step: the widening factor (> 1).

    Returns:
        ``{"C": chosen, "val": {C: score} (every C evaluated, ascending), "converged": every fit converged,
        "C_at_edge": None | "low" | "high"}``: ``C_at_edge`` says the search stopped at a bound while that end was
        still strictly best, so a C beyond the bound might score higher (a tie reaching an end is a plateau: None;
        a grid that stays one value, its bounds or step allowing no other: ``"low"``).

    Raises:
        ValueError: a bad grid (:func:`_check_grid`), bounds or step; a non-finite score (naming the C).
    """
    lo_bound, hi_bound = bounds
    if not (0 < lo_bound <= hi_bound) or not step > 1:
        raise ValueError(f"bounds must satisfy 0 < low <= high and step > 1, got {bounds}, {step}")
    Cs = _check_grid(Cs, 1, bounds)
    val: dict[float, float] = {}
    converged = True

    def run(c: float) -> None:
        nonlocal converged
        score, ok = evaluate(c)
        if not np.isfinite(score):
            raise ValueError(f"the validation score at C = {c:g} is {score}: a probe's score must be finite")
        val[c] = float(score)
        converged &= bool(ok)

    def widened(c: float, factor: float) -> float | None:
        new = float(f"{c * factor:.12g}")  # 0.01 / 10**4 is 1e-06, not 1.0...02e-06
        return new if lo_bound <= new <= hi_bound and new not in val else None

    for c in Cs:
        run(c)
    if len(val) == 1:  # nothing to compare with: one step each way
        for new in (widened(Cs[0], 1 / step), widened(Cs[0], step)):
            if new is not None:
                run(new)
    while (end := _strict_end(val)) is not None:
        new = widened(min(val), 1 / step) if end == "low" else widened(max(val), step)
        if new is None:  # a bound reached (or the step too small to move in 12 digits)
            break
        run(new)
    edge = _strict_end(val) if len(val) > 1 else "low"
    return {"C": _best_c(val), "val": dict(sorted(val.items())), "converged": converged, "C_at_edge": edge}


def vtab_linear_probe(train_x, train_y, test_x, test_y, Cs: Sequence[float] = (0.01, 0.1, 1.0, 10.0, 100.0),
                      val_size: int = 200, seed: int = 0, max_iter: int = 1000, val_mask=None) -> dict:
    """VTAB-1k linear probe: choose C on an 800 / 200 split, refit on all training rows, test once (Sec. 3, Tab. 3).

    Args:
        train_x: ``[N, D]`` frozen features of the training images (used as given: the embedding cache's rows are
            L2-normalised, cosine space).
        train_y: int ``[N]`` class labels.
        test_x: ``[M, D]``; test_y: int ``[M]`` (a label absent from training is always a miss).
        Cs: the starting grid of inverse L2 strengths C of :class:`sklearn.linear_model.LogisticRegression`,
            widened while an end of it is strictly best (:func:`select_c`).
        val_size: validation rows split off the N (seeded, stratified when every class has >= 2 rows and the
            split can hold every class; otherwise a seeded random split). Ignored when ``val_mask`` is given.
        seed: seed of the split (and ``random_state`` of the regressions).
        max_iter: L-BFGS iterations per fit.
        val_mask: optional bool ``[N]``: the validation rows (VTAB-1k's official ``val200``).

    Returns:
        ``{"top1", "top5" (only with > 5 classes), "C", "C_at_edge", "val_top1": {"<C>": acc}, "n_train", "n_fit",
        "n_val", "n_test", "n_classes", "converged", "hits"}``: accuracies are fractions in [0, 1] (pessimistic
        top-k), ``C`` the chosen value (best validation top-1, ties to the smaller C), ``C_at_edge`` as
        :func:`select_c` (None unless the search was stopped by a bound), ``converged`` whether every fit
        converged within ``max_iter``, ``hits`` the bool ``[M]`` top-1 verdicts. Deterministic for fixed inputs.

    Raises:
        ValueError: features not 2-D / non-finite / of different widths, labels not integer or of the wrong length,
            fewer than 2 classes in the fitting part, an empty test set, a bad grid / ``val_size`` / ``val_mask``.
    """
    Cs = _check_grid(Cs, max_iter)
    x = _features("train_x", train_x)
    xt = _features("test_x", test_x, x.shape[1])
    y = _int_labels("train_y", train_y, len(x))
    yt = _int_labels("test_y", test_y, len(xt))
    if len(xt) == 0:
        raise ValueError("vtab_linear_probe: the test set is empty")
    fit, val = _val_split(y, val_size, seed, val_mask)
    if len(np.unique(y[fit])) < 2:
        raise ValueError(f"vtab_linear_probe: the fitting part ({len(fit)} rows) holds fewer than 2 classes")
    def evaluate(C: float) -> tuple[float, bool]:
        clf, ok = _fit(x[fit], y[fit], C, max_iter, seed)
        return float(_topk_hits(clf, x[val], y[val], 1).mean()), ok

    sel = select_c(evaluate, Cs)
    best, val_acc, converged = sel["C"], sel["val"], sel["converged"]
    clf, ok = _fit(x, y, best, max_iter, seed)
    n_classes = len(np.unique(y))
    hits = _topk_hits(clf, xt, yt, 1)
    out = {"top1": float(hits.mean())}
    if n_classes > 5:
        out["top5"] = float(_topk_hits(clf, xt, yt, 5).mean())
    out.update({"C": best, "C_at_edge": sel["C_at_edge"], "val_top1": {f"{c:g}": a for c, a in val_acc.items()},
                "n_train": len(x),
                "n_fit": len(fit), "n_val": len(val), "n_test": len(xt), "n_classes": n_classes,
                "converged": bool(converged and ok), "hits": hits})
    return out


def _ovr_scores(x: np.ndarray, Y: np.ndarray, xt: np.ndarray, C: float, max_iter: int,
                seed: int) -> tuple[np.ndarray, bool]:
    """One-vs-rest decision scores ``[M, L]``; a class constant in ``Y`` gets a constant score column."""
    out, converged = np.empty((len(xt), Y.shape[1])), True
    for j in range(Y.shape[1]):
        if Y[:, j].min() == Y[:, j].max():
            out[:, j] = float(Y[0, j])
            continue
        clf, ok = _fit(x, Y[:, j], C, max_iter, seed)
        out[:, j], converged = clf.decision_function(xt), converged and ok
    return out, converged


def _mean_ap(Y: np.ndarray, s: np.ndarray) -> tuple[float, int]:
    from sklearn.metrics import average_precision_score

    cols = [j for j in range(Y.shape[1]) if Y[:, j].any()]
    if not cols:
        return float("nan"), 0
    return float(np.mean([average_precision_score(Y[:, j], s[:, j]) for j in cols])), len(cols)


def multilabel_map(train_x, train_Y, test_x, test_Y, Cs: Sequence[float] = (0.01, 0.1, 1.0, 10.0, 100.0),
                   val_size: int = 200, seed: int = 0, max_iter: int = 1000, val_mask=None) -> dict:
    """Multi-label linear probe (MS-COCO, Tab. 3): one-vs-rest logistic regressions, mean average precision.

    One C for all classes, chosen on the validation rows by their mAP (ties to the smaller C), then every class is
    refit on all training rows. AP per class is :func:`sklearn.metrics.average_precision_score` of the decision
    scores (tied scores form one threshold); mAP is the macro mean over the classes with at least one positive
    test image. A class constant in the training rows gets a constant score.

    Args:
        train_x: ``[N, D]`` frozen features (used as given); train_Y: 0/1 ``[N, L]`` multi-hot labels.
        test_x: ``[M, D]``; test_Y: 0/1 ``[M, L]``.
        Cs, max_iter, seed, val_mask: as :func:`vtab_linear_probe`; the ``val_size`` split is seeded (not stratified).

    Returns:
        ``{"map", "C", "C_at_edge", "val_map": {"<C>": mAP}, "n_train", "n_fit", "n_val", "n_test", "n_classes",
        "n_classes_scored", "p_at_1", "converged", "hits"}``: ``map`` / ``p_at_1`` are fractions; ``hits`` the bool
        ``[M]`` verdicts "the top-scored class is one of the image's labels" (``p_at_1`` their mean; ties
        pessimistic: a tied wrong class wins).

    Raises:
        ValueError: bad features (as :func:`vtab_linear_probe`), label matrices that are not 0/1 ``[N, L]`` /
            ``[M, L]``, no positive test label, no positive label in the validation rows, a bad grid / split.
    """
    Cs = _check_grid(Cs, max_iter)
    x = _features("train_x", train_x)
    xt = _features("test_x", test_x, x.shape[1])
    Y, Yt = np.asarray(train_Y), np.asarray(test_Y)
    for name, m, rows in (("train_Y", Y, len(x)), ("test_Y", Yt, len(xt))):
        if m.ndim != 2 or m.shape[0] != rows or m.shape[1] != Y.shape[1] or not np.isin(m, (0, 1)).all():
            raise ValueError(f"{name} must be a 0/1 matrix [{rows}, L] (L = {Y.shape[1:]}), got shape {m.shape}")
    Y, Yt = Y.astype(np.int64), Yt.astype(np.int64)
    if not Yt.any():
        raise ValueError("multilabel_map: no test image has a label; mAP is undefined")
    fit, val = _val_split(np.zeros(len(x), np.int64), val_size, seed, val_mask, stratify=False)
    if not Y[val].any():
        raise ValueError(f"multilabel_map: the {len(val)} validation rows hold no positive label; choose a larger "
                         "val_size")
    def evaluate(C: float) -> tuple[float, bool]:
        scores, ok = _ovr_scores(x[fit], Y[fit], x[val], C, max_iter, seed)
        return _mean_ap(Y[val], scores)[0], ok

    sel = select_c(evaluate, Cs)
    best, val_map, converged = sel["C"], sel["val"], sel["converged"]
    s, ok = _ovr_scores(x, Y, xt, best, max_iter, seed)
    m_ap, n_scored = _mean_ap(Yt, s)
    top = s.max(axis=1, keepdims=True)
    # pessimistic P@1: a hit only when every class tied at the top score is a true label
    hits = ((s >= top) <= (Yt == 1)).all(axis=1)
    return {"map": m_ap, "C": best, "C_at_edge": sel["C_at_edge"],
            "val_map": {f"{c:g}": v for c, v in val_map.items()}, "n_train": len(x),
            "n_fit": len(fit), "n_val": len(val), "n_test": len(xt), "n_classes": int(Y.shape[1]),
            "n_classes_scored": n_scored, "p_at_1": float(hits.mean()), "converged": bool(converged and ok),
            "hits": hits}


# ---- readers ---------------------------------------------------------------------------------------------------------
def read_imagefolder(root: str | os.PathLike, extensions: Sequence[str] = IMAGE_EXTENSIONS) -> LabelledImages:
    """An ImageFolder tree ``<root>/<class>/**/<image>`` (Tab. 3's ImageNet val; CIFAR-10): classes are the sorted
    sub-folder names, images sorted by relative path within each class (sub-folders walked, hidden names ignored).

    Skip reasons: ``not_an_image`` (a file without an image ending in ``extensions``), ``empty_class`` (a class
    folder with no image; left out of ``classes``), ``stray_file`` (a file directly in ``root``).

    Returns:
        :class:`LabelledImages`; paths are ``root/<class>/<file>`` as ``root`` is spelled.

    Raises:
        FileNotFoundError: ``root`` is not a folder.
        ValueError: a file (or a link) that resolves outside ``root`` (naming it), or no image at all.
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"image folder not found: {root}")
    exts = tuple(e.lower() for e in extensions)
    skipped: Counter = Counter()
    images, labels, classes = [], [], []
    for entry in sorted(e for e in os.listdir(root) if not e.startswith(".")):
        if not (root / entry).is_dir():
            skipped["stray_file"] += 1
            continue
        found = []
        for dirpath, dirnames, filenames in os.walk(root / entry):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for f in (f for f in filenames if not f.startswith(".")):
                rel = (Path(dirpath) / f).relative_to(root).as_posix()
                confined_path(root, rel, f"image folder {root} class {entry!r}")
                if f.lower().endswith(exts):
                    found.append(rel)
                else:
                    skipped["not_an_image"] += 1
        if not found:
            skipped["empty_class"] += 1
            continue
        images += [str(root / rel) for rel in sorted(found)]
        labels += [len(classes)] * len(found)
        classes.append(entry)
    if not images:
        raise ValueError(f"image folder {root} holds no image ({dict(skipped)})")
    return LabelledImages(images, labels, classes, dict(skipped))


def read_vtab1k(task_dir: str | os.PathLike, split: str) -> tuple[list[str], list[int], dict[str, int]]:
    """One split file of a VTAB-1k task folder (Tab. 3) as distributed with the VPT / NOAH code (``vtab-1k/<t>/``).

    Args:
        task_dir: the task folder; ``<split>.txt`` lines are ``<path relative to task_dir> <int label>``
            (the path may hold spaces: the label is the last field; blank lines are ignored).
        split: ``train800``, ``val200``, ``train800val200`` or ``test``.

    Returns:
        ``(images, labels, skipped)``: paths ``task_dir/<path>`` in file order, int labels, ``{"image_missing": n}``
        for listed files that are absent (only reasons that occurred).

    Raises:
        FileNotFoundError: the split file is missing.
        ValueError: an unknown split, a line without a path and an integer label >= 0, a path listed twice, or a path
            that is absolute or resolves outside ``task_dir`` (naming the file and line).
    """
    if split not in _VTAB_SPLITS:
        raise ValueError(f"unknown VTAB-1k split {split!r}; expected one of {_VTAB_SPLITS}")
    path = Path(task_dir) / f"{split}.txt"
    if not path.is_file():
        raise FileNotFoundError(f"VTAB-1k split file not found: {path}")
    images, labels, seen, skipped = [], [], set(), Counter()
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            parts = line.strip().rsplit(None, 1)
            if len(parts) != 2 or not parts[1].isdigit():
                raise ValueError(f"{path}:{lineno}: expected '<relative path> <label>', got {line.strip()!r}")
            rel, full = parts[0], confined_path(task_dir, parts[0], f"{path}:{lineno}")
            if rel in seen:
                raise ValueError(f"{path}:{lineno}: {rel!r} listed twice")
            seen.add(rel)
            if full.is_file():
                images.append(str(full))
                labels.append(int(parts[1]))
            else:
                skipped["image_missing"] += 1
    return images, labels, dict(skipped)


def read_coco_instances(instances_json: str | os.PathLike, image_root: str | os.PathLike) -> LabelledImages:
    """A COCO ``instances_*.json`` as multi-hot labels over its categories (80; Tab. 3's COCO multi-label probe).

    ``classes`` are the category names sorted by category id; an image's labels are the categories of its
    annotations (crowd ones included). Skip reasons: ``image_missing`` (no file under ``image_root``),
    ``no_label`` (an image without annotation, as in the usual COCO multi-label protocol),
    ``annotation_unknown_image`` (an annotation whose ``image_id`` is not in ``images``).

    Returns:
        :class:`LabelledImages` (``labels``: sorted class indices) in ``images`` order; paths ``image_root/file_name``.

    Raises:
        FileNotFoundError: the JSON is missing.
        ValueError: a JSON without ``images`` / ``annotations`` / ``categories``, an entry without its fields, a
            duplicate id, an annotation of an unknown category, or a ``file_name`` that is absolute or resolves
            outside ``image_root`` (naming the image id).
    """
    data = read_json(instances_json)
    if not isinstance(data, dict) or not all(isinstance(data.get(k), list)
                                             for k in ("images", "annotations", "categories")):
        raise ValueError(f"{instances_json}: not a COCO instances file (needs 'images', 'annotations', 'categories')")
    try:
        cats = sorted((int(c["id"]), str(c["name"])) for c in data["categories"])
        files = {int(im["id"]): str(im["file_name"]) for im in data["images"]}
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{instances_json}: a category / image lacks a valid 'id' and name ({err})") from err
    if len(files) != len(data["images"]) or len({c for c, _ in cats}) != len(cats):
        raise ValueError(f"{instances_json}: duplicate image or category id")
    col = {cid: j for j, (cid, _) in enumerate(cats)}
    present: dict[int, set[int]] = {}
    skipped: Counter = Counter()
    for k, ann in enumerate(data["annotations"]):
        try:
            iid, cid = int(ann["image_id"]), int(ann["category_id"])
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{instances_json}: annotations[{k}] lacks 'image_id' / 'category_id' ({err})") from err
        if cid not in col:
            raise ValueError(f"{instances_json}: annotations[{k}] has unknown category {cid}")
        if iid not in files:
            skipped["annotation_unknown_image"] += 1
            continue
        present.setdefault(iid, set()).add(col[cid])
    images, labels = [], []
    for iid, fname in files.items():
        path = confined_path(image_root, fname, f"{instances_json} image {iid}")
        if not path.is_file():
            skipped["image_missing"] += 1
        elif iid not in present:
            skipped["no_label"] += 1
        else:
            images.append(str(path))
            labels.append(sorted(present[iid]))
    return LabelledImages(images, labels, [n for _, n in cats], dict(skipped))


# ---- the scene world -------------------------------------------------------------------------------------------------
def _world_classes(attribute: str, cfg) -> list[str]:
    if attribute == "position":
        return [f"{r},{c}" for r in range(cfg.grid_rows) for c in range(cfg.grid_cols)]
    if attribute == "count":
        return [str(n) for n in range(cfg.min_objects, cfg.max_objects + 1)]
    return list({"shape": cfg.shapes, "colour": cfg.colours, "size": cfg.sizes, "material": cfg.materials}[attribute])


def world_label(scene, attribute: str) -> str:
    """The probe label of a scene-world scene (:data:`WORLD_ATTRIBUTES`; the world's Tab. 3 probes): the single
    object's shape / colour / size / material / cell ``"row,col"``, or the number of objects (``count``, a string).

    Raises:
        ValueError: an unknown attribute, or an attribute of the single object asked of a scene with several.
    """
    if attribute == "count":
        return str(len(scene.objects))
    if attribute not in WORLD_ATTRIBUTES:
        raise ValueError(f"unknown scene_world probe attribute {attribute!r}; expected one of {WORLD_ATTRIBUTES}")
    if len(scene.objects) != 1:
        raise ValueError(f"attribute {attribute!r} labels single-object scenes, got {len(scene.objects)} objects")
    o = scene.objects[0]
    return f"{o.row},{o.col}" if attribute == "position" else str(getattr(o, attribute))


def _rng(seed: int, cfg_seed: int, *key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(entropy=[int(seed), int(cfg_seed)],
                                                        spawn_key=(PROBE_STREAM, *map(int, key))))


def _world_pool(pool: str, world_cfg, n_train: int, n_test: int, out_dir: Path, seed: int, cfg_seed: int,
                exclude: set[str]) -> tuple[list[str], list[str], dict[str, dict]]:
    """Draw and render a pool: ``n_train`` scenes, then ``n_test`` whose signatures are neither excluded nor among
    the training scenes'. Returns the train and test file names and ``{file name: scene dict}``."""
    from concrete_jungle.corpus.scene_world.graph import sample_scene, scene_signature
    from concrete_jungle.corpus.scene_world.render import render_scene

    folder = out_dir / "images" / pool
    folder.mkdir(parents=True, exist_ok=True)
    train, test, scenes, train_sigs = [], [], {}, set()
    draw, max_draws = 0, 100 * (n_train + n_test) + 1000
    while len(train) + len(test) < n_train + n_test:
        if draw >= max_draws:
            raise RuntimeError(f"scene_world probe pool {pool!r}: only {len(train)} + {len(test)} of {n_train} + "
                               f"{n_test} unseen scenes in {max_draws} draws")
        rng = _rng(seed, cfg_seed, _POOLS[pool], draw)
        draw += 1
        lo, hi = (1, 1) if pool == "single" else (world_cfg.min_objects, world_cfg.max_objects)
        scene = sample_scene(rng, world_cfg, int(rng.integers(lo, hi + 1)))
        sig = scene_signature(scene)
        in_train = len(train) < n_train
        if sig in exclude or (not in_train and sig in train_sigs):
            continue
        fname = f"p{len(scenes) + 1:06d}.png"
        save_png(render_scene(scene, world_cfg), folder / fname, optimize=False, compress_level=1)
        scenes[fname] = scene.to_dict()
        (train if in_train else test).append(fname)
        if in_train:
            train_sigs.add(sig)
    write_json(out_dir / "scenes" / f"{pool}.json", scenes)
    return train, test, scenes


# ---- prepare / score -------------------------------------------------------------------------------------------------
def _sample(rng: np.random.Generator, n: int, k: int | None) -> list[int]:
    """Sorted seeded sample of k of range(n) (all when k is None or >= n)."""
    if k is None or k >= n:
        return list(range(n))
    return sorted(rng.choice(n, size=k, replace=False).tolist())


def _val_flags(labels: Sequence, val_size: int, rng: np.random.Generator, stratify: bool) -> list[bool]:
    if val_size >= len(labels):
        raise ValueError(f"val_size ({val_size}) must be below the {len(labels)} training images")
    y = np.asarray(labels if stratify else [0] * len(labels))
    return np.isin(np.arange(len(y)), _val_split(y, val_size, int(rng.integers(2**31)), stratify=stratify)[1]).tolist()


def _split_train_test(n: int, t, cfg, rng: np.random.Generator, separate_test: int | None) -> tuple[list, list]:
    """Indices of the training and test rows: protocol vtab1k samples ``train_size`` training rows (full: all, but a
    held-out test part); the test part is the rest (or the separate test rows), capped by ``test_size``."""
    if separate_test is not None:
        train = _sample(rng, n, cfg.train_size) if t.protocol == "vtab1k" else list(range(n))
        if t.protocol == "vtab1k" and len(train) < cfg.train_size:
            raise DataAbsent(f"only {n} training images (< train_size {cfg.train_size})")
        return train, _sample(rng, separate_test, t.test_size)
    perm = rng.permutation(n).tolist()
    if t.protocol == "vtab1k":
        if n <= cfg.train_size:
            raise DataAbsent(f"only {n} images: need more than train_size {cfg.train_size} to hold out a test set")
        train, rest = perm[:cfg.train_size], perm[cfg.train_size:]
    else:
        n_test = t.test_size or max(1, n // 5)
        if n_test >= n:
            raise DataAbsent(f"only {n} images for a test set of {n_test}")
        rest, train = perm[:n_test], perm[n_test:]
    return sorted(train), sorted(rest if t.test_size is None else rest[:t.test_size])


def _rel_ids(paths: Sequence[str], root: str | os.PathLike) -> list[str]:
    return [Path(p).relative_to(Path(root)).as_posix() for p in paths]


def _file_task(name: str, t, cfg, rng: np.random.Generator) -> dict:
    """The item file of an imagefolder / vtab1k / coco_multilabel task."""
    multi = t.format == "coco_multilabel"
    skipped: Counter = Counter()
    if t.format == "vtab1k":
        root = require_path(t.root, "root", folder=True)
        require_path(root / "train800val200.txt", "train800val200.txt")
        require_path(root / "test.txt", "test.txt")
        (tr_img, tr_lab, sk), (te_img, te_lab, sk2) = read_vtab1k(root, "train800val200"), read_vtab1k(root, "test")
        skipped.update({**{f"train_{k}": v for k, v in sk.items()}, **{f"test_{k}": v for k, v in sk2.items()}})
        raw = sorted(set(tr_lab) | set(te_lab))  # the classes: the labels that occur, as strings
        classes, tr_lab, te_lab = [str(c) for c in raw], [raw.index(c) for c in tr_lab], [raw.index(c) for c in te_lab]
        tr_ids, te_ids = _rel_ids(tr_img, root), _rel_ids(te_img, root)
        if (root / "val200.txt").is_file():
            official = set(_rel_ids(read_vtab1k(root, "val200")[0], root))
            val = [i in official for i in tr_ids]
        else:
            val = _val_flags(tr_lab, cfg.val_size, rng, True)
        test = [(te_ids[i], te_img[i], te_lab[i]) for i in _sample(rng, len(te_img), t.test_size)]
        train = list(zip(tr_ids, tr_img, tr_lab, val))
    else:
        if multi:
            require_path(t.image_root, "image_root", folder=True)
            tr = read_coco_instances(require_path(t.instances_train, "instances_train"), t.image_root)
            roots = (t.image_root, t.test_image_root or t.image_root)
            te = None
            if t.instances_val is not None:
                require_path(roots[1], "test_image_root", folder=True)
                te = read_coco_instances(require_path(t.instances_val, "instances_val"), roots[1])
                if te.classes != tr.classes:
                    raise ValueError(f"probe task {name!r}: instances_val's categories differ from instances_train's")
        else:
            roots = (require_path(t.root, "root", folder=True), t.test_root or t.root)
            tr = read_imagefolder(roots[0])
            te = read_imagefolder(require_path(t.test_root, "test_root", folder=True)) if t.test_root else None
        skipped.update({f"{part}_{k}": v for part, d in (("train", tr), ("test", te)) if d
                        for k, v in d.skipped.items()})
        # a separate test folder's class names are mapped onto the training classes (new ones appended)
        classes = tr.classes + ([] if te is None or multi else [c for c in te.classes if c not in tr.classes])
        tr_i, te_i = _split_train_test(len(tr.images), t, cfg, rng, None if te is None else len(te.images))
        val = _val_flags([tr.labels[i] for i in tr_i], cfg.val_size, rng, stratify=not multi)
        tr_ids = _rel_ids(tr.images, roots[0])
        train = [(tr_ids[i], tr.images[i], tr.labels[i], v) for i, v in zip(tr_i, val)]
        if te is None:
            test = [(tr_ids[i], tr.images[i], tr.labels[i]) for i in te_i]
        else:
            te_ids = _rel_ids(te.images, roots[1])
            test = [(te_ids[i], te.images[i], te.labels[i] if multi else classes.index(te.classes[te.labels[i]]))
                    for i in te_i]
    # every image the probe will encode is decoded here, an unreadable one skipped with its count (issue 22: a
    # damaged image used to pass preparation and fail the whole model's encoding later)
    verdicts = {p: check_image(p) for p in sorted({row[1] for row in (*train, *test)})}
    for part, rows in (("train", train), ("test", test)):
        skipped.update(f"{part}_{verdicts[row[1]]}" for row in rows if verdicts[row[1]])
    train = [row for row in train if not verdicts[row[1]]]
    test = [row for row in test if not verdicts[row[1]]]
    if not test:
        raise DataAbsent("no test image present")
    if not multi and len({row[2] for row in train}) < 2:
        raise ValueError(f"probe task {name!r}: its {len(train)} training images hold fewer than 2 classes "
                         f"({sorted({classes[row[2]] for row in train})}); a linear probe needs at least two")
    key = "labels" if multi else "label"
    return {"kind": "multilabel" if multi else "single", "classes": classes, "skipped": dict(skipped),
            "train": [{"id": i, "image": p, key: lab, "val": bool(v)} for i, p, lab, v in train],
            "test": [{"id": i, "image": p, key: lab} for i, p, lab in test]}


def prepare_probe(cfg, world_cfg, out_dir: str | os.PathLike, seed: int,
                  exclude_signatures: Iterable[str] = frozenset()) -> dict:
    """Write the prepared linear-probe suite (paper Tab. 3) for every task of ``cfg.tasks`` into ``out_dir``.

    Formats (:class:`~concrete_jungle.params.ProbeTask`):

    * ``imagefolder`` (``root``, optional ``test_root``): protocol ``vtab1k`` samples ``cfg.train_size`` (1,000)
      training images and, without ``test_root``, a test set from the rest (``test_size`` cap; disjoint);
      protocol ``full`` trains on all (without ``test_root`` holding out ``test_size``, default a fifth);
    * ``vtab1k`` (``root`` = a VPT / NOAH task folder): ``train800val200.txt`` with its official ``val200`` rows as
      the validation part, ``test.txt`` (``test_size`` cap);
    * ``coco_multilabel`` (``instances_train`` + ``image_root``, optional ``instances_val`` + ``test_image_root``):
      multi-hot labels, sampled like ``imagefolder``;
    * ``scene_world`` (``attribute``, :data:`WORLD_ATTRIBUTES`): ``cfg.train_size`` training scenes and
      ``test_size`` (default ``cfg.train_size``) test scenes, rendered; single-object attributes share the pool
      ``single`` (one object) and ``count`` uses the pool ``count`` (min..max objects, uniform); no scene of
      ``exclude_signatures`` is used and no test scene repeats a training scene's signature.

    Every training item carries ``val``: the ``cfg.val_size`` (200) validation rows of the C selection (seeded,
    stratified when possible; ``vtab1k``: the official ones). All draws use ``(seed, cfg.seed)`` on
    :data:`PROBE_STREAM`. A task whose files are absent (or too few) is recorded unavailable with its reason; the
    suite is unavailable only when no task is available. Every drawn image of a file task is decoded here
    (:func:`concrete_jungle.io.check_image`): an unreadable one is left out and counted (``skipped``:
    ``train_image_unreadable``, ``test_image_too_large``, ...). Layout: module docstring.

    Args:
        cfg: :class:`~concrete_jungle.params.ProbeParams`; world_cfg: :class:`~concrete_jungle.params.WorldConfig`
            (scene_world tasks only; may be None else); out_dir: the prepared folder (created); seed: the profile
            seed; exclude_signatures: the corpus's scene signatures.

    Returns:
        The ``suite.json`` written.

    Raises:
        ValueError: malformed source files or a path outside its root (named), a scene_world task without
            ``world_cfg`` or in a world that cannot hold it (single-object attributes need ``min_objects == 1``,
            ``count`` two object counts), a single-label file task whose training images hold one class (named).
        RuntimeError: too few unseen scenes.
    """
    out_dir = Path(out_dir)
    exclude = set(exclude_signatures)
    pool_test: dict[str, int] = {}  # the names and attributes are checked by ProbeParams / ProbeTask
    for name, t in ((n, t) for n, t in cfg.tasks.items() if t.format == "scene_world"):
        if world_cfg is None:
            raise ValueError(f"probe task {name!r}: format scene_world needs the world config")
        pool = "count" if t.attribute == "count" else "single"
        conflict = world_task_conflict(t.attribute, world_cfg)
        if conflict:
            raise ValueError(f"probe task {name!r}: {conflict}")
        pool_test[pool] = max(pool_test.get(pool, 0), t.test_size or cfg.train_size)
    pools = {p: _world_pool(p, world_cfg, cfg.train_size, n, out_dir, seed, cfg.seed, exclude)
             for p, n in sorted(pool_test.items())}
    tasks: dict[str, dict] = {}
    images: set[str] = set()
    for name, t in cfg.tasks.items():
        rng = _rng(seed, cfg.seed, 3, zlib.crc32(name.encode()))
        group = t.group if t.group != "other" else (vtab_task_group(name) or "other")
        try:
            if t.format == "scene_world":
                from concrete_jungle.corpus.scene_world.graph import Scene

                pool = "count" if t.attribute == "count" else "single"
                train, test, scenes = pools[pool]
                classes = _world_classes(t.attribute, world_cfg)
                lab = {f: classes.index(world_label(Scene.from_dict(scenes[f]), t.attribute)) for f in scenes}
                val = _val_flags([lab[f] for f in train], cfg.val_size, rng, stratify=True)
                folder = (out_dir / "images" / pool).as_posix()
                body = {"kind": "single", "classes": classes, "skipped": {},
                        "train": [{"id": f, "image": f"{folder}/{f}", "label": lab[f], "val": v}
                                  for f, v in zip(train, val)],
                        "test": [{"id": f, "image": f"{folder}/{f}", "label": lab[f]}
                                 for f in test[:t.test_size or cfg.train_size]]}
            else:
                body = _file_task(name, t, cfg, rng)
        except DataAbsent as why:
            tasks[name] = {"available": False, "reason": str(why), "format": t.format, "group": group}
            continue
        item = {"task": name, "format": t.format, "group": group, "protocol": t.protocol, **body}
        if t.format == "scene_world":
            item["attribute"] = t.attribute
        write_json(out_dir / "tasks" / f"{name}.json", item)
        images.update(it["image"] for part in ("train", "test") for it in body[part])
        tasks[name] = {"available": True, "reason": None, "format": t.format, "kind": body["kind"], "group": group,
                       "file": f"tasks/{name}.json", "n_train": len(body["train"]),
                       "n_val": sum(it["val"] for it in body["train"]), "n_test": len(body["test"]),
                       "n_classes": len(body["classes"]), "skipped": body["skipped"]}
    if any(v["available"] for v in tasks.values()):
        meta = {"suite": "probe", "available": True, "reason": None, "images": sorted(images), "texts": [],
                "tasks": tasks}
    else:
        why = "; ".join(f"{n}: {v['reason']}" for n, v in tasks.items()) or "evaluate.probe.tasks is empty"
        meta = unavailable("probe", f"no probe task is available ({why})", tasks=tasks)
    out_dir.mkdir(parents=True, exist_ok=True)
    return write_suite(out_dir, meta)


def score_probe(suite_dir: str | os.PathLike, cache: EmbeddingCache, cfg) -> dict:
    """Fit and score every available task of a prepared probe suite on one model's image embeddings (Tab. 3).

    Single-label tasks run :func:`vtab_linear_probe`, multi-label ones :func:`multilabel_map`, with ``cfg.Cs``,
    ``cfg.max_iter``, ``cfg.seed`` and the prepared validation rows (``val`` flags).

    Args:
        suite_dir: the folder :func:`prepare_probe` wrote.
        cache: the model's :class:`~concrete_jungle.evaluation.suite.EmbeddingCache` of this suite.
        cfg: :class:`~concrete_jungle.params.ProbeParams`.

    Returns:
        ``{"available", "reason", "metrics": {task: {"top1", "top5"?, "C", "C_at_edge", "val_top1", "group"} |
        {"map", "p_at_1", "C", "C_at_edge", "val_map", "group"}, "groups": vtab_group_means of each task's top1 / map
        by group}, "n": {"<task>_train", "<task>_test"}, "verdicts": {task: {test id: top-1 hit}}, "converged": {task: bool},
        "unavailable": {task: reason}}``; accuracies and mAP are fractions.

    Raises:
        FileNotFoundError: the suite was never prepared. KeyError: an image the cache lacks.
        ValueError: as :func:`vtab_linear_probe` / :func:`multilabel_map`.
    """
    suite_dir = Path(suite_dir)
    meta = read_suite(suite_dir)
    out = {"available": bool(meta["available"]), "reason": meta.get("reason"), "metrics": {}, "n": {},
           "verdicts": {}, "converged": {},
           "unavailable": {n: v["reason"] for n, v in meta.get("tasks", {}).items() if not v["available"]}}
    if not meta["available"]:
        return out
    primary, groups = {}, {}
    for name, tm in meta["tasks"].items():
        if not tm["available"]:
            continue
        item = read_json(suite_dir / tm["file"])
        train, test = item["train"], item["test"]
        try:
            x = cache.image([it["image"] for it in train])
            xt = cache.image([it["image"] for it in test])
            val = [it["val"] for it in train]
            if item["kind"] == "multilabel":
                Y = [np.array([np.isin(range(len(item["classes"])), it["labels"]) for it in p]) for p in (train, test)]
                res = multilabel_map(x, Y[0], xt, Y[1], cfg.Cs, cfg.val_size, cfg.seed, cfg.max_iter, val_mask=val)
                out["metrics"][name] = {k: res[k] for k in ("map", "p_at_1", "C", "C_at_edge", "val_map")}
                primary[name] = res["map"]
            else:
                res = vtab_linear_probe(x, [it["label"] for it in train], xt, [it["label"] for it in test], cfg.Cs,
                                        cfg.val_size, cfg.seed, cfg.max_iter, val_mask=val)
                out["metrics"][name] = {k: res[k] for k in ("top1", "top5", "C", "C_at_edge", "val_top1") if k in res}
                primary[name] = res["top1"]
        except (ValueError, KeyError) as err:  # e.g. a single-class task: name it and its file (issue 22)
            err.add_note(f"in probe task {name!r} ({suite_dir / tm['file']})")
            raise
        groups[name] = out["metrics"][name]["group"] = tm["group"]  # the table column it goes to
        out["n"].update({f"{name}_train": len(train), f"{name}_test": len(test)})
        out["verdicts"][name] = {it["id"]: bool(h) for it, h in zip(test, res["hits"].tolist())}
        out["converged"][name] = res["converged"]
    out["metrics"]["groups"] = vtab_group_means(primary, groups)
    return out
