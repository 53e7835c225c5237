"""Is the engine lossless on this device? ``specrl check --device cuda [--json FILE]``.

The models are small random Llamas made in memory (the test suite's; no download, no build):

1. **Greedy equality** (pass/fail; float32, TF32 off): for a grid of k and tau in {0, 0.5},
   speculative greedy decoding with the dynamic and the static cache emits exactly the target's
   greedy decoding recomputed without a cache. The draft is the target with noise on its head;
   the check requires both accepted and rejected tokens, else equality would be trivial.
2. **Greedy agreement in bfloat16** (information): the same in bf16, and how many tokens agree
   before the first divergence (:data:`BF16_WHY`).
3. **The law of sampled tokens** (pass/fail): the first two tokens of n seeded generations at
   temperature 1 against their exact law from the target alone, on a vocabulary of 6 (36 cells);
   the chi-square p-value must exceed :data:`P_VALUE_FLOOR`.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from specrl.controllers import StaticController
from specrl.engine.decoder import SpeculativeDecoder, drive
from specrl.engine.sampling import SamplingConfig
from specrl.hf import pair_from_models
from specrl.models import CacheSettings, ModelPair, check_device
from specrl.provenance import machine

P_VALUE_FLOOR = 1e-3  # chi-square p-values below this fail the sampling check
BF16_WHY = (
    "information, not pass/fail: in bf16 a verification over k + 1 tokens rounds differently from the "
    "reference's one-token forwards, so a near-tie between two tokens can flip and the sequences then "
    "differ legitimately; exact equality is checked in float32"
)
CACHES = {
    "dynamic": CacheSettings("dynamic"),
    "static": CacheSettings("static"),
    "static-compiled": CacheSettings("static", compile=True),
}


# ---- small random models, built in memory ----------------------------------------------------


def word_tokenizer(vocab_size: int, offset: int = 0) -> PreTrainedTokenizerFast:
    """Tokens "w0".."w{V-2}" plus "<eos>" (id V-1); text is space-separated words."""
    vocab = {f"w{i + offset}": i for i in range(vocab_size - 1)}
    vocab["<eos>"] = vocab_size - 1
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<eos>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", unk_token="<eos>")


def random_llama(
    vocab_size: int, seed: int, hidden: int = 32, layers: int = 2, sharpness: float = 8.0, context: int = 256
) -> LlamaForCausalLM:
    """A random Llama on the CPU whose next-token distributions are far from uniform (scaled head)."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context,
        tie_word_embeddings=False,
        eos_token_id=vocab_size - 1,
        bos_token_id=0,
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(sharpness)
    return model.eval()


def memory_pair(
    target: LlamaForCausalLM,
    draft: LlamaForCausalLM,
    device: str | torch.device,
    dtype: torch.dtype,
    name: str,
) -> ModelPair:
    """A :class:`ModelPair` of two models in memory (moved to ``device`` and ``dtype``)."""
    check_device(torch.device(device))
    target, draft = (model.to(device=device, dtype=dtype).eval() for model in (target, draft))
    return replace(pair_from_models(target, draft, word_tokenizer(target.config.vocab_size)), name=name)


def noisy_copy(vocab_size: int, noise: float, seed: int, context: int = 128) -> LlamaForCausalLM:
    """The random Llama of seed 0 with Gaussian noise on its head (``noise`` times the head's std,
    drawn from ``seed``): a draft of partial, varied acceptance against that Llama as the target."""
    model = random_llama(vocab_size, seed=0, context=context)
    torch.manual_seed(seed)
    with torch.no_grad():
        model.lm_head.weight.add_(torch.randn_like(model.lm_head.weight) * model.lm_head.weight.std() * noise)
    return model


def close_pair(device: str | torch.device, dtype: torch.dtype = torch.float32) -> ModelPair:
    """A target (vocabulary 48) and a draft that is the target with noise on its head: partial,
    varied acceptance, so greedy equality is not trivial."""
    target = random_llama(48, seed=0, context=128)
    return memory_pair(target, noisy_copy(48, 0.4, seed=5), device, dtype, "selfcheck-close")


def small_vocab_pair(device: str | torch.device, dtype: torch.dtype = torch.float32) -> ModelPair:
    """A target and an unrelated one-layer draft over 6 tokens: the joint law of two tokens has 36 cells."""
    target = random_llama(6, seed=0)
    draft = random_llama(6, seed=3, layers=1, sharpness=3.0)
    return memory_pair(target, draft, device, dtype, "selfcheck-v6")


def with_cache(pair: ModelPair, cache: str) -> ModelPair:
    """The same models with another KV cache (a name of :data:`CACHES`)."""
    return replace(pair, cache=CACHES[cache])


@contextlib.contextmanager
def ieee_float32() -> Iterator[None]:
    """float32 matmuls in full precision (TF32 off on CUDA) inside the block; restored after."""
    matmul, cudnn = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(matmul)
        torch.backends.cudnn.allow_tf32 = cudnn


# ---- the references --------------------------------------------------------------------------


def random_prompts(n: int, vocab_size: int, seed: int = 0, length: int = 12) -> list[list[int]]:
    """``n`` prompts of random token ids (never the last id, the eos)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab_size - 1, (length,), generator=g).tolist() for _ in range(n)]


@torch.inference_mode()
def reference_greedy(model, prompt: list[int], n: int, vocab_size: int | None = None) -> list[int]:
    """Plain greedy decoding by recomputing the whole sequence each token (no cache); the argmax over
    the first ``vocab_size`` logits (a model's rows past its tokenizer are padding)."""
    device = next(model.parameters()).device
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(model(torch.tensor([ids], device=device)).logits[0, -1, :vocab_size].argmax()))
    return ids[len(prompt) :]


def target_next_probs(pair: ModelPair, ids: list[int], sampling: SamplingConfig) -> torch.Tensor:
    """The target's sampling law (float64, CPU) for the token after ``ids``."""
    logits = pair.target(torch.tensor([ids], device=pair.device)).logits[0, -1, : pair.vocab_size]
    return sampling.probs(logits.float()).double().cpu()


@torch.inference_mode()
def exact_two_token_law(
    pair: ModelPair, prompt: list[int], sampling: SamplingConfig, support: Sequence[int] | None = None
) -> torch.Tensor:
    """(S, S) probabilities (float64, CPU) of the first two tokens (t1, t2) when sampling from the
    target alone, over ``support`` (default: the whole vocabulary; a large one needs a small
    support, e.g. :func:`two_token_support` under top-k sampling).

    Raises:
        ValueError: the target can sample a token outside ``support``.
    """
    tokens = list(range(pair.vocab_size)) if support is None else list(support)
    index = torch.tensor(tokens)

    def next_probs(ids: list[int]) -> torch.Tensor:
        probs = target_next_probs(pair, ids, sampling)
        if probs[index].sum() < 1 - 1e-6:
            raise ValueError(f"the target can sample tokens outside the support after {len(ids)} tokens")
        return probs[index]

    first = next_probs(prompt)
    return torch.stack(
        [first[i] * next_probs(prompt + [t1]) if first[i] > 0 else torch.zeros(len(tokens), dtype=first.dtype)
         for i, t1 in enumerate(tokens)]
    )  # fmt: skip


@torch.inference_mode()
def two_token_support(pair: ModelPair, prompt: list[int], sampling: SamplingConfig) -> list[int]:
    """Every token the target alone can sample first or second after ``prompt`` (sorted)."""

    def possible(ids: list[int]) -> set[int]:
        return set(target_next_probs(pair, ids, sampling).nonzero().flatten().tolist())

    first = possible(prompt)
    return sorted(first.union(*(possible(prompt + [t1]) for t1 in first)))


def two_token_counts(
    pair: ModelPair,
    prompt: list[int],
    k: int,
    tau: float,
    sampling: SamplingConfig,
    n: int,
    drafter: str = "draft",
    batch: int = 1,
    support: Sequence[int] | None = None,
) -> torch.Tensor:
    """(S, S) counts of the first two tokens of ``n`` speculative generations of ``prompt`` (seeds
    0, 1, ...) over ``support`` (default: the whole vocabulary; a token outside it raises
    ValueError). The budget is k + 1 tokens, so the first step really proposes up to k; each
    generation stops once every row has two tokens. With ``batch`` > 1 the prompt fills all rows
    but the last, which holds a longer prompt, so the rows are ragged from the start."""
    tokens = list(range(pair.vocab_size)) if support is None else list(support)
    position = {token: i for i, token in enumerate(tokens)}
    counts = torch.zeros(len(tokens), len(tokens))
    decoder = SpeculativeDecoder(pair, StaticController(k, tau, drafter))
    options = dict(temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p)
    budget = max(2, k + 1)
    rows = [prompt] * max(1, batch - 1) + ([prompt + prompt[:3]] if batch > 1 else [])
    counted = range(max(1, batch - 1))
    for seed in range(-(-n // len(counted))):
        generation = decoder.start(rows, max_new_tokens=budget, stop_at_eos=False, seed=seed, **options)
        drive(
            generation,
            decoder.controller,
            stop=lambda g=generation: all(len(g.output_ids(r)) >= 2 for r in counted),
        )
        for r in counted:
            t1, t2 = generation.output_ids(r)[:2]
            if t1 not in position or t2 not in position:
                raise ValueError(f"seed {seed} sampled ({t1}, {t2}): a token outside the target's support")
            counts[position[t1], position[t2]] += 1
    return counts


def chi_square_p_value(counts: torch.Tensor, law: torch.Tensor) -> float:
    """The chi-square p-value of ``counts`` (V, V) under ``law``; 0.0 when a token the law gives
    probability 0 was emitted (the law is broken outright). Cells expected fewer than 5 times are
    pooled into one, so that the chi-square approximation holds."""
    from scipy.stats import chisquare  # scipy is imported only when a law is tested

    n = counts.sum()
    expected, observed = (law.flatten().double() * n), counts.flatten().double()
    if observed[expected == 0].sum() > 0:
        return 0.0
    big = expected >= 5
    small = (~big) & (expected > 0)
    expected = torch.cat([expected[big], expected[small].sum(0, keepdim=True)])
    observed = torch.cat([observed[big], observed[small].sum(0, keepdim=True)])
    keep = expected > 0
    expected = expected[keep] * observed[keep].sum() / expected[keep].sum()  # float rounding
    return float(chisquare(observed[keep].numpy(), expected.numpy()).pvalue)


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


# ---- the checks ------------------------------------------------------------------------------


def check_greedy(
    pair: ModelPair,
    prompts: Sequence[list[int]],
    *,
    tokens: int = 24,
    ks: Sequence[int] = (0, 1, 2, 4, 8),
    taus: Sequence[float] = (0.0, 0.5),
    caches: Sequence[str] = ("dynamic", "static"),
    strict: bool = True,
) -> dict:
    """Speculative greedy decoding of each prompt for every (cache, k, tau) against
    :func:`reference_greedy` of the target. Strict: ``passed`` is whether every run equals the
    reference and some run both accepted and rejected draft tokens; else ``passed`` is None."""
    runs = []
    for index, prompt in enumerate(prompts):
        expected = reference_greedy(pair.target, prompt, tokens)
        for cache, k, tau in itertools.product(caches, ks, taus):
            decoder = SpeculativeDecoder(with_cache(pair, cache), StaticController(k, tau))
            out = decoder.generate(prompt, max_new_tokens=tokens, stop_at_eos=False)
            runs.append(
                {
                    "prompt": index,
                    "cache": cache,
                    "k": k,
                    "tau": tau,
                    "equal": out.token_ids == expected,
                    "agree": first_divergence(out.token_ids, expected),
                    "num_draft_tokens": out.stats.num_draft_tokens,
                    "num_accepted_tokens": out.stats.num_accepted_tokens,
                }
            )
    all_equal = all(run["equal"] for run in runs)
    rejections = any(0 < run["num_accepted_tokens"] < run["num_draft_tokens"] for run in runs)
    result = {
        "dtype": str(pair.dtype).removeprefix("torch."),
        "strict": strict,
        "tokens": tokens,
        "all_equal": all_equal,
        "accepts_and_rejects": rejections,
        "min_agree": min(run["agree"] for run in runs),
        "mean_agree": sum(run["agree"] for run in runs) / len(runs),
        "unequal_runs": [r for r in runs if not r["equal"]],
        "runs": len(runs),
        "passed": (all_equal and rejections) if strict else None,
    }
    if not strict:
        result["why_not_pass_fail"] = BF16_WHY
    return result


def check_sampling(
    pair: ModelPair,
    *,
    samples: int = 1000,
    k: int = 3,
    taus: Sequence[float] = (0.0, 0.5),
    caches: Sequence[str] = ("dynamic", "static"),
    prompt: Sequence[int] = (1, 2, 3, 0, 4),
    temperature: float = 1.0,
) -> dict:
    """The law of the first two sampled tokens for every (cache, tau): chi-square p-value of
    ``samples`` speculative generations against the target's exact law; passed when every p-value
    exceeds :data:`P_VALUE_FLOOR`."""
    sampling = SamplingConfig(temperature)
    law = exact_two_token_law(pair, list(prompt), sampling)
    runs = []
    for cache, tau in itertools.product(caches, taus):
        counts = two_token_counts(with_cache(pair, cache), list(prompt), k, tau, sampling, samples)
        runs.append({"cache": cache, "k": k, "tau": tau, "p_value": chi_square_p_value(counts, law)})
    return {
        "dtype": str(pair.dtype).removeprefix("torch."),
        "strict": True,
        "samples": samples,
        "temperature": temperature,
        "p_value_floor": P_VALUE_FLOOR,
        "runs": runs,
        "min_p_value": min(run["p_value"] for run in runs),
        "passed": all(run["p_value"] > P_VALUE_FLOOR for run in runs),
    }


def run_selfcheck(
    device: str | torch.device = "cpu",
    *,
    samples: int = 1000,
    tokens: int = 24,
    prompts: int = 2,
    ks: Sequence[int] = (0, 1, 2, 4, 8),
    caches: Sequence[str] = ("dynamic", "static"),
    log: Callable[[str], None] | None = None,
) -> dict:
    """The three checks on ``device`` (module docstring); a JSON-able dict with each check's
    result and seconds, and ``passed``: whether both strict checks passed."""
    log = log or (lambda message: None)
    device = torch.device(device)
    check_device(device)
    checks: dict[str, dict] = {}
    prompt_ids = random_prompts(prompts, 48, seed=11)

    def timed(name: str, run: Callable[[], dict]) -> None:
        started = time.perf_counter()
        checks[name] = run()
        checks[name]["seconds"] = round(time.perf_counter() - started, 2)
        verdict = {True: "passed", False: "FAILED", None: "information"}[checks[name]["passed"]]
        log(f"  {name}: {verdict} ({checks[name]['seconds']:.1f} s)")

    with ieee_float32():
        timed(
            "greedy_float32",
            lambda: check_greedy(close_pair(device), prompt_ids, tokens=tokens, ks=ks, caches=caches),
        )
        timed(
            "sampling_float32",
            lambda: check_sampling(small_vocab_pair(device), samples=samples, caches=caches),
        )
    timed(
        "greedy_bfloat16",
        lambda: check_greedy(
            close_pair(device, torch.bfloat16), prompt_ids, tokens=tokens, ks=ks, caches=caches, strict=False
        ),
    )
    here = machine(device)
    return {
        "device": here["device"],
        "device_name": here.get("gpu"),
        "torch": here["torch"],
        "float32_matmul": "highest (TF32 off) in the float32 checks",
        "checks": checks,
        "passed": all(check["passed"] for check in checks.values() if check["strict"]),
    }
