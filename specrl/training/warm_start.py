"""The warm start: before PPO, the policy learns to act as the best rule of each training
scenario (PPO from scratch does not even recover it; docs/design.md, "Warm start").

Per part (:func:`parts`: a scenario's traces by start domain, under each profile selected on),
its :func:`teacher` is the fastest playable rule on validation, or the priced rule unless another
is more than :data:`CARRY_MARGIN` faster (a clone of the priced rule carries to other machines);
its :func:`demonstrations` on train traces are cloned by maximum likelihood (:func:`clone`),
then :data:`DAGGER_ROUNDS` rounds of DAgger label the states the clone reaches. The clone is
checkpoint selection's first candidate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import VecNormalize
from tqdm.auto import tqdm

from specrl.acceptance import AcceptancePredictor
from specrl.controllers.base import Controller
from specrl.controllers.priced import PricedController
from specrl.controllers.stop_rules import stop_rule_table
from specrl.engine.types import Action
from specrl.envs import Scenario, TraceReplayEnv
from specrl.envs.actions import to_action_indices, to_engine_action
from specrl.latency import LatencyModel
from specrl.latency.family import LatencyFamily
from specrl.rule_tuning import tune_specdecpp
from specrl.trace_evaluation import episode_seed, evaluate_controller
from specrl.traces import TraceSet
from specrl.training.comparison import BEST_STATIC, SPECDECPP, Bar, Comparison, Predict
from specrl.training.inputs import RunInputs
from specrl.training.selection import entry_name, policy_predict

CLONE_EPOCHS = 30  # passes over the demonstrations (Adam, minibatches of CLONE_BATCH)
CLONE_BATCH = 1024
CLONE_LEARNING_RATE = 1e-3
DAGGER_ROUNDS = 2  # rounds that label the states the clone reaches (then refit on every row so far)
DAGGER_EPOCHS = 10  # passes of each round's refit, which starts from the clone so far
PRICED = "priced"  # the priced rule's role among the teachers (not a rule of the bar)
CARRY_MARGIN = 0.15  # the priced rule teaches unless another rule is more than this much faster
FAMILY_SEEDS = 1000  # seeds apart of two parts' draws of the family (more than the DAgger rounds)


@dataclass
class Teacher:
    """The rule a part's demonstrations come from (a training scenario, or one domain of it:
    ``<scenario>/<domain>``): its role in the bar, the controller, and its tokens/s on the part's
    validation traces."""

    part: str
    role: str
    controller: Controller
    validation_tokens_per_s: float


@dataclass
class Demonstrations:
    """What the teachers did: observations (N, n_features), action indices (N, dimensions) and
    the part of each row."""

    observations: np.ndarray
    actions: np.ndarray
    parts: np.ndarray

    @classmethod
    def concatenate(cls, parts: Sequence[Demonstrations]) -> Demonstrations:
        return cls(
            *(np.concatenate([getattr(p, f) for p in parts]) for f in ("observations", "actions", "parts"))
        )

    def weights(self) -> np.ndarray:
        """Per row, 1 / the rows of its part: every part weighs alike in the fit."""
        _, inverse, counts = np.unique(self.parts, return_inverse=True, return_counts=True)
        return 1.0 / counts[inverse]


class ActionEncoder:
    """A rule's :class:`~specrl.engine.types.Action` -> the index action of the training action
    space (:func:`~specrl.envs.actions.to_action_indices`), or None when the space cannot play it."""

    def __init__(
        self,
        k_max: int,
        tau_grid: tuple[float, ...],
        stop_grid: tuple[float, ...] | None,
        drafters: tuple[str, ...],
        predictor: AcceptancePredictor | None,
    ) -> None:
        self.k_max, self.tau_grid, self.drafters = k_max, tuple(tau_grid), tuple(drafters)
        self.stop_rules = stop_rule_table(predictor, stop_grid) if stop_grid else (None,)

    def __call__(self, action) -> np.ndarray | None:
        return to_action_indices(action, self.k_max, self.tau_grid, self.stop_rules, self.drafters)

    def decode(self, indices: np.ndarray) -> Action:
        """The engine action of an index action (:func:`~specrl.envs.actions.to_engine_action`)."""
        return to_engine_action(
            np.asarray(indices), self.k_max, self.tau_grid, self.stop_rules, self.drafters
        )

    def plays(self, controller: Controller, observation_size: int) -> bool:
        """Whether the space can play the controller's first action (the rules cloned here keep
        their tau and stop rule for good, so the first action tells)."""
        controller.reset()
        return self(controller.act(np.zeros(observation_size, dtype=np.float32))) is not None


def parts(traces: TraceSet) -> dict[str, TraceSet]:
    """A scenario's traces by the domain each starts in (one part, all of them, for one domain)."""
    domains = list(dict.fromkeys(traces.domains))
    if len(domains) == 1:
        return {domains[0]: traces}
    return {
        d: TraceSet.from_traces([traces.traces[i] for i in traces.indices_of(d)], traces.meta)
        for d in domains
    }


def teacher(
    part: str,
    rules: Mapping[str, float],
    controllers: Mapping[str, Controller],
    encoder: ActionEncoder,
    observation_size: int,
) -> Teacher:
    """The fastest rule of ``part`` on validation (``rules``: tokens/s by role) among its
    ``controllers`` (by role) that ``encoder`` can play; but the priced rule (:data:`PRICED`)
    unless the fastest is more than :data:`CARRY_MARGIN` faster."""
    playable = [
        role
        for role, controller in controllers.items()
        if role in rules and encoder.plays(controller, observation_size)
    ]
    role = max(playable, key=rules.__getitem__)
    if PRICED in playable and rules[role] <= (1 + CARRY_MARGIN) * rules[PRICED]:
        role = PRICED
    return Teacher(part, role, controllers[role], rules[role])


def demonstrations(
    teacher: Teacher,
    scenario: Scenario,
    traces: TraceSet,
    latency: LatencyModel | LatencyFamily,
    encoder: ActionEncoder,
    repeats: int,
    seed: int = 0,
    driver: Predict | None = None,
) -> Demonstrations:
    """Every trace (``repeats`` acceptance draws each when sampled) decoded in the replay
    simulator (under ``latency``, or a machine of a family drawn per episode); at each step the
    teacher's action is a row with the observation. The teacher's actions are played, or with
    ``driver`` (a policy's batch of actions) the driver's: DAgger's rounds label the states the
    clone itself reaches."""
    env = TraceReplayEnv(scenario, traces=traces, latency=latency)
    controller = teacher.controller
    observations, actions = [], []
    for repeat in range(1 if traces.greedy else repeats):
        for index in range(len(traces)):
            observation, _ = env.reset(seed=episode_seed(seed, repeat, index), options={"trace_index": index})
            controller.reset()
            done = False
            while not done:
                action = controller.act(observation)
                indices = encoder(action)
                if indices is None:
                    raise ValueError(
                        f"the training action space cannot play {action} of {teacher.controller!r} "
                        f"(k <= {encoder.k_max}, tau in {list(encoder.tau_grid)}, drafters "
                        f"{list(encoder.drafters)}): choose teachers with teachers(), which checks"
                    )
                observations.append(observation)
                actions.append(indices)
                if driver is not None:
                    action = encoder.decode(driver(observation[None])[0])
                observation, _, terminated, truncated, info = env.step(action)
                controller.observe(info["step_result"])
                done = terminated or truncated
    names = np.full(len(actions), teacher.part, dtype=object)
    return Demonstrations(np.asarray(observations, dtype=np.float32), np.stack(actions), names)


def clone(
    model: PPO,
    normalizer: VecNormalize | None,
    shown: Demonstrations,
    seed: int,
    epochs: int = CLONE_EPOCHS,
    statistics: bool = True,
) -> float:
    """Fit the policy's action distribution to the demonstrated actions (maximum likelihood, rows
    weighted by :meth:`Demonstrations.weights`); with ``normalizer`` (and ``statistics``), its
    observation statistics are first updated with the demonstrated observations. Returns the
    share of rows whose deterministic action equals the demonstrated one, every dimension."""
    if normalizer is not None:
        if statistics:
            normalizer.obs_rms.update(shown.observations)
        inputs = normalizer.normalize_obs(shown.observations)
    else:
        inputs = shown.observations
    policy = model.policy
    x = torch.as_tensor(inputs, device=policy.device)
    y = torch.as_tensor(shown.actions, device=policy.device)
    weights = torch.as_tensor(shown.weights(), dtype=torch.float32, device=policy.device)
    weights = weights / weights.mean()
    optimizer = torch.optim.Adam(policy.parameters(), lr=CLONE_LEARNING_RATE)
    generator = torch.Generator().manual_seed(seed)
    policy.set_training_mode(True)
    for _ in tqdm(range(epochs), desc="warm start: cloning the rules", unit="epoch", leave=False):
        for batch in torch.randperm(len(y), generator=generator).split(CLONE_BATCH):
            log_prob = policy.get_distribution(x[batch]).log_prob(y[batch])
            loss = -(weights[batch] * log_prob).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    policy.set_training_mode(False)
    with torch.no_grad():
        chosen = policy.get_distribution(x).get_actions(deterministic=True)
    return float((chosen == y).all(dim=1).float().mean())


def warm_start(
    model: PPO,
    normalizer: VecNormalize | None,
    inputs: RunInputs,
    footings: Mapping[str, Comparison],
    predictor: AcceptancePredictor | None,
    observation_size: int,
    seed: int,
    scored: Mapping[str, tuple[Mapping[str, float], Bar]] | None = None,
    family: LatencyFamily | None = None,
) -> dict[str, Any]:
    """The warm start of a run (the module doc), per footing (profile name -> :class:`Comparison`),
    training scenario and domain. ``scored``: the rules' tokens/s and bar already measured on a
    scenario's whole validation traces (by :func:`~specrl.training.selection.entry_name`), used
    as they are for a scenario of one part. ``family``: the machines the priced rule's parts are
    demonstrated under, one drawn per episode (None: the footing's machine). Returns the record
    of what was cloned (teachers by part ``<scenario>[/<domain>][@<profile>]``, rows, agreement)."""
    space = inputs.space
    encoder = ActionEncoder(space.k_max, space.tau_grid, space.stop_grid, space.drafters, predictor)
    chosen, sources = {}, []
    for profile, footing in footings.items():
        for s in inputs.scenarios:
            validation, train = parts(inputs.validation[s.name]), parts(inputs.train[s.name])
            entry = entry_name(s.name, profile, footings)
            for domain in sorted(validation.keys() & train.keys()):
                name = entry_name(s.name if len(validation) == 1 else f"{s.name}/{domain}", profile, footings)
                if len(validation) == 1 and scored is not None and entry in scored:
                    rules, bar = dict(scored[entry][0]), scored[entry][1]
                else:
                    rules, bar = footing.rules_on(s, validation[domain])
                    rules = dict(rules)  # the priced rule joins a copy
                controllers = {**bar.rules(s), BEST_STATIC: bar.best_static.controller()}
                controllers[PRICED] = PricedController()
                rules[PRICED] = evaluate_controller(
                    controllers[PRICED], s, validation[domain], footing.latency, footing.repeats
                ).tokens_per_s
                if len(validation) > 1:
                    tuned = tune_specdecpp(
                        footing.rule_predictor, s, validation[domain], footing.latency, footing.repeats
                    )
                    rules[SPECDECPP], controllers[SPECDECPP] = tuned.tokens_per_s, tuned.controller
                chosen[name] = teacher(name, rules, controllers, encoder, observation_size)
                t = chosen[name]
                if family is not None and t.role == PRICED:  # its own draws of the family's machines
                    sources.append(
                        (t, s, train[domain], family, footing.repeats, seed + FAMILY_SEEDS * len(sources))
                    )
                else:
                    sources.append((t, s, train[domain], footing.latency, footing.repeats, seed))
    shown = [
        demonstrations(t, s, traces, machines, encoder, repeats, base)
        for t, s, traces, machines, repeats, base in sources
    ]
    agreement = clone(model, normalizer, Demonstrations.concatenate(shown), seed)
    for round_ in range(DAGGER_ROUNDS):
        driver = policy_predict(model, normalizer)
        shown += [
            demonstrations(t, s, traces, machines, encoder, repeats, base + 1 + round_, driver)
            for t, s, traces, machines, repeats, base in sources
        ]
        everything = Demonstrations.concatenate(shown)
        agreement = clone(model, normalizer, everything, seed, DAGGER_EPOCHS, statistics=False)
    return {
        "teachers": {
            name: {
                "role": t.role,
                "rule": repr(t.controller),
                "validation_tokens_per_s": t.validation_tokens_per_s,
            }
            for name, t in chosen.items()
        },
        "demonstrations": sum(len(d.actions) for d in shown),
        "dagger_rounds": DAGGER_ROUNDS,
        "agreement": agreement,
    }
