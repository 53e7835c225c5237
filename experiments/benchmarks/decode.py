"""``experiments/bench_decode.py``'s configurations and runs: our engine (plain and static k)
against HF ``generate`` (plain, assisted at k, HF's own assisted defaults), every one producing
exactly ``max_new_tokens`` tokens from the same prompt ids, timed as one whole generate call.

The protocol, played by :func:`~specrl.evaluation.compare.compare`: one untimed warm-up of every
configuration on the first prompt, then per repeat and prompt every configuration in a seeded
random order (:func:`~specrl.evaluation.compare.shuffled`), prompt i sampling with seed + i.

In transformers 5.x the assisted-generation settings are read from the *assistant's*
``generation_config``, so each HF-assisted configuration owns a GenerationConfig that is swapped
onto the draft for its calls only (:mod:`specrl.hf_assisted`).
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm
from transformers import GenerationConfig

from benchmarks.prompts import prompt_texts
from specrl.controllers import StaticController
from specrl.engine import SpeculativeDecoder
from specrl.engine.timing import DeviceClock
from specrl.evaluation.compare import Player, Trial, compare, shuffled
from specrl.hf_assisted import ForwardCounter, assistant_config, hf_generate, resolved_assistant_settings
from specrl.models import ModelPair

#: How the runs were made, as bench.json records it.
METHOD = {
    "timing": "wall clock of the whole generate call incl. prefill, device-synchronised",
    "aggregate": "median over repeats of sum(tokens)/sum(seconds) over a domain's prompts",
    "order": "one untimed warm-up per configuration; then per repeat and prompt, all "
    "configurations in a seeded random order",
    "hf_assistant_settings": "set on a copy of the draft's generation_config, swapped onto "
    "the draft for that row's calls only (transformers 5.x reads "
    "them from the assistant, not from generate() kwargs)",
    "eos": "ours stop_at_eos=False, HF eos_token_id=None: every run emits max_new_tokens",
}


@dataclass
class Config:
    """One row of the table at one temperature."""

    key: str  # unique within a temperature, e.g. "ours-k3", "hf-assist-default"
    label: str
    engine: str  # "ours" or "hf"
    k: int  # ours: static k (0 = plain); hf: assistant tokens (0 = no assistant; -1 = HF default)
    temperature: float
    assistant: GenerationConfig | None = None  # hf rows with an assistant: its generation_config
    decoder: SpeculativeDecoder | None = None  # ours rows

    @property
    def name(self) -> str:
        """Unique over temperatures: the player's name in the comparison."""
        return f"{self.key} T={self.temperature:g}"


def build_configs(
    pair: ModelPair, k_values: Sequence[int], temperatures: Sequence[float], hf_defaults: bool = True
) -> list[Config]:
    """Per temperature: ours plain, HF plain, ours at every k, HF assisted at every k and, with
    ``hf_defaults``, HF assisted with the draft's own settings and with the "heuristic" schedule."""
    configs = []
    for t in temperatures:
        plain = SpeculativeDecoder(pair, StaticController(0))
        configs += [Config("ours-plain", "ours plain (k=0)", "ours", 0, t, decoder=plain)]
        configs += [Config("hf-plain", "HF generate", "hf", 0, t)]
        for k in k_values:
            decoder = SpeculativeDecoder(pair, StaticController(k, 0.0))
            configs.append(Config(f"ours-k{k}", f"ours k={k}", "ours", k, t, decoder=decoder))
        for k in k_values:
            gc = assistant_config(
                pair.draft.generation_config,
                num_assistant_tokens=k,
                num_assistant_tokens_schedule="constant",
                assistant_confidence_threshold=0.0,
            )
            configs.append(Config(f"hf-assist-k{k}", f"HF assist k={k}", "hf", k, t, assistant=gc))
        if hf_defaults:
            default = assistant_config(pair.draft.generation_config)
            label = "HF assist default ({num_assistant_tokens}, {num_assistant_tokens_schedule}, conf "
            label += "{assistant_confidence_threshold})"
            label = label.format(**resolved_assistant_settings(default))
            configs.append(Config("hf-assist-default", label, "hf", -1, t, assistant=default))
            heuristic = assistant_config(
                pair.draft.generation_config, num_assistant_tokens_schedule="heuristic"
            )
            label = (
                "HF assist heuristic (start {num_assistant_tokens}, conf {assistant_confidence_threshold})"
            )
            label = label.format(**resolved_assistant_settings(heuristic))
            configs.append(Config("hf-assist-heuristic", label, "hf", -1, t, assistant=heuristic))
    return configs


def heuristic_lengths(configs: Sequence[Config]) -> dict[str, int]:
    """The draft length HF's "heuristic" schedule had adapted to at the end, per temperature."""
    return {
        f"T={c.temperature:g}": c.assistant.num_assistant_tokens
        for c in configs
        if c.key == "hf-assist-heuristic" and c.assistant is not None
    }


@dataclass
class Prompt:
    domain: str
    index: int  # within its domain
    ids: list[int]
    seed: int
    truncated_from: int | None = None

    def describe(self) -> dict:
        """What bench.json records of the prompt (not its ids)."""
        return {"domain": self.domain, "index": self.index, "tokens": len(self.ids), "seed": self.seed,
                "truncated_from": self.truncated_from}  # fmt: skip


def select_prompts(
    pair: ModelPair,
    domains: Sequence[str],
    per_domain: int,
    max_new_tokens: int,
    k_max: int,
    seed: int,
    path: Path | None = None,
) -> list[Prompt]:
    """The first ``per_domain`` test prompts of each domain (from ``path`` if given), tokenized
    once; of a prompt too long for the generation, the tail that fits. Prompt i samples with
    ``seed + i``."""
    texts = prompt_texts(pair, path)
    room = pair.context_length - max_new_tokens - k_max - 2
    if room < 1:
        raise SystemExit(
            f"--max-new-tokens {max_new_tokens} leaves no room for a prompt in the "
            f"context window of {pair.context_length} tokens"
        )
    prompts = []
    for domain in domains:
        if not texts.get(domain):
            raise SystemExit(f"no prompts for domain {domain!r}; have {sorted(texts)}")
        for i, text in enumerate(texts[domain][:per_domain]):
            ids = pair.encode(text)
            truncated = len(ids) if len(ids) > room else None
            prompts.append(Prompt(domain, i, ids[-room:], seed + len(prompts), truncated))
    return prompts


def run_one(
    config: Config,
    prompt: Prompt,
    seed: int,
    pair: ModelPair,
    max_new_tokens: int,
    clock: DeviceClock,
    counter: ForwardCounter,
) -> dict:
    """One timed generate call (prefill included); returns its raw numbers and token ids."""
    counter.reset()
    extra: dict = {}
    if config.engine == "ours":
        assert config.decoder is not None
        start = clock.now()
        out = config.decoder.generate(
            prompt.ids,
            max_new_tokens=max_new_tokens,
            temperature=config.temperature,
            seed=seed,
            stop_at_eos=False,
        )
        seconds = clock.now() - start
        ids, stats = out.token_ids, out.stats
        extra = {key: getattr(stats, key) for key in ("steps", "proposed", "accepted", "prefill_seconds")}
        verifies = out.stats.steps
    else:
        run = hf_generate(
            pair, prompt.ids, max_new_tokens, config.temperature, seed, config.assistant, counter=counter
        )
        ids, seconds = run.ids, run.seconds
        verifies = counter.counts["target"]  # HF: prefill and first verification are one forward
    return {
        "new_tokens": len(ids),
        "seconds": seconds,
        "target_forwards": counter.counts["target"],
        "draft_forwards": counter.counts["draft"],
        "verifies": verifies,
        **extra,
        "ids": ids,
        "ids_sha1": hashlib.sha1(str(ids).encode()).hexdigest()[:12],
    }


def benchmark(
    configs: list[Config],
    prompts: list[Prompt],
    pair: ModelPair,
    max_new_tokens: int,
    repeats: int,
    seed: int,
) -> list[dict]:
    """Every configuration on every prompt, ``repeats`` times, after a warm-up; the records in run
    order, each marked with whether a greedy output equals ours plain's."""
    clock = DeviceClock(pair.device)
    by_name = {config.name: config for config in configs}
    total = len(configs) * (1 + repeats * len(prompts))
    with (
        ForwardCounter(pair) as counter,
        tqdm(total=total, desc="bench", unit="gen", dynamic_ncols=True) as bar,
    ):
        players: dict[str, Player[dict]] = {
            name: (lambda prompt, s, c=config: run_one(c, prompt, s, pair, max_new_tokens, clock, counter))
            for name, config in by_name.items()
        }

        def progress(trial: Trial[dict] | None) -> None:
            if trial is not None:
                bar.set_postfix_str(f"rep {trial.repeat + 1} {prompts[trial.episode].domain} {trial.player}")
            bar.update()

        trials = compare(players, prompts, repeats, order=shuffled(seed), warmup=1, on_trial=progress)
    records = []
    for trial in trials:
        config, prompt = by_name[trial.player], prompts[trial.episode]
        records.append({**trial.record, "config": config.key, "temperature": config.temperature,
                        "domain": prompt.domain, "prompt": prompt.index, "repeat": trial.repeat,
                        "prompt_number": trial.episode})  # fmt: skip
    mark_greedy_matches(records)
    warn_short(records, max_new_tokens)
    return records


def mark_greedy_matches(records: list[dict]) -> None:
    """Greedy records: whether each output equals ours plain's (its first greedy run) on the same
    prompt; every record's ids are dropped."""
    plain_ids: dict[int, list[int]] = {}
    for record in records:
        if record["config"] == "ours-plain" and record["temperature"] == 0:
            plain_ids.setdefault(record["prompt_number"], record["ids"])
    for record in records:
        ids, number = record.pop("ids"), record.pop("prompt_number")
        if record["temperature"] == 0:
            record["matches_plain"] = ids == plain_ids[number]


def warn_short(records: list[dict], max_new_tokens: int) -> None:
    """A warning naming the configurations of which a run emitted other than ``max_new_tokens``."""
    short = {r["config"] for r in records if r["new_tokens"] != max_new_tokens}
    if short:
        print(f"WARNING: not every run produced {max_new_tokens} tokens: {sorted(short)}", file=sys.stderr)
