"""The exported policy artifact: write it from a PPO model, load it with torch alone, check parity.

A policy folder (``policies/<name>/``) describes itself::

    policy.pt         TorchScript module: observations (B, 19) float32 -> actions (B, 2) int64
                      [k, tau_index], or (B, 3) [k, tau_index, stop_index] for a policy that also
                      sets the per-token stop rule, the deterministic action (argmax per dimension),
                      with the VecNormalize observation statistics baked in when training used them
    policy.onnx       the same function as ONNX (input "observation", output "action"), written
                      when the ``onnx`` package is installed at export; metadata says whether
    metadata.json     format and feature versions, feature names, action mapping, normalisation,
                      training scenarios, pair, evaluation, command, versions, created time and
                      the sha256 of every other file
    sb3_model.zip     the stable-baselines3 checkpoint, to continue training
    vecnormalize.pkl  the VecNormalize statistics, to continue training (when used)

Online use (:func:`load_policy`, :class:`~specrl.controllers.LearnedController`) needs
``policy.pt`` and ``metadata.json`` only, imports torch but never stable-baselines3, and never
unpickles: ``policy.pt`` is opened by ``torch.jit.load`` after its checksum matched.
``sb3_model.zip`` and ``vecnormalize.pkl`` are pickles, for training only: load them
(``PPO.load``, ``VecNormalize.load``) only from folders you trust.

The action mapping is the envs' (:func:`specrl.envs.actions.to_engine_action`):
``[k, tau_index] -> Action(k, tau_grid[tau_index])``, k in 0..k_max; with a stop dimension,
``stop_index`` picks the per-token stop rule of
:func:`specrl.controllers.stop_rules.stop_rule_table` from the metadata's ``stop_grid`` and the
acceptance predictor stored beside it (``action.stop_predictor``), so the folder carries both
decisions.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from specrl.controllers.stop_rules import AcceptancePredictor, PredictorError
from specrl.features import FEATURE_NAMES, FEATURE_VERSION, N_FEATURES

if TYPE_CHECKING:  # online loading must not import stable-baselines3
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecNormalize

FORMAT_NAME = "specrl-policy"
#: Version of the folder layout and metadata schema; the loader refuses others.
FORMAT_VERSION = 1
POLICY_FILE = "policy.pt"
ONNX_FILE = "policy.onnx"
METADATA_FILE = "metadata.json"
SB3_MODEL_FILE = "sb3_model.zip"
VECNORMALIZE_FILE = "vecnormalize.pkl"
#: Batch sizes the loader probes the module with (the online controller calls it with 1).
_PROBE_BATCHES = (1, 3)


class PolicyError(ValueError):
    """A policy folder cannot be written, read or trusted; the message names the file and the fix."""


# ---- the module that is exported -------------------------------------------------------------


def _fresh_linear(layer: nn.Linear) -> nn.Linear:
    """A plain copy of ``layer``: SB3 sizes ``action_net`` with a numpy int, which TorchScript refuses."""
    fresh = nn.Linear(int(layer.in_features), int(layer.out_features), bias=layer.bias is not None)
    fresh.load_state_dict(layer.state_dict())
    return fresh


class PolicyModule(nn.Module):
    """Observation normalisation, actor MLP, action head and deterministic argmax, in one module.

    Args:
        policy_net: SB3's ``mlp_extractor.policy_net`` (observations -> latent).
        action_net: SB3's ``action_net`` (latent -> the concatenated logits of every dimension).
        sizes: the size of each action dimension (k_max + 1, the tau grid's, the stop grid's).
        mean: (19,) float64 VecNormalize mean, or None for no normalisation.
        std: (19,) float64 ``sqrt(var + epsilon)``, with ``mean``.
        clip: VecNormalize's ``clip_obs``, with ``mean``.
    """

    def __init__(
        self,
        policy_net: nn.Module,
        action_net: nn.Linear,
        sizes: Sequence[int],
        mean: np.ndarray | None = None,
        std: np.ndarray | None = None,
        clip: float = 0.0,
    ) -> None:
        super().__init__()
        self.policy_net = policy_net
        self.action_net = action_net
        # where each dimension's logits start and end in the action net's output
        self.bounds = np.concatenate([[0], np.cumsum([int(n) for n in sizes])]).tolist()
        self.normalize = mean is not None
        # Float64 like VecNormalize's numpy statistics, so normalised inputs match SB3's exactly.
        shape = (N_FEATURES,)
        self.register_buffer(
            "mean", torch.as_tensor(mean if mean is not None else np.zeros(shape), dtype=torch.float64)
        )
        self.register_buffer(
            "std", torch.as_tensor(std if std is not None else np.ones(shape), dtype=torch.float64)
        )
        self.clip = float(clip)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        """(B, 19) float32 observations -> (B, D) int64 ``[k, tau_index(, stop_index)]``."""
        x = observations
        if self.normalize:
            x = ((x.to(torch.float64) - self.mean) / self.std).clamp(-self.clip, self.clip).to(torch.float32)
        logits = self.action_net(self.policy_net(x))  # (B, sum of the dimensions' sizes)
        # SB3's deterministic action is the mode of a Categorical per dimension: the first argmax
        # of softmax(logits - logsumexp(logits)), computed in float32. Where two logits are closer
        # than float32 resolves after that softmax (an untrained head is full of such ties), the
        # argmax of the raw logits can pick another index, so the exact computation is repeated.
        actions = []
        for i in range(len(self.bounds) - 1):
            dimension = logits[:, self.bounds[i] : self.bounds[i + 1]]
            normalized = dimension - dimension.logsumexp(dim=1, keepdim=True)
            actions.append(torch.softmax(normalized, dim=1).argmax(dim=1))
        return torch.stack(actions, dim=1)


def _normalizer_stats(obs_normalizer: VecNormalize | None) -> dict[str, Any]:
    """The mean/std/clip :class:`PolicyModule` bakes in; empty when observations are not normalised."""
    if obs_normalizer is None or not obs_normalizer.norm_obs:
        return {}
    rms = obs_normalizer.obs_rms
    if isinstance(rms, dict):
        raise PolicyError(
            "dict observation normalisation is not supported: specrl observations are one vector"
        )
    mean = np.asarray(rms.mean, dtype=np.float64)
    if mean.shape != (N_FEATURES,):
        raise PolicyError(f"VecNormalize statistics have shape {mean.shape}, expected ({N_FEATURES},)")
    std = np.sqrt(np.asarray(rms.var, dtype=np.float64) + obs_normalizer.epsilon)
    return {"mean": mean, "std": std, "clip": float(obs_normalizer.clip_obs)}


def build_module(model: PPO, obs_normalizer: VecNormalize | None = None) -> PolicyModule:
    """The deterministic policy of ``model`` as one CPU :class:`PolicyModule` (copied, in eval mode)."""
    from stable_baselines3.common.torch_layers import FlattenExtractor

    policy = model.policy
    if not isinstance(policy.pi_features_extractor, FlattenExtractor):
        raise PolicyError(
            f"only the MlpPolicy's FlattenExtractor can be exported, got "
            f"{type(policy.pi_features_extractor).__name__}; train with policy='MlpPolicy'"
        )
    # FlattenExtractor on (B, 19) observations is the identity, so it is left out.
    policy_net = copy.deepcopy(policy.mlp_extractor.policy_net).cpu().float()
    action_net = _fresh_linear(policy.action_net).cpu().float()
    sizes = [int(n) for n in policy.action_space.nvec]
    return PolicyModule(policy_net, action_net, sizes, **_normalizer_stats(obs_normalizer)).eval()


# ---- metadata checks shared by writer and reader ---------------------------------------------


def check_action_mapping(k_max: Any, tau_grid: Any) -> tuple[int, tuple[float, ...]]:
    """Validate ``k_max >= 1`` and a non-empty, strictly increasing tau grid in [0, 1].

    Returns:
        ``(k_max, tau_grid)`` as an int and a tuple of floats.

    Raises:
        ValueError: naming the bad value.
    """
    if isinstance(k_max, bool) or not isinstance(k_max, (int, np.integer)) or k_max < 1:
        raise ValueError(f"k_max must be an int >= 1, got {k_max!r}")
    if not isinstance(tau_grid, (list, tuple)) or not tau_grid:
        raise ValueError(f"tau_grid must be a non-empty list of numbers in [0, 1], got {tau_grid!r}")
    if any(isinstance(tau, bool) or not isinstance(tau, (int, float, np.number)) for tau in tau_grid):
        raise ValueError(f"tau_grid must hold numbers, got {list(tau_grid)!r}")
    grid = tuple(float(tau) for tau in tau_grid)
    if any(not 0.0 <= tau <= 1.0 for tau in grid) or any(
        a >= b for a, b in zip(grid, grid[1:], strict=False)
    ):
        raise ValueError(f"tau_grid must be strictly increasing within [0, 1], got {list(grid)}")
    return int(k_max), grid


def check_stop_dimension(stop_grid: Any, predictor: Any) -> tuple[float, ...] | None:
    """Validate the optional stop dimension: a grid starting at 0 (never stop), strictly
    increasing in [0, 1], with the acceptance predictor it applies; both or neither.

    Returns:
        The stop grid as a tuple of floats, or None for a policy without the dimension.

    Raises:
        ValueError: naming the bad value.
    """
    if stop_grid is None and predictor is None:
        return None
    if stop_grid is None or predictor is None:
        raise ValueError("a stop dimension needs both stop_grid and its acceptance predictor")
    if not isinstance(stop_grid, (list, tuple)) or len(stop_grid) < 2:
        raise ValueError(f"stop_grid must list at least two thresholds, got {stop_grid!r}")
    grid = tuple(float(h) for h in stop_grid)
    if grid[0] != 0.0 or any(not 0.0 <= h <= 1.0 for h in grid) or list(grid) != sorted(set(grid)):
        raise ValueError(f"stop_grid must start at 0 and increase strictly within [0, 1], got {list(grid)}")
    return grid


def sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ---- writing ---------------------------------------------------------------------------------


def _action_sizes(k_max: int, tau_grid: tuple[float, ...], stop_grid: tuple[float, ...] | None) -> list[int]:
    return [k_max + 1, len(tau_grid)] + ([len(stop_grid)] if stop_grid else [])


def _check_model_spaces(
    model: PPO, k_max: int, tau_grid: tuple[float, ...], stop_grid: tuple[float, ...] | None
) -> None:
    from gymnasium import spaces

    action_space, observation_space = model.action_space, model.observation_space
    expected = _action_sizes(k_max, tau_grid, stop_grid)
    if not isinstance(action_space, spaces.MultiDiscrete) or list(action_space.nvec) != expected:
        stop = f" and a stop grid of {len(stop_grid)} values" if stop_grid else ""
        raise PolicyError(
            f"the model's action space is {action_space}, but k_max={k_max} and a tau grid of "
            f"{len(tau_grid)} values{stop} need MultiDiscrete({expected}); pass the scenario's k_max and "
            "tau_grid (and stop_grid with the predictor for a policy that stops per token)"
        )
    if observation_space.shape != (N_FEATURES,):
        raise PolicyError(
            f"the model observes shape {observation_space.shape}, specrl features are ({N_FEATURES},)"
        )


def _write_onnx(module: PolicyModule, path: Path) -> None:
    import onnx

    # torch's default (dynamo) exporter needs onnxscript, which specrl does not depend on; the
    # TorchScript-based exporter handles this small MLP and warns that it is deprecated.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            module,
            (torch.zeros(1, N_FEATURES),),
            str(path),
            input_names=["observation"],
            output_names=["action"],
            dynamic_axes={"observation": {0: "batch"}, "action": {0: "batch"}},
            dynamo=False,
        )
    onnx.checker.check_model(str(path))


def _json_default(value: Any) -> Any:
    """Numpy scalars and arrays (what evaluation code tends to produce) as plain JSON values."""
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable: {value!r}")


def _versions() -> dict[str, str]:
    import stable_baselines3

    import specrl  # at call time: specrl/__init__ imports this module

    return {
        "specrl": specrl.__version__,
        "torch": torch.__version__,
        "stable_baselines3": stable_baselines3.__version__,
    }


def _install(staged: Path, folder: Path) -> None:
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


def _check_replaceable(folder: Path) -> None:
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
) -> Path:
    """Write ``model``'s deterministic policy as a self-describing folder (see the module docstring).

    Everything is written into a temporary folder beside ``folder``, loaded back with
    :func:`load_policy` as a self-check, and only then moved into place, replacing an earlier
    policy folder of that name.

    Args:
        model: a trained PPO with ``MlpPolicy`` on the specrl observation and action spaces.
        folder: destination, conventionally ``policies/<name>``.
        k_max: the scenario's k_max (the action's k runs over 0..k_max).
        tau_grid: the scenario's tau grid (the action's tau index points into it).
        obs_normalizer: the VecNormalize the model was trained behind, if any; its observation
            statistics are baked into ``policy.pt`` (reward normalisation is irrelevant here).
        stop_grid: the scenario's stop grid, for a model whose action has the third (per-token
            stop) dimension; with ``predictor``.
        predictor: the acceptance predictor the training envs applied the stop grid with.
        scenarios: names or paths of the training scenarios.
        pair: name of the model pair trained on (``ModelPair.name``).
        evaluation: results to record as JSON (whatever the trainer measured; numpy values allowed).
        command: the command line that trained the policy.
        onnx: write ``policy.onnx``: True requires the ``onnx`` package, False skips it, None
            writes it exactly when ``onnx`` is importable. ``metadata["onnx"]`` records the outcome.

    Returns:
        The policy folder.

    Raises:
        PolicyError: the model does not match the specrl spaces, or ``folder`` holds something
            other than a policy.
        ImportError: ``onnx=True`` without the ``onnx`` package.
        TypeError: ``evaluation`` is not JSON-serialisable.
    """
    folder = Path(folder)
    try:
        k_max, grid = check_action_mapping(k_max, list(tau_grid))
        stops = check_stop_dimension(None if stop_grid is None else list(stop_grid), predictor)
    except ValueError as error:
        raise PolicyError(f"bad action mapping: {error}") from None
    _check_model_spaces(model, k_max, grid, stops)
    _check_replaceable(folder)
    if isinstance(scenarios, str) or not all(isinstance(s, str) for s in scenarios):
        raise PolicyError(f"scenarios must be a list of names or paths, got {scenarios!r}")
    json.dumps(evaluation, default=_json_default)  # fail before writing anything
    has_onnx = importlib.util.find_spec("onnx") is not None
    if onnx and not has_onnx:
        raise ImportError("onnx=True but the onnx package is not installed: pip install 'specrl[onnx]'")
    write_onnx = has_onnx if onnx is None else onnx

    module = build_module(model, obs_normalizer)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
    try:
        os.chmod(staged, 0o755)  # mkdtemp makes it private; a policy folder is shared like any artifact
        torch.jit.script(module).save(str(staged / POLICY_FILE))
        if write_onnx:
            _write_onnx(module, staged / ONNX_FILE)
        model.save(staged / SB3_MODEL_FILE)
        normalized = module.normalize
        if obs_normalizer is not None:
            obs_normalizer.save(str(staged / VECNORMALIZE_FILE))
        metadata = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "feature_version": FEATURE_VERSION,
            "feature_names": list(FEATURE_NAMES),
            "action": {
                "type": "multidiscrete",
                "layout": ["k", "tau_index"] + (["stop_index"] if stops else []),
                "k_max": k_max,
                "tau_grid": list(grid),
                **({"stop_grid": list(stops), "stop_predictor": predictor.to_dict()} if stops else {}),
            },
            "observation_normalized": normalized,
            "scenarios": list(scenarios),
            "pair": pair,
            "evaluation": evaluation,
            "command": command,
            "onnx": write_onnx,
            "versions": _versions(),
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "files": {path.name: sha256(path) for path in sorted(staged.iterdir())},
        }
        (staged / METADATA_FILE).write_text(json.dumps(metadata, indent=2, default=_json_default) + "\n")
        load_policy(staged)  # never install a folder the loader would refuse
        _install(staged, folder)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    return folder


# ---- reading ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExportedPolicy:
    """A loaded, verified policy folder.

    Attributes:
        folder: where it was loaded from.
        module: the TorchScript module, (B, 19) float32 -> (B, D) int64 ``[k, tau_index(, stop_index)]``.
        metadata: the parsed ``metadata.json``.
        k_max: the largest k the policy picks.
        tau_grid: tau values the tau index points into.
        pair: name of the model pair it was trained on.
        stop_grid: the per-token stop thresholds the stop index points into, or None (D = 2).
        predictor: the acceptance predictor they apply to, or None.
    """

    folder: Path
    module: torch.jit.ScriptModule
    metadata: dict[str, Any]
    k_max: int
    tau_grid: tuple[float, ...]
    pair: str
    stop_grid: tuple[float, ...] | None = None
    predictor: AcceptancePredictor | None = None

    def predict(self, observations: np.ndarray) -> np.ndarray:
        """Deterministic actions of a batch: (B, 19) observations -> (B, D) int64 actions."""
        with torch.inference_mode():
            return self.module(torch.as_tensor(np.asarray(observations, dtype=np.float32))).numpy()


def _read_metadata(folder: Path) -> dict[str, Any]:
    if not folder.is_dir():
        raise PolicyError(
            f"policy folder {folder} does not exist; pass a folder written by specrl.export.export_policy "
            "(experiments/train_ppo.py writes policies/<name>)"
        )
    path = folder / METADATA_FILE
    if not path.is_file():
        raise PolicyError(
            f"{path} is missing: {folder} is not a complete policy folder; re-export the policy"
        )
    try:
        metadata = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise PolicyError(
            f"{path} is not readable JSON ({error}); restore the file or re-export the policy"
        ) from None
    if not isinstance(metadata, dict):
        raise PolicyError(f"{path} must hold a JSON object; restore the file or re-export the policy")
    return metadata


def _check_metadata(
    metadata: dict[str, Any], path: Path
) -> tuple[int, tuple[float, ...], tuple[float, ...] | None, AcceptancePredictor | None]:
    """Refuse metadata this specrl cannot serve; return the action mapping (k_max, tau grid,
    stop grid and acceptance predictor, the last two None without a stop dimension)."""
    if metadata.get("format") != FORMAT_NAME or metadata.get("format_version") != FORMAT_VERSION:
        raise PolicyError(
            f"{path}: unknown format {metadata.get('format')!r} version {metadata.get('format_version')!r}; "
            f"this specrl reads {FORMAT_NAME!r} version {FORMAT_VERSION}: use the specrl version that "
            "exported it, or re-export the policy"
        )
    version = metadata.get("feature_version")
    if version != FEATURE_VERSION:
        raise PolicyError(
            f"{path}: the policy was trained on feature version {version!r} but this specrl computes feature "
            f"version {FEATURE_VERSION}; retrain the policy, or use a specrl version with feature version "
            f"{version}"
        )
    names = metadata.get("feature_names")
    if names != list(FEATURE_NAMES):
        raise PolicyError(
            f"{path}: feature_names {names!r} differ from this specrl's {list(FEATURE_NAMES)} at the same "
            "feature version; the file was edited or written by a modified specrl: re-export the policy"
        )
    action = metadata.get("action")
    if not isinstance(action, dict) or action.get("type") != "multidiscrete":
        raise PolicyError(
            f"{path}: 'action' must be {{'type': 'multidiscrete', 'k_max': ..., 'tau_grid': ...}}"
        )
    try:
        k_max, tau_grid = check_action_mapping(action.get("k_max"), action.get("tau_grid"))
        predictor = action.get("stop_predictor")
        if predictor is not None:
            predictor = AcceptancePredictor.from_dict(predictor, f"{path} action.stop_predictor")
        stop_grid = check_stop_dimension(action.get("stop_grid"), predictor)
    except (ValueError, PredictorError) as error:
        raise PolicyError(f"{path}: bad action mapping: {error}; re-export the policy") from None
    return k_max, tau_grid, stop_grid, predictor


def _check_files(folder: Path, metadata: dict[str, Any]) -> None:
    """Every file listed in metadata must match its sha256; policy.pt must be listed and present."""
    files = metadata.get("files")
    if not isinstance(files, dict) or POLICY_FILE not in files:
        raise PolicyError(
            f"{folder / METADATA_FILE}: no sha256 of {POLICY_FILE} under 'files'; re-export the policy"
        )
    for name, expected in files.items():
        path = folder / name
        if Path(name).name != name or name == METADATA_FILE:
            raise PolicyError(f"{folder / METADATA_FILE}: bad file entry {name!r}; re-export the policy")
        if not path.is_file():
            if name == POLICY_FILE:
                raise PolicyError(f"{path} is missing; copy the whole policy folder or re-export the policy")
            continue  # training-only files (checkpoint, ONNX copy) may be left out of a deployment
        actual = sha256(path)
        if actual != expected:
            raise PolicyError(
                f"{path}: sha256 {actual} does not match {expected} in {METADATA_FILE}; the file is "
                "corrupt or was edited: restore the folder or re-export the policy"
            )


def _load_module(path: Path, sizes: list[int]) -> torch.jit.ScriptModule:
    """``torch.jit.load`` the verified file and probe it with zeros: shape, dtype and range of the actions."""
    try:
        module = torch.jit.load(str(path), map_location="cpu").eval()
    except Exception as error:  # torch raises RuntimeError and friends, unhelpfully varied
        raise PolicyError(
            f"{path} is not a loadable TorchScript module ({error}); re-export the policy"
        ) from None
    for batch in _PROBE_BATCHES:
        try:
            with torch.inference_mode():
                actions = module(torch.zeros(batch, N_FEATURES))
        except Exception as error:
            raise PolicyError(
                f"{path} fails on a ({batch}, {N_FEATURES}) probe ({error}); re-export the policy"
            ) from None
        width = len(sizes)
        if (
            not isinstance(actions, torch.Tensor)
            or actions.shape != (batch, width)
            or actions.dtype != torch.int64
        ):
            got = (
                (tuple(actions.shape), actions.dtype) if isinstance(actions, torch.Tensor) else type(actions)
            )
            raise PolicyError(
                f"{path} returns {got} on a ({batch}, {N_FEATURES}) probe, expected ({batch}, {width}) int64 "
                f"actions (the layout of {METADATA_FILE}); re-export the policy"
            )
        if int(actions.min()) < 0 or (actions >= torch.tensor(sizes)).any():
            raise PolicyError(
                f"{path} returns actions outside 0..{[n - 1 for n in sizes]} (k, tau_index, stop_index) of "
                f"{METADATA_FILE}; re-export the policy"
            )
    return module


def load_policy(folder: str | Path) -> ExportedPolicy:
    """Load and verify a policy folder with torch alone (no stable-baselines3, no unpickling).

    Checks, in order: the folder and ``metadata.json`` exist and parse; the format version is
    known; the feature version and names equal this specrl's; the action mapping is valid; every
    file listed in the metadata matches its sha256 (``policy.pt`` must be there); the TorchScript
    module loads and maps (B, 19) float32 to (B, D) int64 actions within the mapping.

    Raises:
        PolicyError: naming the file at fault and the fix.
    """
    folder = Path(folder)
    metadata = _read_metadata(folder)
    k_max, tau_grid, stop_grid, predictor = _check_metadata(metadata, folder / METADATA_FILE)
    _check_files(folder, metadata)
    module = _load_module(folder / POLICY_FILE, _action_sizes(k_max, tau_grid, stop_grid))
    pair = str(metadata.get("pair", ""))
    return ExportedPolicy(folder, module, metadata, k_max, tau_grid, pair, stop_grid, predictor)


# ---- parity ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParityReport:
    """What :func:`verify_parity` compared: every action was identical, or it raised."""

    observations: int
    onnx_checked: bool

    def to_dict(self) -> dict[str, Any]:
        return {"observations": self.observations, "onnx_checked": self.onnx_checked}


def _assert_same(expected: np.ndarray, actual: np.ndarray, observations: np.ndarray, what: str) -> None:
    differs = np.flatnonzero((expected != actual).any(axis=1))
    if differs.size:
        first = int(differs[0])
        raise PolicyError(
            f"{what} differs from the SB3 policy on {differs.size} of {len(expected)} observations, e.g. "
            f"observation {first}: SB3 {expected[first].tolist()}, exported {actual[first].tolist()} "
            f"(input {observations[first].tolist()})"
        )


def verify_parity(
    model: PPO,
    folder: str | Path,
    observations: np.ndarray,
    obs_normalizer: VecNormalize | None = None,
) -> ParityReport:
    """Check that the exported policy acts exactly as ``model.predict(..., deterministic=True)``.

    The model sees the observations normalised by ``obs_normalizer`` (as in training); the
    exported files see them raw (normalisation is baked in). ``policy.onnx`` is compared too when
    it was written and onnxruntime is installed (the report says whether).

    Args:
        model: the PPO that was exported.
        folder: the exported policy folder.
        observations: (N, 19) raw observations.
        obs_normalizer: the VecNormalize passed to :func:`export_policy`, if any.

    Returns:
        A :class:`ParityReport`.

    Raises:
        PolicyError: an exported action differs from the model's (the first difference is shown).
    """
    observations = np.asarray(observations, dtype=np.float32)
    if observations.ndim != 2 or observations.shape[1] != N_FEATURES:
        raise ValueError(f"observations must have shape (N, {N_FEATURES}), got {observations.shape}")
    model_input = obs_normalizer.normalize_obs(observations) if obs_normalizer is not None else observations
    expected, _ = model.predict(model_input, deterministic=True)
    expected = np.asarray(expected, dtype=np.int64).reshape(len(observations), len(model.action_space.nvec))
    policy = load_policy(folder)
    _assert_same(expected, policy.predict(observations), observations, f"{policy.folder / POLICY_FILE}")
    onnx_checked = bool(policy.metadata.get("onnx")) and importlib.util.find_spec("onnxruntime") is not None
    if onnx_checked:
        import onnxruntime

        session = onnxruntime.InferenceSession(
            str(policy.folder / ONNX_FILE), providers=["CPUExecutionProvider"]
        )
        onnx_actions = session.run(["action"], {"observation": observations})[0]
        _assert_same(expected, onnx_actions, observations, f"{policy.folder / ONNX_FILE}")
    return ParityReport(len(observations), onnx_checked)
