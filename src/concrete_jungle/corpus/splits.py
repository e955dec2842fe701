"""Which corpus anchors are trained on: the held-out split.

A share ``corpus.heldout_fraction`` of the corpus images is held out of every training run (the base model, the
baselines and the ConcreteBatch fine-tunes). ConcretePlant still makes their hard negatives, which become the
held-out hard-negative suite: pairs of anchors never trained on, scored like SugarCrepe per keyword type and
concreteness bin (``../shared/notes/measuring-small-effects.md``). Membership is a seeded hash of the record id, so
it does not depend on the record order or on the other records.

Split hygiene: no corpus image is a benchmark image. The paper fine-tunes on the MS-COCO Karpathy train split
(Sec. 3 set-up); with ``restval`` that split draws on COCO val2014, which contains val2017, the image set of
SugarCrepe / SugarCrepe++. :func:`benchmark_image_ids` reads the images of the benchmarks named in
``corpus.exclude``, :func:`exclude_benchmark_images` drops them from the loaded corpus (counted per source) and
:func:`check_no_overlap` is the safety net run on the final manifest.

Image identity (an :data:`ImageKey`) is a ``(namespace, id)`` pair, so COCO and Flickr ids never collide:

* ``("coco", 391895)``: the COCO image id, the same across 2014 and 2017 file names
  (``COCO_val2014_000000391895.jpg`` and ``000000391895.jpg``), see :func:`coco_image_id`;
* ``("flickr", "1000092795")``: the Flickr photo id, the file stem (``1000092795.jpg``, Flickr30k); a Flickr8k name
  ``<photo id>_<secret>.jpg`` maps to the same photo id, so Flickr8k and Flickr30k copies of a photo match
  (:func:`flickr_image_id`);
* ``("file", "<base name>")``: any other name, matched on the exact base name.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

__all__ = [
    "SPLITS",
    "is_heldout",
    "assign_splits",
    "training_records",
    "ImageKey",
    "EXCLUSION_SOURCES",
    "BenchmarkImages",
    "coco_image_id",
    "flickr_image_id",
    "image_key",
    "record_image_key",
    "benchmark_image_ids",
    "exclude_benchmark_images",
    "check_no_overlap",
]

logger = logging.getLogger(__name__)

SPLITS = ("train", "heldout")


def is_heldout(record_id: str, fraction: float, seed: int) -> bool:
    """Whether the record ``record_id`` is held out: the first 8 bytes of sha256(``"<seed>:<id>"``) as a fraction
    of 2^64 fall below ``fraction``.

    Raises:
        ValueError: ``fraction`` is not in [0, 1).
    """
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"corpus.heldout_fraction must be in [0, 1), got {fraction}")
    digest = hashlib.sha256(f"{seed}:{record_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def assign_splits(records: Sequence[dict], fraction: float, seed: int) -> list[dict]:
    """Copies of the manifest ``records`` with ``"split"`` set to ``"train"`` or ``"heldout"`` (:func:`is_heldout`).

    Raises:
        ValueError: a record without an ``id``; ``fraction`` out of range.
    """
    out = []
    for i, rec in enumerate(records):
        if "id" not in rec:
            raise ValueError(f"corpus record {i} has no 'id'")
        out.append({**rec, "split": "heldout" if is_heldout(str(rec["id"]), fraction, seed) else "train"})
    return out


def training_records(records: Iterable[dict]) -> list[dict]:
    """The manifest records a training run may see (``split`` absent or ``"train"``).

    Raises:
        ValueError: a record whose ``split`` is not one of :data:`SPLITS` (naming the record).
    """
    kept = []
    for rec in records:
        split = rec.get("split", "train")
        if split not in SPLITS:
            raise ValueError(f"corpus record {rec.get('id')!r} has split {split!r}; expected one of {SPLITS}")
        if split == "train":
            kept.append(rec)
    return kept


# --------------------------------------------------------------------------------------------- split hygiene
#: ``("coco", <int id>)``, ``("flickr", "<photo id>")`` or ``("file", "<base name>")`` (module docstring).
ImageKey = tuple[str, Union[int, str]]

#: The exclusion sources, in the order they are read, as named in the corpus metrics (``excluded``).
EXCLUSION_SOURCES = ("sugarcrepe", "sugarcrepe_pp", "karpathy_coco_test_val", "karpathy_flickr30k_test", "filenames")

# COCO 2014/2015 names (COCO_val2014_000000391895.jpg) and 2017 names (000000391895.jpg): a 12-digit zero-padded id
_COCO_NAME_RE = re.compile(r"^(?:COCO_(?:train|val|test)20(?:14|15)_)?(\d{12})\.(?:jpe?g|png)$", re.IGNORECASE)
# Flickr30k names (1000092795.jpg) and Flickr8k names (1000268201_693b08cb0e.jpg): the photo id leads
_FLICKR_NAME_RE = re.compile(r"^(\d{1,11})(?:_[0-9a-f]+)?\.(?:jpe?g|png)$", re.IGNORECASE)


def coco_image_id(filename: str | os.PathLike) -> int | None:
    """The COCO image id of a COCO 2014, 2015 or 2017 file name or path.

    ``COCO_val2014_000000391895.jpg``, ``COCO_train2014_000000391895.jpg``, ``000000391895.jpg`` and
    ``../coco/val2017/000000391895.jpg`` all give ``391895``: image identity across the Karpathy split (2014 names)
    and SugarCrepe (2017 names), paper Sec. 3 set-up.

    Args:
        filename: a file name or a path (only the base name is read); extension ``.jpg``, ``.jpeg`` or ``.png``.

    Returns:
        The integer id, or None when the name is not a COCO name (a COCO id is written with 12 digits, so a
        Flickr name such as ``1000092795.jpg`` is not one).
    """
    m = _COCO_NAME_RE.match(os.path.basename(os.fspath(filename)))
    return int(m.group(1)) if m else None


def flickr_image_id(filename: str | os.PathLike) -> str | None:
    """The Flickr photo id of a Flickr30k / Flickr8k file name or path, as a string.

    ``1000092795.jpg`` (Flickr30k) gives ``"1000092795"`` (the file stem); ``1000268201_693b08cb0e.jpg``
    (Flickr8k, ``<photo id>_<secret>``) gives ``"1000268201"``, so a Flickr8k image that is also a Flickr30k
    image matches it.

    Returns:
        The photo id, or None when the name is not a Flickr name (digits, optionally ``_<hex secret>``).
    """
    m = _FLICKR_NAME_RE.match(os.path.basename(os.fspath(filename)))
    return m.group(1) if m else None


def image_key(filename: str | os.PathLike, namespace: str | None = None) -> ImageKey:
    """The identity of an image file (module docstring): ``("coco", id)``, ``("flickr", photo id)`` or
    ``("file", base name)``.

    Args:
        filename: a file name or path.
        namespace: ``"coco"`` or ``"flickr"`` when the source is known (a name that does not parse in it falls
            back to ``("file", base name)``); None to infer it: a COCO name, else a Flickr name, else a file.

    Raises:
        ValueError: for another ``namespace``.
    """
    base = os.path.basename(os.fspath(filename))
    if namespace not in (None, "coco", "flickr"):
        raise ValueError(f"image_key: namespace must be 'coco', 'flickr' or None, got {namespace!r}")
    if namespace in (None, "coco"):
        cid = coco_image_id(base)
        if cid is not None:
            return ("coco", cid)
    if namespace in (None, "flickr"):
        fid = flickr_image_id(base)
        if fid is not None:
            return ("flickr", fid)
    return ("file", base)


_COCO_RID_RE = re.compile(r"^coco_(\d+)$")


def record_image_key(record: Mapping[str, Any]) -> ImageKey:
    """The identity of a manifest record's image.

    A ``coco_<id>`` record id (COCO and Karpathy loaders) gives ``("coco", id)``; a record whose id or ``source``
    starts with ``flickr`` is read in the Flickr namespace; any other record's ``image`` name is inferred
    (:func:`image_key`).

    Raises:
        ValueError: a record with neither a ``coco_<id>`` id nor an ``image``.
    """
    rid = str(record.get("id", ""))
    m = _COCO_RID_RE.match(rid)
    if m:
        return ("coco", int(m.group(1)))
    image = record.get("image")
    if not image:
        raise ValueError(f"corpus record {rid!r} has no 'image' to identify it by")
    flickr = rid.startswith("flickr") or str(record.get("source", "")).startswith("flickr")
    return image_key(image, "flickr" if flickr else None)


@dataclass(frozen=True)
class BenchmarkImages:
    """The benchmark images a corpus must not contain, per exclusion source (:data:`EXCLUSION_SOURCES`).

    ``by_source`` maps a source name to its image keys; a key can be in several sources (every SugarCrepe++
    image is a SugarCrepe image). ``key in images`` tests membership in any source.
    """

    by_source: dict[str, frozenset] = field(default_factory=dict)

    @property
    def keys(self) -> frozenset:
        """Every excluded image key (the union over sources)."""
        return frozenset().union(*self.by_source.values())

    def sources_of(self, key: ImageKey) -> list[str]:
        """The sources that hold ``key``, in source order."""
        return [s for s, keys in self.by_source.items() if key in keys]

    def __contains__(self, key: object) -> bool:
        return any(key in keys for keys in self.by_source.values())

    def __len__(self) -> int:
        return len(self.keys)

    def __bool__(self) -> bool:
        return any(self.by_source.values())


def _field(sources: Any, name: str, default: Any = None) -> Any:
    if sources is None:
        return default
    if isinstance(sources, Mapping):
        return sources.get(name, default)
    return getattr(sources, name, default)


def _read_json(path: Path, what: str) -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"{what}: file not found: {path}")
    with open(path, encoding="utf-8") as fh:
        try:
            return json.load(fh)
        except json.JSONDecodeError as err:
            raise ValueError(f"{what}: {path} is not valid JSON ({err})") from err


def _sugarcrepe_keys(folder: str | os.PathLike, what: str) -> frozenset:
    """COCO keys of every ``filename`` in the SugarCrepe-format ``*.json`` files of ``folder``."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{what}: benchmark folder not found: {folder}")
    keys, n_files = set(), 0
    for path in sorted(folder.glob("*.json")):
        data = _read_json(path, what)
        items = list(data.values()) if isinstance(data, dict) else data if isinstance(data, list) else []
        rows = [it for it in items if isinstance(it, dict) and "filename" in it]
        if not rows:  # not a subset file (meta.json, croissant_metadata.json, ...)
            logger.debug("%s: %s holds no items with a 'filename'; not a subset file", what, path)
            continue
        if len(rows) != len(items):
            raise ValueError(f"{what}: {path}: {len(items) - len(rows)} of {len(items)} items lack a 'filename'")
        n_files += 1
        keys.update(image_key(str(it["filename"]), "coco") for it in rows)
    if not n_files:
        raise ValueError(f"{what}: no SugarCrepe-format subset JSON (items with a 'filename') in {folder}")
    return frozenset(keys)


def _karpathy_keys(path: str | os.PathLike, splits: Sequence[str], namespace: str, what: str) -> frozenset:
    """Keys of the images of ``splits`` in a Karpathy split file (``dataset_coco.json``, ``dataset_flickr30k.json``)."""
    data = _read_json(Path(path), what)
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise ValueError(f"{what}: {path} is not a Karpathy split file (needs a list 'images')")
    keys = set()
    for k, img in enumerate(data["images"]):
        if not isinstance(img, dict) or "split" not in img or "filename" not in img:
            raise ValueError(f"{what}: {path}: images[{k}] lacks 'split'/'filename'")
        if img["split"] not in splits:
            continue
        if namespace == "coco" and img.get("cocoid") is not None:
            keys.add(("coco", int(img["cocoid"])))
        else:
            keys.add(image_key(str(img["filename"]), namespace))
    if not keys:
        raise ValueError(f"{what}: {path} has no image in split(s) {list(splits)}")
    return frozenset(keys)


def _filename_list_keys(paths: Iterable[str | os.PathLike]) -> frozenset:
    from concrete_jungle.corpus.loaders import read_filename_list

    return frozenset(image_key(n) for p in paths for n in read_filename_list(p))


def benchmark_image_ids(sources: Any, *, filenames: Iterable[str | os.PathLike] = ()) -> BenchmarkImages:
    """Read the images of the benchmarks that a corpus must not contain (paper Sec. 3: the fine-tuning corpus is
    the COCO Karpathy train split, whose restval part overlaps the SugarCrepe val2017 images).

    Args:
        sources: ``corpus.exclude`` (:class:`concrete_jungle.params.CorpusExclusion`) or a mapping with the same
            fields, each a path relative to the working directory (the repository root for a stage), or None:

            * ``sugarcrepe``: SugarCrepe folder; every ``*.json`` whose items carry a ``filename`` (COCO val2017
              names) is read (other JSON, e.g. ``meta.json``, is passed over) -> source ``"sugarcrepe"``;
            * ``sugarcrepe_pp``: SugarCrepe++ folder, the same way -> ``"sugarcrepe_pp"``;
            * ``karpathy_coco``: ``dataset_coco.json``; its ``test`` and ``val`` images (``cocoid``, else the id in
              the file name) -> ``"karpathy_coco_test_val"``;
            * ``karpathy_flickr30k``: ``dataset_flickr30k.json``; its ``test`` images (Flickr photo id = file stem)
              -> ``"karpathy_flickr30k_test"``;
            * ``filenames``: list of file-name lists (one name a line; each name's namespace inferred by
              :func:`image_key`) -> ``"filenames"``.
        filenames: further file-name lists, added to ``"filenames"`` (the stage passes
            ``corpus.coco.exclude_filenames``).

    Returns:
        :class:`BenchmarkImages` with one entry per configured source (none when nothing is configured).

    Raises:
        FileNotFoundError: a configured file or folder does not exist (naming it).
        ValueError: a file is not valid JSON or not in its format, a SugarCrepe folder holds no subset JSON, a
            Karpathy file has no image in the excluded splits, or a SugarCrepe item lacks its ``filename``.
    """
    by_source: dict[str, frozenset] = {}
    if _field(sources, "sugarcrepe"):
        by_source["sugarcrepe"] = _sugarcrepe_keys(_field(sources, "sugarcrepe"), "corpus.exclude.sugarcrepe")
    if _field(sources, "sugarcrepe_pp"):
        by_source["sugarcrepe_pp"] = _sugarcrepe_keys(_field(sources, "sugarcrepe_pp"),
                                                      "corpus.exclude.sugarcrepe_pp")
    if _field(sources, "karpathy_coco"):
        by_source["karpathy_coco_test_val"] = _karpathy_keys(
            _field(sources, "karpathy_coco"), ("test", "val"), "coco", "corpus.exclude.karpathy_coco")
    if _field(sources, "karpathy_flickr30k"):
        by_source["karpathy_flickr30k_test"] = _karpathy_keys(
            _field(sources, "karpathy_flickr30k"), ("test",), "flickr", "corpus.exclude.karpathy_flickr30k")
    if isinstance(_field(sources, "filenames"), (str, os.PathLike)):
        raise ValueError("corpus.exclude.filenames must be a list of file-name lists, not a single path")
    lists = [*(_field(sources, "filenames") or []), *filenames]
    if lists:
        by_source["filenames"] = _filename_list_keys(lists)
    return BenchmarkImages(by_source)


def exclude_benchmark_images(records: Iterable[Mapping], excluded: BenchmarkImages) -> tuple[list, dict[str, int]]:
    """Drop the records whose image is a benchmark image.

    Args:
        records: manifest records (``id``, ``image``, ...), identified by :func:`record_image_key`.
        excluded: from :func:`benchmark_image_ids`.

    Returns:
        ``(kept, counts)``: the other records in order, and per source of ``excluded`` the number of corpus
        **images** it removed (0 included; an image in two sources counts in both, so the unique total is
        ``len(records) - len(kept)``).

    Raises:
        ValueError: a record that cannot be identified (:func:`record_image_key`).
    """
    counts = dict.fromkeys(excluded.by_source, 0)
    if not excluded:
        return list(records), counts
    kept = []
    for rec in records:
        hits = excluded.sources_of(record_image_key(rec))
        for s in hits:
            counts[s] += 1
        if not hits:
            kept.append(rec)
    return kept, counts


def check_no_overlap(records: Iterable[Mapping], excluded: BenchmarkImages | Iterable[ImageKey], where: str) -> None:
    """Safety net: fail when a corpus / training record's image is a benchmark image (paper Sec. 3 set-up:
    the benchmarks are evaluated zero-shot, so their images must never be fine-tuned on).

    Args:
        records: manifest records (identified by :func:`record_image_key`).
        excluded: :class:`BenchmarkImages`, or any collection of :data:`ImageKey`.
        where: what is checked, for the message (e.g. ``"corpus manifest (real)"``).

    Raises:
        ValueError: ``"<where>: N training image(s) are benchmark images, e.g. <up to 5 examples>"``; each example
            names the record id, its image and the benchmark sources holding it.
    """
    if not isinstance(excluded, BenchmarkImages):
        excluded = BenchmarkImages({"excluded": frozenset(excluded)})
    if not excluded:
        return
    bad = []
    for rec in records:
        key = record_image_key(rec)
        if key in excluded:
            bad.append((rec, key))
    if bad:
        examples = "; ".join(f"{rec.get('id')!r} ({rec.get('image')}, {key[0]} {key[1]} in "
                             f"{', '.join(excluded.sources_of(key))})" for rec, key in bad[:5])
        raise ValueError(f"{where}: {len(bad)} training image(s) are benchmark images, e.g. {examples}")
