"""Scale-out on Ray (docs/design.md, "Scale-out on Ray"): trace collection and real-loop
evaluation sharded by prompt across workers that each load the pair once (:class:`RayPool`);
connecting to Ray (:func:`connect`). Ray is optional: nothing here imports it until a pool is made.
"""

from specrl.distributed.cluster import RayError, WorkerLost, connect
from specrl.distributed.workers import RayPool, shards

__all__ = ["RayError", "RayPool", "WorkerLost", "connect", "shards"]
