"""Resumable training (paper Sec. 3 runs): a run interrupted after its checkpoint at step 4 (in-process, or by SIGKILL
in a subprocess) and started again ends with the weights and dvclive curves of an uninterrupted run, bit for bit."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from concrete_jungle.losses import CementLoss, MarginConfig
from concrete_jungle.models.build import build_model
from concrete_jungle.models.checkpoints import read_checkpoint, save_checkpoint
from concrete_jungle.params import LoopParams, ModelSpec
from concrete_jungle.training import (
    capture_rng_state,
    read_training_state,
    restore_rng_state,
    save_training_state,
    train_contrastive,
    ConcreteBatchDataset,
)

# 6 records, N = 2 -> 3 steps an epoch, 2 epochs = 6 steps; checkpoints at steps 2 and 4 (and 6, the end).
LOOP = dict(epochs=2, batch_size=2, lr=1e-3, warmup_frac=0.2, log_every=1, num_threads=1, checkpoint_every=2)
NEW_FIELDS = ("checkpoint_every", "distributed_loss")


def make_loop(**kw) -> LoopParams:
    """LoopParams with the trainer's new fields, whether or not params.py declares them yet."""
    extra = {k: kw.pop(k) for k in NEW_FIELDS if k in kw and k not in LoopParams.model_fields}
    return LoopParams(**kw).model_copy(update=extra)


def make_records(folder: Path, n: int = 6) -> list[dict]:
    folder.mkdir(parents=True, exist_ok=True)
    recs = []
    for i in range(n):
        for kind, colour in (("a", (200, 40 * i, 0)), ("n", (0, 40 * i, 200))):
            im = Image.new("RGB", (64, 64), (255, 255, 255))  # a square on white: random crops move it
            im.paste(colour, (8 + 4 * i, 16, 40 + 4 * i, 48))
            im.save(folder / f"{kind}{i}.png")
        recs.append({"image": str(folder / f"a{i}.png"), "caption": f"a red square number {i}",
                     "negative_image": str(folder / f"n{i}.png"), "negative_caption": f"a blue square number {i}",
                     "c_i": 3.6 + i / 10})
    return recs


class Interrupt(Exception):
    pass


def run(out: Path, records: list[dict], *, stop_after: int | None = None, params=None, loop=None,
        **kwargs) -> dict:
    """One training run of the world model (seed 0) with random crops (RNG in use) into ``out``."""
    bundle = build_model(ModelSpec(kind="world", name="cj-world-vit", context_length=32), seed=0)
    ds = ConcreteBatchDataset(records, bundle.preprocess_train, bundle.tokenizer, cache=False)
    steps_seen = []

    def hook(step):
        steps_seen.append(step)
        if step == stop_after:
            raise Interrupt(step)

    summary = train_contrastive(bundle, ds, CementLoss(MarginConfig()), loop or make_loop(**LOOP), seed=0,
                                live_dir=out / "live", checkpoint_path=out / "model" / "checkpoint.pt",
                                params_dump=params or {"run": "resume"}, save_checkpoint=save_checkpoint,
                                hard_negatives=True, on_step_end=hook, **kwargs)
    summary["steps_seen"] = steps_seen
    return summary


def tsv_texts(live: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((live / "plots" / "metrics" / "train").glob("*.tsv"))}


def assert_same_weights(a: Path, b: Path) -> None:
    sa, sb = read_checkpoint(a)["state_dict"], read_checkpoint(b)["state_dict"]
    assert sa.keys() == sb.keys()
    different = [k for k in sa if not torch.equal(sa[k], sb[k])]
    assert not different, f"{len(different)} tensors differ, e.g. {different[:3]}"


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("reference")
    records = make_records(root / "images")
    summary = run(root / "out", records)
    return root, records, summary


def test_rng_state_round_trip_through_a_weights_only_file(tmp_path):
    torch.manual_seed(1), np.random.seed(2), random.seed(3)
    state = capture_rng_state()
    first = (torch.rand(3), np.random.rand(3), [random.random() for _ in range(3)])
    save_training_state(tmp_path / "rng.pt", {"rng": state})
    loaded = torch.load(tmp_path / "rng.pt", weights_only=True)["rng"]
    restore_rng_state(loaded)
    again = (torch.rand(3), np.random.rand(3), [random.random() for _ in range(3)])
    assert torch.equal(first[0], again[0]) and np.array_equal(first[1], again[1]) and first[2] == again[2]


def test_interrupted_run_resumes_to_identical_weights_and_curves(reference, tmp_path):
    ref_root, records, ref_summary = reference
    assert ref_summary["steps"] == 6 and ref_summary["resumed_from_step"] == 0
    with pytest.raises(Interrupt):
        run(tmp_path, records, stop_after=5)  # step 5 is done but not checkpointed
    state = read_training_state(tmp_path / "model" / "state.pt")
    assert (state["step"], state["epoch"], state["batch_in_epoch"], state["complete"]) == (4, 1, 1, False)
    assert len(state["log_rows"]) == 4 and state["params"] == {"run": "resume"}
    assert read_checkpoint(tmp_path / "model" / "checkpoint.pt")["step"] == 4
    assert len(tsv_texts(tmp_path / "live")["loss.tsv"].splitlines()) == 1 + 5  # header + steps 1..5 logged

    resumed = run(tmp_path, records)
    assert resumed["resumed_from_step"] == 4 and resumed["steps"] == 6 and resumed["steps_seen"] == [5, 6]
    assert_same_weights(tmp_path / "model" / "checkpoint.pt", ref_root / "out" / "model" / "checkpoint.pt")
    assert tsv_texts(tmp_path / "live") == tsv_texts(ref_root / "out" / "live")  # step 5 logged once
    assert resumed["loss"] == ref_summary["loss"] and resumed["gradient_ratio"] == ref_summary["gradient_ratio"]
    final = read_training_state(tmp_path / "model" / "state.pt")
    assert (final["step"], final["complete"]) == (6, True)


def test_resume_without_restoring_the_rng_diverges(reference, tmp_path, monkeypatch):
    """The random crops draw from the global RNG: restoring it is what makes the resumed run identical."""
    ref_root, records, _ = reference
    with pytest.raises(Interrupt):
        run(tmp_path, records, stop_after=5)
    monkeypatch.setattr("concrete_jungle.training.restore_rng_state", lambda *a, **k: None)
    run(tmp_path, records)
    with pytest.raises(AssertionError, match="tensors differ"):
        assert_same_weights(tmp_path / "model" / "checkpoint.pt", ref_root / "out" / "model" / "checkpoint.pt")


def test_completed_state_resumes_to_the_end_without_steps(reference, tmp_path):
    ref_root, records, _ = reference
    run(tmp_path, records)
    again = run(tmp_path, records)
    assert again["resumed_from_step"] == 6 and again["steps_seen"] == []
    assert_same_weights(tmp_path / "model" / "checkpoint.pt", ref_root / "out" / "model" / "checkpoint.pt")
    assert tsv_texts(tmp_path / "live") == tsv_texts(ref_root / "out" / "live")


def test_state_of_other_params_or_inputs_is_not_resumed(reference, tmp_path, caplog):
    ref_root, records, _ = reference
    loop = make_loop(**{**LOOP, "epochs": 1})
    (tmp_path / "model").mkdir()
    shutil.copy(ref_root / "out" / "model" / "state.pt", tmp_path / "model" / "state.pt")  # params {"run": "resume"}
    with caplog.at_level(logging.WARNING, logger="concrete_jungle.training"):
        fresh = run(tmp_path, records, loop=loop, params={"run": "other"})
    assert fresh["resumed_from_step"] == 0 and fresh["steps_seen"] == [1, 2, 3]
    assert "its params differ (top-level keys ['run'])" in caplog.text
    caplog.clear()
    changed = [dict(r, caption=r["caption"] + " again") for r in records]
    with caplog.at_level(logging.WARNING, logger="concrete_jungle.training"):
        fresh = run(tmp_path, changed, loop=loop, params={"run": "other"})
    assert fresh["resumed_from_step"] == 0 and "its inputs differ (dataset)" in caplog.text


def test_unreadable_state_is_an_error_naming_the_file(reference, tmp_path):
    _, records, _ = reference
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "state.pt").write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match=r"state\.pt' is not a readable weights-only torch file"):
        run(tmp_path, records)


def test_keep_state_false_removes_it_after_the_final_checkpoint(reference, tmp_path):
    _, records, _ = reference
    run(tmp_path, records, loop=make_loop(**{**LOOP, "epochs": 1}), keep_state=False,
        state_path=tmp_path / "elsewhere" / "state.pt")
    assert not (tmp_path / "elsewhere" / "state.pt").exists()
    assert read_checkpoint(tmp_path / "model" / "checkpoint.pt")["complete"] is True


def test_a_second_run_on_a_locked_resume_folder_fails_before_training(tmp_path):
    records = make_records(tmp_path / "images", n=2)  # one step an epoch
    lock = tmp_path / "resume" / ".lock"
    lock.parent.mkdir()
    with open(lock, "w") as held:  # another run of the stage holds the folder
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(RuntimeError, match=f"^another run holds {re.escape(str(lock))}: "):
            run(tmp_path, records, state_path=tmp_path / "resume" / "state.pt")
    assert not (tmp_path / "live").exists() and not (tmp_path / "model").exists()  # nothing was trained or logged
    done = run(tmp_path, records, state_path=tmp_path / "resume" / "state.pt")  # released: the run proceeds
    assert done["steps"] == 2 and done["steps_seen"] == [1, 2]
    with open(lock) as fh:  # and the run let go of the lock when it ended
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)


def _train_stage():
    """(repository root, stages/train.py as a module, the world's params)."""
    import importlib.util

    from concrete_jungle.params import load_params

    repo = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("_train_stage", repo / "stages" / "train.py")
    stage = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stage)
    return repo, stage, load_params(repo / "params.yaml")


def test_a_second_run_of_a_training_family_fails_at_once_naming_the_holder(tmp_path, monkeypatch):
    # issue 22: the lock was per member, so a second direct run of a family started after the first had finished a
    # member trained the family again, interleaved, and deleted the first run's summary file at its start
    repo, stage, params = _train_stage()
    monkeypatch.chdir(tmp_path)
    summary = params.metrics_dir / "train" / "infonce.json"
    summary.parent.mkdir(parents=True)
    summary.write_text("{}")
    lock = params.models_dir / "resume" / "infonce.family" / ".lock"
    lock.parent.mkdir(parents=True)
    with open(lock, "w") as held:  # the first run of the family holds it
        held.write("4242")
        held.flush()
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(RuntimeError, match=rf"^another run holds {re.escape(str(lock))} \(pid 4242\): "):
            stage.train_family(params, "infonce")
        monkeypatch.setenv("RANK", "1")  # a torchrun rank other than 0 takes no lock (rank 0 holds it)
        with pytest.raises(FileNotFoundError, match="base"):
            stage.train_family(params, "infonce")
        monkeypatch.delenv("RANK")
    assert summary.read_text() == "{}"  # nothing of the first run was touched
    # released: the next run goes past the lock (and fails here on the absent base model, naming it)
    with pytest.raises(FileNotFoundError, match="base"):
        stage.train_family(params, "infonce")


def test_a_family_failing_part_way_leaves_all_its_earlier_outputs(tmp_path, monkeypatch):
    # issue 22 item 1: a training family that failed part-way left a new checkpoint beside older ones of the family
    # and its summary deleted; through run_stage (as DVC runs it) the earlier outputs all come back
    from concrete_jungle.cli import run_stage
    from concrete_jungle.grid import family_members, model_dir, train_metrics_dir
    from concrete_jungle.models import checkpoints

    repo, stage, params = _train_stage()
    monkeypatch.chdir(tmp_path)
    members = family_members(params, "infonce")
    old = {params.metrics_dir / "train" / "infonce.json": "{}"}
    old.update({model_dir(params, m) / "checkpoint.pt": f"old {m}" for m in members})
    old.update({train_metrics_dir(params, m) / "plots" / "loss.tsv": f"old curve {m}" for m in members})
    for path, text in old.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def first_member_then_fail(path):  # the first member writes its new outputs, then the family fails
        for p in (model_dir(params, members[0]) / "checkpoint.pt", train_metrics_dir(params, members[0]) / "x.tsv"):
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text("new")
        raise RuntimeError("killed part-way")

    monkeypatch.setattr(checkpoints, "load_model", first_member_then_fail)
    with pytest.raises(RuntimeError, match="killed part-way"):
        run_stage("train", stage.train_family, argv=["--params", str(repo / "params.yaml"), "--family", "infonce"],
                  family={})
    after = {p.relative_to(tmp_path): p.read_text() for p in tmp_path.rglob("*") if p.is_file() and ".lock" not in p.name}
    assert after == {p: text for p, text in old.items()} and len(old) == 7  # summary, 3 checkpoints, 3 curves


# ------------------------------------------------------------------------------------------------ SIGKILL
SCRIPT = textwrap.dedent("""
    import json, os, signal, sys
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from test_resume import LOOP, make_loop
    from concrete_jungle.losses import CementLoss, MarginConfig
    from concrete_jungle.models.build import build_model
    from concrete_jungle.models.checkpoints import save_checkpoint
    from concrete_jungle.params import ModelSpec
    from concrete_jungle.training import ConcreteBatchDataset, train_contrastive

    out, kill_after = Path(sys.argv[1]), int(sys.argv[2])
    records = json.loads(Path(sys.argv[3]).read_text())
    bundle = build_model(ModelSpec(kind="world", name="cj-world-vit", context_length=32), seed=0)
    ds = ConcreteBatchDataset(records, bundle.preprocess_train, bundle.tokenizer, cache=False)

    def hook(step):
        if step == kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    summary = train_contrastive(bundle, ds, CementLoss(MarginConfig()), make_loop(**LOOP), seed=0,
                                live_dir=out / "live", checkpoint_path=out / "model" / "checkpoint.pt",
                                params_dump={{"run": "resume"}}, save_checkpoint=save_checkpoint, hard_negatives=True,
                                on_step_end=hook)
    print(json.dumps({{"resumed_from_step": summary["resumed_from_step"], "steps": summary["steps"]}}))
""")


@pytest.mark.slow
def test_sigkilled_run_resumes_to_identical_weights(reference, tmp_path):
    ref_root, records, _ = reference
    script = tmp_path / "train_run.py"
    script.write_text(SCRIPT.format(tests=str(Path(__file__).parent)))
    (tmp_path / "records.json").write_text(json.dumps(records))
    env = {**os.environ, "TQDM_DISABLE": "1"}
    cmd = [sys.executable, str(script), str(tmp_path / "out")]
    killed = subprocess.run(cmd + ["5", str(tmp_path / "records.json")], capture_output=True, text=True, env=env,
                            timeout=600)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert read_training_state(tmp_path / "out" / "model" / "state.pt")["step"] == 4
    done = subprocess.run(cmd + ["-1", str(tmp_path / "records.json")], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"resumed_from_step": 4, "steps": 6}
    assert_same_weights(tmp_path / "out" / "model" / "checkpoint.pt", ref_root / "out" / "model" / "checkpoint.pt")
    assert tsv_texts(tmp_path / "out" / "live") == tsv_texts(ref_root / "out" / "live")


# ------------------------------------------------------------------------------------------------ loader workers
def test_worker_loaded_run_resumes_to_identical_weights(reference, tmp_path, caplog):
    """With worker processes the random crops are seeded per item from (seed, epoch, index): a run with 1 worker
    and a run with 2 workers killed after step 5 and resumed end with the same weights and curves. A state written
    by in-process loading (global-RNG crops) is not resumed by a run with workers (and vice versa)."""
    ref_root, records, _ = reference
    one = run(tmp_path / "one", records, num_workers=1)
    assert one["steps"] == 6
    with pytest.raises(Interrupt):
        run(tmp_path / "two", records, stop_after=5, num_workers=2)
    resumed = run(tmp_path / "two", records, num_workers=2)
    assert resumed["resumed_from_step"] == 4 and resumed["steps_seen"] == [5, 6]
    assert_same_weights(tmp_path / "two" / "model" / "checkpoint.pt", tmp_path / "one" / "model" / "checkpoint.pt")
    assert tsv_texts(tmp_path / "two" / "live") == tsv_texts(tmp_path / "one" / "live")
    (tmp_path / "three" / "model").mkdir(parents=True)
    shutil.copy(ref_root / "out" / "model" / "state.pt", tmp_path / "three" / "model" / "state.pt")  # 0 workers
    with caplog.at_level(logging.WARNING, logger="concrete_jungle.training"):
        fresh = run(tmp_path / "three", records, loop=make_loop(**{**LOOP, "epochs": 1}), num_workers=1)
    assert fresh["resumed_from_step"] == 0 and "its inputs differ (item_rng)" in caplog.text


# ------------------------------------------------------------------------------------ WebDataset shards (issue 21)
def _stream_run(out: Path, shard_dir: Path, *, stop_after=None, num_workers=0, shuffle_buffer=2) -> dict:
    """``run`` on the ConcreteBatch read from shards (random crops seeded per sample in workers)."""
    from concrete_jungle.shards import ConcreteBatchDecoder, ShardStream

    bundle = build_model(ModelSpec(kind="world", name="cj-world-vit", context_length=32), seed=0)
    stream = ShardStream(shard_dir, seed=0, shuffle_buffer=shuffle_buffer,  # the trainer turns on seed_items itself
                         decode=ConcreteBatchDecoder(bundle.preprocess_train, bundle.tokenizer))
    steps_seen = []

    def hook(step):
        steps_seen.append(step)
        if step == stop_after:
            raise Interrupt(step)

    summary = train_contrastive(bundle, stream, CementLoss(MarginConfig()), make_loop(**LOOP), seed=0,
                                live_dir=out / "live", checkpoint_path=out / "model" / "checkpoint.pt",
                                params_dump={"run": "stream"}, save_checkpoint=save_checkpoint, hard_negatives=True,
                                on_step_end=hook, num_workers=num_workers)
    return {**summary, "steps_seen": steps_seen}


@pytest.mark.parametrize("workers", [0, 2])
def test_a_run_on_shards_resumes_mid_epoch_to_identical_weights(reference, tmp_path, workers):
    """The trainer streams a ConcreteBatch from WebDataset shards (``train.data_format: webdataset``): 6 samples in 3
    shards, N = 2, 2 epochs of 3 steps (with 2 workers: slots of 3 samples, 1 whole batch each, so 2 steps an
    epoch); stopped after step 3 (mid-epoch, 1 step past the checkpoint) and resumed, it ends with the weights and
    curves of the uninterrupted run."""
    from concrete_jungle.shards import write_shards

    _, records, _ = reference
    cb = [{**r, "anchor_id": f"a{i}"} for i, r in enumerate(records)]
    write_shards(cb, tmp_path / "shards", "concretebatch", samples_per_shard=2)
    whole = _stream_run(tmp_path / "whole", tmp_path / "shards", num_workers=workers)
    assert whole["steps"] == (6 if workers == 0 else 4)
    with pytest.raises(Interrupt):
        _stream_run(tmp_path / "cut", tmp_path / "shards", stop_after=3, num_workers=workers)
    resumed = _stream_run(tmp_path / "cut", tmp_path / "shards", num_workers=workers)
    assert resumed["resumed_from_step"] == 2 and resumed["steps_seen"] == list(range(3, whole["steps"] + 1))
    assert_same_weights(tmp_path / "cut" / "model" / "checkpoint.pt", tmp_path / "whole" / "model" / "checkpoint.pt")
    assert tsv_texts(tmp_path / "cut" / "live") == tsv_texts(tmp_path / "whole" / "live")


def test_a_stream_state_is_not_resumed_with_other_workers_or_shuffle(reference, tmp_path, caplog):
    """A stream's order depends on its (rank, worker) slots and its shuffle buffer: a state written with 0 workers
    and buffer 2 is not resumed by a run with 2 workers, nor by one with buffer 3 (each starts afresh, logged)."""
    from concrete_jungle.shards import write_shards

    _, records, _ = reference
    write_shards([{**r, "anchor_id": f"a{i}"} for i, r in enumerate(records)], tmp_path / "shards", "concretebatch",
                 samples_per_shard=2)
    with pytest.raises(Interrupt):
        _stream_run(tmp_path / "cut", tmp_path / "shards", stop_after=3)
    saved = tmp_path / "cut" / "model" / "state.pt"
    for kwargs, why in (({"num_workers": 2}, "item_rng"), ({"shuffle_buffer": 3}, "dataset")):
        (tmp_path / "try" / "model").mkdir(parents=True, exist_ok=True)
        shutil.copy(saved, tmp_path / "try" / "model" / "state.pt")
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="concrete_jungle.training"):
            fresh = _stream_run(tmp_path / "try", tmp_path / "shards", **kwargs)
        assert fresh["resumed_from_step"] == 0 and f"its inputs differ ({why})" in caplog.text

