"""Connecting to Ray: a local instance, or an existing cluster, with errors that say what to do.

``ray.init`` waits about 20 s on an address where nothing answers, so :func:`connect` first opens a
TCP connection with a short timeout, then lets Ray try for :data:`CONNECT_SECONDS` only.
"""

from __future__ import annotations

import os
import socket
import threading
from typing import Any

from specrl.names import RAY_LOCAL as LOCAL  # connect() without an address: a local Ray instance

#: Seconds to wait for a TCP connection to a cluster's address.
PROBE_SECONDS = 3.0
#: Attempts (about a second each) Ray makes to reach a cluster's control service.
CONNECT_SECONDS = 3


class RayError(RuntimeError):
    """Ray is missing, or the cluster cannot be reached."""


class WorkerLost(RayError):
    """A worker died on the same shard twice; ``prompts`` names what was not done."""

    def __init__(self, message: str, prompts: list[str]) -> None:
        super().__init__(message)
        self.prompts = prompts


def import_ray() -> Any:
    try:
        import ray
    except ImportError as error:
        raise RayError(
            "--ray needs Ray, which is not installed: pip install 'specrl[ray]' (or pip install ray)"
        ) from error
    return ray


def probe(address: str, timeout: float = PROBE_SECONDS) -> None:
    """Raise :class:`RayError` unless ``host:port`` (or ``ray://host:port``) accepts a TCP
    connection within ``timeout`` seconds."""
    host_port = address.removeprefix("ray://")
    host, _, port = host_port.rpartition(":")
    if not host or not port.isdigit():
        raise RayError(
            f"Ray address {address!r} is not HOST:PORT or ray://HOST:PORT (e.g. 10.0.0.5:6379, the head "
            "node's GCS port; 'auto' finds a cluster started on this machine with `ray start --head`)"
        )
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as error:
        raise RayError(
            f"no Ray cluster answers at {address} ({error.__class__.__name__}: {error}, after at most "
            f"{timeout:g} s); start one with `ray start --head` on the head node, or check the address "
            "and the firewall"
        ) from error


def connect(address: str | None = LOCAL, *, num_cpus: int | None = None) -> Any:
    """Initialise Ray once in this process and return the ``ray`` module.

    Args:
        address: ``"local"`` or None starts a private instance on this machine (``num_cpus``
            CPUs, default all); ``"auto"`` joins the cluster started on this machine with
            ``ray start``; ``HOST:PORT`` or ``ray://HOST:PORT`` a remote one, probed first.
    """
    ray = import_ray()
    if ray.is_initialized():
        return ray
    if address in (None, LOCAL):
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a private instance: no token to hand out
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
        return ray
    if address != "auto":
        probe(address)
    os.environ.setdefault("RAY_NUM_REDIS_GET_RETRIES", str(CONNECT_SECONDS))
    # ray.init can block without end (a server that accepts and never answers): a daemon thread.
    outcome: list[BaseException | None] = []

    def join() -> None:
        try:
            ray.init(address=address, log_to_driver=False)
            outcome.append(None)
        except BaseException as error:  # handed to the caller below
            outcome.append(error)

    thread = threading.Thread(target=join, name="ray-connect", daemon=True)
    thread.start()
    thread.join(CONNECT_SECONDS + PROBE_SECONDS)
    error = outcome[0] if outcome else TimeoutError(f"no answer in {CONNECT_SECONDS + PROBE_SECONDS:g} s")
    if error is not None:
        raise RayError(
            f"could not join a Ray cluster at {address} within about {CONNECT_SECONDS} s ({error}); check "
            "that `ray status` on the head node lists it, or raise RAY_NUM_REDIS_GET_RETRIES for a slow head"
        ) from error
    return ray
