"""``SpecDecodeEnv``: one env step is one real speculative iteration of the engine."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from specrl.controllers.stop_rules import AcceptancePredictor, stop_rule_table
from specrl.engine.generation import Generation
from specrl.engine.types import Action
from specrl.envs.actions import make_action_space, to_engine_action
from specrl.envs.reward import step_info, step_reward
from specrl.envs.scenario import Scenario, load_scenario
from specrl.features import FEATURE_HIGH, FEATURE_LOW, FEATURE_NAMES, FeatureTracker, GenerationSettings
from specrl.latency import LatencyModel
from specrl.models import ModelPair

# Text put between the generated text and the prompt appended by a domain shift.
SHIFT_SEPARATOR = "\n"
RESET_OPTIONS = ("domain", "prompt_index")


class SpecDecodeEnv(gym.Env):
    """Choose (k, tau) for each iteration of real speculative decoding; maximise tokens/sec.

    ## Description

    Each episode decodes one prompt with the scenario's (target, draft) pair and sampling. Each
    step runs one iteration of the lossless engine (docs/design.md section 2): the draft proposes
    up to ``k`` tokens, stopping before a token whose confidence ``max q`` is below ``tau``; the
    target verifies them in one forward; 1 to k + 1 tokens are emitted. The output is the
    target's whatever the actions, so actions only change time.

    Domain shift (``shift: [{after_tokens: N, domain: D}, ...]``): once the episode has generated
    N tokens (or its segment ended at EOS), a prompt of domain D is appended after a newline and
    a new engine generation continues on the longer context (its prefill not counted), while the
    episode, its budget and the observation history carry on; the oldest tokens are dropped if
    the context would not leave room for the remaining budget.

    ## Action Space

    ``MultiDiscrete([k_max + 1, len(tau_grid)])`` (:func:`specrl.envs.actions.make_action_space`),
    plus ``len(stop_grid)`` per-token stop thresholds with a ``predictor`` and the drafter index
    when the scenario offers several drafters; a :class:`specrl.Action` with any tau in [0, 1] too
    (:func:`~specrl.envs.actions.to_engine_action`). Anything else raises :class:`InvalidActionError`.

    ## Observation Space

    ``Box(0, 1, (N_FEATURES,), float32)``: :mod:`specrl.features`, the vector
    ``SpeculativeDecoder`` gives online controllers.

    ## Rewards

    ``r_t = (n_t - rho * dt_t) / scale`` (:mod:`specrl.envs.reward`, docs/design.md section 3):
    n_t the tokens the step emitted, dt_t its seconds, ``wallclock`` (the engine's) or ``modeled``
    (the latency model's, deterministic), rho ``reward.reference_tokens_per_s`` or plain
    decoding's throughput under the latency model. ``info`` of a step: :func:`step_info`'s keys
    and ``step_result`` (with the reward's seconds); of ``reset``: ``domain``, ``prompt_index``,
    ``prompt``, ``split``, ``prompt_tokens``, ``generation_seed``.

    ## Starting State

    ``reset(seed=, options=)`` draws a domain with the scenario's weights, a prompt of it and a
    sampling seed from ``self.np_random``; ``options`` may fix ``domain`` and ``prompt_index``.

    ## Episode End

    Terminated when the generation finishes: ``max_new_tokens`` tokens, an EOS (with
    ``stop_at_eos``, in the last segment) or a full context window. Never truncated.

    ## Arguments

    - ``scenario``: a YAML path, a shipped scenario name or a :class:`Scenario`.
    - ``pair``: a loaded :class:`ModelPair` instead of the scenario's.
    - ``split``, ``time``: override the scenario's prompt split and time source.
    - ``latency``: a :class:`~specrl.latency.LatencyModel` instead of the scenario's (``env.latency``;
      None when neither modeled time nor rho needs one).
    - ``predictor``: an :class:`~specrl.controllers.stop_rules.AcceptancePredictor`; adds the stop dimension.
    - ``prepare``: calibrate a missing latency model now; without it, :class:`SetupError` names the command.

    ## Version History

    - v0, the observation growing with ``FEATURE_VERSION`` (older policies read its prefix).
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        scenario: str | Path | Scenario = "code",
        pair: ModelPair | None = None,
        split: str | None = None,
        time: str | None = None,
        latency: LatencyModel | None = None,
        predictor: AcceptancePredictor | None = None,
        render_mode: str | None = None,
        prepare: bool = False,
    ) -> None:
        if render_mode is not None:
            raise ValueError(f"SpecDecodeEnv does not render; got render_mode={render_mode!r}")
        if not isinstance(scenario, Scenario):
            scenario = load_scenario(scenario)
        self.scenario = scenario.with_overrides(split=split, time=time)
        self.pair = pair if pair is not None else self.scenario.pair.load()
        self.prompt_sets = self.scenario.prompt_sets(self.pair)
        if latency is None and self.scenario.needs_latency:
            latency = self.scenario.latency_model(self.pair, calibrate=prepare)
        self.latency = latency.for_sampling(self.scenario.sampling) if latency else None
        self.reference_tokens_per_s = self.scenario.reference_throughput(self.latency)
        self.tau_grid = tuple(self.scenario.tau_grid)
        self.predictor = predictor
        self.stop_rules = stop_rule_table(predictor, self.scenario.stop_grid)
        self.action_space = make_action_space(self.scenario, predictor)
        self.observation_space = spaces.Box(FEATURE_LOW, FEATURE_HIGH, (len(FEATURE_NAMES),), np.float32)
        self.generation: Generation | None = None
        self.features: FeatureTracker | None = None

    # ---- actions ---------------------------------------------------------------------

    def to_engine_action(self, action: Any) -> Action:
        """``[k, tau_index(, stop_index)(, drafter_index)]`` (or an :class:`Action`) -> the engine's
        Action; refuses invalid ones."""
        return to_engine_action(
            action, self.scenario.k_max, self.tau_grid, self.stop_rules, self.scenario.drafters
        )

    def _lookup_match(self) -> tuple[int, int]:
        return self.generation.lookup_match() if self.generation is not None else (0, 0)

    # ---- the episode ---------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = sorted(set(options) - set(RESET_OPTIONS))
        if unknown:
            raise ValueError(f"unknown reset option(s) {unknown}; known: {list(RESET_OPTIONS)}")
        domain = options.get("domain") or self._draw_domain()
        if domain not in self.prompt_sets:
            raise ValueError(
                f"reset option domain={domain!r} is not one of this scenario's domains "
                f"{list(self.prompt_sets)}"
            )
        texts = self.prompt_sets[domain]
        index = options.get("prompt_index")
        if index is None:
            index = int(self.np_random.integers(len(texts)))
        elif not 0 <= index < len(texts):
            raise ValueError(f"prompt_index={index} out of range: domain {domain!r} has {len(texts)} prompts")
        self.generation_seed = int(self.np_random.integers(2**31 - 1))
        self.domain, self.segment = domain, 0
        self.episode_tokens, self.episode_seconds = 0, 0.0
        prompt_ids = self.pair.encode(texts[index])
        self.generation = self._generation(prompt_ids)
        settings = GenerationSettings.of(
            self.generation, max_new_tokens=self.scenario.max_new_tokens, drafters=self.scenario.drafters
        )
        prices = None if self.latency is None else self.latency.price_line
        self.features = FeatureTracker(settings, len(prompt_ids), self._lookup_match, prices)
        info = {
            "domain": domain,
            "prompt_index": index,
            "prompt": texts[index],
            "split": self.scenario.prompts.split,
            "prompt_tokens": len(prompt_ids),
            "generation_seed": self.generation_seed,
        }
        return self.features.vector(), info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.generation is None or self.features is None:
            raise RuntimeError("call reset() before step()")
        if self.generation.done:
            raise RuntimeError("the episode is over; call reset() to start a new one")
        engine_action = self.to_engine_action(action)
        result = self.generation.step(engine_action).merged()  # the episode is a batch of one
        if self.scenario.reward.time == "modeled":
            assert self.latency is not None  # built in __init__ for modeled time
            draft_seconds, verify_seconds = self.latency.seconds(result)
            result = replace(result, draft_seconds=draft_seconds, verify_seconds=verify_seconds)
        self.features.update([result])
        seconds = result.seconds
        self.episode_tokens += result.emitted
        self.episode_seconds += seconds
        reward = step_reward(result.emitted, seconds, self.reference_tokens_per_s, self.scenario.reward.scale)
        info = step_info(
            result, engine_action, self.domain, self.segment, self.episode_tokens, self.episode_seconds
        )
        terminated = self.generation.done
        budget_left = self.episode_tokens < self.scenario.max_new_tokens
        if terminated and budget_left and self.segment < len(self.scenario.shift):
            self._shift_domain()
            terminated = False
        return self.features.vector(), float(reward), terminated, False, info

    def close(self) -> None:
        self.generation = None

    # ---- helpers ---------------------------------------------------------------------------

    def _draw_domain(self) -> str:
        return self.scenario.prompts.draw_domain(self.np_random)

    def _generation(self, prompt_ids: list[int]) -> Generation:
        """The engine generation of the current segment, up to its token budget."""
        shifts_left = self.scenario.shift[self.segment :]
        end = shifts_left[0].after_tokens if shifts_left else self.scenario.max_new_tokens
        budget = end - self.episode_tokens
        return Generation(
            self.pair,
            [prompt_ids],
            budget,
            self.scenario.sampling,
            self.generation_seed + self.segment,
            self.scenario.stop_at_eos,
        )

    def _shift_domain(self) -> None:
        """Append a prompt of the next shift's domain to the text so far and keep decoding."""
        assert self.generation is not None and self.features is not None
        shift = self.scenario.shift[self.segment]
        texts = self.prompt_sets[shift.domain]
        context = list(self.generation.tokens[0])
        if self.generation.finished_by_eos[0]:
            context = context[:-1]  # the EOS would close the document before the new text
        context += self.pair.encode(SHIFT_SEPARATOR + texts[int(self.np_random.integers(len(texts)))])
        self.segment += 1
        self.domain = shift.domain
        room = self.pair.context_length - (self.scenario.max_new_tokens - self.episode_tokens)
        context = context[-max(1, room) :]
        self.generation = self._generation(context)
        self.features.set_context_length(len(context))
