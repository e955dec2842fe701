"""Tests for concrete_jungle.models.trunk_cache: which towers may train over cached trunk maps, and that a step over
the maps is the step over the pixels."""

from __future__ import annotations

import copy

import pytest
import torch
from open_clip.loss import ClipLoss
from PIL import Image

from concrete_jungle.models.build import build_model, default_spec
from concrete_jungle.models.trunk_cache import (
    head_on_trunk_maps,
    training_preprocess,
    trunk_cache_blocker,
    trunk_map_transform,
)
from concrete_jungle.params import ModelSpec
from concrete_jungle.training import build_optimizer, train_step


def _scene(left, right) -> Image.Image:
    im = Image.new("RGB", (64, 64), (96, 104, 112))
    for x0, colour in ((6, left), (38, right)):
        im.paste(colour, (x0, 22, x0 + 20, 42))
    return im


IMAGES = [_scene((220, 40, 40), (45, 85, 225)), _scene((45, 85, 225), (220, 40, 40)),
          _scene((240, 210, 40), (20, 20, 20)), _scene((20, 20, 20), (240, 210, 40))]
TEXTS = ["a red square to the left of a blue square", "a blue square to the left of a red square",
         "a yellow square to the left of a black square", "a black square to the left of a yellow square"]


def _attn(**spec):
    return build_model(ModelSpec(kind="world", name="cj-world-effnet-attn", **spec), seed=0)


@pytest.fixture(scope="module")
def attn():
    return _attn(lock_image=True)


def test_only_a_wholly_locked_unaugmented_trunk_may_be_cached(attn, caplog):
    assert trunk_cache_blocker(attn.model, augment=False) is None
    assert "augment" in trunk_cache_blocker(attn.model, augment=True)
    assert "trunk and head" in trunk_cache_blocker(build_model(default_spec("world"), seed=0).model, False)
    assert "trainable" in trunk_cache_blocker(_attn(lock_image=False).model, False)
    assert "trainable" in trunk_cache_blocker(_attn(lock_image=True, lock_image_unlocked_groups=1).model, False)
    assert "BatchNorm" in trunk_cache_blocker(_attn(lock_image=True, lock_image_bn_stats=False).model, False)
    # without the datasets' cache the maps would be recomputed every step: pixels then, and a warning says so
    def said():
        return [r.getMessage() for r in caplog.records if r.name == "concrete_jungle.models.trunk_cache"]

    why = "train.num_workers 2: test"
    caplog.clear()
    with caplog.at_level("WARNING", logger="concrete_jungle.models.trunk_cache"):
        assert training_preprocess(attn, augment=False, cache=False) == (attn.preprocess_val, False)
        assert said() == []  # no reason given: nothing said
        for _ in range(2):  # once a process for a reason
            assert training_preprocess(attn, augment=False, cache=False, uncached=why) == (attn.preprocess_val, False)
        assert len(said()) == 1 and "not cached (train.num_workers 2: test)" in said()[0]
        caplog.clear()
        assert training_preprocess(attn, augment=False, cache=True, uncached="x")[1] is True
        assert training_preprocess(attn, augment=True, cache=False, uncached="y") == (attn.preprocess_train, False)
        assert said() == []  # cached, or a trunk that may not be cached: nothing to say


def test_the_head_on_cached_maps_gives_the_pixel_embedding_and_the_forward_is_restored(attn):
    visual = attn.model.visual
    maps = torch.stack([trunk_map_transform(attn.model, attn.preprocess_val)(im) for im in IMAGES])
    pixels = torch.stack([attn.preprocess_val(im) for im in IMAGES])
    assert maps.shape == (4, 1280, 2, 2) and maps.dtype == torch.float32  # EfficientNet-Lite0 at 64 px: a 2 x 2 map
    with torch.no_grad():
        expected = visual(pixels)
        with head_on_trunk_maps(attn.model):
            from_maps, from_pixels = visual(maps), visual(pixels)
    torch.testing.assert_close(from_maps, expected, atol=1e-4, rtol=1e-4)
    assert torch.equal(from_pixels, expected)  # pixels still take the whole tower (held-out curves)
    assert "forward" not in vars(visual)
    with pytest.raises(RuntimeError):  # outside the block a map is fed to the trunk's 3-channel stem
        visual(maps)


def test_a_pooling_trunk_gives_vectors_that_the_head_takes_in_place_of_pixels():
    """The real profile's LiT tower: timm EfficientNet-Lite0 with its own average pool (``num_classes=0``), so a
    trunk "map" is a pooled ``[1280]`` vector; inside the block the head takes ``[B, 1280]`` (the batch the
    real_seed1 base model crashed on before: it went to the 3-channel stem)."""
    lit = build_model(ModelSpec(kind="lit", name="cj-lit-effnetlite0-minilm", lock_image=True), seed=0)
    assert trunk_cache_blocker(lit.model, augment=False) is None
    images = [im.resize((224, 224)) for im in IMAGES[:2]]
    maps = torch.stack([trunk_map_transform(lit.model, lit.preprocess_val)(im) for im in images])
    assert maps.shape == (2, 1280)
    visual = lit.model.visual.eval()
    pixels = torch.stack([lit.preprocess_val(im) for im in images])
    with torch.no_grad():
        expected = visual(pixels)
        with head_on_trunk_maps(lit.model):
            from_maps, from_pixels = visual(maps), visual(pixels)
    torch.testing.assert_close(from_maps, expected, atol=1e-4, rtol=1e-4)
    assert torch.equal(from_pixels, expected)


def test_a_training_step_over_cached_maps_is_the_step_over_pixels(attn):
    """Two AdamW steps of the ClipLoss on the same batch: the trainable weights (attention pool, text tower, logit
    scale) agree to float tolerance whether the trunk runs in the step or its maps were cached."""
    texts = attn.tokenizer(TEXTS)
    runs = {}
    for name in ("pixels", "maps"):
        model = copy.deepcopy(attn.model).train()
        if name == "maps":
            images = torch.stack([trunk_map_transform(model, attn.preprocess_val)(im) for im in IMAGES])
        else:
            images = torch.stack([attn.preprocess_val(im) for im in IMAGES])
        opt = build_optimizer(model, 1e-3, 0.1, torch.device("cpu"))
        with head_on_trunk_maps(model):
            for step in range(2):
                out = train_step(model, {"images": images, "texts": texts}, ClipLoss(), opt, lr=1e-3, step=step,
                                 hard_negatives=False, grad_clip=1.0)
        runs[name] = (model.state_dict(), float(out["loss"]))
    (pix, loss_pix), (maps, loss_maps) = runs["pixels"], runs["maps"]
    assert loss_maps == pytest.approx(loss_pix, abs=1e-4)
    moved = [k for k in pix if not torch.equal(pix[k], attn.model.state_dict()[k])]
    assert any(k.startswith("visual.head") for k in moved) and any(k.startswith("transformer") for k in moved)
    assert not any(k.startswith("visual.trunk") for k in moved)  # locked
    for k in moved:
        torch.testing.assert_close(maps[k], pix[k], atol=1e-4, rtol=1e-3)


def test_fill_trunk_maps_batches_shares_between_members_and_equals_the_per_image_maps(attn, tmp_path):
    """A family's second member computes only the maps of its own new images; every cached item is the map that the
    one-image-at-a-time transform gives (to float rounding); a dataset without a cache is refused."""
    from concrete_jungle.datasets import AnchorDataset, ConcreteBatchDataset
    from concrete_jungle.models.trunk_cache import fill_trunk_maps

    paths = []
    for i, im in enumerate(IMAGES):
        paths.append(str(tmp_path / f"{i}.png"))
        im.save(paths[-1])
    transform = trunk_map_transform(attn.model, attn.preprocess_val)
    anchors = [{"image": paths[i], "anchor": TEXTS[i], "captions": [TEXTS[i]]} for i in (0, 2)]
    batch = [{"image": paths[i], "caption": TEXTS[i], "negative_caption": TEXTS[i + 1], "c_i": 4.5,
              "negative_image": paths[i + 1]} for i in (0, 2)]
    seen = []
    hook = attn.model.visual.trunk.register_forward_hook(lambda m, args, out: seen.append(args[0].shape[0]))
    try:
        first = AnchorDataset(anchors, transform, attn.tokenizer, caption="anchor")
        maps = fill_trunk_maps(first, attn.model, attn.preprocess_val, batch_size=64)
        assert seen == [2] and sorted(maps) == [paths[0], paths[2]]
        second = ConcreteBatchDataset(batch, transform, attn.tokenizer)
        assert fill_trunk_maps(second, attn.model, attn.preprocess_val, maps, batch_size=1) is maps
        assert seen == [2, 1, 1]  # only images 1 and 3 were new, one at a time
        items = [second[0][0], second[0][2], second[1][0], second[1][2]]
        assert seen == [2, 1, 1]  # read from the cache, never through the transform
    finally:
        hook.remove()
    for path, item in zip(paths, items):
        assert item.shape == (1280, 2, 2)
        torch.testing.assert_close(item, transform(Image.open(path).convert("RGB")), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="differs from the cached"):
        second.prefill_images({paths[0]: torch.zeros(3)})
    with pytest.raises(ValueError, match="cache=False"):
        fill_trunk_maps(AnchorDataset(anchors, transform, attn.tokenizer, cache=False), attn.model,
                        attn.preprocess_val)
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        fill_trunk_maps(first, attn.model, attn.preprocess_val, batch_size=0)
