"""PPO training on the trace-replay simulator, and the report of a trained policy
(docs/design.md section 4b: train on train traces, select checkpoints on validation traces,
report on test traces once). ``specrl train`` (:func:`specrl.train.train`) reads top to
bottom with these:

- :mod:`~specrl.training.options`: what the run is asked to do (no heavy imports);
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
