"""LLM caption rewriters of ConcretePlant: f_cap = Qwen3-32B with the A.2 prompt (paper Sec. 2.2, A.2).

Two backends of the :class:`~concrete_jungle.concreteplant.rewrite.Rewriter` protocol send the same prompts:
the A.2 prompt of :func:`~concrete_jungle.concreteplant.rewrite.request_prompt` (task, instructions, the
in-context examples of the keyword's compositional type — or the "without considering concreteness" set for
D_wo — and the query) as one user message, rendered with the model's chat template with Qwen3's thinking mode
off (``enable_thinking=False``: the template emits an empty ``<think></think>`` block).

* :class:`TransformersRewriter` — Hugging Face transformers: left-padded batches, greedy decoding; the batched
  output equals the one-at-a-time output.
* :class:`VLLMRewriter` — vLLM offline batch inference (``LLM.chat``) with tensor parallelism, for
  Qwen3-32B on GPUs; ``vllm`` is an optional dependency, imported only when this backend is built.

Attempt 0 decodes greedily; attempt k > 0 (a retry of rejected answers, see
:func:`~concrete_jungle.concreteplant.rewrite.rewrite_with_retries`) samples at ``retry_temperature`` (no
top-k / top-p) with a seed derived from (seed, k). Both return the cleaned generation
(:func:`~concrete_jungle.concreteplant.rewrite.clean_generation`), the raw text, and whether the generation
was cut at ``max_new_tokens``; validation is left to ``rewrite_with_retries``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tqdm.auto import tqdm

from concrete_jungle.concreteplant.rewrite import (
    DATASETS,
    RewriteRequest,
    RewriteResult,
    clean_generation,
    request_prompt,
    retry_seed,
)

__all__ = ["TransformersRewriter", "VLLMRewriter", "DTYPES"]

#: Accepted ``dtype`` values (``auto``: the checkpoint's own dtype).
DTYPES = ("auto", "float32", "bfloat16", "float16")


def _check_common(dataset: str, max_new_tokens: int, retry_temperature: float, dtype: str) -> None:
    if dataset not in DATASETS:
        raise ValueError(f"dataset must be one of {DATASETS} (it picks the A.2 examples), got {dataset!r}")
    if int(max_new_tokens) < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if not retry_temperature > 0:
        raise ValueError(f"retry_temperature must be > 0, got {retry_temperature}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")


def _check_requests(requests: Sequence[RewriteRequest], attempt: int) -> None:
    for i, r in enumerate(requests):
        if not isinstance(r, RewriteRequest):
            raise TypeError(f"requests[{i}] must be a RewriteRequest, got {type(r).__name__}")
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")


def _result(raw: str, truncated: bool) -> RewriteResult:
    return RewriteResult(clean_generation(raw), None, truncated=truncated, raw=raw)


# --------------------------------------------------------------------------------------------------------
# transformers
# --------------------------------------------------------------------------------------------------------
class TransformersRewriter:
    """f_cap with Hugging Face transformers: chat-templated A.2 prompts, batched greedy decoding (Sec. 2.2).

    Prompts are sorted by token length and cut into batches of ``batch_size``, left-padded (decoder-only
    models continue from the last position, so padding must be on the left; the attention mask hides it),
    and decoded greedily (``do_sample=False``) for attempt 0, so a caption's answer does not depend on its
    batch: batched output equals one-at-a-time output (up to floating-point ties in the argmax). Only the new
    tokens are decoded (special tokens skipped); a generation without an end-of-sequence token (the
    tokenizer's or the model's ``generation_config.eos_token_id``) within ``max_new_tokens`` is marked
    ``truncated``. Retries (attempt k > 0) sample at ``retry_temperature`` with top-k / top-p off; batch b of
    attempt k draws from ``torch.manual_seed(retry_seed(seed, k, b))`` inside a forked RNG, so a retry is
    reproducible for the same requests and batch size and the global RNG is untouched.

    Args:
        model_name_or_path: Hugging Face model id or local folder (paper: ``"Qwen/Qwen3-32B"``); loaded with
            ``AutoModelForCausalLM`` / ``AutoTokenizer`` unless ``model`` and ``tokenizer`` are given.
        dataset: ``hc`` | ``lc`` | ``wo``: the A.2 example set (``wo``: "without considering concreteness").
        seed: seed of the sampled retries.
        max_new_tokens: generation limit per caption, in tokens (>= 1).
        batch_size: prompts per ``generate`` call (>= 1).
        dtype: ``auto`` | ``float32`` | ``bfloat16`` | ``float16``: load dtype (ignored for an injected model).
        device: ``auto`` (CUDA when available, else CPU; an injected model stays where it is) or a torch
            device string. With ``accelerate`` installed, ``auto`` on CUDA shards the model over all GPUs.
        enable_thinking: passed to the chat template (Qwen3's thinking mode); off as in the paper's setup.
        retry_temperature: sampling temperature of retries (> 0).
        model, tokenizer: already built objects (tests, notebooks); both or neither.

    Raises:
        ValueError: on a bad ``dataset`` / ``batch_size`` / ``max_new_tokens`` / ``retry_temperature`` /
            ``dtype``, only one of ``model`` / ``tokenizer``, or a tokenizer without a chat template or
            without pad and eos tokens.
    """

    def __init__(
        self,
        model_name_or_path: str,
        dataset: str,
        seed: int = 0,
        max_new_tokens: int = 64,
        batch_size: int = 16,
        dtype: str = "auto",
        device: str = "auto",
        enable_thinking: bool = False,
        retry_temperature: float = 0.7,
        model: Any = None,
        tokenizer: Any = None,
    ) -> None:
        _check_common(dataset, max_new_tokens, retry_temperature, dtype)
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if (model is None) != (tokenizer is None):
            raise ValueError("TransformersRewriter: pass both model and tokenizer, or neither")
        import torch

        self.dataset = dataset
        self.seed = int(seed)
        self.max_new_tokens = int(max_new_tokens)
        self.batch_size = int(batch_size)
        self.enable_thinking = bool(enable_thinking)
        self.retry_temperature = float(retry_temperature)
        if model is None:
            model, tokenizer = self._load(model_name_or_path, dtype, device)
        elif device != "auto":
            model = model.to(device)
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            if self.tokenizer.eos_token_id is None:
                raise ValueError("TransformersRewriter: the tokenizer has neither a pad nor an eos token")
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError(f"TransformersRewriter: the tokenizer of {model_name_or_path!r} has no chat template")
        eos = self.model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, (list, tuple)) else [eos] if eos is not None else [])
        if self.tokenizer.eos_token_id is not None:
            eos_ids.add(self.tokenizer.eos_token_id)
        if not eos_ids:
            raise ValueError("TransformersRewriter: no end-of-sequence token id in the tokenizer or model")
        self.eos_ids = frozenset(int(i) for i in eos_ids)
        self._torch = torch

    @staticmethod
    def _load(name: str, dtype: str, device: str) -> tuple[Any, Any]:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import is_accelerate_available

        tokenizer = AutoTokenizer.from_pretrained(name)
        torch_dtype = dtype if dtype == "auto" else getattr(torch, dtype)
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
            if device == "cuda" and is_accelerate_available():
                model = AutoModelForCausalLM.from_pretrained(name, dtype=torch_dtype, device_map="auto")
                return model, tokenizer
        model = AutoModelForCausalLM.from_pretrained(name, dtype=torch_dtype).to(device)
        return model, tokenizer

    # -- prompts ------------------------------------------------------------------------------------------
    def chat_prompt(self, request: RewriteRequest) -> str:
        """The A.2 prompt of ``request`` as one user turn, rendered by the tokenizer's chat template with the
        generation prompt and ``enable_thinking`` (text, special tokens included)."""
        return self.tokenizer.apply_chat_template(
            [{"role": "user", "content": request_prompt(request, self.dataset)}],
            add_generation_prompt=True,
            tokenize=False,
            enable_thinking=self.enable_thinking,
        )

    # -- generation ---------------------------------------------------------------------------------------
    def generate_ids(self, texts: Sequence[str], attempt: int = 0) -> list[tuple[list[int], bool]]:
        """Generate for chat-rendered prompts; per prompt, in order: (new token ids up to, not including, the
        first end-of-sequence token; truncated = no end-of-sequence token within ``max_new_tokens``).

        Raises:
            ValueError: if ``attempt < 0``.
        """
        if attempt < 0:
            raise ValueError(f"attempt must be >= 0, got {attempt}")
        torch = self._torch
        if not texts:
            return []
        lengths = [len(self.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
        order = sorted(range(len(texts)), key=lambda i: (-lengths[i], i))
        batches = [order[s : s + self.batch_size] for s in range(0, len(order), self.batch_size)]
        out: list[tuple[list[int], bool] | None] = [None] * len(texts)
        device = self.model.device
        desc = "rewrite (llm)" if attempt == 0 else f"rewrite (llm) retry {attempt}"
        for b, idx in enumerate(tqdm(batches, desc=desc, unit="batch")):
            enc = self.tokenizer([texts[i] for i in idx], return_tensors="pt", padding=True,
                                 add_special_tokens=False).to(device)
            kwargs: dict[str, Any] = {"max_new_tokens": self.max_new_tokens,
                                      "pad_token_id": self.tokenizer.pad_token_id}
            if attempt == 0:
                kwargs["do_sample"] = False
            else:
                kwargs.update(do_sample=True, temperature=self.retry_temperature, top_k=0, top_p=1.0)
            devices = [device] if device.type == "cuda" else []
            with torch.inference_mode(), torch.random.fork_rng(devices=devices):
                if attempt > 0:
                    torch.manual_seed(retry_seed(self.seed, attempt, b))
                gen = self.model.generate(**enc, **kwargs)
            new = gen[:, enc["input_ids"].shape[1] :].tolist()
            for i, row in zip(idx, new):
                cut = next((j for j, t in enumerate(row) if t in self.eos_ids), None)
                out[i] = (row, True) if cut is None else (row[:cut], False)
        return [o for o in out if o is not None]

    def rewrite(self, requests: list[RewriteRequest], attempt: int = 0) -> list[RewriteResult]:
        """Rewrite each request (see the class doc); one :class:`RewriteResult` per request, in order, with the
        cleaned generation, ``raw`` = the decoded new tokens, ``truncated`` = cut at ``max_new_tokens``.

        Raises:
            TypeError: if an element of ``requests`` is not a :class:`RewriteRequest` (named by index).
            ValueError: if ``attempt < 0``.
        """
        _check_requests(requests, attempt)
        texts = [self.chat_prompt(r) for r in requests]
        results = []
        for ids, truncated in self.generate_ids(texts, attempt):
            raw = self.tokenizer.decode(ids, skip_special_tokens=True)
            results.append(_result(raw, truncated))
        return results


# --------------------------------------------------------------------------------------------------------
# vLLM
# --------------------------------------------------------------------------------------------------------
def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as e:
        raise ImportError(
            "concreteplant.rewriter.backend 'vllm' needs the vllm package, which is not installed: "
            "pip install vllm (a CUDA machine), or choose backend 'llm' (transformers)"
        ) from e
    return vllm


class VLLMRewriter:
    """f_cap with vLLM offline batch inference: the paper's Qwen3-32B with tensor parallelism (Sec. 2.2, A.2).

    All prompts of a call go to ``vllm.LLM.chat`` as one list of single-turn conversations (vLLM schedules the
    batches); the model's chat template renders them with ``chat_template_kwargs={"enable_thinking": ...}``.
    Attempt 0: ``SamplingParams(temperature=0, max_tokens=max_new_tokens)`` (greedy). Attempt k > 0:
    ``SamplingParams(temperature=retry_temperature, seed=retry_seed(seed, k), max_tokens=max_new_tokens)``
    (vLLM seeds each request's own generator, so a retry does not depend on the batch). The answer is
    ``outputs[0].text``; ``finish_reason == "length"`` marks it truncated.

    Args:
        model: Hugging Face model id or local folder (paper: ``"Qwen/Qwen3-32B"``).
        dataset: ``hc`` | ``lc`` | ``wo``: the A.2 example set.
        seed: engine seed and seed of the sampled retries.
        tensor_parallel_size: GPUs to shard the model over (>= 1).
        max_new_tokens: generation limit per caption, in tokens (>= 1).
        dtype: ``auto`` | ``float32`` | ``bfloat16`` | ``float16``.
        enable_thinking: Qwen3's thinking mode (chat-template flag); off.
        retry_temperature: sampling temperature of retries (> 0).
        llm_kwargs: further ``vllm.LLM`` arguments (e.g. ``gpu_memory_utilization``, ``max_model_len``).

    Raises:
        ImportError: when vllm is not installed (the message says ``pip install vllm``).
        ValueError: on a bad ``dataset`` / ``tensor_parallel_size`` / ``max_new_tokens`` /
            ``retry_temperature`` / ``dtype``.
    """

    def __init__(
        self,
        model: str,
        dataset: str,
        seed: int = 0,
        tensor_parallel_size: int = 1,
        max_new_tokens: int = 64,
        dtype: str = "auto",
        enable_thinking: bool = False,
        retry_temperature: float = 0.7,
        **llm_kwargs: Any,
    ) -> None:
        _check_common(dataset, max_new_tokens, retry_temperature, dtype)
        if int(tensor_parallel_size) < 1:
            raise ValueError(f"tensor_parallel_size must be >= 1, got {tensor_parallel_size}")
        self._vllm = _import_vllm()
        self.dataset = dataset
        self.seed = int(seed)
        self.max_new_tokens = int(max_new_tokens)
        self.enable_thinking = bool(enable_thinking)
        self.retry_temperature = float(retry_temperature)
        self.llm = self._vllm.LLM(model=model, tensor_parallel_size=int(tensor_parallel_size), dtype=dtype,
                                  seed=self.seed, **llm_kwargs)

    def sampling_params(self, attempt: int = 0) -> Any:
        """The ``vllm.SamplingParams`` of ``attempt`` (see the class doc)."""
        if attempt == 0:
            return self._vllm.SamplingParams(temperature=0.0, max_tokens=self.max_new_tokens)
        return self._vllm.SamplingParams(temperature=self.retry_temperature, seed=retry_seed(self.seed, attempt),
                                         max_tokens=self.max_new_tokens)

    def rewrite(self, requests: list[RewriteRequest], attempt: int = 0) -> list[RewriteResult]:
        """Rewrite each request (see the class doc); one :class:`RewriteResult` per request, in order.

        Raises:
            TypeError: if an element of ``requests`` is not a :class:`RewriteRequest` (named by index).
            ValueError: if ``attempt < 0``.
            RuntimeError: if vLLM returns a different number of outputs than prompts.
        """
        _check_requests(requests, attempt)
        if not requests:
            return []
        conversations = [[{"role": "user", "content": request_prompt(r, self.dataset)}] for r in requests]
        outputs = self.llm.chat(
            conversations,
            sampling_params=self.sampling_params(attempt),
            use_tqdm=True,
            chat_template_kwargs={"enable_thinking": self.enable_thinking},
        )
        if len(outputs) != len(requests):
            raise RuntimeError(f"vllm LLM.chat returned {len(outputs)} outputs for {len(requests)} prompts")
        results = []
        for out in outputs:
            completion = out.outputs[0]
            results.append(_result(completion.text, completion.finish_reason == "length"))
        return results
