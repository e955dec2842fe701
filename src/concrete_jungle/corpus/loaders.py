"""Real-corpus loaders: COCO captions, the Karpathy split file and Flickr8k -> manifest records.

Every loader returns ``(records, skipped)``:

* ``records`` is a list of **manifest records** (docs/architecture.md, "Manifest record"):
  ``{"id", "image", "captions", "anchor", "source"}``. ``image`` is ``str(image_dir / file_name)``
  exactly as the caller spelled ``image_dir`` (pass a path relative to the repository root, e.g.
  ``../shared/data/coco/val2017``, to keep manifests portable). ``anchor`` is chosen by
  :func:`select_anchor` (paper Sec. 2.2 "Concreteness-Aware Keyword Sampling" and Appendix A.1:
  the longest caption is the anchor caption t_i).
* ``skipped`` is a dict ``reason -> count``. Reasons that count **images** (items):
  ``image_missing`` (listed, but the file is not in the image folder), ``excluded`` (its file name
  is in ``exclude_filenames``, e.g. the SugarCrepe images, so they are never trained on),
  ``no_caption`` (no non-empty caption), ``other_split`` (Karpathy/Flickr8k: not in the requested
  split), ``image_unreadable`` (the file is empty, truncated, corrupt or not an image) and
  ``image_too_large`` (more than ``PIL.Image.MAX_IMAGE_PIXELS`` pixels, a possible decompression
  bomb); the last two come from :func:`concrete_jungle.io.check_image`, run only on images that would
  otherwise be kept, and each such image is also named in a logged warning. Reasons that count
  **caption lines**: ``caption_empty`` (a blank caption dropped from an otherwise kept image),
  ``caption_unknown_image`` (a COCO annotation whose ``image_id`` is not in ``images``),
  ``malformed_line`` (a Flickr8k token line that is not ``name#k<TAB>caption``). Only reasons that
  occurred appear.

Records come out in a deterministic order: the order of the source file (COCO ``images``,
Karpathy ``images``, Flickr8k split list).
"""

from __future__ import annotations

import logging
import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from concrete_jungle.io import check_image, read_json

__all__ = [
    "select_anchor",
    "read_filename_list",
    "load_coco_captions",
    "load_karpathy",
    "load_flickr8k",
]

logger = logging.getLogger(__name__)
_COCO_ID_RE = re.compile(r"(\d+)\.(?:jpg|jpeg|png)$", re.IGNORECASE)


def select_anchor(captions: Sequence[str]) -> str:
    """Pick the anchor caption t_i of an image: the caption with the most whitespace-separated words.

    Paper Sec. 2.2 and Appendix A.1 ("the caption with the largest token count"); the tie rule is
    the project's (docs/architecture.md): more words wins, then more characters, then the first one.

    Args:
        captions: the image's captions (strings), in corpus order.

    Returns:
        The selected caption, unchanged.

    Raises:
        ValueError: if ``captions`` is empty.
        TypeError: if an element is not a string.
    """
    if len(captions) == 0:
        raise ValueError("select_anchor: captions is empty; an image needs at least one caption")
    best = None
    best_key = None
    for i, cap in enumerate(captions):
        if not isinstance(cap, str):
            raise TypeError(f"select_anchor: captions[{i}] is {type(cap).__name__}, expected str")
        key = (len(cap.split()), len(cap))
        if best_key is None or key > best_key:  # strict: the first of equals is kept
            best, best_key = cap, key
    return best


def read_filename_list(path: str | os.PathLike) -> list[str]:
    """Read a file that lists one image file name a line (blank lines ignored, whitespace stripped).

    Used for ``sugarcrepe_coco_val2017_filenames.txt`` and the Flickr8k split lists.

    Raises:
        FileNotFoundError: naming ``path`` when it does not exist.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"file-name list not found: {path}")
    with open(path, encoding="utf-8") as fh:
        return [line.strip() for line in fh if line.strip()]


def _coco_id(file_name: str) -> int | None:
    """COCO image id from a file name such as ``000000397133.jpg`` or ``COCO_val2014_000000397133.jpg``."""
    m = _COCO_ID_RE.search(os.path.basename(file_name))
    return int(m.group(1)) if m else None


def _clean_captions(raw: Iterable, skipped: Counter, where: str) -> list[str]:
    out = []
    for cap in raw:
        if not isinstance(cap, str):
            raise ValueError(f"{where}: caption {cap!r} is {type(cap).__name__}, expected str")
        cap = " ".join(cap.split())  # collapse newlines / repeated blanks, strip
        if cap:
            out.append(cap)
        else:
            skipped["caption_empty"] += 1
    return out


def _record(rid: str, image: Path, captions: list[str], source: str) -> dict:
    return {
        "id": rid,
        "image": str(image),
        "captions": captions,
        "anchor": select_anchor(captions),
        "source": source,
    }


def _unusable(image: Path, skipped: Counter) -> bool:
    """True when :func:`check_image` refuses ``image``; then its reason is counted in ``skipped`` and a warning
    names the file."""
    reason = check_image(image)
    if reason:
        skipped[reason] += 1
        logger.warning("skipping image %s: %s", image, reason)
    return reason is not None


def _listdir(image_dir: Path, what: str) -> set[str]:
    if not image_dir.is_dir():
        raise FileNotFoundError(f"{what}: image folder not found: {image_dir}")
    return set(os.listdir(image_dir))


def load_coco_captions(
    captions_json: str | os.PathLike,
    image_dir: str | os.PathLike,
    exclude_filenames: Iterable[str] | None = None,
    *,
    source: str = "coco",
) -> tuple[list[dict], dict[str, int]]:
    """Load a COCO ``captions_*.json`` into manifest records, keeping only images present on disk.

    Args:
        captions_json: COCO caption annotations (keys ``images`` with ``id``/``file_name`` and
            ``annotations`` with ``image_id``/``caption``).
        image_dir: folder holding the JPEGs; an image is kept only if ``image_dir/file_name`` exists.
        exclude_filenames: file names never to load (e.g. the SugarCrepe val2017 images, so the
            benchmark is never trained on). Matched on the base name.
        source: value of the records' ``source`` field.

    Returns:
        ``(records, skipped)``; record ids are ``coco_<12-digit image id>``. Skip reasons are checked
        in the order ``image_missing``, ``excluded``, ``no_caption``, then ``image_unreadable`` /
        ``image_too_large`` (module docstring; the image is decoded at 1/8 scale to check it).

    Raises:
        FileNotFoundError: if ``captions_json`` or ``image_dir`` does not exist.
        ValueError: if the JSON lacks ``images``/``annotations`` or an entry lacks its fields, or two
            ``images`` entries share an id.
    """
    data = read_json(captions_json)
    if not isinstance(data, dict) or "images" not in data or "annotations" not in data:
        raise ValueError(f"{captions_json}: not a COCO captions file (needs 'images' and 'annotations')")
    present = _listdir(Path(image_dir), "load_coco_captions")
    exclude = {os.path.basename(n) for n in (exclude_filenames or ())}
    skipped: Counter = Counter()

    images: dict[int, str] = {}
    for k, img in enumerate(data["images"]):
        try:
            iid, fname = int(img["id"]), str(img["file_name"])
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{captions_json}: images[{k}] lacks a valid 'id'/'file_name' ({err})") from err
        if iid in images:
            raise ValueError(f"{captions_json}: duplicate image id {iid} in 'images'")
        images[iid] = fname

    caps: dict[int, list] = {}
    for k, ann in enumerate(data["annotations"]):
        try:
            iid, cap = int(ann["image_id"]), ann["caption"]
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{captions_json}: annotations[{k}] lacks 'image_id'/'caption' ({err})") from err
        if iid not in images:
            skipped["caption_unknown_image"] += 1
            continue
        caps.setdefault(iid, []).append(cap)

    records = []
    for iid, fname in images.items():
        if fname not in present:
            skipped["image_missing"] += 1
            continue
        if fname in exclude:
            skipped["excluded"] += 1
            continue
        captions = _clean_captions(caps.get(iid, []), skipped, f"{captions_json} image {iid}")
        if not captions:
            skipped["no_caption"] += 1
            continue
        if _unusable(Path(image_dir) / fname, skipped):
            continue
        records.append(_record(f"coco_{iid:012d}", Path(image_dir) / fname, captions, source))
    return records, dict(skipped)


def load_karpathy(
    dataset_json: str | os.PathLike,
    image_root: str | os.PathLike,
    splits: Sequence[str] = ("train", "restval"),
    *,
    exclude_filenames: Iterable[str] | None = None,
    source: str = "coco_karpathy",
) -> tuple[list[dict], dict[str, int]]:
    """Load Karpathy's ``dataset_coco.json`` (the paper's corpus, Sec. 3 "MS-COCO Karpathy train split").

    Args:
        dataset_json: JSON with ``images[]``, each ``{"filepath", "filename", "split",
            "sentences": [{"raw": ...}, ...]}`` (``cocoid`` optional).
        image_root: the image of an entry is ``image_root/filepath/filename``.
        splits: Karpathy splits to keep (``train``, ``restval``, ``val``, ``test``).
        exclude_filenames: file names never to load. An entry is excluded when its file name matches
            or when its COCO image id equals the id in an excluded name, so the SugarCrepe val2017
            names (``000000397133.jpg``) also exclude ``COCO_val2014_000000397133.jpg``.
        source: value of the records' ``source`` field.

    Returns:
        ``(records, skipped)``; ids are ``coco_<12-digit cocoid>`` (or the file stem when no COCO id
        can be found). Skip order: ``other_split``, ``image_missing``, ``excluded``, ``no_caption``,
        ``image_unreadable`` / ``image_too_large``.

    Raises:
        FileNotFoundError: if ``dataset_json`` does not exist.
        ValueError: if ``images`` is missing, an entry lacks ``filename``/``split``/``sentences``,
            ``splits`` is empty, or two kept entries map to the same id.
    """
    if isinstance(splits, str) or len(splits) == 0:
        raise ValueError(f"load_karpathy: splits must be a non-empty sequence of names, got {splits!r}")
    data = read_json(dataset_json)
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise ValueError(f"{dataset_json}: not a Karpathy split file (needs a list 'images')")
    exclude_names = {os.path.basename(n) for n in (exclude_filenames or ())}
    exclude_ids = {i for i in (_coco_id(n) for n in exclude_names) if i is not None}
    wanted = set(splits)
    skipped: Counter = Counter()
    records, seen = [], set()
    for k, img in enumerate(data["images"]):
        try:
            fname, split, sentences = str(img["filename"]), str(img["split"]), img["sentences"]
        except (KeyError, TypeError) as err:
            raise ValueError(f"{dataset_json}: images[{k}] lacks 'filename'/'split'/'sentences' ({err})") from err
        if split not in wanted:
            skipped["other_split"] += 1
            continue
        rel = Path(str(img.get("filepath", ""))) / fname
        path = Path(image_root) / rel
        if not path.is_file():
            skipped["image_missing"] += 1
            continue
        cid = img.get("cocoid")
        cid = int(cid) if cid is not None else _coco_id(fname)
        if fname in exclude_names or (cid is not None and cid in exclude_ids):
            skipped["excluded"] += 1
            continue
        raw = []
        for s in sentences:
            if not isinstance(s, dict) or "raw" not in s:
                raise ValueError(f"{dataset_json}: images[{k}] has a sentence without 'raw'")
            raw.append(s["raw"])
        captions = _clean_captions(raw, skipped, f"{dataset_json} images[{k}]")
        if not captions:
            skipped["no_caption"] += 1
            continue
        rid = f"coco_{cid:012d}" if cid is not None else Path(fname).stem
        if rid in seen:
            raise ValueError(f"{dataset_json}: images[{k}] ({rel}) repeats id {rid}")
        seen.add(rid)
        if _unusable(path, skipped):
            continue
        records.append(_record(rid, path, captions, source))
    return records, dict(skipped)


def load_flickr8k(
    token_file: str | os.PathLike,
    split_file: str | os.PathLike,
    image_dir: str | os.PathLike,
    *,
    source: str = "flickr8k",
) -> tuple[list[dict], dict[str, int]]:
    """Load the Flickr8k images of one split list (e.g. ``Flickr_8k.trainImages.txt``).

    Args:
        token_file: ``Flickr8k.token.txt``: lines ``<name>.jpg#<k><TAB><caption>``. Lines that do not
            have exactly one tab or whose id lacks ``#<k>`` are counted as ``malformed_line``.
        split_file: one image file name a line; records follow its order.
        image_dir: folder of the JPEGs; listed images absent from it are ``image_missing``.
        source: value of the records' ``source`` field.

    Returns:
        ``(records, skipped)``; ids are ``flickr8k_<file stem>``; captions in ``#k`` order. Skip order:
        ``image_missing``, ``no_caption``, ``image_unreadable`` / ``image_too_large``.

    Raises:
        FileNotFoundError: if a file or ``image_dir`` does not exist.
        ValueError: if the split list names a file twice.
    """
    token_file = Path(token_file)
    if not token_file.is_file():
        raise FileNotFoundError(f"Flickr8k token file not found: {token_file}")
    names = read_filename_list(split_file)
    present = _listdir(Path(image_dir), "load_flickr8k")
    skipped: Counter = Counter()

    caps: dict[str, list[tuple[int, str]]] = {}
    with open(token_file, encoding="utf-8") as fh:
        for line in fh:
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            parts = line.split("\t")
            key = parts[0].rsplit("#", 1)
            if len(parts) != 2 or len(key) != 2 or not key[1].isdigit():
                skipped["malformed_line"] += 1
                continue
            caps.setdefault(key[0], []).append((int(key[1]), parts[1]))

    records, seen = [], set()
    for name in names:
        if name in seen:
            raise ValueError(f"{split_file}: image {name} listed twice")
        seen.add(name)
        if name not in present:
            skipped["image_missing"] += 1
            continue
        ordered = [c for _, c in sorted(caps.get(name, []), key=lambda kc: kc[0])]
        captions = _clean_captions(ordered, skipped, f"{token_file} {name}")
        if not captions:
            skipped["no_caption"] += 1
            continue
        if _unusable(Path(image_dir) / name, skipped):
            continue
        records.append(_record(f"flickr8k_{Path(name).stem}", Path(image_dir) / name, captions, source))
    return records, dict(skipped)
