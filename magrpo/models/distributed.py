"""Data-parallel training on torch.distributed: K processes (ranks), one step's items split among them.

    torchrun --nproc_per_node K -m magrpo.cli.train ...                       # one machine
    torchrun --nnodes N --node_rank R --master_addr HOST --nproc_per_node K -m magrpo.cli.train ...

Every rank holds a full copy of each agent (`hardware.strategy=ddp`) or a shard of it
(`hardware.strategy=fsdp`), samples and scores batch_size / K items of every step, and takes the
same optimizer step, so the copies never drift apart. What makes K ranks compute the update of
ONE process on the whole batch:
  * group statistics (baselines, group std) stay within an item, and an item's G samples stay on
    one rank;
  * loss normalisers are global: the sequence and token counts of AggContext are summed over the
    ranks, so each rank's loss is its share of the whole-batch loss ...
  * ... and the gradients are summed over the ranks (one all-reduce per optimizer step), which
    gives the whole-batch gradient exactly.
Rank 0 alone writes metrics.jsonl, summary.json, checkpoints and W&B; metrics are reduced over
the ranks first. A single process (no torchrun) is world size 1, and every function here is then
a no-op.

The backend is gloo on CPU (which makes all of this testable on one machine) and nccl on GPUs,
where rank r uses cuda:LOCAL_RANK. Under SLURM (the submitit launcher, one task per process) the
rank and the rendezvous address come from the SLURM environment.
"""

from __future__ import annotations

import datetime
import logging
import os
import signal
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, ValueType, get_model_state_dict
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.tensor import DTensor
from torch.nn.utils import get_total_norm

from magrpo.config.schemas import HardwareSchema

log = logging.getLogger(__name__)

STRATEGIES = ["ddp", "fsdp"]


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    backend: str | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1


_WORLD = World()


def world() -> World:
    return _WORLD


def _slurm_environment() -> None:
    """Fill torchrun's variables from SLURM's when a job step starts one task per process."""
    if "WORLD_SIZE" in os.environ or int(os.environ.get("SLURM_NTASKS", "1")) <= 1:
        return
    try:
        from submitit.helpers import TorchDistributedEnvironment  # noqa: PLC0415  optional: the slurm extra
    except ImportError:      # plain srun: the variables are simple to derive but the address is not
        raise RuntimeError("a multi-task SLURM job needs `pip install -e '.[slurm]'` (submitit) to find the "
                           "rendezvous address, or launch each node with torchrun") from None
    TorchDistributedEnvironment().export(set_cuda_visible_devices=False)


def init(hw: HardwareSchema) -> World:
    """Join the process group that torchrun (or SLURM) describes; world size 1 without one.

    `hw` is the hardware config: `strategy` (ddp | fsdp), `device` and `dist_timeout_s`.
    """
    global _WORLD
    _slurm_environment()
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        _WORLD = World()
        return _WORLD
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    cuda = str(hw.device).startswith("cuda") or (hw.device == "auto" and torch.cuda.is_available())
    backend = "nccl" if cuda else "gloo"
    if cuda:
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        timeout = datetime.timedelta(seconds=hw.dist_timeout_s)
        dist.init_process_group(backend, rank=rank, world_size=size, timeout=timeout)
    _WORLD = World(rank, size, local_rank, backend)
    # torchrun stops the other ranks with SIGTERM when one fails: unwind as an exception, so the
    # run is marked failed (summary.json) instead of left "running".
    signal.signal(signal.SIGTERM, _terminated)
    log.info("rank %d of %d (local rank %d, %s, strategy=%s)", rank, size, local_rank, backend,
             hw.strategy)
    return _WORLD


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


def shutdown() -> None:
    global _WORLD
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    _WORLD = World()


def _device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if _WORLD.backend == "nccl" else torch.device("cpu")


# --- collectives (no-ops in a single process) ----------------------------------------------------


def sum_floats(*values: float) -> list[float]:
    """Each value summed over the ranks (one all-reduce for all of them)."""
    if not _WORLD.distributed:
        return [float(v) for v in values]
    t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=_device())
    dist.all_reduce(t)
    return t.tolist()


def sum_tensor(t: torch.Tensor) -> torch.Tensor:
    """A tensor summed over the ranks (in place; returned for chaining)."""
    if _WORLD.distributed:
        if t.device.type == "cpu" and _WORLD.backend == "nccl":
            moved = t.to(_device())
            dist.all_reduce(moved)
            t.copy_(moved.cpu())
        else:
            dist.all_reduce(t)
    return t


def sum_dict(values: dict[str, float], skip: tuple[str, ...] = ()) -> dict[str, float]:
    """Values that are each rank's share of a whole-batch total, summed over the ranks."""
    keys = [k for k in values if k not in skip]
    summed = dict(zip(keys, sum_floats(*(values[k] for k in keys))))
    return {k: summed.get(k, v) for k, v in values.items()}


def mean_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """A step's metrics over the ranks: the mean of each (the ranks hold equal shares of the batch),
    except throughputs (`speed/*`), which add up. Every rank must log the same keys."""
    if not _WORLD.distributed:
        return metrics
    keys = sorted(k for k, v in metrics.items() if isinstance(v, (int, float)))
    sums = sum_floats(*(metrics[k] for k in keys))
    out = dict(metrics)
    for k, s in zip(keys, sums):
        out[k] = s if k.startswith("speed/") else s / _WORLD.size
    return out


def gather_cat(t: torch.Tensor) -> torch.Tensor:
    """Rank-ordered concatenation (dim 0) of a tensor whose shape matches on every rank."""
    if not _WORLD.distributed:
        return t
    src = t.to(_device())
    parts = [torch.empty_like(src) for _ in range(_WORLD.size)]
    dist.all_gather(parts, src)
    return torch.cat(parts).to(t.device)


def gather_objects(obj: Any) -> list[Any]:
    """[obj of rank 0, obj of rank 1, ...] on every rank."""
    if not _WORLD.distributed:
        return [obj]
    out: list[Any] = [None] * _WORLD.size
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj: Any) -> Any:
    """Rank 0's `obj` on every rank."""
    if not _WORLD.distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier() -> None:
    if _WORLD.distributed:
        dist.barrier()


def shard(n: int) -> slice:
    """This rank's contiguous block of n things (blocks in rank order; sizes differ by at most one)."""
    k, extra = divmod(n, _WORLD.size)
    lo = _WORLD.rank * k + min(_WORLD.rank, extra)
    return slice(lo, lo + k + (1 if _WORLD.rank < extra else 0))


# --- gradients and parameters --------------------------------------------------------------------

_BUCKET = 1 << 25           # elements per all-reduce (128 MB in float32)


def _is_sharded(p: torch.Tensor) -> bool:
    return isinstance(p, DTensor)


def sum_gradients(params: list[torch.nn.Parameter]) -> None:
    """Sum the gradients over the ranks (before clipping and the optimizer step).

    Each rank's loss is its share of the whole-batch loss, so the sum is the whole-batch gradient.
    Parameters sharded by FSDP are reduced by FSDP itself during backward.
    """
    if not _WORLD.distributed:
        return
    grads = [p.grad for p in params if p.grad is not None and not _is_sharded(p)]
    by_type: dict[tuple, list[torch.Tensor]] = {}
    for g in grads:
        by_type.setdefault((g.dtype, g.device), []).append(g)
    for group in by_type.values():
        start = 0
        while start < len(group):       # buckets of up to _BUCKET elements: one all-reduce each
            end, size = start, 0
            while end < len(group) and (end == start or size + group[end].numel() <= _BUCKET):
                size += group[end].numel()
                end += 1
            bucket = group[start:end]
            flat = sum_tensor(torch.cat([g.reshape(-1) for g in bucket]))
            for g, part in zip(bucket, flat.split([g.numel() for g in bucket])):
                g.copy_(part.view_as(g))
            start = end


def broadcast_module(module: torch.nn.Module) -> None:
    """Rank 0's parameters and buffers on every rank (identical starting weights)."""
    if not _WORLD.distributed:
        return
    for t in list(module.parameters()) + list(module.buffers()):
        if _is_sharded(t):
            continue
        with torch.no_grad():
            if _WORLD.backend == "nccl" and t.device.type == "cpu":
                moved = t.data.to(_device())
                dist.broadcast(moved, src=0)
                t.data.copy_(moved.cpu())
            else:
                dist.broadcast(t.data, src=0)


# --- fsdp: sharded parameters, gradients and optimizer state --------------------------------------


def _fsdp_modules(model: torch.nn.Module) -> list[FSDPModule]:
    return [m for m in model.modules() if isinstance(m, FSDPModule)]


def shard_model(model: torch.nn.Module) -> torch.nn.Module:
    """`hardware.strategy=fsdp`: shard a model's parameters over the ranks (FSDP2 `fully_shard`),
    one unit per transformer block plus the root (embeddings, final norm, head).

    Gradients are reduce-scattered in backward as SUMS (divide factor 1): each rank's loss is
    already its share of the whole-batch loss (AggContext.of). The optimizer built on the sharded
    parameters then keeps only its shard of the state.
    """
    get_base_model = getattr(model, "get_base_model", None)     # a peft model's base
    base = get_base_model() if get_base_model is not None else model
    block_names = set(getattr(base, "_no_split_modules", None) or [])
    blocks = [m for m in model.modules() if type(m).__name__ in block_names]
    if not blocks:
        raise ValueError(f"hardware.strategy=fsdp: found no transformer blocks in {type(base).__name__} "
                         f"(its _no_split_modules is empty); use hardware.strategy=ddp")
    for block in blocks:
        fully_shard(block)
    fully_shard(model)
    for m in _fsdp_modules(model):
        m.set_gradient_divide_factor(1.0)
        m.set_force_sum_reduction_for_comms(True)    # plain SUM (gloo has no pre-multiplied sum)
    return model


def is_sharded(model: torch.nn.Module) -> bool:
    return bool(_fsdp_modules(model))


class full_weights:
    """Inside: a sharded model keeps its parameters gathered across forwards (generation runs
    many small forwards; gathering each block at every token would dominate). Outside: resharded."""

    def __init__(self, model: torch.nn.Module):
        self.modules = _fsdp_modules(model) if _WORLD.distributed else []

    def __enter__(self):
        for m in self.modules:
            m.set_reshard_after_forward(False, recurse=False)
            m.unshard()

    def __exit__(self, *exc):
        for m in self.modules:
            m.reshard()
            m.set_reshard_after_forward(True, recurse=False)


def full_state_dict(model: torch.nn.Module) -> dict[str, ValueType] | None:
    """The whole (unsharded) state dict of a sharded model, on CPU, on rank 0 (a collective: every
    rank calls it); None for a model that is not sharded (its own state_dict serves)."""
    if not (_WORLD.distributed and is_sharded(model)):
        return None

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def grad_norm(params: list[torch.nn.Parameter]) -> torch.Tensor:
    """The L2 norm of all gradients, sharded (FSDP) and plain ones together."""
    sharded = [p.grad for p in params if p.grad is not None and _is_sharded(p)]
    plain = [p.grad for p in params if p.grad is not None and not _is_sharded(p)]
    sq = torch.zeros((), dtype=torch.float32)
    if sharded:
        norm = get_total_norm(sharded)         # a DTensor: each rank's shard's part of it
        sq = sq + (norm.full_tensor() if isinstance(norm, DTensor) else norm).float().cpu() ** 2
    if plain:
        sq = sq + get_total_norm(plain).float().cpu() ** 2
    return sq.sqrt()
