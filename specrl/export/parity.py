"""Check that an exported folder acts exactly as the PPO it came from (the program and the ONNX copy)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from specrl.export.layout import ONNX_FILE, POLICY_FILE, PolicyError
from specrl.export.onnx_file import run_onnx
from specrl.export.read import load_policy

if TYPE_CHECKING:
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecNormalize


TIE = 1e-4  # two actions whose logits differ by less are a tie that float rounding may break either way


@dataclass(frozen=True)
class ParityReport:
    """What :func:`verify_parity` compared: every action was identical (but for ``ties``: actions
    whose logits in the model differ by less than ``TIE``, which the exported program's float
    rounding may break the other way), or it raised."""

    observations: int
    onnx_checked: bool
    ties: int = 0


def _assert_same(
    expected: np.ndarray, actual: np.ndarray, observations: np.ndarray, what: str, logits: list[np.ndarray]
) -> int:
    """Raise unless ``actual`` is ``expected`` but for ties (``logits``: per action dimension, the
    model's (N, choices)); return the number of observations a tie decided otherwise."""
    rows, dims = np.nonzero(expected != actual)
    margins = np.array(
        [logits[d][r, expected[r, d]] - logits[d][r, actual[r, d]] for r, d in zip(rows, dims, strict=True)]
    )
    ties = set(rows[margins <= TIE].tolist()) if rows.size else set()
    differs = np.array(sorted(set(rows.tolist()) - ties), dtype=np.int64)
    if differs.size:
        first = int(differs[0])
        raise PolicyError(
            f"{what} differs from the SB3 policy on {differs.size} of {len(expected)} observations, e.g. "
            f"observation {first}: SB3 {expected[first].tolist()}, exported {actual[first].tolist()} "
            f"(input {observations[first].tolist()})"
        )
    return len(ties)


def verify_parity(
    model: PPO,
    folder: str | Path,
    observations: np.ndarray,
    obs_normalizer: VecNormalize | None = None,
) -> ParityReport:
    """Check that the exported policy in ``folder`` acts exactly as ``model.predict(...,
    deterministic=True)`` on (N, F) raw ``observations`` (the model sees them through
    ``obs_normalizer``, as in training; the export has it baked in). ``policy.onnx`` is compared
    too when it was written and onnxruntime is installed (the report says whether).

    Raises:
        PolicyError: an exported action differs from the model's (the first difference is shown).
    """
    observations = np.asarray(observations, dtype=np.float32)
    width = int(model.observation_space.shape[0])
    if observations.ndim != 2 or observations.shape[1] != width:
        raise ValueError(f"observations must have shape (N, {width}), got {observations.shape}")
    model_input = obs_normalizer.normalize_obs(observations) if obs_normalizer is not None else observations
    expected, _ = model.predict(model_input, deterministic=True)
    expected = np.asarray(expected, dtype=np.int64).reshape(len(observations), len(model.action_space.nvec))
    logits = _logits(model, model_input)
    policy = load_policy(folder)
    ties = _assert_same(
        expected, policy.predict(observations), observations, f"{policy.folder / POLICY_FILE}", logits
    )
    onnx_checked = bool(policy.metadata.get("onnx")) and importlib.util.find_spec("onnxruntime") is not None
    if onnx_checked:
        onnx_actions = run_onnx(policy.folder / ONNX_FILE, observations)
        ties = max(
            ties, _assert_same(expected, onnx_actions, observations, f"{policy.folder / ONNX_FILE}", logits)
        )
    return ParityReport(len(observations), onnx_checked, ties)


def _logits(model: PPO, observations: np.ndarray) -> list[np.ndarray]:
    """The model's logits per action dimension, (N, choices) each, for normalised observations."""
    import torch

    with torch.no_grad():
        tensor = torch.as_tensor(observations, dtype=torch.float32, device=model.device)
        distribution = model.policy.get_distribution(tensor).distribution
    return [d.logits.cpu().numpy() for d in distribution]
