"""Determined's module-level names, answered off a cluster: ``get_cluster_info``, ``LOG_FORMAT``.

NOTE [ cluster info off a cluster ]
Determined's tutorial scripts ask ``det.get_cluster_info()`` for their hyperparameters
and for the checkpoint to resume (``info.trial.hparams``, ``info.latest_checkpoint``),
and take a local branch that starts over when it returns None. Here the "cluster" is the
experiment's configuration file and its checkpoint folder: :func:`get_cluster_info`
returns a :class:`ClusterInfo` when the configuration file exists (``const.yaml`` in the
working directory, or ``$DETSAMPLERS_EXPERIMENT_CONFIG``), whose ``trial.hparams`` are
its ``hyperparameters`` and whose ``latest_checkpoint`` is the newest complete checkpoint
in the folder the Trainer writes by default (``checkpoints``).
A relaunch of the same script therefore resumes where it stopped, as a Determined trial
does when its master hands it ``latest_checkpoint``. Without the file it returns None,
and the script's local branch runs, as off a Determined cluster.

Only constant hyperparameters have a value outside a search: ``{"type": "const",
"val": v}`` is read as ``v``; any other ``type`` (a searched range) is refused.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ._checkpoint import find_latest_checkpoint

__all__ = ["LOG_FORMAT", "ClusterInfo", "TrialInfo", "get_cluster_info"]

#: The logging format of Determined's scripts (``det.LOG_FORMAT``), the same string.
LOG_FORMAT = "%(levelname)s: [%(process)s] %(name)s: %(message)s"

CONFIG_ENV = "DETSAMPLERS_EXPERIMENT_CONFIG"
CHECKPOINT_DIR = "checkpoints"  # Trainer.fit's default checkpoint_dir


@dataclass(frozen=True)
class TrialInfo:
    """The trial's part of :class:`ClusterInfo`: its hyperparameters.

    Examples:
        >>> TrialInfo(hparams={"learning_rate": 1.0}).hparams["learning_rate"]
        1.0
    """

    hparams: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterInfo:
    """What ``det.get_cluster_info()`` tells a trial, from a local run's files.

    Attributes:
        trial: The trial's hyperparameters (``trial.hparams``).
        latest_checkpoint: The newest complete checkpoint folder to resume from, or None.
        checkpoint_dir: The folder it was looked for in.
        config_path: The experiment configuration file the hyperparameters came from.

    Examples:
        >>> info = ClusterInfo(TrialInfo({"n": 1}), None, "checkpoints", "const.yaml")
        >>> info.trial.hparams, info.latest_checkpoint
        ({'n': 1}, None)
    """

    trial: TrialInfo
    latest_checkpoint: str | None
    checkpoint_dir: str
    config_path: str


def _constant(name: str, value: Any, path: str) -> Any:
    if isinstance(value, dict) and "type" in value:
        if value["type"] != "const" or "val" not in value:
            raise ValueError(
                f"hyperparameters.{name} in {path} should be a constant to run outside a "
                f"Determined search, but got type {value['type']!r}; give it a value, or "
                "{type: const, val: ...}"
            )
        return value["val"]
    return value


def _read_config(path: str) -> dict[str, Any]:
    try:
        import yaml
    except ImportError as error:  # pragma: no cover - PyYAML comes with the frameworks
        raise ImportError(
            f"reading the experiment configuration {path} needs PyYAML; pip install pyyaml"
        ) from error
    try:
        with open(path) as f:
            config = yaml.safe_load(f)
    except yaml.YAMLError as error:
        raise ValueError(
            f"{path} is not a readable YAML experiment configuration: {error}"
        ) from error
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise ValueError(
            f"{path} should hold an experiment configuration (a mapping), but holds a "
            f"{type(config).__name__}"
        )
    return config


def get_cluster_info() -> ClusterInfo | None:
    """The trial's hyperparameters and latest checkpoint, or None without a configuration.

    NOTE [ cluster info off a cluster ]: the configuration is ``const.yaml`` in the working
    directory (or ``$DETSAMPLERS_EXPERIMENT_CONFIG``), and the checkpoints are looked for
    in ``checkpoints``, where :meth:`~detsamplers.trial.Trainer.fit` writes them by
    default.

    Raises:
        ValueError: the configuration is not a YAML mapping, or a hyperparameter is
            searched rather than constant.

    Examples:
        >>> import os, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> os.environ["DETSAMPLERS_EXPERIMENT_CONFIG"] = os.path.join(folder, "const.yaml")
        >>> get_cluster_info() is None
        True
        >>> with open(os.environ["DETSAMPLERS_EXPERIMENT_CONFIG"], "w") as f:
        ...     _ = f.write("hyperparameters: {lr: 0.5, n: {type: const, val: 4}}")
        >>> info = get_cluster_info()
        >>> info.trial.hparams, info.latest_checkpoint
        ({'lr': 0.5, 'n': 4}, None)
        >>> del os.environ["DETSAMPLERS_EXPERIMENT_CONFIG"]
    """
    path = os.environ.get(CONFIG_ENV, "const.yaml")
    if not os.path.isfile(path):
        return None
    config = _read_config(path)
    raw = config.get("hyperparameters") or {}
    if not isinstance(raw, dict):
        raise ValueError(
            f"hyperparameters in {path} should be a mapping of names to values, but got "
            f"{type(raw).__name__}"
        )
    hparams = {str(name): _constant(str(name), value, path) for name, value in raw.items()}
    return ClusterInfo(
        trial=TrialInfo(hparams),
        latest_checkpoint=find_latest_checkpoint(CHECKPOINT_DIR),
        checkpoint_dir=CHECKPOINT_DIR,
        config_path=path,
    )
