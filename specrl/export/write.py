"""Write a trained PPO as a policy folder: checks, the ``torch.export`` program, the ONNX copy,
the SB3 checkpoint, metadata with provenance, then an atomic install after loading it back."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Sequence
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from specrl.acceptance import AcceptancePredictor
from specrl.action_layout import action_sizes, check_action_mapping, check_drafters, check_stop_dimension
from specrl.export.layout import (
    FORMAT_NAME,
    FORMAT_VERSION,
    METADATA_FILE,
    ONNX_FILE,
    POLICY_FILE,
    SB3_MODEL_FILE,
    VECNORMALIZE_FILE,
    PolicyError,
)
from specrl.export.module import build_module, export_program
from specrl.export.onnx_file import write_onnx
from specrl.export.parity import verify_parity
from specrl.export.read import load_policy
from specrl.features import FEATURE_COUNTS, FEATURE_NAMES, N_FEATURES
from specrl.io import sha256
from specrl.provenance import git_commit

if TYPE_CHECKING:
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecNormalize


PARITY_OBSERVATIONS = 2000  # observations every export is checked on against the model


def _check_model_spaces(
    model: PPO,
    k_max: int,
    tau_grid: tuple[float, ...],
    stop_grid: tuple[float, ...] | None,
    drafters: tuple[str, ...],
) -> None:
    from gymnasium import spaces

    action_space, observation_space = model.action_space, model.observation_space
    expected = action_sizes(k_max, tau_grid, stop_grid, drafters)
    if not isinstance(action_space, spaces.MultiDiscrete) or list(action_space.nvec) != expected:
        stop = f" and a stop grid of {len(stop_grid)} values" if stop_grid else ""
        stop += f" and {len(drafters)} drafters" if len(drafters) > 1 else ""
        raise PolicyError(
            f"the model's action space is {action_space}, but k_max={k_max} and a tau grid of "
            f"{len(tau_grid)} values{stop} need MultiDiscrete({expected}); pass the scenario's k_max and "
            "tau_grid (and stop_grid with the predictor for a policy that stops per token, and "
            "the drafters of a policy over a drafter pool)"
        )
    widths = sorted(FEATURE_COUNTS.values())
    if len(observation_space.shape) != 1 or observation_space.shape[0] not in widths:
        raise PolicyError(
            f"the model observes shape {observation_space.shape}, specrl features are ({N_FEATURES},) "
            f"(or the first {widths[:-1]} of them, for an older feature version)"
        )


def _json_default(value: Any) -> Any:
    """Numpy scalars and arrays (what evaluation code tends to produce) as plain JSON values."""
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable: {value!r}")


def _versions() -> dict[str, str]:
    """The versions of specrl (its package metadata: "unknown" in a source tree never installed),
    torch and stable-baselines3."""
    import stable_baselines3

    try:
        specrl = package_version("specrl")
    except PackageNotFoundError:
        specrl = "unknown"
    return {"specrl": specrl, "torch": torch.__version__, "stable_baselines3": stable_baselines3.__version__}


def install(staged: Path, folder: Path) -> None:
    """Move the finished ``staged`` folder to ``folder``, replacing an old policy folder there.

    A directory cannot be swapped atomically, so the old folder is renamed aside first and
    restored if the second rename fails; readers may find no folder for that instant, never a
    half-written one.
    """
    if not folder.exists():
        os.rename(staged, folder)
        return
    aside = folder.parent / f".{folder.name}.old-{uuid.uuid4().hex[:8]}"
    os.rename(folder, aside)
    try:
        os.rename(staged, folder)
    except BaseException:
        os.rename(aside, folder)
        raise
    shutil.rmtree(aside)


def check_replaceable(folder: Path) -> None:
    """Refuse to overwrite anything but an empty folder or an earlier policy folder."""
    if not folder.exists():
        return
    if not folder.is_dir():
        raise PolicyError(f"{folder} exists and is not a folder; choose another policy folder")
    if any(folder.iterdir()) and not (folder / METADATA_FILE).is_file():
        raise PolicyError(
            f"{folder} exists and is not a policy folder (no {METADATA_FILE}); refusing to replace it: "
            "choose another folder or remove it yourself"
        )


def copy_policy(folder: Path, target: Path) -> Path:
    """Copy the policy ``folder`` to ``target`` the way :func:`export_policy` writes one: staged
    beside ``target``, then :func:`install`-ed (an earlier policy folder there is replaced, anything
    else refused by :func:`check_replaceable`)."""
    check_replaceable(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staged = target.parent / f".{target.name}.copy-{uuid.uuid4().hex[:8]}"
    try:
        shutil.copytree(folder, staged)
        install(staged, target)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return target


def export_policy(
    model: PPO,
    folder: str | Path,
    *,
    k_max: int,
    tau_grid: Sequence[float],
    obs_normalizer: VecNormalize | None = None,
    stop_grid: Sequence[float] | None = None,
    predictor: AcceptancePredictor | None = None,
    scenarios: list[str],
    pair: str,
    evaluation: dict | None = None,
    command: str | None = None,
    onnx: bool | None = None,
    provenance: dict | None = None,
    drafters: Sequence[str] = ("draft",),
    latency_profiles: dict | None = None,
) -> Path:
    """Write ``model``'s deterministic policy as a self-describing folder (see :mod:`specrl.export`):
    staged beside ``folder``, loaded back with :func:`~specrl.export.load_policy`, checked to act
    exactly as ``model`` on :data:`PARITY_OBSERVATIONS` random observations
    (:func:`~specrl.export.verify_parity`), then installed, replacing an earlier policy folder.

    Args:
        model: a trained PPO with ``MlpPolicy`` on the specrl observation and action spaces.
        k_max, tau_grid: the scenario's; with ``stop_grid`` and its acceptance ``predictor`` for a
            policy that stops per token, with ``drafters`` (more than one) for a drafter pool.
        obs_normalizer: the VecNormalize the model was trained behind, if any; its observation
            statistics are baked into ``policy.pt2``.
        scenarios, pair, evaluation, latency_profiles, command: what trained it, recorded as they
            are (JSON; numpy values allowed).
        onnx: write ``policy.onnx``: True requires the ``onnx`` package, False skips it, None
            writes it when ``onnx`` is importable.
        provenance: recorded as ``metadata["provenance"]`` (e.g. the run's ``run.json``), with
            ``git_commit`` (:func:`specrl.provenance.git_commit`) unless it gives its own.

    Raises:
        PolicyError: the model does not match the specrl spaces, or ``folder`` holds something
            other than a policy.
        ImportError: ``onnx=True`` without the ``onnx`` package.
        TypeError: ``evaluation`` or ``provenance`` is not JSON-serialisable.
    """
    folder = Path(folder)
    try:
        k_max, grid = check_action_mapping(k_max, list(tau_grid))
        stops = check_stop_dimension(None if stop_grid is None else list(stop_grid), predictor)
        drafters = check_drafters(list(drafters))
    except ValueError as error:
        raise PolicyError(f"bad action mapping: {error}") from None
    _check_model_spaces(model, k_max, grid, stops, drafters)
    check_replaceable(folder)
    if isinstance(scenarios, str) or not all(isinstance(s, str) for s in scenarios):
        raise PolicyError(f"scenarios must be a list of names or paths, got {scenarios!r}")
    if provenance is not None and not isinstance(provenance, dict):
        raise PolicyError(f"provenance must be a dict or None, got {type(provenance).__name__}")
    provenance = {"git_commit": git_commit()} | dict(provenance or {})
    # fail before writing anything
    json.dumps([evaluation, provenance, latency_profiles], default=_json_default)
    has_onnx = importlib.util.find_spec("onnx") is not None
    if onnx and not has_onnx:
        raise ImportError("onnx=True but the onnx package is not installed: pip install 'specrl[onnx]'")
    write_onnx_copy = has_onnx if onnx is None else onnx

    module = build_module(model, obs_normalizer)
    # the feature version whose count is the model's width: the current one, or an older one
    version = max(v for v, count in FEATURE_COUNTS.items() if count == module.n_features)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
    try:
        os.chmod(staged, 0o755)  # mkdtemp makes it private; a policy folder is shared like any artifact
        torch.export.save(export_program(module), str(staged / POLICY_FILE))
        if write_onnx_copy:
            write_onnx(module, staged / ONNX_FILE)
        model.save(staged / SB3_MODEL_FILE)
        if obs_normalizer is not None:
            obs_normalizer.save(str(staged / VECNORMALIZE_FILE))
        metadata = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "feature_version": version,
            "feature_names": list(FEATURE_NAMES[: FEATURE_COUNTS[version]]),
            "action": {
                "type": "multidiscrete",
                "layout": ["k", "tau_index"]
                + (["stop_index"] if stops else [])
                + (["drafter_index"] if len(drafters) > 1 else []),
                "k_max": k_max,
                "tau_grid": list(grid),
                **({"stop_grid": list(stops), "stop_predictor": predictor.to_dict()} if stops else {}),
                **({"drafters": list(drafters)} if len(drafters) > 1 else {}),
            },
            "observation_normalized": module.normalize,
            "network": module.network(),
            "scenarios": list(scenarios),
            "pair": pair,
            "latency_profiles": latency_profiles,
            "evaluation": evaluation,
            "command": command,
            "provenance": provenance,
            "onnx": write_onnx_copy,
            "versions": _versions(),
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "files": {path.name: sha256(path) for path in sorted(staged.iterdir())},
        }
        (staged / METADATA_FILE).write_text(json.dumps(metadata, indent=2, default=_json_default) + "\n")
        load_policy(staged)  # never install a folder the loader would refuse
        # nor one that acts otherwise than the model: the program (and the ONNX copy) on random
        # observations over the features' range, against SB3's deterministic predict
        observations = np.random.default_rng(0).random((PARITY_OBSERVATIONS, module.n_features))
        verify_parity(model, staged, observations.astype(np.float32), obs_normalizer)
        install(staged, folder)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    return folder
