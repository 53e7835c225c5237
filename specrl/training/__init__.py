"""PPO training on the trace-replay simulator, and the report of a trained policy
(docs/design.md section 4b: train on train traces, select checkpoints on validation traces,
report on test traces once). ``experiments/train_ppo.py`` reads top to bottom with these:

- :mod:`~specrl.training.inputs`: what a run trains on (pair, latency, action space, traces);
- :mod:`~specrl.training.ppo_run`: one run, to the best checkpoint;
- :mod:`~specrl.training.mix`: the training envs as one VecEnv (the scenario mix);
- :mod:`~specrl.training.callbacks`: ``specdec/`` scalars, checkpoint selection, progress;
- :mod:`~specrl.training.selection`: the policy against TCP on validation traces;
- :mod:`~specrl.training.run_folder`: the run folder, ``run.json``, checkpoints, the export
  (``experiments/train_batch.py`` writes the same);
- :mod:`~specrl.training.comparison`: the policy against the bar on test traces (simulator).

Scoring on traces is :mod:`specrl.trace_evaluation`'s (re-exported here); the same bar in the
real loop is :mod:`specrl.evaluation.real_loop_check`'s (the evaluation harness's real loop).
"""

from specrl.trace_evaluation import episode_seed, evaluate_controller, evaluate_policy
from specrl.training.callbacks import (
    SpecdecMetrics,
    ValidationEvaluation,
    every,
    hyperparameter_table,
    tensorboard_writer,
)
from specrl.training.comparison import BAR_RULES, SimulatorRow, StaticSetting, comparison_ratios
from specrl.training.mix import ScenarioMix, envs_per_scenario
from specrl.training.run_folder import (
    BEST_MODEL,
    BEST_NORMALIZER,
    RUN_CONFIG,
    RUN_RECORD,
    export_best,
    file_record,
    load_best,
    new_run_dir,
    run_record,
    save_state,
    write_run_record,
)

__all__ = [
    "BAR_RULES",
    "BEST_MODEL",
    "BEST_NORMALIZER",
    "RUN_CONFIG",
    "RUN_RECORD",
    "ScenarioMix",
    "SimulatorRow",
    "SpecdecMetrics",
    "StaticSetting",
    "ValidationEvaluation",
    "comparison_ratios",
    "envs_per_scenario",
    "episode_seed",
    "evaluate_controller",
    "evaluate_policy",
    "every",
    "export_best",
    "file_record",
    "hyperparameter_table",
    "load_best",
    "new_run_dir",
    "run_record",
    "save_state",
    "tensorboard_writer",
    "write_run_record",
]
