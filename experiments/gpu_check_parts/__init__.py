"""What ``experiments/gpu_check.py`` runs: one GPU, about six minutes, is specrl lossless there and
what does speculation buy on it. The script parses its flags and calls these in order:

- :mod:`.budgets`: every budget of a GPU run and of ``--smoke``, and the flags that override them;
- :mod:`.record`: the run's stages in order, each timed, and the JSON written after each;
- :mod:`.stages`: the stages that run in this process (environment, lossless, build, calibrate);
- :mod:`.script_stages`: the stages that run in a child process (``specrl train``, ``specrl
  evaluate``, ``bench_decode.py``);
- :mod:`.page`: the summary page, ``gpu_check.md``.

Only :mod:`.budgets` is imported before the flags are read, so that a bad flag is refused at once.
"""
