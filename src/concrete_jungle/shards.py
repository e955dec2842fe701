"""Corpus anchors and ConcreteBatches as WebDataset tar shards (issue 21 item 3: out, and in as a stream).

The field's training format at scale: POSIX tar files of samples, each sample the files that share a key
(``<key>.png``, ``<key>.txt``, ...), read as a stream (``webdataset``). Two kinds:

* ``anchors`` (a corpus manifest): ``<key>.<jpg|png>`` the image's own bytes and ``<key>.txt`` its anchor caption,
  open_clip's layout, so ``open_clip_train --train-data 'shard-{000000..000009}.tar' --dataset-type webdataset``
  reads them as they are; ``<key>.json`` keeps the record's other fields (every caption, split, source).
* ``concretebatch`` (a ConcreteBatch, paper Sec. 2.2): the anchor as above with its ``caption``, plus
  ``<key>.neg.<jpg|png>`` the hard-negative image (absent for a text-only ConcreteBatch), ``<key>.neg.txt`` the
  hard-negative caption, and ``<key>.json`` the keyword, lemma, type, span, c_i (concreteness, 1-5) and paths.

The key is the record's id (``id`` / ``anchor_id``). Shards are ``shard-000000.tar`` ... of ``samples_per_shard``
samples in record order, written byte-identically for the same records (fixed mtime, owner and mode), each
atomically, then ``index.json`` (kind, sample counts, every shard's name, sample count and SHA-256), which
:func:`read_index` and :func:`check_shards` trust, so a folder half-written by a killed run is never read as
complete.

:class:`ShardStream` reads them back for training: an epoch's samples, in a seeded shard order, are dealt in
contiguous ranges to the (rank, DataLoader worker) slots, so that every sample is read by exactly one slot once an
epoch; a seeded shuffle buffer mixes each slot's range; a slot resumes mid-epoch by skipping what it yielded.
"""

from __future__ import annotations

import hashlib
import io as _io
import json
import os
import tarfile
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from torch.utils.data import IterableDataset

from concrete_jungle.io import atomic_write, read_json, write_json

__all__ = ["KINDS", "IMAGE_EXTENSIONS", "write_shards", "read_index", "iter_samples", "check_shards",
           "slot_range", "batch_order", "stream_steps", "ShardStream", "AnchorDecoder", "ConcreteBatchDecoder"]

KINDS = ("anchors", "concretebatch")
#: image file suffix -> the WebDataset extension written (open_clip reads "jpg;png;jpeg;webp")
IMAGE_EXTENSIONS = {".jpg": "jpg", ".jpeg": "jpg", ".png": "png", ".webp": "webp"}
INDEX = "index.json"
#: tar member metadata fixed for byte-identical shards
_TAR_META = {"mtime": 0.0, "user": "concrete-jungle", "group": "concrete-jungle", "mode": 0o444}


def _image_entry(path: str, what: str, key: str) -> tuple[str, bytes]:
    ext = IMAGE_EXTENSIONS.get(Path(path).suffix.lower())
    if ext is None:
        raise ValueError(f"shards: {what} of sample {key!r} is {path!r}; its suffix is not one of "
                         f"{sorted(IMAGE_EXTENSIONS)}")
    try:
        return ext, Path(path).read_bytes()
    except OSError as err:
        raise OSError(f"shards: cannot read the {what} of sample {key!r} ({path}): {err.strerror or err}") from err


def _sample(record: dict, kind: str, index: int) -> dict:
    """One record as a WebDataset sample ``{"__key__": key, ext: bytes}``.

    Raises:
        ValueError: naming the record (position and key) and the field it lacks, a ConcreteBatch c_i that is not a
            concreteness rating in [1, 5], a key holding ``.`` or ``/`` (WebDataset splits a member's name at its
            first dot), or an image suffix with no WebDataset extension.
        OSError: an image file that cannot be read, naming the sample and the path."""
    from concrete_jungle.concreteness import is_rating

    id_field, text_field = ("id", "anchor") if kind == "anchors" else ("anchor_id", "caption")
    need = (id_field, "image", text_field) + (("negative_caption",) if kind == "concretebatch" else ())
    for field in need:
        if not isinstance(record.get(field), str) or not record[field].strip():
            raise ValueError(f"shards ({kind}): record {index} ({record.get(id_field)!r}) lacks a non-empty "
                             f"string {field!r}")
    if kind == "concretebatch" and not is_rating(record.get("c_i")):
        raise ValueError(f"shards ({kind}): record {index} ({record[id_field]!r}) has c_i {record.get('c_i')!r}; "
                         f"expected a concreteness in [1, 5]")
    key = record[id_field]
    if "." in key or "/" in key:
        raise ValueError(f"shards ({kind}): record {index} has key {key!r}; a WebDataset key holds no '.' or '/'")
    ext, image = _image_entry(record["image"], "image", key)
    sample = {"__key__": key, ext: image, "txt": record[text_field].encode("utf-8")}
    if kind == "concretebatch":
        sample["neg.txt"] = record["negative_caption"].encode("utf-8")
        if record.get("negative_image"):
            neg_ext, neg = _image_entry(record["negative_image"], "negative_image", key)
            sample[f"neg.{neg_ext}"] = neg
    meta = {k: v for k, v in record.items() if k not in (text_field, "negative_caption")}
    sample["json"] = json.dumps(meta, ensure_ascii=False, sort_keys=True, allow_nan=False).encode("utf-8")
    return sample


def write_shards(records: Sequence[dict], out_dir: str | os.PathLike, kind: str, samples_per_shard: int) -> dict:
    """Write ``records`` as tar shards of ``samples_per_shard`` samples into ``out_dir`` (which the caller has
    emptied; :func:`concrete_jungle.cli.clear_outputs`), then ``index.json``. Returns the index.

    Raises:
        ValueError: an unknown ``kind``, ``samples_per_shard < 1``, no records, a key written twice (naming it), or
            a bad record (:func:`_sample`).
        OSError: an image that cannot be read; a shard that cannot be written (naming the path)."""
    import webdataset as wds

    if kind not in KINDS:
        raise ValueError(f"shards: kind must be one of {KINDS}, got {kind!r}")
    if samples_per_shard < 1:
        raise ValueError(f"shards: samples_per_shard must be >= 1, got {samples_per_shard}")
    out_dir = Path(out_dir)
    if not records:
        raise ValueError(f"shards ({kind}): no records to write to {out_dir}")
    out_dir.mkdir(parents=True, exist_ok=True)
    seen: dict[str, int] = {}
    shards = []
    for start in range(0, len(records), samples_per_shard):
        name = f"shard-{len(shards):06d}.tar"
        buf = _io.BytesIO()
        writer = wds.TarWriter(buf, encoder=False, **_TAR_META)
        try:
            for i in range(start, min(start + samples_per_shard, len(records))):
                try:
                    sample = _sample(records[i], kind, i)
                except ValueError as err:
                    raise ValueError(f"{err} (writing {out_dir})") from None
                if sample["__key__"] in seen:
                    raise ValueError(f"shards ({kind}): key {sample['__key__']!r} of record {i} was written "
                                     f"already by record {seen[sample['__key__']]}")
                seen[sample["__key__"]] = i
                writer.write(sample)
        finally:
            writer.close()  # on an error too: the buffer is dropped, nothing was written to out_dir for it
        data = buf.getvalue()
        with atomic_write(out_dir / name, mode="wb") as fh:
            fh.write(data)
        shards.append({"name": name, "samples": min(samples_per_shard, len(records) - start),
                       "sha256": hashlib.sha256(data).hexdigest()})
    index = {"kind": kind, "samples": len(records), "samples_per_shard": samples_per_shard, "shards": shards}
    if kind == "concretebatch":  # a loss that needs v' refuses a folder where some sample lacks it, before training
        index["negative_images"] = all(bool(r.get("negative_image")) for r in records)
    write_json(out_dir / INDEX, index)
    return index


def read_index(shard_dir: str | os.PathLike) -> dict:
    """The ``index.json`` of a shard folder.

    Raises:
        FileNotFoundError: no index (a folder never completed, or not a shard folder), naming it.
        ValueError: an index that is not of this format, naming the folder."""
    path = Path(shard_dir) / INDEX
    if not path.is_file():
        raise FileNotFoundError(f"shards: {path} not found (no shard folder, or one whose writing never finished)")
    index = read_json(path)
    if (not isinstance(index, dict) or index.get("kind") not in KINDS or not isinstance(index.get("shards"), list)
            or sum(s.get("samples", 0) for s in index["shards"]) != index.get("samples")):
        raise ValueError(f"shards: {path} is not a shard index (kind, samples and shards that add up to them)")
    return index


def iter_samples(shard_dir: str | os.PathLike, names: Sequence[str] | None = None) -> Iterator[dict]:
    """The raw samples (``{"__key__", "__url__", ext: bytes}``) of the folder's shards in index order, or of
    ``names``, through ``webdataset``'s own tar reader.

    Raises:
        FileNotFoundError / ValueError: as :func:`read_index`.
        ValueError: a shard that fails to decode, naming it (the samples before it in that shard were yielded)."""
    import webdataset as wds

    shard_dir = Path(shard_dir)
    names = [s["name"] for s in read_index(shard_dir)["shards"]] if names is None else list(names)
    for name in names:
        url = str(shard_dir / name)
        try:
            # one shard, read whole: the caller deals shards to ranks and workers (ShardStream), so webdataset's
            # own splitters (by worker, single node only) must not split it again
            yield from wds.WebDataset(url, shardshuffle=False, empty_check=False, nodesplitter=None,
                                      workersplitter=None)
        except Exception as err:  # webdataset raises tarfile / ValueError / OSError kinds
            raise ValueError(f"shards: {url} fails to decode: {type(err).__name__}: {err}") from err


def check_shards(shard_dir: str | os.PathLike) -> dict:
    """Verify every shard against the index (SHA-256 and sample count) before training reads them.

    Returns:
        ``{"shards": n, "samples": n}``.

    Raises:
        ValueError: naming each shard that is missing, altered (its SHA-256 differs) or holds another number of
            samples than the index says (the first 5, and how many)."""
    shard_dir = Path(shard_dir)
    index = read_index(shard_dir)
    bad = []
    for s in index["shards"]:
        path = shard_dir / s["name"]
        if not path.is_file():
            bad.append(f"{path} missing")
            continue
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != s["sha256"]:
            bad.append(f"{path} altered (SHA-256 differs from the index)")
            continue
        with tarfile.open(fileobj=_io.BytesIO(data)) as tar:  # samples: the distinct keys of the members
            n = len({m.name.split(".", 1)[0] for m in tar.getmembers() if m.isfile()})
        if n != s["samples"]:
            bad.append(f"{path} holds {n} samples, the index says {s['samples']}")
    if bad:
        raise ValueError(f"shards: {len(bad)} bad shard(s) in {shard_dir}: " + "; ".join(bad[:5]))
    return {"shards": len(index["shards"]), "samples": index["samples"]}


def slot_range(n: int, slot: int, slots: int) -> tuple[int, int]:
    """The positions ``[start, stop)`` of an epoch's ``n`` samples that slot ``slot`` of ``slots`` reads: contiguous,
    disjoint, covering ``[0, n)``, their sizes differing by at most one.

    Raises:
        ValueError: ``slots < 1`` or ``slot`` outside ``[0, slots)``."""
    if slots < 1 or not 0 <= slot < slots:
        raise ValueError(f"shards: slot {slot} of {slots} slots")
    return n * slot // slots, n * (slot + 1) // slots


def batch_order(samples: int, n: int, rank: int, world_size: int, num_workers: int) -> list[int]:
    """The worker of each batch a rank's ``DataLoader`` yields in an epoch of ``samples``: worker w's slot holds
    ``slot_range`` samples and makes ``floor(size / n)`` whole batches (``drop_last``), and the loader takes them
    round-robin, worker 0 first, skipping workers that are done (``num_workers`` 0 counts as one worker, the main
    process). Batch b of the epoch comes from worker ``batch_order(...)[b]``.

    Raises:
        ValueError: ``n < 1`` or a bad slot (:func:`slot_range`)."""
    if n < 1:
        raise ValueError(f"shards: batches of {n} samples")
    workers = max(1, num_workers)
    counts = [(lambda a, b: (b - a) // n)(*slot_range(samples, rank * workers + w, world_size * workers))
              for w in range(workers)]
    return [w for k in range(max(counts, default=0)) for w in range(workers) if k < counts[w]]


def stream_steps(samples: int, n: int, world_size: int, num_workers: int) -> int:
    """Batches of ``n`` every rank can take in an epoch of ``samples`` (the fewest any rank has,
    :func:`batch_order`): a data-parallel step needs every rank, so each takes this many and leaves the rest of its
    range, fewer than ``n`` a worker plus the surplus of up to one batch a worker over the poorest rank."""
    return min(len(batch_order(samples, n, r, world_size, num_workers)) for r in range(world_size))


class ShardStream(IterableDataset):
    """An epoch of a shard folder as a stream of samples for a ``torch.utils.data.DataLoader``.

    Order (depends on ``seed``, ``epoch``, the number of slots and ``shuffle_buffer`` only): the shards in the
    order of ``numpy.random.default_rng([seed, epoch]).permutation``; the epoch's samples in that order are dealt to
    the ``world_size x num_workers`` slots by :func:`slot_range` (rank r, worker w is slot ``r * num_workers + w``),
    each slot opening only the shards its range touches; within a slot a buffer of ``shuffle_buffer`` samples
    (0: none) drawn from ``default_rng([seed, epoch, slot])``. ``start`` skips the first samples a slot would yield
    (resuming mid-epoch: what it yielded before), undecoded. With ``seed_items``, a DataLoader worker seeds torch,
    numpy and ``random`` from (seed, epoch, the sample's key) before decoding it, so random transforms depend
    neither on how the samples are dealt to workers nor on where a run resumed (in the main process the global RNGs
    are drawn as they are, as for the map-style datasets).

    Args:
        shard_dir: a folder written by :func:`write_shards`.
        seed, epoch: the run's seed and the epoch (:meth:`set_epoch`).
        shuffle_buffer: samples held for the shuffle (>= 0).
        rank, world_size: this process's place among the data-parallel ranks; None: from ``torch.distributed``
            when it is initialised (when the stream is made, in the rank's process), else 0 and 1.
        start: samples each slot skips (>= 0): one number for every slot, or one for each DataLoader worker of this
            rank (indexed by worker id).
        decode: applied to each raw sample (``{"__key__", ext: bytes}``) as it is yielded; None yields it raw.
        seed_items: seed each decode in a worker (above).

    Raises:
        ValueError: a bad argument (naming it); while iterating, a shard that holds fewer samples than the index
            says or fails to decode (naming it).
    """

    def __init__(self, shard_dir: str | os.PathLike, *, seed: int, epoch: int = 0, shuffle_buffer: int = 0,
                 rank: int | None = None, world_size: int | None = None, start: int | Sequence[int] = 0,
                 decode=None, seed_items: bool = False) -> None:
        if shuffle_buffer < 0 or min([start] if isinstance(start, int) else [0, *start]) < 0:
            raise ValueError(f"ShardStream: shuffle_buffer ({shuffle_buffer}) and start ({start}) must be >= 0")
        if (rank is None) != (world_size is None):
            raise ValueError("ShardStream: give both rank and world_size, or neither")
        if world_size is not None and not 0 <= rank < world_size:
            raise ValueError(f"ShardStream: rank {rank} outside [0, {world_size})")
        if rank is None:  # resolved here, in the rank's own process: a DataLoader worker has no process group
            import torch.distributed as dist

            on = dist.is_available() and dist.is_initialized()
            rank, world_size = (dist.get_rank(), dist.get_world_size()) if on else (0, 1)
        self.shard_dir, self.index = Path(shard_dir), read_index(shard_dir)
        self.seed, self.epoch, self.shuffle_buffer, self.start = seed, epoch, shuffle_buffer, start
        self.rank, self.world_size, self.decode, self.seed_items = rank, world_size, decode, seed_items

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.index["samples"]

    def _slot(self) -> tuple[int, int, int]:
        """(slot, slots, this rank's worker id)."""
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
        return self.rank * workers + worker, self.world_size * workers, worker

    def _range(self, start: int, stop: int) -> Iterator[dict]:
        """The samples at positions ``[start, stop)`` of the epoch's shard order."""
        import numpy as np

        shards = self.index["shards"]
        order = np.random.default_rng([self.seed, self.epoch]).permutation(len(shards))
        pos = 0
        for k in order:
            shard = shards[int(k)]
            first, end = pos, pos + shard["samples"]
            pos = end
            if end <= start or first >= stop:
                continue
            want = range(max(start, first) - first, min(stop, end) - first)
            got = 0
            for i, sample in enumerate(iter_samples(self.shard_dir, [shard["name"]])):
                if i in want:
                    got += 1
                    yield sample
                if i + 1 >= want.stop:
                    break
            if got != len(want):
                raise ValueError(f"shards: {self.shard_dir / shard['name']} holds fewer samples than the index "
                                 f"says ({shard['samples']})")

    def _shuffled(self, samples: Iterator[dict], rng) -> Iterator[dict]:
        """``samples`` through a buffer of ``shuffle_buffer`` (0: as they come)."""
        if not self.shuffle_buffer:
            yield from samples
            return
        buf: list[dict] = []
        for sample in samples:
            if len(buf) < self.shuffle_buffer:
                buf.append(sample)
                continue
            j = int(rng.integers(len(buf)))
            buf[j], sample = sample, buf[j]
            yield sample
        for j in rng.permutation(len(buf)):
            yield buf[int(j)]

    def __iter__(self) -> Iterator:
        import itertools

        import numpy as np

        from torch.utils.data import get_worker_info

        from concrete_jungle.datasets import seed_item

        slot, slots, worker = self._slot()
        start, stop = slot_range(self.index["samples"], slot, slots)
        skip = self.start if isinstance(self.start, int) else self.start[worker]
        rng = np.random.default_rng([self.seed, self.epoch, slot])
        seeded = self.seed_items and get_worker_info() is not None
        for sample in itertools.islice(self._shuffled(self._range(start, stop), rng), skip, None):
            if seeded:
                seed_item(self.seed, self.epoch, zlib.crc32(sample["__key__"].encode()))
            yield sample if self.decode is None else self.decode(sample)


def _decode_image(preprocess, sample: dict, prefix: str):
    from concrete_jungle.io import load_rgb

    ext = next((e for e in IMAGE_EXTENSIONS.values() if f"{prefix}{e}" in sample), None)
    if ext is None:
        raise ValueError(f"shards: sample {sample.get('__key__')!r} of {sample.get('__url__')} has no "
                         f"{prefix or 'anchor '}image member")
    return preprocess(load_rgb(_io.BytesIO(sample[f"{prefix}{ext}"])))


class AnchorDecoder:
    """An anchors shard sample as the training item of :class:`~concrete_jungle.datasets.AnchorDataset` with
    ``caption="anchor"``: ``(image [3, H, W], tokens [L])`` of the image and its ``.txt`` (the anchor caption).
    Picklable.

    Raises:
        ValueError: naming the sample's key and shard when it lacks its image or caption member."""

    def __init__(self, preprocess, tokenizer) -> None:
        self.preprocess, self.tokenizer = preprocess, tokenizer

    def __call__(self, sample: dict):
        if "txt" not in sample:
            raise ValueError(f"shards: sample {sample.get('__key__')!r} of {sample.get('__url__')} lacks its caption")
        return _decode_image(self.preprocess, sample, ""), self.tokenizer([sample["txt"].decode("utf-8")])[0]


class ConcreteBatchDecoder:
    """A ConcreteBatch shard sample as the training item :class:`~concrete_jungle.datasets.ConcreteBatchDataset`
    gives for the same record: ``(image [3, H, W], tokens [L], negative_image [3, H, W] or None, negative_tokens
    [L], c_i, valid)``, c_i the keyword's concreteness (1-5), ``valid`` False when the negative caption tokenises to
    the anchor's. Picklable (a ``ShardStream(decode=...)`` runs it in DataLoader workers).

    Raises:
        ValueError: naming the sample's key and shard when it lacks an image or caption member, or its c_i is not a
            rating (:func:`concrete_jungle.concreteness.is_rating`); OSError when an image does not decode."""

    def __init__(self, preprocess, tokenizer, negative_images: bool = True) -> None:
        self.preprocess, self.tokenizer, self.negative_images = preprocess, tokenizer, negative_images


    def __call__(self, sample: dict):
        import torch

        from concrete_jungle.concreteness import is_rating

        where = f"sample {sample.get('__key__')!r} of {sample.get('__url__')}"
        missing = [m for m in ("txt", "neg.txt", "json") if m not in sample]
        if missing:
            raise ValueError(f"shards: {where} lacks its {', '.join(repr('.' + m) for m in missing)} member(s)")
        c = json.loads(sample["json"]).get("c_i")
        if not is_rating(c):
            raise ValueError(f"shards: {where} has c_i {c!r}; expected a concreteness in [1, 5]")
        tok = self.tokenizer([sample["txt"].decode("utf-8")])[0]
        neg_tok = self.tokenizer([sample["neg.txt"].decode("utf-8")])[0]
        neg = _decode_image(self.preprocess, sample, "neg.") if self.negative_images else None
        return _decode_image(self.preprocess, sample, ""), tok, neg, neg_tok, float(c), not torch.equal(tok, neg_tok)
