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


# ---------------------------------------------------------------- in: ShardStream over ranks and workers
def _tiny_anchors(tmp_path, n=23):
    from PIL import Image

    (tmp_path / "img").mkdir(exist_ok=True)
    recs = []
    for i in range(n):
        path = tmp_path / "img" / f"a{i:03d}.png"
        Image.new("RGB", (4, 4), (i, 2 * i, 3 * i)).save(path)
        recs.append({"id": f"a{i:03d}", "image": str(path), "captions": [f"caption {i}"], "anchor": f"caption {i}"})
    return recs


def _keys(stream, workers):
    from torch.utils.data import DataLoader

    return [s["__key__"] for s in DataLoader(stream, batch_size=None, num_workers=workers)]


def test_slot_ranges_by_hand():
    from concrete_jungle.shards import slot_range

    assert [slot_range(10, s, 4) for s in range(4)] == [(0, 2), (2, 5), (5, 7), (7, 10)]
    assert [slot_range(3, s, 4) for s in range(4)] == [(0, 0), (0, 1), (1, 2), (2, 3)]
    with pytest.raises(ValueError, match="slot 4 of 4 slots"):
        slot_range(10, 4, 4)


def test_every_sample_once_an_epoch_over_two_ranks_and_two_workers(tmp_path):
    from concrete_jungle.shards import ShardStream

    recs = _tiny_anchors(tmp_path)
    write_shards(recs, tmp_path / "s", "anchors", samples_per_shard=4)  # 6 shards, the last of 3
    every = sorted(r["id"] for r in recs)
    for buffer in (0, 5):
        seen = {r: _keys(ShardStream(tmp_path / "s", seed=1, epoch=0, shuffle_buffer=buffer, rank=r, world_size=2),
                         workers=2) for r in (0, 1)}
        assert sorted(seen[0] + seen[1]) == every  # exactly once: no sample missed, none twice
        assert abs(len(seen[0]) - len(seen[1])) <= 2  # 23 samples over 4 slots: 5, 6, 6, 6
    one = _keys(ShardStream(tmp_path / "s", seed=1, epoch=0, shuffle_buffer=5), workers=0)
    assert sorted(one) == every and one == _keys(ShardStream(tmp_path / "s", seed=1, shuffle_buffer=5), workers=0)
    other_epoch = _keys(ShardStream(tmp_path / "s", seed=1, epoch=1, shuffle_buffer=5), workers=0)
    assert sorted(other_epoch) == every and other_epoch != one
    # resuming mid-epoch: a slot that yielded 7 samples skips them and yields the rest, in the same order
    assert _keys(ShardStream(tmp_path / "s", seed=1, shuffle_buffer=5, start=7), workers=0) == one[7:]


def test_a_short_shard_is_named_while_streaming(tmp_path):
    from concrete_jungle.shards import ShardStream

    write_shards(_tiny_anchors(tmp_path, 8), tmp_path / "s", "anchors", samples_per_shard=4)
    index = json.loads((tmp_path / "s" / "index.json").read_text())
    index["shards"][1]["samples"] += 1
    index["samples"] += 1
    (tmp_path / "s" / "index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match=r"shard-000001\.tar holds fewer samples than the index says \(5\)"):
        _keys(ShardStream(tmp_path / "s", seed=0), workers=0)
    with pytest.raises(ValueError, match="give both rank and world_size"):
        ShardStream(tmp_path / "s", seed=0, rank=1)
    with pytest.raises(ValueError, match=r"rank 2 outside \[0, 2\)"):
        ShardStream(tmp_path / "s", seed=0, rank=2, world_size=2)


def _gloo_worker(rank: int, port: int, shard_dir: str, out: str) -> None:
    import os

    import torch

    from concrete_jungle.shards import ShardStream

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    torch.distributed.init_process_group("gloo")
    keys = _keys(ShardStream(shard_dir, seed=3, shuffle_buffer=4), workers=2)  # rank from torch.distributed
    with open(os.path.join(out, f"rank{rank}.json"), "w") as fh:
        json.dump(keys, fh)
    torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_two_gloo_ranks_with_two_workers_read_each_sample_once(tmp_path):
    import socket

    import torch

    recs = _tiny_anchors(tmp_path, 17)
    write_shards(recs, tmp_path / "s", "anchors", samples_per_shard=3)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.multiprocessing.start_processes(_gloo_worker, args=(port, str(tmp_path / "s"), str(tmp_path)), nprocs=2,
                                          join=True, start_method="spawn")
    seen = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert sorted(seen[0] + seen[1]) == sorted(r["id"] for r in recs)
    assert {len(seen[0]), len(seen[1])} == {8, 9}  # 17 samples over 4 slots: 4, 4, 4, 5


def test_decoded_shard_items_equal_the_jsonl_datasets_items(tmp_path):
    """The trainer's two inputs agree: a ConcreteBatch read from shards decodes to ConcreteBatchDataset's items."""
    import torch
    from torchvision import transforms

    from concrete_jungle.datasets import ConcreteBatchDataset
    from concrete_jungle.shards import ConcreteBatchDecoder, ShardStream

    anchors = _tiny_anchors(tmp_path, 6)
    cb = [{"anchor_id": a["id"], "image": a["image"], "caption": a["anchor"], "keyword": "caption", "lemma": "caption",
           "type": "object", "span": [0, 7], "c_i": 3.0 + 0.25 * i,
           "negative_caption": a["anchor"] if i == 2 else a["anchor"].replace("caption", "picture"),
           "negative_image": anchors[(i + 1) % 6]["image"]} for i, a in enumerate(anchors)]
    write_shards(cb, tmp_path / "s", "concretebatch", samples_per_shard=4)
    preprocess = transforms.Compose([transforms.Resize(8), transforms.ToTensor()])
    vocab = {}

    def tokenizer(texts):
        return torch.tensor([[vocab.setdefault(w, len(vocab) + 1) for w in t.split()] + [0] * (4 - len(t.split()))
                             for t in texts])

    ref = ConcreteBatchDataset(cb, preprocess, tokenizer, cache=False)
    got = {s[0].sum().item(): s for s in ShardStream(tmp_path / "s", seed=0,
                                                       decode=ConcreteBatchDecoder(preprocess, tokenizer))}
    assert len(got) == 6
    for i in range(6):
        want = ref[i]
        item = got[want[0].sum().item()]
        for a, b in zip(item[:4], want[:4]):
            assert torch.equal(a, b)
        assert item[4:] == want[4:] and item[5] == (i != 2)  # record 2's negative caption equals its anchor
    bad = {"__key__": "a000", "__url__": "x.tar", "txt": b"a", "neg.txt": b"b", "json": b'{"c_i": 7}', "png": b""}
    with pytest.raises(ValueError, match=r"sample 'a000' of x.tar has c_i 7; expected a concreteness in \[1, 5\]"):
        ConcreteBatchDecoder(preprocess, tokenizer)(bad)


# ------------------------------------------------------------------------------------- the trainer's stream (in)
def test_batch_order_and_steps_by_hand():
    from concrete_jungle.shards import batch_order, stream_steps

    # 23 samples over 2 ranks x 2 workers: slots of 5, 6, 6, 6 -> whole batches of 2: 2, 3, 3, 3
    assert batch_order(23, 2, 0, 2, 2) == [0, 1, 0, 1, 1]
    assert batch_order(23, 2, 1, 2, 2) == [0, 1, 0, 1, 0, 1]
    assert stream_steps(23, 2, 2, 2) == 5  # every rank takes the poorer rank's 5
    assert batch_order(23, 4, 0, 1, 0) == [0] * 5 and stream_steps(23, 4, 1, 0) == 5  # in-process: one slot
    with pytest.raises(ValueError, match="batches of 0 samples"):
        batch_order(23, 0, 0, 1, 0)


def _key_batches(tmp_path, workers, epoch=0, batch_pos=0, steps=9, rank=0, world_size=1):
    from concrete_jungle.datasets import stream_batches
    from concrete_jungle.shards import ShardStream, stream_steps

    stream = ShardStream(tmp_path / "s", seed=5, shuffle_buffer=3, rank=rank, world_size=world_size,
                         decode=lambda sample: sample["__key__"])
    per_epoch = stream_steps(len(stream), 2, world_size, workers)
    return per_epoch, [b["keys"] for b in stream_batches(stream, 2, per_epoch, epoch, batch_pos, steps,
                                                          lambda keys: {"keys": list(keys)}, seed=5,
                                                          num_workers=workers)]


def test_stream_batches_cover_an_epoch_once_and_resume_to_the_same_batches(tmp_path):
    recs = _tiny_anchors(tmp_path, 23)
    write_shards(recs, tmp_path / "s", "anchors", samples_per_shard=4)
    for workers in (0, 2):
        per_epoch, run = _key_batches(tmp_path, workers, steps=30)
        assert per_epoch == 11  # 23 // 2; with 2 workers 11 // 2 + 12 // 2 = 5 + 6
        first = [k for b in run[:per_epoch] for k in b]
        assert len(set(first)) == len(first) == 2 * per_epoch  # each sample at most once an epoch
        assert run[per_epoch:2 * per_epoch] != run[:per_epoch]  # the next epoch is another order
        for epoch, pos in ((0, 3), (1, 0), (1, per_epoch - 1)):  # a run stopped after that batch, resumed
            done = epoch * per_epoch + pos
            assert _key_batches(tmp_path, workers, epoch, pos, steps=30 - done)[1] == run[done:]
    # 2 ranks x 2 workers: the ranks' batches are disjoint and take the same number of steps
    ranks = [_key_batches(tmp_path, 2, steps=5, rank=r, world_size=2) for r in (0, 1)]
    assert ranks[0][0] == ranks[1][0] == 5
    keys = [k for _, batches in ranks for b in batches for k in b]
    assert len(keys) == len(set(keys)) == 20


def test_a_concretebatch_folder_records_its_negative_images_and_refuses_a_bad_rating(tmp_path):
    anchors = _tiny_anchors(tmp_path, 4)
    cb = [{"anchor_id": a["id"], "image": a["image"], "caption": a["anchor"], "negative_caption": "x " + a["anchor"],
           "c_i": 4.0, "negative_image": anchors[(i + 1) % 4]["image"] if i else None} for i, a in enumerate(anchors)]
    assert write_shards(cb, tmp_path / "a", "concretebatch", samples_per_shard=2)["negative_images"] is False
    assert write_shards(cb[1:], tmp_path / "b", "concretebatch", samples_per_shard=2)["negative_images"] is True
    assert "negative_images" not in write_shards(anchors, tmp_path / "c", "anchors", samples_per_shard=2)
    cb[2]["c_i"] = 5.5
    with pytest.raises(ValueError, match=r"record 2 \('a002'\) has c_i 5.5; expected a concreteness in \[1, 5\] "
                                         r"\(writing .*/d\)"):
        write_shards(cb, tmp_path / "d", "concretebatch", samples_per_shard=2)
    assert check_shards(tmp_path / "b") == {"shards": 2, "samples": 3}

