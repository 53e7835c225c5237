"""What ``experiments/profiles.py`` runs: does a policy carry to a machine it never trained on?

- :mod:`.kept_runs`: ``specrl train`` once per arm and seed in a child process, its files kept;
- :mod:`.rows`: one scenario under one profile, the rules re-tuned there, every policy beside them;
- :mod:`.page`: the page of every profile side by side.
"""
