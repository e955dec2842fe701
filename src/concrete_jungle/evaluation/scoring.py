"""The two steps every evaluation-suite stage shares (``stages/<suite>.py prepare|score``): prepare a suite's folder
with its own seed, and score every model of the grid from its embedding caches into the one result schema
(:mod:`concrete_jungle.evaluation.suite`). Only the suite stages import this module, so editing it re-runs
evaluation alone.
"""

from __future__ import annotations

from concrete_jungle.cli import clear_outputs, fresh_dir
from concrete_jungle.evaluation.suite import EmbeddingCache, read_suite, suite_result
from concrete_jungle.grid import member_path, model_dir, model_labels
from concrete_jungle.io import read_jsonl, write_json, write_metrics

__all__ = ["prepare_suite", "score_suite", "corpus_exclusions"]


def prepare_suite(params, suite: str, prepare_fn, seed_offset: int) -> dict:
    """The ``prepare`` step shared by the suite stages: ``prepare_fn(out_dir, seed)`` writes the suite into a fresh
    ``params.suite_dir(suite)`` with its own seed (``params.seed + seed_offset``: no other stage draws the same
    scenes); returns its ``suite.json`` for the stage log, each list and each mapping of over 20 entries (the
    per-image MD5s) replaced by its length."""
    meta = prepare_fn(fresh_dir(params.suite_dir(suite)), params.seed + seed_offset)
    return {k: len(v) if isinstance(v, list) or (isinstance(v, dict) and len(v) > 20) else v
            for k, v in meta.items()}


def corpus_exclusions(params, used: bool):
    """The scene signatures of the corpus manifest (``data/<p>/corpus/manifest.jsonl``), which a scene-world suite
    never repeats (:func:`~concrete_jungle.corpus.scene_world.graph.corpus_signatures`); not read unless ``used``
    (a suite with a scene-world part)."""
    from concrete_jungle.corpus.scene_world.graph import corpus_signatures

    manifest = params.data_dir / "corpus" / "manifest.jsonl"
    return corpus_signatures(lambda: read_jsonl(manifest), used=used)


def score_suite(params, suite: str, score_fn, results: tuple[str, ...] | None = None) -> dict:
    """The ``score`` step shared by every suite stage: score each model of the grid from its embedding cache of
    ``suite`` and write one result JSON per (result suite, model) — ``metrics/<p>/evaluate/<name>/<label>.json``
    (:func:`~concrete_jungle.evaluation.suite.suite_result`) — and its per-item verdicts
    ``data/<p>/verdicts/<name>/<label>.json`` (for the report's paired tests).

    Args:
        params: the profile's :class:`~concrete_jungle.params.Params`.
        suite: the prepared suite (``params.suite_dir(suite)``; caches under ``data/<p>/embeddings/<suite>``).
        score_fn: ``(suite_dir, meta, cache) -> {name: {"metrics", "n", "verdicts", ...}}`` for an available
            suite (one entry per result suite, e.g. ``sugarcrepe`` and ``sugarcrepe_pp``); an optional
            ``"verdicts_extra"`` dict is written into the verdict file beside ``verdicts`` (e.g. the held-out T2I
            verdicts), other keys go to the result JSON.
        results: the result suites this stage writes (default ``(suite,)``); one the suite does not have this time
            (e.g. SugarCrepe++ absent) is written as skipped with its reason.

    Returns:
        ``{name: {label: headline metrics}}``.
    """
    results = results or (suite,)
    folder = params.suite_dir(suite)
    meta = read_suite(folder)
    clear_outputs(*(params.metrics_dir / "evaluate" / name for name in results),
                  *(params.data_dir / "verdicts" / name for name in results))
    summary: dict = {name: {} for name in results}
    for name in results:  # the verdict folder exists (a DVC output) even when every model is skipped
        write_json(params.data_dir / "verdicts" / name / "index.json",
                   {"suite": name, "models": model_labels(params), "available": bool(meta.get("available"))})
    for label in model_labels(params):
        checkpoint = (model_dir(params, label) / "checkpoint.pt").as_posix()
        scored = {}
        if meta.get("available"):
            cache_dir = params.data_dir / "embeddings" / suite / member_path(label)
            try:
                scored = score_fn(folder, meta, EmbeddingCache.load(cache_dir))
            except (ValueError, KeyError, OSError) as err:  # name the model, suite and file (issue 22)
                err.add_note(f"while scoring suite {suite!r} for model {label!r} from the embedding cache {cache_dir} "
                             f"and the prepared folder {folder}")
                raise
        for name in results:
            res = scored.get(name)
            if res is None or res.get("available") is False:
                reason = (res or {}).get("reason") or meta.get("reason") or f"{name} is not part of this profile"
                out = suite_result(name, label, None, {}, {}, precision=params.evaluate.precision,
                                   available=False, reason=reason)
            else:
                extra = {k: v for k, v in res.items() if k not in ("metrics", "n", "verdicts", "verdicts_extra")}
                out = suite_result(name, label, checkpoint, res["metrics"], res["n"],
                                   precision=params.evaluate.precision, **extra)
                write_json(params.data_dir / "verdicts" / name / f"{label}.json",
                           {"suite": name, "model": label, "verdicts": res["verdicts"],
                            **res.get("verdicts_extra", {})})
            write_metrics(params.metrics_dir / "evaluate" / name / f"{label}.json", out)
            summary[name][label] = out["metrics"] if out["available"] else {"skipped": out["reason"]}
    return summary
