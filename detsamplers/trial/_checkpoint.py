"""Checkpoint folders: atomic writes, the newest complete one, and loading them.

NOTE [ checkpoint layout ]
``checkpoint_dir/batch-000120/`` holds

- ``state-dict.pth``: ``models_state_dict``, ``optimizers_state_dict``,
  ``lr_schedulers_state_dict``, ``callbacks`` and ``scalers_state_dict`` (rank 0's;
  models unwrapped from DDP so that they load on any world size);
- ``rank-0.pth`` … ``rank-{W-1}.pth``: each rank's RNG states, its loader state and,
  between two steps of gradient aggregation, its accumulated gradients;
- ``metadata.json``, written last: the format version, batches trained, samples trained
  (also as ``records_consumed``), global batch size, world size, seed, dataset length,
  data seed, the rank-0 chain fingerprint and digest, a digest of the samples trained
  free of world size and batch size, the batch-size schedule as given and as realized
  (``batch_segments``), the epoch of the next batch and its first sample
  (NOTE [ batch size schedule ], NOTE [ epoch length ]), the dataset's growth history
  (``dataset_growth``, NOTE [ trial growth ]), the hparams and the file list.

A folder is written as ``.batch-000120.tmp`` (every rank writes and fsyncs its file, then
a barrier), renamed into place by rank 0, and completed by writing ``metadata.json``
through a temporary file, fsync and ``os.replace``. :func:`find_latest_checkpoint` only
returns folders whose metadata parses and whose files exist, so a crash at any point
leaves the previous checkpoint as the newest complete one. The checkpoint directory must
be shared by the ranks (one node, or a shared filesystem).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from typing import Any

import torch
from torch import nn

from .._errors import ReproducibilityError
from ._amp import unwrap_scaler
from ._callbacks import Callback
from ._clock import Clock
from ._context import TrialContext
from ._distributed import DistributedContext
from ._rng import seed_all
from ._schedule import BatchSchedule
from ._trial import Trial

__all__ = [
    "FORMAT_VERSION",
    "check_resume",
    "find_latest_checkpoint",
    "load_rank_state",
    "load_trial_from_checkpoint_path",
    "read_metadata",
    "restore_state",
    "samples_trained",
    "save",
]

FORMAT_VERSION = 1
METADATA = "metadata.json"
STATE = "state-dict.pth"
_FOLDER = re.compile(r"^batch-(\d+)$")
_REQUIRED = (
    "format_version",
    "batches_trained",
    "global_batch_size",
    "world_size",
    "seed",
    "files",
)


def rank_file(rank: int) -> str:
    """The name of rank ``rank``'s file in a checkpoint folder."""
    return f"rank-{rank}.pth"


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_torch(obj: Any, path: str) -> None:
    with open(path, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


def _write_json(obj: Any, path: str) -> None:
    temporary = path + ".tmp"
    with open(temporary, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)
    _fsync_dir(os.path.dirname(path))


def _unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def state_dict(context: TrialContext, callbacks: dict[str, Callback]) -> dict[str, Any]:
    """What ``state-dict.pth`` holds (NOTE [ checkpoint layout ])."""
    state = {
        "models_state_dict": [_unwrap(m).state_dict() for m in context.models],
        "optimizers_state_dict": [o.state_dict() for o in context.optimizers],
        "lr_schedulers_state_dict": [s.state_dict() for s in context.lr_schedulers],
        "callbacks": {name: cb.state_dict() for name, cb in callbacks.items()},
    }
    if context.scalers:
        state["scalers_state_dict"] = [unwrap_scaler(s).state_dict() for s in context.scalers]
    return state


def save(
    checkpoint_dir: str,
    context: TrialContext,
    callbacks: dict[str, Callback],
    metadata: dict[str, Any],
    rank_state: dict[str, Any],
) -> str:
    """Write a checkpoint folder atomically (a collective: every rank calls it)."""
    dist = context.distributed
    name = f"batch-{metadata['batches_trained']:06d}"
    final = os.path.join(checkpoint_dir, name)
    temporary = os.path.join(checkpoint_dir, f".{name}.tmp")
    if dist.is_chief:
        os.makedirs(checkpoint_dir, exist_ok=True)
        shutil.rmtree(temporary, ignore_errors=True)
        os.makedirs(temporary)
    dist.barrier()
    _write_torch(rank_state, os.path.join(temporary, rank_file(dist.get_rank())))
    if dist.is_chief:
        state = state_dict(context, callbacks)
        for callback in callbacks.values():  # NOTE [ callback ranks ]: rank 0 only
            callback.on_checkpoint_save_start(state)
        _write_torch(state, os.path.join(temporary, STATE))
    dist.barrier()
    if dist.is_chief:
        _fsync_dir(temporary)
        aside = os.path.join(checkpoint_dir, f".{name}.old")
        if os.path.exists(final):  # never overwritten in place: moved aside until complete
            shutil.rmtree(aside, ignore_errors=True)
            os.rename(final, aside)
        os.rename(temporary, final)
        _fsync_dir(checkpoint_dir)
        files = sorted([STATE, *(rank_file(r) for r in range(dist.get_size()))])
        _write_json({**metadata, "files": files}, os.path.join(final, METADATA))
        shutil.rmtree(aside, ignore_errors=True)
    dist.barrier()
    return final


def read_metadata(path: str) -> dict[str, Any] | None:
    """The metadata of a complete checkpoint folder, or None if it is not complete."""
    try:
        with open(os.path.join(path, METADATA)) as f:
            metadata = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(metadata, dict) or any(key not in metadata for key in _REQUIRED):
        return None
    if metadata["format_version"] != FORMAT_VERSION:
        return None
    if not all(os.path.isfile(os.path.join(path, name)) for name in metadata["files"]):
        return None
    return metadata


def find_latest_checkpoint(checkpoint_dir: str) -> str | None:
    """The newest complete checkpoint folder under ``checkpoint_dir``, or None.

    A folder counts once its ``metadata.json`` is written and names files that exist
    (NOTE [ checkpoint layout ]); half-written folders are passed over.

    Examples:
        >>> import tempfile
        >>> find_latest_checkpoint(tempfile.mkdtemp()) is None
        True
    """
    if not os.path.isdir(checkpoint_dir):
        return None
    found: list[tuple[int, str]] = []
    for name in os.listdir(checkpoint_dir):
        match = _FOLDER.match(name)
        path = os.path.join(checkpoint_dir, name)
        if match and read_metadata(path) is not None:
            found.append((int(match.group(1)), path))
    return max(found)[1] if found else None


def samples_trained(metadata: dict[str, Any]) -> int:
    """The samples a checkpoint's run trained (all ranks' records).

    Examples:
        >>> samples_trained({"batches_trained": 3, "global_batch_size": 8})
        24
        >>> samples_trained({"samples_trained": 40, "batches_trained": 3})
        40
    """
    if "samples_trained" in metadata:
        return int(metadata["samples_trained"])
    return int(metadata["batches_trained"]) * int(metadata["global_batch_size"])


def check_resume(path: str, saved: dict[str, Any], here: dict[str, Any]) -> None:
    """Refuse a resume whose data-defining fields differ from the checkpoint's.

    NOTE [ changed global batch size ]
    A changed global batch size is accepted over a ``detsamplers.loader.DataLoader`` or a
    ``WebDatasetSource``: the data continues at the sample the checkpoint reached
    (NOTE [ trial data ]), and the counts stay exact in batches and in samples
    (NOTE [ epoch length ]). What the batches trained so far mean for the model (optimizer
    steps of the old size, the learning-rate schedule in steps) is the trial's to adapt;
    the data never repeats or skips a record. Over a loader the trial skips itself, the
    caller passes the global batch size among the refused fields.

    Examples:
        >>> check_resume("ckpt", {"seed": 1}, {"seed": 2})
        Traceback (most recent call last):
        ...
        detsamplers.ReproducibilityError: cannot resume from ckpt: seed is 1 in the checkpoint but 2 here; resuming would train on other data than the uninterrupted run. Set seed=1 as saved, or start a fresh run in another checkpoint_dir.
    """  # noqa: E501
    for field, value in here.items():
        if field in saved and saved[field] != value:
            raise ReproducibilityError(
                f"cannot resume from {path}: {field} is {saved[field]!r} in the checkpoint but "
                f"{value!r} here; resuming would train on other data than the uninterrupted "
                f"run. Set {field}={saved[field]!r} as saved, or start a fresh run in another "
                "checkpoint_dir."
            )


def load_rank_state(path: str, rank: int) -> dict[str, Any]:
    """Rank ``rank``'s RNG and loader state (tensors and lists: ``weights_only=True``)."""
    state: dict[str, Any] = torch.load(os.path.join(path, rank_file(rank)), weights_only=True)
    return state


def restore_state(path: str, context: TrialContext, callbacks: dict[str, Callback]) -> None:
    """Load ``state-dict.pth`` into the wrapped models, optimizers, schedulers and callbacks.

    It is read with ``weights_only=False`` because callbacks may save any picklable
    state; only folders this module completed are read.
    """
    state = torch.load(os.path.join(path, STATE), map_location=context.device, weights_only=False)
    for callback in callbacks.values():
        callback.on_checkpoint_load_start(state)
    pairs: list[tuple[str, list[Any], list[Any]]] = [
        ("models", context.models, state["models_state_dict"]),
        ("optimizers", context.optimizers, state["optimizers_state_dict"]),
        ("lr_schedulers", context.lr_schedulers, state["lr_schedulers_state_dict"]),
    ]
    for kind, objects, saved in pairs:
        if len(objects) != len(saved):
            raise ValueError(
                f"the trial should wrap as many {kind} as the checkpoint holds, but it wraps "
                f"{len(objects)} and {path} holds {len(saved)}"
            )
    for model, saved_model in zip(context.models, state["models_state_dict"], strict=True):
        _unwrap(model).load_state_dict(saved_model)
    for optimizer, saved_opt in zip(
        context.optimizers, state["optimizers_state_dict"], strict=True
    ):
        optimizer.load_state_dict(saved_opt)
    for scheduler, saved_lr in zip(
        context.lr_schedulers, state["lr_schedulers_state_dict"], strict=True
    ):
        scheduler.load_state_dict(saved_lr)
    saved_scalers = state.get("scalers_state_dict", [])
    if len(saved_scalers) != len(context.scalers):
        raise ValueError(
            f"the trial should wrap as many gradient scalers as the checkpoint holds, but it "
            f"wraps {len(context.scalers)} and {path} holds {len(saved_scalers)}"
        )
    for scaler, saved_scaler in zip(context.scalers, saved_scalers, strict=True):
        unwrap_scaler(scaler).load_state_dict(saved_scaler)
    for name, callback in callbacks.items():
        if name in state["callbacks"]:
            callback.load_state_dict(state["callbacks"][name])


def load_trial_from_checkpoint_path(
    path: str, trial_class: type[Trial], trial_kwargs: dict[str, Any] | None = None
) -> Trial:
    """Build ``trial_class`` in a single process and load a checkpoint's state into it.

    The context gets the checkpoint's hparams and seed; the models, optimizers,
    schedulers and callbacks the trial wraps get the saved state.

    Raises:
        ValueError: ``path`` is not a complete checkpoint folder.

    Examples:
        >>> import tempfile
        >>> from detsamplers.trial import Batch, Trainer, init
        >>> from detsamplers.trial._demo_trial import DemoTrial
        >>> hparams = {"global_batch_size": 8, "lr": 0.1, "records": 32, "num_workers": 0}
        >>> folder = tempfile.mkdtemp()
        >>> with init(hparams=hparams) as context:
        ...     trained = DemoTrial(context)
        ...     Trainer(trained, context).fit(Batch(2), checkpoint_dir=folder)
        [batch 2] training: accuracy=... loss=...
        >>> loaded = load_trial_from_checkpoint_path(find_latest_checkpoint(folder), DemoTrial)
        >>> all(torch.equal(a, b) for a, b in zip(loaded.model.parameters(),
        ...                                       trained.model.parameters()))
        True
    """
    metadata = read_metadata(path)
    if metadata is None:
        raise ValueError(
            f"path should be a complete checkpoint folder with {METADATA}, but got {path!r}; "
            "find one with find_latest_checkpoint(checkpoint_dir)"
        )
    context = TrialContext(metadata.get("hparams") or {}, metadata["seed"], DistributedContext())
    context._inferred_global_batch = int(metadata["global_batch_size"])
    # The size the checkpoint would continue with (NOTE [ batch size schedule ]).
    schedule = BatchSchedule(int(metadata["global_batch_size"]))
    context._clock = Clock.restore(schedule, 1, None, samples_trained(metadata))
    seed_all(context.seed, "init")
    trial = trial_class(context, **(trial_kwargs or {}))
    restore_state(path, context, trial.build_callbacks())
    return trial
