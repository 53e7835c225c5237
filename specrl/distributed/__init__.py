"""Scale-out on Ray: trace collection and real-loop evaluation sharded by prompt across workers.

- :mod:`~specrl.distributed.cluster`: connecting to Ray (a local instance, or a cluster's
  address, refused within seconds when nothing answers); :class:`RayError`.
- :mod:`~specrl.distributed.workers`: :class:`RayPool`, one worker actor per share of the
  prompts, each loading the pair once; a shard whose worker dies is retried once on a fresh
  worker, then the run fails naming the prompts lost.

Ray is an optional dependency (``pip install 'specrl[ray]'``); nothing here imports it until a
pool is made.
"""

from specrl.distributed.cluster import RayError, WorkerLost, connect
from specrl.distributed.workers import RayPool, shards

__all__ = ["RayError", "RayPool", "WorkerLost", "connect", "shards"]
