"""Record the acceptance traces the trace-replay simulator replays (specrl/envs/recording.py).

For each scenario and prompt split it has prompts in, every prompt of its domains (up to
--prompts-per-domain) is decoded plainly by the target, then both models run teacher-forced over
the result. Traces are cached under $SPECRL_HOME/traces/<pair>/ (`specrl train` and `specrl
evaluate` collect what is missing on their own); --ship writes them into the package next to an
embedded pair's weights instead. Traces already shipped or cached are loaded, not recorded again.

    specrl collect                                  # every shipped scenario
    specrl collect --scenarios code code_t1 --split test
    specrl collect --preset small --ship             # what the package ships
    specrl collect --ray 10.0.0.5:6379 --ray-gpus 1  # sharded by prompt on a Ray cluster
    specrl collect --engine vllm --scenarios code_lookup --split test   # decoded inside vLLM

With --engine vllm the target decodes inside vLLM (specrl/vllm/collect.py): one engine serves a
scenario part's prompts together, specrl's proposer speculating (--controller) and recording every
step beside the traces (steps.jsonl: vLLM's prices, `specrl.latency.serving`; requests.jsonl;
agreement.json: the share of recorded steps that replay exactly on the traces). Their files are
keyed apart from specrl's engine's (a scenario's ``recorded_by: vllm`` reads them), and --engine is
a scenario's own by default.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from dataclasses import replace

from specrl.cli.ray import add_ray_arguments, pool_from_args
from specrl.names import SPLITS

HELP = "record the acceptance traces the simulator replays (cached)"
#: Scenarios whose traces are their parts' (collecting the parts collects them).
JOINED = {"mixed", "mixed_t1", "mixed_pool", "mixed_lookup"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", help="embedded pair instead of the scenario's (small, tiny)")
    parser.add_argument(
        "--scenarios", nargs="+", help="scenario names or YAML paths (default: every shipped one)"
    )
    parser.add_argument(
        "--split",
        choices=(*SPLITS, "all"),
        default="all",
        help="prompt split to record (default: every split the scenario has prompts in)",
    )
    parser.add_argument("--prompts-per-domain", type=int, help="default: 24 train, 8 validation, 8 test")
    parser.add_argument("--seed", type=int, default=0, help="seed of the episodes (sampling, shift prompts)")
    parser.add_argument(
        "--ship", action="store_true", help="write into the package next to the embedded pair"
    )
    parser.add_argument(
        "--engine",
        choices=("specrl", "vllm"),
        help="what decodes the prompts: specrl's own engine, or vLLM with specrl's proposer recording "
        "(default: the scenarios' recorded_by; vllm keys the traces as vLLM's)",
    )
    vllm = parser.add_argument_group("--engine vllm")
    vllm.add_argument("--controller", default="tcp", help="what specrl's proposer runs in vLLM (default tcp)")
    vllm.add_argument(
        "--record-folder", help="where vLLM's recordings go (default: beside the trace files, <file>.vllm/)"
    )
    vllm.add_argument("--max-num-seqs", type=int, default=16, help="vLLM's most rows in a step (default 16)")
    add_ray_arguments(parser)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.prompts_per_domain is not None and args.prompts_per_domain < 1:
        parser.error(f"--prompts-per-domain must be >= 1, got {args.prompts_per_domain}")
    from specrl.envs import ScenarioError, load_scenario, shipped_scenarios
    from specrl.envs.recording import recording_with

    names = args.scenarios or [n for n in shipped_scenarios() if n not in JOINED]
    try:
        scenarios = [load_scenario(name).with_overrides(preset=args.preset) for name in names]
    except ScenarioError as error:
        parser.error(str(error))
    scenarios = with_engine(scenarios, args, parser)
    if args.engine == "vllm":
        with recording_with(vllm_collector(args, parser)):
            collect(scenarios, args)
        return 0
    pool = pool_from_args(args, scenarios[0].pair)
    with recording_with(pool.collector()) if pool else contextlib.nullcontext():
        collect(scenarios, args)
    if pool is not None:
        pool.close()
    return 0


def with_engine(scenarios: list, args: argparse.Namespace, parser: argparse.ArgumentParser) -> list:
    """The scenarios as ``args.engine`` records them, which it sets: given, or the scenarios' own
    ``recorded_by`` (without ``--scenarios``, those of specrl's engine). ``--engine vllm`` keys any
    scenario's traces as vLLM's; ``--engine specrl`` cannot record a scenario of vLLM's traces."""
    engines = {scenario.recorded_by for scenario in scenarios}
    if args.engine is None:
        if not args.scenarios:
            args.engine = "specrl"
            return [scenario for scenario in scenarios if scenario.recorded_by == "specrl"]
        if len(engines) > 1:
            parser.error(f"the scenarios are recorded by {sorted(engines)}: collect each engine's apart")
        (args.engine,) = engines
    if args.engine == "specrl" and engines != {"specrl"}:
        wrong = [scenario.name for scenario in scenarios if scenario.recorded_by != "specrl"]
        parser.error(f"scenarios {wrong} record their traces through vLLM: use --engine vllm")
    return [replace(scenario, recorded_by=args.engine) for scenario in scenarios]


def vllm_collector(args: argparse.Namespace, parser: argparse.ArgumentParser):
    """The collector that records through vLLM, after checking vLLM is there and the options fit."""
    if args.ray is not None:
        parser.error("--engine vllm records in this process; leave out --ray")
    if args.max_num_seqs < 1:
        parser.error(f"--max-num-seqs must be >= 1, got {args.max_num_seqs}")
    from specrl.vllm.compat import require_vllm

    try:
        require_vllm()
    except (ImportError, RuntimeError) as error:
        parser.error(str(error))
    from specrl.vllm.collect import VLLMCollector

    return VLLMCollector(args.controller, args.max_num_seqs, args.record_folder)


def collect(scenarios: list, args: argparse.Namespace) -> None:
    """Each scenario's traces of the splits asked for: loaded, or recorded and saved."""
    from specrl.envs.recording import cached_traces
    from specrl.envs.trace_store import DEFAULT_PROMPTS_PER_DOMAIN, cache_key, cache_parts, trace_dirs

    pair = None
    for scenario in scenarios:
        name = scenario.name
        # With Ray the pair is loaded by the workers only: here its name keys the files.
        pair = pair or (scenario.pair.load() if args.ray is None else scenario.pair.info())
        for split in SPLITS if args.split == "all" else (args.split,):
            if args.split == "all" and not has_prompts(scenario, split, pair):
                print(f"{name:>18} {split:>10}: no prompts in this split, skipped")
                continue
            start = time.perf_counter()
            traces = cached_traces(
                scenario, split, pair, prompts_per_domain=args.prompts_per_domain, seed=args.seed
            )
            if args.ship:
                n = args.prompts_per_domain or DEFAULT_PROMPTS_PER_DOMAIN[split]
                for part in cache_parts(scenario):
                    part_traces = cached_traces(part, split, pair, prompts_per_domain=n, seed=args.seed)
                    part_traces.save(trace_dirs(pair)[0] / (cache_key(part, split, n, args.seed) + ".npz"))
            tokens = sum(t.tokens for t in traces.traces)
            print(
                f"{name:>18} {split:>10}: {len(traces)} traces, {tokens} tokens "
                f"({time.perf_counter() - start:.0f} s)"
            )
            if args.engine == "vllm":  # each part's own recording (the joined set keeps the first's)
                for part in cache_parts(scenario):
                    part_traces = cached_traces(
                        part, split, pair, prompts_per_domain=args.prompts_per_domain, seed=args.seed
                    )
                    print(f"{part.name:>18} {split:>10}: {vllm_line(part_traces)}")


def vllm_line(traces) -> str:
    """Where vLLM recorded a trace set and how much of it replays exactly, or why it was not."""
    served = traces.meta.get("vllm")
    if served is None:
        return f"loaded, not recorded through vLLM ({traces.source}): delete it to record it through vLLM"
    agreement = served["replay_agreement"]
    share = "-" if agreement["share"] is None else f"{agreement['share']:.1%}"
    return (
        f"vLLM recording in {served['recording']}; {agreement['agree']}/{agreement['steps']} recorded "
        f"steps replay exactly ({share})"
    )


def has_prompts(scenario, split: str, pair) -> bool:
    """Whether every domain of ``scenario`` has prompts in ``split``."""
    from specrl.envs import ScenarioError

    try:
        scenario.with_overrides(split=split).prompt_sets(pair)
    except ScenarioError:
        return False
    return True
