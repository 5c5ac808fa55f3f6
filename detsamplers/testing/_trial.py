"""``check_trial_resume``: a Trial paused and resumed ends with the weights of a straight run.

NOTE [ trial resume check ]
In this process (one rank), the trial is trained straight for ``batches`` batches;
then, for each pause ``p``, a fresh run trains ``p`` batches and checkpoints, and
another fresh run (a new context and a new trial, as after a restart) resumes from that
checkpoint to ``batches``. Every wrapped model's and optimizer's state must then equal
the straight run's bit for bit; the first tensor that differs is named with its element.
What a trial's training step draws outside the loader (dropout, noise) is covered too,
since the checkpoint restores the RNG states.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from collections.abc import Iterable, Mapping
from typing import Any

from .._errors import check_int
from ._arguments import iterable_arg
from ._compare import first_difference

__all__ = ["check_trial_resume"]


def _train(
    trial_class: type[Any],
    hparams: dict[str, Any],
    seed: int,
    batches: int,
    folder: str,
    resume: bool,
) -> dict[str, Any]:
    from ..trial import Batch, Trainer, find_latest_checkpoint, init

    with (
        contextlib.redirect_stdout(io.StringIO()),
        init(hparams=dict(hparams), seed=seed) as context,
    ):
        trial = trial_class(context)
        latest = find_latest_checkpoint(folder) if resume else None
        Trainer(trial, context).fit(Batch(batches), checkpoint_dir=folder, latest_checkpoint=latest)
        return {
            "models": [getattr(m, "module", m).state_dict() for m in context.models],
            "optimizers": [o.state_dict() for o in context.optimizers],
        }


def check_trial_resume(
    trial_class: type[Any],
    hparams: dict[str, Any],
    pauses: Iterable[int] = (2,),
    *,
    batches: int = 6,
    seed: int = 0,
    workdir: str | None = None,
) -> None:
    """Check that the trial paused at each pause and resumed ends bit-identical.

    Args:
        trial_class: A :class:`~detsamplers.trial.Trial` subclass.
        hparams: Its hyperparameters (with ``global_batch_size``).
        pauses: Batches trained before each pause, in ``[1, batches)``.
        batches: Batches of the whole run.
        seed: The trial seed.
        workdir: Keep the runs' checkpoints in a new folder here, to look at after a
            failure (default: a temporary folder, removed after).

    Raises:
        AssertionError: a model's or optimizer's state differs from the straight run's;
            the message names the pause, the tensor and the element.
        TypeError: an argument has the wrong type.
        ValueError: a pause is out of range.

    Examples:
        >>> import torch
        >>> from detsamplers.loader import DataLoader
        >>> from detsamplers.trial import Trial
        >>> class Fit(Trial):
        ...     def __init__(self, context):
        ...         super().__init__(context)
        ...         self.w = context.wrap_model(torch.nn.Linear(2, 1))
        ...         self.opt = context.wrap_optimizer(torch.optim.Adam(self.w.parameters()))
        ...     def build_training_data_loader(self):
        ...         data = torch.randn(16, 2, generator=torch.Generator().manual_seed(0))
        ...         return DataLoader(data, batch_size=4, shuffle=True)
        ...     def train_batch(self, batch, epoch_idx, batch_idx):
        ...         loss = torch.nn.functional.dropout(self.w(batch), 0.5).pow(2).mean()
        ...         self.context.backward(loss)
        ...         self.context.step_optimizer(self.opt)
        ...         return loss
        >>> check_trial_resume(Fit, {"global_batch_size": 4}, pauses=[1, 3], batches=5)
    """
    __tracebackhide__ = True
    from ..trial import Trial

    if not (isinstance(trial_class, type) and issubclass(trial_class, Trial)):
        raise TypeError(
            f"trial_class should be a subclass of detsamplers.trial.Trial (the class, not an "
            f"instance), but got {type(trial_class).__name__} {trial_class!r}"
        )
    if not isinstance(hparams, Mapping):
        raise TypeError(
            f"hparams should be a dict of hyperparameters (with global_batch_size), but got "
            f"{type(hparams).__name__} {hparams!r}"
        )
    if not iterable_arg(pauses):
        raise TypeError(
            f"pauses should be a list of ints (batches trained before each pause), but got "
            f"{type(pauses).__name__} {pauses!r}; pass pauses=[{pauses!r}] for one pause"
        )
    seed = check_int("seed", seed, minimum=0)
    if workdir is not None and not isinstance(workdir, (str, os.PathLike)):
        raise TypeError(
            f"workdir should be a folder path (str) or None, but got {type(workdir).__name__} "
            f"{workdir!r}"
        )
    batches = check_int("batches", batches, minimum=2)
    points = sorted({check_int("pauses", p, minimum=1) for p in pauses})
    if not points or points[-1] >= batches:
        raise ValueError(
            f"pauses should be one or more batches in [1, {batches}), but got {points}; "
            "raise batches or pause earlier"
        )
    with contextlib.ExitStack() as stack:
        if workdir is None:
            root = stack.enter_context(tempfile.TemporaryDirectory())
        else:
            os.makedirs(workdir, exist_ok=True)
            root = tempfile.mkdtemp(prefix="trial-resume-", dir=workdir)
        straight = _train(
            trial_class, hparams, seed, batches, os.path.join(root, "straight"), False
        )
        for pause in points:
            folder = os.path.join(root, f"paused-{pause}")
            _train(trial_class, hparams, seed, pause, folder, False)
            resumed = _train(trial_class, hparams, seed, batches, folder, True)
            for part in ("models", "optimizers"):
                for k, (a, b) in enumerate(zip(straight[part], resumed[part], strict=True)):
                    difference = first_difference(a, b)
                    if difference is not None:
                        raise AssertionError(
                            f"trial resume check failed: {trial_class.__name__} paused after "
                            f"batch {pause} and resumed to {batches} ends with another "
                            f"{part[:-1]} {k} state than a straight run, "
                            f"{difference.describe()}. Look for state the checkpoint does "
                            "not hold: a model or optimizer not wrapped with "
                            "context.wrap_model/wrap_optimizer, a generator of its own, a "
                            "counter on the trial, or a loader that does not resume "
                            "(check it with check_resume)"
                        )
