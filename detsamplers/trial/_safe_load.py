"""A checkpoint's torch files read as data: ``weights_only=True``, errors that name the file.

NOTE [ checkpoint files are data ]
``state-dict.pth`` and the rank files are pickles inside a zip, and a full unpickler runs
whatever a crafted file tells it to. So every file a resume or
``load_trial_from_checkpoint_path`` reads goes through :func:`load_checkpoint_file`, which
calls ``torch.load(weights_only=True)``: tensors, containers and primitives only, plus
the classes a user allowed with ``torch.serialization.add_safe_globals``. A file that
needs anything else is refused with an error that names the file and the class, and the
two ways on: allow the class, or (for a file one wrote oneself and trusts) pass
``weights_only=False`` to ``fit`` or ``load_trial_from_checkpoint_path``, the only way to
run a full unpickler here. A truncated, damaged or foreign file gives an error that names
it and says to resume from another checkpoint. Only regular files are opened, so a FIFO
or a device cannot hang or flood a resume.
"""

from __future__ import annotations

import os
import pickle
import re
import stat
from typing import Any

import torch

__all__ = ["load_checkpoint_file"]

_GLOBAL = re.compile(r"Unsupported global: GLOBAL ([\w.]+)")


def _refused(path: str, error: Exception) -> str:
    found = _GLOBAL.search(str(error))
    what = found.group(1) if found else "a class"
    return (
        f"cannot load {path}: it needs {what}, which torch.load(weights_only=True) does not "
        "allow, and checkpoints are read as data, never as code (docs: Security). If you "
        "wrote this checkpoint and the class is yours, allow it with "
        "torch.serialization.add_safe_globals([TheClass]) before loading; only for a file "
        "you trust completely, pass weights_only=False, which runs any code the file holds"
    )


def _damaged(path: str, error: Exception) -> str:
    lines = str(error).splitlines()
    return (
        f"cannot load {path}: it is not a complete torch file ({type(error).__name__}: "
        f"{lines[0] if lines else ''}); it was truncated by a crash, damaged, or not written "
        "by detsamplers. Resume from another checkpoint folder (move this one out of "
        "checkpoint_dir), or start a fresh run"
    )


def load_checkpoint_file(path: str, *, weights_only: bool = True, map_location: Any = None) -> Any:
    """``torch.load`` one file of a checkpoint folder as data (NOTE [ checkpoint files are data ]).

    Args:
        path: The file.
        weights_only: ``False`` runs a full unpickler: any code the file holds runs.
        map_location: As for ``torch.load``.

    Raises:
        ValueError: the file is missing, not a regular file, damaged or truncated, or
            (with ``weights_only``) holds a class not allowed; the message names it.

    Examples:
        >>> import tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "rank-0.pth")
        >>> torch.save({"step": torch.tensor(3)}, path)
        >>> load_checkpoint_file(path)
        {'step': tensor(3)}
        >>> with open(path, "wb") as f:
        ...     _ = f.write(b"half a file")
        >>> load_checkpoint_file(path)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: cannot load .../rank-0.pth: it is not a complete torch file (...); it was truncated by a crash, damaged, or not written by detsamplers. Resume from another checkpoint folder (move this one out of checkpoint_dir), or start a fresh run
    """  # noqa: E501
    try:
        regular = stat.S_ISREG(os.stat(path).st_mode)
    except OSError as error:
        raise ValueError(f"cannot load {path}: {error.strerror or error}") from error
    if not regular:
        raise ValueError(f"cannot load {path}: it should be a regular file, but it is not")
    try:
        return torch.load(path, map_location=map_location, weights_only=weights_only)
    except pickle.UnpicklingError as error:
        # Only a named global is a class to allow: a foreign file (JSON, a plain pickle)
        # also fails the weights-only check, and is damaged, not a class to allow.
        if weights_only and _GLOBAL.search(str(error)):
            raise ValueError(_refused(path, error)) from error
        raise ValueError(_damaged(path, error)) from error
    except Exception as error:  # a foreign file can make the reader raise anything
        raise ValueError(_damaged(path, error)) from error
