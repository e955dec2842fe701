"""ConcretePlant end to end (paper Sec. 2.2, Fig. 2, A.1): anchor caption -> keyword candidates with
concreteness -> one sampled keyword -> rewritten caption t'_i -> hard-negative image v'_i -> ConcreteBatch.

Scale and resumability. The anchors are cut into shards of ``concreteplant.shard_size`` consecutive manifest
records. Each shard is generated independently — its own keyword-sampler stream seeded by (seed, dataset, shard)
and its own attribute/object quota — and written atomically to a work folder keyed by a fingerprint of
everything that determines the output (dataset, seed, ConcretePlant params except the shard assignment, world
config, the manifest's ids / images / anchors):

    data/<profile>/concreteplant-shards/<dataset>/<fingerprint>/shard-00000.jsonl   (+ .stats.json, images/)

A process generates the shards ``k`` with ``k % shard_count == shard_index`` (so many machines or GPUs can split
a corpus over a shared folder) and skips every shard already written, so a run killed at any moment (even with
SIGKILL) and restarted redoes at most the shard it was in, and its final ConcreteBatch equals that of an
uninterrupted run. When every shard is present the run merges them, in shard order, into the stage output.
The work folder is not a DVC output, so it survives DVC's removal of the stage outputs before a re-run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from concrete_jungle.concreteplant.image_negatives import RetrievalNegatives, SceneNegatives
from concrete_jungle.concreteplant.keywords import MiningStats, apply_context_rule, load_spacy, mine_keywords
from concrete_jungle.concreteplant.rewrite import RewriteRequest, rewrite_with_retries
from concrete_jungle.concreteplant.rewriters import build_rewriter
from concrete_jungle.concreteplant.sampling import KeywordSampler
from concrete_jungle.concreteness import load_concreteness
from concrete_jungle.io import read_json, read_jsonl, write_json, write_jsonl
from concrete_jungle.params import DATASET_SAMPLING

__all__ = ["run_concreteplant", "pregenerate", "plan_job", "ShardJob", "ShardPlan", "shard_plan", "fingerprint",
           "tokenize_equal", "DATASET_SEED_OFFSET", "FAULT_ENV", "write_shard"]

#: Distinct, fixed random streams per dataset so that D_hc, D_lc and D_wo never share sampling noise. The
#: seed offset of each dataset's sampler and rewriter; the type-matched pair shares one, so that both choose the same
#: keyword type for every anchor (the type rule's quota coin is the same stream)
DATASET_SEED_OFFSET = {"hc": 11, "lc": 23, "wo": 37, "hc_type": 53, "lc_type": 53}
#: Fault injection for the resume tests: ``CJ_FAULT_KILL_AFTER_SHARDS=<k>`` makes the process SIGKILL itself right
#: after it has written its k-th shard (a crash at the worst moment that a test can reproduce).
FAULT_ENV = "CJ_FAULT_KILL_AFTER_SHARDS"
#: params that do not change what a shard contains (not fingerprinted: any engine or split reuses the shards)
_SHARD_FIELDS = ("shard_index", "shard_count", "batch_size", "engine", "ray")


def _image_mode(cp: Any, records: list[dict]) -> str:
    if cp.image_negatives != "auto":
        return cp.image_negatives
    return "scene" if all("scene" in r for r in records) else "retrieval"


@dataclass(frozen=True)
class ShardPlan:
    """Which shards exist and which this process generates.

    Attributes:
        bounds: ``[(start, end)]`` record ranges of every shard, in order.
        mine: indices of the shards assigned to this process (``k % shard_count == shard_index``).
    """

    bounds: tuple[tuple[int, int], ...]
    mine: tuple[int, ...]


def shard_plan(n_records: int, shard_size: int, shard_index: int = 0, shard_count: int = 1) -> ShardPlan:
    """Cut ``n_records`` anchors into shards of ``shard_size`` (the last may be shorter) and assign them.

    Raises:
        ValueError: if ``shard_size < 1``, ``shard_count < 1`` or ``shard_index`` is not in ``[0, shard_count)``.
    """
    if shard_size < 1:
        raise ValueError(f"concreteplant.shard_size must be >= 1, got {shard_size}")
    if shard_count < 1 or not 0 <= shard_index < shard_count:
        raise ValueError(f"concreteplant.shard_index must be in [0, shard_count={shard_count}), got {shard_index}")
    bounds = tuple((s, min(s + shard_size, n_records)) for s in range(0, n_records, shard_size))
    return ShardPlan(bounds, tuple(k for k in range(len(bounds)) if k % shard_count == shard_index))


#: Source files whose content determines a ConcreteBatch (part of the shard fingerprint).
_CODE = tuple(sorted(f for f in Path(__file__).parent.rglob("*")  # this package's modules and lexicon data
                     if f.is_file() and f.suffix in (".py", ".yaml") and "__pycache__" not in f.parts)) + (
    Path(__file__).parents[1] / "concreteness.py",
    Path(__file__).parents[1] / "params.py",  # DATASET_SAMPLING: how each dataset samples
    # every module of the scene world package (world vocabulary, scene edits, rendering, as scene_world.py was)
    *sorted((Path(__file__).parents[1] / "corpus" / "scene_world").glob("*.py")),
)


def fingerprint(dataset: str, seed: int, cp: Any, world_cfg: Any, records: Sequence[dict],
                candidates: Sequence[list] | None = None) -> str:
    """Hex digest (16 chars) of everything that determines a ConcreteBatch: the ConcretePlant source code, dataset,
    seed, ConcretePlant params except the shard assignment, parse batch size and engine, world config, every record
    whole (id, image, anchor, and the scene, slots and captions that scene edits and retrieval read), and the given
    keyword candidates (when mined beforehand)."""
    h = hashlib.sha256()
    for src in _CODE:  # a code change never reuses shards written by older code
        h.update(src.read_bytes())
    cfg = cp.model_dump(mode="json") if hasattr(cp, "model_dump") else dict(vars(cp))
    for key in _SHARD_FIELDS:
        cfg.pop(key, None)
    world = world_cfg.model_dump(mode="json") if hasattr(world_cfg, "model_dump") else repr(world_cfg)
    h.update(json.dumps([dataset, seed, cfg, world], sort_keys=True, default=str).encode())
    for r in records:  # the whole record: a scene, its slots or captions change the negatives too
        h.update(json.dumps(r, sort_keys=True, default=str).encode() + b"\x1e")
    if candidates is not None:
        h.update(json.dumps([[list(vars(c).values()) for c in cands] for cands in candidates]).encode())
    return h.hexdigest()[:16]


def tokenize_equal(captions: Sequence[str], negatives: Sequence[str], tokenizer=None) -> list[bool]:
    """Whether each (t_i, t'_i) pair tokenizes to the same tensor (default: open_clip's ViT-B-32 tokenizer,
    77 positions; the pipeline passes one at ``concreteplant.context_length``). The tokenizer lower-cases and
    normalises whitespace, so "Red" -> "red" is no hard negative at all.

    Raises:
        ValueError: if the two lists differ in length.
    """
    if len(captions) != len(negatives):
        raise ValueError(f"tokenize_equal: {len(captions)} captions but {len(negatives)} negatives")
    if not captions:
        return []
    if tokenizer is None:
        import open_clip

        tokenizer = open_clip.get_tokenizer("ViT-B-32")
    a, b = tokenizer(list(captions)), tokenizer(list(negatives))
    return (a == b).all(dim=1).tolist()


class _Generator:
    """Per-run state shared by the shards: spaCy, the concreteness table, rewriter and image backends."""

    def __init__(self, records: list[dict], dataset: str, cp: Any, world_cfg: Any, work: Path, ds_seed: int,
                 candidates: Sequence[list] | None = None, progress: bool = True):
        self.dataset, self.cp, self.world_cfg, self.work, self.ds_seed = dataset, cp, world_cfg, work, ds_seed
        # D_hc^type / D_lc^type sample as hc / lc with the type chosen first (params.DATASET_SAMPLING)
        self.sampling_mode, cut = DATASET_SAMPLING[dataset]
        self.cut = cut or cp.cut
        self.mode = _image_mode(cp, records)
        self.candidates = candidates  # mined once by the keywords stage (without the context rule), or None
        self.nlp = load_spacy(cp.spacy_model) if candidates is None else None
        self.table = load_concreteness() if candidates is None else None
        vocabulary = None
        self.scene_neg = None
        if self.mode == "scene":
            from concrete_jungle.corpus.scene_world.graph import world_vocabulary

            vocabulary = world_vocabulary(world_cfg)
            self.scene_neg = SceneNegatives(world_cfg, work / "images")
        self.retrieval = RetrievalNegatives(records) if self.mode == "retrieval" else None
        self.image_edit = None
        if self.mode == "sdxl_turbo":
            from concrete_jungle.concreteplant.image_negatives import SdxlTurboNegatives

            self.image_edit = SdxlTurboNegatives(cp.image_edit, work / "images")
        self.rewriter = build_rewriter(cp.rewriter, seed=ds_seed, dataset=self.sampling_mode, vocabulary=vocabulary)
        self.grammar = None
        if getattr(cp, "grammar_check", False):
            from concrete_jungle.concreteplant.grammar import GrammarCheck

            self.grammar = GrammarCheck(lambda: self.nlp or load_spacy(cp.spacy_model), batch_size=cp.batch_size)
        import open_clip

        # the tokenize-equal check (tokenize_equal) at the text encoder's context
        self.tokenizer = open_clip.get_tokenizer("ViT-B-32", context_length=cp.context_length)
        # (a Ray worker passes progress=False: the driver shows Ray Data's bar over shards instead)
        self.bar_text = tqdm(desc=f"concreteplant {dataset}: captions", unit="caption", total=len(records),
                             disable=not progress)
        # retrieval picks existing corpus images and "none" makes none: only rendered / edited images get a bar
        self.bar_img = (tqdm(desc=f"concreteplant {dataset}: negative images", unit="img", disable=not progress)
                        if self.mode in ("scene", "sdxl_turbo") else None)

    def shard(self, k: int, records: list[dict], start: int = 0) -> tuple[list[dict], Counter]:
        """Generate one shard (the records ``start:start + len(records)`` of the run): ConcreteBatch rows and skip
        counts by reason (accepted rewrites by attempt in :attr:`accepted_by_attempt` and the keyword-mining counts
        in :attr:`mining`, both reset per shard)."""
        cp, skipped = self.cp, Counter()
        self.accepted_by_attempt = Counter()
        self.mining = MiningStats()
        texts = [r["anchor"] for r in records]
        if self.candidates is None:
            candidates = mine_keywords(texts, nlp=self.nlp, table=self.table, batch_size=cp.batch_size,
                                       context_length=cp.context_length, stats=self.mining)
        else:
            candidates = apply_context_rule(texts, self.candidates[start:start + len(records)], cp.context_length,
                                            self.mining)
        sampler = KeywordSampler(self.sampling_mode, top_k=cp.top_k, temperature=cp.temperature,
                                 seed=self.ds_seed * 100_003 + k, cut=self.cut)
        chosen = []
        for rec, cands in zip(records, candidates):
            kw, reason = sampler.sample(cands)
            if kw is None:
                skipped[reason or "no_keyword"] += 1
            else:
                chosen.append((rec, kw))
        requests = [RewriteRequest.for_keyword(r["anchor"], k_) for r, k_ in chosen]
        results, _ = rewrite_with_retries(self.rewriter, requests, cp.rewriter.max_attempts, grammar=self.grammar)
        rewritten = []
        for (rec, kw), res in zip(chosen, results):
            if res.negative_caption is None:
                skipped[f"rewrite_{res.reason or 'failed'}"] += 1
            else:
                self.accepted_by_attempt[str(res.attempt)] += 1
                rewritten.append((rec, kw, res.negative_caption))
        same = tokenize_equal([r["anchor"] for r, _, _ in rewritten], [t for _, _, t in rewritten], self.tokenizer)
        skipped["tokenize_equal"] += sum(same)
        rewritten = [x for x, eq in zip(rewritten, same) if not eq]
        self.bar_text.update(len(records))

        images = self._images(rewritten, skipped)
        rows = []
        for (rec, kw, neg), img in zip(rewritten, images):
            if img is None:
                continue
            rows.append({
                "anchor_id": rec["id"], "image": rec["image"], "caption": rec["anchor"], "keyword": kw.text,
                "lemma": kw.lemma, "type": kw.type, "span": [kw.start, kw.end], "c_i": float(kw.concreteness),
                "negative_caption": neg, "negative_image": img or None,
            })
        return rows, +skipped

    def _images(self, rewritten: list[tuple], skipped: Counter) -> list[str | None]:
        """Hard-negative image per rewritten pair: a path, ``""`` for text-only, or None (skipped, counted)."""
        if self.mode == "retrieval":
            out = list(self.retrieval.find([t for _, _, t in rewritten], [r["id"] for r, _, _ in rewritten]))
        elif self.mode == "scene":
            out = []
            for rec, kw, neg in rewritten:
                path, reason = self.scene_neg.render_negative(rec, kw.start, kw.end, rec["anchor"], neg)
                if path is None:
                    skipped[f"image_{reason}"] += 1
                out.append(path)
                self.bar_img.update(1)
        elif self.mode == "sdxl_turbo":
            edits = self.image_edit.edit([(r["id"], r["image"], neg) for r, _, neg in rewritten], progress=False)
            out = []
            for path, reason in edits:
                if path is None:
                    skipped[f"image_{reason}"] += 1
                out.append(path)
            self.bar_img.update(len(rewritten))
        else:  # "none": text-only hard negatives; negative_image is null (the 2N x 2N losses refuse such records)
            out = [""] * len(rewritten)
        return out

    def close(self) -> None:
        self.bar_text.close()
        if self.bar_img is not None:
            self.bar_img.close()


def write_shard(work: Path, k: int, n_anchors: int, rows: list[dict], skipped: Counter, gen: _Generator) -> None:
    """Write shard ``k`` atomically: its rows, then its statistics (whose presence marks the shard done)."""
    write_jsonl(work / f"shard-{k:05d}.jsonl", rows)
    write_json(work / f"shard-{k:05d}.stats.json", {"shard": k, "n_anchors": n_anchors, "skipped": skipped,
                                                     "accepted_by_attempt": gen.accepted_by_attempt,
                                                     "mining": gen.mining.as_dict()})


def _maybe_fault(n_written: int) -> None:
    limit = os.environ.get(FAULT_ENV)
    if limit and n_written >= int(limit):
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass(frozen=True)
class ShardJob:
    """The shards of one ConcreteBatch dataset a process still has to generate.

    Attributes:
        dataset: ``hc`` | ``lc`` | ``wo`` | ``hc_type`` | ``lc_type``.
        ds_seed: the dataset's seed (``seed * 1000 + DATASET_SEED_OFFSET[dataset]``).
        work: the fingerprinted shard work folder.
        bounds: ``[(start, end)]`` record range of every shard.
        todo: indices of this process' shards not yet written.
    """

    dataset: str
    ds_seed: int
    work: Path
    bounds: tuple[tuple[int, int], ...]
    todo: tuple[int, ...]


def plan_job(records: list[dict], dataset: str, cp: Any, world_cfg: Any, out_dir: Path, seed: int = 0,
             work_root: Path | None = None, candidates: Sequence[list] | None = None
             ) -> tuple[list[dict], Sequence[list] | None, ShardJob]:
    """The records (cut to ``cp.max_anchors``), their candidates and the :class:`ShardJob` of ``dataset``; removes
    the work of other inputs from the dataset's work root (single-process runs only).

    Raises:
        ValueError: invalid shard settings.
    """
    if cp.max_anchors:
        records = records[: cp.max_anchors]
        candidates = None if candidates is None else candidates[: cp.max_anchors]
    plan = shard_plan(len(records), cp.shard_size, cp.shard_index, cp.shard_count)
    out_dir = Path(out_dir)
    work_root = Path(work_root) if work_root is not None else out_dir.parent.parent / "concreteplant-shards" / dataset
    fp = fingerprint(dataset, seed, cp, world_cfg, records, candidates)
    work = work_root / fp
    if work_root.exists() and cp.shard_count == 1:  # stale work of other inputs (never another machine's)
        for old in work_root.iterdir():
            if old.name != fp:
                shutil.rmtree(old, ignore_errors=True)
    todo = tuple(k for k in plan.mine if not (work / f"shard-{k:05d}.stats.json").exists())
    return records, candidates, ShardJob(dataset, seed * 1000 + DATASET_SEED_OFFSET[dataset], work, plan.bounds, todo)


def pregenerate(records: list[dict], out_dirs: dict[str, Path], cp: Any, world_cfg: Any, seed: int = 0,
                candidates: Sequence[list] | None = None) -> dict | None:
    """With ``cp.engine == "ray"``: generate the missing shards of every dataset of ``out_dirs`` in one Ray Data
    pipeline (its actors serve every dataset, so each loads its backends once for the stage); a following
    :func:`run_concreteplant` per dataset then only merges. Nothing with the local engine.

    Returns:
        :func:`~concrete_jungle.concreteplant.ray_engine.generate_shards`' summary, or None (local engine or nothing
        missing).

    Raises:
        ValueError, ConnectionError, RuntimeError: as :func:`run_concreteplant` with the Ray engine.
    """
    if cp.engine != "ray":
        return None
    jobs = []
    for dataset, out_dir in out_dirs.items():
        if dataset not in DATASET_SEED_OFFSET:
            raise ValueError(f"unknown ConcreteBatch dataset {dataset!r}; expected one of "
                             f"{sorted(DATASET_SEED_OFFSET)}")
        cut, cands, job = plan_job(records, dataset, cp, world_cfg, out_dir, seed, None, candidates)
        jobs.append(job)
    if not any(job.todo for job in jobs):
        return None
    from concrete_jungle.concreteplant.ray_engine import generate_shards

    return generate_shards([job for job in jobs if job.todo], cut, cp, world_cfg, cands)


def run_concreteplant(
    records: list[dict], dataset: str, cp: Any, world_cfg: Any, out_dir: Path, seed: int = 0,
    work_root: Path | None = None, candidates: Sequence[list] | None = None,
) -> tuple[list[dict] | None, dict]:
    """Generate the ConcreteBatch ``dataset`` (``hc`` | ``lc`` | ``wo``) from corpus manifest records.

    Args:
        records: manifest records (``id``, ``image``, ``anchor``; scene-world records also ``scene`` and
            ``anchor_slots``).
        dataset: keyword sampling mode: high concreteness, low concreteness, or concreteness ignored.
        cp: ``ConcretePlantParams`` (top_k, temperature, cut, rewriter, image_negatives, image_edit, spacy_model,
            batch_size, context_length, max_anchors, shard_size, shard_index, shard_count).
        world_cfg: the scene world's ``WorldConfig`` (used for ``scene`` image negatives).
        out_dir: the dataset folder; negative images are linked into ``out_dir/images``.
        work_root: the shard work folder (module docstring); default ``out_dir.parent.parent /
            "concreteplant-shards" / dataset``.
        candidates: the keyword candidates of every record (``candidates[i]`` of ``records[i]``), mined without
            the context rule (the ``keywords`` stage, which parses once for D_hc, D_lc and D_wo); the rule of
            ``cp.context_length`` is applied here. None: each shard parses its captions with spaCy.

    Returns:
        ``(batch, stats)``: ConcreteBatch records (docs/architecture.md) and finite statistics: kept / skipped by
        reason (rewriter rejections as ``rewrite_<reason>``, ``tokenize_equal`` pairs, ``image_<reason>``), share
        of each type, mean and median c_i (Brysbaert 1-5), number of unique keywords, shards, the
        ``context_length`` and the keyword-mining counts (``mining``: captions, candidates, ``beyond_context``
        candidates dropped by the context rule, ``truncated_captions``). ``batch`` is None
        when shards assigned to other processes are still missing (then ``stats`` says which).

    With ``cp.engine == "ray"`` the missing shards of this process are generated on a Ray Data actor pool
    (:func:`concrete_jungle.concreteplant.ray_engine.generate_shards`); the shards, and so the ConcreteBatch and its
    statistics, are byte-identical to the local engine's, whatever the number of workers.

    Raises:
        ValueError: for an unknown dataset, an empty corpus, invalid shard settings, or ``candidates`` of another
            length than ``records``.
        ConnectionError: engine ``ray`` and the cluster of ``cp.ray.address`` (or ``RAY_ADDRESS``) cannot be reached.
        RuntimeError: engine ``ray`` and shards still failing after ``cp.ray.max_retries`` retries (named, with
            their reasons counted; the finished shards are kept for the re-run).
    """
    if candidates is not None and len(candidates) != len(records):
        raise ValueError(f"run_concreteplant: {len(candidates)} candidate lists for {len(records)} records")
    if dataset not in DATASET_SEED_OFFSET:
        raise ValueError(f"unknown ConcreteBatch dataset {dataset!r}; expected one of {sorted(DATASET_SEED_OFFSET)}")
    if not records:
        raise ValueError("run_concreteplant: the corpus manifest is empty")
    records, candidates, job = plan_job(records, dataset, cp, world_cfg, out_dir, seed, work_root, candidates)
    plan, work, ds_seed = shard_plan(len(records), cp.shard_size, cp.shard_index, cp.shard_count), job.work, job.ds_seed
    out_dir = Path(out_dir)

    def done(k: int) -> bool:
        return (work / f"shard-{k:05d}.stats.json").exists()

    todo = list(job.todo)
    if todo and cp.engine == "ray":  # the same shards on a Ray Data actor pool (ray_engine.py)
        from concrete_jungle.concreteplant.ray_engine import generate_shards

        generate_shards([job], records, cp, world_cfg, candidates)
        todo = []
    gen = _Generator(records, dataset, cp, world_cfg, work, ds_seed, candidates) if todo else None
    try:
        if gen is not None:
            gen.bar_text.update(sum(e - s for k, (s, e) in enumerate(plan.bounds) if done(k)))
        for n_written, k in enumerate(todo, start=1):
            s, e = plan.bounds[k]
            rows, skipped = gen.shard(k, records[s:e], start=s)
            write_shard(work, k, e - s, rows, skipped, gen)
            _maybe_fault(n_written)
    finally:
        if gen is not None:
            gen.close()

    missing = [k for k in range(len(plan.bounds)) if not done(k)]
    mode = _image_mode(cp, records)
    if missing:
        return None, {"dataset": dataset, "n_shards": len(plan.bounds), "missing_shards": missing,
                      "work_dir": str(work)}
    batch, skipped, attempts, mining = [], Counter(), Counter(), Counter()
    images = out_dir / "images"
    for k in range(len(plan.bounds)):
        shard_stats = read_json(work / f"shard-{k:05d}.stats.json")
        skipped.update(shard_stats["skipped"])
        attempts.update(shard_stats["accepted_by_attempt"])
        mining.update(shard_stats["mining"])
        for row in read_jsonl(work / f"shard-{k:05d}.jsonl"):
            img = row["negative_image"]
            if img and Path(img).parent == work / "images":  # generated here: link into the stage output
                images.mkdir(parents=True, exist_ok=True)
                dest = images / Path(img).name
                if not dest.exists():
                    try:
                        os.link(img, dest)
                    except OSError:
                        shutil.copy2(img, dest)
                row["negative_image"] = str(dest)
            batch.append(row)
    stats = _stats(batch, skipped, dataset, mode, len(records), len(plan.bounds))
    stats["rewrite_accepted_by_attempt"] = dict(sorted(attempts.items()))
    stats["context_length"] = cp.context_length
    stats["mining"] = dict(sorted(mining.items()))  # e.g. beyond_context: candidates past the text context
    return batch, stats


def _stats(batch: list[dict], skipped: Counter, dataset: str, mode: str, n_anchors: int, n_shards: int) -> dict:
    cs = [b["c_i"] for b in batch]
    types = Counter(b["type"] for b in batch)
    return {
        "dataset": dataset,
        "image_negatives": mode,
        "n_anchors": n_anchors,
        "n_kept": len(batch),
        "n_shards": n_shards,
        "skipped": dict(sorted((k, v) for k, v in skipped.items() if v)),
        "type_share": {t: types.get(t, 0) / max(len(batch), 1) for t in ("attribute", "relation", "object")},
        "mean_c": statistics.fmean(cs) if cs else 0.0,
        "median_c": statistics.median(cs) if cs else 0.0,
        "n_unique_keywords": len({b["lemma"] for b in batch}),
    }
