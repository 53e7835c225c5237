"""PPO training on the trace-replay simulator and the report of a trained policy (docs/design.md
section 4b): :func:`specrl.train.train` reads top to bottom with :mod:`~specrl.training.options`
(what a run is asked), :mod:`~specrl.training.inputs` (what it trains on),
:mod:`~specrl.training.ppo_run` (one run to its best checkpoint, with the envs of
:mod:`~specrl.training.mix`, the callbacks and the warm start), :mod:`~specrl.training.selection`
(checkpoint selection on validation), :mod:`~specrl.training.run_folder` (the run folder and the
export) and :mod:`~specrl.training.comparison` (the report on test traces).
"""
