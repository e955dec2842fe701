"""ConcreteBatch dataset statistics: the figures of the paper's Table 1 (Sec. 3.1, "Dataset Analyses").

For one ConcreteBatch (D_hc, D_lc or D_wo; records as written by ``concreteplant``, see docs/architecture.md) this
module computes, per the rows of Table 1:

* **Mean / median c_i** - Brysbaert (2014) concreteness of the perturbed keyword, 1-5 (Sec. 2.2).
* **I2T / T2I acc.** - cross-modal accuracy of the *CLIP-score model* on each quadruple (v, t, v', t') of anchor image,
  anchor caption, hard-negative image and hard-negative caption. The paper does not spell the rule out (Sec. 3.1
  only says the rows "quantify dataset hardness through cross-modal retrieval accuracies" and ties them to the logit
  gap s_{i,i} - s_{i,i'} of Sec. 2.3 / Fig. 5(b)). We use the anchor-side, SugarCrepe-style rule (the benchmark
  protocol of Sec. 3), strict inequality in cosine space, a tie counting as wrong:

  - ``i2t_acc`` = share of anchors with cos(v, t) > cos(v, t')   (the anchor image prefers its caption);
  - ``t2i_acc`` = share of anchors with cos(t, v) > cos(t, v')   (the anchor caption prefers its image).

  The other readings are reported beside them in ``accuracy_variants`` so that any of them can be put in the table:
  ``*_negative`` asks the same of the hard-negative side (cos(v', t') > cos(v', t); cos(t', v') > cos(t', v)), and
  ``*_group`` requires both sides at once (Winoground's text / image score).
* **BERTScore** - mean F1 of BERTScore(t', t) with the ``bert_score`` package (paper: RoBERTa-large with baseline
  rescaling; offline default: the packaged MiniLM-L6, for which no rescaling baseline exists - recorded).
* **CLIP-L** - mean cosine of the CLIP-score model's text embeddings of t and t'.
* **CLIP-V** - mean cosine of the CLIP-score model's image embeddings of v and v'.
* **DINOScore** - mean cosine of DINO features of v and v' (paper: DINOv2) from a configurable timm model; skipped
  with a recorded reason when none is configured or its weights cannot be loaded offline.
* **# Unique** - number of unique keywords, counted by lemma.
* **Logit gap vs c_i** (Sec. 2.3, Fig. 4) - per scored record the gap s_{i,i} - s_{i,i'} (``per_record``) and its
  linear trend in c_i (:func:`gap_vs_concreteness`: OLS slope with its standard error, Spearman rho).

Two models, each any :class:`~concrete_jungle.models.ModelBundle`:

* the **CLIP-score model** (``dataset_stats.clip_model``, :func:`build_clip_model`) gives every CLIP-based row of
  Table 1 (I2T, T2I, CLIP-L, CLIP-V). The paper's is PE-Core-L-14-336 on MetaCLIP-5.4B (open_clip
  ``PE-Core-L-14-336`` / ``meta``, the paper profile); the world and real profiles use the project's base model.
* the **reference model** (``dataset_stats.reference_model``, a project checkpoint; default the base model) gives
  the logit-gap figures (``i2t_cos_gap_mean``, ``logit_scale``, ``logit_gap_mean``, ``gap_vs_c``, ``per_record``).
  The paper names no model for the gaps of Sec. 2.3 / Fig. 4 / Fig. 5(b); they are the logits s_{i,i} - s_{i,i'}
  that the margin of Sec. 2.3 is added to, so we keep them on the model the margin trains (the base model) rather
  than on PE-Core. When both name the same checkpoint the model is loaded and run once.

All similarities are in cosine space (L2-normalised embeddings), never logits, except ``logit_gap_mean`` which is the
cosine gap times the reference model's ``logit_scale.exp()``.

Every figure that cannot be computed is ``None`` with its reason in ``skipped``; the result holds finite numbers only,
so ``concrete_jungle.io.write_metrics`` accepts it.
"""

from __future__ import annotations

import math
import os
import random
import statistics
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from concrete_jungle.concreteness import C_BIN_EDGES, is_rating

from concrete_jungle.evaluation.metric_models import (  # noqa: F401 (Table 1's metric models, re-exported)
    ClipModelUnavailable,
    DinoUnavailable,
    bertscore_f1,
    build_clip_model,
    check_clip_model,
    check_dino_model,
    encode_dino,
    load_dino,
    reference_checkpoint,
)
from concrete_jungle.models.build import ModelBundle
from concrete_jungle.models.encoding import encode_image_files, encode_images, encode_texts
from concrete_jungle.params import (  # noqa: F401 (config lives in params)
    MINILM_MODEL_TYPE,
    BertScoreParams,
    ClipModelParams,
    DatasetStatsParams,
    DinoParams,
)

__all__ = [
    "C_BIN_EDGES",
    "word_edit_distance",
    "by_concreteness_bin",
    "correlation",
    "KEYWORD_TYPES",
    "MINILM_MODEL_TYPE",
    "BertScoreParams",
    "DinoParams",
    "ClipModelParams",
    "DatasetStatsParams",
    "DinoUnavailable",
    "ClipModelUnavailable",
    "validate_records",
    "quadruple_verdicts",
    "gap_vs_concreteness",
    "concreteness_summary",
    "concreteness_histogram",
    "bertscore_f1",
    "check_dino_model",
    "load_dino",
    "encode_dino",
    "reference_checkpoint",
    "check_clip_model",
    "build_clip_model",
    "dataset_statistics",
]

#: Keyword types of ConcretePlant (ARO categories, paper A.1).
KEYWORD_TYPES = ("attribute", "relation", "object")

_REQUIRED_KEYS = ("anchor_id", "image", "caption", "keyword", "lemma", "type", "c_i", "negative_caption")


# --------------------------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------------------------


def validate_records(records: Sequence[dict]) -> None:
    """Check ConcreteBatch records (docs/architecture.md) before any statistic is computed.

    Each record needs ``anchor_id``, ``image`` (path), ``caption`` (t), ``keyword``, ``lemma`` and
    ``negative_caption`` (t') as non-empty strings, ``type`` in attribute / relation / object, ``c_i`` a finite number
    in [1, 5] (Brysbaert concreteness), and ``negative_image`` (v') a non-empty string or null (text-only negative;
    the key may be absent, meaning null).

    Raises:
        TypeError: ``records`` is not a list/tuple of dicts.
        ValueError: no record, or a record breaks a rule (the message gives its index, anchor_id and the key).
    """
    if not isinstance(records, (list, tuple)):
        raise TypeError(f"records must be a list of ConcreteBatch dicts, got {type(records).__name__}")
    if not records:
        raise ValueError("records is empty: dataset statistics of an empty ConcreteBatch are undefined")
    for i, rec in enumerate(records):
        if not isinstance(rec, dict):
            raise TypeError(f"records[{i}] must be a dict, got {type(rec).__name__}")
        where = f"records[{i}] (anchor_id {rec.get('anchor_id')!r})"
        for key in _REQUIRED_KEYS:
            if key not in rec:
                raise ValueError(f"{where} lacks the key {key!r}")
        for key in ("anchor_id", "image", "caption", "keyword", "lemma", "negative_caption"):
            if not isinstance(rec[key], str) or not rec[key].strip():
                raise ValueError(f"{where}: {key!r} must be a non-empty string, got {rec[key]!r}")
        if rec["type"] not in KEYWORD_TYPES:
            raise ValueError(f"{where}: 'type' must be one of {KEYWORD_TYPES}, got {rec['type']!r}")
        c = rec["c_i"]
        if not is_rating(c):
            raise ValueError(f"{where}: 'c_i' must be a finite concreteness in [1, 5], got {c!r}")
        neg = rec.get("negative_image")
        if neg is not None and (not isinstance(neg, str) or not neg.strip()):
            raise ValueError(f"{where}: 'negative_image' must be a non-empty path or null, got {neg!r}")


# --------------------------------------------------------------------------------------------------------------
# Pure statistics
# --------------------------------------------------------------------------------------------------------------
def concreteness_summary(c_values: Sequence[float]) -> dict:
    """Mean, median, min and max of concreteness scores c_i (Brysbaert 1-5; Table 1 rows 1-2).

    Returns:
        ``{"n", "mean_c", "median_c", "min_c", "max_c"}``; for no value the four statistics are None.

    Raises:
        ValueError: a value is not a finite number in [1, 5].
    """
    cs = [float(c) for c in c_values]
    for i, c in enumerate(cs):
        if not is_rating(c):
            raise ValueError(f"c_values[{i}] = {c!r} is not a concreteness in [1, 5]")
    if not cs:
        return {"n": 0, "mean_c": None, "median_c": None, "min_c": None, "max_c": None}
    return {
        "n": len(cs),
        "mean_c": statistics.fmean(cs),
        "median_c": float(statistics.median(cs)),
        "min_c": min(cs),
        "max_c": max(cs),
    }


def concreteness_histogram(c_values: Sequence[float], edges: Sequence[float] = C_BIN_EDGES) -> list[int]:
    """Counts of c_i per bin (numpy convention: bins [e_k, e_{k+1}), the last one closed).

    Args:
        c_values: concreteness scores, 1-5.
        edges: increasing bin edges (default :data:`C_BIN_EDGES`, 16 bins of 0.25 on [1, 5]).

    Returns:
        ``len(edges) - 1`` counts summing to the number of values.

    Raises:
        ValueError: fewer than two edges, edges not increasing, or a value outside [edges[0], edges[-1]].
    """
    import numpy as np

    edges = [float(e) for e in edges]
    if len(edges) < 2 or any(b <= a for a, b in zip(edges, edges[1:])):
        raise ValueError(f"edges must be >= 2 increasing numbers, got {edges}")
    values = np.asarray([float(c) for c in c_values], dtype=float)
    outside = values[(values < edges[0]) | (values > edges[-1]) | ~np.isfinite(values)]
    if outside.size:
        raise ValueError(f"c_values hold {outside.size} value(s) outside [{edges[0]}, {edges[-1]}], e.g. {outside[0]}")
    counts, _ = np.histogram(values, bins=edges)
    return [int(k) for k in counts]


def _check_emb(name: str, x: torch.Tensor, n: int | None = None) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"{name} must be 2-D [N, D], got shape {tuple(x.shape)}")
    if n is not None and x.shape[0] != n:
        raise ValueError(f"{name} has {x.shape[0]} rows, expected {n}")
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} contains NaN or Inf")
    if x.shape[0] and (x.norm(dim=1) == 0).any():
        raise ValueError(f"{name} row {int((x.norm(dim=1) == 0).nonzero()[0])} is a zero vector (cosine undefined)")
    return torch.nn.functional.normalize(x.detach().double(), dim=1)


def _cos(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a * b).sum(dim=1)


def quadruple_verdicts(
    img: torch.Tensor, txt: torch.Tensor, neg_txt: torch.Tensor, neg_img: torch.Tensor | None = None
) -> dict[str, torch.Tensor]:
    """Per-quadruple cross-modal verdicts (v, t, v', t') for Table 1's I2T / T2I rows (Sec. 3.1).

    All comparisons are in cosine space (inputs are L2-normalised here, in float64) and strict: a tie is wrong.

    Args:
        img: [N, D] embeddings of the anchor images v.
        txt: [N, D] embeddings of the anchor captions t.
        neg_txt: [N, D] embeddings of the hard-negative captions t'.
        neg_img: [N, D] embeddings of the hard-negative images v', or None (text-only negatives).

    Returns:
        Bool tensors [N]: ``i2t_anchor`` = cos(v,t) > cos(v,t'); with ``neg_img`` also ``i2t_negative`` =
        cos(v',t') > cos(v',t), ``i2t_group`` = both; ``t2i_anchor`` = cos(t,v) > cos(t,v'), ``t2i_negative`` =
        cos(t',v') > cos(t',v), ``t2i_group`` = both.

    Raises:
        TypeError: an input is not a tensor.
        ValueError: an input is not 2-D, row counts or widths differ, a value is NaN/Inf, or a row is zero.
    """
    v = _check_emb("img", img)
    n = v.shape[0]
    t = _check_emb("txt", txt, n)
    tn = _check_emb("neg_txt", neg_txt, n)
    widths = {v.shape[1], t.shape[1], tn.shape[1]}
    vn = None
    if neg_img is not None:
        vn = _check_emb("neg_img", neg_img, n)
        widths.add(vn.shape[1])
    if len(widths) > 1:
        raise ValueError(f"embedding widths differ: {sorted(widths)}")
    out = {"i2t_anchor": _cos(v, t) > _cos(v, tn)}
    if vn is not None:
        out["i2t_negative"] = _cos(vn, tn) > _cos(vn, t)
        out["i2t_group"] = out["i2t_anchor"] & out["i2t_negative"]
        out["t2i_anchor"] = _cos(t, v) > _cos(t, vn)
        out["t2i_negative"] = _cos(tn, vn) > _cos(tn, v)
        out["t2i_group"] = out["t2i_anchor"] & out["t2i_negative"]
    return out


def _mean(x: torch.Tensor) -> float:
    return float(x.double().mean())


def gap_vs_concreteness(c_values: Sequence[float], gaps: Sequence[float]) -> dict:
    """Linear trend of the logit gap s_{i,i} - s_{i,i'} in the keyword concreteness c_i (paper Sec. 2.3: "the gap
    increasing linearly with c_i"; Fig. 4): OLS ``gap = intercept + slope * c_i`` (statsmodels) and Spearman's rank
    correlation (scipy).

    Args:
        c_values: ``[n]`` c_i (Brysbaert, 1-5).
        gaps: ``[n]`` gaps, in the unit the caller chose (logit or cosine space); the slope is in that unit per
            concreteness point.

    Returns:
        ``{"n", "slope", "slope_se", "slope_p", "intercept", "r2", "spearman_rho", "spearman_p"}`` (finite floats),
        or ``{"n", "skipped": reason}`` when fewer than 3 records or c_i is constant.

    Raises:
        ValueError: if the lengths differ or a value is not finite.
    """
    import numpy as np

    c, g = np.asarray(c_values, dtype=float), np.asarray(gaps, dtype=float)
    if c.shape != g.shape or c.ndim != 1:
        raise ValueError(f"gap_vs_concreteness: c_values {c.shape} and gaps {g.shape} must be equal 1-D arrays")
    if not (np.isfinite(c).all() and np.isfinite(g).all()):
        raise ValueError("gap_vs_concreteness: c_values and gaps must be finite")
    n = int(c.size)
    if n < 3:
        return {"n": n, "skipped": f"{n} record(s): a trend needs at least 3"}
    if np.ptp(c) == 0:
        return {"n": n, "skipped": f"every c_i is {c[0]}: no trend in c_i"}
    import statsmodels.api as sm
    from scipy.stats import spearmanr

    fit = sm.OLS(g, sm.add_constant(c)).fit()
    rho, rho_p = spearmanr(c, g)

    def finite(x) -> float:
        x = float(x)
        return x if math.isfinite(x) else 0.0  # a perfect fit gives slope_se 0 / p 0; NaN only on degenerate data

    return {"n": n, "slope": finite(fit.params[1]), "slope_se": finite(fit.bse[1]), "slope_p": finite(fit.pvalues[1]),
            "intercept": finite(fit.params[0]), "r2": finite(fit.rsquared),
            "spearman_rho": finite(rho) if np.ptp(g) > 0 else 0.0, "spearman_p": finite(rho_p) if np.ptp(g) > 0 else 1.0}


def word_edit_distance(a: str, b: str) -> int:
    """Levenshtein distance between the lower-cased whitespace words of ``a`` and ``b`` (insertions, deletions and
    substitutions of whole words; paper Fig. 5(d)): "a red helmet" -> "a blue helmet" is 1, "a woman holding a
    coffee cup" -> "a woman holding a laptop" is 2."""
    x, y = a.lower().split(), b.lower().split()
    row = list(range(len(y) + 1))
    for i, wx in enumerate(x, 1):
        prev, row[0] = row[0], i
        for j, wy in enumerate(y, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (wx != wy))
    return row[-1]


def by_concreteness_bin(c_values: Sequence[float], columns: dict[str, Sequence[float | None]],
                        edges: Sequence[float]) -> list[dict]:
    """Per-bin means of ``columns`` over the pairs whose c_i falls in each bin (paper Fig. 5(d): BERTScore and word
    edit distance by concreteness). Bins are ``[edges[k], edges[k+1])``, the last one closed; ``None`` values of a
    column are left out of its mean (a bin without values has ``None``).

    Returns:
        ``[{"lo", "hi", "n", <column>: mean or None, ...}, ...]``, one entry per bin.

    Raises:
        ValueError: ``edges`` not increasing, or a column of another length than ``c_values``.
    """
    if any(b <= a for a, b in zip(edges, edges[1:])) or len(edges) < 2:
        raise ValueError(f"by_concreteness_bin: edges must increase, got {list(edges)}")
    for name, col in columns.items():
        if len(col) != len(c_values):
            raise ValueError(f"by_concreteness_bin: column {name!r} has {len(col)} values for {len(c_values)} c_i")
    out = []
    for k, (lo, hi) in enumerate(zip(edges, edges[1:])):
        last = k == len(edges) - 2
        rows = [i for i, c in enumerate(c_values) if lo <= c < hi or (last and c == hi)]
        entry: dict[str, Any] = {"lo": float(lo), "hi": float(hi), "n": len(rows)}
        for name, col in columns.items():
            vals = [float(col[i]) for i in rows if col[i] is not None]
            entry[name] = statistics.fmean(vals) if vals else None
        out.append(entry)
    return out


def correlation(x: Sequence[float | None], y: Sequence[float | None]) -> dict:
    """Pearson and Spearman correlation of the pairs where both values exist (paper Fig. 5(e)/(f): text-side vs
    image-side similarity of the hard-negative pairs); scipy.stats.

    Returns:
        ``{"n", "pearson_r", "pearson_p", "spearman_rho", "spearman_p"}``, or ``{"n", "skipped": reason}`` with
        fewer than 3 pairs or a constant side.
    """
    import numpy as np
    from scipy.stats import pearsonr, spearmanr

    pairs = [(float(a), float(b)) for a, b in zip(x, y) if a is not None and b is not None]
    n = len(pairs)
    if n < 3:
        return {"n": n, "skipped": f"{n} pair(s) with both values: a correlation needs at least 3"}
    a, b = np.array(pairs).T
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return {"n": n, "skipped": "one side is constant"}
    r, rp = pearsonr(a, b)
    rho, sp = spearmanr(a, b)
    return {"n": n, "pearson_r": float(r), "pearson_p": float(rp), "spearman_rho": float(rho),
            "spearman_p": float(sp)}


# --------------------------------------------------------------------------------------------------------------
# BERTScore
# --------------------------------------------------------------------------------------------------------------
def _describe(bundle: ModelBundle) -> dict:
    return {"name": bundle.model_name, "weights": bundle.spec.pretrained, "precision": bundle.spec.precision}


# --------------------------------------------------------------------------------------------------------------
# Dataset statistics
# --------------------------------------------------------------------------------------------------------------
def _resolve(path: str, image_root: Path | None) -> str:
    p = Path(path)
    if image_root is not None and not p.is_absolute():
        p = image_root / p
    return str(p)


def _encode_strings(texts: list[str], bundle: ModelBundle, batch_size: int, desc: str) -> torch.Tensor:
    chunks = []
    for start in tqdm(range(0, len(texts), batch_size), desc=desc, unit="batch"):
        chunks.append(encode_texts(bundle, texts[start : start + batch_size], batch_size))
    return torch.cat(chunks)


def _logit_scale(bundle: ModelBundle) -> float | None:
    scale = getattr(bundle.model, "logit_scale", None)
    if not isinstance(scale, torch.Tensor) or scale.numel() != 1:
        return None
    value = float(scale.detach().float().exp())
    return value if math.isfinite(value) else None


def dataset_statistics(
    records: Sequence[dict],
    bundle: ModelBundle,
    cfg: DatasetStatsParams,
    image_root: str | os.PathLike | None = None,
    dataset: str | None = None,
    dino_seed: int = 0,
    clip_bundle: ModelBundle | None = None,
) -> dict:
    """Table 1 statistics of one ConcreteBatch (paper Sec. 3.1) under a CLIP-score model and a reference model.

    Images and captions are deduplicated and encoded once per model, in batches of ``cfg.batch_size`` (progress
    bars); the models give L2-normalised embeddings (cosine space, :func:`concrete_jungle.models.encode_images`).

    Args:
        records: ConcreteBatch records (see :func:`validate_records`); ``negative_image`` null = text-only negative.
        bundle: the reference model: the logit-gap figures (``i2t_cos_gap_mean``, ``logit_scale``,
            ``logit_gap_mean``, ``gap_vs_c``, ``per_record``; Sec. 2.3 / Fig. 4), e.g. the base model. Its device
            also runs BERTScore and DINO.
        cfg: :class:`DatasetStatsParams`.
        image_root: folder that relative ``image`` / ``negative_image`` paths are resolved against (default: as
            stored, i.e. relative to the working directory = the repository root).
        dataset: the dataset's name for the result (``"hc"``, ``"lc"``, ``"wo"``), or None.
        dino_seed: seed of randomly initialised DINO weights (``dino.pretrained: false``, tests).
        clip_bundle: the CLIP-score model (:func:`build_clip_model`; paper: PE-Core-L-14-336): ``i2t_acc``,
            ``t2i_acc``, ``accuracy_variants``, ``clip_l``, ``clip_v``. ``None`` or ``bundle`` itself = the reference
            model scores them too (encoded once).

    Returns:
        A JSON-ready dict of finite numbers (None where a figure cannot be computed, its reason in ``skipped``).

        Over every record: ``dataset``, ``n``; ``mean_c``, ``median_c``, ``min_c``, ``max_c`` (c_i, 1-5);
        ``n_unique_keywords`` (by lemma); ``type_count``, ``type_share`` (every type, 0 when absent); ``by_type``
        {type: {``n``, ``mean_c``, ``median_c``}}; ``c_histogram`` {``edges``, ``counts``}.

        Over the scored records (all, or the ``max_records`` sample): ``n_scored``, ``scored_sample`` (None, or
        {``max_records``, ``seed``}); ``reference_model`` {``name``, ``checkpoint``} (the gap model);
        ``clip_model`` {``name``, ``weights`` (tag, file or None), ``precision``, ``shared_with_reference``};
        ``i2t_acc`` (every scored
        anchor: cos(v,t) > cos(v,t')); ``t2i_acc`` (anchors with an image negative: cos(t,v) > cos(t,v'));
        ``n_image_pairs``; ``accuracy_variants`` {``i2t_anchor``, ``i2t_negative``, ``i2t_group``, ``t2i_anchor``,
        ``t2i_negative``, ``t2i_group``} over the image pairs (all of these, ``clip_l`` and ``clip_v`` from the
        CLIP-score model); ``i2t_cos_gap_mean`` = mean cos(v,t) - cos(v,t') (cosine space), ``logit_scale`` (exp of
        the reference model's logit_scale) and ``logit_gap_mean`` = their product (reference model)
        (Fig. 5(b)); ``bertscore`` (mean F1 of BERTScore(t', t)), ``bertscore_info``; ``clip_l`` = mean cos(t, t');
        ``clip_v`` = mean cos(v, v'); ``dino_score`` = mean DINO cos(v, v'), ``dino_info``;
        ``gap_vs_c`` (:func:`gap_vs_concreteness` of the logit gap, cosine gap without a logit scale; ``unit``);
        ``excluded_from_image_figures`` {reason: count}; ``skipped`` {figure: reason}; ``per_record``: one
        ``{"anchor_id", "type", "c_i", "cos_gap", "logit_gap"}`` per scored record (for Fig. 4; the stage writes
        them to a CSV, not to the metrics JSON).

    Raises:
        TypeError / ValueError: bad records (see :func:`validate_records`).
        FileNotFoundError: an image file is missing (the message counts them and names the first anchor), or a
            configured BERTScore baseline / DINO checkpoint file is missing.
    """
    validate_records(records)
    root = Path(image_root) if image_root is not None else None
    n = len(records)
    skipped: dict[str, str] = {}
    bs = cfg.batch_size

    # ---- concreteness, keywords, types
    cs = [float(r["c_i"]) for r in records]
    summary = concreteness_summary(cs)
    type_count = Counter(r["type"] for r in records)
    n_unique = len({r["lemma"] for r in records})
    by_type = {}
    for kind in KEYWORD_TYPES:
        s = concreteness_summary([float(r["c_i"]) for r in records if r["type"] == kind])
        by_type[kind] = {"n": s["n"], "mean_c": s["mean_c"], "median_c": s["median_c"]}
        if s["n"] == 0:
            skipped[f"by_type.{kind}"] = f"no record of type {kind!r}"

    # ---- paths of every record (fail before any encoding)
    anchor_paths = [_resolve(r["image"], root) for r in records]
    neg_paths = [None if r.get("negative_image") is None else _resolve(r["negative_image"], root) for r in records]
    missing = [(r["anchor_id"], p) for r, a, b in zip(records, anchor_paths, neg_paths) for p in (a, b)
               if p is not None and not os.path.isfile(p)]
    if missing:
        raise FileNotFoundError(
            f"{len(missing)} image file(s) of the ConcreteBatch are missing, first: anchor {missing[0][0]!r}, "
            f"{missing[0][1]}"
        )

    # ---- the records scored by the models: all, or a seeded sample of cfg.max_records
    keep = list(range(n))
    if cfg.max_records is not None and n > cfg.max_records:
        keep = sorted(random.Random(cfg.seed).sample(keep, cfg.max_records))
    scored = [records[i] for i in keep]
    anchor_paths = [anchor_paths[i] for i in keep]
    neg_paths = [neg_paths[i] for i in keep]
    n_scored = len(keep)
    pair_idx = [i for i, p in enumerate(neg_paths) if p is not None]
    m = len(pair_idx)
    excluded = {"text_only_negative": n_scored - m} if m < n_scored else {}

    # ---- embeddings (cosine space): the CLIP-score model for Table 1's CLIP rows, the reference model for the gaps
    clip = bundle if clip_bundle is None else clip_bundle
    shared = clip is bundle
    texts = sorted({r["caption"] for r in scored} | {r["negative_caption"] for r in scored})
    txt_row = {c: i for i, c in enumerate(texts)}

    def embed(model: ModelBundle, images: list[str], who: str):
        """``(v, t, t')`` rows [n_scored, D] of ``model`` and the embeddings of ``images`` by path."""
        img_emb = encode_image_files(images, lambda ims: encode_images(model, ims, bs), bs,
                                     f"dataset_stats: {who}images")
        txt_emb = _encode_strings(texts, model, bs, f"dataset_stats: {who}captions")
        rows = {p: img_emb[i] for i, p in enumerate(images)}
        anchors = torch.stack([rows[p] for p in anchor_paths])
        caps = txt_emb[[txt_row[r["caption"]] for r in scored]]
        negs = txt_emb[[txt_row[r["negative_caption"]] for r in scored]]
        return anchors, caps, negs, rows

    images = sorted(set(anchor_paths) | {p for p in neg_paths if p is not None})
    v, t, tn, clip_img = embed(clip, images, "" if shared else "CLIP-score model ")
    verdicts = quadruple_verdicts(v, t, tn)
    v64, t64, tn64 = _check_emb("img", v), _check_emb("txt", t), _check_emb("neg_txt", tn)
    if shared:
        gv64, gt64, gtn64 = v64, t64, tn64
    else:
        gv, gt, gtn, _ = embed(bundle, sorted(set(anchor_paths)), "reference model ")
        gv64, gt64, gtn64 = _check_emb("img", gv), _check_emb("txt", gt), _check_emb("neg_txt", gtn)
    gap = _cos(gv64, gt64) - _cos(gv64, gtn64)
    scale = _logit_scale(bundle)
    if scale is None:
        skipped["logit_gap_mean"] = "the reference model has no scalar logit_scale"
    variants: dict[str, float | None] = dict.fromkeys(
        ("i2t_anchor", "i2t_negative", "i2t_group", "t2i_anchor", "t2i_negative", "t2i_group")
    )
    clip_v = dino = None
    clip_v_pairs: list[float | None] = [None] * n_scored
    dino_pairs: list[float | None] = [None] * n_scored
    if m:
        vn = torch.stack([clip_img[neg_paths[i]] for i in pair_idx])
        pair_verdicts = quadruple_verdicts(v[pair_idx], t[pair_idx], tn[pair_idx], vn)
        variants = {k: _mean(x) for k, x in pair_verdicts.items()}
        cos_v = _cos(v64[pair_idx], _check_emb("neg_img", vn))
        clip_v = _mean(cos_v)
        for i, x in zip(pair_idx, cos_v.tolist()):
            clip_v_pairs[i] = float(x)
    else:
        reason = "no hard-negative image (text-only ConcreteBatch: negative_image is null)"
        for key in ("t2i_acc", "accuracy_variants", "clip_v", "dino_score"):
            skipped[key] = reason
    cos_l = _cos(t64, tn64)
    clip_l = _mean(cos_l)

    # ---- BERTScore(t', t)
    bert, bert_pairs = None, [None] * n_scored
    bert_info: dict[str, Any] = {"model_type": cfg.bertscore.model_type, "enabled": cfg.bertscore.enabled}
    if cfg.bertscore.enabled:
        f1, info = bertscore_f1(
            [r["negative_caption"] for r in scored], [r["caption"] for r in scored], cfg.bertscore, bundle.device
        )
        bert_info.update(info)
        bert = _mean(f1)
        bert_pairs = [float(x) for x in f1.tolist()]
        if not math.isfinite(bert):
            raise ValueError(f"BERTScore F1 is not finite ({bert}) for model_type {cfg.bertscore.model_type!r}")
    else:
        skipped["bertscore"] = "disabled (dataset_stats.bertscore.enabled: false)"

    # ---- DINOScore(v, v')
    dino_info: dict[str, Any] = {"model": cfg.dino.model, "pretrained": cfg.dino.pretrained}
    if m and cfg.dino.model is None:
        skipped["dino_score"] = "no DINO model configured (dataset_stats.dino.model is null)"
    elif m:
        try:
            dmodel, dtransform = load_dino(cfg.dino, bundle.device, seed=dino_seed)
        except DinoUnavailable as exc:
            skipped["dino_score"] = str(exc)
        else:
            used = sorted({anchor_paths[i] for i in pair_idx} | {neg_paths[i] for i in pair_idx})
            feats = encode_image_files(used, lambda ims: encode_dino(dmodel, dtransform, ims, bs), bs, "dataset_stats: DINO")
            row = {p: i for i, p in enumerate(used)}
            a = feats[[row[anchor_paths[i]] for i in pair_idx]]
            b = feats[[row[neg_paths[i]] for i in pair_idx]]
            cos_d = _cos(_check_emb("dino(v)", a), _check_emb("dino(v')", b))
            dino = _mean(cos_d)
            for i, x in zip(pair_idx, cos_d.tolist()):
                dino_pairs[i] = float(x)
            dino_info["feature_dim"] = int(feats.shape[1])

    unit_gap = gap * scale if scale is not None else gap
    edits = [word_edit_distance(r["caption"], r["negative_caption"]) for r in scored]
    per_record = [{"anchor_id": r["anchor_id"], "type": r["type"], "c_i": float(r["c_i"]), "cos_gap": float(g),
                   "logit_gap": None if scale is None else float(g) * scale, "bertscore": bs_,
                   "word_edit_distance": ed, "clip_l": float(cl), "clip_v": cv, "dino": dn}
                  for r, g, bs_, ed, cl, cv, dn in zip(scored, gap.tolist(), bert_pairs, edits, cos_l.tolist(),
                                                       clip_v_pairs, dino_pairs)]
    c_scored = [float(r["c_i"]) for r in scored]
    trend = gap_vs_concreteness(c_scored, unit_gap.tolist())
    trend["unit"] = "logit" if scale is not None else "cosine"
    # Fig. 5(d): text-side change by concreteness bin; 5(e)/(f): text-side vs image-side similarity of the pairs
    image_side = dino_pairs if dino is not None else clip_v_pairs
    fig5 = {
        "by_c_bin": by_concreteness_bin(c_scored, {"bertscore": bert_pairs, "word_edit_distance": edits,
                                                   "clip_l": cos_l.tolist(), "clip_v": clip_v_pairs}, cfg.c_bins),
        "c_vs_bertscore": correlation(c_scored, bert_pairs),
        "c_vs_word_edit_distance": correlation(c_scored, edits),
        "bertscore_vs_word_edit_distance": correlation(bert_pairs, edits),
        "clip_l_vs_clip_v": correlation(cos_l.tolist(), clip_v_pairs),
        "bertscore_vs_image": correlation(bert_pairs, image_side),
        "image_side": "dino" if dino is not None else "clip_v",
        "word_edit_distance_mean": statistics.fmean(edits) if edits else None,
    }

    return {
        "dataset": dataset,
        "n": n,
        "n_scored": n_scored,
        "scored_sample": None if n_scored == n else {"max_records": cfg.max_records, "seed": cfg.seed},
        "reference_model": {"name": bundle.model_name, "checkpoint": bundle.spec.pretrained},
        "clip_model": {**_describe(clip), "shared_with_reference": shared},
        "mean_c": summary["mean_c"],
        "median_c": summary["median_c"],
        "min_c": summary["min_c"],
        "max_c": summary["max_c"],
        "n_unique_keywords": n_unique,
        "type_count": {k: type_count.get(k, 0) for k in KEYWORD_TYPES},
        "type_share": {k: type_count.get(k, 0) / n for k in KEYWORD_TYPES},
        "by_type": by_type,
        "i2t_acc": _mean(verdicts["i2t_anchor"]),
        "t2i_acc": variants["t2i_anchor"],
        "n_image_pairs": m,
        "accuracy_variants": variants,
        "i2t_cos_gap_mean": _mean(gap),
        "logit_scale": scale,
        "logit_gap_mean": None if scale is None else _mean(gap) * scale,
        "bertscore": bert,
        "bertscore_info": bert_info,
        "clip_l": clip_l,
        "clip_v": clip_v,
        "dino_score": dino,
        "dino_info": dino_info,
        "c_histogram": {"edges": list(C_BIN_EDGES), "counts": concreteness_histogram(cs)},
        "gap_vs_c": trend,
        "fig5": fig5,
        "excluded_from_image_figures": excluded,
        "skipped": skipped,
        "per_record": per_record,
    }
