"""What a scenario resolves against a pair: its latency model and its prompt texts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

import specrl.latency
from specrl.embedded.corpus import SPLITS
from specrl.envs.scenario.pairs import PairInfo, loaded_pair
from specrl.envs.scenario.prompt_files import PromptFileError
from specrl.envs.scenario.schema import Scenario, ScenarioError, SetupError
from specrl.latency import LatencyModel, device_key
from specrl.latency.calibration import cached_calibration
from specrl.models import EMBEDDED_PREFIX, ModelPair
from specrl.pretrained.chat import ChatTemplateError


def latency_model(
    scenario: Scenario, pair: ModelPair | PairInfo, progress: bool = True, calibrate: bool = True
) -> LatencyModel:
    """The latency model of ``latency`` for ``pair`` (measured on this device and cached;
    constant; or read), as the view for this scenario's sampling (greedy or sampled). A
    ``calibrated`` model is learned from the loop of one sequence, or, for a batch of requests
    (``batch.batched``) or a request's share of one (``batch.share``), measured over batch sizes
    and calibrated on continuous batching of the scenario's train prompts
    (:func:`scenario_calibration_prompts`). One not cached yet is measured now
    (``calibrate``, with progress; a :class:`PairInfo` is then loaded, and a line on stderr says
    so), else refused.

    Raises:
        SetupError: ``calibrated``, not cached, and ``calibrate`` is False: the message names the
            command that measures it.
        ScenarioError: a latency file measured for another pair, or for fewer tokens per
            verify than this scenario's k_max + 1.
        specrl.latency.LatencyError: a latency file that is missing or invalid.
    """
    if scenario.latency == "constant":
        dtype = str(pair.dtype).removeprefix("torch.")
        device = device_key(pair.device)
        return LatencyModel.from_cost_model(scenario.cost_model, pair=pair.name, device=device, dtype=dtype)
    if scenario.latency == "calibrated":
        method = "batch" if scenario.batch.batched or scenario.batch.share else "loop"
        model = cached_calibration(pair, k_max=scenario.k_max, method=method)
        unpriced = [] if model is None else model.unpriced(scenario.drafters)
        if model is None or unpriced:  # measured once, then cached
            path = specrl.latency.latency_path(pair, method)
            what = f"its latency model{' over batch sizes' * (method == 'batch')}"
            what = what if model is None else f"the drafters {unpriced}"
            if not calibrate:
                minutes = "about 10 minutes" if method == "batch" else "about 2 minutes"
                command = f"`{calibrate_command(pair, scenario.k_max, method)}` ({minutes}, then cached)"
                if unpriced:
                    drafters = list(scenario.drafters)
                    command = f"`specrl.latency.calibrated(pair, method={method!r}, drafters={drafters})`"
                raise SetupError(
                    f"{scenario._origin()} needs {what} for pair '{pair.name}' on this device, and "
                    f"{path} {'does not exist' if model is None else 'has no price for them'}: measure "
                    f"{'it' if model is None else 'them'} with {command}, or pass prepare=True to the env"
                )
            loaded = loaded_pair(pair, f"calibrate {what} (not in {path})")
            prompts = scenario_calibration_prompts(scenario, loaded) if method == "batch" else None
            model = specrl.latency.calibrated(
                loaded,
                k_max=scenario.k_max,
                progress=progress,
                drafters=scenario.drafters,
                method=method,
                prompts=prompts,
            )
        return model.for_sampling(scenario.sampling)
    model = LatencyModel.load(scenario.latency).for_sampling(scenario.sampling)
    unpriced = model.unpriced(scenario.drafters)
    if unpriced:
        raise ScenarioError(
            f"{scenario._origin()}: latency file '{scenario.latency}' prices no step of the drafters "
            f"{unpriced}; set latency: calibrated (it measures them), or add their prices to the file"
        )
    if model.pair != pair.name:
        raise ScenarioError(
            f"{scenario._origin()}: latency file '{scenario.latency}' was measured for pair "
            f"'{model.pair}', not '{pair.name}'; calibrate this pair (experiments/"
            "calibrate.py) or set latency: calibrated"
        )
    if model.kind != "constant" and model.n_max < scenario.k_max + 1:
        raise ScenarioError(
            f"{scenario._origin()}: latency file '{scenario.latency}' covers verifies of up to "
            f"{model.n_max} tokens but k_max = {scenario.k_max} needs {scenario.k_max + 1}; "
            f"re-run specrl calibrate with --k-max {scenario.k_max}"
        )
    return model


def machine_latency(
    scenarios: Sequence[Scenario], pair: ModelPair, k_max: int, drafters: Sequence[str]
) -> LatencyModel:
    """The latency model a run over ``scenarios`` prices this machine with: the latency file they
    name (a serving engine's prices, ``specrl calibrate --method serving``), else the pair's
    calibration on this device (measured now if missing; :func:`specrl.latency.calibrated`).

    Raises:
        ScenarioError: some scenarios name a latency file and others another file or none.
    """
    files = {s.latency for s in scenarios if s.latency.endswith(".json")}
    if not files:
        return specrl.latency.calibrated(pair, k_max=k_max, drafters=tuple(drafters))
    if len(files) > 1 or any(s.latency not in files for s in scenarios):
        sources = sorted({f"{s.name}: {s.latency}" for s in scenarios})
        raise ScenarioError(
            f"the scenarios price their steps with different latency models ({', '.join(sources)}); "
            "run scenarios of one latency file together"
        )
    return latency_model(scenarios[0], pair, progress=False, calibrate=False)


def prompt_sets(scenario: Scenario, pair: ModelPair | PairInfo) -> dict[str, list[str]]:
    """Domain -> prompt texts of this scenario's split, from ``prompts.file`` (a ``.jsonl`` or
    ``.txt`` file split here: :mod:`specrl.envs.scenario.prompt_files`) or the pair."""
    where = f"prompts file '{scenario.prompts.file}'" if scenario.prompts.file else f"pair '{pair.name}'"
    read = None
    if scenario.prompts.file:
        path = Path(scenario.prompts.file)
        if not path.is_file():
            raise ScenarioError(
                f"{scenario._origin()}: prompts.file '{path}' does not exist; give a .jsonl file (one JSON "
                "record per line), a .txt file (prompts separated by blank lines) or a JSON or YAML "
                "file {split: {domain: [text, ...]}}"
            )
        try:
            read = scenario.prompts.read_file()
        except PromptFileError as error:
            raise ScenarioError(f"{scenario._origin()}: {error}") from None
        sets = read.sets
    else:
        sets = pair.prompts
        if not sets:
            raise ScenarioError(
                f"{scenario._origin()}: the {where} has no prompt sets (only the embedded pairs ship "
                "them); set prompts.file to a .jsonl file of prompts, or a JSON file "
                "{split: {domain: [text, ...]}}"
            )
    split = scenario.prompts.split
    if not isinstance(sets, Mapping) or not isinstance(sets.get(split), Mapping):
        available = sorted(k for k in sets if k in SPLITS) if isinstance(sets, Mapping) else []
        raise ScenarioError(
            f"{scenario._origin()}: the {where} has no '{split}' prompts (it has {available})"
        )
    result = {}
    for domain in scenario.domains:
        texts = sets[split].get(domain)
        if not texts or not all(isinstance(t, str) and t for t in texts):
            split_here = read.describe(domain) if read else ""
            fix = (
                f": {split_here}; add prompts, or change prompts.split_seed or prompts.split_fractions"
                if split_here
                else f" (domains: {sorted(sets[split])}); use one of those in prompts.domains / shift"
            )
            raise ScenarioError(
                f"{scenario._origin()}: the {where} has no '{split}' prompts of domain '{domain}'{fix}"
            )
        result[domain] = list(texts)
    if scenario.prompts.chat:
        result = {domain: chat_messages(scenario, pair, texts) for domain, texts in result.items()}
    return result


def chat_messages(scenario: Scenario, pair: ModelPair | PairInfo, messages: list[str]) -> list[str]:
    """Each user message of ``messages`` through the pair tokenizer's chat template, up to the
    assistant's turn (``prompts.chat``)."""
    loaded = loaded_pair(pair, "apply its chat template to the prompts")
    try:
        return [loaded.chat(message) for message in messages]
    except ChatTemplateError as error:
        raise ScenarioError(f"{scenario._origin()}: prompts.chat is set, but {error}") from None


def calibrate_command(pair: ModelPair | PairInfo, k_max: int, method: str = "loop") -> str:
    """The command line that measures ``pair``'s latency model (by ``method``) into the cache
    ``calibrated`` reads."""
    parts = ["specrl calibrate"] + ([] if method == "loop" else [f"--method {method}"])
    if pair.name.startswith(EMBEDDED_PREFIX):
        preset = pair.name.removeprefix(EMBEDDED_PREFIX)
        parts += [] if preset == "small" else [f"--preset {preset}"]
    else:
        target, draft = pair.name.split("+", 1)
        parts += [f"--target {target}", f"--draft {draft}"]
    parts += [] if k_max == 8 else [f"--k-max {k_max}"]
    return " ".join(parts)


def scenario_calibration_prompts(scenario: Scenario, pair: ModelPair, count: int = 96) -> list[list[int]]:
    """``count`` prompts (token ids) drawn from the train split of ``scenario``'s domains: what a
    latency model over batch sizes is calibrated on."""
    sets = prompt_sets(scenario.with_overrides(split="train"), pair)
    domains = [domain for domain, weight in scenario.prompts.domains.items() if weight > 0]
    texts = [text for domain in domains for text in sets[domain]]
    picks = np.random.default_rng(0).integers(len(texts), size=count)
    return [pair.encode(texts[i]) for i in picks]
