"""The exported policy artifact: write it from a PPO model, load it with torch alone, check parity.

A policy folder (``policies/<name>/``) describes itself::

    policy.pt2        torch.export program: observations (B, F) float32 -> actions (B, D) int64
                      [k, tau_index], or (B, 3) [k, tau_index, stop_index] for a policy that also
                      sets the per-token stop rule, the deterministic action (argmax per dimension),
                      with the VecNormalize observation statistics baked in when training used them;
                      the batch B is dynamic
    policy.onnx       the same function as ONNX (input "observation", output "action"), written
                      when the ``onnx`` package is installed at export; metadata says whether
    metadata.json     format and feature versions, feature names, action mapping, normalisation,
                      the actor's layers, training scenarios, pair, latency profiles, evaluation, command,
                      provenance (git commit, and what the trainer adds: config, seed, latency
                      file), versions, created time and the sha256 of every other file
    sb3_model.zip     the stable-baselines3 checkpoint, to continue training
    vecnormalize.pkl  the VecNormalize statistics, to continue training (when used)

Online use (:func:`load_policy`, :class:`~specrl.controllers.LearnedController`) needs
``policy.pt2`` and ``metadata.json`` only and imports torch but never stable-baselines3:
``policy.pt2`` is opened by ``torch.export.load`` after its checksum matched (its tensors are
read with ``weights_only=True``). ``sb3_model.zip`` and ``vecnormalize.pkl`` are pickles, for
training only: load them (``PPO.load``, ``VecNormalize.load``) only from folders you trust.
Folders of format version 1 (a TorchScript ``policy.pt``) are refused with the command that
re-exports them from their checkpoint: ``python -m specrl.export.upgrade policies/<name>``.

The action mapping is the envs' (:func:`specrl.envs.actions.to_engine_action`):
``[k, tau_index] -> Action(k, tau_grid[tau_index])``, k in 0..k_max; with a stop dimension,
``stop_index`` picks the per-token stop rule of
:func:`specrl.controllers.stop_rules.stop_rule_table` from the metadata's ``stop_grid`` and the
acceptance predictor stored beside it (``action.stop_predictor``), so the folder carries both
decisions. A policy over a drafter pool has a last index into ``action.drafters``.

A policy reads the first ``FEATURE_COUNTS[feature_version]`` features (versions are prefixes,
:mod:`specrl.features`), so folders of feature version 1 still load and act.

One concern per module; each imports only those above it:

- :mod:`~specrl.export.layout`: file names, the format version, :class:`PolicyError`, the
  action-mapping checks and checksums that writer and reader share;
- :mod:`~specrl.export.module`: :class:`PolicyModule` (normalisation, actor, argmax) built from
  a PPO, and its ``torch.export`` program;
- :mod:`~specrl.export.read`: :func:`load_policy` and :class:`ExportedPolicy` (torch only);
- :mod:`~specrl.export.onnx_file`: the optional ONNX copy;
- :mod:`~specrl.export.write`: :func:`export_policy`, the atomic install;
- :mod:`~specrl.export.parity`: :func:`verify_parity` against the PPO;
- :mod:`~specrl.export.upgrade`: re-export an older folder from its checkpoint (command line).
"""

from specrl.action_layout import check_action_mapping, check_stop_dimension
from specrl.export.layout import (
    FORMAT_NAME,
    FORMAT_VERSION,
    LEGACY_POLICY_FILE,
    METADATA_FILE,
    ONNX_FILE,
    POLICY_FILE,
    SB3_MODEL_FILE,
    UPGRADE_COMMAND,
    VECNORMALIZE_FILE,
    PolicyError,
    sha256,
)
from specrl.export.module import PolicyModule, build_module, export_program
from specrl.export.parity import ParityReport, verify_parity
from specrl.export.read import ExportedPolicy, load_policy
from specrl.export.write import export_policy
from specrl.features import FEATURE_NAMES, FEATURE_VERSION, N_FEATURES

__all__ = [
    "FEATURE_NAMES",
    "FEATURE_VERSION",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "LEGACY_POLICY_FILE",
    "METADATA_FILE",
    "N_FEATURES",
    "ONNX_FILE",
    "POLICY_FILE",
    "SB3_MODEL_FILE",
    "UPGRADE_COMMAND",
    "VECNORMALIZE_FILE",
    "ExportedPolicy",
    "ParityReport",
    "PolicyError",
    "PolicyModule",
    "build_module",
    "check_action_mapping",
    "check_stop_dimension",
    "export_policy",
    "export_program",
    "load_policy",
    "sha256",
    "verify_parity",
]
