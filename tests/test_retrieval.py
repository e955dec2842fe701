"""Retrieval suite (paper Tab. 3, Flickr30k R@K): R@K on hand-computed embeddings (several captions per image,
pessimistic ties), the readers on fixtures and on the real Flickr8k / COCO files, the scene-world generator and the
prepare / score round trip on fixed random embeddings."""

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from concrete_jungle.corpus.loaders import read_filename_list
from concrete_jungle.corpus.scene_world.captions import caption_holds
from concrete_jungle.corpus.scene_world.graph import Scene, scene_signature
from concrete_jungle.evaluation import retrieval as R
from concrete_jungle.evaluation.suite import EmbeddingCache, read_suite
from concrete_jungle.params import RetrievalParams, WorldConfig

WORLD = WorldConfig()


# ------------------------------------------------------------------------------------------------
# metrics
# ------------------------------------------------------------------------------------------------
# images A = (1, 0), B = (0, 1); captions t0, t1 of A and t2, t3 of B. Cosines with A: t0 0, t1 .894, t2 .447,
# t3 .949; with B: t0 1, t1 .447, t2 .894, t3 .316.
IMG = np.array([[1.0, 0.0], [0.0, 1.0]])
TXT = np.array([[0.0, 1.0], [2.0, 1.0], [1.0, 2.0], [3.0, 1.0]])
OWNER = np.array([0, 0, 1, 1])


def test_multi_caption_recall_by_hand():
    i2t, t2i = R.retrieval_ranks(IMG, TXT, OWNER)
    # A ranks t3 (B's) first, then t1: its *second* caption is at rank 1 (its first, t0, is last)
    # B ranks t0 (A's) first, then t2
    assert i2t.tolist() == [1, 1]
    # t0: B above A; t1: A first; t2: B first; t3: A above B
    assert t2i.tolist() == [1, 0, 0, 1]
    r = R.retrieval_recall(IMG, TXT, OWNER, ks=[1, 2])
    assert r["i2t"] == {"R@1": 0.0, "R@2": 1.0}  # A counts as a hit at K = 2 through its second caption only
    assert r["t2i"] == {"R@1": 0.5, "R@2": 1.0}  # per caption
    assert r["rsum"] == 2.5 and r["mean_recall"] == 2.5 / 4


def test_image_with_one_good_caption_among_three():
    # image 0 has three captions; only the third matches it, the first two match image 1 / 2
    img = np.eye(3)
    txt = np.array([[0.1, 1, 0], [0.1, 0, 1], [1, 0, 0], [0, 1, 0.1], [0, 0.1, 1]], dtype=float)
    owner = [0, 0, 0, 1, 2]
    i2t, t2i = R.retrieval_ranks(img, txt, owner)
    assert i2t[0] == 0  # its best caption (the third) beats every other image's caption
    assert t2i.tolist() == [1, 1, 0, 0, 0]
    # with the first caption exactly orthogonal to images 0 and 2, image 2 ties image 0 and ranks above it
    _, t2i = R.retrieval_ranks(img, np.array([[0, 1.0, 0], [1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0]]), [0, 0, 1, 2])
    assert t2i.tolist() == [2, 0, 0, 0]


def test_multi_positive_ranks_by_hand():
    # images A = (1, 0), B = (0, 1); t0 is A's caption and also true of B, t1 is B's only caption.
    img = np.array([[1.0, 0.0], [0.0, 1.0]])
    txt = np.array([[0.0, 1.0], [1.0, 0.2]])  # t0 looks like B, t1 like A
    # cosines: A-t0 0, A-t1 .981, B-t0 1, B-t1 .196. Single positive: each image's own caption ranks below the
    # other's, and each caption's own image below the other
    assert [r.tolist() for r in R.retrieval_ranks(img, txt, [0, 1])] == [[1, 1], [1, 1]]
    # t0 is a positive of B too: B's best caption is t0 (rank 0), t0's best image is B (rank 0)
    i2t, t2i = R.retrieval_ranks(img, txt, [0, 1], caption_positives=[[0, 1], [1]])
    assert i2t.tolist() == [1, 0] and t2i.tolist() == [0, 1]
    with pytest.raises(ValueError, match="caption 1 lacks its own image 1"):
        R.retrieval_ranks(img, txt, [0, 1], caption_positives=[[0, 1], [0]])
    with pytest.raises(ValueError, match="one list of image rows per caption"):
        R.retrieval_ranks(img, txt, [0, 1], caption_positives=[[0, 1]])
    with pytest.raises(ValueError, match="names image 2, outside 0..1"):
        R.retrieval_ranks(img, txt, [0, 1], caption_positives=[[0, 2], [1]])
    for bad in ([0, 1.5], ["0"], 1, [True]):  # named, never cast (1.5 -> 1 would make a wrong positive)
        with pytest.raises(ValueError, match="caption_positives of caption 0 must be a list of integer image rows"):
            R.retrieval_ranks(img, txt, [0, 1], caption_positives=[bad, [1]])


def _clip_benchmark_recall(img, txt, positives, ks):
    """R@K as clip_benchmark 1.6.2 computes it (``recall_at_k`` over ``topk``, then "any positive in the top K")."""
    import torch
    from clip_benchmark.metrics.zeroshot_retrieval import recall_at_k

    img = torch.nn.functional.normalize(torch.as_tensor(img, dtype=torch.float64), dim=-1)
    txt = torch.nn.functional.normalize(torch.as_tensor(txt, dtype=torch.float64), dim=-1)
    pairs = torch.zeros(len(txt), len(img), dtype=torch.bool)
    for j, rows in enumerate(positives):
        pairs[j, rows] = True
    scores = txt @ img.T
    return {"i2t": {f"R@{k}": float((recall_at_k(scores.T, pairs.T, k) > 0).float().mean()) for k in ks},
            "t2i": {f"R@{k}": float((recall_at_k(scores, pairs, k) > 0).float().mean()) for k in ks}}


def test_recall_equals_clip_benchmark_on_a_tie_free_set():
    rng = np.random.default_rng(3)
    img, txt = rng.normal(size=(30, 8)), rng.normal(size=(90, 8))
    owner = np.repeat(np.arange(30), 3)
    single = [[int(i)] for i in owner]
    multi = [sorted({int(i), *rng.choice(30, size=int(rng.integers(0, 4)), replace=False).tolist()})
             for i in owner]
    for positives in (single, multi):
        ours = R.retrieval_recall(img, txt, owner, ks=[1, 5, 10], caption_positives=positives)
        theirs = _clip_benchmark_recall(img, txt, positives, [1, 5, 10])
        for d in ("i2t", "t2i"):
            assert ours[d] == pytest.approx(theirs[d], abs=1e-6)  # clip_benchmark averages in float32


def test_world_recall_does_not_depend_on_tie_order(tmp_path):
    # the scene world repeats caption texts across images ("a green heart"): identical texts embed identically, so
    # single-positive R@K rests on how exact ties are ordered; multi-positive R@K does not
    d, scenes = R.generate_world_retrieval(WORLD, 60, tmp_path / "w", seed=2)
    assert len(set(d.captions)) < len(d.captions)
    rng = np.random.default_rng(0)
    vocab = {t: rng.normal(size=6) for t in sorted(set(d.captions))}
    img = rng.normal(size=(60, 6))
    txt = np.stack([vocab[t] + 0.0 for t in d.captions])
    ks = [1, 5]
    base = R.retrieval_recall(img, txt, d.caption_image, ks, d.caption_positives)
    # clip_benchmark's topk breaks the exact ties its own way, and still agrees: identical texts share their
    # positives, so every exact tie falls among positives, where its order does not matter
    theirs = _clip_benchmark_recall(img, txt, d.caption_positives, ks)
    for direction in ("i2t", "t2i"):
        assert base[direction] == pytest.approx(theirs[direction], abs=1e-6)
    # the tie test: shuffling the rows (tied texts among them) leaves multi-positive R@K as it was
    for seed in range(3):
        perm = np.random.default_rng(seed).permutation(len(d.captions))
        shuffled = R.retrieval_recall(img, txt[perm], [d.caption_image[i] for i in perm], ks,
                                      [d.caption_positives[i] for i in perm])
        assert shuffled == base
        iperm = np.random.default_rng(seed).permutation(len(img))  # and the images' rows
        where = np.argsort(iperm)  # old image index -> new row
        moved = R.retrieval_recall(img[iperm], txt, [int(where[i]) for i in d.caption_image], ks,
                                   [sorted(int(where[j]) for j in pos) for pos in d.caption_positives])
        assert moved == base
    # single positive: the pessimistic rank counts the identical text of another image against the positive
    single = R.retrieval_recall(img, txt, d.caption_image, ks)
    assert single["t2i"]["R@1"] < base["t2i"]["R@1"]


def test_world_caption_positives_by_hand():
    from concrete_jungle.corpus.scene_world.graph import WorldObject

    def scene(*objs):
        return Scene(objects=[WorldObject(shape=s, colour=c, size="large", material="plain", row=r, col=k)
                              for s, c, r, k in objs])

    a = scene(("heart", "green", 0, 0), ("circle", "red", 1, 0))  # a green heart above a red circle
    b = scene(("heart", "green", 0, 1))
    c = scene(("heart", "blue", 0, 0), ("circle", "green", 1, 0))  # a blue heart above a green circle
    caps = ["a green heart", "a green heart", "a green heart above a red circle", "a green circle"]
    got = R.world_caption_positives(caps, [0, 1, 0, 2], [a, b, c], WORLD)
    assert got == [[0, 1], [0, 1], [0], [2]]
    with pytest.raises(ValueError, match="caption 0 \\('a red heart'\\) is not true of its own scene"):
        R.world_caption_positives(["a red heart"], [0], [a, b, c], WORLD)


def test_ties_rank_pessimistically():
    # two images with the same embedding and the same caption embedding: every positive ties a wrong candidate
    img = np.array([[1.0, 0.0], [1.0, 0.0]])
    txt = np.array([[2.0, 0.0], [1.0, 0.0]])
    i2t, t2i = R.retrieval_ranks(img, txt, [0, 1])
    assert i2t.tolist() == [1, 1] and t2i.tolist() == [1, 1]
    r = R.retrieval_recall(img, txt, [0, 1], ks=[1, 2])
    assert r["i2t"]["R@1"] == 0.0 and r["t2i"]["R@1"] == 0.0 and r["i2t"]["R@2"] == 1.0
    # a tie among an image's *own* captions costs nothing
    i2t, _ = R.retrieval_ranks(np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([[1.0, 0], [1.0, 0], [0, 1.0]]),
                               [0, 0, 1])
    assert i2t.tolist() == [0, 0]


def _naive_ranks(img, txt, owner):
    img = img / np.linalg.norm(img, axis=1, keepdims=True)
    txt = txt / np.linalg.norm(txt, axis=1, keepdims=True)
    s = img @ txt.T
    i2t = [min(sum(1 for j in range(len(txt)) if owner[j] != i and s[i, j] >= s[i, p])
               for p in range(len(txt)) if owner[p] == i) for i in range(len(img))]
    t2i = [sum(1 for i in range(len(img)) if i != owner[j] and s[i, j] >= s[owner[j], j]) for j in range(len(txt))]
    return i2t, t2i


def test_ranks_equal_a_naive_count_with_duplicates_and_blocks(monkeypatch):
    rng = np.random.default_rng(3)
    img = rng.normal(size=(9, 4)).round(1)
    img[4] = img[2]  # duplicate image
    owner = np.r_[np.arange(9), rng.integers(0, 9, size=14)]
    txt = img[owner] + rng.normal(scale=0.8, size=(len(owner), 4)).round(1)
    txt[5] = txt[11]
    want = _naive_ranks(img, txt, owner)
    got = R.retrieval_ranks(img, txt, owner)
    assert [g.tolist() for g in got] == [list(w) for w in want]
    monkeypatch.setattr(R, "_BLOCK", 7)  # blocks of one or two rows
    assert [g.tolist() for g in R.retrieval_ranks(img, txt, owner)] == [list(w) for w in want]


def test_recall_is_monotone_in_k_and_finite():
    rng = np.random.default_rng(0)
    owner = np.repeat(np.arange(30), 5)
    img = rng.normal(size=(30, 8))
    txt = img[owner] + rng.normal(scale=2.0, size=(150, 8))
    r = R.retrieval_recall(img, txt, owner, ks=range(1, 31))
    for d in ("i2t", "t2i"):
        vals = [r[d][f"R@{k}"] for k in range(1, 31)]
        assert vals == sorted(vals) and vals[-1] == 1.0 and all(0.0 <= v <= 1.0 for v in vals)
    assert 0 < r["i2t"]["R@1"] < 1 and 0 < r["t2i"]["R@1"] < 1


def test_recall_errors_name_the_problem():
    with pytest.raises(ValueError, match="image 1 has no caption"):
        R.retrieval_ranks(IMG, TXT[:2], [0, 0])
    with pytest.raises(ValueError, match="caption 2 points to image 5"):
        R.retrieval_ranks(IMG, TXT, [0, 1, 5, 1])
    with pytest.raises(ValueError, match="width"):
        R.retrieval_ranks(IMG, np.ones((4, 3)), OWNER)
    with pytest.raises(ValueError, match="NaN"):
        R.retrieval_ranks(np.array([[np.nan, 1.0], [0, 1]]), TXT, OWNER)
    with pytest.raises(ValueError, match="ks"):
        R.retrieval_recall(IMG, TXT, OWNER, ks=[0, 1])
    with pytest.raises(ValueError, match="integer"):
        R.retrieval_ranks(IMG, TXT, [0.0, 0.0, 1.0, 1.0])


# ------------------------------------------------------------------------------------------------
# readers on fixtures
# ------------------------------------------------------------------------------------------------
def _image(path: Path, colour=(200, 30, 30)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), colour).save(path)


def _karpathy(tmp_path, escape=False):
    root = tmp_path / "flickr30k"
    _image(root / "1.jpg")
    _image(root / "sub" / "2.jpg")
    _image(root / "3.jpg")
    images = [
        {"filename": "1.jpg", "split": "test", "sentences": [{"raw": "A dog runs."}, {"raw": "  a  brown dog "}]},
        {"filepath": "sub", "filename": "2.jpg", "split": "test", "sentences": [{"raw": "Two cats."}]},
        {"filename": "3.jpg", "split": "train", "sentences": [{"raw": "A train caption."}]},
        {"filename": "4.jpg", "split": "test", "sentences": [{"raw": "Its image is missing."}]},
    ]
    if escape:
        images.append({"filename": "../../outside.jpg", "split": "test", "sentences": [{"raw": "x"}]})
    (tmp_path / "dataset_flickr30k.json").write_text(json.dumps({"images": images, "dataset": "flickr30k"}))
    return tmp_path / "dataset_flickr30k.json", root


def test_read_karpathy_keeps_split_and_counts_missing(tmp_path):
    js, root = _karpathy(tmp_path)
    d = R.read_karpathy_retrieval(js, root, "test")
    assert d.images == [str(root / "1.jpg"), str(root / "sub" / "2.jpg")]
    assert d.captions == ["A dog runs.", "a brown dog", "Two cats."]
    assert d.caption_image == [0, 0, 1]
    assert d.skipped == {"other_split": 1, "image_missing": 1}
    assert R.read_karpathy_retrieval(js, root, "train").captions == ["A train caption."]


def test_read_karpathy_refuses_a_path_outside_its_root(tmp_path):
    js, root = _karpathy(tmp_path, escape=True)
    with pytest.raises(ValueError, match=r"images\[4\].*outside\.jpg"):
        R.read_karpathy_retrieval(js, root, "test")


def _flickr8k(tmp_path, names):
    d = tmp_path / "f8k"
    for n in ("a.jpg", "b.jpg"):
        _image(d / "images" / n)
    lines = [f"{n}#{k}\t{n} caption {k}" for n in ("a.jpg", "b.jpg", "c.jpg") for k in (1, 0)]
    (d / "token.txt").write_text("\n".join(lines) + "\n")
    (d / "test.txt").write_text("\n".join(names) + "\n")
    return d / "token.txt", d / "test.txt", d / "images"


def test_read_flickr8k_orders_captions_and_counts_missing(tmp_path):
    token, split, images = _flickr8k(tmp_path, ["b.jpg", "c.jpg", "a.jpg"])
    d = R.read_flickr8k_retrieval(token, split, images)
    assert d.images == [str(images / "b.jpg"), str(images / "a.jpg")]
    assert d.captions == ["b.jpg caption 0", "b.jpg caption 1", "a.jpg caption 0", "a.jpg caption 1"]
    assert d.caption_image == [0, 0, 1, 1]
    assert d.skipped == {"image_missing": 1}


def test_read_flickr8k_refuses_a_path_outside_its_root(tmp_path):
    token, split, images = _flickr8k(tmp_path, ["a.jpg", "../token.txt"])
    with pytest.raises(ValueError, match=r"line 2.*token\.txt"):
        R.read_flickr8k_retrieval(token, split, images)


def _coco(tmp_path):
    root = tmp_path / "val2017"
    for n in ("000000000001.jpg", "000000000002.jpg", "000000000009.jpg"):
        _image(root / n)
    data = {"images": [{"id": 1, "file_name": "000000000001.jpg"}, {"id": 2, "file_name": "000000000002.jpg"},
                       {"id": 3, "file_name": "000000000003.jpg"}],
            "annotations": [{"image_id": 1, "caption": "one a"}, {"image_id": 2, "caption": "two a"},
                            {"image_id": 1, "caption": "one b"}, {"image_id": 3, "caption": "three"}]}
    (tmp_path / "captions.json").write_text(json.dumps(data))
    return tmp_path / "captions.json", root


def test_read_coco_restricted_to_names(tmp_path):
    js, root = _coco(tmp_path)
    names = ["000000000002.jpg", "000000000001.jpg", "000000000003.jpg", "000000000009.jpg"]
    d = R.read_coco_retrieval(js, root, names)
    assert d.images == [str(root / "000000000002.jpg"), str(root / "000000000001.jpg")]
    assert d.captions == ["two a", "one a", "one b"] and d.caption_image == [0, 1, 1]
    assert d.skipped == {"image_missing": 1, "not_captioned": 1}
    assert len(R.read_coco_retrieval(js, root).images) == 2
    with pytest.raises(ValueError, match=r"file name 1.*\.\./x\.jpg"):
        R.read_coco_retrieval(js, root, ["000000000001.jpg", "../x.jpg"])
    with pytest.raises(ValueError, match="twice"):
        R.read_coco_retrieval(js, root, ["000000000001.jpg", "000000000001.jpg"])


# ------------------------------------------------------------------------------------------------
# the scene world, prepare and score
# ------------------------------------------------------------------------------------------------
def test_world_retrieval_is_true_deterministic_and_held_out(tmp_path):
    d1, scenes1 = R.generate_world_retrieval(WORLD, 12, tmp_path / "a", seed=5)
    d2, scenes2 = R.generate_world_retrieval(WORLD, 12, tmp_path / "b", seed=5)
    assert scenes1 == scenes2 and d1.captions == d2.captions and d1.caption_image == d2.caption_image
    assert (tmp_path / "a" / "r000001.png").read_bytes() == (tmp_path / "b" / "r000001.png").read_bytes()
    sigs = [scene_signature(Scene.from_dict(s)) for s in scenes1.values()]
    assert len(set(sigs)) == 12  # no scene twice
    for row, name in enumerate(scenes1):
        assert d1.images[row].endswith(name)
        caps = [c for c, i in zip(d1.captions, d1.caption_image) if i == row]
        assert len(caps) >= 3 and all(caption_holds(Scene.from_dict(scenes1[name]), c, WORLD, strict=True)
                                      for c in caps)
    excluded = set(sigs[::2])
    d3, scenes3 = R.generate_world_retrieval(WORLD, 12, tmp_path / "c", seed=5, exclude_signatures=excluded)
    assert not excluded & {scene_signature(Scene.from_dict(s)) for s in scenes3.values()}
    assert d3.skipped["seen_signature"] >= 1
    # its own seed stream: not the corpus's first scenes
    from concrete_jungle.corpus.scene_world.graph import CORPUS_STREAM, sample_scene, scene_rng
    corpus = {scene_signature(sample_scene(scene_rng(5, CORPUS_STREAM, k), WORLD)) for k in range(12)}
    assert corpus != set(sigs)


def _cfg(tmp_path, **extra):
    token, split, images = _flickr8k(tmp_path, ["a.jpg", "b.jpg"])
    sets = {"world": {"format": "scene_world", "n_images": 8},
            "f8k": {"format": "flickr8k", "token_file": str(token), "split_file": str(split), "image_dir": str(images)},
            "flickr30k": {"format": "flickr30k_karpathy", "dataset_json": str(tmp_path / "absent.json"),
                          "image_root": str(tmp_path)}, **extra}
    return RetrievalParams(sets=sets, ks=[1, 5])


def test_prepare_retrieval_layout_and_unavailable_set(tmp_path):
    meta = R.prepare_retrieval(_cfg(tmp_path), WORLD, tmp_path / "suite", seed=0)
    assert meta["available"] and meta["ks"] == [1, 5]
    assert meta["sets"]["flickr30k"]["available"] is False
    assert "dataset_json file not found" in meta["sets"]["flickr30k"]["reason"]
    assert meta["sets"]["world"]["n_images"] == 8 and meta["sets"]["f8k"]["n_captions"] == 4
    assert read_suite(tmp_path / "suite") == meta
    items = {n: json.loads((tmp_path / "suite" / "sets" / f"{n}.json").read_text()) for n in ("world", "f8k")}
    assert items["f8k"]["image_ids"] == ["a.jpg", "b.jpg"]
    assert set(meta["images"]) == {p for it in items.values() for p in it["images"]}
    assert set(meta["texts"]) == {c for it in items.values() for c in it["captions"]}
    assert all(Path(p).is_file() for p in items["world"]["images"])
    assert items["world"]["image_ids"] == list(items["world"]["scenes"])


def test_prepare_retrieval_all_absent_is_unavailable_with_reason(tmp_path):
    cfg = RetrievalParams(sets={"f30k": {"format": "coco_karpathy", "dataset_json": str(tmp_path / "x.json"),
                                         "image_root": str(tmp_path / "none")}})
    meta = R.prepare_retrieval(cfg, None, tmp_path / "s", seed=0)
    assert meta["available"] is False and "f30k: image_root folder not found" in meta["reason"]
    assert meta["images"] == [] and meta["texts"] == []
    out = R.score_retrieval(tmp_path / "s", EmbeddingCache([], [], np.zeros((0, 4)), np.zeros((0, 4))))
    assert out["available"] is False and out["metrics"] == {} and "f30k" in out["unavailable"]
    assert R.prepare_retrieval(RetrievalParams(), None, tmp_path / "e", seed=0)["reason"].endswith("is empty)")


def test_prepare_retrieval_caps_with_a_seeded_sample(tmp_path):
    js, root = _coco(tmp_path)
    (tmp_path / "names.txt").write_text("000000000001.jpg\n000000000002.jpg\n")
    s = {"format": "coco_captions", "captions_json": str(js), "image_root": str(root),
         "filenames": str(tmp_path / "names.txt")}
    meta = R.prepare_retrieval(RetrievalParams(sets={"coco": s}), None, tmp_path / "s", seed=0)
    assert meta["sets"]["coco"]["n_images"] == 2 and meta["sets"]["coco"]["n_captions"] == 3
    with pytest.raises(ValueError, match="n_images"):
        RetrievalParams(sets={"coco": {**s, "n_images": 1}})


def test_score_retrieval_matches_the_metric_on_fixed_embeddings(tmp_path):
    meta = R.prepare_retrieval(_cfg(tmp_path), WORLD, tmp_path / "suite", seed=0)
    rng = np.random.default_rng(1)
    cache = EmbeddingCache(meta["images"], meta["texts"], rng.normal(size=(len(meta["images"]), 6)).astype(np.float32),
                           rng.normal(size=(len(meta["texts"]), 6)).astype(np.float32))
    out = R.score_retrieval(tmp_path / "suite", cache)
    assert set(out["metrics"]) == {"world", "f8k"} and out["unavailable"].keys() == {"flickr30k"}
    item = json.loads((tmp_path / "suite" / "sets" / "world.json").read_text())
    want = R.retrieval_recall(cache.image(item["images"]), cache.text(item["captions"]), item["caption_image"], [1, 5],
                              item["caption_positives"])
    assert out["metrics"]["world"] == want
    assert out["n"]["world_images"] == 8 and out["n"]["world_captions"] == len(item["captions"])
    assert out["n"]["world_positive_pairs"] == sum(map(len, item["caption_positives"])) > len(item["captions"])
    assert out["n"]["f8k_positive_pairs"] == out["n"]["f8k_captions"] == 4
    v = out["verdicts"]["world"]
    assert len(v["i2t"]) == 8 and len(v["t2i"]) == len(item["captions"])
    assert np.mean(list(v["i2t"].values())) == want["i2t"]["R@1"]
    assert np.mean(list(v["t2i"].values())) == want["t2i"]["R@1"]
    assert "r000001.png#0" in v["t2i"]
    assert R.score_retrieval(tmp_path / "suite", cache, ks=[2])["metrics"]["f8k"]["i2t"].keys() == {"R@2"}


# ------------------------------------------------------------------------------------------------
# real data
# ------------------------------------------------------------------------------------------------
def test_real_flickr8k_test_split(shared_data):
    f = shared_data / "flickr8k"
    split = f / "text" / "Flickr_8k.testImages.txt"
    d = R.read_flickr8k_retrieval(f / "text" / "Flickr8k.token.txt", split, f / "images")
    assert len(d.images) == 125 and len(d.captions) == 625
    assert np.bincount(d.caption_image).tolist() == [5] * 125
    assert d.skipped["image_missing"] == len(read_filename_list(split)) - 125  # the rest of the split is absent


def test_real_sugarcrepe_coco_images(shared_data):
    names = read_filename_list(shared_data / "sugarcrepe" / "sugarcrepe_images_present.txt")
    js = shared_data / "coco" / "annotations" / "captions_val2017.json"
    d = R.read_coco_retrieval(js, shared_data / "coco" / "val2017", names)
    assert len(d.images) == 167 and d.skipped == {}
    assert [Path(p).name for p in d.images] == names
    data = json.loads(js.read_text())
    ids = {im["file_name"]: im["id"] for im in data["images"]}
    per_image = np.bincount(d.caption_image)
    want = [sum(1 for a in data["annotations"] if a["image_id"] == ids[n]) for n in names]
    assert per_image.tolist() == want and min(want) >= 5
