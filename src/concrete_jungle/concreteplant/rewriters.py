"""The rewriter backends of ConcretePlant's captioner f_cap (paper Sec. 2.2, A.2) and their factory.

:func:`build_rewriter` constructs the backend ``concreteplant.rewriter.backend`` names: ``lexical`` (offline word
lists and WordNet, :mod:`.lexical`), ``llm`` (transformers) or ``vllm`` (:mod:`.llm`), importing its module only
then. The backends depend on :mod:`.rewrite` (request / result types, the A.2 prompt, the validator); this module
sits above them all, so no module of the package imports one that imports it back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from concrete_jungle.concreteplant.rewrite import DATASETS, Rewriter
from concrete_jungle.params import RewriterParams

__all__ = ["build_rewriter"]


def build_rewriter(
    cfg: RewriterParams,
    seed: int,
    vocabulary: Mapping[str, Sequence[str]] | None = None,
    dataset: str | None = None,
) -> Rewriter:
    """Construct the rewriter ``cfg.backend`` names, importing its module only then.

    Args:
        cfg: :class:`RewriterParams`.
        seed: the ConcreteBatch's seed (lexical choices; LLM retry sampling, vLLM engine seed).
        vocabulary: lexical backend only: kind -> allowed words (e.g. the scene world's vocabulary).
        dataset: ``hc`` | ``lc`` | ``wo``: picks the A.2 in-context example set; required by ``llm``/``vllm``.

    Raises:
        ValueError: for an LLM backend without a valid ``dataset``.
        ImportError: ``vllm`` when the vllm package is not installed (the message says ``pip install vllm``).
    """
    if cfg.backend == "lexical":
        from concrete_jungle.concreteplant.lexical import LexicalRewriter

        return LexicalRewriter(seed=seed, vocabulary=vocabulary, prefer_in_caption=cfg.prefer_in_caption)
    if dataset not in DATASETS:
        raise ValueError(
            f"build_rewriter: backend {cfg.backend!r} needs dataset in {DATASETS} (it picks the A.2 examples), "
            f"got {dataset!r}"
        )
    if cfg.backend == "llm":
        from concrete_jungle.concreteplant.llm import TransformersRewriter

        return TransformersRewriter(
            cfg.model, dataset, seed=seed, max_new_tokens=cfg.max_new_tokens, batch_size=cfg.batch_size,
            dtype=cfg.dtype, device=cfg.device, enable_thinking=cfg.enable_thinking,
            retry_temperature=cfg.retry_temperature,
        )
    from concrete_jungle.concreteplant.llm import VLLMRewriter

    return VLLMRewriter(
        cfg.model, dataset, seed=seed, tensor_parallel_size=cfg.tensor_parallel_size,
        max_new_tokens=cfg.max_new_tokens, dtype=cfg.dtype, enable_thinking=cfg.enable_thinking,
        retry_temperature=cfg.retry_temperature,
    )
