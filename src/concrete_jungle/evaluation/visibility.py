"""Can a model see an edit? The first diagnosis of a failed positive control (:mod:`.positive_control`).

A hard-negative fine-tune can only learn to tell an anchor from its hard negative if its towers map the two apart.
On the held-out ConcreteBatch pairs (anchors never trained on) this module measures, per keyword type (attribute /
relation / object) and for every model of the grid:

* **cosine** of the anchor and its edit in each tower: cos(f(v), f(v')) for the images and cos(g(t), g(t')) for the
  captions (embeddings are L2-normalised, so these are cosines in [-1, 1]), against the same cosine between two
  *different* random held-out anchors (a seeded derangement): an edit whose cosine is as close to 1 as the model's
  own noise floor allows is one the tower does not see, however the loss pushes;
* a **linear probe** on the frozen anchor image embedding f(v) that predicts the edited value (the keyword lemma:
  left / right / above / below, a colour, a shape, ...), cross-validated (stratified k-fold, the C of
  ``evaluate.probe.Cs`` picked by an inner 3-fold search; scikit-learn), against the majority class scored by the
  same folds (``DummyClassifier``): a probe at the majority rate means the image embedding does not encode the value
  the negatives are about.

Values with fewer than :data:`MIN_PER_CLASS` anchors are left out of a probe (counted by reason); an anchor that
appears in several datasets' pairs with the same type is probed once (with the first dataset's value).

The probe is a record, not a verdict: where an image holds several candidate values (a world caption names several
objects and attributes; a relation's subject and reference are drawn at random, so "left" and "right" describe the
same image) the edited value is not a function of the image, and a tower that sees every edit can still score at the
majority rate. The cosines are the measurement to read (``docs/instrument.md``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["MIN_PER_CLASS", "FOLDS", "edit_cosines", "derangement", "value_probe", "edit_visibility"]

#: Anchors a value needs to enter a probe (and folds of its cross-validation).
MIN_PER_CLASS = 5
FOLDS = 5
_TYPES = ("attribute", "relation", "object")


def edit_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine of two ``[M, D]`` L2-normalised embedding matrices (``[M]``, in [-1, 1]).

    Raises:
        ValueError: shapes that differ.
    """
    if a.shape != b.shape:
        raise ValueError(f"edit_cosines: shapes differ, {a.shape} vs {b.shape}")
    return np.clip((np.asarray(a, np.float64) * np.asarray(b, np.float64)).sum(1), -1.0, 1.0)


def derangement(n: int, seed: int) -> np.ndarray:
    """A seeded permutation of range(n) with no fixed point (n >= 2): a shuffled cycle."""
    order = np.random.default_rng(seed).permutation(n)
    out = np.empty(n, dtype=int)
    out[order] = np.roll(order, -1)
    return out


def value_probe(x: np.ndarray, labels: Sequence[str], *, Cs: Sequence[float], max_iter: int, seed: int) -> dict:
    """Cross-validated accuracy of a linear probe predicting ``labels`` from ``x`` ``[M, D]``, and of the majority
    class on the same folds.

    Returns:
        ``{"n", "classes", "accuracy", "majority", "dropped"}`` (fractions; ``dropped``: anchors whose value has fewer
        than :data:`MIN_PER_CLASS` examples), or ``{"skipped": reason, ...}`` when fewer than 2 values remain.
    """
    from sklearn.dummy import DummyClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV, StratifiedKFold, cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    counts = Counter(labels)
    keep = np.array([counts[v] >= MIN_PER_CLASS for v in labels], bool)
    y = np.array(labels, dtype=object)[keep]
    dropped = int((~keep).sum())
    classes = sorted(set(y.tolist()))
    if len(classes) < 2:
        return {"n": int(keep.sum()), "classes": len(classes), "dropped": dropped,
                "skipped": f"fewer than 2 values with >= {MIN_PER_CLASS} anchors each"}
    x = np.asarray(x, np.float64)[keep]
    folds = StratifiedKFold(n_splits=min(FOLDS, min(Counter(y.tolist()).values())), shuffle=True, random_state=seed)
    pipe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=max_iter))
    inner = GridSearchCV(pipe, {"logisticregression__C": list(Cs)},
                         cv=StratifiedKFold(n_splits=min(3, folds.n_splits), shuffle=True, random_state=seed))
    acc = cross_val_score(inner, x, y, cv=folds)
    maj = cross_val_score(DummyClassifier(strategy="most_frequent"), x, y, cv=folds)
    return {"n": int(len(y)), "classes": len(classes), "dropped": dropped, "folds": folds.n_splits,
            "accuracy": float(acc.mean()), "majority": float(maj.mean())}


def edit_visibility(pairs: Mapping[str, Sequence[Mapping]], cache, *, Cs: Sequence[float], max_iter: int,
                    seed: int) -> dict:
    """The visibility of every edit type to one model (see the module docstring).

    Args:
        pairs: ``{dataset: [held-out pair with image, caption, negative_caption, negative_image?, type, lemma,
            anchor_id]}`` (``data/<p>/concreteplant/<d>/heldout.jsonl``).
        cache: the model's :class:`~concrete_jungle.evaluation.suite.EmbeddingCache` of the held-out suite.
        Cs, max_iter, seed: of the probes (``evaluate.probe``) and of the random pairs.

    Returns:
        ``{"cosine": {type: {"image", "text", "n"}, "random": {"image", "text", "n"}}, "probe": {type: value_probe
        result}}``: mean cosines (``image`` only where every pair of the type has a negative image), probe
        accuracies as fractions.

    Raises:
        KeyError: an image or caption the cache lacks (named by the cache).
        ValueError: a pair lacking ``type`` or ``lemma`` (named).
    """
    flat = []
    for d, ps in pairs.items():
        for k, p in enumerate(ps):
            if p.get("type") not in _TYPES or not p.get("lemma"):
                raise ValueError(f"edit_visibility: held-out pair {k} of {d} has no valid type / lemma")
            flat.append(p)
    cos: dict = {}
    probe: dict = {}
    for t in _TYPES:
        ps = [p for p in flat if p["type"] == t]
        if not ps:
            continue
        tc = edit_cosines(cache.text([p["caption"] for p in ps]), cache.text([p["negative_caption"] for p in ps]))
        entry = {"text": float(tc.mean()), "n": len(ps)}
        if all(p.get("negative_image") for p in ps):
            entry["image"] = float(edit_cosines(cache.image([p["image"] for p in ps]),
                                                cache.image([p["negative_image"] for p in ps])).mean())
        cos[t] = entry
        seen, uniq = set(), []
        for p in ps:  # one row per anchor image and type
            if p["anchor_id"] not in seen:
                seen.add(p["anchor_id"])
                uniq.append(p)
        probe[t] = value_probe(cache.image([p["image"] for p in uniq]), [p["lemma"] for p in uniq], Cs=Cs,
                               max_iter=max_iter, seed=seed)
    anchors = list({p["anchor_id"]: p for p in flat}.values())
    if len(anchors) >= 2:
        perm = derangement(len(anchors), seed)
        img = cache.image([p["image"] for p in anchors])
        txt = cache.text([p["caption"] for p in anchors])
        cos["random"] = {"image": float(edit_cosines(img, img[perm]).mean()),
                         "text": float(edit_cosines(txt, txt[perm]).mean()), "n": len(anchors)}
    return {"cosine": cos, "probe": probe}
