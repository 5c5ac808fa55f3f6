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
import shutil
import tempfile
import warnings
from typing import Any

import torch
from torch import nn

from .._errors import ReproducibilityError, check_bool
from ._amp import unwrap_scaler
from ._callbacks import Callback
from ._clock import Clock
from ._context import TrialContext
from ._distributed import DistributedContext
from ._metadata import (
    FOLDER,
    FORMAT_VERSION,
    METADATA,
    STATE,
    IncompleteCheckpointError,
    expected_files,
    rank_file,
    read_checkpoint_metadata,
)
from ._rng import seed_all
from ._safe_load import load_checkpoint_file
from ._schedule import BatchSchedule
from ._trial import Trial

__all__ = [
    "FORMAT_VERSION",
    "METADATA",
    "STATE",
    "check_checkpoint_dir",
    "check_resume",
    "find_latest_checkpoint",
    "load_rank_state",
    "load_trial_from_checkpoint_path",
    "rank_file",
    "read_checkpoint_metadata",
    "read_metadata",
    "restore_state",
    "samples_trained",
    "save",
]


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
        files = expected_files(dist.get_size())
        _write_json({**metadata, "files": files}, os.path.join(final, METADATA))
        shutil.rmtree(aside, ignore_errors=True)
    dist.barrier()
    return final


def _check_path(name: str, value: Any, example: str) -> str:
    if isinstance(value, bytes) or not isinstance(value, (str, os.PathLike)):
        raise TypeError(
            f"{name} should be a folder path (str or os.PathLike), but got {name}={value!r} of "
            f"type {type(value).__name__}; {example}"
        )
    return os.fspath(value)


def check_checkpoint_dir(checkpoint_dir: Any, distributed: DistributedContext) -> str:
    """``checkpoint_dir`` as a folder every rank can write in, created if absent (a collective).

    Found before training starts, not at the first checkpoint: every rank creates and
    deletes a file there.

    Examples:
        >>> import tempfile
        >>> folder = os.path.join(tempfile.mkdtemp(), "ckpt")
        >>> check_checkpoint_dir(folder, DistributedContext()) == folder
        True
        >>> check_checkpoint_dir(3, DistributedContext())
        Traceback (most recent call last):
        ...
        TypeError: checkpoint_dir should be a folder path (str or os.PathLike), but got checkpoint_dir=3 of type int; pass e.g. checkpoint_dir="checkpoints"
    """  # noqa: E501
    folder = _check_path("checkpoint_dir", checkpoint_dir, 'pass e.g. checkpoint_dir="checkpoints"')
    problem = None
    try:
        os.makedirs(folder, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-check-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as error:
        problem = f"{type(error).__name__}: {error.strerror or error}"
    for rank, seen in enumerate(distributed.all_gather(problem)):
        if seen is not None:
            raise ValueError(
                f"checkpoint_dir should be a folder every rank can write, but rank {rank} "
                f"cannot write in {folder!r} ({seen}); pass a writable checkpoint_dir, or "
                "fix the folder's permissions, before training starts"
            )
    return folder


def read_metadata(path: str) -> dict[str, Any] | None:
    """The metadata of a complete, valid checkpoint folder, or None (for listings).

    A resume reads with :func:`read_checkpoint_metadata`, which says what is wrong.
    """
    try:
        return read_checkpoint_metadata(path)
    except ValueError:
        return None


def find_latest_checkpoint(checkpoint_dir: str) -> str | None:
    """The newest complete checkpoint folder under ``checkpoint_dir``, or None.

    A folder counts once its ``metadata.json`` is written and names files that exist
    (NOTE [ checkpoint layout ]); half-written folders are passed over. The newest folder
    with a ``metadata.json`` must be valid: one of a newer format, or damaged, is an
    error that names it rather than a silent resume from an older one
    (NOTE [ checkpoint metadata ]).

    Raises:
        TypeError: ``checkpoint_dir`` is not a path.
        ValueError: the newest checkpoint's ``metadata.json`` is of a newer format,
            damaged, or inconsistent with its files.

    Examples:
        >>> import tempfile
        >>> find_latest_checkpoint(tempfile.mkdtemp()) is None
        True
        >>> find_latest_checkpoint(None)
        Traceback (most recent call last):
        ...
        TypeError: checkpoint_dir should be a folder path (str or os.PathLike), but got checkpoint_dir=None of type NoneType; pass the checkpoint_dir given to fit, e.g. find_latest_checkpoint("checkpoints")
    """  # noqa: E501
    example = 'pass the checkpoint_dir given to fit, e.g. find_latest_checkpoint("checkpoints")'
    checkpoint_dir = _check_path("checkpoint_dir", checkpoint_dir, example)
    if not os.path.isdir(checkpoint_dir):
        return None
    found = sorted(
        (
            (int(m.group(1)), name)
            for name in os.listdir(checkpoint_dir)
            if (m := FOLDER.match(name))
        ),
        reverse=True,
    )
    for _, name in found:
        path = os.path.join(checkpoint_dir, name)
        try:
            read_checkpoint_metadata(path)
        except IncompleteCheckpointError as error:
            if os.path.exists(os.path.join(path, METADATA)):  # files gone: say so
                warnings.warn(
                    f"find_latest_checkpoint is passing over {path}: {error.reason}",
                    stacklevel=2,
                )
            continue
        return path
    return None


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
    file = os.path.join(path, rank_file(rank))
    state = load_checkpoint_file(file)
    if not isinstance(state, dict) or not {"rng", "loader"} <= set(state):
        raise ValueError(
            f"cannot resume from {file}: it should hold a dict with rng and loader, but holds "
            f"{type(state).__name__}; move the folder out of checkpoint_dir to resume from an "
            "older checkpoint"
        )
    return state


def restore_state(
    path: str, context: TrialContext, callbacks: dict[str, Callback], weights_only: bool = True
) -> None:
    """Load ``state-dict.pth`` into the wrapped models, optimizers, schedulers and callbacks.

    It is read as data (NOTE [ checkpoint files are data ]); ``weights_only=False`` is the
    caller's explicit opt-in to a full unpickler.
    """
    file = os.path.join(path, STATE)
    state = load_checkpoint_file(file, weights_only=weights_only, map_location=context.device)
    lists = ("models_state_dict", "optimizers_state_dict", "lr_schedulers_state_dict")
    if not isinstance(state, dict) or not all(
        isinstance(state.get(k), list) and all(isinstance(v, dict) for v in state[k]) for k in lists
    ):
        raise ValueError(
            f"cannot resume from {file}: it should hold a dict with lists of state dicts "
            f"{list(lists)}, "
            "but does not; move the folder out of checkpoint_dir to resume from an older one"
        )
    if not isinstance(state.get("callbacks", {}), dict):
        raise ValueError(f"cannot resume from {file}: its callbacks should be a dict")
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
        if name in state.get("callbacks", {}):
            callback.load_state_dict(state["callbacks"][name])


def load_trial_from_checkpoint_path(
    path: str,
    trial_class: type[Trial],
    trial_kwargs: dict[str, Any] | None = None,
    *,
    weights_only: bool = True,
) -> Trial:
    """Build ``trial_class`` in a single process and load a checkpoint's state into it.

    The context gets the checkpoint's hparams and seed; the models, optimizers,
    schedulers and callbacks the trial wraps get the saved state. Files are read as data
    (NOTE [ checkpoint files are data ]).

    Args:
        path: A checkpoint folder.
        trial_class: The trial to build.
        trial_kwargs: Keyword arguments of ``trial_class`` beside the context.
        weights_only: ``False`` reads ``state-dict.pth`` with a full unpickler, which
            runs any code the file holds: only for a checkpoint you wrote and trust, whose
            state holds your own classes. Prefer allowing those classes with
            ``torch.serialization.add_safe_globals``.

    Raises:
        ValueError: ``path`` is not a complete checkpoint folder, its metadata is invalid
            or of a newer format, or a file is damaged or holds a class not allowed.

    Examples:
        >>> import tempfile
        >>> from detsamplers.loader import DataLoader
        >>> from detsamplers.trial import Batch, Trainer, Trial, init
        >>> class Fit(Trial):
        ...     def __init__(self, context):
        ...         super().__init__(context)
        ...         self.model = context.wrap_model(torch.nn.Linear(1, 1))
        ...         self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), 0.1))
        ...     def build_training_data_loader(self):
        ...         return DataLoader(torch.ones(8, 1), batch_size=4, shuffle=True)
        ...     def train_batch(self, batch, epoch_idx, batch_idx):
        ...         loss = self.model(batch).pow(2).mean()
        ...         self.context.backward(loss)
        ...         self.context.step_optimizer(self.opt)
        ...         return loss
        >>> folder = tempfile.mkdtemp()
        >>> with init(hparams={"global_batch_size": 4}) as context:
        ...     trained = Fit(context)
        ...     Trainer(trained, context).fit(Batch(2), checkpoint_dir=folder)
        [batch 2] training: loss=...
        >>> loaded = load_trial_from_checkpoint_path(find_latest_checkpoint(folder), Fit)
        >>> all(torch.equal(a, b) for a, b in zip(loaded.model.parameters(),
        ...                                       trained.model.parameters()))
        True
    """
    weights_only = check_bool("weights_only", weights_only)
    path = _check_path("path", path, "pass a folder, e.g. find_latest_checkpoint(checkpoint_dir)")
    metadata = read_checkpoint_metadata(path)
    context = TrialContext(metadata.get("hparams") or {}, metadata["seed"], DistributedContext())
    context._infer_global_batch(int(metadata["global_batch_size"]))
    # The size the checkpoint would continue with (NOTE [ batch size schedule ]).
    schedule = BatchSchedule(int(metadata["global_batch_size"]))
    context._set_clock(Clock.restore(schedule, 1, None, samples_trained(metadata)))
    seed_all(context.seed, "init")
    trial = trial_class(context, **(trial_kwargs or {}))
    restore_state(path, context, trial.build_callbacks(), weights_only)
    return trial
