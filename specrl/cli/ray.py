"""The ``--ray`` options of ``specrl collect`` and ``specrl evaluate``; Ray loads only when asked for."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from specrl.names import RAY_LOCAL

if TYPE_CHECKING:
    from specrl.distributed.workers import RayPool
    from specrl.envs.scenario import PairSpec


def add_ray_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Ray (pip install 'specrl[ray]')")
    group.add_argument(
        "--ray",
        nargs="?",
        const=RAY_LOCAL,
        default=None,
        metavar="ADDRESS",
        help="shard the work by prompt across Ray workers, each loading the pair once; without ADDRESS a "
        "local Ray instance on this machine, 'auto' the cluster `ray start` made here, or HOST:PORT",
    )
    group.add_argument(
        "--ray-workers",
        type=int,
        default=None,
        help="Ray workers (default: the cluster's CPUs / --ray-cpus, or its GPUs for a CUDA pair)",
    )
    group.add_argument(
        "--ray-cpus", type=float, default=1.0, help="CPUs per Ray worker, and torch threads in it (default 1)"
    )
    group.add_argument(
        "--ray-gpus",
        type=float,
        default=None,
        help="GPUs per Ray worker (default: 1 when the cluster has GPUs and the pair is not on the CPU)",
    )


def pool_from_args(args: argparse.Namespace, spec: PairSpec) -> RayPool | None:
    """The pool ``--ray`` asks for, or None without it."""
    if args.ray is None:
        return None
    from specrl.distributed.workers import RayPool

    pool = RayPool(
        spec,
        address=args.ray,
        workers=args.ray_workers,
        cpus_per_worker=args.ray_cpus,
        gpus_per_worker=args.ray_gpus,
    )
    print(f"specrl: {pool.workers} Ray workers ({args.ray})", file=sys.stderr)
    return pool
