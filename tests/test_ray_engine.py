"""ConcretePlant on Ray Data (concreteplant.engine: ray, issue 21): the same ConcreteBatch and per-reason counts as
the local engine with 1 and 2 workers, on the scene world and on real COCO captions; a worker killed mid-run; a
shard that keeps failing named and counted; an unreachable cluster failing in seconds with its address."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from concrete_jungle.concreteplant.pipeline import FAULT_ENV, run_concreteplant
from concrete_jungle.concreteplant.ray_engine import check_reachable
from concrete_jungle.corpus.scene_world.corpus import generate_corpus
from concrete_jungle.params import load_params

REPO = Path(__file__).resolve().parents[1]


def _world_params(**cp):
    return load_params(REPO / "params.yaml", overrides={"concreteplant": {"shard_size": 10, **cp}})


def _normalised(batch):
    """Rows with each negative image replaced by (file name, bytes): equal rows mean byte-identical outputs."""
    return [dict(r, negative_image=(Path(r["negative_image"]).name, Path(r["negative_image"]).read_bytes())
                 if r["negative_image"] else r["negative_image"]) for r in batch]


@pytest.fixture(scope="module")
def ray_cluster():
    """One local Ray of 2 cores for the module (the engine joins it and leaves it running)."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("world")
    return generate_corpus(_world_params().world, 36, root / "corpus", seed=5, workers=1)


def test_unreachable_cluster_fails_in_seconds_naming_the_address():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectionError, match=f"127.0.0.1:{port}"):
        check_reachable(f"127.0.0.1:{port}", timeout_s=2)
    t0 = time.perf_counter()
    with pytest.raises(ConnectionError, match=r"headnode\.invalid:10001.*within 1 s"):
        check_reachable("headnode.invalid:10001", timeout_s=1)  # a name no resolver knows
    assert time.perf_counter() - t0 < 5
    for bad, why in (("headnode", "not host:port"), ("head:abc", "not host:port"), ("head:99999", "out of range"),
                     ("ray://head:10001", "ray\\[client\\]")):
        with pytest.raises(ValueError, match=f"RAY_ADDRESS {bad!r}.*{why}"):
            check_reachable(bad, timeout_s=1)
    check_reachable("auto", timeout_s=1)  # left to Ray


def test_addresses_are_checked_before_any_shard():
    from concrete_jungle.concreteplant.ray_engine import connect

    for bad in ("head:abc", "", "ray://head:10001"):
        with pytest.raises(ValueError, match="concreteplant.ray.address"):
            connect(_world_params(engine="ray", ray={"address": bad}).concreteplant.ray)


def test_reasons_are_countable():
    from concrete_jungle.concreteplant.ray_engine import _reason

    class ActorDiedError(Exception):
        __module__ = "ray.exceptions"

    died = ActorDiedError("The actor died because of an error raised in its creation task, \x1b[36mray::MapWorker("
                          "pid=4242, ip=10.0.0.1, actor_id=8f3a)\x1b[39m\nTraceback (most recent call last):\n"
                          "  File 'x.py', line 1\nFileNotFoundError: [Errno 2] No such file: '/nonexistent'")
    assert _reason(died) == "FileNotFoundError: [Errno 2] No such file: '/nonexistent'"
    assert _reason(ValueError("bad shard\nmore")) == "ValueError: bad shard"


def test_gpu_backends_need_gpus_per_worker():
    from concrete_jungle.concreteplant.ray_engine import _check_devices

    cp = _world_params(engine="ray", rewriter={"backend": "vllm"}).concreteplant
    with pytest.raises(ValueError, match="gpus_per_worker is 0, but concreteplant.rewriter.backend: vllm"):
        _check_devices(cp)
    cp = _world_params(engine="ray", image_negatives="sdxl_turbo", image_edit={"device": "cuda"}).concreteplant
    with pytest.raises(ValueError, match="concreteplant.image_edit.device: cuda"):
        _check_devices(cp)
    _check_devices(_world_params(engine="ray", rewriter={"backend": "vllm"}, ray={"gpus_per_worker": 1}).concreteplant)
    _check_devices(_world_params(engine="ray").concreteplant)  # lexical rewriter, scene re-render: no GPU


def test_fingerprint_covers_the_whole_record(world):
    from concrete_jungle.concreteplant.pipeline import fingerprint

    p = _world_params()
    moved = [dict(r) for r in world]
    moved[3] = {**moved[3], "scene": {**moved[3]["scene"], "objects": moved[3]["scene"]["objects"][::-1]}}
    assert fingerprint("hc", 0, p.concreteplant, p.world, world) != fingerprint("hc", 0, p.concreteplant, p.world,
                                                                                 moved)


def test_engine_params_do_not_change_the_shard_fingerprint(world):
    from concrete_jungle.concreteplant.pipeline import fingerprint

    p, q = _world_params(), _world_params(engine="ray", ray={"workers": 4, "address": "auto"})
    assert fingerprint("hc", 0, p.concreteplant, p.world, world) == fingerprint("hc", 0, q.concreteplant, q.world,
                                                                                 world)
    with pytest.raises(ValueError, match="workers"):
        _world_params(engine="ray", ray={"workers": 0})


@pytest.mark.slow
def test_a_local_ray_too_small_for_one_worker_is_refused():
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("a Ray is already running in this process (the module's own starts later)")
    from concrete_jungle.concreteplant.ray_engine import connect

    cfg = _world_params(engine="ray", ray={"num_cpus": 1, "gpus_per_worker": 1}).concreteplant.ray
    with pytest.raises(ValueError, match="gpus_per_worker = 1, but the local Ray has 0 GPUs"):
        connect(cfg)
    assert not ray.is_initialized()  # shut down again


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["hc", "lc"])
def test_ray_engine_equals_local_on_the_world(ray_cluster, world, dataset, tmp_path):
    p = _world_params()
    ref, ref_stats = run_concreteplant(world, dataset, p.concreteplant, p.world, tmp_path / "local" / "cp" / dataset,
                                       seed=2)
    assert ref_stats["n_shards"] == 4 and len(ref) > 20
    for workers in (1, 2):
        cp = _world_params(engine="ray", ray={"workers": workers}).concreteplant
        batch, stats = run_concreteplant(world, dataset, cp, p.world, tmp_path / f"ray{workers}" / "cp" / dataset,
                                         seed=2)
        assert _normalised(batch) == _normalised(ref)
        assert stats == ref_stats  # per-reason skip counts included


@pytest.mark.slow
def test_ray_engine_equals_local_on_real_captions(ray_cluster, coco_val_records, tmp_path):
    records = coco_val_records[:60]
    over = {"image_negatives": "retrieval", "shard_size": 20}
    p = load_params(REPO / "pipelines" / "real" / "params.yaml", overrides={"concreteplant": over})
    assert p.concreteplant.grammar_check and p.concreteplant.rewriter.backend == "lexical"
    ref, ref_stats = run_concreteplant(records, "lc", p.concreteplant, p.world, tmp_path / "local" / "lc", seed=0)
    assert ref_stats["n_shards"] == 3 and len(ref) > 30
    for workers in (1, 2):
        q = load_params(REPO / "pipelines" / "real" / "params.yaml",
                        overrides={"concreteplant": {**over, "engine": "ray", "ray": {"workers": workers}}})
        batch, stats = run_concreteplant(records, "lc", q.concreteplant, q.world, tmp_path / f"ray{workers}" / "lc",
                                         seed=0)
        assert batch == ref and stats == ref_stats


@pytest.mark.slow
def test_killed_worker_leaves_a_complete_batch(ray_cluster, world, tmp_path, monkeypatch):
    # two shards of 18 anchors (each worker killed costs a Ray worker's start-up, ~10 s of CI)
    p = _world_params(shard_size=18)
    ref, ref_stats = run_concreteplant(world, "wo", p.concreteplant, p.world, tmp_path / "local" / "cp" / "wo",
                                       seed=2)
    out = tmp_path / "ray" / "cp" / "wo"
    work = out.parent.parent / "concreteplant-shards" / "wo"
    monkeypatch.setenv(FAULT_ENV, "1")  # every worker process SIGKILLs itself after its first shard
    # no restarts, no further pass: the run stops naming what is missing, and keeps what was finished
    cp = _world_params(shard_size=18, engine="ray", ray={"workers": 1, "max_retries": 0}).concreteplant
    with pytest.raises(RuntimeError, match=r"shard\(s\) still missing after 1 pass.*re-run"):
        run_concreteplant(world, "wo", cp, p.world, out, seed=2)
    (fp,) = list(work.iterdir())
    assert len(list(fp.glob("shard-*.stats.json"))) == 1
    # restarts: each new worker process finishes one more shard before dying, and the run completes
    cp = _world_params(shard_size=18, engine="ray", ray={"workers": 1, "max_retries": 2}).concreteplant
    batch, stats = run_concreteplant(world, "wo", cp, p.world, out, seed=2)
    assert len(list(fp.glob("shard-*.stats.json"))) == 2
    assert _normalised(batch) == _normalised(ref) and stats == ref_stats


@pytest.mark.slow
def test_a_failing_shard_is_retried_then_named(ray_cluster, world, tmp_path):
    broken = [dict(r) for r in world]
    broken[25]["scene"] = {**broken[25]["scene"], "objects": None}  # shard 2 cannot re-render this scene
    p = _world_params()
    cp = _world_params(engine="ray", ray={"workers": 2, "max_retries": 1}).concreteplant
    with pytest.raises(RuntimeError) as err:
        run_concreteplant(broken, "hc", cp, p.world, tmp_path / "cp" / "hc", seed=2)
    msg = str(err.value)
    reason = "ValueError: scene dict must have an 'objects' list, got dict: {'objects': None}"
    assert f"1 shard(s) still missing after 2 pass(es): hc shard 2 ({reason})" in msg
    assert f"failed attempts by reason: {{{reason!r}: 2}}" in msg
    work = tmp_path / "concreteplant-shards" / "hc"
    (fp,) = list(work.iterdir())
    assert sorted(f.name for f in fp.glob("shard-*.stats.json")) == [
        "shard-00000.stats.json", "shard-00001.stats.json", "shard-00003.stats.json"]


@pytest.mark.slow
def test_one_pipeline_for_every_dataset_then_merge_only(ray_cluster, world, tmp_path):
    """The stage's path: pregenerate makes every dataset's shards in one Ray Data pipeline (relative work folders,
    as DVC gives them), and run_concreteplant then only merges: the same ConcreteBatches as the local engine."""
    import os

    from concrete_jungle.concreteplant.pipeline import pregenerate

    p = _world_params()
    refs = {d: run_concreteplant(world, d, p.concreteplant, p.world, tmp_path / "local" / "cp" / d, seed=2)
            for d in ("hc", "lc", "wo")}
    cp = _world_params(engine="ray", ray={"workers": 2}).concreteplant
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        outs = {d: Path("ray") / "cp" / d for d in ("hc", "lc", "wo")}
        summary = pregenerate(world, outs, cp, p.world, seed=2)
        assert summary["passes"] == 1 and summary["failed_attempts"] == {}
        local = _world_params().concreteplant  # merging needs no engine: every shard is there
        for d, out in outs.items():
            batch, stats = run_concreteplant(world, d, local, p.world, out, seed=2)
            assert all(not Path(r["negative_image"]).is_absolute() for r in batch if r["negative_image"])
            ref = [dict(r, negative_image=r["negative_image"] and Path(r["negative_image"]).name) for r in refs[d][0]]
            assert [dict(r, negative_image=r["negative_image"] and Path(r["negative_image"]).name)
                    for r in batch] == ref
            assert stats == refs[d][1]
        assert pregenerate(world, outs, cp, p.world, seed=2) is None  # nothing missing: Ray is not even asked
    finally:
        os.chdir(cwd)
