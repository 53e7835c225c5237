"""Shared fixtures: small random Llama pairs with a word-level tokenizer, saved like hub models."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

import specrl
from specrl.engine.sampling import SamplingConfig
from specrl.envs import DomainShift, PromptSpec, RewardSpec, Scenario, collect_traces
from specrl.latency import LatencyModel

# The models, references and the chi-square of the tests are the library's self-check's
# (specrl/selfcheck.py), so that there is one implementation; re-exported for the test modules.
from specrl.selfcheck import (  # noqa: F401
    chi_square_p_value,
    exact_two_token_law,
    noisy_copy,
    random_llama,
    reference_greedy,
    two_token_counts,
    word_tokenizer,
)
from specrl.selfcheck import random_prompts as prompts  # noqa: F401
from specrl.traces import TraceSet

# The models here are tiny: one thread is faster than two fighting over the cores.
torch.set_num_threads(1)

# tests/in_vllm/ runs specrl's proposer inside vLLM: in the vLLM environment that .ci/run builds
# (vLLM pins its own torch and transformers); where vLLM is not installed there is nothing to run.
collect_ignore = [] if importlib.util.find_spec("vllm") else ["in_vllm"]


REPO = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(items):
    """The slow tests first (a stable sort), so that the workers' last minutes hold short tests
    and no worker idles while another finishes a long one."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def save_model(path: Path, model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast) -> str:
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def make_pair(
    tmp_path: Path,
    vocab_size: int = 64,
    draft_seed: int = 1,
    target_seed: int = 0,
    draft_sharpness: float = 8.0,
    context: int = 256,
    draft_layers: int = 1,
    mid_seed: int | None = None,
) -> specrl.ModelPair:
    """A random target and draft; with ``mid_seed``, a two-layer mid draft too (the pool's draft-mid)."""
    tokenizer = word_tokenizer(vocab_size)
    target = save_model(
        tmp_path / "target", random_llama(vocab_size, target_seed, context=context), tokenizer
    )
    draft_model = random_llama(
        vocab_size, draft_seed, layers=draft_layers, sharpness=draft_sharpness, context=context
    )
    draft = save_model(tmp_path / "draft", draft_model, tokenizer)
    mid = None
    if mid_seed is not None:
        mid_model = random_llama(vocab_size, mid_seed, layers=2, sharpness=draft_sharpness, context=context)
        mid = save_model(tmp_path / "mid", mid_model, tokenizer)
    return specrl.load_pair(target=target, draft=draft, mid=mid, device="cpu")


@pytest.fixture(scope="session")
def pair(tmp_path_factory) -> specrl.ModelPair:
    """Target and an unrelated draft: many rejections."""
    return make_pair(tmp_path_factory.mktemp("pair"))


@pytest.fixture(scope="session")
def twin_pair(tmp_path_factory) -> specrl.ModelPair:
    """Draft identical to the target."""
    return make_pair(tmp_path_factory.mktemp("twin"), draft_seed=0, draft_sharpness=8.0, draft_layers=2)


@pytest.fixture(scope="session")
def small_vocab_pair(tmp_path_factory) -> specrl.ModelPair:
    """Vocabulary of 6 so the joint law of two tokens has 36 cells for a chi-square test; with a
    mid draft, so every drafter of the pool runs on it."""
    directory = tmp_path_factory.mktemp("v6")
    return make_pair(directory, vocab_size=6, draft_seed=3, draft_sharpness=3.0, mid_seed=5)


@pytest.fixture(scope="session")
def pool_pair(tmp_path_factory) -> specrl.ModelPair:
    """Target, an unrelated draft and an unrelated mid draft: every drafter of the pool, many rejections."""
    return make_pair(tmp_path_factory.mktemp("pool"), mid_seed=2)


@pytest.fixture(scope="session")
def tiny_home(tmp_path_factory):
    """The embedded "tiny" pair, built once per session into a temporary SPECRL_HOME (~15 s)."""
    home = tmp_path_factory.mktemp("specrl-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECRL_HOME", str(home))
        pair = specrl.load_pair(preset="tiny", device="cpu")  # builds on first use
        yield home, pair


# ---- trace replay: a pair with partial acceptance, prompts, scenarios, traces ----------------

VOCAB = 48


@pytest.fixture(scope="session")
def close_pair(tmp_path_factory) -> specrl.ModelPair:
    """A draft that is the target with noise added to its head: partial, varied acceptance."""
    tmp = tmp_path_factory.mktemp("close_pair")
    tokenizer = word_tokenizer(VOCAB)
    target = random_llama(VOCAB, seed=0, context=128)
    return specrl.load_pair(
        target=save_model(tmp / "target", target, tokenizer),
        draft=save_model(tmp / "draft", noisy_copy(VOCAB, 0.4, seed=5), tokenizer),
        device="cpu",
    )


@pytest.fixture(scope="session")
def close_pool_pair(tmp_path_factory) -> specrl.ModelPair:
    """The target with two noisy copies: the draft (head noise 0.4) and the mid draft (0.2), so
    every drafter of the pool has partial, varied acceptance."""
    tmp = tmp_path_factory.mktemp("close_pool_pair")
    tokenizer = word_tokenizer(VOCAB)
    target = random_llama(VOCAB, seed=0, context=128)
    copies = {}
    for name, noise, seed in (("draft", 0.4, 5), ("mid", 0.2, 6)):
        copies[name] = save_model(tmp / name, noisy_copy(VOCAB, noise, seed), tokenizer)
    return specrl.load_pair(target=save_model(tmp / "target", target, tokenizer), **copies, device="cpu")


@pytest.fixture(scope="session")
def prompt_file(tmp_path_factory) -> str:
    texts = [" ".join(f"w{i}" for i in ids) for ids in prompts(20, VOCAB, seed=4)]
    sets = {
        "train": {"code": texts[:4], "math": texts[4:8]},
        "test": {"code": texts[8:12], "math": texts[12:16]},
        "validation": {"code": texts[16:18], "math": texts[18:]},
    }
    path = tmp_path_factory.mktemp("prompts") / "prompts.json"
    path.write_text(json.dumps(sets))
    return str(path)


def scenario(prompt_file: str, temperature: float = 0.0, **changes) -> Scenario:
    base = Scenario(
        name="words",
        prompts=PromptSpec(file=prompt_file, domains={"code": 1.0, "math": 1.0}),
        max_new_tokens=24,
        reward=RewardSpec(time="modeled"),
        latency="constant",
    )
    return replace(base, sampling=replace(base.sampling, temperature=temperature), **changes)


@pytest.fixture(scope="session")
def latency() -> LatencyModel:
    # a cost model with context dependence off; the draft is made relatively expensive so
    # that actions matter
    return LatencyModel.from_cost_model(
        specrl.envs.CostModel(draft_forward_s=0.002, target_forward_s=0.01, target_per_token_s=0.001)
    )


@pytest.fixture(scope="session")
def shifted(prompt_file) -> Scenario:
    return scenario(prompt_file, shift=(DomainShift(10, "math"),))


@pytest.fixture(scope="session")
def greedy_traces(close_pair, shifted) -> TraceSet:
    return collect_traces(close_pair, shifted, "test", progress=False)


def step_and_check_rollback(
    pair: specrl.ModelPair,
    prompt: list[int] | list[list[int]],
    n: int,
    label: str = "",
    drafters: tuple[str, ...] = ("draft",),
) -> tuple:
    """Decode ``n`` tokens of one prompt or of a batch of prompts at temperature 1 with k cycling
    through 3, 0, 5, 1, 8, 2 (and the drafter through ``drafters``); after every step each cached
    model must hold a prefix of every row's sequence whose next-token logits equal a full
    recompute of that row alone. Returns the generation and the (all accepted, proposed any)
    outcomes seen."""
    import itertools

    from specrl.engine.cache import padded
    from specrl.engine.generation import Generation

    batch = prompt if isinstance(prompt[0], list) else [prompt]
    generation = Generation(pair, batch, n, SamplingConfig(1.0), seed=2)
    outcomes = set()
    for k, drafter in zip(itertools.cycle([3, 0, 5, 1, 8, 2]), itertools.cycle(drafters)):
        if generation.done:
            break
        step = generation.step(specrl.Action(k, 0.0, drafter=drafter))
        outcomes |= {(result.accepted == result.proposed, result.proposed > 0) for result in step.results}
        # the rows the caches hold: the active ones (the last to finish keep theirs)
        sequences = [generation.tokens[r] for r in (generation.active or step.rows)]
        for cached in generation.caches():
            # a prefix of each row, and the next-token logits from it equal a full recompute
            assert all(held <= len(s) - 1 for held, s in zip(cached.lengths, sequences, strict=True))
            pending = [s[held:] for held, s in zip(cached.lengths, sequences, strict=True)]
            ids, counts = padded(pending, pair.device)
            with torch.inference_mode():
                logits = cached.feed(ids, counts, keep=ids.shape[1])
                for i, sequence in enumerate(sequences):
                    full = cached.model(torch.tensor([sequence])).logits[0, -1, : pair.vocab_size]
                    torch.testing.assert_close(
                        logits[i, len(pending[i]) - 1],
                        full,
                        atol=1e-4,
                        rtol=1e-4,
                        msg=lambda m: f"{label}: {m}",
                    )
            cached.rollback([len(s) - 1 for s in sequences])
        assert generation.target.lengths == [len(s) - 1 for s in sequences]
    return generation, outcomes


def step_outcome(result) -> tuple:
    """What a replayed step must share with the real one (greedy): counts, tokens, cuts, drafter."""
    return (
        result.action.drafter,
        result.k,
        result.proposed,
        result.accepted,
        result.emitted,
        result.stopped_by_tau,
        result.tokens,
        result.draft_forwards,
    )
