"""The resumable training state: RNG states of every rank, the atomically written state file, and the fingerprint
of a run's inputs that decides whether a saved state may be resumed (a killed run resumed from it ends, on CPU,
with weights bit-identical to an uninterrupted run's; ``docs/architecture.md``, "Training state").
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from concrete_jungle.io import atomic_write

__all__ = ["STATE_FORMAT_VERSION", "capture_rng_state", "restore_rng_state", "save_training_state",
           "read_training_state", "training_fingerprint", "why_not_resumable"]

STATE_FORMAT_VERSION = 1


def capture_rng_state(device: torch.device | str = "cpu") -> dict:
    """RNG states of torch (CPU, and CUDA for a CUDA ``device``), numpy's global generator and Python's ``random``,
    as tensors, ints, floats and lists only, so ``torch.load(weights_only=True)`` reads them back (resumable runs;
    no paper equation).

    Returns:
        ``{"torch": uint8 tensor, "numpy": {"name", "keys": int64 tensor [624], "pos", "has_gauss",
        "cached_gaussian"}, "python": {"version", "state": list[int], "gauss_next"}, ["cuda": uint8 tensor]}``.
    """
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    version, internal, gauss_next = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {"name": str(name), "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "python": {"version": int(version), "state": [int(v) for v in internal], "gauss_next": gauss_next},
    }
    device = torch.device(device)
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng_state(state: dict, device: torch.device | str = "cpu") -> None:
    """Set the global RNGs from :func:`capture_rng_state`'s dict.

    Raises:
        ValueError: a key is missing (the message names it).
    """
    for key in ("torch", "numpy", "python"):
        if key not in state:
            raise ValueError(f"RNG state lacks {key!r} (has {sorted(state)})")
    torch.set_rng_state(state["torch"])
    ns = state["numpy"]
    np.random.set_state((ns["name"], ns["keys"].numpy().astype(np.uint32), ns["pos"], ns["has_gauss"],
                         ns["cached_gaussian"]))
    ps = state["python"]
    random.setstate((ps["version"], tuple(ps["state"]), ps["gauss_next"]))
    device = torch.device(device)
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def save_training_state(path: str | os.PathLike, state: dict) -> Path:
    """Write a training-state dict atomically (temp file in the same folder, fsync, ``os.replace``).

    Keys written by :func:`train_contrastive`: ``format_version``, ``step`` (optimiser steps done), ``total_steps``,
    ``epoch`` and ``batch_in_epoch`` (position of the next batch), ``complete``, ``model`` (state dict),
    ``optimizer`` (state dict), ``rng`` (one :func:`capture_rng_state` dict per rank), ``params`` (the resolved params,
    plain types), ``fingerprint`` (str/int: initial weights, dataset, loss, code, world size), ``log_rows``
    (``[[step, {metric: float}], ...]``), ``last`` (latest logged metrics) and ``seen`` (training rows so far).

    Returns:
        ``path``.

    Raises:
        OSError: the folder cannot be created or the rename fails (the previous file is left intact).
    """
    path = Path(path)
    with atomic_write(path, "wb") as fh:
        torch.save(state, fh)
    return path


def read_training_state(path: str | os.PathLike) -> dict:
    """Read a training-state file with ``torch.load(weights_only=True, map_location="cpu")``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is not a readable weights-only torch file, not a dict, of another format version, or
            lacks a key (the message names the path).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"training state {str(path)!r} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ValueError(f"training state {str(path)!r} is not a readable weights-only torch file: {exc}; delete it "
                         "to start the run afresh") from exc
    if not isinstance(state, dict):
        raise ValueError(f"training state {str(path)!r} holds a {type(state).__name__}, not a dict")
    if state.get("format_version") != STATE_FORMAT_VERSION:
        raise ValueError(f"training state {str(path)!r} has format_version {state.get('format_version')!r}, "
                         f"expected {STATE_FORMAT_VERSION}")
    missing = [k for k in ("step", "epoch", "batch_in_epoch", "model", "optimizer", "rng", "params", "fingerprint",
                           "log_rows") if k not in state]
    if missing:
        raise ValueError(f"training state {str(path)!r} lacks the keys {missing}")
    return state


_CODE_FILES = ("training.py", "datasets.py", "shards.py", "resume.py", "distributed.py", "losses.py",
               "models/build.py", "models/checkpoints.py", "models/encoding.py", "models/trunk_cache.py")


def training_fingerprint(model: torch.nn.Module, dataset: Dataset, loss_fn: Callable, hard_negatives: bool,
                 world_size: int, item_rng: str = "global") -> dict:
    """What must not change for a state to be resumed, besides the params: the initial weights, the dataset
    (records, image sizes and modification times), the loss, this package's training code, the world size and the
    RNG scheme of the items (``"global"``: in-process loading; ``"per_item"``: worker processes)."""
    weights = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        t = tensor.detach().to("cpu").contiguous().reshape(-1)
        weights.update(f"{name}|{t.dtype}|{tuple(tensor.shape)}".encode())
        weights.update(t.view(torch.uint8).numpy())
    data = hashlib.sha256(f"{type(dataset).__name__}|{len(dataset)}".encode())
    index = getattr(dataset, "index", None)  # a ShardStream: its shards' names, counts and SHA-256, and its order
    if isinstance(index, dict):
        data.update(json.dumps({"index": index, "seed": getattr(dataset, "seed", None),
                                "shuffle_buffer": getattr(dataset, "shuffle_buffer", None)}, sort_keys=True).encode())
    records = getattr(dataset, "records", None)
    if records is not None:
        data.update(json.dumps(records, sort_keys=True, default=str).encode())
        for rec in records:
            for key in ("image", "negative_image"):
                p = rec.get(key) if isinstance(rec, dict) else None
                if isinstance(p, str) and os.path.exists(p):
                    st = os.stat(p)
                    data.update(f"{p}|{st.st_size}|{st.st_mtime_ns}".encode())
    code = hashlib.sha256()
    here = Path(__file__).resolve().parent
    for name in _CODE_FILES:
        code.update((here / name).read_bytes())
    loss_desc = getattr(loss_fn, "__name__", type(loss_fn).__name__)
    margin = getattr(loss_fn, "margin_cfg", None)
    return {"weights": weights.hexdigest(), "dataset": data.hexdigest(), "code": code.hexdigest(),
            "loss": f"{loss_desc}|{margin!r}", "hard_negatives": bool(hard_negatives), "world_size": int(world_size),
            "item_rng": item_rng}


def why_not_resumable(state: dict, params_dump: dict, fingerprint: dict) -> str | None:
    if state["params"] != params_dump:
        old, new = state["params"], params_dump
        keys = sorted({*old, *new}, key=str) if isinstance(old, dict) else []
        diff = [k for k in keys if old.get(k) != new.get(k)]
        return f"its params differ (top-level keys {diff[:5]})"
    diff = sorted(k for k in {*fingerprint, *state["fingerprint"]} if fingerprint.get(k) != state["fingerprint"].get(k))
    if diff:
        return f"its inputs differ ({', '.join(diff)})"
    return None
