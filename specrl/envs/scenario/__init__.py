"""Scenarios: what an episode decodes and how it is scored. Typed, validated, loaded from YAML.

A scenario file (``specrl/scenarios/*.yaml``, or any path) is a mapping that names only what
differs from the defaults.
The defaults are the field values of the dataclasses below (each field documented where it is
defined), the one place they live; :func:`defaults_yaml` writes every key with its default,
generated from them::

    python -c "from specrl.envs.scenario import defaults_yaml; print(defaults_yaml())"

The keys and the dataclass that holds each section::

    name, description                   Scenario (name: the file name when loaded from a file)
    pair: {...}                         PairSpec: preset, or target and draft; seed, device, dtype,
                                        kv_cache, compile
    prompts: {...}                      PromptSpec: domains (domain -> weight), split, file, chat;
                                        for a .jsonl or .txt file: text_field, domain_field,
                                        file_domain, split_seed, split_fractions (see below)
    sampling: {...}                     SamplingConfig (specrl.engine.sampling): temperature, top_k, top_p
    max_new_tokens, stop_at_eos, k_max  Scenario
    tau_grid, stop_grid                 Scenario: lists of thresholds in [0, 1]
    drafters                            Scenario: the drafters an action may choose (see below)
    reward: {...}                       RewardSpec: time, reference_tokens_per_s, scale
    latency                             Scenario: calibrated | constant | PATH.json (see below)
    recorded_by                         Scenario: specrl | vllm, the engine the traces record (see below)
    cost_model: {...}                   CostModel (specrl.latency.cost_model): draft_forward_s,
                                        target_forward_s, target_per_token_s
    shift: [...]                        DomainShift per item: {after_tokens, domain}; see SpecDecodeEnv
    batch: {...}                        BatchSpec: size, load, load_unit, max_size, requests, share
                                        (the batch simulator; share: a request's share of a batch)

For example, arithmetic sampled at temperature 1 that turns into prose mid-episode::

    description: "Arithmetic, then prose after 64 tokens; sampling at temperature 1."
    prompts:
      domains: {math: 1.0}
    sampling: {temperature: 1.0}
    shift:
      - {after_tokens: 64, domain: prose}

``prompts.file`` names a file of prompts (:class:`PromptSpec`; a ``.jsonl`` or ``.txt`` file is split
into train, validation and test by a seeded hash of each prompt); ``prompts.chat`` decodes each
prompt as a user message through the target's chat template. ``stop_grid`` is the third action
dimension of an env given an acceptance predictor (``AcceptanceThreshold``, cumulative); ``drafters``
of more than one adds the drafter index as the last (:mod:`specrl.action_layout`).
``latency`` chooses the :class:`~specrl.latency.LatencyModel` behind ``modeled`` time and the default
rho: ``calibrated`` (learned from the pair's decoding loop on its device once, cached), ``constant``
(the ``cost_model`` constants: fast, for tests) or the path of a ``specrl calibrate`` file.
``recorded_by: vllm`` replays traces of requests decoded inside vLLM (``specrl collect --engine
vllm``), keyed apart from those of specrl's own engine.

Errors name the file, the key and the fix: ``ScenarioError``.
"""

from specrl.envs.scenario.loading import (
    SCENARIO_DIR,
    embedded_scenarios,
    load_scenario,
    scenario_path,
    shipped_scenarios,
)
from specrl.envs.scenario.pairs import PairInfo, PairSpec, loaded_pair
from specrl.envs.scenario.parsing import defaults_yaml
from specrl.envs.scenario.schema import (
    DEFAULT_STOP_GRID,
    DEFAULT_TAU_GRID,
    LATENCY_SOURCES,
    SPLITS,
    TIME_MODES,
    BatchSpec,
    DomainShift,
    PromptSpec,
    RewardSpec,
    Scenario,
    ScenarioError,
    SetupError,
)

__all__ = [
    "DEFAULT_STOP_GRID",
    "DEFAULT_TAU_GRID",
    "LATENCY_SOURCES",
    "SCENARIO_DIR",
    "SPLITS",
    "TIME_MODES",
    "BatchSpec",
    "DomainShift",
    "PairInfo",
    "PairSpec",
    "PromptSpec",
    "RewardSpec",
    "Scenario",
    "ScenarioError",
    "SetupError",
    "defaults_yaml",
    "load_scenario",
    "loaded_pair",
    "scenario_path",
    "embedded_scenarios",
    "shipped_scenarios",
]
