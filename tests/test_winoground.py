"""Tests for the Winoground suite: scores (strict, ties wrong), per-tag summaries, the Hugging Face and tag readers,
prepare / score on the suite contract, and the scene world's Winoground generator."""

import importlib.util
import io
import json
import math
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from concrete_jungle.corpus.scene_world.captions import caption_holds
from concrete_jungle.corpus.scene_world.graph import (
    BENCHMARK_STREAM,
    CORPUS_STREAM,
    Scene,
    scene_signature,
    validate_scene,
)
from concrete_jungle.corpus.scene_world.render import render_scene
from concrete_jungle.corpus.scene_world.winoground import (
    TAG_WEIGHTS,
    WINOGROUND_STREAM,
    WORLD_TAGS,
    _schedule,
    generate_winoground,
    world_tags_for,
)
from concrete_jungle.evaluation.suite import EmbeddingCache, read_suite, suite_result
from concrete_jungle.evaluation.winoground import (
    read_winoground_hf,
    read_winoground_tags,
    prepare_winoground,
    score_winoground,
    summarize_winoground,
    winoground_scores,
)
from concrete_jungle.params import WinogroundParams, WorldConfig

HAS_PARQUET = any(importlib.util.find_spec(m) is not None for m in ("pyarrow", "fastparquet"))


def _unit(deg: float) -> list[float]:
    return [math.cos(math.radians(deg)), math.sin(math.radians(deg))]


# Six hand-made items (rows): img0, img1, cap0, cap1 in 2-D.
#  0: i0=c0=e1, i1=c1=e2                                 -> every score right
#  1: c0 at 0deg, c1 at 20deg, i0 at -10deg, i1 at 60deg -> text right; image wrong: s(c1,i0)=cos30 > s(c1,i1)=cos40
#  2: the same with images and captions exchanged         -> image right, text wrong
#  3: i0=e1, i1=e2, c0=(1,1), c1=e2                       -> text right (0.707 > 0, 1 > 0.707); image: s(c0,i0) =
#     s(c0,i1) = 0.707 exactly, a tie -> wrong
#  4: all four the same vector                            -> every comparison a tie -> all wrong
#  5: images exchanged w.r.t. item 0                      -> all wrong
IMG0 = np.array([[1, 0], _unit(-10), _unit(0), [1, 0], [1, 1], [0, 1]], dtype=np.float32)
IMG1 = np.array([[0, 1], _unit(60), _unit(20), [0, 1], [1, 1], [1, 0]], dtype=np.float32)
CAP0 = np.array([[1, 0], _unit(0), _unit(-10), [1, 1], [1, 1], [1, 0]], dtype=np.float32)
CAP1 = np.array([[0, 1], _unit(20), _unit(60), [0, 1], [1, 1], [0, 1]], dtype=np.float32)
TEXT = [True, True, False, True, False, False]
IMAGE = [True, False, True, False, False, False]
GROUP = [True, False, False, False, False, False]


# ---------------------------------------------------------------- scores
def test_scores_hand_computed_with_ties_wrong():
    s = winoground_scores(IMG0, IMG1, CAP0, CAP1)
    assert set(s) == {"text", "image", "group"}
    assert s["text"].dtype == np.bool_ and s["text"].shape == (6,)
    assert s["text"].tolist() == TEXT
    assert s["image"].tolist() == IMAGE
    assert s["group"].tolist() == GROUP


def test_scores_are_cosine_and_scale_free():
    scale = np.array([[3.0], [0.5], [7.0], [2.0], [10.0], [0.1]])
    s = winoground_scores(IMG0 * scale, IMG1 * scale[::-1], CAP0 * 4.0, CAP1 * scale)
    assert s["text"].tolist() == TEXT and s["image"].tolist() == IMAGE and s["group"].tolist() == GROUP
    # dot products would say i1 prefers c0 (dot 10) over c1 (dot 1); cosines say c1 (1.0 vs 0.894)
    s = winoground_scores(np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]]), np.array([[10.0, 20.0]]),
                          np.array([[0.0, 1.0]]))
    assert s["text"].tolist() == [True]  # s(c0,i0)=0.447 > s(c1,i0)=0; s(c1,i1)=1 > s(c0,i1)=0.894
    assert s["image"].tolist() == [False]  # s(c0,i0)=0.447 < s(c0,i1)=0.894


def test_scores_reject_bad_inputs():
    a = np.ones((2, 3))
    with pytest.raises(ValueError, match="share shape"):
        winoground_scores(a, a, a, np.ones((3, 3)))
    with pytest.raises(ValueError, match="2-D"):
        winoground_scores(np.ones(3), a, a, a)
    bad = a.copy()
    bad[1, 0] = np.nan
    with pytest.raises(ValueError, match="cap0 contains NaN"):
        winoground_scores(a, a, bad, a)
    zero = a.copy()
    zero[1] = 0
    with pytest.raises(ValueError, match="img1 row 1 is a zero vector"):
        winoground_scores(a, zero, a, a)


# ---------------------------------------------------------------- summaries
def test_summary_overall_and_per_tag():
    s = winoground_scores(IMG0, IMG1, CAP0, CAP1)
    tags = {
        "collapsed_tag": ["Relation", "Relation", "Object", "Object", "Both", "Relation"],
        "diwan": [[], ["Visually Difficult"], ["Visually Difficult", "Non Minimal"], "No Tag", ["No Tag"], []],
    }
    out = summarize_winoground(s, tags)
    assert out["n"] == 6
    assert out["text"] == pytest.approx(3 / 6) and out["image"] == pytest.approx(2 / 6)
    assert out["group"] == pytest.approx(1 / 6)
    col = out["by_tag"]["collapsed_tag"]
    assert list(col) == ["Both", "Object", "Relation"]  # sorted labels
    assert col["Relation"] == {"text": pytest.approx(2 / 3), "image": pytest.approx(1 / 3),
                               "group": pytest.approx(1 / 3), "n": 3}  # items 0, 1, 5
    assert col["Object"] == {"text": 0.5, "image": 0.5, "group": 0.0, "n": 2}  # items 2, 3
    assert col["Both"] == {"text": 0.0, "image": 0.0, "group": 0.0, "n": 1}  # item 4
    dw = out["by_tag"]["diwan"]
    assert dw["Visually Difficult"] == {"text": 0.5, "image": 0.5, "group": 0.0, "n": 2}  # items 1, 2
    assert dw["Non Minimal"] == {"text": 0.0, "image": 1.0, "group": 0.0, "n": 1}  # item 2
    assert dw["No Tag"] == {"text": 0.5, "image": 0.0, "group": 0.0, "n": 2}  # items 3, 4
    assert sum(g["n"] for g in dw.values()) == 5  # items 0 and 5 (empty lists) count nowhere
    for groups in out["by_tag"].values():
        for g in groups.values():
            assert all(isinstance(g[k], float) and math.isfinite(g[k]) for k in ("text", "image", "group"))
    assert summarize_winoground(s, None)["by_tag"] == {}


def test_summary_rejects_bad_input():
    s = winoground_scores(IMG0, IMG1, CAP0, CAP1)
    with pytest.raises(ValueError, match=r"tags\['collapsed_tag'\] must list one entry per item \(6\)"):
        summarize_winoground(s, {"collapsed_tag": ["Relation"] * 5})
    with pytest.raises(ValueError, match=r"tags\['diwan'\]\[2\]"):
        summarize_winoground(s, {"diwan": [[], [], [3], [], [], []]})
    with pytest.raises(ValueError, match="no items"):
        summarize_winoground({k: np.zeros(0, dtype=bool) for k in ("text", "image", "group")})
    with pytest.raises(ValueError, match="lack 'group'"):
        summarize_winoground({"text": s["text"], "image": s["image"]})
    with pytest.raises(ValueError, match="is not scores"):
        summarize_winoground({"text": s["text"], "image": s["image"], "group": s["text"]})


# ---------------------------------------------------------------- readers: the Hugging Face release
def _png(colour, size=8) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (size, size), colour).save(buf, format="PNG")
    return buf.getvalue()


def _jpeg(colour, size=8) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (size, size), colour).save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def _jsonl_release(root: Path, records: list[dict]) -> Path:
    (root / "images").mkdir(parents=True, exist_ok=True)
    for rec in records:
        for k in (0, 1):
            name = rec.get(f"image_{k}")
            if isinstance(name, str) and "/" not in name:
                (root / "images" / f"{name}.png").write_bytes(_png((40 * k, 0, 0)))
    (root / "examples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return root


def _record(i: int, **over) -> dict:
    rec = {"id": i, "image_0": f"ex_{i}_img_0", "image_1": f"ex_{i}_img_1", "caption_0": f"a dog bites man {i}",
           "caption_1": f"a man bites dog {i}", "tag": "Noun", "secondary_tag": "Symbolic, Series",
           "num_main_preds": 1, "collapsed_tag": "Object"}
    rec.update(over)
    return rec


def test_hf_jsonl_layout(tmp_path):
    root = _jsonl_release(tmp_path / "wino", [_record(0), _record(1, secondary_tag="", collapsed_tag="Relation",
                                                                   tag="Adjective-Color", num_main_preds=2)])
    items = read_winoground_hf(root)
    assert [it["id"] for it in items] == ["0", "1"]
    assert items[0]["image_0"] == str(root / "images" / "ex_0_img_0.png")
    assert items[1]["image_1"] == str(root / "images" / "ex_1_img_1.png")
    assert items[0]["caption_1"] == "a man bites dog 0"
    assert items[0]["tags"] == {"collapsed_tag": ["Object"], "tag": ["Noun"], "secondary_tag": ["Symbolic", "Series"],
                                "num_main_preds": ["1"]}
    assert items[1]["tags"] == {"collapsed_tag": ["Relation"], "tag": ["Adjective-Color"], "secondary_tag": [],
                                "num_main_preds": ["2"]}


def test_hf_jsonl_refuses_escaping_and_malformed_items(tmp_path):
    (tmp_path / "secret.png").write_bytes(_png((1, 2, 3)))
    root = _jsonl_release(tmp_path / "wino", [_record(0), _record(7, image_1="../../secret")])
    with pytest.raises(ValueError, match=r"Winoground item '7' image_1: filename '../../secret.png' is absolute or "
                                         "resolves outside"):
        read_winoground_hf(root)
    root = _jsonl_release(tmp_path / "w2", [_record(0), _record(3, caption_1="  ")])
    with pytest.raises(ValueError, match=r"Winoground item '3': caption_1 must be a non-empty string"):
        read_winoground_hf(root)
    root = _jsonl_release(tmp_path / "w3", [_record(0), _record(0)])
    with pytest.raises(ValueError, match=r"Winoground item '0': duplicate id"):
        read_winoground_hf(root)
    root = _jsonl_release(tmp_path / "w4", [_record(5, num_main_preds="one")])
    with pytest.raises(ValueError, match=r"Winoground item '5': num_main_preds 'one'"):
        read_winoground_hf(root)
    root = _jsonl_release(tmp_path / "w5", [_record(4)])
    (root / "images" / "ex_4_img_1.png").unlink()
    with pytest.raises(FileNotFoundError, match=r"Winoground item '4' image_1: image file not found"):
        read_winoground_hf(root)
    # issue 22: a damaged image is named here, not when the whole model's encoding fails later
    (root / "images" / "ex_4_img_1.png").write_bytes(_png((1, 2, 3))[:20])
    with pytest.raises(ValueError, match=r"Winoground item '4' image_1: image file .*ex_4_img_1\.png does not decode "
                                         r"\(image_unreadable\)"):
        read_winoground_hf(root)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds neither"):
        read_winoground_hf(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="Winoground folder not found"):
        read_winoground_hf(tmp_path / "missing")


def _parquet_frame() -> pd.DataFrame:
    rows = [
        {"id": 0, "image_0": {"bytes": _png((255, 0, 0)), "path": "ex_0_img_0.png"},
         "image_1": {"bytes": _jpeg((0, 0, 255)), "path": None}, "caption_0": "an old person kisses a young person",
         "caption_1": "a young person kisses an old person", "tag": "Adjective-Age", "secondary_tag": None,
         "num_main_preds": 1, "collapsed_tag": "Relation"},
        {"id": 1, "image_0": {"bytes": None, "path": "local/a.png"}, "image_1": {"bytes": _png((0, 255, 0))},
         "caption_0": "a person watches an animal", "caption_1": "an animal watches a person", "tag": "Noun",
         "secondary_tag": "Symbolic", "num_main_preds": 1, "collapsed_tag": "Object"},
    ]
    return pd.DataFrame(rows)


def _check_parquet_items(items, root: Path, out: Path) -> None:
    assert [it["id"] for it in items] == ["0", "1"]
    assert items[0]["image_0"] == str(out / "ex_0_img_0.png")
    assert (out / "ex_0_img_0.png").read_bytes() == _png((255, 0, 0))  # PNG bytes kept verbatim
    with Image.open(items[0]["image_1"]) as im:  # JPEG bytes re-encoded as PNG
        assert im.format == "PNG" and im.mode == "RGB"
        r, g, b = im.getpixel((4, 4))
        assert b > 240 and r < 15 and g < 15
    assert items[1]["image_0"] == str(root / "local" / "a.png")  # a path only: read in place
    assert items[1]["tags"] == {"collapsed_tag": ["Object"], "tag": ["Noun"], "secondary_tag": ["Symbolic"],
                                "num_main_preds": ["1"]}
    assert items[0]["tags"]["secondary_tag"] == []


def _parquet_root(tmp_path: Path) -> Path:
    root = tmp_path / "hf"
    (root / "data").mkdir(parents=True)
    (root / "local").mkdir()
    (root / "local" / "a.png").write_bytes(_png((9, 9, 9)))
    return root


def test_hf_parquet_rows_without_an_engine(tmp_path, monkeypatch):
    """The parquet row logic (bytes -> PNG, paths, tags, errors) on rows served by a stand-in for
    pandas.read_parquet, so it runs where pyarrow is absent."""
    root = _parquet_root(tmp_path)
    (root / "data" / "test-00000-of-00001.parquet").write_bytes(b"stand-in")
    frame = _parquet_frame()
    monkeypatch.setattr(pd, "read_parquet", lambda path: frame.copy())
    out = tmp_path / "prepared" / "images"
    _check_parquet_items(read_winoground_hf(root, image_dir=out), root, out)
    with pytest.raises(ValueError, match="Winoground item '0' image_0: the image is given as bytes but no image_dir"):
        read_winoground_hf(root)
    bad = frame.copy()
    bad.at[1, "image_0"] = {"bytes": None, "path": "../../outside.png"}
    monkeypatch.setattr(pd, "read_parquet", lambda path: bad)
    with pytest.raises(ValueError, match=r"Winoground item '1' image_0: filename '../../outside.png' is absolute"):
        read_winoground_hf(root, image_dir=out)
    bad = frame.copy()
    bad.at[0, "image_1"] = {"bytes": b"not an image", "path": None}
    monkeypatch.setattr(pd, "read_parquet", lambda path: bad)
    with pytest.raises(ValueError, match="Winoground item '0' image_1: image bytes do not decode"):
        read_winoground_hf(root, image_dir=out)
    bad = frame.copy()
    bad.at[1, "image_1"] = {"bytes": None, "path": None}
    monkeypatch.setattr(pd, "read_parquet", lambda path: bad)
    with pytest.raises(ValueError, match="Winoground item '1' image_1: the image dict has neither bytes nor a path"):
        read_winoground_hf(root, image_dir=out)


@pytest.mark.skipif(not HAS_PARQUET, reason="neither pyarrow nor fastparquet is installed, so no parquet file can "
                                            "be written or read here (the row logic is tested with a stand-in)")
def test_hf_parquet_file(tmp_path):
    root = _parquet_root(tmp_path)
    _parquet_frame().to_parquet(root / "data" / "test-00000-of-00001.parquet")
    out = tmp_path / "prepared" / "images"
    _check_parquet_items(read_winoground_hf(root, image_dir=out), root, out)


def test_parquet_without_an_engine_says_what_to_install(tmp_path):
    if HAS_PARQUET:
        pytest.skip("a parquet engine is installed here")
    root = _parquet_root(tmp_path)
    (root / "data" / "test-00000-of-00001.parquet").write_bytes(b"PAR1")
    with pytest.raises(ImportError, match="needs pyarrow or fastparquet"):
        read_winoground_hf(root, image_dir=tmp_path / "out")


# ---------------------------------------------------------------- readers: tags
def test_tag_reader_on_the_real_meta_csv(shared_data):
    meta = shared_data / "winoground" / "winoground_meta.csv"
    diwan = shared_data / "winoground" / "diwan_new_tag_assignments.json"
    if not (meta.is_file() and diwan.is_file()):
        pytest.skip(f"real Winoground metadata ({meta}, {diwan}) is absent")
    tags = read_winoground_tags(meta, diwan)
    assert len(tags) == 400
    assert Counter(t["tags"]["collapsed_tag"][0] for t in tags.values()) == {"Relation": 233, "Object": 141, "Both": 26}
    assert Counter(t["tags"]["num_main_preds"][0] for t in tags.values()) == {"1": 292, "2": 108}
    assert tags["0"]["caption_0"] == "an old person kisses a young person"
    assert tags["0"]["caption_1"] == "a young person kisses an old person"
    assert tags["0"]["tags"]["tag"] == ["Adjective-Age"] and tags["0"]["tags"]["diwan"] == ["No Tag"]
    assert tags["2"]["tags"]["secondary_tag"] == ["Series"]
    assert tags["3"]["tags"]["collapsed_tag"] == ["Object"] and tags["3"]["tags"]["diwan"] == ["Ambiguously Correct"]
    assert tags["31"]["tags"]["diwan"] == ["Unusual Image", "Visually Difficult"]
    diwan_counts = Counter(x for t in tags.values() for x in t["tags"]["diwan"])
    assert diwan_counts["Complex Reasoning"] == 78 and diwan_counts["Non Minimal"] == 30
    # only the CSV, only the JSON
    assert "diwan" not in read_winoground_tags(meta)["0"]["tags"]
    only = read_winoground_tags(None, diwan)
    assert only["3"] == {"caption_0": None, "caption_1": None, "tags": {"diwan": ["Ambiguously Correct"]}}


def test_tag_reader_errors_name_the_item(tmp_path):
    csv_path = tmp_path / "meta.csv"
    csv_path.write_text("id,caption_0,caption_1,tag,secondary_tag,collapsed_tag,num_main_preds\n"
                        "0,a b,b a,Noun,,Object,1\n5,a c,,Noun,,Object,1\n")
    with pytest.raises(ValueError, match=r"item '5': caption_1 must be a non-empty string"):
        read_winoground_tags(csv_path)
    js = tmp_path / "diwan.json"
    js.write_text(json.dumps({"0": [], "9": "Visually Difficult"}))
    with pytest.raises(ValueError, match=r"item '9': expected a list of tag strings"):
        read_winoground_tags(None, js)
    with pytest.raises(ValueError, match="give meta_csv"):
        read_winoground_tags(None, None)


# ---------------------------------------------------------------- prepare / score
def test_prepare_none_and_missing_data_are_unavailable_with_reasons(tmp_path):
    meta = prepare_winoground(WinogroundParams(source="none"), None, tmp_path / "a", seed=0)
    assert meta["available"] is False and "evaluate.winoground.source" in meta["reason"]
    assert read_suite(tmp_path / "a") == meta and meta["images"] == [] and meta["texts"] == []
    cfg = WinogroundParams(source="hf", dir=str(tmp_path / "nowhere"))
    meta = prepare_winoground(cfg, None, tmp_path / "b", seed=0)
    assert meta["available"] is False and "evaluate.winoground.dir" in meta["reason"] and "nowhere" in meta["reason"]
    (tmp_path / "emptyrelease").mkdir()
    meta = prepare_winoground(WinogroundParams(source="hf", dir=str(tmp_path / "emptyrelease")), None,
                              tmp_path / "c", seed=0)
    assert meta["available"] is False and "evaluate.winoground.dir" in meta["reason"]
    assert "examples.jsonl" in meta["reason"]
    with pytest.raises(ValueError, match="needs the world config"):
        prepare_winoground(WinogroundParams(source="scene_world"), None, tmp_path / "d", seed=0)


def _oracle_cache(items, wrong: dict[str, str]) -> EmbeddingCache:
    """Item k gets axes 2k (image 0 / caption 0) and 2k + 1 (image 1 / caption 1): every score right. ``wrong``
    maps an item id to "text" (caption embeddings exchanged: text and image wrong) or "image1" (image 1 = image
    0: all ties, all wrong)."""
    d = 2 * len(items)
    imgs, txts = {}, {}
    for k, it in enumerate(items):
        e0, e1 = np.eye(d, dtype=np.float32)[2 * k], np.eye(d, dtype=np.float32)[2 * k + 1]
        mode = wrong.get(it["id"])
        imgs[it["image_0"]], imgs[it["image_1"]] = e0, (e0 if mode == "image1" else e1)
        txts[it["caption_0"]], txts[it["caption_1"]] = (e1, e0) if mode == "text" else (e0, e1)
    return EmbeddingCache(list(imgs), list(txts), np.stack(list(imgs.values())), np.stack(list(txts.values())))


def test_prepare_hf_with_tags_then_score(tmp_path):
    recs = [_record(i, collapsed_tag=c) for i, c in enumerate(["Object", "Relation", "Relation", "Both"])]
    root = _jsonl_release(tmp_path / "wino", recs)
    csv_path = tmp_path / "meta.csv"
    csv_path.write_text("id,caption_0,caption_1,tag,secondary_tag,collapsed_tag,num_main_preds\n"
                        + "".join(f"{i},a dog bites man {i},a man bites dog {i},Noun,,Object,1\n" for i in range(4)))
    diwan = tmp_path / "diwan.json"
    diwan.write_text(json.dumps({"0": [], "1": ["Visually Difficult"], "2": ["Visually Difficult", "Non Minimal"],
                                 "3": []}))
    cfg = WinogroundParams(source="hf", dir=str(root), meta_csv=str(csv_path), diwan_tags=str(diwan))
    out = tmp_path / "suite"
    meta = prepare_winoground(cfg, None, out, seed=0)
    assert meta["available"] is True and meta["source"] == "hf:jsonl" and meta["n_items"] == 4
    assert meta["images"] == sorted(str(root / "images" / f"ex_{i}_img_{k}.png") for i in range(4) for k in (0, 1))
    assert len(meta["texts"]) == 8
    assert meta["tag_counts"]["collapsed_tag"] == {"Both": 1, "Object": 1, "Relation": 2}  # the release's own tags
    assert meta["tag_counts"]["diwan"] == {"No Tag": 2, "Non Minimal": 1, "Visually Difficult": 2}
    items = json.loads((out / "items.json").read_text())["items"]
    assert items[2]["tags"]["diwan"] == ["Visually Difficult", "Non Minimal"]

    res = score_winoground(out, _oracle_cache(items, {"1": "text", "2": "image1"}))
    assert res["available"] is True and res["reason"] is None
    assert res["verdicts"]["text"] == {"0": True, "1": False, "2": False, "3": True}
    assert res["verdicts"]["image"] == {"0": True, "1": False, "2": False, "3": True}
    assert res["verdicts"]["group"] == {"0": True, "1": False, "2": False, "3": True}
    m = res["metrics"]
    assert (m["text"], m["image"], m["group"]) == (0.5, 0.5, 0.5)
    assert m["by_tag"]["collapsed_tag"]["Relation"] == {"text": 0.0, "image": 0.0, "group": 0.0}
    assert m["by_tag"]["diwan"]["No Tag"] == {"text": 1.0, "image": 1.0, "group": 1.0}
    assert res["n"]["items"] == 4 and res["n"]["collapsed_tag/Relation"] == 2
    assert res["n"]["diwan/Visually Difficult"] == 2
    suite_result("winoground", "base", None, res["metrics"], res["n"])  # fits the one result schema

    # a tag file whose captions disagree with the release is refused, naming the item
    csv_path.write_text("id,caption_0,caption_1,tag,secondary_tag,collapsed_tag,num_main_preds\n"
                        "2,a cat bites man 2,a man bites dog 2,Noun,,Object,1\n")
    with pytest.raises(ValueError, match=r"Winoground item '2': caption_0 .* differs"):
        prepare_winoground(cfg, None, tmp_path / "suite2", seed=0)


def test_score_unavailable_and_uncached(tmp_path):
    prepare_winoground(WinogroundParams(source="none"), None, tmp_path / "a", seed=0)
    cache = EmbeddingCache([], [], np.zeros((0, 2), np.float32), np.zeros((0, 2), np.float32))
    res = score_winoground(tmp_path / "a", cache)
    assert res["available"] is False and "evaluate.winoground.source" in res["reason"]
    assert res["metrics"] == {} and res["n"] == {} and res["verdicts"] == {}
    suite_result("winoground", "base", None, res["metrics"], res["n"], available=False, reason=res["reason"])
    root = _jsonl_release(tmp_path / "wino", [_record(0)])
    prepare_winoground(WinogroundParams(source="hf", dir=str(root)), None, tmp_path / "b", seed=0)
    with pytest.raises(KeyError, match="was not encoded"):
        score_winoground(tmp_path / "b", cache)


# ---------------------------------------------------------------- the scene world's Winoground
SMALL = WorldConfig(image_size=32, supersample=1)


def test_world_tag_schedule_matches_winoground_counts():
    tags = _schedule(world_tags_for(WorldConfig()), 400)
    collapsed = Counter(WORLD_TAGS.get(t, "Both") for t in tags)
    assert collapsed == {"Relation": 233, "Object": 141, "Both": 26}
    assert Counter(tags) == {k: int(v) for k, v in TAG_WEIGHTS.items()}
    assert set(Counter(_schedule(world_tags_for(WorldConfig()), 40))) == set(TAG_WEIGHTS)  # interleaved: all early
    two = WorldConfig(max_objects=2, object_count_weights=[1, 1])
    assert "Preposition" not in world_tags_for(two) and "Preposition" in world_tags_for(WorldConfig())
    assert WINOGROUND_STREAM not in (CORPUS_STREAM, BENCHMARK_STREAM)


def test_world_items_are_true_of_exactly_their_own_scene(tmp_path):
    t0 = time.perf_counter()
    items = generate_winoground(WorldConfig(), 400, tmp_path, seed=3)
    elapsed = time.perf_counter() - t0
    assert elapsed < 10, f"400 world items took {elapsed:.1f} s"
    assert Counter(it["collapsed_tag"] for it in items) == {"Relation": 233, "Object": 141, "Both": 26}
    assert [it["id"] for it in items] == [str(k) for k in range(400)]
    cfg = WorldConfig()
    sigs = set()
    for it in items:
        a, b = Scene.from_dict(it["scene_0"]), Scene.from_dict(it["scene_1"])
        validate_scene(a, cfg)
        validate_scene(b, cfg)
        c0, c1 = it["caption_0"], it["caption_1"]
        assert c0 != c1 and sorted(c0.split()) == sorted(c1.split()), it
        assert caption_holds(a, c0, cfg, strict=True) and caption_holds(b, c1, cfg, strict=True), it
        assert not caption_holds(b, c0, cfg, strict=False) and not caption_holds(a, c1, cfg, strict=False), it
        assert it["collapsed_tag"] == WORLD_TAGS[it["tag"]]
        assert it["num_main_preds"] == (2 if it["tag"] == "Preposition" else 1)
        sigs.update((scene_signature(a), scene_signature(b)))
    assert len(sigs) == 800  # no scene used twice
    # what each tag exchanges, on one item per tag
    first = {it["tag"]: it for it in reversed(items)}
    noun = first["Noun"]
    a, b = noun["scene_0"]["objects"], noun["scene_1"]["objects"]
    diff = [(x, y) for x, y in zip(a, b) if x != y]
    assert len(diff) == 2 and all({k for k in x if x[k] != y[k]} == {"shape"} for x, y in diff)
    assert {diff[0][0]["shape"], diff[1][0]["shape"]} == {diff[0][1]["shape"], diff[1][1]["shape"]}
    np_ = first["Noun Phrase"]
    a, b = np_["scene_0"]["objects"], np_["scene_1"]["objects"]
    diff = [(x, y) for x, y in zip(a, b) if x != y]
    assert len(diff) == 2 and all({k for k in x if x[k] != y[k]} <= {"row", "col"} for x, y in diff)
    col = first["Adjective-Color"]
    a, b = col["scene_0"]["objects"], col["scene_1"]["objects"]
    assert all({k for k in x if x[k] != y[k]} <= {"colour"} for x, y in zip(a, b))


def test_world_images_are_the_rendered_scenes(tmp_path):
    items = generate_winoground(SMALL, 12, tmp_path, seed=1)
    for it in items[:4]:
        for k in (0, 1):
            path = Path(it[f"image_{k}"])
            assert path.parent == tmp_path / "images" and path.name == f"w{int(it['id']):05d}_{k}.png"
            with Image.open(path) as im:
                got = np.asarray(im.convert("RGB"))
            want = np.asarray(render_scene(Scene.from_dict(it[f"scene_{k}"]), SMALL))
            assert np.array_equal(got, want)


def test_world_is_deterministic_and_seed_dependent(tmp_path):
    a = generate_winoground(SMALL, 30, tmp_path / "a", seed=5)
    b = generate_winoground(SMALL, 30, tmp_path / "b", seed=5)
    c = generate_winoground(SMALL, 30, tmp_path / "c", seed=6)
    strip = lambda items: [{k: v for k, v in it.items() if not k.startswith("image_")} for it in items]  # noqa: E731
    assert strip(a) == strip(b)
    assert all(Path(x["image_0"]).read_bytes() == Path(y["image_0"]).read_bytes() for x, y in zip(a, b))
    assert strip(a) != strip(c)


def test_world_never_uses_excluded_signatures(tmp_path):
    small = WorldConfig(image_size=32, supersample=1, shapes=["circle", "square", "star"],
                        colours={"red": (220, 40, 40), "blue": (45, 85, 225), "green": (40, 170, 60)})
    first = generate_winoground(small, 40, tmp_path / "a", seed=2)
    used = {scene_signature(Scene.from_dict(it[f"scene_{k}"])) for it in first for k in (0, 1)}
    second = generate_winoground(small, 40, tmp_path / "b", seed=2, exclude_signatures=used)
    again = {scene_signature(Scene.from_dict(it[f"scene_{k}"])) for it in second for k in (0, 1)}
    assert not used & again


def test_world_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="n_items"):
        generate_winoground(SMALL, 0, tmp_path, seed=0)
    with pytest.raises(ValueError, match="seed"):
        generate_winoground(SMALL, 1, tmp_path, seed=-1)
    with pytest.raises(ValueError, match="two related objects"):
        generate_winoground(WorldConfig(max_objects=1, object_count_weights=None), 1, tmp_path, seed=0)


def test_prepare_scene_world_then_score(tmp_path):
    cfg = WinogroundParams(source="scene_world", n_items=20)
    out = tmp_path / "suite"
    meta = prepare_winoground(cfg, SMALL, out, seed=4, exclude_signatures={"0,0:large/red/plain/circle"})
    assert meta["available"] and meta["source"] == "scene_world" and meta["n_items"] == 20
    assert len(meta["images"]) == 40 and all(Path(p).is_file() for p in meta["images"])
    assert all(p.startswith(str(out / "images")) for p in meta["images"])
    assert sum(meta["tag_counts"]["collapsed_tag"].values()) == 20
    items = json.loads((out / "items.json").read_text())["items"]
    assert set(items[0]) == {"id", "image_0", "image_1", "caption_0", "caption_1", "tags", "scene_0", "scene_1"}
    res = score_winoground(out, _oracle_cache(items, {"3": "text"}))
    assert res["metrics"]["group"] == pytest.approx(19 / 20) and res["verdicts"]["group"]["3"] is False
    assert res["n"]["items"] == 20
    assert sum(v for k, v in res["n"].items() if k.startswith("collapsed_tag/")) == 20
