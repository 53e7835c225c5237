"""Names the ``specrl`` command offers as choices and the library defines itself by, in a module
that imports nothing, so that ``--help`` lists them before torch loads."""

SPLITS = ("train", "validation", "test")  # the prompt splits (specrl.embedded.corpus deals them)
CALIBRATION_METHODS = ("loop", "profile", "batch")  # how specrl.latency.calibrated() measures
RAY_LOCAL = "local"  # --ray without an address: a local Ray instance (specrl.distributed.cluster)
