"""ConcretePlant pipeline: sharding, resume after SIGKILL, tokenize-equal pairs dropped and counted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from concrete_jungle.concreteplant.pipeline import FAULT_ENV, run_concreteplant, shard_plan, tokenize_equal
from concrete_jungle.corpus.scene_world.corpus import generate_corpus
from concrete_jungle.params import load_params

REPO = Path(__file__).resolve().parents[1]
N_SCENES = 48


def _params(**cp):
    over = {"concreteplant": {"shard_size": 10, **cp}}
    return load_params(REPO / "params.yaml", overrides=over)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    params = _params()
    root = tmp_path_factory.mktemp("world")
    records = generate_corpus(params.world, N_SCENES, root / "corpus", seed=3, workers=1)
    (root / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return root, records


def _normalised(batch, out_dir):
    rows = []
    for r in batch:
        r = dict(r)
        if r["negative_image"]:
            p = Path(r["negative_image"])
            assert p.parent == Path(out_dir) / "images"
            r["negative_image"] = (p.name, p.read_bytes())
        rows.append(r)
    return rows


def test_shard_plan():
    plan = shard_plan(25, 10, shard_index=1, shard_count=2)
    assert plan.bounds == ((0, 10), (10, 20), (20, 25))
    assert plan.mine == (1,)
    assert shard_plan(25, 10).mine == (0, 1, 2)
    with pytest.raises(ValueError, match="shard_index"):
        shard_plan(25, 10, shard_index=2, shard_count=2)
    with pytest.raises(ValueError, match="shard_size"):
        shard_plan(25, 0)


def test_fingerprint_covers_the_scene_world_code():
    # the scene_world package gives the world vocabulary, scene edits and rendering: a change to any of its
    # modules must not reuse shards
    from concrete_jungle.concreteplant import pipeline
    from concrete_jungle.corpus import scene_world

    package = sorted(p.resolve() for p in Path(scene_world.__file__).parent.glob("*.py"))
    assert {"graph.py", "render.py", "captions.py"} <= {p.name for p in package}
    assert set(package) <= {p.resolve() for p in pipeline._CODE}
    assert all(p.is_file() for p in pipeline._CODE)


def test_tokenize_equal_pairs():
    # open_clip's tokenizer lower-cases and normalises whitespace: a case-only "rewrite" is no hard negative
    assert tokenize_equal(["A red car.", "a red car"], ["a  RED car.", "a blue car"]) == [True, False]
    with pytest.raises(ValueError, match="2 captions but 1 negatives"):
        tokenize_equal(["a", "b"], ["c"])


def test_shards_merge_and_split_over_processes(world, tmp_path):
    root, records = world
    cp = _params().concreteplant
    batch, stats = run_concreteplant(records, "hc", cp, _params().world, tmp_path / "a" / "cp" / "hc", seed=3)
    assert stats["n_shards"] == 5 and stats["n_anchors"] == N_SCENES
    assert stats["n_kept"] == len(batch) > 0
    assert stats["n_kept"] + sum(stats["skipped"].values()) == N_SCENES
    # two "machines" share the work folder: shard 1 of 2 first (no output yet), then shard 0 of 2 merges
    work = tmp_path / "shared-work"
    out = tmp_path / "b" / "cp" / "hc"
    part, info = run_concreteplant(records, "hc", _params(shard_index=1, shard_count=2).concreteplant,
                                   _params().world, out, seed=3, work_root=work)
    assert part is None and info["missing_shards"] == [0, 2, 4]
    merged, stats2 = run_concreteplant(records, "hc", _params(shard_index=0, shard_count=2).concreteplant,
                                       _params().world, out, seed=3, work_root=work)
    assert _normalised(merged, out) == _normalised(batch, tmp_path / "a" / "cp" / "hc")
    assert stats2 == stats


@pytest.mark.slow
def test_sigkill_then_resume_equals_uninterrupted(world, tmp_path):
    root, records = world
    params = _params()
    ref_out = tmp_path / "ref" / "cp" / "wo"
    ref, ref_stats = run_concreteplant(records, "wo", params.concreteplant, params.world, ref_out, seed=3)

    out = tmp_path / "run" / "cp" / "wo"
    script = (
        "import json,sys; from pathlib import Path\n"
        "from concrete_jungle.params import load_params\n"
        "from concrete_jungle.concreteplant.pipeline import run_concreteplant\n"
        f"p = load_params({str(REPO / 'params.yaml')!r}, overrides={{'concreteplant': {{'shard_size': 10}}}})\n"
        f"recs = [json.loads(l) for l in open({str(root / 'manifest.jsonl')!r})]\n"
        f"run_concreteplant(recs, 'wo', p.concreteplant, p.world, Path({str(out)!r}), seed=3)\n"
    )
    env = {**os.environ, FAULT_ENV: "2"}
    proc = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    work = out.parent.parent / "concreteplant-shards" / "wo"
    (fp,) = list(work.iterdir())
    assert sorted(p.name for p in fp.glob("shard-*.stats.json")) == ["shard-00000.stats.json",
                                                                     "shard-00001.stats.json"]
    resumed, stats = run_concreteplant(records, "wo", params.concreteplant, params.world, out, seed=3)
    assert _normalised(resumed, out) == _normalised(ref, ref_out)
    assert stats == ref_stats


def test_context_length_rule_counted_in_stats(world, tmp_path):
    """``concreteplant.context_length`` reaches keyword mining: with 8 positions (6 BPE tokens of text) keywords
    past the cut are never chosen and are counted; at the world's 32 no caption is cut."""
    from open_clip.tokenizer import _tokenizer

    from concrete_jungle.concreteplant.keywords import context_end

    root, records = world
    n_cut = sum(len(_tokenizer.encode(r["anchor"])) > 6 for r in records)
    assert n_cut > 0  # world captions run to ~24 tokens
    batch, stats = run_concreteplant(records, "hc", _params(context_length=8, image_negatives="none").concreteplant,
                                     _params().world, tmp_path / "short" / "cp" / "hc", seed=3)
    assert stats["context_length"] == 8
    assert stats["mining"]["captions"] == N_SCENES
    assert stats["mining"]["truncated_captions"] == n_cut
    assert stats["mining"]["beyond_context"] > 0
    assert batch and all(b["span"][1] <= context_end(b["caption"], 8) for b in batch)

    _, full = run_concreteplant(records, "hc", _params(image_negatives="none").concreteplant, _params().world,
                                tmp_path / "full" / "cp" / "hc", seed=3)
    assert full["context_length"] == 32
    assert full["mining"]["beyond_context"] == full["mining"]["truncated_captions"] == 0
    assert full["mining"]["candidates"] > stats["mining"]["candidates"]


def test_type_matched_pair_differs_in_concreteness_not_in_type(coco_val_records, tmp_path):
    """D_hc^type and D_lc^type (the reviewers' control): on 300 real COCO anchors every anchor that both keep has
    the same keyword type in both, and D_hc^type's keywords are more concrete than D_lc^type's."""
    records = coco_val_records[:300]
    params = load_params(REPO / "pipelines" / "real" / "params.yaml",
                         overrides={"concreteplant": {"image_negatives": "none", "shard_size": 1000,
                                                      "datasets": ["hc", "lc", "wo", "hc_type", "lc_type"]}})
    batches = {}
    for d in ("hc_type", "lc_type", "hc", "lc"):
        batch, stats = run_concreteplant(records, d, params.concreteplant, params.world, tmp_path / d, seed=0)
        batches[d] = {r["anchor_id"]: r for r in batch}
    hi, lo = batches["hc_type"], batches["lc_type"]
    both = sorted(set(hi) & set(lo))
    assert len(both) > 250
    assert all(hi[a]["type"] == lo[a]["type"] for a in both)
    mean = {d: sum(r["c_i"] for r in b.values()) / len(b) for d, b in batches.items()}
    # within a type the concreteness contrast is smaller than the default pair's, whose gap the type mix widens
    # (measured here: 4.50 vs 4.25 type-matched, about 4.7 vs 3.6 default)
    assert mean["hc_type"] - mean["lc_type"] > 0.15
    assert mean["hc"] - mean["lc"] > 3 * (mean["hc_type"] - mean["lc_type"])
    # the default pair differs in type mix (relations: a few % of D_hc, about half of D_lc on COCO)
    share = {d: sum(r["type"] == "relation" for r in b.values()) / len(b) for d, b in batches.items()}
    assert share["lc"] - share["hc"] > 0.2
    assert share["hc_type"] == pytest.approx(share["lc_type"], abs=0.03)
