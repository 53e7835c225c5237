"""Re-export a policy folder of an older format (version 1: a TorchScript ``policy.pt``) from its
own SB3 checkpoint, keeping what its metadata says about it, and check the result against that
checkpoint.

    python -m specrl.export.upgrade policies/default [more folders]

The folder keeps its action mapping, stop predictor, training scenarios, pair, evaluation and
command, and every file the old metadata did not list (``results.md``); files of the old format
(``policy.pt``) go. ``metadata["provenance"]`` keeps the old provenance (a version 1 folder had
none, so its training commit is recorded as unknown) and adds ``upgraded_from``: the old format
version, creation time, library versions and checksums. Needs stable-baselines3, like training;
load the pickles of folders you trust only.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import uuid
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from specrl.export.layout import (
    FORMAT_NAME,
    METADATA_FILE,
    SB3_MODEL_FILE,
    UPGRADE_COMMAND,
    VECNORMALIZE_FILE,
    PolicyError,
)
from specrl.export.parity import ParityReport, verify_parity
from specrl.export.read import check_policy_description, read_metadata
from specrl.export.write import export_policy, install
from specrl.provenance import git_commit


class _SpacesOnly(gym.Env):
    """An env that only has spaces: ``VecNormalize.load`` wants one to wrap, and nothing steps it."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        self.observation_space, self.action_space = observation_space, action_space


def upgrade_policy(
    folder: str | Path, *, observations: int = 2000, seed: int = 0
) -> tuple[Path, ParityReport]:
    """Re-export ``folder`` in this specrl's format from its ``sb3_model.zip`` (and ``vecnormalize.pkl``).

    The new folder replaces the old one only after :func:`~specrl.export.verify_parity` found the
    new program (and ONNX copy) acting exactly as the checkpoint on ``observations`` uniform random
    observations in [0, 1).

    Returns:
        The folder and the parity report.

    Raises:
        PolicyError: the folder is not a specrl policy, its checkpoint is missing, or the
            re-exported policy differs from the checkpoint.
    """
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    folder = Path(folder)
    old = read_metadata(folder)
    path = folder / METADATA_FILE
    if old.get("format") != FORMAT_NAME:
        raise PolicyError(f"{path}: format {old.get('format')!r} is not a specrl policy folder")
    description = check_policy_description(old, path)
    if not (folder / SB3_MODEL_FILE).is_file():
        raise PolicyError(
            f"{folder / SB3_MODEL_FILE} is missing: the policy can only be re-exported from its checkpoint"
        )
    model = PPO.load(folder / SB3_MODEL_FILE, device="cpu")
    normalizer = None
    if (folder / VECNORMALIZE_FILE).is_file():
        spaces_only = DummyVecEnv([lambda: _SpacesOnly(model.observation_space, model.action_space)])
        normalizer = VecNormalize.load(str(folder / VECNORMALIZE_FILE), spaces_only)
    provenance: dict[str, Any] = dict(old.get("provenance") or {"git_commit": None})
    provenance["upgraded_from"] = {
        "format_version": old.get("format_version"),
        "created": old.get("created"),
        "versions": old.get("versions"),
        "files": old.get("files"),
        "upgraded_at_commit": git_commit(),
        "command": f"{UPGRADE_COMMAND} {folder}",
    }
    staged = folder.parent / f".{folder.name}.upgrade-{uuid.uuid4().hex[:8]}"
    try:
        export_policy(
            model,
            staged,
            k_max=description.k_max,
            tau_grid=description.tau_grid,
            obs_normalizer=normalizer,
            stop_grid=description.stop_grid,
            predictor=description.predictor,
            drafters=description.drafters,
            scenarios=list(old.get("scenarios") or []),
            pair=str(old.get("pair", "")),
            evaluation=old.get("evaluation"),
            latency_profiles=old.get("latency_profiles"),
            command=old.get("command"),
            onnx=bool(old.get("onnx")),
            provenance=provenance,
        )
        width = description.n_features
        sample = np.random.default_rng(seed).random((observations, width), dtype=np.float32)
        report = verify_parity(model, staged, sample, normalizer)
        listed = set(old.get("files") or {}) | {METADATA_FILE}
        for extra in sorted(folder.iterdir()):  # what the writer did not write: reports beside the policy
            if extra.is_file() and extra.name not in listed and not (staged / extra.name).exists():
                shutil.copy2(extra, staged / extra.name)
        install(staged, folder)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    return folder, report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog=UPGRADE_COMMAND, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("folders", nargs="+", help="policy folders (policies/<name>) to re-export")
    parser.add_argument(
        "--observations", type=int, default=2000, help="random observations the parity check compares"
    )
    args = parser.parse_args(argv)
    for folder in args.folders:
        try:
            _, report = upgrade_policy(folder, observations=args.observations)
        except PolicyError as error:
            sys.exit(f"error: {error}")
        onnx = " and policy.onnx" if report.onnx_checked else ""
        print(
            f"{folder}: re-exported; policy.pt2{onnx} act as its checkpoint on "
            f"{report.observations} observations"
        )


if __name__ == "__main__":
    main()
