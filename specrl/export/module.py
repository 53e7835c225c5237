"""The exported function: SB3's deterministic PPO policy, observation normalisation included, as one
:class:`PolicyModule`, and that module as a ``torch.export`` program with a dynamic batch."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from specrl.export.layout import PolicyError
from specrl.features import N_FEATURES

if TYPE_CHECKING:  # online loading must not import stable-baselines3
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecNormalize


def _fresh_linear(layer: nn.Linear) -> nn.Linear:
    """A plain copy of ``layer`` with int sizes (SB3 sizes ``action_net`` with a numpy int)."""
    fresh = nn.Linear(int(layer.in_features), int(layer.out_features), bias=layer.bias is not None)
    fresh.load_state_dict(layer.state_dict())
    return fresh


class PolicyModule(nn.Module):
    """Observation normalisation, actor MLP, action head and deterministic argmax, in one module:
    SB3's ``policy_net`` and ``action_net``, the ``sizes`` of the action dimensions, and
    VecNormalize's float64 ``mean``, ``std`` (``sqrt(var + epsilon)``) and ``clip`` (no
    normalisation when ``mean`` is None) over ``n_features`` observations."""

    def __init__(
        self,
        policy_net: nn.Module,
        action_net: nn.Linear,
        sizes: Sequence[int],
        mean: np.ndarray | None = None,
        std: np.ndarray | None = None,
        clip: float = 0.0,
        n_features: int = N_FEATURES,
    ) -> None:
        super().__init__()
        self.policy_net = policy_net
        self.action_net = action_net
        # where each dimension's logits start and end in the action net's output
        self.bounds = np.concatenate([[0], np.cumsum([int(n) for n in sizes])]).tolist()
        self.normalize = mean is not None
        # Float64 like VecNormalize's numpy statistics, so normalised inputs match SB3's exactly.
        shape = (n_features,)
        self.n_features = n_features
        self.register_buffer(
            "mean", torch.as_tensor(mean if mean is not None else np.zeros(shape), dtype=torch.float64)
        )
        self.register_buffer(
            "std", torch.as_tensor(std if std is not None else np.ones(shape), dtype=torch.float64)
        )
        self.clip = float(clip)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        """(B, F) float32 observations -> (B, D) int64 ``[k, tau_index(, stop_index)(, drafter_index)]``."""
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

    def network(self) -> dict[str, Any]:
        """What the program's graph computes, for a reader that runs the MLP without torch
        (:class:`specrl.controllers.learned.NumpyPolicy`): the actor's layer kinds in order (its
        weights are the program's ``policy_net.<i>.*`` and ``action_net.*``) and the clip."""
        return {
            "policy_net": [type(layer).__name__ for layer in self.policy_net.children()],
            "observation_clip": self.clip,
        }


def _normalizer_stats(obs_normalizer: VecNormalize | None, n_features: int) -> dict[str, Any]:
    """The mean/std/clip :class:`PolicyModule` bakes in; empty when observations are not normalised."""
    if obs_normalizer is None or not obs_normalizer.norm_obs:
        return {}
    rms = obs_normalizer.obs_rms
    if isinstance(rms, dict):
        raise PolicyError(
            "dict observation normalisation is not supported: specrl observations are one vector"
        )
    mean = np.asarray(rms.mean, dtype=np.float64)
    if mean.shape != (n_features,):
        raise PolicyError(f"VecNormalize statistics have shape {mean.shape}, expected ({n_features},)")
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
    # FlattenExtractor on (B, F) observations is the identity, so it is left out.
    policy_net = copy.deepcopy(policy.mlp_extractor.policy_net).cpu().float()
    action_net = _fresh_linear(policy.action_net).cpu().float()
    sizes = [int(n) for n in policy.action_space.nvec]
    n_features = int(policy.observation_space.shape[0])
    stats = _normalizer_stats(obs_normalizer, n_features)
    return PolicyModule(policy_net, action_net, sizes, **stats, n_features=n_features).eval()


def export_program(module: nn.Module) -> torch.export.ExportedProgram:
    """``module`` as a ``torch.export`` program over (B, F) float32 observations, B dynamic."""
    batch = torch.export.Dim("batch")
    example = torch.zeros(2, module.n_features)  # a batch of 1 would be specialised; 2 is traced as B
    return torch.export.export(module, (example,), dynamic_shapes=({0: batch},))
