"""Load a user's ``module:function`` spec for the command lines (``bench``, ``inspect``).

NOTE [ factory spec ]
``bench --dataset`` and ``inspect --against`` name a callable the user wrote, as
``module:function`` or, where a command takes scripts, ``path/to/script.py:function``.
The current folder is importable, as with ``python -m``. A malformed spec, a module that
does not import, a missing script or an attribute that is not callable is a
``ValueError`` naming the option and the spec, which the command lines print as a usage
error. The module is the user's own code, so importing it runs it, as ``python -m`` would.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Any


def load_callable(spec: str, option: str, *, noun: str, scripts: bool = False) -> Any:
    """The callable that ``spec`` names, or a ``ValueError`` naming ``option``.

    Args:
        spec: ``module:function``, or ``path/to/script.py:function`` when ``scripts``.
        option: the command-line option that gave ``spec``, for the messages.
        noun: what the callable is called in the messages (``"factory"``, ``"function"``).
        scripts: whether a ``.py`` path may stand for the module.

    >>> load_callable("json:dumps", "--dataset", noun="factory")([1])
    '[1]'
    >>> load_callable("json", "--dataset", noun="factory")
    Traceback (most recent call last):
    ...
    ValueError: --dataset should be module:factory, but got 'json'
    """
    module_name, sep, attribute = spec.rpartition(":")
    if not sep or not module_name or not attribute:
        form = f"module:{noun}" + (f" or path/to/script.py:{noun}" if scripts else "")
        raise ValueError(f"{option} should be {form}, but got {spec!r}")
    if "" not in sys.path:
        sys.path.insert(0, "")  # the current folder, as python -m does
    if scripts and module_name.endswith(".py"):
        if not os.path.isfile(module_name):
            raise ValueError(f"{option} names the script {module_name!r}, which does not exist")
        loaded = importlib.util.spec_from_file_location("_detsamplers_user_script", module_name)
        assert loaded is not None and loaded.loader is not None
        module = importlib.util.module_from_spec(loaded)
        sys.path.insert(0, os.path.dirname(os.path.abspath(module_name)))
        loaded.loader.exec_module(module)
    else:
        if module_name.startswith("."):
            raise ValueError(
                f"{option} should name an absolute module, but got the relative {module_name!r}; "
                "write the package's full dotted name"
            )
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise ValueError(f"{option}: cannot import {module_name!r} ({error})") from error
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise ValueError(f"{option}: {module_name} has no {noun} {attribute!r}")
    return factory
