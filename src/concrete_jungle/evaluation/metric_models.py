"""The metric models of Table 1 (paper Sec. 3.1), independent of the model being trained: the CLIP-score model of
I2T / T2I / CLIP-L / CLIP-V (a project checkpoint, or any open_clip name + pretrained tag: the paper's
PE-Core-L-14-336 / ``meta``), DINOScore's timm image model (the paper's DINOv2) and BERTScore (bert_score with a
local model folder). Names are checked at the start of the dataset_stats stage (:func:`check_clip_model`,
:func:`check_dino_model`), before any work; weights that cannot be had offline raise a clear error or are recorded
as skipped by the caller.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from PIL import Image

from concrete_jungle.models.build import ModelBundle
from concrete_jungle.params import MINILM_MODEL_TYPE, BertScoreParams, ClipModelParams, DinoParams, ModelSpec

__all__ = ["reference_checkpoint", "bertscore_f1", "DinoUnavailable", "check_dino_model", "load_dino",
           "encode_dino", "ClipModelUnavailable", "check_clip_model", "build_clip_model"]


def reference_checkpoint(
    reference_model: str, models_dir: str | os.PathLike, key: str = "dataset_stats.reference_model"
) -> Path:
    """Checkpoint file of ``dataset_stats.reference_model`` (or of another key with the same meaning, named by
    ``key``: ``dataset_stats.clip_model.checkpoint``).

    A value ending in ``.pt`` or naming an existing file is a checkpoint path; anything else is a model label and maps
    to its checkpoint under ``models_dir`` (:func:`concrete_jungle.grid.member_path`: ``"base"`` ->
    ``models/<profile>/base/checkpoint.pt``, ``"hc-cement"`` -> ``models/<profile>/cement/hc/checkpoint.pt``).

    Raises:
        FileNotFoundError: the checkpoint does not exist (the message names ``key``).
    """
    if reference_model.endswith(".pt") or os.path.isfile(reference_model):
        path = Path(reference_model)
    else:
        from concrete_jungle.grid import member_path

        path = Path(models_dir) / member_path(reference_model) / "checkpoint.pt"
    if not path.is_file():
        raise FileNotFoundError(f"{key} {reference_model!r}: no checkpoint at {path}")
    return path


# --------------------------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------------------------
def _package_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)  # bert_score's own __version__ lags its release (0.3.13 says 0.3.12)
    except PackageNotFoundError:  # pragma: no cover - installed from source
        return None


def _bertscore_model_path(model_type: str) -> str:
    if model_type == MINILM_MODEL_TYPE:
        from concrete_jungle.models.build import _minilm_path

        return _minilm_path()
    return model_type


def _bertscore_num_layers(model_path: str, num_layers: int | None) -> int | None:
    if num_layers is not None:
        return num_layers
    from bert_score.utils import model2layers

    if model_path in model2layers:
        return None  # bert_score picks its tuned layer
    config = Path(model_path) / "config.json"
    if config.is_file():
        with open(config, encoding="utf-8") as fh:
            n = json.load(fh).get("num_hidden_layers")
        if isinstance(n, int) and n >= 1:
            return n
    raise ValueError(
        f"bertscore.num_layers must be set for model_type {model_path!r}: bert_score has no tuned layer for it and "
        "no config.json with num_hidden_layers was found"
    )


def bertscore_f1(candidates: Sequence[str], references: Sequence[str], cfg: BertScoreParams, device=None):
    """BERTScore F1 of each candidate against its reference (Zhang et al. 2020; paper Sec. 3.1, Table 1).

    Calls ``bert_score.score(candidates, references, model_type=<local path>, num_layers=..., lang=cfg.lang,
    idf=False)``; nothing is downloaded when ``model_type`` is a local folder (the default MiniLM-L6).

    Args:
        candidates: N hard-negative captions t'.
        references: N anchor captions t.
        cfg: :class:`BertScoreParams`.
        device: torch device for the text model (default: CUDA when available, else CPU).

    Returns:
        ``(f1, info)``: float tensor [N] of F1 (raw cosine-based, in about [0, 1]; rescaled values can be < 0 when a
        baseline was applied) and ``info`` = ``{"model_type", "num_layers", "idf", "rescaled", "rescale_note",
        "bert_score_version"}`` (``rescale_note`` says why rescaling was requested but not applied, else None).

    Raises:
        ValueError: lengths differ, an item is not a non-empty string, ``num_layers`` cannot be resolved.
        FileNotFoundError: ``cfg.baseline_path`` is set but missing.
    """
    import bert_score

    if isinstance(candidates, str) or isinstance(references, str):
        raise ValueError("candidates and references must be lists of str, not a single str")
    if len(candidates) != len(references):
        raise ValueError(f"candidates ({len(candidates)}) and references ({len(references)}) differ in length")
    for name, seq in (("candidates", candidates), ("references", references)):
        for i, s in enumerate(seq):
            if not isinstance(s, str) or not s.strip():
                raise ValueError(f"{name}[{i}] must be a non-empty string, got {s!r}")
    model_path = _bertscore_model_path(cfg.model_type)
    num_layers = _bertscore_num_layers(model_path, cfg.num_layers)
    rescale, note, baseline = False, None, None
    if cfg.rescale_with_baseline:
        if cfg.baseline_path is not None:
            if not Path(cfg.baseline_path).is_file():
                raise FileNotFoundError(f"bertscore.baseline_path does not exist: {cfg.baseline_path}")
            rescale, baseline = True, cfg.baseline_path
        else:
            packaged = Path(bert_score.__file__).parent / "rescale_baseline" / cfg.lang / f"{model_path}.tsv"
            if packaged.is_file():
                rescale = True
            else:
                note = (
                    f"no rescaling baseline for model_type {cfg.model_type!r} (bert_score ships baselines for hub "
                    "model names only, e.g. roberta-large); raw F1 reported, not comparable to the paper's rescaled "
                    "RoBERTa-large values"
                )
    info = {
        "model_type": cfg.model_type,
        "num_layers": num_layers,
        "idf": False,
        "rescaled": rescale,
        "rescale_note": note,
        "bert_score_version": _package_version("bert-score"),
    }
    if not candidates:
        return torch.zeros(0), info
    _, _, f1 = bert_score.score(
        list(candidates),
        list(references),
        model_type=model_path,
        num_layers=num_layers,
        lang=cfg.lang,
        idf=False,
        device=None if device is None else str(device),
        batch_size=cfg.batch_size,
        rescale_with_baseline=rescale,
        baseline_path=baseline,
        verbose=True,
    )
    return f1.float(), info


# --------------------------------------------------------------------------------------------------------------
# DINO
# --------------------------------------------------------------------------------------------------------------
class DinoUnavailable(RuntimeError):
    """The configured DINO model's weights could not be loaded (offline); ``str(err)`` is the recorded reason."""


def check_dino_model(cfg: DinoParams) -> None:
    """Check at start-up that timm knows ``dataset_stats.dino.model`` (an architecture with an optional pretrained
    tag), before any work; kept out of params loading, which imports no torch.

    Raises:
        ValueError: naming ``dataset_stats.dino.model``: an architecture timm does not know, or a tag that is not one
            of its pretrained tags (the known tags are listed).
    """
    import timm

    value = cfg.model
    if value is None:
        return
    arch = value.split(".")[0]
    if not timm.is_model(value):
        raise ValueError(f"dataset_stats.dino.model: timm knows no architecture {arch!r} (from {value!r})")
    if "." in value and value not in timm.list_pretrained(f"{arch}.*"):
        raise ValueError(f"dataset_stats.dino.model: {value!r} is not a pretrained tag of {arch!r} "
                         f"(tags: {timm.list_pretrained(f'{arch}.*')})")


def load_dino(cfg: DinoParams, device: str | torch.device = "cpu", seed: int = 0):
    """Build the DINOScore image model with timm: pooled features (``num_classes=0``), eval mode.

    Args:
        cfg: :class:`DinoParams` with ``model`` set.
        device: torch device.
        seed: seed of any randomly initialised weights (drawn inside ``torch.random.fork_rng``; the caller's RNG
            state is untouched), so a random-init model is reproducible.

    Returns:
        ``(model, transform)``: the timm model and its eval transform (PIL image -> float tensor [3, H, W], from the
        model's pretrained config: resize, centre crop, normalise).

    Raises:
        ValueError: ``cfg.model`` is None.
        FileNotFoundError: ``cfg.checkpoint_path`` is set but missing.
        DinoUnavailable: ``pretrained`` weights could not be fetched (no network, not in the local cache); the
            message holds the error.
    """
    import timm

    if cfg.model is None:
        raise ValueError("dino.model is None: no DINO model configured")
    kwargs: dict[str, Any] = {"num_classes": 0}
    if cfg.pretrained and cfg.checkpoint_path is not None:
        if not Path(cfg.checkpoint_path).is_file():
            raise FileNotFoundError(f"dino.checkpoint_path does not exist: {cfg.checkpoint_path}")
        kwargs["pretrained_cfg_overlay"] = {"file": str(cfg.checkpoint_path)}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            model = timm.create_model(cfg.model, pretrained=cfg.pretrained, **kwargs)
        except OSError as exc:  # hub unreachable / not cached (huggingface_hub's errors are OSErrors)
            if not cfg.pretrained or cfg.checkpoint_path is not None:
                raise
            raise DinoUnavailable(
                f"weights of dino.model {cfg.model!r} could not be loaded offline ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''}); set dino.checkpoint_path to a local file"
            ) from exc
    model.to(device).eval()
    data_cfg = timm.data.resolve_model_data_config(model)
    transform = timm.data.create_transform(**data_cfg, is_training=False)
    return model, transform


def encode_dino(
    model: torch.nn.Module, transform: Callable, images: Sequence[Image.Image], batch_size: int = 64
) -> torch.Tensor:
    """DINO features of images (pooled, e.g. the CLS token of a ViT), L2-normalised (cosine space).

    Args:
        model: a timm model built with ``num_classes=0`` (see :func:`load_dino`).
        transform: PIL image -> float tensor [3, H, W].
        images: M PIL images (converted to RGB).
        batch_size: images per forward pass (>= 1).

    Returns:
        float32 CPU tensor [M, F], rows of unit norm; [0, 0] for no image.

    Raises:
        ValueError: ``batch_size`` < 1, or the model does not return [B, F] features.
    """
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    device = next(model.parameters()).device
    out = []
    with torch.no_grad():
        for start in range(0, len(images), batch_size):
            batch = torch.stack([transform(im.convert("RGB")) for im in images[start : start + batch_size]])
            feats = model(batch.to(device))
            if feats.dim() != 2 or feats.shape[0] != batch.shape[0]:
                raise ValueError(f"DINO model returned shape {tuple(feats.shape)}; expected [{batch.shape[0]}, F]")
            out.append(torch.nn.functional.normalize(feats.float(), dim=-1).cpu())
    return torch.cat(out) if out else torch.zeros(0, 0)


# --------------------------------------------------------------------------------------------------------------
# CLIP-score model (Table 1's I2T / T2I / CLIP-L / CLIP-V)
# --------------------------------------------------------------------------------------------------------------
_CLIP_KEY = "dataset_stats.clip_model"


class ClipModelUnavailable(RuntimeError):
    """The weights of ``dataset_stats.clip_model``'s open_clip tag could not be loaded (offline, not in the local
    Hugging Face cache); the message names the key and the way out (``dataset_stats.clip_model.weights_path``)."""


def check_clip_model(cfg: ClipModelParams, models_dir: str | os.PathLike | None = None) -> None:
    """Check ``dataset_stats.clip_model`` at the start of the dataset_stats stage, before any work (kept out of params
    loading, which imports no torch / open_clip / timm).

    Kind ``open_clip``: open_clip must know ``name`` (after registering the project's configs), the installed timm
    its timm image tower if it has one (PE-Core: ``vit_pe_core_*``), ``pretrained`` must be one of the name's
    open_clip tags and ``weights_path`` must exist. Kind ``checkpoint``: with ``models_dir`` the checkpoint must
    exist (:func:`reference_checkpoint`); without it nothing is checked.

    Raises:
        ValueError: naming ``dataset_stats.clip_model.name`` (unknown model, with close matches; unknown timm tower)
            or ``dataset_stats.clip_model.pretrained`` (not a tag of the name; the known tags are listed).
        FileNotFoundError: naming ``dataset_stats.clip_model.weights_path`` / ``.checkpoint``: the file is missing.
    """
    if cfg.kind == "checkpoint":
        if models_dir is not None:
            reference_checkpoint(cfg.checkpoint, models_dir, key=f"{_CLIP_KEY}.checkpoint")
        return
    import difflib

    import open_clip

    from concrete_jungle.models.build import register_model_configs

    register_model_configs()
    config = open_clip.get_model_config(cfg.name)
    if config is None:
        close = difflib.get_close_matches(cfg.name, open_clip.list_models(), n=5, cutoff=0.5)
        raise ValueError(f"{_CLIP_KEY}.name: open_clip knows no model {cfg.name!r} (close matches: {close})")
    tower = (config.get("vision_cfg") or {}).get("timm_model_name")
    if tower:
        import timm

        if not timm.is_model(tower):
            raise ValueError(f"{_CLIP_KEY}.name: {cfg.name!r} needs the timm image tower {tower!r}, which the "
                             f"installed timm {timm.__version__} does not know")
    if cfg.pretrained is not None:
        tags = open_clip.list_pretrained_tags_by_model(cfg.name)
        if cfg.pretrained not in tags:
            raise ValueError(f"{_CLIP_KEY}.pretrained: {cfg.pretrained!r} is not an open_clip pretrained tag of "
                             f"{cfg.name!r} (tags: {tags})")
    if cfg.weights_path is not None and not Path(cfg.weights_path).is_file():
        raise FileNotFoundError(f"{_CLIP_KEY}.weights_path does not exist: {cfg.weights_path}")


def _tag_preprocess(name: str, tag: str) -> dict:
    """The image preprocessing of an open_clip tag, in the form ``build_model`` takes for a weights file."""
    import open_clip

    pc = open_clip.get_pretrained_cfg(name, tag)
    return {"mean": tuple(pc.get("mean") or open_clip.OPENAI_DATASET_MEAN),
            "std": tuple(pc.get("std") or open_clip.OPENAI_DATASET_STD),
            "interpolation": pc.get("interpolation"), "resize_mode": pc.get("resize_mode")}


def build_clip_model(
    cfg: ClipModelParams,
    models_dir: str | os.PathLike,
    device: str | torch.device = "cpu",
    *,
    reference: ModelBundle | None = None,
    seed: int = 0,
) -> ModelBundle:
    """Build the CLIP-score model of Table 1 (I2T / T2I acc., CLIP-L, CLIP-V; paper Sec. 3.1: PE-Core-L-14-336).

    * kind ``checkpoint``: :func:`concrete_jungle.models.checkpoints.load_model` of
      ``reference_checkpoint(cfg.checkpoint, models_dir)``. When ``reference`` was loaded from that same file and
      ``cfg.precision`` is null or equal to its precision, ``reference`` itself is returned: the world and real
      profiles run one model, exactly as before ``clip_model`` existed. ``cfg.precision`` set to another precision
      gives a bundle with that autocast precision (sharing ``reference``'s model when it is the same file).
    * kind ``open_clip``: :func:`concrete_jungle.models.build.build_model` of ``ModelSpec(kind="open_clip",
      name=cfg.name, pretrained=cfg.weights_path or cfg.pretrained, context_length=cfg.context_length,
      precision=cfg.precision or "fp32")``; with a ``weights_path`` the tag's preprocessing (mean, std,
      interpolation, resize mode) is kept. ``pretrained`` null = random init drawn from ``seed`` (tests).
      :func:`check_clip_model` runs first.

    Args:
        cfg: ``dataset_stats.clip_model``.
        models_dir: ``models/<profile>`` (where model labels point).
        device: torch device.
        reference: the already loaded reference model, to share when it is the same checkpoint.
        seed: seed of a random init (``torch.random.fork_rng``: the caller's RNG state is untouched).

    Returns:
        A :class:`~concrete_jungle.models.build.ModelBundle`; its ``encode_*`` embeddings are L2-normalised
        ``[M, D]`` (cosine space, D = ``embed_dim``; PE-Core-L-14-336: 1024).

    Raises:
        FileNotFoundError: the checkpoint or ``weights_path`` is missing (names the key).
        ValueError: an unknown name / tag (names the key), an unreadable checkpoint, or one not marked complete.
        ClipModelUnavailable: the tag's weights could not be downloaded (offline, not cached); names the key.
        RuntimeError: weights that do not load strictly into the architecture.
    """
    if cfg.kind == "checkpoint":
        from concrete_jungle.models.checkpoints import load_model

        path = reference_checkpoint(cfg.checkpoint, models_dir, key=f"{_CLIP_KEY}.checkpoint")
        ref_file = None if reference is None else reference.spec.pretrained
        same = ref_file is not None and os.path.isfile(ref_file) and Path(ref_file).resolve() == path.resolve()
        bundle = reference if same else load_model(path, device)
        if cfg.precision is not None and cfg.precision != bundle.spec.precision:  # same weights, another autocast
            bundle = dataclasses.replace(bundle, spec=bundle.spec.model_copy(update={"precision": cfg.precision}))
        return bundle
    check_clip_model(cfg)
    from concrete_jungle.models.build import build_model

    spec = ModelSpec(kind="open_clip", name=cfg.name, pretrained=cfg.weights_path or cfg.pretrained,
                     context_length=cfg.context_length, precision=cfg.precision or "fp32")
    preprocess = _tag_preprocess(cfg.name, cfg.pretrained) if cfg.weights_path is not None else None
    try:
        return build_model(spec, device, seed=seed, _preprocess_cfg=preprocess)
    except RuntimeError as exc:
        if cfg.weights_path is None and cfg.pretrained is not None and "download" in str(exc).lower():
            raise ClipModelUnavailable(
                f"{_CLIP_KEY}.pretrained: the weights of open_clip {cfg.name!r} / {cfg.pretrained!r} could not be "
                f"loaded offline ({str(exc).splitlines()[0]}); put them in the Hugging Face cache or name a local "
                f"copy in {_CLIP_KEY}.weights_path"
            ) from exc
        raise
