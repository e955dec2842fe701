"""WebDataset shards of anchors and ConcreteBatches (issue 21 item 3, "WebDataset out"): open_clip's layout, byte-
identical re-writes, the index, and damaged shards named."""

import hashlib
import json

import pytest

from concrete_jungle.shards import check_shards, iter_samples, read_index, write_shards


def _coco_records(shared_data, n=5):
    recs = []
    with open(shared_data / "coco" / "coco_pairs.jsonl", encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            recs.append({"id": f"coco_{r['image_id']:012d}", "image": str(shared_data / "coco" / r["image"]),
                         "captions": r["captions"], "anchor": max(r["captions"], key=lambda c: len(c.split())),
                         "split": "train"})
            if len(recs) == n:
                return recs
    return recs


def _concretebatch(anchors):
    """Hard negatives of the anchors: each anchor's image paired with the next anchor's image as v' (bytes only
    matter here), one keyword swapped in the caption."""
    out = []
    for i, a in enumerate(anchors):
        words = a["anchor"].split()
        out.append({"anchor_id": a["id"], "image": a["image"], "caption": a["anchor"], "keyword": words[1],
                    "lemma": words[1].lower(), "type": "object", "span": [len(words[0]) + 1,
                                                                         len(words[0]) + 1 + len(words[1])],
                    "c_i": 4.5, "negative_caption": " ".join([words[0], "zebra", *words[2:]]),
                    "negative_image": anchors[(i + 1) % len(anchors)]["image"]})
    return out


def test_anchor_shards_read_as_open_clip_reads_them(shared_data, tmp_path):
    import webdataset as wds

    anchors = _coco_records(shared_data)
    index = write_shards(anchors, tmp_path / "a", "anchors", samples_per_shard=2)
    assert [(s["name"], s["samples"]) for s in index["shards"]] == [
        ("shard-000000.tar", 2), ("shard-000001.tar", 2), ("shard-000002.tar", 1)]
    assert read_index(tmp_path / "a") == index and check_shards(tmp_path / "a") == {"shards": 3, "samples": 5}
    # open_clip_train's webdataset path: decode("pilrgb"), rename(image="jpg;png;jpeg;webp", text="txt")
    urls = [str(tmp_path / "a" / s["name"]) for s in index["shards"]]
    got = list(wds.WebDataset(urls, shardshuffle=False).decode("pilrgb")
               .rename(image="jpg;png;jpeg;webp", text="txt").to_tuple("image", "text"))
    assert [t for _, t in got] == [a["anchor"] for a in anchors]
    assert got[0][0].size == (640, 426) and got[0][0].mode == "RGB"  # COCO 139, decoded by Pillow
    raw = list(iter_samples(tmp_path / "a"))
    assert [s["__key__"] for s in raw] == [a["id"] for a in anchors]
    assert raw[0]["jpg"] == open(anchors[0]["image"], "rb").read()  # the file's own bytes, never re-encoded
    assert json.loads(raw[0]["json"])["captions"] == anchors[0]["captions"]


def test_concretebatch_shards_hold_the_quadruple_and_rewrite_byte_identically(shared_data, tmp_path):
    cb = _concretebatch(_coco_records(shared_data, 3))
    first = write_shards(cb, tmp_path / "x", "concretebatch", samples_per_shard=10)
    again = write_shards(cb, tmp_path / "y", "concretebatch", samples_per_shard=10)
    assert first == again
    assert (tmp_path / "x" / "shard-000000.tar").read_bytes() == (tmp_path / "y" / "shard-000000.tar").read_bytes()
    s = next(iter_samples(tmp_path / "x"))
    assert sorted(k for k in s if not k.startswith("__")) == ["jpg", "json", "neg.jpg", "neg.txt", "txt"]
    assert s["txt"].decode() == cb[0]["caption"] and s["neg.txt"].decode() == cb[0]["negative_caption"]
    assert s["neg.jpg"] == open(cb[1]["image"], "rb").read()
    meta = json.loads(s["json"])
    assert meta["c_i"] == 4.5 and meta["type"] == "object" and "caption" not in meta
    assert first["shards"][0]["sha256"] == hashlib.sha256(s and (tmp_path / "x" / "shard-000000.tar")
                                                          .read_bytes()).hexdigest()
    # a text-only ConcreteBatch (image_negatives: none) has no negative image member
    text_only = [{**r, "negative_image": None} for r in cb]
    write_shards(text_only, tmp_path / "t", "concretebatch", samples_per_shard=10)
    assert "neg.jpg" not in next(iter_samples(tmp_path / "t"))


def test_bad_records_and_damaged_shards_are_named(shared_data, tmp_path):
    anchors = _coco_records(shared_data, 3)
    with pytest.raises(ValueError, match=rf"record 1 \('{anchors[1]['id']}'\) lacks a non-empty string 'anchor'"):
        write_shards([anchors[0], {**anchors[1], "anchor": " "}], tmp_path / "b", "anchors", 2)
    with pytest.raises(ValueError, match=r"key 'a\.b'; a WebDataset key holds no '\.' or '/'"):
        write_shards([{**anchors[0], "id": "a.b"}], tmp_path / "b", "anchors", 2)
    with pytest.raises(ValueError, match=r"key 'coco_000000000139' of record 1 was written already by record 0"):
        write_shards([anchors[0], anchors[0]], tmp_path / "b", "anchors", 2)
    with pytest.raises(OSError, match=r"cannot read the image of sample 'coco_000000000139' \(.*nope\.jpg\)"):
        write_shards([{**anchors[0], "image": str(tmp_path / "nope.jpg")}], tmp_path / "b", "anchors", 2)
    with pytest.raises(ValueError, match=r"suffix is not one of"):
        write_shards([{**anchors[0], "image": str(tmp_path / "x.gif")}], tmp_path / "b", "anchors", 2)
    with pytest.raises(ValueError, match="kind must be one of"):
        write_shards(anchors, tmp_path / "b", "pairs", 2)
    with pytest.raises(FileNotFoundError, match="writing never finished"):
        read_index(tmp_path / "b")  # every failed write above left no index
    write_shards(anchors, tmp_path / "ok", "anchors", 2)
    shard = tmp_path / "ok" / "shard-000001.tar"
    data = bytearray(shard.read_bytes())
    data[600] ^= 0xFF  # one flipped byte inside the image member
    shard.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"1 bad shard\(s\) .*shard-000001\.tar altered"):
        check_shards(tmp_path / "ok")
    shard.write_bytes(bytes(data[:700]))  # a truncated shard: webdataset's reader fails on it, named
    with pytest.raises(ValueError, match=r"shard-000001\.tar fails to decode"):
        list(iter_samples(tmp_path / "ok", ["shard-000001.tar"]))
    shard.unlink()
    with pytest.raises(ValueError, match=r"shard-000001\.tar missing"):
        check_shards(tmp_path / "ok")
