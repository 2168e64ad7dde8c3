"""The Ray Data scan engine: decode in Ray tasks, run the models in Ray actors, write on the driver.

    shards to do ──from_items──> decode tasks ──map_batches──> model actors ──iter_rows──> driver
    (one row per shard: k, ids)  (`pipeline.shard_messages`:   (`forward.forward` +          (`rows.add_batch`,
                                  the local engine's batches)  `forward.batch_result`,        `rows.finish_shard`)
                                                               maps encoded as PNG)

Every image batch is the one the local engine would form (same shard, same size grouping), the
models and statistics are the same functions, and the driver writes the maps and Parquet shards
with the same writers as soon as every id of a shard has come back. So the score table, the maps
and resume are the local engine's, bit for bit; a scan killed mid-way (or a cluster that lost
its driver) resumes from the finished shards with either engine.

Models travel to the actors as their spec (`model.info["spec"]`, made absolute with
`models.absolute_spec`, loaded once per actor with `models.load_model`), or pickled when they
have no spec (models built in Python). The decode tasks read the pool through its source's own
picklable reader (`blindspots.data.sources`), on whichever node they run: a pool in object storage
needs no shared filesystem, only the store's credentials on the nodes; a local folder pool needs
the same path on every node. Every node needs blindspots and the model files at the same paths;
the out folder is only written by the driver. Model actors ask Ray for `gpus_per_actor` GPUs.

CPU requests are fractional (ACTOR_CPUS, DECODE_CPUS) so that on a node with one CPU an actor and
the decode tasks that feed it fit side by side (whole-CPU requests let the actors take every CPU,
and the decode tasks never start). They are also small enough that a cluster which loses a node
goes on: Ray restarts the lost actor on the nodes left (Ray Data's actors restart without limit)
and re-runs the lost decode tasks, which needs room for two actors and a decode task on one CPU
(2 x 0.4 + 0.2 <= 1). What was observed with other settings is in docs/benchmarks.md ("Why the
code is as it is").
"""
from __future__ import annotations

import logging
import math
import os
import pickle
import threading
import time
import warnings
from typing import Any, Iterator, Mapping

import numpy as np

from blindspots.allocator import keep_freed_memory
from blindspots.scan.engines.collect import ShardCollector
from blindspots.scan.engines.forward import batch_result, forward
from blindspots.scan.engines.job import ScanJob, on_gpu
from blindspots.scan.engines.local import run_local
from blindspots.scan.engines.pipeline import Batch, Errors, shard_messages
from blindspots.scan.maps import encode_maps
from blindspots.scan.plan import ShardPlan
from blindspots.models.spec_syntax import absolute_spec

# Lazy imports: torch (the scan, its Ray workers and the GPU image's model loader start without them); ray (optional:
# only the call that uses it needs it).

log = logging.getLogger(__name__)

ACTOR_CPUS = 0.4  # per model actor: room for decode tasks on a 1-CPU node, and for a restarted actor
DECODE_CPUS = 0.2  # per decode task (one shard each)
ACTORS_PER_DECODE_TASK = 2  # decoding costs a small share of the forwards: more decode tasks at once only
# start more worker processes, each importing ray.data while the actors import torch on the same cores
# DECODE_SCHEDULING: Ray's default placement (the driver's node first) instead of Ray Data's SPREAD, so
# that the decode tasks keep reusing the same worker processes (Ray stops idle workers beyond one per
# CPU, so tasks spread over nodes each start a new process that imports ray.data; docs/benchmarks.md)
CALLS_PER_ACTOR = 2  # concurrent calls per actor; the forwards still run one at a time (see ModelActor)
INSTALL_HINT = "pip install 'blindspots[ray]' (ray[data])"


def import_ray() -> Any:
    """The ray module; ValueError saying how to install it when it is missing."""
    try:
        import ray
        import ray.data  # noqa: F401 - the Data library is the part the engine needs
    except ImportError as e:
        raise ValueError(f"engine: expected ray[data] installed for engine='ray', got {type(e).__name__}: {e}; "
                         f"{INSTALL_HINT}") from None
    return ray


def model_refs(models: Mapping[str, Any], base_dir: str | None = None) -> dict[str, tuple[str, Any]]:
    """name -> ('spec', absolute spec) for models loaded from a spec, else ('object', model) (pickled)."""
    base = base_dir or os.getcwd()
    out: dict[str, tuple[str, Any]] = {}
    for name, m in models.items():
        spec = (getattr(m, "info", None) or {}).get("spec")
        out[name] = ("spec", absolute_spec(spec, base)) if isinstance(spec, str) else ("object", m)
    return out


def _decode(batch: dict[str, np.ndarray], pool: Any, batch_size: int,
            resize: tuple[int, int] | None) -> Iterator[dict[str, np.ndarray]]:
    """Decode task: one input row per shard (k, ids, run, pairs) -> one output row per message of
    `pipeline.shard_messages` (the local engine's batches), with the shard's plan (ids left out)."""
    for k, ids, run, pairs in zip(batch["k"], batch["ids"], batch["run"], batch["pairs"]):
        plan = ShardPlan(int(k), [str(i) for i in ids], True, [str(m) for m in run], [str(g) for g in pairs])
        head = ShardPlan(plan.k, [], True, plan.run, plan.pairs)
        for msg in shard_messages(pool, plan, batch_size, resize):
            if isinstance(msg, (Batch, Errors)):
                yield {"item": _pack([(head, msg)])}


def _pack(items: list[Any]) -> np.ndarray:
    """Python objects -> a bytes column (pickle protocol 5: arrays copied once, no Arrow conversion)."""
    return np.array([pickle.dumps(x, protocol=5) for x in items], dtype=object)


def _unpack(column: Any) -> list[Any]:
    return [pickle.loads(x) for x in column]


class ModelActor:
    """Holds the models (loaded once per actor); per row, the forward and the statistics beside it.

    Ray Data runs CALLS_PER_ACTOR calls of one actor at once (threads), but the forwards one at a
    time (a lock), as the local engine runs them on its main thread: one call's statistics, PNG
    encoding and (un)pickling overlap the other's forward, so the actor's core stays on the models
    and the models' threads are never shared between two forwards."""

    def __init__(self, refs: dict[str, tuple[str, Any]], target: str, num_classes: int, save_maps: bool) -> None:
        from blindspots.models.load import load_model

        keep_freed_memory()  # the actor's process is ours: the forwards reuse freed memory (blindspots.allocator)
        self.models = {name: load_model(ref) if kind == "spec" else ref for name, (kind, ref) in refs.items()}
        self.pin = any(on_gpu(m) for m in self.models.values())  # models on this actor's GPU
        self.target, self.num_classes, self.save_maps = target, num_classes, save_maps
        self.lock = threading.Lock()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = []
        for head, msg in _unpack(batch["item"]):
            if isinstance(msg, Batch):
                if self.pin and msg.images is not None:  # pinned outside the lock: the transfer does not block
                    from blindspots.models.devices import pin_array

                    msg.images = pin_array(msg.images)
                with self.lock:
                    outputs, errors = forward(msg, head.run, self.models, self.num_classes)
                res = batch_result(msg, head, outputs, errors, self.target, self.num_classes)
                del outputs, msg  # the probabilities stay here; only statistics and maps travel
                if self.save_maps:
                    for mr in res.models.values():
                        mr.pngs = encode_maps(mr.argmax)
                if all(g in res.pairs for g in head.pairs):  # no pair left for the driver: only the PNGs go
                    for mr in res.models.values():
                        mr.argmax = mr.argmax[:0]  # e.g. 49 KB an image less to carry (3 maps of 128x128)
                out.append((head, res))
            else:
                out.append((head, msg))
        return {"item": _pack(out)}


def connect(ray: Any, address: str | None) -> bool:
    """Connect to `address` (or start a local Ray) unless connected already; True when we did."""
    if ray.is_initialized():
        if address is not None:
            log.warning("ray is already initialised in this process; ignoring address %r", address)
        return False
    ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    return True


def default_actors(ray: Any, gpus_per_actor: float | None = None) -> int:
    """One model actor per CPU of the cluster, or with gpus_per_actor as many as its GPUs hold (at least 1)."""
    resources = ray.cluster_resources()
    if gpus_per_actor:
        return max(1, int(resources.get("GPU", 0) // float(gpus_per_actor)))
    return max(1, int(resources.get("CPU", 1)))


def decode_tasks(n_actors: int) -> int:
    """Decode tasks at once for `n_actors` model actors (one per ACTORS_PER_DECODE_TASK, at least 1)."""
    return max(1, math.ceil(n_actors / ACTORS_PER_DECODE_TASK))


def run_ray(job: ScanJob, plans: list[ShardPlan], bar: Any, *, address: str | None = None,
            actors: int | None = None, gpus_per_actor: float | None = None) -> None:
    """Run the planned shards (plans with `todo`) on Ray: see the module docstring.

    address: a Ray cluster ("auto", "ray://host:10001", "host:6379"); None: the Ray this process
    is connected to, or a new local one. actors: model actors (default: one per cluster CPU, or with
    gpus_per_actor as many as the cluster's GPUs hold). gpus_per_actor: GPUs each actor asks for
    (`num_gpus`; Ray then shows it only its own GPU, on which the models load with device=auto).
    Shards that need no images (only pairs against saved maps) run on the local engine here.
    """
    plans = [p for p in plans if p.todo]
    mapless = [p for p in plans if not p.needs_images]
    plans = [p for p in plans if p.needs_images]
    if mapless:
        run_local(job, mapless, bar, prefetch=2)
    if not plans:
        return
    ray = import_ray()
    refs = model_refs(job.models)
    started = connect(ray, address)
    ctx = ray.data.DataContext.get_current()
    bars = ctx.enable_progress_bars
    ctx.enable_progress_bars = False  # the scan has its own tqdm bar
    try:
        gpus = float(ray.cluster_resources().get("GPU", 0))
        if gpus_per_actor and gpus < float(gpus_per_actor):  # Ray would wait for GPUs forever
            raise ValueError(f"gpus_per_actor: expected at most the GPUs of the Ray cluster ({gpus:g}), "
                             f"got {gpus_per_actor}")
        n_actors = int(actors) if actors else default_actors(ray, gpus_per_actor)
        if n_actors < 1:
            raise ValueError(f"actors: expected a positive integer, got {actors}")
        ds = ray.data.from_items(
            [{"k": p.k, "ids": p.ids, "run": p.run, "pairs": p.pairs} for p in plans],
            override_num_blocks=len(plans))
        with warnings.catch_warnings():
            # Ray >= 2.60 deprecates remote args passed as keywords; scheduling_strategy has no named
            # replacement yet (see DECODE_SCHEDULING), and the warning is about our call, not the user's
            warnings.filterwarnings("ignore", message=".*ray_remote_args.* is deprecated")
            ds = ds.map_batches(_decode, batch_size=1, batch_format="numpy", num_cpus=DECODE_CPUS,
                                compute=ray.data.TaskPoolStrategy(size=decode_tasks(n_actors)),
                                scheduling_strategy="DEFAULT",  # see DECODE_SCHEDULING
                                fn_kwargs={"pool": job.pool, "batch_size": job.batch_size, "resize": job.resize})
        gpus = {"num_gpus": float(gpus_per_actor)} if gpus_per_actor else {}
        ds = ds.map_batches(ModelActor, batch_size=1, batch_format="numpy", num_cpus=ACTOR_CPUS, **gpus,
                            compute=ray.data.ActorPoolStrategy(size=n_actors,
                                                               max_concurrent_calls_per_actor=CALLS_PER_ACTOR,
                                                               enable_true_multi_threading=True),
                            fn_constructor_kwargs={"refs": refs, "target": job.target,
                                                   "num_classes": job.num_classes, "save_maps": job.save_maps})
        _drain(ds, ShardCollector(job, plans), bar)
    finally:
        ctx.enable_progress_bars = bars
        if started:
            ray.shutdown()


def _drain(ds: Any, collector: ShardCollector, bar: Any) -> None:
    """Driver: feed the actors' results to the collector, which writes each shard on this thread once
    all its ids are back (and holds shards back, as in the local engine, while a model has failed on
    every image so far)."""
    plans = collector.plans
    seen: dict[int, int] = {}
    t0 = time.perf_counter()
    first: float | None = None
    for row in ds.iter_rows():
        if first is None:
            first = time.perf_counter()
        _, item = pickle.loads(row["item"])
        plan = plans[item.k]
        if isinstance(item, Errors):
            collector.errors(item)
            n = len(item.items)
        else:
            collector.batch(plan.k, {m: len(r.ids) for m, r in item.models.items()}, item.errors,
                            lambda item=item: item)
            n = len(item.ids)
        bar.update(n)
        seen[plan.k] = seen.get(plan.k, 0) + n
        if seen[plan.k] == len(plan.ids):
            collector.end_shard(plan.k)
    collector.close()
    end = time.perf_counter()
    if first is not None:  # start-up (actor processes importing torch, loading models) vs the rest
        log.info("ray scan: first result after %.2f s, then %d images in %.2f s",
                 first - t0, sum(seen.values()), end - first)
    missing = [k for k, p in plans.items() if seen.get(k, 0) < len(p.ids)]
    if missing:
        raise RuntimeError(f"scan: the Ray pipeline ended without every row of shards {missing[:5]}")
