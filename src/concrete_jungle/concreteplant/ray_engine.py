"""ConcretePlant on Ray Data (``concreteplant.engine: ray``; paper Sec. 2.2's generation at cluster scale).

The unit of work is the local engine's: a shard of ``concreteplant.shard_size`` consecutive anchors, whose keyword
draw, rewrites and negative images are seeded by (seed, dataset, shard) and by each anchor (pipeline.py). The shards
a process still lacks, of every dataset of the stage, are the rows of one Ray Data pipeline::

    from_items([{"job": dataset, "k": shard}, ...])
        -> map_batches(ShardWorker, concurrency=ray.workers, batch_size=1)

``ShardWorker`` is a callable class, so each actor of the pool loads, once a dataset, its rewriter (lexical;
transformers; a vLLM replica with ``gpus_per_worker`` GPUs) and its image-negative backend (scene re-render,
retrieval, SDXL-Turbo), then turns shards into ``shard-<k>.jsonl`` + ``shard-<k>.stats.json`` in the shared work folder, atomically,
as the local engine does. The driver merges them afterwards exactly as the local engine does, so the ConcreteBatch
and its per-reason counts are byte-identical whatever the engine and the number of workers (tests assert it).

Faults. A worker process that dies is restarted by Ray (``max_restarts``) and its shard re-run; a shard whose
generation raises is reported, not dropped, and run again in a further pass, up to ``ray.max_retries`` passes; what
then still fails stops the stage with every failed shard named and the reasons counted. Finished shards stay in the
work folder (not a DVC output), so a re-run after a crash, a preempted node or a killed driver generates only what
is missing. A cluster that cannot be reached fails within ``ray.connect_timeout_s`` naming the address it tried.

Where the workers run: on a laptop (no address, no ``RAY_ADDRESS``) a local Ray with ``ray.num_cpus`` cores is
started and shut down again; on a cluster every node needs this environment (the same requirements.txt and an
install of this package) and the work folder on a shared filesystem at the same path.
"""

from __future__ import annotations

import os
import socket
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = ["generate_shards", "connect", "check_reachable", "ray_address", "ShardWorker"]


def ray_address(value: str, key: str) -> str:
    """A Ray cluster address as ``concreteplant.ray`` takes it: ``auto`` or ``host:port`` (the head's GCS port,
    1-65535). ``ray://`` (Ray Client) is refused: it needs the ``ray[client]`` extra, which is not pinned.

    Raises:
        ValueError: naming ``key`` and the value.
    """
    if value == "auto":
        return value
    if "://" in value:
        raise ValueError(f"{key} {value!r}: give the head's host:port (Ray Client's ray:// needs ray[client], "
                         "which requirements.txt does not pin) or auto")
    try:
        parts = urlsplit(f"tcp://{value}")
        host, port = parts.hostname, parts.port
    except ValueError as err:
        raise ValueError(f"{key} {value!r} is not host:port ({err})") from None
    if not host or port is None or not 0 < port < 65536:
        raise ValueError(f"{key} {value!r} is not host:port with a port in 1-65535, nor auto")
    return value


def check_reachable(address: str, timeout_s: float) -> None:
    """Open (and close) a TCP connection to a Ray cluster's ``host:port`` within ``timeout_s``.

    ``auto`` is left to Ray (it resolves the node's own cluster from local files and fails at once without one).
    Only the TCP port is probed: a port that answers but is no Ray head (a dashboard's 8265, say) passes here and
    then makes ``ray.init`` retry for as long as Ray's own GCS timeouts allow.

    Raises:
        ConnectionError: naming ``address``, when nothing answers there in time.
        ValueError: ``address`` is not ``host:port`` or ``auto`` (:func:`ray_address`).
    """
    if ray_address(address, "concreteplant.ray.address / RAY_ADDRESS") == "auto":
        return
    parts = urlsplit(f"tcp://{address}")
    host, port = parts.hostname, parts.port
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as err:
        raise ConnectionError(f"cannot reach the Ray cluster at {address!r} (host {host}, port {port}) within "
                              f"{timeout_s:g} s (concreteplant.ray.address / RAY_ADDRESS): {err}") from err


def connect(cfg: Any) -> bool:
    """Join the cluster of ``cfg.address`` (else of ``RAY_ADDRESS``), or start a local Ray with ``cfg.num_cpus``.

    Args:
        cfg: ``RayEngineParams``.

    Returns:
        True if this call started or joined Ray (the caller shuts it down), False if Ray was already initialised.

    Raises:
        ConnectionError: the cluster cannot be reached (:func:`check_reachable`).
        ValueError: a local Ray too small for one worker (``cpus_per_worker`` / ``gpus_per_worker``); more workers
            than it holds at once just queue.
    """
    import ray

    if ray.is_initialized():
        return False
    address = cfg.address if cfg.address is not None else os.environ.get("RAY_ADDRESS") or None
    if address is not None:
        check_reachable(address, cfg.connect_timeout_s)
        ray.init(address=address)
    else:
        # address "local": a new Ray, even where one already runs on this node (which ray.init() would join)
        ray.init(address="local", num_cpus=cfg.num_cpus, include_dashboard=False)
        have = ray.cluster_resources()  # a local Ray never grows: a pool it cannot hold would wait for ever
        for what, need, key in (("cpus_per_worker", cfg.cpus_per_worker, "CPU"),
                                ("gpus_per_worker", cfg.gpus_per_worker, "GPU")):
            if need > have.get(key, 0):
                ray.shutdown()
                raise ValueError(f"concreteplant.ray.{what} = {need:g}, but the local Ray has {have.get(key, 0):g} "
                                 f"{key}s (concreteplant.ray.num_cpus = {cfg.num_cpus}); one worker would never start")
    return True


class ShardWorker:
    """One actor of the pool: a ConcretePlant generator (its rewriter and image backend) turning shards into shard
    files. It holds one generator at a time, for the dataset of the shard at hand: the rows come dataset after
    dataset, so an actor builds each dataset's at most once in a pass, and a GPU never holds two rewriters.

    Called with a batch ``{"job": job indices, "k": shard indices}``; returns ``{"job", "k", "status" ("done" |
    "failed"), "reason" ("" or the exception), "n_kept", "pid"}`` a shard. ``records`` (and ``candidates``) may be
    ``ObjectRef`` s, fetched once an actor.
    """

    def __init__(self, records: Any, jobs: Sequence[dict], cp: Any, world_cfg: Any, candidates: Any, cwd: str):
        import ray

        os.chdir(cwd)  # the work folders and the manifest's relative paths resolve as in the driver
        self.records = ray.get(records) if isinstance(records, ray.ObjectRef) else records
        self.candidates = ray.get(candidates) if isinstance(candidates, ray.ObjectRef) else candidates
        self.jobs, self.cp, self.world_cfg = jobs, cp, world_cfg
        self.generators: dict[int, Any] = {}
        self.n_written = 0

    def _generator(self, j: int):
        from concrete_jungle.concreteplant.pipeline import _Generator

        if j not in self.generators:
            for old in self.generators.values():  # free the previous dataset's backends (GPU memory) first
                old.close()
            self.generators.clear()
            import gc

            gc.collect()
            job = self.jobs[j]
            self.generators[j] = _Generator(self.records, job["dataset"], self.cp, self.world_cfg, Path(job["work"]),
                                            job["ds_seed"], self.candidates, progress=False)
        return self.generators[j]

    def __call__(self, batch: dict) -> dict:
        from concrete_jungle.concreteplant.pipeline import _maybe_fault, write_shard

        out: dict[str, list] = {"job": [], "k": [], "status": [], "reason": [], "n_kept": [], "pid": []}
        for j, k in zip(batch["job"], batch["k"]):
            j, k = int(j), int(k)
            s, e = self.jobs[j]["bounds"][k]
            work = Path(self.jobs[j]["work"])
            running = work / f"shard-{k:05d}.running"  # left behind if this process dies in the shard
            running.write_text(str(os.getpid()))
            try:
                gen = self._generator(j)
                rows, skipped = gen.shard(k, self.records[s:e], start=s)
                write_shard(work, k, e - s, rows, skipped, gen)
                status, reason, n_kept = "done", "", len(rows)
            except Exception as err:  # reported to the driver, which retries and then names it
                status, reason, n_kept = "failed", _reason(err), 0
            running.unlink(missing_ok=True)
            for key, value in zip(out, (j, k, status, reason, n_kept, os.getpid())):
                out[key].append(value)
            if status == "done":
                self.n_written += 1
                _maybe_fault(self.n_written)  # tests: a worker SIGKILLed right after its n-th shard
        return out


def generate_shards(jobs: Sequence[Any], records: list[dict], cp: Any, world_cfg: Any,
                    candidates: Sequence[list] | None = None) -> dict:
    """Generate the missing shards of every :class:`~concrete_jungle.concreteplant.pipeline.ShardJob` in ``jobs``
    (one a dataset) on one Ray Data actor pool.

    Args:
        jobs: the datasets' shard jobs (``todo``: the shards still missing in ``work``).
        records, candidates: the (cut) manifest records and their keyword candidates, as for the local engine
            (:func:`~concrete_jungle.concreteplant.pipeline.run_concreteplant`).
        cp: ConcretePlant params; ``cp.ray`` sets the pool.
        world_cfg: the scene world's config.

    Returns:
        ``{"passes", "workers" (distinct worker processes), "failed_attempts" ({reason: count} over every pass),
        "wall_s"}``.

    Raises:
        ConnectionError: the cluster cannot be reached.
        RuntimeError: shards still missing after ``cp.ray.max_retries`` further passes, each named (dataset and
            shard) with its last reason, and the reasons of every failed attempt counted.
    """
    import ray
    import ray.data

    from concrete_jungle.concreteplant.pipeline import FAULT_ENV

    cfg = cp.ray
    specs = [{"dataset": job.dataset, "ds_seed": job.ds_seed, "work": str(job.work),
              "bounds": [tuple(b) for b in job.bounds]} for job in jobs]
    for job in jobs:
        Path(job.work).mkdir(parents=True, exist_ok=True)
    _check_devices(cp)
    t0 = time.perf_counter()
    started = connect(cfg)
    failed_attempts: Counter = Counter()
    pids: set[int] = set()
    last_reason: dict[tuple[int, int], str] = {}
    killers: set[tuple[int, int]] = set()
    try:
        kwargs = {"records": ray.put(records), "jobs": specs, "cp": cp, "world_cfg": world_cfg,
                  "candidates": ray.put(candidates) if candidates is not None else None, "cwd": os.getcwd()}
        remote_args = {"max_restarts": cfg.max_retries, "max_task_retries": cfg.max_retries}
        if FAULT_ENV in os.environ:  # the resume tests' fault reaches the workers (whatever started them)
            remote_args["runtime_env"] = {"env_vars": {FAULT_ENV: os.environ[FAULT_ENV]}}
        ray.data.DataContext.get_current().enable_operator_progress_bars = False  # one bar: shards done
        pending, passes = [(j, int(k)) for j, job in enumerate(jobs) for k in job.todo], 0
        while pending:
            passes += 1
            ds = ray.data.from_items([{"job": j, "k": k} for j, k in pending], override_num_blocks=len(pending))
            ds = ds.map_batches(ShardWorker, fn_constructor_kwargs=kwargs, batch_size=1,
                                concurrency=min(cfg.workers, len(pending)), num_cpus=cfg.cpus_per_worker,
                                num_gpus=cfg.gpus_per_worker or None, **remote_args)
            try:
                for row in ds.iter_rows():
                    pids.add(int(row["pid"]))
                    if row["status"] != "done":
                        failed_attempts[row["reason"]] += 1
                        last_reason[int(row["job"]), int(row["k"])] = row["reason"]
            except Exception as err:  # the pool itself failed (a worker died past its restarts, a node was lost)
                reason = _reason(err)
                for j, k in pending:  # a shard whose marker is left was running when its worker died
                    marker = Path(specs[j]["work"]) / f"shard-{k:05d}.running"
                    if marker.exists() and not (Path(specs[j]["work"]) / f"shard-{k:05d}.stats.json").exists():
                        marker.unlink()
                        last_reason[j, k] = f"its worker died while generating it ({reason})"
                        failed_attempts[last_reason[j, k]] += 1
                        killers.add((j, k))
            pending = [(j, k) for j, k in pending
                       if not (Path(specs[j]["work"]) / f"shard-{k:05d}.stats.json").exists()]
            pending.sort(key=lambda jk: jk in killers)  # a shard that killed a worker goes last: the rest get done
            if pending and passes > cfg.max_retries:
                raise RuntimeError(_missing_message(pending, specs, last_reason, failed_attempts, passes))
    finally:
        if started:
            ray.shutdown()
    return {"passes": passes, "workers": len(pids), "failed_attempts": dict(failed_attempts),
            "wall_s": time.perf_counter() - t0}


def _reason(err: BaseException) -> str:
    """A countable reason for ``err``: its type and message, with a Ray wrapper's root cause (the last ``Error:``
    line of the traceback Ray embeds) instead of its first line, and without ANSI colours, pids and actor ids."""
    import re

    text = re.sub(r"\x1b\[[0-9;]*m", "", str(err))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    causes = [line for line in lines if re.match(r"^[A-Za-z_.]*(Error|Exception|Interrupt)\b.*:", line)]
    reason = causes[-1] if causes and type(err).__module__.startswith("ray") else (
        f"{type(err).__name__}: {lines[0] if lines else ''}")
    reason = re.sub(r"\((pid|ip|actor_id)=[^)]*\)|(pid|actor_id|ip)=[0-9a-f.]+,?", "", reason)
    return re.sub(r"\s+", " ", reason).strip()[:300]


def _missing_message(pending, specs, last_reason, failed_attempts, passes) -> str:
    """Every missing shard named (by dataset, with its last reason), and the reasons of every failed attempt."""
    by = {}
    for j, k in pending:
        by.setdefault((specs[j]["dataset"], last_reason.get((j, k), "not attempted: the pass's pool failed")),
                      []).append(k)
    named = "; ".join(f"{d} shard{'s' if len(ks) > 1 else ''} {', '.join(map(str, ks))} ({why})"
                      for (d, why), ks in by.items())
    return (f"concreteplant (engine ray): {len(pending)} shard(s) still missing after {passes} pass(es): {named}; "
            f"failed attempts by reason: {dict(failed_attempts)}. The finished shards are kept in "
            f"{', '.join(sorted({specs[j]['work'] for j, _ in pending}))}: re-run to generate the rest")


def _check_devices(cp: Any) -> None:
    """Refuse GPU backends on workers given no GPU: Ray hides the GPUs from an actor without ``num_gpus``, so
    ``device: auto`` would fall back to the CPU there (other numerics than the local engine's, and far slower).

    Raises:
        ValueError: naming the keys, when ``ray.gpus_per_worker`` is 0 and the rewriter is vLLM, or the llm
            rewriter or SDXL-Turbo would use CUDA on this machine.
    """
    if cp.ray.gpus_per_worker > 0:
        return
    wants = []
    if cp.rewriter.backend == "vllm":
        wants.append("concreteplant.rewriter.backend: vllm")
    cuda = None
    for key, on, device in (("concreteplant.rewriter.device", cp.rewriter.backend == "llm", cp.rewriter.device),
                            ("concreteplant.image_edit.device", cp.image_negatives == "sdxl_turbo",
                             cp.image_edit.device)):
        if on and device != "cpu":
            if cuda is None:
                import torch

                cuda = torch.cuda.is_available()
            if device != "auto" or cuda:
                wants.append(f"{key}: {device}")
    if wants:
        raise ValueError(f"concreteplant.ray.gpus_per_worker is 0, but {', '.join(wants)} needs a GPU in each "
                         "worker (Ray hides the GPUs from an actor given none): set gpus_per_worker, or the device "
                         "to cpu")
