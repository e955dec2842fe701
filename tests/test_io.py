"""Shared file helpers: one image loader for training, evaluation and statistics; chunked image encoding."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from concrete_jungle.io import load_rgb
from concrete_jungle.models.encoding import encode_image_files


def test_load_rgb_converts_and_names_bad_files(tmp_path):
    Image.new("L", (3, 2), color=77).save(tmp_path / "grey.png")
    im = load_rgb(tmp_path / "grey.png")
    assert im.mode == "RGB" and im.size == (3, 2) and im.getpixel((2, 1)) == (77, 77, 77)
    (tmp_path / "bad.png").write_bytes(b"not an image")
    with pytest.raises(OSError, match="bad.png"):
        load_rgb(tmp_path / "bad.png")
    with pytest.raises(OSError, match="missing.png"):
        load_rgb(tmp_path / "missing.png")


def test_encode_image_files_keeps_order_across_chunks(tmp_path):
    paths = []
    for k in range(5):
        Image.new("RGB", (2, 2), color=(10 * k, 0, 0)).save(tmp_path / f"{k}.png")
        paths.append(str(tmp_path / f"{k}.png"))
    calls = []

    def encode(ims):  # embedding = red channel of the top-left pixel
        calls.append(len(ims))
        return torch.tensor([[float(im.getpixel((0, 0))[0])] for im in ims])

    out = encode_image_files(paths, encode, batch_size=2)
    assert calls == [2, 2, 1]
    assert out.squeeze(1).tolist() == [0.0, 10.0, 20.0, 30.0, 40.0]
    with pytest.raises(ValueError, match="no image paths"):
        encode_image_files([], encode)


def test_atomic_write_names_the_file_it_could_not_write(tmp_path, monkeypatch):
    # issue 22: ENOSPC (or a read-only folder) while writing a cache named no file
    import errno
    import os
    import tempfile

    from concrete_jungle.io import atomic_write

    target = tmp_path / "cache" / "images.npy"
    target.parent.mkdir()
    target.write_bytes(b"old")

    def full_disk(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left on device") as err:
        with atomic_write(target, "wb") as fh:
            fh.write(b"new")
    assert err.value.__notes__ == [f"while writing {target} (atomically, through a temporary file in {target.parent})"]
    assert target.read_bytes() == b"old" and sorted(p.name for p in target.parent.iterdir()) == ["images.npy"]
    monkeypatch.undo()

    def read_only(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    with pytest.raises(PermissionError) as err:
        with atomic_write(target) as fh:
            fh.write("x")
    assert str(target) in err.value.__notes__[0]


def test_embedding_cache_with_nan_is_named_when_loaded(tmp_path):
    import numpy as np

    from concrete_jungle.evaluation.suite import EmbeddingCache

    images = np.ones((3, 2), np.float32)
    images[1, 0] = np.nan
    EmbeddingCache(["a.png", "b.png", "c.png"], ["t"], images, np.ones((1, 2), np.float32)).save(tmp_path / "c")
    with pytest.raises(ValueError, match=r"c/images\.npy: 1 row\(s\) hold NaN or Inf, the first row 1 \('b\.png'\)"):
        EmbeddingCache.load(tmp_path / "c")


def test_save_png_names_the_file_it_could_not_write(tmp_path):
    # issue 22: a rendered image written straight with PIL to a full disk raised ENOSPC naming no file
    from PIL import Image

    from concrete_jungle.io import save_png

    img = Image.new("RGB", (4, 4), (10, 20, 30))
    save_png(img, tmp_path / "ok.png", compress_level=1)
    assert Image.open(tmp_path / "ok.png").getpixel((0, 0)) == (10, 20, 30)
    with pytest.raises(OSError) as err:
        save_png(img, "/dev/full")
    assert err.value.errno == 28 and err.value.__notes__ == ["while writing the image /dev/full"]
