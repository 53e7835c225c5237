"""The GPU check's stages that run in this process: the environment, the library's self-check on
the device, the "gpu" zoo pair built under a wall-clock cap, and its latency model. Each returns
the stage's result for :class:`~gpu_check_parts.record.Record`."""

from __future__ import annotations

import gc
import json
import os
import platform
from typing import Any

import torch
import transformers

import specrl
from specrl import selfcheck
from specrl.embedded.build import build, cached_dir, is_complete, shipped_dir, specrl_home
from specrl.envs import load_scenario
from specrl.latency import latency_path, learn
from specrl.models import PairError, check_device
from specrl.provenance import git_commit


def require_device(device: str) -> None:
    """Refuse, before anything is written, a device torch does not see: ``SystemExit`` naming what
    to do."""
    try:
        check_device(torch.device(device))
    except PairError as error:
        raise SystemExit(f"gpu_check: {error}") from None


def free_device_memory(device: str) -> None:
    """Give back what a let-go model held, so that the next stage finds the GPU's memory free."""
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def environment(device: str) -> dict[str, Any]:
    """Versions and the machine; refuses a CUDA device that torch does not see."""
    check_device(torch.device(device))
    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "specrl": specrl.__version__,
        "commit": git_commit(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": device,
        "specrl_home": str(specrl_home()),
    }
    if device == "cuda":
        properties = torch.cuda.get_device_properties(0)
        info.update(
            gpu=properties.name,
            gpu_memory_gib=round(properties.total_memory / 2**30, 1),
            capability=f"{properties.major}.{properties.minor}",
            cudnn=torch.backends.cudnn.version(),
            gpus=torch.cuda.device_count(),
        )
    print(json.dumps(info, indent=1))
    return info


def lossless(budget: dict[str, Any]) -> dict[str, Any]:
    """The library's self-check on the device (specrl/selfcheck.py)."""
    return selfcheck.run_selfcheck(
        budget["device"], samples=budget["samples"], tokens=budget["tokens"], ks=budget["ks"], log=print
    )


def build_pair(budget: dict[str, Any], rebuild: bool, holder: dict[str, Any]) -> dict[str, Any]:
    """Train the preset's pair under the cap (or reuse a complete earlier build), load it into
    ``holder["pair"]`` for the calibration, and check its greedy agreement in its own dtype."""
    preset, device = budget["preset"], budget["device"]
    if is_complete(shipped_dir(preset)):
        raise SystemExit(f"preset {preset!r} ships weights: this check trains a preset that does not")
    pair_dir = cached_dir(preset, 0)
    reused = is_complete(pair_dir) and not rebuild
    if reused:
        print(f"reusing the pair built in {pair_dir} (--rebuild trains it again)")
    else:
        print(f"training the '{preset}' pair into {pair_dir}, capped at {budget['train_seconds']:.0f} s")
        command = f"python experiments/gpu_check.py (the build stage: --preset {preset}, capped)"
        build(preset, 0, pair_dir, device=device, command=command, max_seconds=budget["train_seconds"])
        free_device_memory(device)
    pair = specrl.load_pair(preset=preset, device=device)
    holder["pair"] = pair
    card = pair.card or {}
    prompts = [pair.encode(text) for text in pair.prompts["test"]["code"][:2]]
    agreement = selfcheck.check_greedy(
        pair,
        prompts,
        tokens=budget["agreement_tokens"],
        ks=(2, 4),
        taus=(0.0,),
        caches=("dynamic",),
        strict=False,
    )
    agreement.pop("unequal_runs")
    print(f"greedy agreement of the built pair ({agreement['dtype']}): {agreement}")
    return {
        "dir": str(pair_dir),
        "reused": reused,
        "built_with": card.get("built_with"),
        "budget": card.get("budget"),
        "parameters": card.get("parameters"),
        "final_train_loss": card.get("final_train_loss"),
        "heldout": card.get("heldout"),
        "dtype": str(pair.dtype).removeprefix("torch."),
        "greedy_agreement": agreement,
    }


def calibrate(budget: dict[str, Any], scenarios: list[str], holder: dict[str, Any]) -> dict[str, Any]:
    """The latency model of ``holder["pair"]`` on the device, saved where ``latency: calibrated``
    reads it; the pair is then let go (the scripts of the later stages load their own copy)."""
    pair = holder.pop("pair")
    k_max = max(load_scenario(name).k_max for name in scenarios)
    model = learn(pair, k_max=k_max, steps=budget["calibration_steps"])
    path = latency_path(pair)
    model.save(path)
    del pair
    free_device_memory(budget["device"])
    result = {
        "file": str(path),
        "device": model.device,
        "steps": budget["calibration_steps"],
        "k_max": k_max,
        "target_ms_1_token_context_256": round(model.target_seconds(1, 256) * 1e3, 3),
        "target_ms_9_tokens_context_256": round(model.target_seconds(9, 256) * 1e3, 3),
        "draft_ms_context_256": round(model.draft_seconds(256) * 1e3, 3),
        "plain_tokens_per_s": round(model.plain_tokens_per_s, 1),
        "fit_error": model.fit_error,
    }
    print({k: v for k, v in result.items() if k != "fit_error"})
    return result
