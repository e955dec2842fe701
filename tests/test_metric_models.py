"""Table 1's metric models (paper Sec. 3.1), independent of the base model: ``dataset_stats.clip_model`` (the
CLIP-score model of I2T / T2I / CLIP-L / CLIP-V; paper: open_clip ``PE-Core-L-14-336`` / ``meta``) and
``dataset_stats.dino`` (DINOScore; paper: DINOv2).

Offline and small: the open_clip model is a tiny random-init config registered here with the PE-Core layout (timm
``vit_pe_core_tiny_patch16_384`` image tower with attention-map pooling, custom text tower), the DINOv2 model is timm's
``vit_small_patch14_dinov2`` built with ``pretrained: false``. Nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from pydantic import ValidationError

from concrete_jungle.evaluation import dataset_stats as DS
from concrete_jungle.models.build import ModelBundle, build_model
from concrete_jungle.models.checkpoints import load_model, save_checkpoint
from concrete_jungle.models.encoding import encode_images, encode_texts
from concrete_jungle.params import ClipModelParams, ModelSpec, load_params

REPO = Path(__file__).resolve().parents[1]
PAPER = REPO / "pipelines" / "paper" / "params.yaml"

#: A tiny open_clip config with PE-Core-L-14-336's layout (timm PE tower, "map" pooling, no extra projection,
#: CustomTextCLIP); ~7.7M parameters, most of them the 49408-token embedding table.
TINY = "cj-test-pe-core-tiny"
TINY_CONFIG = {
    "embed_dim": 64,
    "vision_cfg": {"image_size": 384, "timm_model_name": "vit_pe_core_tiny_patch16_384",
                   "timm_model_pretrained": False, "timm_pool": "map", "timm_proj": None},
    "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
    "custom_text": True,
}
NO_BERT = {"bertscore": {"enabled": False}}
COLOURS = {"red": (220, 20, 20), "green": (20, 200, 40), "blue": (30, 40, 220), "grey": (128, 128, 128)}
CAPTIONS = ["a red square", "a green field", "a blue sky", "a grey wall", "a dog on a sofa", "two cats asleep"]


@pytest.fixture(scope="module")
def tiny_name(tmp_path_factory) -> str:
    import open_clip

    path = tmp_path_factory.mktemp("open_clip_configs") / f"{TINY}.json"
    path.write_text(json.dumps(TINY_CONFIG))
    open_clip.add_model_config(path)
    return TINY


@pytest.fixture(scope="module")
def tiny_clip(tiny_name, tmp_path_factory) -> ModelBundle:
    """The tiny config built from a params section, as the stage does: by name, no pretrained tag (random init)."""
    cfg = ClipModelParams(kind="open_clip", checkpoint=None, name=tiny_name, pretrained=None)
    return DS.build_clip_model(cfg, tmp_path_factory.mktemp("models"), seed=0)


class FakeReference(torch.nn.Module):
    """A reference model with hand-computable gaps: an image embeds as its mean (red, green), a caption as
    (1, 0) if it holds "red" else (0, 1); exp(logit_scale) = 10."""

    def __init__(self):
        super().__init__()
        self.logit_scale = torch.nn.Parameter(torch.tensor(math.log(10.0)))

    def encode_image(self, x):
        return x.mean(dim=(2, 3))[:, :2]

    def encode_text(self, tokens):
        return tokens.float()


def _to_tensor(im: Image.Image) -> torch.Tensor:
    return torch.from_numpy(np.asarray(im.convert("RGB"), dtype=np.float32) / 255.0).permute(2, 0, 1)


@pytest.fixture(scope="module")
def fake_reference() -> ModelBundle:
    return ModelBundle(model=FakeReference(), preprocess_train=_to_tensor, preprocess_val=_to_tensor,
                       tokenizer=lambda texts: torch.tensor([[1, 0] if "red" in t else [0, 1] for t in texts]),
                       model_name="fake-reference", spec=ModelSpec(kind="world", name="cj-world-vit"), embed_dim=2,
                       device=torch.device("cpu"))


def _images(folder: Path) -> dict[str, str]:
    out = {}
    for name, rgb in COLOURS.items():
        Image.new("RGB", (24, 24), rgb).save(folder / f"{name}.png")
        out[name] = f"{name}.png"
    return out


def _record(i, image, caption, negative_caption, negative_image, c_i=4.0):
    return {"anchor_id": f"r{i}", "image": image, "caption": caption, "keyword": f"kw{i}", "lemma": f"kw{i}",
            "type": "object", "span": [0, 1], "c_i": c_i, "negative_caption": negative_caption,
            "negative_image": negative_image}


@pytest.fixture()
def three_records(tmp_path):
    img = _images(tmp_path)
    records = [
        _record(0, img["red"], "a red square", "a green field", img["green"], 4.5),
        _record(1, img["blue"], "a blue sky", "a grey wall", img["grey"], 3.0),
        _record(2, img["grey"], "a dog on a sofa", "a red square", img["grey"], 2.0),  # v' = v
    ]
    return records, tmp_path


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=-1))


def _load_stage():
    spec = importlib.util.spec_from_file_location("_dataset_stats_stage", REPO / "stages" / "dataset_stats.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------------------------------------
# params: typed, validated without torch
# ---------------------------------------------------------------------------------------------------------------
def test_clip_model_params_kinds():
    default = ClipModelParams()
    assert (default.kind, default.checkpoint, default.name, default.precision) == ("checkpoint", "base", None, None)
    ok = ClipModelParams(kind="open_clip", checkpoint=None, name="PE-Core-L-14-336", pretrained="meta")
    assert (ok.name, ok.pretrained, ok.context_length) == ("PE-Core-L-14-336", "meta", None)
    bad = [
        ({"kind": "open_clip", "checkpoint": None}, r"dataset_stats\.clip_model\.name: kind 'open_clip' needs"),
        ({"kind": "open_clip", "name": "PE-Core-L-14-336"}, r"dataset_stats\.clip_model\.checkpoint"),
        ({"kind": "checkpoint", "checkpoint": None}, r"dataset_stats\.clip_model\.checkpoint: kind 'checkpoint'"),
        ({"name": "PE-Core-L-14-336"}, r"dataset_stats\.clip_model\.name: only kind 'open_clip'"),
        ({"context_length": 32}, r"dataset_stats\.clip_model\.context_length: only kind 'open_clip'"),
        ({"kind": "open_clip", "checkpoint": None, "name": "x", "weights_path": "w.bin"},
         r"weights_path needs dataset_stats\.clip_model\.pretrained"),
        ({"kind": "clip"}, "kind"),
        ({"precision": "fp16"}, "precision"),
        ({"kind": "open_clip", "checkpoint": None, "name": " "}, "name must not be blank"),
        ({"colour": "red"}, "colour"),
    ]
    for fields, match in bad:
        with pytest.raises(ValidationError, match=match):
            ClipModelParams(**fields)
    assert DS.DatasetStatsParams().clip_model == ClipModelParams()


def test_paper_profile_params_validate_without_torch():
    code = ("import sys, json; from concrete_jungle.params import load_params; "
            f"c = load_params({str(PAPER)!r}).dataset_stats; "
            "print(json.dumps([c.clip_model.model_dump(), c.dino.model, c.reference_model, "
            "sorted({'torch', 'open_clip', 'timm'} & set(sys.modules))]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    clip, dino, reference, heavy = json.loads(out.stdout)
    assert heavy == []
    assert clip == {"kind": "open_clip", "checkpoint": None, "name": "PE-Core-L-14-336", "pretrained": "meta",
                    "weights_path": None, "context_length": None, "precision": None}
    assert dino == "vit_large_patch14_dinov2.lvd142m" and reference == "base"
    for profile in (REPO / "params.yaml", REPO / "pipelines" / "real" / "params.yaml"):  # unchanged: the base model
        assert load_params(profile).dataset_stats.clip_model == ClipModelParams(kind="checkpoint", checkpoint="base")


# ---------------------------------------------------------------------------------------------------------------
# names checked at stage start (open_clip / timm)
# ---------------------------------------------------------------------------------------------------------------
def test_check_clip_and_dino_names(tmp_path):
    paper = load_params(PAPER).dataset_stats
    DS.check_clip_model(paper.clip_model)  # PE-Core-L-14-336 / meta: open_clip config, timm tower and tag exist
    DS.check_dino_model(paper.dino)  # vit_large_patch14_dinov2.lvd142m
    oc = {"kind": "open_clip", "checkpoint": None}
    with pytest.raises(ValueError, match=r"^dataset_stats\.clip_model\.name: open_clip knows no model 'PE-Core-L-14-999'"
                                         r".*PE-Core-L-14-336"):
        DS.check_clip_model(ClipModelParams(**oc, name="PE-Core-L-14-999", pretrained="meta"))
    with pytest.raises(ValueError, match=r"^dataset_stats\.clip_model\.pretrained: 'openai' is not an open_clip "
                                         r"pretrained tag of 'PE-Core-L-14-336' \(tags: \['meta'\]\)"):
        DS.check_clip_model(ClipModelParams(**oc, name="PE-Core-L-14-336", pretrained="openai"))
    with pytest.raises(FileNotFoundError, match=r"dataset_stats\.clip_model\.weights_path does not exist"):
        DS.check_clip_model(ClipModelParams(**oc, name="PE-Core-L-14-336", pretrained="meta",
                                            weights_path=str(tmp_path / "none.bin")))
    with pytest.raises(FileNotFoundError, match=r"dataset_stats\.clip_model\.checkpoint 'hc-cement': no checkpoint"):
        DS.check_clip_model(ClipModelParams(checkpoint="hc-cement"), tmp_path)
    DS.check_clip_model(ClipModelParams())  # kind checkpoint without models_dir: nothing to check


def test_bad_open_clip_name_fails_at_stage_start(tmp_path, monkeypatch):
    """Before any output is cleared or model loaded: the stage's first checks name the key."""
    monkeypatch.chdir(tmp_path)  # the stage's relative paths land here, never in the repository
    params = load_params(REPO / "params.yaml", overrides={"profile": "cjtest", "concreteplant": {"datasets": ["hc"]},
                                                          "train": {"datasets": ["hc"]},
                                                          "gradient_ratio": {"dataset": "hc"},
                                                          "dataset_stats": {"clip_model": {
        "kind": "open_clip", "checkpoint": None, "name": "No-Such-CLIP", "pretrained": None}}})
    old = params.metrics_dir / "dataset_stats" / "hc.json"
    old.parent.mkdir(parents=True)
    old.write_text("{}")
    stage = _load_stage()
    with pytest.raises(ValueError, match=r"^dataset_stats\.clip_model\.name: open_clip knows no model 'No-Such-CLIP'"):
        stage.dataset_stats_stage(params)
    bad_tag = params.model_copy(update={"dataset_stats": params.dataset_stats.model_copy(update={
        "clip_model": ClipModelParams(kind="open_clip", checkpoint=None, name="PE-Core-L-14-336", pretrained="x")})})
    with pytest.raises(ValueError, match=r"^dataset_stats\.clip_model\.pretrained: 'x'"):
        stage.dataset_stats_stage(bad_tag)
    assert old.read_text() == "{}"  # nothing was cleared


def test_stage_scores_clip_rows_with_the_open_clip_model(tiny_name, tmp_path, monkeypatch):
    """The stage end to end in a scratch folder: reference = the profile's base checkpoint, CLIP rows = the open_clip
    model named in the params; the metrics JSON records both."""
    monkeypatch.chdir(tmp_path)
    params = load_params(REPO / "params.yaml", overrides={"profile": "cjtest", "concreteplant": {"datasets": ["hc"]},
                                                          "train": {"datasets": ["hc"]},
                                                          "gradient_ratio": {"dataset": "hc"}, "dataset_stats": {
        "batch_size": 4, "bertscore": {"enabled": False},
        "clip_model": {"kind": "open_clip", "checkpoint": None, "name": tiny_name, "pretrained": None}}})
    save_checkpoint(params.models_dir / "base" / "checkpoint.pt",
                    build_model(ModelSpec(kind="world", name="cj-world-vit"), seed=0), params={}, step=0)
    folder = params.data_dir / "concreteplant" / "hc"
    folder.mkdir(parents=True)
    img = {k: str(folder / v) for k, v in _images(folder).items()}
    records = [_record(0, img["red"], "a red square", "a green field", img["green"], 4.5),
               _record(1, img["blue"], "a blue sky", "a grey wall", img["grey"], 3.0),
               _record(2, img["grey"], "a dog on a sofa", "a red square", None, 2.0)]
    (folder / "concretebatch.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    stats = _load_stage().dataset_stats_stage(params)["hc"]
    written = json.loads((params.metrics_dir / "dataset_stats" / "hc.json").read_text())
    assert written["clip_model"] == {"name": tiny_name, "weights": None, "precision": "fp32",
                                     "shared_with_reference": False}
    assert written["reference_model"]["name"] == "cj-world-vit"
    assert written["reference_model"]["checkpoint"] == str(params.models_dir / "base" / "checkpoint.pt")
    assert -1.0 <= written["clip_l"] <= 1.0 and -1.0 <= written["clip_v"] <= 1.0 and written["n_image_pairs"] == 2
    assert stats["clip_l"] == written["clip_l"]
    assert (params.metrics_dir / "dataset_gaps" / "hc.csv").is_file()


# ---------------------------------------------------------------------------------------------------------------
# the open_clip CLIP-score model, built by name
# ---------------------------------------------------------------------------------------------------------------
def test_open_clip_model_by_name_scores_clip_rows(three_records, tiny_clip, fake_reference):
    records, root = three_records
    assert type(tiny_clip.model).__name__ == "CustomTextCLIP" and tiny_clip.model_name == TINY
    assert (tiny_clip.spec.kind, tiny_clip.spec.pretrained, tiny_clip.embed_dim) == ("open_clip", None, 64)
    cfg = DS.DatasetStatsParams(batch_size=2, **NO_BERT)
    out = DS.dataset_statistics(records, fake_reference, cfg, image_root=root, clip_bundle=tiny_clip)

    # CLIP rows: the tiny model's cosines, recomputed here in cosine space
    img = {c: encode_images(tiny_clip, [Image.open(root / f"{c}.png")])[0] for c in ("red", "green", "blue", "grey")}
    txt = dict(zip(CAPTIONS, encode_texts(tiny_clip, CAPTIONS)))
    triples = [("red", "a red square", "a green field", "green"), ("blue", "a blue sky", "a grey wall", "grey"),
               ("grey", "a dog on a sofa", "a red square", "grey")]
    clip_l = np.mean([_cos(txt[t], txt[tn]) for _, t, tn, _ in triples])
    clip_v = np.mean([_cos(img[v], img[vn]) for v, _, _, vn in triples])
    i2t = np.mean([_cos(img[v], txt[t]) > _cos(img[v], txt[tn]) for v, t, tn, _ in triples])
    for key, expected in (("clip_l", clip_l), ("clip_v", clip_v)):
        assert math.isfinite(out[key]) and -1.0 <= out[key] <= 1.0
        assert out[key] == pytest.approx(expected, abs=1e-5)
    assert out["clip_v"] == pytest.approx((_cos(img["red"], img["green"]) + _cos(img["blue"], img["grey"]) + 1) / 3,
                                          abs=1e-5)  # record 2's v' is v
    assert out["i2t_acc"] == pytest.approx(i2t, abs=1e-12)
    assert out["t2i_acc"] in {0.0, 1 / 3, 2 / 3}  # record 2 is a tie (v' = v): wrong
    assert out["clip_model"] == {"name": TINY, "weights": None, "precision": "fp32", "shared_with_reference": False}

    # logit gaps: the reference model's (hand-computed), not the CLIP-score model's
    r, g, b, e = (np.array(c[:2], float) / 255 for c in (COLOURS["red"], COLOURS["green"], COLOURS["blue"],
                                                           COLOURS["grey"]))
    red_t, other_t = np.array([1.0, 0.0]), np.array([0.0, 1.0])

    def cosine(x, y):
        return float(x @ y / np.linalg.norm(x) / np.linalg.norm(y))

    gaps = [cosine(r, red_t) - cosine(r, other_t), cosine(b, other_t) - cosine(b, other_t),
            cosine(e, other_t) - cosine(e, red_t)]
    assert [x["cos_gap"] for x in out["per_record"]] == pytest.approx(gaps, abs=1e-6)
    assert out["logit_scale"] == pytest.approx(10.0, rel=1e-6)
    assert out["logit_gap_mean"] == pytest.approx(10 * np.mean(gaps), abs=1e-5)
    assert out["reference_model"] == {"name": "fake-reference", "checkpoint": None}


def test_open_clip_i2t_t2i_on_a_hand_made_case(tmp_path, tiny_clip):
    """A case whose verdicts are known, built from the model's own cosines: record 0 takes a caption t, the image v
    closest to it and the farthest as v' (T2I right), and as t' a caption farther from v than t (I2T right); record 1
    is a tie on both sides (t' = t, v' = v: wrong); record 2 swaps record 0's captions (I2T wrong, text-only)."""
    img_files = _images(tmp_path)
    colours = list(COLOURS)
    img = dict(zip(colours, encode_images(tiny_clip, [Image.open(tmp_path / f"{c}.png") for c in colours])))
    txt = dict(zip(CAPTIONS, encode_texts(tiny_clip, CAPTIONS)))
    case = None
    for t in CAPTIONS:
        by_img = sorted(colours, key=lambda c: _cos(txt[t], img[c]))
        v, v_neg = by_img[-1], by_img[0]
        t_neg = min((c for c in CAPTIONS if c != t), key=lambda c: _cos(img[v], txt[c]))
        if _cos(img[v], txt[t]) > _cos(img[v], txt[t_neg]) and _cos(txt[t], img[v]) > _cos(txt[t], img[v_neg]):
            case = (v, t, t_neg, v_neg)
            break
    assert case is not None, "no caption of the list gives a clear case under this model"
    v, t, t_neg, v_neg = case
    records = [
        _record(0, img_files[v], t, t_neg, img_files[v_neg]),
        _record(1, img_files["blue"], "a blue sky", "a blue sky", img_files["blue"]),
        _record(2, img_files[v], t_neg, t, None),
    ]
    out = DS.dataset_statistics(records, tiny_clip, DS.DatasetStatsParams(batch_size=3, **NO_BERT), image_root=tmp_path)
    assert out["i2t_acc"] == pytest.approx(1 / 3)  # record 0 only
    assert out["t2i_acc"] == pytest.approx(1 / 2)  # over the two records with a v': record 0 right, record 1 a tie
    assert out["accuracy_variants"]["i2t_anchor"] == pytest.approx(1 / 2)  # records 0 and 1
    assert out["clip_model"]["shared_with_reference"] is True  # no clip_bundle: the reference model scores all
    assert [r["cos_gap"] > 0 for r in out["per_record"]] == [True, False, False]


def test_tag_weights_offline_and_from_a_local_file(tiny_name, tmp_path, monkeypatch):
    """A tag whose weights are not cached fails naming the key; the same weights from ``weights_path`` load strictly
    and keep the tag's preprocessing (mean / std 0.5, as PE-Core's ``meta``)."""
    import huggingface_hub.constants as hf
    import open_clip.pretrained as ocp

    tag = ocp._pcfg(hf_hub="cj-nowhere/tiny/", mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), interpolation="bilinear",
                    resize_mode="squash")
    monkeypatch.setitem(ocp._PRETRAINED, tiny_name, {"meta": tag})
    monkeypatch.setattr(hf, "HF_HUB_CACHE", str(tmp_path / "empty_cache"))
    monkeypatch.setattr(hf, "HF_HUB_OFFLINE", True)
    oc = {"kind": "open_clip", "checkpoint": None, "name": tiny_name, "pretrained": "meta"}
    with pytest.raises(DS.ClipModelUnavailable, match=r"^dataset_stats\.clip_model\.pretrained: the weights of "
                                                      r"open_clip 'cj-test-pe-core-tiny' / 'meta'.*weights_path"):
        DS.build_clip_model(ClipModelParams(**oc), tmp_path)
    source = build_model(ModelSpec(kind="open_clip", name=tiny_name), seed=7).model
    weights = tmp_path / "open_clip_pytorch_model.bin"
    torch.save(source.state_dict(), weights)
    bundle = DS.build_clip_model(ClipModelParams(**oc, weights_path=str(weights), precision="bf16"), tmp_path, seed=1)
    assert all(torch.equal(a, b) for a, b in zip(bundle.model.state_dict().values(), source.state_dict().values()))
    norm = bundle.preprocess_val.transforms[-1]
    assert tuple(norm.mean) == (0.5, 0.5, 0.5) and tuple(norm.std) == (0.5, 0.5, 0.5)
    assert (bundle.spec.pretrained, bundle.spec.precision) == (str(weights), "bf16")


# ---------------------------------------------------------------------------------------------------------------
# kind checkpoint: the project's model, shared with the reference model (world / real profiles)
# ---------------------------------------------------------------------------------------------------------------
def test_checkpoint_kind_shares_the_reference_model(three_records, tmp_path):
    records, root = three_records
    models = tmp_path / "models"
    save_checkpoint(models / "base" / "checkpoint.pt", build_model(ModelSpec(kind="world", name="cj-world-vit"),
                                                                    seed=0), params={}, step=0)
    reference = load_model(DS.reference_checkpoint("base", models))
    assert DS.build_clip_model(ClipModelParams(), models, reference=reference) is reference
    assert DS.build_clip_model(ClipModelParams(precision="fp32"), models, reference=reference) is reference
    bf16 = DS.build_clip_model(ClipModelParams(precision="bf16"), models, reference=reference)
    assert bf16 is not reference and bf16.spec.precision == "bf16" and bf16.model is reference.model  # shared
    own = DS.build_clip_model(ClipModelParams(checkpoint=str(models / "base" / "checkpoint.pt")), models)
    assert own is not reference and own.spec.pretrained == str(models / "base" / "checkpoint.pt")
    with pytest.raises(FileNotFoundError, match=r"dataset_stats\.clip_model\.checkpoint 'lc-cement'"):
        DS.build_clip_model(ClipModelParams(checkpoint="lc-cement"), models, reference=reference)

    # the default (shared) path gives exactly the figures of the reference model alone
    cfg = DS.DatasetStatsParams(batch_size=2, **NO_BERT)
    alone = DS.dataset_statistics(records, reference, cfg, image_root=root)
    shared = DS.dataset_statistics(records, reference, cfg, image_root=root, clip_bundle=reference)
    assert shared == alone and alone["clip_model"]["shared_with_reference"] is True
    separate = DS.dataset_statistics(records, reference, cfg, image_root=root, clip_bundle=own)
    assert separate["clip_model"]["shared_with_reference"] is False
    for key in ("clip_l", "clip_v", "i2t_acc", "t2i_acc", "i2t_cos_gap_mean"):  # same weights, encoded twice
        assert separate[key] == pytest.approx(alone[key], abs=1e-6)


# ---------------------------------------------------------------------------------------------------------------
# DINOScore with a DINOv2 architecture (random init)
# ---------------------------------------------------------------------------------------------------------------
def test_dinov2_random_init_gives_a_dino_score(three_records, fake_reference):
    records, root = three_records
    dino = {"model": "vit_small_patch14_dinov2", "pretrained": False}
    DS.check_dino_model(DS.DinoParams(**dino))
    cfg = DS.DatasetStatsParams(batch_size=4, dino=dino, **NO_BERT)
    out = DS.dataset_statistics(records, fake_reference, cfg, image_root=root, dino_seed=5)
    assert out["dino_info"] == {"model": "vit_small_patch14_dinov2", "pretrained": False, "feature_dim": 384}
    assert "dino_score" not in out["skipped"]
    assert math.isfinite(out["dino_score"]) and -1.0 <= out["dino_score"] <= 1.0
    model, transform = DS.load_dino(DS.DinoParams(**dino), seed=5)
    names = ("red", "green", "blue", "grey")
    feats = dict(zip(names, DS.encode_dino(model, transform, [Image.open(root / f"{c}.png") for c in names])))
    expected = (_cos(feats["red"], feats["green"]) + _cos(feats["blue"], feats["grey"]) + 1.0) / 3  # record 2: v' = v
    assert out["dino_score"] == pytest.approx(expected, abs=1e-5)
