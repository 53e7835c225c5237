"""A training run's folder (rl-baselines3-zoo's layout), for every trainer:

    <runs>/<label>__<experiment>__<seed>__<unix time>/
        run.json, config.yaml          run_record(): commit, command, seed, resolved config, latency file
        best.zip, best_vecnormalize.pkl    the checkpoint selection kept
        checkpoint.zip, vecnormalize.pkl, state.json    the last checkpoint (``--resume``)
        acceptance_predictor.json      the per-token stop dimension's predictor
        clone_policy.pt                the warm start's clone, which ``kl_to_clone`` keeps PPO near

The best checkpoint is exported as a policy folder whose provenance is ``run.json``.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import yaml
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import VecEnv, VecNormalize

from specrl.envs import Scenario
from specrl.export import export_policy
from specrl.io import write_atomic, write_text_atomic
from specrl.provenance import git_commit

RUN_RECORD, RUN_CONFIG = "run.json", "config.yaml"
BEST_MODEL, BEST_NORMALIZER = "best.zip", "best_vecnormalize.pkl"
CHECKPOINT, NORMALIZER, STATE = "checkpoint.zip", "vecnormalize.pkl", "state.json"
PREDICTOR, CLONE = "acceptance_predictor.json", "clone_policy.pt"
PROGRESS = "progress.csv"  # SB3's CSV output


def new_run_dir(
    runs_dir: str | Path, label: str, experiment: str, seed: int, *, unique: bool = False
) -> Path:
    """A new run folder ``<runs_dir>/<label>__<experiment>__<seed>__<unix time>`` (cleanrl's run
    name); with ``unique``, a random suffix after one more ``_``, so that runs started in the same
    second (seeds started together) get a folder each."""
    runs_dir = Path(runs_dir)
    runs_dir.mkdir(parents=True, exist_ok=True)
    name = f"{label}__{experiment}__{seed}__{int(time.time())}"
    if unique:
        return Path(tempfile.mkdtemp(prefix=name + "_", dir=runs_dir))
    run_dir = runs_dir / name
    run_dir.mkdir(exist_ok=True)
    return run_dir


def run_record(
    *,
    command: str,
    seed: int,
    arguments: dict[str, Any],
    hyperparameters: dict[str, Any],
    budget: dict[str, Any],
    scenarios: Sequence[Scenario],
    pair: str,
    latency_file: str | Path,
) -> dict[str, Any]:
    """Everything that made a training run: the git commit (:func:`specrl.provenance.git_commit`),
    the command and its parsed arguments, the seed, the PPO hyperparameters and the budget as
    resolved (the YAML with the command line's overrides), every scenario in full (defaults
    filled in) and the latency file used (path and sha256, None when missing). JSON-ready;
    :func:`export_best` keeps it as the policy's provenance."""
    latency_file = Path(latency_file)
    digest = hashlib.sha256(latency_file.read_bytes()).hexdigest() if latency_file.is_file() else None
    return {
        "git_commit": git_commit(),
        "command": command,
        "seed": seed,
        "arguments": {
            key: str(value) if isinstance(value, Path) else value for key, value in arguments.items()
        },
        "ppo": dict(hyperparameters),
        "train": dict(budget),
        "scenarios": {scenario.name: scenario.to_dict() for scenario in scenarios},
        "pair": pair,
        "latency_file": {"path": str(latency_file), "sha256": digest},
    }


def write_run_record(run_dir: Path, record: dict[str, Any]) -> None:
    """``run.json`` and the same as ``config.yaml`` in the run folder, each written atomically."""
    write_text_atomic(run_dir / RUN_RECORD, json.dumps(record, indent=2, default=str))
    plain = json.loads(json.dumps(record, default=str))  # tuples and paths as YAML's plain lists and strings
    write_text_atomic(run_dir / RUN_CONFIG, yaml.safe_dump(plain, sort_keys=False))


def read_run_record(run_dir: Path) -> dict[str, Any] | None:
    """The run's ``run.json``; None for a folder written before run folders had one."""
    path = run_dir / RUN_RECORD
    return json.loads(path.read_text()) if path.is_file() else None


def save_checkpoint(run_dir: Path, model: PPO, venv: VecNormalize, state: dict[str, Any]) -> None:
    """The model, its normalisation statistics and ``state.json`` with the step count: what
    :func:`resumed_state` and ``--resume`` continue from."""
    model.save(run_dir / CHECKPOINT)
    venv.save(str(run_dir / NORMALIZER))
    saved = {**state, "timesteps": model.num_timesteps, "saved": time.strftime("%Y-%m-%dT%H:%M:%S")}
    write_text_atomic(run_dir / STATE, json.dumps(saved, indent=2))


def save_clone(run_dir: Path, policy: torch.nn.Module) -> None:
    """The warm start's policy weights, written atomically (a resumed run penalises the distance
    to this same clone)."""
    write_atomic(run_dir / CLONE, lambda tmp: torch.save(policy.state_dict(), tmp))


def load_clone(run_dir: Path, policy: torch.nn.Module) -> None:
    """Load the weights :func:`save_clone` wrote into ``policy`` (a module of the same shape)."""
    path = run_dir / CLONE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no warm-start clone in this run folder; it was trained without kl_to_clone, "
            "so resume it with the config it started with"
        )
    policy.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))


def save_best(run_dir: Path, model: PPO, venv: VecNormalize) -> None:
    """The checkpoint selection keeps: the model and the observation statistics of that moment."""
    model.save(run_dir / BEST_MODEL)
    venv.save(str(run_dir / BEST_NORMALIZER))


def resumed_state(run_dir: Path) -> dict[str, Any]:
    """The state of the run saved in ``run_dir``; its ``progress.csv`` is kept as
    ``progress-until-<steps>.csv``, since SB3's CSV output starts a new file."""
    state = json.loads((run_dir / STATE).read_text())
    if (run_dir / PROGRESS).is_file():
        (run_dir / PROGRESS).rename(run_dir / f"progress-until-{state['timesteps']}.csv")
    return state


def load_best(
    run_dir: Path, venv: VecEnv, *, normalize: bool = True, device: str = "auto"
) -> tuple[PPO, VecNormalize | None]:
    """The best checkpoint, and with ``normalize`` its observation statistics over ``venv``."""
    model = PPO.load(run_dir / BEST_MODEL, device=device)
    normalizer = VecNormalize.load(str(run_dir / BEST_NORMALIZER), venv) if normalize else None
    return model, normalizer


def export_best(
    run_dir: Path, model: PPO, normalizer: VecNormalize | None, folder: str | Path, **metadata: Any
) -> Path:
    """``model`` (the run's best checkpoint, :func:`load_best`) exported to ``folder`` with its
    observation statistics baked in, ``run.json`` as its provenance and ``metadata`` (the
    keyword arguments of :func:`specrl.export.export_policy`: action space, scenarios, pair,
    evaluation, command). The export checks parity with ``model`` before it moves into place."""
    return export_policy(
        model, folder, obs_normalizer=normalizer, provenance=read_run_record(run_dir), **metadata
    )
