"""Learning curves on held-out pairs (concrete_jungle.learning_curve): values equal to scoring the
pairs by hand, dvclive TSV layout, and training that is bit-identical with and without the curve."""

import math

import pytest
import torch
from PIL import Image

from concrete_jungle.evaluation.heldout import heldout_verdicts
from concrete_jungle.learning_curve import HeldoutCurve, curve_groups, read_curves
from concrete_jungle.losses import CementLoss, MarginConfig
from concrete_jungle.models.build import build_model
from concrete_jungle.models.checkpoints import save_checkpoint
from concrete_jungle.models.encoding import encode_images, encode_texts
from concrete_jungle.params import LoopParams, ModelSpec
from concrete_jungle.training import ConcreteBatchDataset, train_contrastive


def _pairs(tmp_path, n=6):
    recs = []
    for i in range(n):
        for kind, colour in (("a", (200, 40 * i, 0)), ("n", (0, 40 * i, 200))):
            Image.new("RGB", (64, 64), colour).save(tmp_path / f"{kind}{i}.png")
        recs.append({"anchor_id": str(i), "image": str(tmp_path / f"a{i}.png"),
                     "caption": f"a red square number {i}", "negative_image": str(tmp_path / f"n{i}.png"),
                     "negative_caption": f"a blue square number {i}", "c_i": 4.0,
                     "type": ("attribute", "relation")[i % 2]})
    return recs


def _spec():
    return ModelSpec(kind="world", name="cj-world-vit", context_length=32)


def test_curve_values_equal_the_held_out_verdicts_and_layout(tmp_path):
    pairs = _pairs(tmp_path)
    bundle = build_model(_spec(), seed=0)
    curve = HeldoutCurve(bundle, {"hc": pairs}, tmp_path / "live", every=2)
    got = curve.evaluate()["hc"]
    v = encode_images(bundle, [Image.open(p["image"]) for p in pairs]).numpy()
    vn = encode_images(bundle, [Image.open(p["negative_image"]) for p in pairs]).numpy()
    t = encode_texts(bundle, [p["caption"] for p in pairs]).numpy()
    tn = encode_texts(bundle, [p["negative_caption"] for p in pairs]).numpy()
    want = heldout_verdicts(v, t, tn, vn)
    assert got["all_i2t"] == pytest.approx(want["i2t"].mean()) and got["all_t2i"] == pytest.approx(want["t2i"].mean())
    assert got["relation_i2t"] == pytest.approx(want["i2t"][1::2].mean())
    assert sorted(got) == ["all_i2t", "all_t2i", "attribute_i2t", "attribute_t2i", "relation_i2t", "relation_t2i"]
    assert curve_groups(pairs) == ["all", "attribute", "relation"]
    curve.start()
    for step in (1, 2, 3):
        curve(step)
    curve.finish(3)
    curves = read_curves(tmp_path / "live")
    assert [s for s, _ in curves["hc"]["all_i2t"]] == [0, 2, 3]  # step 0, every 2, the last step
    assert curves["hc"]["all_i2t"][0][1] == pytest.approx(want["i2t"].mean())
    head = (tmp_path / "live" / "plots" / "metrics" / "heldout" / "hc" / "all_i2t.tsv").read_text().splitlines()[0]
    assert head == "step\tall_i2t"  # dvclive's layout: dvc plots draws it against step
    with pytest.raises(ValueError, match="every must be an int >= 1"):
        HeldoutCurve(bundle, {"hc": pairs}, tmp_path, every=0)
    with pytest.raises(ValueError, match=r"held-out pair 0 of hc lacks \['type'\]"):
        HeldoutCurve(bundle, {"hc": [{**pairs[0], "type": None}]}, tmp_path, every=1)


def test_training_with_the_curve_is_bit_identical(tmp_path):
    pairs = _pairs(tmp_path)
    states, curves = [], None
    for run, with_curve in enumerate((False, True)):
        bundle = build_model(_spec(), seed=0)
        ds = ConcreteBatchDataset(pairs, bundle.preprocess_val, bundle.tokenizer)
        loop = LoopParams(epochs=2, max_steps=3, batch_size=2, lr=1e-3, log_every=1, num_threads=1)
        hook = HeldoutCurve(bundle, {"hc": pairs}, tmp_path / f"live{run}", every=1) if with_curve else None
        if hook:
            hook.start()
        train_contrastive(bundle, ds, CementLoss(MarginConfig()), loop, seed=0, live_dir=tmp_path / f"live{run}",
                          checkpoint_path=tmp_path / f"run{run}" / "c.pt", params_dump={},
                          save_checkpoint=save_checkpoint, hard_negatives=True, on_step_end=hook)
        states.append(bundle.model.state_dict())
        if hook:
            hook.finish(3)  # already logged at every=1: nothing more
            curves = read_curves(tmp_path / f"live{run}")
            assert bundle.model.training  # left in train mode, as the trainer had it
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])
    assert [s for s, _ in curves["hc"]["all_i2t"]] == [0, 1, 2, 3]  # step 0 survives dvclive's clean-up
    assert all(math.isfinite(a) and 0 <= a <= 1 for _, a in curves["hc"]["relation_t2i"])
