"""Every budget of the GPU check, for a run on one GPU and for ``--smoke`` (the CPU, CI)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

AIM_SECONDS = 360  # the whole run on one H200 (issue 16)

BUDGETS: dict[str, dict[str, Any]] = {
    "gpu": dict(
        preset="gpu",
        device="cuda",
        samples=1000,
        tokens=24,
        ks=(0, 1, 2, 4, 8),
        train_seconds=180.0,
        agreement_tokens=64,
        calibration_steps=1500,
        ppo_timesteps=32768,
        n_envs=128,
        eval_freq=16384,
        episodes=1,
        repeats=3,
        latency=None,  # the scenarios' own: calibrated
        threads=None,  # torch's own
        # --vllm: the pipeline inside vLLM (gpu_check_parts/vllm_stages.py), on the embedded pair
        vllm_batches=(1, 4, 16, 64),
        vllm_prompts=16,  # test prompts per domain served while recording prices, per batch size
        vllm_tokens=64,  # tokens per request while recording prices and in the bench
        vllm_trace_tokens=None,  # the share scenarios' own (128): the shipped traces
        vllm_ppo_timesteps=None,  # the training YAML's
        vllm_static_k=(2, 4, 6),
        vllm_requests=200,
        vllm_repeats=5,
        vllm_validation_repeats=2,
    ),
    "smoke": dict(
        preset="tiny",
        device="cpu",
        samples=300,
        tokens=16,
        ks=(0, 2, 4),
        train_seconds=120.0,  # the tiny pair trains in ~8 s on 2 quiet CPU cores: not hit
        agreement_tokens=16,
        calibration_steps=300,
        ppo_timesteps=2048,
        n_envs=8,
        eval_freq=1024,
        episodes=1,
        repeats=1,
        latency="constant",
        threads=1,  # small models on a shared CPU: one thread is faster than two fighting over the cores
        vllm_batches=(1, 4),
        vllm_prompts=1,
        vllm_tokens=16,
        vllm_trace_tokens=16,  # not the shipped traces' length: collect records in vLLM
        vllm_ppo_timesteps=2048,
        vllm_static_k=(2,),
        vllm_requests=8,
        vllm_repeats=1,
        vllm_validation_repeats=1,
    ),
}

#: The budget entries a command-line flag of the same name overrides.
OVERRIDABLE = (
    "device",
    "samples",
    "train_seconds",
    "calibration_steps",
    "ppo_timesteps",
    "episodes",
    "repeats",
)


def resolve_budget(smoke: bool, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The smoke or the GPU budget, with every entry of :data:`OVERRIDABLE` that ``overrides`` gives
    (not None) in its place.

    Raises:
        ValueError: a count below 1 or a non-positive ``train_seconds``, naming the flags.
    """
    budget = dict(BUDGETS["smoke" if smoke else "gpu"])
    budget.update({name: overrides[name] for name in OVERRIDABLE if overrides.get(name) is not None})
    if min(budget["samples"], budget["calibration_steps"], budget["ppo_timesteps"]) < 1:
        raise ValueError("--samples, --calibration-steps and --ppo-timesteps must be positive")
    if min(budget["episodes"], budget["repeats"]) < 1 or budget["train_seconds"] <= 0:
        raise ValueError("--episodes and --repeats must be >= 1, --train-seconds > 0")
    return budget
