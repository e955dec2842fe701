"""LLM caption rewriters (paper Sec. 2.2 f_cap = Qwen3-32B, A.2 prompt): transformers end to end on a tiny
random-init Qwen3 and a locally built tokenizer (no download); vLLM with the engine faked at its API."""

from __future__ import annotations

import copy
import subprocess
import sys
import types
from collections import Counter

import pytest
import torch

from concrete_jungle.concreteplant import llm as llm_mod
from concrete_jungle.concreteplant.llm import TransformersRewriter, VLLMRewriter
from concrete_jungle.concreteplant.rewriters import build_rewriter
from concrete_jungle.concreteplant.rewrite import (
    A2_EXAMPLES,
    A2_PROMPT,
    RewriteRequest,
    Rewriter,
    RewriterParams,
    build_prompt,
    format_examples,
    request_prompt,
    retry_seed,
    rewrite_with_retries,
)

# A Qwen3-style chat template: ChatML turns; with enable_thinking false the generation prompt carries an empty
# think block, as Qwen3's own template does.
CHAT_TEMPLATE = (
    "{%- for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}{%- endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
THINK_OFF = "<|im_start|>assistant\n<think>\n\n</think>\n\n"


def req(caption: str, keyword: str, type_: str, lemma: str | None = None) -> RewriteRequest:
    start = caption.index(keyword)
    return RewriteRequest(caption, keyword, start, start + len(keyword), type_, lemma or keyword.lower())


REQS = [
    req("A man riding a red bike", "red", "attribute"),
    req("A child standing in front of the tree", "in front of", "relation", "front"),
    req("Two dogs sleeping on a wooden bench in the park", "dogs", "object", "dog"),
    req("A cat under a table", "under", "relation"),
    req("A small boat on a calm lake at sunset with mountains", "boat", "object"),
]


def build_tokenizer():
    """Byte-level BPE (400 tokens) trained on the A.2 text and the test captions, with ChatML special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = [A2_PROMPT] + [format_examples(v) for v in A2_EXAMPLES.values()] + [r.caption for r in REQS]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   chat_template=CHAT_TEMPLATE)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The tiny model runs ~10x faster on one thread than on two contended ones; restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny():
    """(model, tokenizer): a 2-layer random-init Qwen3ForCausalLM (init std 0.5, so outputs depend on the prompt)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = build_tokenizer()
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=1024,
                      initializer_range=0.5, tie_word_embeddings=False, eos_token_id=tokenizer.eos_token_id,
                      pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
    return Qwen3ForCausalLM(cfg).eval(), tokenizer


def make(tiny, dataset="hc", **kw) -> TransformersRewriter:
    model, tokenizer = tiny
    return TransformersRewriter("local/tiny-qwen3", dataset, model=model, tokenizer=tokenizer, **kw)


@pytest.fixture
def spy(tiny, monkeypatch):
    """Records the kwargs of every model.generate call."""
    model = tiny[0]
    calls = []
    real = model.generate

    def generate(**kwargs):
        calls.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(model, "generate", generate)
    return calls


# -- prompts ---------------------------------------------------------------------------------------------------
def test_chat_prompt_is_the_a2_prompt_with_the_dataset_example_set(tiny):
    hc, wo = make(tiny, "hc"), make(tiny, "wo")
    p = hc.chat_prompt(REQS[0])
    body = build_prompt("A man riding a red bike", "red", "attribute", "hc")
    assert p == "<|im_start|>user\n" + body + "<|im_end|>\n" + THINK_OFF  # thinking disabled: empty block
    assert "Input: A wooden boat floating on the water, Keyword: wooden, Output: A plastic boat" in p
    assert "A dog running in the park" not in p
    w = wo.chat_prompt(REQS[0])
    assert format_examples(A2_EXAMPLES["without_concreteness"]) in w and "A wooden boat" not in w
    assert "Keyword: highway, Output: A car driving on the grass." in w
    # relation: the relation example set, and the content word of the spatial phrase as the keyword
    r = hc.chat_prompt(REQS[1])
    assert "Input: A cat sitting under a table, Keyword: under, Output: A cat sitting on a table." in r
    assert r.endswith("Input: A child standing in front of the tree Keyword: front Output:<|im_end|>\n" + THINK_OFF)
    # thinking on: the template leaves the think block to the model
    assert make(tiny, "hc", enable_thinking=True).chat_prompt(REQS[0]).endswith("<|im_start|>assistant\n")


# -- generation ------------------------------------------------------------------------------------------------
def test_batched_greedy_equals_one_at_a_time(tiny, spy):
    batched = make(tiny, batch_size=5, max_new_tokens=6)
    single = make(tiny, batch_size=1, max_new_tokens=6)
    texts = [batched.chat_prompt(r) for r in REQS]
    ids_b = batched.generate_ids(texts)
    assert len(spy) == 1
    call = spy[0]
    assert call["do_sample"] is False and call["max_new_tokens"] == 6
    mask = call["attention_mask"]
    lengths = mask.sum(1)
    assert mask.shape[0] == 5 and len(set(lengths.tolist())) == 5  # five prompt lengths: real padding
    assert batched.tokenizer.padding_side == "left"
    assert bool((mask[:, -1] == 1).all()) and int((mask[:, 0] == 0).sum()) == 4  # pads on the left
    spy.clear()
    ids_s = single.generate_ids(texts)
    assert len(spy) == 5
    assert ids_b == ids_s  # token-identical
    assert len({tuple(ids) for ids, _ in ids_b}) >= 3  # the prompts lead to different generations
    # the decoded results agree too, and the rewriter satisfies the protocol
    assert batched.rewrite(REQS) == single.rewrite(REQS)
    assert isinstance(batched, Rewriter)


def test_truncation_flag(tiny):
    model, tokenizer = tiny
    eos = tokenizer.eos_token_id
    short = make(tiny, max_new_tokens=1)
    out = short.generate_ids([short.chat_prompt(r) for r in REQS])
    assert all(len(ids) == (1 if trunc else 0) for ids, trunc in out)
    assert [trunc for _, trunc in out].count(True) >= 3  # the random model rarely says <|im_end|> first
    results = short.rewrite(REQS)
    assert [r.truncated for r in results] == [t for _, t in out]
    # a model that always emits <|im_end|> first: nothing generated, nothing truncated
    eos_model = copy.deepcopy(model)
    head = torch.nn.Linear(eos_model.config.hidden_size, eos_model.config.vocab_size, bias=True)
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.zeros_(head.bias)
    head.bias.data[eos] = 10.0
    eos_model.lm_head = head
    rw = TransformersRewriter("local/eos", "hc", model=eos_model, tokenizer=tokenizer, max_new_tokens=1)
    res = rw.rewrite(REQS[:2])
    assert [(r.negative_caption, r.raw, r.truncated, r.reason) for r in res] == [("", "", False, None)] * 2
    # through the validator: truncated and empty answers are both rejected and counted
    results, rejected = rewrite_with_retries(short, REQS, max_attempts=1)
    assert all(r.negative_caption is None for r in results)
    assert sum(rejected.values()) == 5 and rejected["truncated"] == [t for _, t in out].count(True)


def test_retry_attempts_sample_reproducibly(tiny, spy):
    rw = make(tiny, batch_size=5, max_new_tokens=6, seed=3, retry_temperature=1.5)
    texts = [rw.chat_prompt(r) for r in REQS]
    state = torch.random.get_rng_state()
    a1 = rw.generate_ids(texts, attempt=1)
    assert torch.equal(state, torch.random.get_rng_state())  # global RNG untouched (forked)
    assert spy[0]["do_sample"] is True and spy[0]["temperature"] == 1.5
    assert spy[0]["top_k"] == 0 and spy[0]["top_p"] == 1.0
    assert rw.generate_ids(texts, attempt=1) == a1  # same (seed, attempt): same sample
    a2 = rw.generate_ids(texts, attempt=2)
    greedy = rw.generate_ids(texts, attempt=0)
    assert a2 != a1 and a1 != greedy
    with pytest.raises(ValueError, match="attempt"):
        rw.generate_ids(texts, attempt=-1)


def test_bad_arguments(tiny):
    model, tokenizer = tiny
    with pytest.raises(ValueError, match="dataset"):
        make(tiny, "xx")
    with pytest.raises(ValueError, match="batch_size"):
        make(tiny, batch_size=0)
    with pytest.raises(ValueError, match="both model and tokenizer"):
        TransformersRewriter("x", "hc", model=model)
    bare = copy.deepcopy(tokenizer)
    bare.chat_template = None
    with pytest.raises(ValueError, match="chat template"):
        TransformersRewriter("x", "hc", model=model, tokenizer=bare)
    with pytest.raises(TypeError, match=r"requests\[1\]"):
        make(tiny).rewrite([REQS[0], "A red car"])  # type: ignore[list-item]
    assert make(tiny).rewrite([]) == []


# -- vLLM (engine faked at its API) ------------------------------------------------------------------------------
class FakeVLLM(types.ModuleType):
    """A stand-in ``vllm`` module: ``LLM`` records its arguments and every ``chat`` call and answers from a
    queue of (text, finish_reason) lists; ``SamplingParams`` keeps its keyword arguments."""

    def __init__(self, answers):
        super().__init__("vllm")
        self.inits, self.chats, self.answers = [], [], list(answers)
        fake = self

        class SamplingParams:
            def __init__(self, **kwargs):
                self.kwargs = kwargs

        class LLM:
            def __init__(self, **kwargs):
                fake.inits.append(kwargs)

            def chat(self, messages, sampling_params=None, use_tqdm=True, chat_template_kwargs=None):
                fake.chats.append(dict(messages=messages, sampling_params=sampling_params.kwargs,
                                       use_tqdm=use_tqdm, chat_template_kwargs=chat_template_kwargs))
                batch = fake.answers.pop(0)
                return [types.SimpleNamespace(outputs=[types.SimpleNamespace(text=t, finish_reason=f)])
                        for t, f in batch]

        self.LLM, self.SamplingParams = LLM, SamplingParams


HELMET = req("A person wearing a red helmet", "red", "attribute")
PARK = req("A dog running in the park", "dog", "object")


def test_vllm_backend_calls_the_engine_as_documented(monkeypatch):
    fake = FakeVLLM([
        [("<think>\n\n</think>\n\nA person wearing a blue helmet.", "stop"), ("A cat running in the", "length")],
        [("A horse running in the park.", "stop")],
    ])
    monkeypatch.setitem(sys.modules, "vllm", fake)
    rw = VLLMRewriter("Qwen/Qwen3-32B", "wo", seed=5, tensor_parallel_size=4, max_new_tokens=32, dtype="bfloat16")
    assert fake.inits == [dict(model="Qwen/Qwen3-32B", tensor_parallel_size=4, dtype="bfloat16", seed=5)]
    assert isinstance(rw, Rewriter)

    results, rejected = rewrite_with_retries(rw, [HELMET, PARK], max_attempts=3)
    assert [(r.negative_caption, r.attempt) for r in results] == [
        ("A person wearing a blue helmet.", 0), ("A horse running in the park.", 1)]
    assert rejected == Counter()
    first, retry = fake.chats
    assert first["messages"] == [[{"role": "user", "content": request_prompt(HELMET, "wo")}],
                                 [{"role": "user", "content": request_prompt(PARK, "wo")}]]
    assert "A car driving on the highway" in first["messages"][1][0]["content"]  # the D_wo example set
    assert first["sampling_params"] == {"temperature": 0.0, "max_tokens": 32}
    assert first["chat_template_kwargs"] == {"enable_thinking": False} and first["use_tqdm"] is True
    # only the truncated request is retried, sampled with the seed of (5, attempt 1)
    assert retry["messages"] == [[{"role": "user", "content": request_prompt(PARK, "wo")}]]
    assert retry["sampling_params"] == {"temperature": 0.7, "seed": retry_seed(5, 1), "max_tokens": 32}
    assert retry_seed(5, 1) == 1026728666


def test_vllm_truncation_and_output_count(monkeypatch):
    fake = FakeVLLM([[("A person wearing a", "length")], []])
    monkeypatch.setitem(sys.modules, "vllm", fake)
    rw = VLLMRewriter("m", "hc", max_new_tokens=4)
    (res,) = rw.rewrite([HELMET])
    assert (res.truncated, res.raw, res.negative_caption) == (True, "A person wearing a", "A person wearing a")
    with pytest.raises(RuntimeError, match="0 outputs for 1 prompts"):
        rw.rewrite([HELMET])
    assert rw.rewrite([]) == [] and len(fake.chats) == 2  # no engine call for nothing


def test_vllm_missing_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` fail
    with pytest.raises(ImportError, match="pip install vllm"):
        VLLMRewriter("Qwen/Qwen3-32B", "hc")
    with pytest.raises(ImportError, match="pip install vllm"):
        build_rewriter(RewriterParams(backend="vllm"), seed=0, dataset="hc")


# -- configuration and construction -------------------------------------------------------------------------------
def test_rewriter_params_validation():
    p = RewriterParams()
    assert (p.backend, p.model, p.max_new_tokens, p.max_attempts, p.enable_thinking) == (
        "lexical", "Qwen/Qwen3-32B", 64, 3, False)
    for bad in ({"backend": "gpt"}, {"max_attempts": 0}, {"max_new_tokens": 0}, {"batch_size": 0},
                {"retry_temperature": 0}, {"retry_temperature": float("inf")}, {"tensor_parallel_size": 0},
                {"dtype": "int8"}, {"temperature": 1.0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            RewriterParams(**bad)
    # params.yaml shorthand: a bare backend name
    assert RewriterParams.model_validate("vllm") == RewriterParams(backend="vllm")
    with pytest.raises(ValueError, match="backend"):
        RewriterParams.model_validate("gpt")


def test_build_rewriter_picks_the_backend(tiny, monkeypatch):
    from concrete_jungle.concreteplant.lexical import LexicalRewriter

    assert isinstance(build_rewriter(RewriterParams(), seed=1), LexicalRewriter)
    loads = []

    def fake_load(name, dtype, device):
        loads.append((name, dtype, device))
        return tiny

    monkeypatch.setattr(llm_mod.TransformersRewriter, "_load", staticmethod(fake_load))
    cfg = RewriterParams(backend="llm", dtype="bfloat16", max_new_tokens=8, batch_size=2, retry_temperature=0.9)
    rw = build_rewriter(cfg, seed=7, dataset="lc")
    assert loads == [("Qwen/Qwen3-32B", "bfloat16", "auto")]
    assert (type(rw).__name__, rw.dataset, rw.seed, rw.max_new_tokens, rw.batch_size, rw.retry_temperature) == (
        "TransformersRewriter", "lc", 7, 8, 2, 0.9)
    with pytest.raises(ValueError, match="needs dataset"):
        build_rewriter(cfg, seed=7)
    fake = FakeVLLM([])
    monkeypatch.setitem(sys.modules, "vllm", fake)
    v = build_rewriter(RewriterParams(backend="vllm", tensor_parallel_size=2), seed=3, dataset="hc")
    assert isinstance(v, VLLMRewriter)
    assert fake.inits == [dict(model="Qwen/Qwen3-32B", tensor_parallel_size=2, dtype="auto", seed=3)]


def test_backends_are_imported_lazily():
    code = ("import sys, concrete_jungle.concreteplant.rewrite, concrete_jungle.concreteplant.llm; "
            "print(sorted(m for m in ('vllm', 'transformers', 'concrete_jungle.concreteplant.lexical') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
