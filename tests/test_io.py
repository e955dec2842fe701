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
