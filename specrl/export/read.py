"""Load a policy folder with torch alone: metadata checks, checksums, the ``torch.export`` program
and a probe of what it returns. Never imports stable-baselines3."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from specrl.acceptance import AcceptancePredictor, PredictorError
from specrl.action_layout import action_sizes, check_action_mapping, check_drafters, check_stop_dimension
from specrl.export.layout import (
    FORMAT_NAME,
    FORMAT_VERSION,
    METADATA_FILE,
    POLICY_FILE,
    PolicyError,
    policy_folder,
    shipped_policies,
    user_policies,
)
from specrl.features import FEATURE_COUNTS, FEATURE_NAMES
from specrl.home import user_policies_dir
from specrl.io import sha256

#: Batch sizes the loader probes the program with (the online controller calls it with 1).
_PROBE_BATCHES = (1, 3)


def read_metadata(folder: Path) -> dict[str, Any]:
    """The parsed ``metadata.json`` of ``folder``, of any format version.

    Raises:
        PolicyError: the folder or the file is missing, or the file is not a JSON object.
    """
    if not folder.is_dir():
        raise PolicyError(
            f"policy folder {folder} does not exist; pass a policy folder (`specrl train` writes one "
            "into its run folder, <run>/policy) or a policy's name: yours (`specrl train --export-as "
            f"NAME`, in {user_policies_dir()}): {', '.join(user_policies()) or 'none'}; shipped: "
            f"{', '.join(shipped_policies()) or 'none'}"
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


@dataclass(frozen=True)
class PolicyDescription:
    """What the metadata says a policy maps: the first ``n_features`` features (its feature
    version's count) to ``[k, tau_index(, stop_index)(, drafter_index)]``: k in 0..``k_max``, the
    index into ``tau_grid``, into ``stop_grid`` (None: no stop dimension) for the stop rule that
    applies ``predictor``, into ``drafters`` (one, the draft: no drafter index)."""

    k_max: int
    tau_grid: tuple[float, ...]
    stop_grid: tuple[float, ...] | None
    predictor: AcceptancePredictor | None
    drafters: tuple[str, ...]
    n_features: int

    @property
    def sizes(self) -> list[int]:
        return action_sizes(self.k_max, self.tau_grid, self.stop_grid, self.drafters)


@dataclass(frozen=True)
class ExportedPolicy(PolicyDescription):
    """A loaded, verified policy folder: its description, the ``folder`` it was loaded from, the
    ``torch.export`` ``program`` and its ``module`` ((B, F) float32 -> (B, D) int64), the parsed
    ``metadata`` and the ``pair`` it was trained on."""

    folder: Path
    module: torch.nn.Module
    program: torch.export.ExportedProgram
    metadata: dict[str, Any]
    pair: str

    def predict(self, observations: np.ndarray) -> np.ndarray:
        """Deterministic actions of a batch: (B, F) observations -> (B, D) int64 actions."""
        with torch.inference_mode():
            return self.module(torch.as_tensor(np.asarray(observations, dtype=np.float32))).numpy()


def check_policy_description(metadata: dict[str, Any], path: Path) -> PolicyDescription:
    """Refuse metadata this specrl cannot serve: another format, a feature version it does not
    compute, a bad action mapping. Returns the description as :func:`load_policy` uses it.

    Raises:
        PolicyError: naming ``path`` and the fix.
    """
    if metadata.get("format") != FORMAT_NAME or metadata.get("format_version") != FORMAT_VERSION:
        raise PolicyError(
            f"{path}: unknown format {metadata.get('format')!r} version {metadata.get('format_version')!r}; "
            f"this specrl reads {FORMAT_NAME!r} version {FORMAT_VERSION}: use the specrl version that "
            "exported it, or re-export the policy"
        )
    version = metadata.get("feature_version")
    if version not in FEATURE_COUNTS:
        raise PolicyError(
            f"{path}: the policy was trained on feature version {version!r} but this specrl computes feature "
            f"versions {sorted(FEATURE_COUNTS)}; retrain the policy, or use a specrl version with feature "
            f"version {version}"
        )
    n_features = FEATURE_COUNTS[version]
    names = metadata.get("feature_names")
    if names != list(FEATURE_NAMES[:n_features]):
        raise PolicyError(
            f"{path}: feature_names {names!r} differ from this specrl's {list(FEATURE_NAMES[:n_features])} "
            "at the same feature version; the file was edited or written by a modified specrl: re-export "
            "the policy"
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
        drafters = check_drafters(action.get("drafters", ["draft"]))
    except (ValueError, PredictorError) as error:
        raise PolicyError(f"{path}: bad action mapping: {error}; re-export the policy") from None
    return PolicyDescription(k_max, tau_grid, stop_grid, predictor, drafters, n_features)


def _check_files(folder: Path, metadata: dict[str, Any]) -> None:
    """Every file listed in metadata must match its sha256; the program must be listed and present."""
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


def _load_program(
    path: Path, sizes: list[int], n_features: int
) -> tuple[torch.export.ExportedProgram, torch.nn.Module]:
    """``torch.export.load`` the verified file and probe it with zeros: shape, dtype, range of the actions."""
    try:
        program = torch.export.load(str(path))
        module = program.module()
    except Exception as error:  # torch raises RuntimeError and friends, unhelpfully varied
        raise PolicyError(
            f"{path} is not a loadable torch.export program ({error}); re-export the policy"
        ) from None
    for batch in _PROBE_BATCHES:
        try:
            with torch.inference_mode():
                actions = module(torch.zeros(batch, n_features))
        except Exception as error:
            raise PolicyError(
                f"{path} fails on a ({batch}, {n_features}) probe ({error}); re-export the policy"
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
                f"{path} returns {got} on a ({batch}, {n_features}) probe, expected ({batch}, {width}) int64 "
                f"actions (the layout of {METADATA_FILE}); re-export the policy"
            )
        if int(actions.min()) < 0 or (actions >= torch.tensor(sizes)).any():
            raise PolicyError(
                f"{path} returns actions outside 0..{[n - 1 for n in sizes]} (k, tau_index, ...) of "
                f"{METADATA_FILE}; re-export the policy"
            )
    return program, module


def load_policy(folder: str | Path) -> ExportedPolicy:
    """Load and verify a policy folder with torch alone (no stable-baselines3).

    Checks, in order: the folder and ``metadata.json`` exist and parse; the format version is
    this specrl's; the feature version is one this specrl computes, with its names; the action
    mapping is valid; every file listed in the metadata matches its sha256 (``policy.pt2`` must be there); the
    ``torch.export`` program loads and maps (B, F) float32 (F: its feature version's count) to
    (B, D) int64 actions within the mapping.

    Raises:
        PolicyError: naming the file at fault and the fix.
    """
    folder = policy_folder(folder)
    metadata = read_metadata(folder)
    description = check_policy_description(metadata, folder / METADATA_FILE)
    _check_files(folder, metadata)
    program, module = _load_program(folder / POLICY_FILE, description.sizes, description.n_features)
    return ExportedPolicy(
        **vars(description),
        folder=folder,
        module=module,
        program=program,
        metadata=metadata,
        pair=str(metadata.get("pair", "")),
    )
