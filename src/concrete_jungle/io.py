"""Small file helpers shared by every stage: atomic writes, JSONL, finite-only metrics JSON, image checks.

Long stages write through :func:`atomic_write` so that a killed run never leaves a half-written
output that a resumed run would mistake for a finished one (DEVELOPERS.md, "Bad input").
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = [
    "atomic_write",
    "write_json",
    "read_json",
    "write_jsonl",
    "read_jsonl",
    "write_metrics",
    "check_finite",
    "load_rgb",
    "check_image",
    "confined_path",
]


def _umask() -> int:
    """The process umask (``os.umask`` can only be read by setting it, so it is set to 0 and restored at once)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[Any]:
    """Open a temporary file beside ``path``; on clean exit rename it over ``path``.

    The rename is atomic on POSIX, so readers see either the old file or the complete new one.
    On an exception the temporary file is removed and ``path`` is left untouched. The file gets the mode
    ``0o666 & ~umask`` (e.g. 0644 under umask 022) like one made by ``open``, not ``mkstemp``'s 0600.

    Raises:
        OSError: if the parent folder cannot be created or written (read-only, no space left: ENOSPC) or the rename
            fails; the error carries a note naming ``path`` (issue 22: ENOSPC named no file).
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        err.add_note(f"while writing {path} (atomically, through a temporary file in {path.parent})")
        raise
    binary = "b" in mode
    try:
        with os.fdopen(fd, mode, encoding=None if binary else encoding) as fh:
            yield fh
            fh.flush()
            os.fchmod(fh.fileno(), 0o666 & ~_umask())
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(err, OSError):
            err.add_note(f"while writing {path} (atomically, through a temporary file in {path.parent})")
        raise


def write_json(path: str | os.PathLike, obj: Any, indent: int = 2) -> None:
    """Write ``obj`` as JSON atomically (sorted keys are *not* forced: insertion order is kept)."""
    with atomic_write(path) as fh:
        json.dump(obj, fh, indent=indent, allow_nan=False)
        fh.write("\n")


def save_png(image, path: str | os.PathLike, **options) -> None:
    """Write a PIL image as PNG to ``path`` (``options``: PIL's PNG options, e.g. ``compress_level``).

    Raises:
        OSError: the write fails (ENOSPC, a read-only folder), with a note naming ``path`` (issue 22)."""
    try:
        image.save(path, format="PNG", **options)
    except OSError as err:
        err.add_note(f"while writing the image {path}")
        raise


def read_json(path: str | os.PathLike, unique_keys: bool = False) -> Any:
    """Read a JSON file.

    Args:
        unique_keys: refuse an object that writes a key twice, which ``json`` silently resolves to the last value
            (a repeated item id in a benchmark file; issue 22).

    Raises:
        FileNotFoundError: naming the missing path.
        ValueError: naming the path when its content is not valid JSON, or (``unique_keys``) the first key that
            occurs twice in one object.
    """
    path = Path(path)

    def unique(pairs):
        keys = [k for k, _ in pairs]
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:
            raise ValueError(f"{path}: key {twice[0]!r} occurs twice in one object (a repeated item id or field)")
        return dict(pairs)

    if not path.exists():
        raise FileNotFoundError(f"JSON file not found: {path}")
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh, object_pairs_hook=unique if unique_keys else None)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from err


def write_jsonl(path: str | os.PathLike, records: Iterable[dict]) -> int:
    """Write one JSON object per line, atomically. Returns the number of records written."""
    n = 0
    with atomic_write(path) as fh:
        for rec in records:
            fh.write(json.dumps(rec, ensure_ascii=False, allow_nan=False))
            fh.write("\n")
            n += 1
    return n


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Read a JSONL file into a list of dicts.

    Raises:
        FileNotFoundError: naming the missing path.
        ValueError: naming the path and the 1-based line number of a malformed line.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"JSONL file not found: {path}")
    out = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{lineno}: malformed JSON line ({err})") from err
    return out


def check_finite(obj: Any, where: str = "metrics") -> None:
    """Raise ``ValueError`` naming the key path of the first NaN or Inf inside ``obj``."""
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise ValueError(f"{where}: non-finite value {obj!r}")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            check_finite(v, f"{where}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            check_finite(v, f"{where}[{i}]")


def write_metrics(path: str | os.PathLike, metrics: dict) -> None:
    """Write a metrics JSON atomically after checking that it holds no NaN or Inf.

    Raises:
        ValueError: naming the offending key when a value is NaN or infinite.
    """
    check_finite(metrics, str(path))
    write_json(path, metrics)


@contextmanager
def _bomb_is_error() -> Iterator[None]:
    """Turn PIL's ``DecompressionBombWarning`` (more than ``Image.MAX_IMAGE_PIXELS`` pixels) into an exception."""
    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        yield


def load_rgb(path: str | os.PathLike):
    """Open an image file as an RGB ``PIL.Image`` (decoded, file closed).

    Raises:
        OSError: naming ``path`` when the file is missing, truncated or not an image.
        ValueError: naming ``path`` when the image has more than ``PIL.Image.MAX_IMAGE_PIXELS`` pixels
            (a possible decompression bomb).
    """
    from PIL import Image

    try:
        with _bomb_is_error(), Image.open(path) as im:
            return im.convert("RGB")
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as err:
        raise ValueError(f"image {path} is too large to decode: {err}") from err
    except (OSError, ValueError) as err:
        raise OSError(f"cannot read image {path}: {err}") from err


def check_image(path: str | os.PathLike) -> str | None:
    """Cheaply check that an image file decodes completely (for corpus loaders scanning ~10^5 images).

    A JPEG is decoded whole at 1/8 scale (``draft``), which still reads every byte, so a truncated file fails;
    other formats are decoded fully. ``PIL.ImageFile.LOAD_TRUNCATED_IMAGES`` is not touched (keep it False).

    Returns:
        None for a good image; ``"image_too_large"`` when it has more than ``PIL.Image.MAX_IMAGE_PIXELS`` pixels
        (a possible decompression bomb; checked from the header, nothing is decoded); ``"image_unreadable"`` when
        the file is missing, empty, truncated, corrupt or not an image.

    Raises:
        Nothing for a bad file: every decoding error becomes a reason.
    """
    from PIL import Image

    try:
        with _bomb_is_error(), Image.open(path) as im:
            if im.format == "JPEG":
                w, h = im.size
                im.draft("RGB", (max(1, w // 8), max(1, h // 8)))
            im.load()
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        return "image_too_large"
    except Exception:  # PIL raises OSError, SyntaxError, ValueError, EOFError... for broken files
        return "image_unreadable"
    return None


def confined_path(root: str | os.PathLike, relative: str, what: str) -> Path:
    """``root / relative``, after checking that it stays inside ``root`` once ``..`` and symlinks are resolved.

    Args:
        root: the folder the file must lie in (it need not exist; symlinks in ``root`` itself are allowed).
        relative: a relative file name from untrusted data (e.g. a benchmark item's ``filename``).
        what: names the item in the error, e.g. ``"SugarCrepe subset add_att item '12'"``.

    Returns:
        ``Path(root) / relative`` as joined (not resolved), so stored paths keep the caller's spelling.

    Raises:
        ValueError: naming ``what`` and ``relative`` when it is absolute or resolves outside ``root``
            (``../x.jpg``, ``/etc/passwd``, a symlink pointing out of ``root``).
    """
    path = Path(root) / relative
    base = Path(root).resolve()
    if Path(relative).is_absolute() or not path.resolve().is_relative_to(base):
        raise ValueError(f"{what}: filename {relative!r} is absolute or resolves outside the image root {root}")
    return path
