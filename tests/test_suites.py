"""The shared evaluation interface (suite.json, EmbeddingCache, one result schema), the held-out split and suite,
the embed step, the grid's family layout and the keywords stage's context rule."""

import json
import re

import numpy as np
import pytest

from concrete_jungle.corpus.splits import assign_splits, is_heldout, training_records
from concrete_jungle.evaluation.heldout import (TEXT_ITEMS, bin_label, coco_text_pairs, heldout_verdicts,
                                                prepare_heldout, score_heldout, score_heldout_text, text_verdicts)
from concrete_jungle.evaluation.suite import EmbeddingCache, read_suite, suite_result, unavailable, write_suite
from concrete_jungle.grid import family_members, family_of, member_path, model_dir, train_metrics_dir
from concrete_jungle.io import read_jsonl
from concrete_jungle.params import load_params


# ------------------------------------------------------------------------------------------- EmbeddingCache
def test_embedding_cache_round_trip_is_byte_identical(tmp_path):
    rng = np.random.default_rng(0)
    cache = EmbeddingCache(["a.png", "b.png"], ["x", "y", "z"], rng.normal(size=(2, 4)).astype(np.float32),
                           rng.normal(size=(3, 4)).astype(np.float32))
    cache.save(tmp_path / "one")
    cache.save(tmp_path / "two")
    for name in ("images.npy", "texts.npy", "index.json"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    back = EmbeddingCache.load(tmp_path / "one")
    np.testing.assert_array_equal(back.text(["z", "x"]), cache.texts[[2, 0]])
    np.testing.assert_array_equal(back.image(["b.png"]), cache.images[[1]])
    assert back.dim == 4
    with pytest.raises(KeyError, match="image 'c.png' was not encoded"):
        back.image(["a.png", "c.png"])
    with pytest.raises(ValueError, match="2 image keys for 1 rows"):
        EmbeddingCache(["a", "b"], [], np.zeros((1, 4)), np.zeros((0, 4)))


def test_suite_json_and_result_schema(tmp_path):
    a, b = tmp_path / "a.png", tmp_path / "b.png"
    a.write_bytes(b"abc")
    b.write_bytes(b"abd")
    meta = write_suite(tmp_path, {"suite": "s", "available": True, "images": [str(b), str(a), str(b)],
                                  "texts": ["t"]})
    assert meta["images"] == [str(a), str(b)] and read_suite(tmp_path) == meta and meta["reason"] is None
    # every image named by its content too: md5("abc")
    assert meta["image_md5"][str(a)] == "900150983cd24fb0d6963f7d28e17f72"
    with pytest.raises(ValueError, match="lists no inputs"):
        write_suite(tmp_path, {"suite": "s", "available": True})
    assert write_suite(tmp_path, unavailable("s", "no data"))["available"] is False
    with pytest.raises(FileNotFoundError, match="prepared suite not found"):
        read_suite(tmp_path / "nowhere")
    res = suite_result("s", "base", "models/x/checkpoint.pt", {"acc": 0.5}, {"all": 2})
    assert res == {"suite": "s", "model": "base", "checkpoint": "models/x/checkpoint.pt", "precision": "fp32",
                   "available": True, "reason": None, "metrics": {"acc": 0.5}, "n": {"all": 2}}
    with pytest.raises(ValueError, match=r"metrics.acc: non-finite"):
        suite_result("s", "base", None, {"acc": float("nan")}, {})
    with pytest.raises(ValueError, match="gives no reason"):
        suite_result("s", "base", None, {}, {}, available=False)


# ------------------------------------------------------------------------------------------- held-out split
def test_heldout_split_is_a_seeded_hash_of_the_id():
    ids = [f"w{i:06d}" for i in range(4000)]
    held = [is_heldout(i, 0.1, seed=0) for i in ids]
    assert 0.08 < np.mean(held) < 0.12  # about the fraction
    assert held == [is_heldout(i, 0.1, seed=0) for i in ids]  # deterministic
    assert held != [is_heldout(i, 0.1, seed=1) for i in ids]  # another seed, another split
    assert not any(is_heldout(i, 0.0, seed=0) for i in ids)
    records = assign_splits([{"id": i} for i in reversed(ids[:50])], 0.1, 0)
    assert [r["split"] == "heldout" for r in records] == list(reversed(held[:50]))  # order-free
    assert [r["id"] for r in training_records(records)] == [r["id"] for r in records if r["split"] == "train"]
    with pytest.raises(ValueError, match="split 'test'"):
        training_records([{"id": "a", "split": "test"}])
    with pytest.raises(ValueError, match="heldout_fraction"):
        is_heldout("a", 1.0, 0)


# ------------------------------------------------------------------------------------------- held-out suite
def _pair(aid, typ, c, img, neg_img):
    return {"anchor_id": aid, "image": img, "caption": f"cap {aid}", "negative_caption": f"neg {aid}",
            "type": typ, "c_i": c, "negative_image": neg_img, "keyword": "k"}


def test_heldout_verdicts_and_bins_by_hand(tmp_path):
    v = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    t = np.array([[1.0, 0.1], [0.0, 1.0], [1.0, 1.0]])
    tn = np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    out = heldout_verdicts(v, t, tn)
    assert out["i2t"].tolist() == [True, False, False]  # the third is a tie: wrong
    assert "t2i" not in out
    assert bin_label(4.0, [1, 3, 4, 4.5, 5]) == "[4.0, 4.5)" and bin_label(5.0, [1, 3, 4, 4.5, 5]) == "[4.5, 5.0]"
    with pytest.raises(ValueError, match="outside the bins"):
        bin_label(0.5, [1, 5])

    folder = tmp_path / "cp" / "hc"
    folder.mkdir(parents=True)
    for name in ("A.png", "A2.png", "B.png", "B2.png"):
        (tmp_path / name).write_bytes(name.encode())
    pairs = [_pair("a", "object", 4.9, str(tmp_path / "A.png"), str(tmp_path / "A2.png")),
             _pair("b", "relation", 2.0, str(tmp_path / "B.png"), str(tmp_path / "B2.png"))]
    (folder / "heldout.jsonl").write_text("\n".join(json.dumps(p) for p in pairs) + "\n")
    meta = prepare_heldout({"hc": folder}, tmp_path / "suite")
    assert meta["available"] and meta["images"] == [str(tmp_path / n) for n in ("A.png", "A2.png", "B.png", "B2.png")]
    img = {str(tmp_path / k): v for k, v in {"A.png": [1, 0], "A2.png": [0, 1], "B.png": [1, 0], "B2.png": [1, 0.1]}.items()}
    txt = {"cap a": [1, 0.2], "neg a": [0, 1], "cap b": [0.1, 1], "neg b": [1, 0]}
    cache = EmbeddingCache(list(img), list(txt), np.array(list(img.values()), float), np.array(list(txt.values()), float))
    res = score_heldout(tmp_path / "suite", cache, [1, 3, 4, 4.5, 5])
    m = res["metrics"]["hc"]
    # pair a: i2t right, t2i right (cap a is closer to A than to A2); pair b: i2t wrong (cap b ~ 0.1 < neg b = 1),
    # t2i wrong (cos(cap b, B) = 0.10 < cos(cap b, B2) = 0.20)
    assert m["i2t"] == 0.5 and m["t2i"] == 0.5 and m["by_type"]["object"]["i2t"] == 1.0 and m["by_type"]["relation"]["i2t"] == 0.0
    assert m["by_c_bin"]["[4.5, 5.0]"] == {"i2t": 1.0, "t2i": 1.0, "n": 1}
    assert res["n"] == {"hc": 2} and res["verdicts"] == {"hc": {"a": True, "b": False}}
    assert res["verdicts_extra"] == {"t2i": {"hc": {"a": True, "b": False}}}  # written beside I2T for the control
    (folder / "heldout.jsonl").write_text("")
    assert prepare_heldout({"hc": folder}, tmp_path / "empty")["available"] is False


def _coco(tmp_path, caps):
    """A COCO captions file of ``{image_id: [caption, ...]}`` (file names ``<id>.jpg``)."""
    data = {"images": [{"id": i, "file_name": f"{i}.jpg"} for i in caps],
            "annotations": [{"image_id": i, "caption": c} for i, cs in caps.items() for c in cs]}
    path = tmp_path / "captions.json"
    path.write_text(json.dumps(data))
    return path


def _rewrite(i, caption, neg, typ="attribute", c=4.5, keyword="k"):
    return {"anchor_id": f"coco_{i}", "image": f"{i}.jpg", "caption": caption, "negative_caption": neg, "type": typ,
            "c_i": c, "keyword": keyword}


def test_coco_text_pairs_exclude_the_corpus_and_take_the_longest_other_caption(tmp_path):
    caps = {5: ["a dog", "A dog."],  # the only other caption repeats the anchor (case, punctuation): no positive
            3: ["a red bus on the street", "a bus", "a big red bus parked on a street"],
            1: ["a man riding a horse", "a horse"],  # in the corpus: trained on
            2: ["one caption only here"],
            4: ["a cat on a sofa", "a small cat sleeping on a blue sofa"]}
    path = _coco(tmp_path, caps)
    rewrites = {"hc": [_rewrite(3, "a big red bus parked on a street", "a big blue bus parked on a street",
                                keyword="Red"),
                       _rewrite(1, "a man riding a horse", "a man riding a cow", "object"),
                       _rewrite(4, "a small cat sleeping on a blue sofa", "a small cat sleeping on a red sofa",
                                keyword="blue")]}
    pairs, stats = coco_text_pairs(path, rewrites, {"1.jpg"})
    assert [p["anchor_id"] for p in pairs["hc"]] == ["coco_3", "coco_4"]
    assert pairs["hc"][0] == {"anchor_id": "coco_3", "image": "3.jpg", "caption": "a big red bus parked on a street",
                              "positive_caption": "a red bus on the street",
                              "negative_caption": "a big blue bus parked on a street", "type": "attribute",
                              "c_i": 4.5, "keyword": "Red", "positive_names_keyword": True}
    assert pairs["hc"][1]["positive_caption"] == "a cat on a sofa"
    assert pairs["hc"][1]["positive_names_keyword"] is False  # "blue" is not in it
    assert stats == {"n_images": 2, "skipped": {"in_corpus": 1, "no_second_caption": 2, "beyond_max_pairs": 0}}
    # the first eligible images in image-id order: id 3 (1 is in the corpus, 2 has one caption), then 4 is beyond
    one, stats1 = coco_text_pairs(path, rewrites, {"1.jpg"}, max_pairs=1)
    assert [p["anchor_id"] for p in one["hc"]] == ["coco_3"] and stats1["skipped"]["beyond_max_pairs"] == 1
    with pytest.raises(ValueError, match="not the longest caption of 4.jpg"):
        coco_text_pairs(path, {"hc": [_rewrite(4, "a cat on a sofa", "a dog on a sofa")]}, set())
    with pytest.raises(ValueError, match="image 9.jpg is not in"):
        coco_text_pairs(path, {"hc": [_rewrite(9, "x", "y")]}, set())

    # the suite: text-side texts listed once each, TOT verdicts by hand
    folder = tmp_path / "cp" / "hc"
    folder.mkdir(parents=True)
    (folder / "heldout.jsonl").write_text("")
    meta = prepare_heldout({"hc": folder}, tmp_path / "suite", pairs, stats)
    assert meta["available"] and meta["images"] == [] and meta["n_text_pairs"] == {"hc": 2}
    assert len(meta["texts"]) == 6 and "a red bus on the street" in meta["texts"]  # anchors, positives, negatives
    vec = {"a big red bus parked on a street": [1, 0], "a red bus on the street": [1, 0.5],
           "a big blue bus parked on a street": [0, 1], "a small cat sleeping on a blue sofa": [0, 1],
           "a cat on a sofa": [1, 0.1], "a small cat sleeping on a red sofa": [1, 0]}
    cache = EmbeddingCache([], list(vec), np.zeros((0, 2)), np.array(list(vec.values()), float))
    res = score_heldout_text(tmp_path / "suite", cache, [1, 3, 4, 4.5, 5])
    # bus: cos(p, t) = 1 > cos(p, t') = 0.5: right; cat: cos(p, t) = 0.1 < cos(p, t') = 1: wrong
    assert res["verdicts"] == {"hc": {"coco_3": True, "coco_4": False}} and res["n"] == {"hc": 2}
    assert res["metrics"]["hc"]["tot"] == 0.5 and res["metrics"]["hc"]["by_type"] == {"attribute": {"tot": 0.5, "n": 2}}
    assert text_verdicts([[1, 0]], [[1, 0]], [[1, 0]]).tolist() == [False]  # a tie is wrong
    assert score_heldout(tmp_path / "suite", cache, [1, 5])["available"] is False  # no image pair: skipped
    with pytest.raises(ValueError, match="text-side pair 0 \\(coco_3\\) of hc lacks \\['keyword'\\]"):
        prepare_heldout({"hc": folder}, tmp_path / "bad", {"hc": [{**pairs["hc"][0], "keyword": None}]})
    # issue 22: a c_i outside the concreteness scale, or not a number, is named at preparation, not at scoring
    for bad in (5.5, 0.0, float("nan"), "4", True):
        with pytest.raises(ValueError, match=rf"text-side pair 0 \(coco_3\) of hc has c_i {re.escape(repr(bad))}: a "
                                             r"pair's concreteness must be a finite rating in \[1, 5\]"):
            prepare_heldout({"hc": folder}, tmp_path / "bad", {"hc": [{**pairs["hc"][0], "c_i": bad}]})
    image_pair = {"anchor_id": "w1", "image": "a.png", "caption": "a red cube", "negative_caption": "a blue cube",
                  "type": "attribute", "c_i": float("inf")}
    (folder / "heldout.jsonl").write_text(json.dumps(image_pair).replace("Infinity", "1e999") + "\n")
    with pytest.raises(ValueError, match=r"heldout\.jsonl: pair 0 \(w1\) has c_i inf: a pair's concreteness"):
        prepare_heldout({"hc": folder}, tmp_path / "bad")
    (folder / "heldout.jsonl").write_text("")
    prepare_heldout({"hc": folder}, tmp_path / "plain")
    assert not (tmp_path / "plain" / TEXT_ITEMS).exists()
    assert score_heldout_text(tmp_path / "plain", cache, [1, 5])["available"] is False


@pytest.mark.slow
def test_text_side_rewrites_feed_text_pairs_on_real_coco_captions(tmp_path, shared_data):
    """The text_side stage's rewrites (analysis/coco_concreteness.py, the real profile's lexical rewriter) on 12 real
    val2017 images become text-side pairs whose positive is another caption of the same image."""
    from analysis.coco_concreteness import run

    captions = shared_data / "coco/annotations/captions_val2017_subset.json"
    res = run(captions, "pipelines/real/params.yaml", 12, metrics_path=tmp_path / "m.json",
              examples_path=tmp_path / "e.md", pairs_dir=tmp_path / "pairs")
    assert list(res["datasets"]) == ["hc", "lc", "wo", "hc_type", "lc_type"]  # Table 1's three, then the rest
    assert res["datasets"]["hc"]["paper_mean_c"] == 4.77 and res["datasets"]["hc_type"]["paper_mean_c"] is None
    rewrites = {d: read_jsonl(tmp_path / "pairs" / f"{d}.jsonl") for d in ("hc", "lc")}
    assert len(rewrites["hc"]) == res["datasets"]["hc"]["n_kept"] >= 8
    first = rewrites["hc"][0]["image"]
    pairs, stats = coco_text_pairs(captions, rewrites, {first})
    assert stats["skipped"]["in_corpus"] == 1 and first not in {p["image"] for p in pairs["hc"]}
    data = json.loads(captions.read_text())
    name = {im["id"]: im["file_name"] for im in data["images"]}
    caps = {}
    for a in data["annotations"]:
        caps.setdefault(name[a["image_id"]], []).append(a["caption"].strip())
    for p in pairs["hc"] + pairs["lc"]:
        assert p["positive_caption"] in caps[p["image"]] and p["positive_caption"] != p["caption"]
        assert p["negative_caption"] != p["caption"] and 1 <= p["c_i"] <= 5


# ------------------------------------------------------------------------------------------- the grid's families
def test_family_layout_of_the_committed_grid():
    p = load_params("params.yaml")
    assert family_members(p, "cement") == ["hc-cement", "lc-cement", "wo-cement"]
    assert family_members(p, "base") == ["base"] and family_members(p, "clip") == ["clip"]
    with pytest.raises(ValueError, match="not in the grid"):
        family_members(p, "negclip")
    assert family_of("wo-infonce") == "infonce" and family_of("clip") == "clip"
    assert model_dir(p, "hc-cement").as_posix() == "models/world/cement/hc"
    assert model_dir(p, "base").as_posix() == "models/world/base"
    assert train_metrics_dir(p, "lc-infonce").as_posix() == "metrics/world/train/infonce/lc"
    assert member_path("clip").as_posix() == "clip"


# ------------------------------------------------------------------------------------------- keywords stage
def test_context_rule_after_mining_equals_mining_with_it():
    from concrete_jungle.concreteplant.keywords import (MiningStats, apply_context_rule, candidate_from_row,
                                                         candidate_to_row, mine_keywords)

    texts = ["A man in a red shirt riding a brown horse next to a wooden fence near the big old barn at dusk.",
             "A small dog on a couch.", "Two people sit on a bench beside the river under a tall green tree."]
    direct_stats, later_stats = MiningStats(), MiningStats()
    direct = mine_keywords(texts, context_length=12, stats=direct_stats)
    raw = mine_keywords(texts, context_length=None)
    rows = [[candidate_from_row(json.loads(json.dumps(candidate_to_row(c)))) for c in cands] for cands in raw]
    later = apply_context_rule(texts, rows, 12, later_stats)
    assert later == direct and later_stats == direct_stats
    assert direct_stats.beyond_context > 0 and direct_stats.truncated_captions >= 2
    assert len(rows[0]) > len(later[0])
    with pytest.raises(ValueError, match="3 captions but 2"):
        apply_context_rule(texts, rows[:2], 12)


# ------------------------------------------------------------------------------------------- embed step
class _FakeModel:
    """encode_image: the mean colour of each image (3-d); encode_text: (len, vowels, 1); counts every call."""

    def __init__(self):
        self.calls = {"image": 0, "text": 0}

    def encode_image(self, x):
        self.calls["image"] += len(x)
        return x.mean(dim=(2, 3)) + 0.01

    def encode_text(self, tokens):
        self.calls["text"] += len(tokens)
        return tokens.float()


class _FakeBundle:
    def __init__(self):
        import contextlib

        import torch

        self.model, self.device, self.embed_dim = _FakeModel(), torch.device("cpu"), 3
        self.preprocess_val = lambda im: torch.tensor(np.asarray(im, np.float32) / 255.0).permute(2, 0, 1)
        self.tokenizer = lambda texts: torch.tensor([[len(t), sum(c in "aeiou" for c in t), 1] for t in texts])
        self.autocast = contextlib.nullcontext


def test_embed_suites_encodes_each_input_once_in_suite_order(tmp_path):
    from PIL import Image

    from concrete_jungle.evaluation.embed import SUITE_ORDER, embed_suites

    assert SUITE_ORDER[0] == "benchmark" and SUITE_ORDER[-1] == "heldout"
    paths = {}
    for name, rgb in (("red", (255, 0, 0)), ("blue", (0, 0, 255)), ("grey", (90, 90, 90))):
        paths[name] = str(tmp_path / f"{name}.png")
        Image.new("RGB", (4, 4), rgb).save(paths[name])
    write_suite(tmp_path / "bench", {"suite": "benchmark", "available": True, "images": [paths["red"], paths["blue"]],
                                     "texts": ["a red box", "a blue box"]})
    write_suite(tmp_path / "probe", {"suite": "probe", "available": True, "images": [paths["blue"], paths["grey"]]})
    write_suite(tmp_path / "wino", unavailable("winoground", "no data"))
    bundles = {"m1": _FakeBundle(), "m2": _FakeBundle()}
    dirs = {"benchmark": tmp_path / "bench", "probe": tmp_path / "probe", "winoground": tmp_path / "wino"}
    outs = {s: {m: tmp_path / "emb" / s / m for m in bundles} for s in dirs}
    stats = embed_suites(bundles, dirs, outs, batch_size=1)
    assert stats["probe"] == {"available": True, "images": 2, "texts": 0, "new_images": 1, "new_texts": 0}
    assert stats["winoground"]["available"] is False and stats["winoground"]["images"] == 0
    assert bundles["m1"].model.calls == {"image": 3, "text": 2}  # blue is shared by two suites: encoded once
    probe = EmbeddingCache.load(outs["probe"]["m1"])
    bench = EmbeddingCache.load(outs["benchmark"]["m1"])
    np.testing.assert_array_equal(probe.image([paths["blue"]]), bench.image([paths["blue"]]))
    np.testing.assert_allclose(np.linalg.norm(probe.images, axis=1), 1.0, rtol=1e-6)  # cosine space
    # red (1, 0, 0) + 0.01 -> normalised
    np.testing.assert_allclose(bench.image([paths["red"]])[0], np.array([1.01, 0.01, 0.01]) / np.sqrt(1.0203),
                               rtol=1e-6)
    assert EmbeddingCache.load(outs["winoground"]["m2"]).images.shape == (0, 3)
    again = {s: {m: tmp_path / "again" / s / m for m in bundles} for s in dirs}
    embed_suites({"m1": _FakeBundle(), "m2": _FakeBundle()}, dirs, again, batch_size=2)  # other batches, same bytes
    for s in dirs:
        for name in ("images.npy", "texts.npy", "index.json"):
            assert (outs[s]["m1"] / name).read_bytes() == (again[s]["m1"] / name).read_bytes()


def test_set_precision_overrides_the_training_precision():
    from concrete_jungle.evaluation.embed import set_precision
    from concrete_jungle.params import ModelSpec

    class B:
        spec = ModelSpec(kind="world", name="cj-world-vit", precision="bf16")

    b = B()
    set_precision(b, "fp32")
    assert b.spec.precision == "fp32"
    with pytest.raises(ValueError, match="evaluate.precision"):
        set_precision(b, "fp16")


def test_a_failed_score_names_the_model_suite_and_cache(tmp_path, monkeypatch):
    # issue 22: NaN in an embedding cache (or any scorer error) used to name neither the model nor the file
    from pathlib import Path

    from concrete_jungle.evaluation.scoring import score_suite
    from concrete_jungle.grid import model_labels

    params = load_params(Path(__file__).resolve().parents[1] / "params.yaml")
    monkeypatch.chdir(tmp_path)
    write_suite(params.suite_dir("winoground"), {"suite": "winoground", "available": True, "texts": ["a", "b"]})
    first = model_labels(params)[0]
    cache_dir = params.data_dir / "embeddings" / "winoground" / member_path(first)
    EmbeddingCache([], ["a", "b"], np.zeros((0, 2), np.float32), np.array([[1, 0], [np.inf, 0]], np.float32)
                   ).save(cache_dir)
    with pytest.raises(ValueError, match=r"texts\.npy: 1 row\(s\) hold NaN or Inf, the first row 1 \('b'\)") as err:
        score_suite(params, "winoground", lambda folder, meta, cache: {})
    assert err.value.__notes__ == [f"while scoring suite 'winoground' for model {first!r} from the embedding cache "
                                   f"{cache_dir} and the prepared folder {params.suite_dir('winoground')}"]
