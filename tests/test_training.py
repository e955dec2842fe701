"""Training loop: batch layout, learning-rate schedule, dvclive logging and checkpoint round trip."""

import math

import pytest
import torch
from PIL import Image

from concrete_jungle.losses import CementLoss, MarginConfig
from concrete_jungle.models import ModelSpec, build_model, load_model, save_checkpoint
from concrete_jungle.params import LoopParams
from concrete_jungle.training import (
    ConcreteBatchDataset,
    NonFiniteLossError,
    collate_hard_negatives,
    cosine_lr,
    train_contrastive,
)


def test_cosine_lr_by_hand():
    assert cosine_lr(0, 100, 10, 1.0) == pytest.approx(0.1)
    assert cosine_lr(9, 100, 10, 1.0) == pytest.approx(1.0)
    assert cosine_lr(10, 100, 10, 1.0) == pytest.approx(1.0)
    assert cosine_lr(55, 100, 10, 1.0) == pytest.approx(0.5)
    assert cosine_lr(100, 100, 10, 1.0) == pytest.approx(0.0, abs=1e-12)


def test_collate_puts_anchors_first_then_hard_negatives():
    items = [(torch.full((1,), float(i)), torch.tensor([i]), torch.full((1,), 10.0 + i), torch.tensor([10 + i]),
              4.0 + i / 10, i != 1) for i in range(3)]
    b = collate_hard_negatives(items)
    assert b["images"][:, 0].tolist() == [0, 1, 2, 10, 11, 12]
    assert b["texts"][:, 0].tolist() == [0, 1, 2, 10, 11, 12]
    assert b["concreteness"].tolist() == pytest.approx([4.0, 4.1, 4.2])
    assert b["valid"].tolist() == [True, False, True]


def _toy_batch(tmp_path, n=8):
    recs = []
    for i in range(n):
        for kind, colour in (("a", (200, 30 * i, 0)), ("n", (0, 30 * i, 200))):
            Image.new("RGB", (64, 64), colour).save(tmp_path / f"{kind}{i}.png")
        recs.append({"image": str(tmp_path / f"a{i}.png"), "caption": f"a red square number {i}",
                     "negative_image": str(tmp_path / f"n{i}.png"),
                     "negative_caption": f"a blue square number {i}" if i else "a red square number 0",
                     "c_i": 3.5 + i / 4})
    return recs


def test_train_logs_gradient_ratio_and_saves_loadable_checkpoint(tmp_path):
    bundle = build_model(ModelSpec(kind="world", name="cj-world-vit", context_length=32))
    ds = ConcreteBatchDataset(_toy_batch(tmp_path), bundle.preprocess_val, bundle.tokenizer)
    assert ds[0][-1] is False  # negative caption identical to the anchor's: masked, never pushed away
    loop = LoopParams(epochs=1, max_steps=2, batch_size=4, lr=1e-4, log_every=1)
    ckpt = tmp_path / "model" / "checkpoint.pt"
    summary = train_contrastive(bundle, ds, CementLoss(MarginConfig()), loop, seed=0, live_dir=tmp_path / "live",
                                checkpoint_path=ckpt, params_dump={"x": 1}, save_checkpoint=save_checkpoint,
                                hard_negatives=True)
    assert summary["steps"] == 2
    assert 0.0 < summary["gradient_ratio"] < 1.0
    assert summary["logit_scale"] == pytest.approx(math.exp(bundle.model.logit_scale.item()), rel=1e-5)
    tsv = (tmp_path / "live/plots/metrics/train/gradient_ratio.tsv").read_text().splitlines()
    assert tsv[0].split("\t")[:2] == ["step", "gradient_ratio"] and len(tsv) == 3
    assert float(tsv[-1].split("\t")[1]) == pytest.approx(summary["gradient_ratio"])
    reloaded = load_model(ckpt)
    tokens = bundle.tokenizer(["a red square"])
    bundle.model.eval()
    with torch.no_grad():
        assert torch.allclose(bundle.model.encode_text(tokens), reloaded.model.encode_text(tokens), atol=1e-6)


def test_non_finite_loss_stops_without_checkpoint(tmp_path):
    bundle = build_model(ModelSpec(kind="world", name="cj-world-vit", context_length=32))
    ds = ConcreteBatchDataset(_toy_batch(tmp_path, 4), bundle.preprocess_val, bundle.tokenizer)

    def nan_loss(*args, **kwargs):
        return {"contrastive_loss": torch.tensor(float("nan"), requires_grad=True)}

    loop = LoopParams(epochs=1, max_steps=1, batch_size=4, log_every=1)
    ckpt = tmp_path / "checkpoint.pt"
    with pytest.raises(NonFiniteLossError, match="step 0"):
        train_contrastive(bundle, ds, nan_loss, loop, seed=0, live_dir=tmp_path / "live", checkpoint_path=ckpt,
                          params_dump={}, save_checkpoint=save_checkpoint, hard_negatives=True)
    assert not ckpt.exists()


def test_same_seed_gives_identical_weights(tmp_path):
    states = []
    for run in range(2):
        bundle = build_model(ModelSpec(kind="world", name="cj-world-vit", context_length=32), seed=0)
        ds = ConcreteBatchDataset(_toy_batch(tmp_path, 4), bundle.preprocess_val, bundle.tokenizer)
        loop = LoopParams(epochs=1, max_steps=2, batch_size=2, log_every=1)
        train_contrastive(bundle, ds, CementLoss(MarginConfig()), loop, seed=0, live_dir=tmp_path / f"live{run}",
                          checkpoint_path=tmp_path / f"c{run}.pt", params_dump={}, save_checkpoint=save_checkpoint,
                          hard_negatives=True)
        states.append(bundle.model.state_dict())
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])
