"""Tests for the hard negative image backends.

RetrievalNegatives: TF-IDF retrieval (anchor excluded, deterministic ties). SdxlTurboNegatives: SDXL-Turbo img2img
run end to end with a tiny random-init SDXL pipeline built from configs and saved like sdxl-turbo (text-to-image
class, fp16 variant files), loaded through the real ``AutoPipelineForImage2Image`` path.
"""

import hashlib
import json
import math

import numpy as np
import pytest
from PIL import Image
from pydantic import ValidationError

from concrete_jungle.concreteplant.image_negatives import (
    RetrievalNegatives,
    SdxlTurboNegatives,
    SdxlTurboParams,
    degeneracy,
    item_seed,
)

TOY = [
    {"id": "dog", "image": "img/dog.jpg", "captions": ["a dog running on the grass", "a brown dog in a park"]},
    {"id": "cat", "image": "img/cat.jpg", "captions": ["a cat sleeping on a sofa", "a grey cat on a couch"]},
    {"id": "car", "image": "img/car.jpg", "captions": ["a red car parked on the street", "a car on a city street"]},
    {"id": "bike", "image": "img/bike.jpg", "captions": ["a man riding a bicycle", "a person on a bike on the road"]},
]


def test_obvious_answers_on_toy_corpus():
    r = RetrievalNegatives(TOY)
    got = r.find(
        ["a cat running on the grass", "a dog sleeping on a sofa", "a red bicycle", "a man riding a car"],
        ["dog", "cat", "bike", "bike"],
    )
    assert got == ["img/cat.jpg", "img/dog.jpg", "img/car.jpg", "img/car.jpg"]


def test_anchor_image_is_never_returned():
    r = RetrievalNegatives(TOY)
    # the query is the dog anchor's own caption: the dog image would score 1-ish, but it is excluded
    assert r.find(["a dog running on the grass"], ["dog"]) != ["img/dog.jpg"]
    # a second record with the anchor's image path is excluded too
    r = RetrievalNegatives(TOY + [{"id": "dog2", "image": "img/dog.jpg", "captions": ["a dog"]}])
    assert r.find(["a brown dog"], ["dog"]) != ["img/dog.jpg"]


def test_hand_computed_cosine_and_tie_break():
    corpus = [
        {"id": "A", "image": "a.png", "captions": ["red car"]},
        {"id": "B", "image": "b.png", "captions": ["blue car"]},
        {"id": "C", "image": "c.png", "captions": ["green bus"]},
    ]
    r = RetrievalNegatives(corpus)
    # smooth idf over 3 documents: df=1 -> ln(4/2)+1, df=2 ("car") -> ln(4/3)+1
    rare, car = math.log(2) + 1, math.log(4 / 3) + 1
    # "blue car" vs A = {red, car, "red car"}: only "car" is shared
    expected = car**2 / (2 * rare**2 + car**2)
    paths, scores = r.find_with_scores(["blue car"], ["B"])
    assert paths == ["a.png"]
    assert scores[0] == pytest.approx(expected, abs=1e-12)
    assert scores[0] == pytest.approx(0.224325, abs=1e-6)
    # no shared n-gram with any eligible image -> score 0, first eligible image in corpus order
    paths, scores = r.find_with_scores(["zebra", "zebra"], ["A", "B"])
    assert paths == ["b.png", "a.png"] and scores.tolist() == [0.0, 0.0]
    # an exact tie between A and B (both share one unigram with the query) goes to A, the first
    paths, scores = r.find_with_scores(["red blue"], ["C"])
    assert paths == ["a.png"]
    assert scores[0] == pytest.approx(rare * rare / (math.sqrt(2) * rare * math.sqrt(2 * rare**2 + car**2)))


def test_errors():
    with pytest.raises(ValueError, match="at least 2 images"):
        RetrievalNegatives(TOY[:1])
    with pytest.raises(ValueError, match="duplicate record ids"):
        RetrievalNegatives([TOY[0], TOY[0]])
    with pytest.raises(ValueError, match="non-empty list of caption strings"):
        RetrievalNegatives([TOY[0], {"id": "x", "image": "x.jpg", "captions": []}])
    r = RetrievalNegatives(TOY)
    with pytest.raises(ValueError, match="differ in length"):
        r.find(["a cat"], ["dog", "cat"])
    with pytest.raises(KeyError, match="'horse'"):
        r.find(["a cat"], ["horse"])
    with pytest.raises(TypeError, match="not a single string"):
        r.find("a cat", ["dog"])


# ---------------------------------------------------------------------------------------------------------------
# SDXL-Turbo img2img

COCO_IMAGES = ["000000000139.jpg", "000000000285.jpg", "000000000632.jpg"]  # 640x426, 586x640, 640x483
SIZE = 32  # edit side in the tests; the tiny VAE downsamples by 2, so 32 px -> 16 x 16 latents


def test_params_defaults_and_validation():
    p = SdxlTurboParams()
    assert (p.model, p.variant, p.strength, p.num_inference_steps, p.guidance_scale, p.size) == (
        "stabilityai/sdxl-turbo", "fp16", 0.75, 4, 0.0, 512)
    assert p.denoising_steps == 3  # int(4 * 0.75)
    assert SdxlTurboParams(strength=0.5, num_inference_steps=2).denoising_steps == 1  # the model card's setting
    assert SdxlTurboParams(strength=1.0, num_inference_steps=1).denoising_steps == 1
    # int(3 * 0.3) = int(0.9) = 0 steps: refused before any model loads, naming both keys
    with pytest.raises(ValidationError) as err:
        SdxlTurboParams(strength=0.3, num_inference_steps=3)
    msg = str(err.value)
    assert "concreteplant.image_edit.strength (0.3)" in msg
    assert "concreteplant.image_edit.num_inference_steps (3)" in msg
    assert "int(0.9) = 0 denoising steps" in msg
    with pytest.raises(ValidationError, match="denoising steps"):
        SdxlTurboParams(strength=0.99, num_inference_steps=1)
    with pytest.raises(ValidationError, match="concreteplant.image_edit.size must be a multiple of 8"):
        SdxlTurboParams(size=500)
    for bad in ({"strength": 0.0}, {"strength": 1.01}, {"strength": float("nan")}, {"num_inference_steps": 0},
                {"guidance_scale": -1.0}, {"batch_size": 0}, {"device": "gpu"}, {"dtype": "float64"},
                {"seed": -1}, {"variant": ""}, {"model": ""}, {"steps": 4}):
        with pytest.raises(ValidationError):
            SdxlTurboParams(**bad)
    assert SdxlTurboParams(device="cuda:1").device == "cuda:1"
    assert SdxlTurboParams(variant=None).variant is None
    import torch

    assert SdxlTurboParams().resolve_dtype("cuda") is torch.float16
    assert SdxlTurboParams().resolve_dtype("cpu") is torch.float32
    assert SdxlTurboParams(dtype="bfloat16").resolve_dtype("cuda") is torch.bfloat16
    assert SdxlTurboParams(device="cpu").resolve_device() == "cpu"
    assert SdxlTurboParams().resolve_device() == ("cuda" if torch.cuda.is_available() else "cpu")


def test_item_seed_values():
    # first 8 bytes (little endian) of SHA-256("0:000000000139:0"), masked to 63 bits
    assert item_seed(0, "000000000139", 0) == 7155409991620457617
    assert item_seed(0, "000000000139", 1) == 9091812075126191281
    assert item_seed(7, "a") == 1809978916929504342
    raw = int.from_bytes(hashlib.sha256(b"7:a:0").digest()[:8], "little")
    assert item_seed(7, "a") == raw & (2**63 - 1)


def test_degeneracy_kinds():
    flat = np.ones((4, 4, 3), dtype=np.float32)
    assert degeneracy(flat * 0.0) == "black"
    assert degeneracy(flat * (4 / 255)) == "black"  # 8-bit value 4 = BLACK_MAX
    assert degeneracy(flat * (5 / 255)) == "constant"  # 8-bit value 5: flat but not black
    assert degeneracy(flat * 0.5) == "constant"
    img = flat * 0.5
    img[0, 0, 0] = np.nan
    assert degeneracy(img) == "nan"
    img[0, 0, 0] = np.inf
    assert degeneracy(img) == "nan"
    two_levels = flat * (128 / 255)
    two_levels[1, 2, 0] = 130 / 255  # spans 2 levels -> still constant
    assert degeneracy(two_levels) == "constant"
    two_levels[1, 2, 0] = 131 / 255  # spans 3 levels -> an image
    assert degeneracy(two_levels) is None
    ramp = np.linspace(0, 1, 48, dtype=np.float32).reshape(4, 4, 3)
    assert degeneracy(ramp) is None
    with pytest.raises(ValueError, match=r"\[H, W, C\]"):
        degeneracy(np.zeros((4, 4)))


def _write_tiny_clip_tokenizer_files(folder):
    """A byte-level BPE vocabulary over printable ASCII (each char alone and word-final), plus two merges."""
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for code in range(33, 127):
        for tok in (chr(code), chr(code) + "</w>"):
            vocab.setdefault(tok, len(vocab))
    vocab["re"] = len(vocab)
    vocab["red</w>"] = len(vocab)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\nr e\nre d</w>\n")
    return vocab


@pytest.fixture(scope="module")
def _one_torch_thread():
    """The tiny pipeline is fastest on one thread; two OpenMP threads on a loaded 2-core machine ran 100x slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny_sdxl_dir(tmp_path_factory):
    """A tiny random-init SDXL text-to-image pipeline saved as sdxl-turbo is published (StableDiffusionXLPipeline
    in model_index.json, fp16 weights in ``*.fp16.safetensors``, Euler ancestral scheduler, trailing spacing)."""
    import torch
    from diffusers import (AutoencoderKL, EulerAncestralDiscreteScheduler, StableDiffusionXLPipeline,
                           UNet2DConditionModel)
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

    root = tmp_path_factory.mktemp("tiny_sdxl")
    vocab = _write_tiny_clip_tokenizer_files(root / "tok_src")
    tokenizer = CLIPTokenizer.from_pretrained(root / "tok_src", model_max_length=77)
    assert tokenizer("red").input_ids == [0, vocab["red</w>"], 1]  # the merges file is used

    text_cfg = CLIPTextConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                              num_attention_heads=4, projection_dim=32, max_position_embeddings=77,
                              hidden_act="gelu", bos_token_id=0, eos_token_id=1, pad_token_id=1)
    torch.manual_seed(0)
    text_encoder = CLIPTextModel(text_cfg)
    text_encoder_2 = CLIPTextModelWithProjection(text_cfg)
    # SDXL conditions the UNet on pooled text (projection_dim 32) + 6 size/crop ids x addition_time_embed_dim 8
    unet = UNet2DConditionModel(
        sample_size=SIZE // 2, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(32, 64),
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        attention_head_dim=(2, 4), transformer_layers_per_block=(1, 1), use_linear_projection=True,
        cross_attention_dim=32 + 32, addition_embed_type="text_time", addition_time_embed_dim=8,
        projection_class_embeddings_input_dim=6 * 8 + 32,
    )
    vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(32, 64),
                        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
                        sample_size=SIZE)
    scheduler = EulerAncestralDiscreteScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                                                steps_offset=1, timestep_spacing="trailing")
    pipe = StableDiffusionXLPipeline(vae=vae, text_encoder=text_encoder, text_encoder_2=text_encoder_2,
                                     tokenizer=tokenizer, tokenizer_2=tokenizer, unet=unet, scheduler=scheduler)
    pipe.to(torch.float16).save_pretrained(root / "pipe", variant="fp16")
    return root / "pipe"


@pytest.fixture(scope="module")
def loaded(tiny_sdxl_dir, tmp_path_factory, _one_torch_thread):
    """The tiny pipeline loaded lazily through SdxlTurboNegatives' own from_pretrained path (CPU; dtype auto =
    float32 there), so every test sees the same numerics on a machine with or without a GPU."""
    cfg = SdxlTurboParams(model=str(tiny_sdxl_dir), variant="fp16", size=SIZE, device="cpu", batch_size=2)
    neg = SdxlTurboNegatives(cfg, tmp_path_factory.mktemp("loaded_out"))
    return neg, neg.pipeline


def _coco(shared_data):
    root = shared_data / "coco" / "val2017"
    paths = [root / name for name in COCO_IMAGES]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        pytest.skip(f"COCO val2017 images absent: {missing}")
    return paths


def _pixels(path):
    with Image.open(path) as im:
        assert im.mode == "RGB" and im.size == (SIZE, SIZE)
        return np.asarray(im).astype(np.int16)


def test_auto_pipeline_maps_sdxl_to_img2img(tiny_sdxl_dir, loaded):
    import torch
    from diffusers import EulerAncestralDiscreteScheduler, StableDiffusionXLImg2ImgPipeline

    index = json.loads((tiny_sdxl_dir / "model_index.json").read_text())
    assert index["_class_name"] == "StableDiffusionXLPipeline"  # saved as text-to-image, like sdxl-turbo
    assert (tiny_sdxl_dir / "unet" / "diffusion_pytorch_model.fp16.safetensors").is_file()
    _, pipe = loaded
    assert type(pipe) is StableDiffusionXLImg2ImgPipeline
    assert isinstance(pipe.scheduler, EulerAncestralDiscreteScheduler)
    assert pipe.scheduler.config.timestep_spacing == "trailing"
    assert pipe.unet.dtype == torch.float32 and pipe.device.type == "cpu"  # dtype auto on CPU: fp16 files cast up


def test_end_to_end_on_coco(shared_data, loaded, tmp_path):
    paths = _coco(shared_data)
    corrupt = tmp_path / "corrupt.jpg"
    corrupt.write_bytes(b"\xff\xd8\xff\xe0 definitely not a JPEG")
    truncated = tmp_path / "truncated.jpg"
    truncated.write_bytes(paths[0].read_bytes()[:3000])
    neg, pipe = loaded
    neg = SdxlTurboNegatives(neg.cfg, tmp_path / "out", pipeline=pipe)
    items = [("a139", paths[0], "a red dog on a sofa"), ("missing", tmp_path / "nope.jpg", "a cat"),
             ("a285", paths[1], "two bears in the snow"), ("corrupt", corrupt, "a cat"),
             ("truncated", truncated, "a cat"), ("a632", paths[2], "a bed with blue sheets")]
    res = neg.edit(items)
    out = tmp_path / "out"
    assert res == [(str(out / "a139.png"), None), (None, "unreadable"), (str(out / "a285.png"), None),
                   (None, "unreadable"), (None, "unreadable"), (str(out / "a632.png"), None)]
    assert neg.counts == {"edited": 3, "unreadable": 3, "retried": 0}
    assert sorted(p.name for p in out.iterdir()) == ["a139.png", "a285.png", "a632.png"]  # no padding, no tmp
    from PIL import ImageOps

    with Image.open(paths[0]) as im:
        anchor = np.asarray(ImageOps.fit(im.convert("RGB"), (SIZE, SIZE), Image.Resampling.BICUBIC)).astype(np.int16)
    edit = _pixels(out / "a139.png")
    assert np.abs(edit - anchor).mean() > 10  # the edit changed the anchor (random weights: a lot)
    with Image.open(paths[0]) as im:
        assert im.size == (640, 426)  # the anchor on disk is untouched


def test_determinism_and_batching(shared_data, loaded, tmp_path):
    paths = _coco(shared_data)
    _, pipe = loaded
    base = SdxlTurboParams(model="unused", size=SIZE, batch_size=2, seed=5)
    items = [("a139", paths[0], "a red dog"), ("a285", paths[1], "a green bear")]
    runs = {}
    for name, cfg in {"b2": base, "b2_again": base, "b1": base.model_copy(update={"batch_size": 1}),
                      "seed6": base.model_copy(update={"seed": 6})}.items():
        SdxlTurboNegatives(cfg, tmp_path / name, pipeline=pipe).edit(items)
        runs[name] = [_pixels(tmp_path / name / f"{aid}.png") for aid, _, _ in items]
    for a, b in zip(runs["b2"], runs["b2_again"]):
        assert np.array_equal(a, b)  # same seed, same batching: identical pixels
    for a, b in zip(runs["b2"], runs["b1"]):
        # one generator per anchor: batching changes only float summation order (~1e-6), i.e. at most one
        # 8-bit level on a pixel whose value sits on a rounding boundary
        assert np.abs(a - b).max() <= 1 and np.mean(a != b) < 1e-3
    for a, b in zip(runs["b2"], runs["seed6"]):
        assert np.abs(a - b).mean() > 5  # another seed, other noise


class _Sabotage:
    """Wraps the tiny pipeline: outputs for prompts starting with BLACK are always all-black, those starting with
    NAN are NaN on their first call only. Records (prompt, generator seed) of every image it produces."""

    def __init__(self, pipe):
        self.pipe, self.calls = pipe, []

    def __call__(self, **kw):
        out = self.pipe(**kw)
        for j, (prompt, gen) in enumerate(zip(kw["prompt"], kw["generator"])):
            first = all(p != prompt for p, _ in self.calls)
            self.calls.append((prompt, gen.initial_seed()))
            if prompt.startswith("BLACK"):
                out.images[j] = 0.0
            elif prompt.startswith("NAN") and first:
                out.images[j] = np.nan
        return out


def test_degenerate_output_retried_once_then_counted(shared_data, loaded, tmp_path):
    paths = _coco(shared_data)
    _, pipe = loaded
    fake = _Sabotage(pipe)
    neg = SdxlTurboNegatives(SdxlTurboParams(model="unused", size=SIZE, batch_size=3), tmp_path, pipeline=fake)
    res = neg.edit([("black", paths[0], "BLACK cat"), ("nan", paths[1], "NAN dog"), ("ok", paths[2], "a bed")])
    assert res == [(None, "degenerate"), (str(tmp_path / "nan.png"), None), (str(tmp_path / "ok.png"), None)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nan.png", "ok.png"]
    assert neg.counts == {"edited": 2, "retried": 2, "degenerate": 1, "degenerate_black": 2, "degenerate_nan": 1}
    # one batch of 3, then one retry batch of the 2 degenerate anchors with their attempt-1 seeds; never a third try
    assert fake.calls == [("BLACK cat", item_seed(0, "black", 0)), ("NAN dog", item_seed(0, "nan", 0)),
                          ("a bed", item_seed(0, "ok", 0)),
                          ("BLACK cat", item_seed(0, "black", 1)), ("NAN dog", item_seed(0, "nan", 1))]


def test_unreadable_only_never_loads_and_load_failure_names_key(tmp_path):
    neg = SdxlTurboNegatives(SdxlTurboParams(model=str(tmp_path / "no_such_model"), size=SIZE), tmp_path / "out")
    assert neg.edit([("x", tmp_path / "missing.png", "a cat")]) == [(None, "unreadable")]
    assert neg._pipeline is None  # nothing to edit: the model is not loaded
    Image.new("RGB", (40, 30), (200, 10, 10)).save(tmp_path / "red.png")
    with pytest.raises(RuntimeError, match="concreteplant.image_edit.model: diffusers cannot load"):
        neg.edit([("y", tmp_path / "red.png", "a cat")])


def test_bad_items_raise_naming_the_item(tmp_path):
    neg = SdxlTurboNegatives(SdxlTurboParams(size=SIZE), tmp_path, pipeline=object())
    with pytest.raises(ValueError, match=r"items\[1\]: anchor_id 'a' repeats items\[0\]"):
        neg.edit([("a", "x.png", "a cat"), ("a", "y.png", "a dog")])
    with pytest.raises(ValueError, match=r"items\[0\]: anchor_id 'a/b' cannot name a file"):
        neg.edit([("a/b", "x.png", "a cat")])
    with pytest.raises(ValueError, match=r"items\[0\] \(a\): negative_caption is empty"):
        neg.edit([("a", "x.png", "  ")])
    with pytest.raises(TypeError, match=r"items\[0\]: anchor_id is int"):
        neg.edit([(3, "x.png", "a cat")])
    with pytest.raises(ValueError, match=r"items\[0\] must be \(anchor_id, image_path, negative_caption\)"):
        neg.edit([("a", "x.png")])
    with pytest.raises(TypeError, match="cfg must be SdxlTurboParams"):
        SdxlTurboNegatives({"size": 32}, tmp_path)


# ---------------------------------------------------------------- scene world: a negative must be false of v
def _scene_record(scene, spec, rid="w1"):
    from concrete_jungle.corpus.scene_world.captions import realize_caption

    cap = realize_caption(spec, scene)
    return {"id": rid, "scene": scene.to_dict(), "anchor": cap.text, "anchor_slots": cap.slots}, cap


def test_scene_negative_true_of_its_anchor_is_refused(tmp_path):
    """Measured on the world at 1ac9401: 5 of 5,147 D_lc and 1 of 5,897 D_wo negatives were true of their anchor
    image (two alike objects; "right of" -> "left of"), and 7 anchors still true of their negative image."""
    from concrete_jungle.concreteplant.image_negatives import SceneNegatives
    from concrete_jungle.corpus.scene_world.captions import CaptionSpec, Mention
    from concrete_jungle.corpus.scene_world.graph import Scene, WorldObject
    from concrete_jungle.params import WorldConfig

    cfg = WorldConfig()
    neg = SceneNegatives(cfg, tmp_path)
    twins = Scene(objects=[WorldObject("cross", "red", "small", "plain", row=0, col=1),
                           WorldObject("cross", "red", "small", "plain", row=0, col=0)])
    rel = CaptionSpec((Mention(0, ("size", "colour")), Mention(1, ("size", "colour"))), (("right", 0, 1),))
    rec, cap = _scene_record(twins, rel)
    assert cap.text == "a small red cross to the right of a small red cross"
    i = cap.text.index("right")
    assert neg.render_negative(rec, i, i + 5, cap.text, cap.text.replace("right", "left")) == (
        None, "negative_true_of_anchor")
    # an object edit another object of v already matches: "a cross" -> "a square" with a square beside it
    pair = Scene(objects=[WorldObject("cross", "red", "small", "plain", row=0, col=0),
                          WorldObject("square", "blue", "large", "plain", row=0, col=1)])
    bare = CaptionSpec((Mention(0, ()),))
    rec, cap = _scene_record(pair, bare)
    assert cap.text == "a cross"
    assert neg.render_negative(rec, 2, 7, cap.text, "a square") == (None, "negative_true_of_anchor")
    # the anchor still true of v': "a cross" edited to a diamond while another cross stays
    three = Scene(objects=[WorldObject("cross", "red", "small", "plain", row=0, col=0),
                           WorldObject("cross", "blue", "large", "plain", row=0, col=1)])
    rec, cap = _scene_record(three, CaptionSpec((Mention(0, ("colour",)),)))
    assert cap.text == "a red cross"
    rec, cap = _scene_record(three, CaptionSpec((Mention(0, ()),)))
    assert neg.render_negative(rec, 2, 7, cap.text, "a diamond") == (None, "anchor_true_of_negative")
    assert neg.render_negative(rec, 2, 7, cap.text, "a cross a diamond") == (None, "negative_off_grammar")
    # a proper hard negative renders
    rec, cap = _scene_record(three, CaptionSpec((Mention(0, ("colour",)),)))
    path, reason = neg.render_negative(rec, 2, 5, cap.text, "a green cross")
    assert reason is None and path == str(tmp_path / "w1.png")
