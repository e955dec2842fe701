"""Tests for concrete_jungle.evaluation.sugarcrepe: verdicts (strict, ties wrong), summaries, loading, scoring from
fixed embeddings."""

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from concrete_jungle.evaluation.sugarcrepe import (
    SUGARCREPE_SUBSETS,
    benchmark_inputs,
    load_sugarcrepe,
    prepare_benchmark,
    score_sugarcrepe,
    summarize,
    sugarcrepe_verdicts,
)
from concrete_jungle.evaluation.suite import EmbeddingCache

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


# ---------------------------------------------------------------- verdicts
def test_verdicts_hand_made_embeddings_tie_is_wrong():
    img = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    pos = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    neg = torch.tensor([[0.0, 1.0], [0.0, 1.0], [0.0, 1.0]])
    # item 0: cos 1 vs 0 -> right; item 1: 0 vs 1 -> wrong; item 2: 1/sqrt2 vs 1/sqrt2 -> tie -> wrong
    assert sugarcrepe_verdicts(img, pos, neg).tolist() == [True, False, False]


def test_verdicts_are_cosine_not_dot_product():
    img = torch.tensor([[1.0, 0.0]])
    pos = torch.tensor([[1.0, 1.0]])  # cos 0.707, dot 1
    neg = torch.tensor([[10.0, 20.0]])  # cos 0.447, dot 10
    assert sugarcrepe_verdicts(img, pos, neg).tolist() == [True]
    assert sugarcrepe_verdicts(img, neg, pos).tolist() == [False]


def test_verdicts_bad_inputs():
    a = torch.ones(2, 3)
    with pytest.raises(ValueError, match="share shape"):
        sugarcrepe_verdicts(a, a, torch.ones(2, 4))
    with pytest.raises(ValueError, match="2-D"):
        sugarcrepe_verdicts(torch.ones(3), a, a)
    with pytest.raises(ValueError, match="pos_emb row 1 is a zero vector"):
        sugarcrepe_verdicts(a, torch.tensor([[1.0, 0, 0], [0, 0, 0]]), a)
    with pytest.raises(ValueError, match="NaN"):
        sugarcrepe_verdicts(a, a, torch.tensor([[float("nan"), 0, 0], [1, 0, 0]]))


# ---------------------------------------------------------------- summarize
def test_summarize_micro_and_macro_by_hand():
    out = summarize({"a": torch.tensor([True, False, False]), "b": [True]})
    assert out["subsets"]["a"] == {"accuracy": pytest.approx(1 / 3), "n": 3, "correct": 1}
    assert out["subsets"]["b"] == {"accuracy": 1.0, "n": 1, "correct": 1}
    assert out["micro_accuracy"] == pytest.approx(0.5)  # 2 of 4 items
    assert out["macro_accuracy"] == pytest.approx(2 / 3)  # (1/3 + 1) / 2
    assert out["n_items"] == 4


def test_summarize_rejects_empty():
    with pytest.raises(ValueError, match="empty"):
        summarize({})
    with pytest.raises(ValueError, match="'b' has no items"):
        summarize({"a": [True], "b": []})


# ---------------------------------------------------------------- fixture benchmark
COLOURS = {"red.png": (255, 0, 0), "blue.png": (0, 0, 255)}
IMAGE_EMB = {(255, 0, 0): [1.0, 0.0], (0, 0, 255): [1.0, 1.0]}
TEXT_EMB = {
    "a red square": [1.0, 0.0],
    "a green square": [0.0, 1.0],
    "a crimson square": [0.0, 1.0],
    "a blue square": [1.0, 0.0],
    "a navy square": [0.0, 1.0],
}


def _bench(tmp_path: Path, with_meta: bool = True) -> Path:
    bench = tmp_path / "bench"
    bench.mkdir(parents=True)
    imgs = tmp_path / "imgs"
    imgs.mkdir(parents=True)
    for name, rgb in COLOURS.items():
        Image.new("RGB", (4, 4), rgb).save(imgs / name)
    subset_a = {
        "0": {"filename": "red.png", "caption": "a red square", "negative_caption": "a green square"},  # right
        "1": {"filename": "red.png", "caption": "a crimson square", "negative_caption": "a red square"},  # wrong
    }
    subset_b = {
        "5": {"filename": "blue.png", "caption": "a blue square", "negative_caption": "a navy square"},  # tie
        "6": {"filename": "absent.png", "caption": "a pink square", "negative_caption": "a navy square"},
    }
    (bench / "sub_a.json").write_text(json.dumps(subset_a))
    (bench / "sub_b.json").write_text(json.dumps(subset_b))
    if with_meta:
        (bench / "meta.json").write_text(json.dumps({"image_root": str(imgs)}))
    return bench


def test_load_sugarcrepe_fixture(tmp_path):
    bench = _bench(tmp_path)
    items, skipped = load_sugarcrepe(bench)
    assert list(items) == ["sub_a", "sub_b"]
    assert [it["id"] for it in items["sub_a"]] == ["0", "1"]
    assert items["sub_b"] == [
        {"id": "5", "filename": "blue.png", "image": str(tmp_path / "imgs" / "blue.png"),
         "caption": "a blue square", "negative_caption": "a navy square"}
    ]
    assert skipped == {"sub_a": {}, "sub_b": {"image_missing": 1}}
    # explicit subsets and the bench_dir/images default (no meta.json there -> every image missing)
    items, skipped = load_sugarcrepe(_bench(tmp_path / "x", with_meta=False), subsets=["sub_a"])
    assert items == {"sub_a": []} and skipped == {"sub_a": {"image_missing": 2}}


def test_damaged_images_and_repeated_ids_are_named_at_preparation(tmp_path, caplog):
    # issue 22: a damaged image used to pass preparation (only its existence was checked) and fail the whole model's
    # encoding later; a repeated id was silently resolved by json to its last item
    bench = _bench(tmp_path)
    imgs = tmp_path / "imgs"
    (imgs / "truncated.png").write_bytes((imgs / "red.png").read_bytes()[:30])
    (imgs / "empty.png").write_bytes(b"")
    extra = {"7": {"filename": "truncated.png", "caption": "a red square", "negative_caption": "a blue square"},
             "8": {"filename": "empty.png", "caption": "a red square", "negative_caption": "a blue square"},
             "9": {"filename": "truncated.png", "caption": "a big square", "negative_caption": "a small square"},
             "10": {"filename": "red.png", "caption": "a red square", "negative_caption": "a blue square"}}
    (bench / "sub_c.json").write_text(json.dumps(extra))
    with caplog.at_level(logging.WARNING, "concrete_jungle.evaluation.sugarcrepe"):
        out = prepare_benchmark(bench, imgs, tmp_path / "prepared", "test")
    assert out["skipped"]["sub_c"] == {"image_unreadable": 3} and out["n_items"]["sub_c"] == 1
    # each damaged file named once, with the subset and the first item that uses it
    assert sorted(r.getMessage() for r in caplog.records) == [
        f"SugarCrepe subset 'sub_c' item '{i}': image {imgs / f} skipped (image_unreadable)"
        for i, f in (("7", "truncated.png"), ("8", "empty.png"))]
    assert out["skipped"]["sub_b"] == {"image_missing": 1}
    (bench / "sub_c.json").write_text('{"3": {"filename": "red.png", "caption": "a", "negative_caption": "b"}, '
                                      '"3": {"filename": "blue.png", "caption": "c", "negative_caption": "d"}}')
    with pytest.raises(ValueError, match=r"sub_c\.json: key '3' occurs twice in one object"):
        load_sugarcrepe(bench)


def test_a_deleted_emptied_or_added_subset_file_is_recorded(tmp_path):
    # issue 22 item 4: such a change moved `all` without any record; prepare names the emptied subset and the
    # score's subset_set names what is absent, extra and dropped against the benchmark's own seven
    src, imgs = tmp_path / "src", tmp_path / "imgs"
    src.mkdir()
    imgs.mkdir()
    Image.new("RGB", (8, 8), (200, 0, 0)).save(imgs / "red.png")
    item = {"filename": "red.png", "caption": "a red square", "negative_caption": "a blue square"}
    for i, name in enumerate(SUGARCREPE_SUBSETS[:5]):  # swap_att and swap_obj deleted
        (src / f"{name}.json").write_text(json.dumps({str(i): item}))
    (src / "replace_rel.json").write_text(json.dumps({"9": {**item, "filename": "gone.png"}}))  # emptied
    (src / "my_subset.json").write_text(json.dumps({"8": item}))  # added
    meta = prepare_benchmark(src, imgs, tmp_path / "prepared", "test")
    assert meta["dropped_empty_subsets"] == ["replace_rel"]
    cache = _cache({str(imgs / "red.png"): [1.0, 0.0]}, {"a red square": [1.0, 0.0], "a blue square": [0.0, 1.0]})
    res = score_sugarcrepe(tmp_path / "prepared", cache)
    assert res["subset_set"] == {"scored": ["add_att", "add_obj", "my_subset", "replace_att", "replace_obj"],
                                 "absent": ["replace_rel", "swap_att", "swap_obj"], "extra": ["my_subset"],
                                 "dropped_empty": ["replace_rel"], "complete": False}
    assert res["n"]["all"] == 5


def test_load_sugarcrepe_errors(tmp_path):
    bench = _bench(tmp_path)
    with pytest.raises(FileNotFoundError, match="add_att"):
        load_sugarcrepe(bench, subsets=["add_att"])
    (bench / "bad.json").write_text(json.dumps({"0": {"filename": "red.png", "caption": "x"}}))
    with pytest.raises(ValueError, match="'negative_caption'"):
        load_sugarcrepe(bench)


def _cache(images: dict, texts: dict) -> EmbeddingCache:
    """An embedding cache of fixed embeddings (path / caption -> vector)."""
    return EmbeddingCache(list(images), list(texts), np.array(list(images.values()), np.float32),
                          np.array(list(texts.values()), np.float32))


def test_score_sugarcrepe_from_fixed_embeddings(tmp_path):
    bench = _bench(tmp_path)
    items, _ = load_sugarcrepe(bench)
    images, texts = benchmark_inputs(items, ("caption", "negative_caption"))
    assert images == sorted({str(tmp_path / "imgs" / "red.png"), str(tmp_path / "imgs" / "blue.png")})
    assert texts == sorted(TEXT_EMB)  # each unique caption once
    colour = {str(tmp_path / "imgs" / name): IMAGE_EMB[rgb] for name, rgb in COLOURS.items()}
    res = score_sugarcrepe(bench, _cache(colour, TEXT_EMB))
    m = res["metrics"]
    assert m["subsets"]["sub_a"] == {"accuracy": 0.5, "n": 2, "correct": 1}
    assert m["subsets"]["sub_b"] == {"accuracy": 0.0, "n": 1, "correct": 0}  # the tie is wrong
    assert m["micro_accuracy"] == pytest.approx(1 / 3) and m["macro_accuracy"] == pytest.approx(0.25)
    assert res["n"] == {"sub_a": 2, "sub_b": 1, "all": 3}
    assert res["verdicts"] == {"sub_a": {"0": True, "1": False}, "sub_b": {"5": False}}
    assert res["skipped"] == {"sub_a": {}, "sub_b": {"image_missing": 1}}
    # none of the benchmark's seven subsets: the record says `all` is over another set (issue 22 item 4)
    assert res["subset_set"] == {"scored": ["sub_a", "sub_b"], "absent": list(SUGARCREPE_SUBSETS),
                                 "extra": ["sub_a", "sub_b"], "dropped_empty": [], "complete": False}
    with pytest.raises(KeyError, match="a navy square"):
        score_sugarcrepe(bench, _cache(colour, {k: v for k, v in TEXT_EMB.items() if k != "a navy square"}))


def test_prepare_benchmark_fixture(tmp_path):
    bench = _bench(tmp_path, with_meta=False)
    out = tmp_path / "out"
    meta = prepare_benchmark(bench, tmp_path / "imgs", out, "fixture")
    assert meta == {
        "image_root": str(tmp_path / "imgs"),
        "source": "fixture",
        "n_items": {"sub_a": 2, "sub_b": 1},
        "skipped": {"sub_a": {}, "sub_b": {"image_missing": 1}},
        "dropped_empty_subsets": [],
    }
    assert json.loads((out / "meta.json").read_text()) == meta
    assert json.loads((out / "sub_b.json").read_text()) == {
        "5": {"filename": "blue.png", "caption": "a blue square", "negative_caption": "a navy square"}
    }
    items, skipped = load_sugarcrepe(out)  # image_root now comes from meta.json
    assert {k: len(v) for k, v in items.items()} == {"sub_a": 2, "sub_b": 1}
    assert skipped == {"sub_a": {}, "sub_b": {}}


def test_prepare_benchmark_drops_a_subset_without_images(tmp_path):
    bench = _bench(tmp_path, with_meta=False)
    for p in (tmp_path / "imgs").glob("blue*"):
        p.unlink()
    meta = prepare_benchmark(bench, tmp_path / "imgs", tmp_path / "out", "fixture")
    assert meta["dropped_empty_subsets"] == ["sub_b"] and "sub_b" not in meta["n_items"]
    items, _ = load_sugarcrepe(tmp_path / "out")  # the evaluator reads the kept subsets only
    assert set(items) == {"sub_a"}


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"shared real data not found at {SHARED}")
def test_prepare_benchmark_real_sugarcrepe(tmp_path):
    meta = prepare_benchmark(SHARED / "sugarcrepe", SHARED / "coco" / "val2017", tmp_path, "RAIVNLab/sugar-crepe@0047054")
    expected = {"add_att": 75, "add_obj": 256, "replace_att": 101, "replace_obj": 202,
                "replace_rel": 155, "swap_att": 59, "swap_obj": 27}  # data README, "How the pieces connect"
    assert meta["n_items"] == expected
    assert sum(meta["n_items"].values()) == 875
    full = {"add_att": 692, "add_obj": 2062, "replace_att": 788, "replace_obj": 1652,
            "replace_rel": 1406, "swap_att": 666, "swap_obj": 245}
    assert meta["skipped"] == {k: {"image_missing": full[k] - expected[k]} for k in full}
    images = {it["filename"] for kept in load_sugarcrepe(tmp_path)[0].values() for it in kept}
    assert len(images) == 167
