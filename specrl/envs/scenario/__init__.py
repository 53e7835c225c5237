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
    prompts: {...}                      PromptSpec: domains (domain -> weight), split, file; for a
                                        .jsonl or .txt file: text_field, domain_field, file_domain,
                                        split_seed, split_fractions (see below)
    sampling: {...}                     SamplingConfig (specrl.engine.sampling): temperature, top_k, top_p
    max_new_tokens, stop_at_eos, k_max  Scenario
    tau_grid, stop_grid                 Scenario: lists of thresholds in [0, 1]
    drafters                            Scenario: the drafters an action may choose (see below)
    reward: {...}                       RewardSpec: time, reference_tokens_per_s, scale
    latency                             Scenario: calibrated | constant | PATH.json (see below)
    cost_model: {...}                   CostModel (specrl.latency.cost_model): draft_forward_s,
                                        target_forward_s, target_per_token_s
    shift: [...]                        DomainShift per item: {after_tokens, domain}; see SpecDecodeEnv
    batch: {...}                        BatchSpec: size, load, load_unit, max_size, requests (batch simulator)

For example, arithmetic sampled at temperature 1 that turns into prose mid-episode::

    description: "Arithmetic, then prose after 64 tokens; sampling at temperature 1."
    prompts:
      domains: {math: 1.0}
    sampling: {temperature: 1.0}
    shift:
      - {after_tokens: 64, domain: prose}

``prompts.file`` names a file of prompts: a ``.jsonl`` file (one JSON record per line, the
prompt under ``text_field``, its domain under ``domain_field`` if given), a ``.txt`` file (prompts
separated by blank lines) or a JSON/YAML file already split by hand. A ``.jsonl`` or ``.txt`` file
is split into train, validation and test by a seeded hash of each prompt's text
(:mod:`~specrl.envs.scenario.prompt_files`), so a scenario that names it trains, selects and
reports on disjoint prompts with no other step::

    prompts:
      file: faq.jsonl              # relative to the scenario file's folder
      text_field: question         # the records' field that holds the prompt

``stop_grid`` is the third action dimension of an env given an acceptance predictor: the
threshold below which the predicted probability that every token drafted so far in the step is
accepted stops drafting (:class:`specrl.controllers.stop_rules.AcceptanceThreshold`, cumulative;
0 never stops). Without a predictor that dimension has the single value 0.

``drafters`` lists the drafters of :mod:`specrl.engine.drafters` the env offers, default
``[draft]``. With more than one, the action gains a last dimension, the index of the drafter in
this list, and traces record each drafter's fields (:mod:`specrl.traces.format`). With one, every
action drafts with it, a rule's too (``[ngram]``: the lookup alone); a scenario of some of the
pool's drafters replays the whole pool's traces when it has none of its own.

``latency`` chooses the :class:`~specrl.latency.LatencyModel` behind ``modeled`` time and the
default rho: ``calibrated`` learns it from the pair's decoding loop on its device once and caches
the result (:func:`specrl.latency.calibrated`); ``constant`` uses the three ``cost_model``
constants (no dependence on the context length or device; fast, for tests); a path (relative to
the scenario file) reads a file written by ``specrl calibrate`` (``--method profile``
writes the fallback that times forwards in isolation: it misses loop effects and sampling cost).

Errors name the file, the key and the fix: ``ScenarioError``.

The package, one concern per module: :mod:`~specrl.envs.scenario.pairs` (the ``pair:`` section and
the pair before it is loaded), :mod:`~specrl.envs.scenario.schema` (the dataclasses and their
checks), :mod:`~specrl.envs.scenario.parsing` (plain data into them, :func:`defaults_yaml`),
:mod:`~specrl.envs.scenario.loading` (files and shipped names), :mod:`~specrl.envs.scenario.prompt_files`
(a prompt file read and split), :mod:`~specrl.envs.scenario.sources` (the latency model and prompts
a scenario resolves against a pair).
"""

from specrl.envs.scenario.loading import (
    LEGACY_SCENARIO_FOLDER,
    SCENARIO_DIR,
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
    RETIRED_SPLITS,
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
    "LEGACY_SCENARIO_FOLDER",
    "RETIRED_SPLITS",
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
    "shipped_scenarios",
]
