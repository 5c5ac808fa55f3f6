"""``--storage-option`` and ``--endpoint-url``: the command line's ``storage_options``.

NOTE [ command storage options ]
The commands that read remote shards (``index``, ``plan``) take the fsspec filesystem's
arguments as ``WebDatasetSource`` takes them, ``storage_options``: ``--storage-option
KEY=VALUE`` (repeatable; a VALUE that parses as JSON is that JSON, e.g. ``anon=true``) and
``--endpoint-url`` for a MinIO, moto, R2 or GCS-emulator endpoint. The endpoint is gcsfs's
``endpoint_url`` for ``gs://`` URLs, else s3fs's ``client_kwargs.endpoint_url`` (gcsfs
ignores ``client_kwargs``: the files would be read from Google's servers instead of the
endpoint named). Credentials not given as options come from where s3fs and gcsfs look for
them (``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY``, a profile, ...), so a command
reads a bucket as the run reads it. Both commands call :func:`storage_options`, which
``__main__`` and the plan command import (it imports neither, so no import circle).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

__all__ = ["add_storage_arguments", "storage_options"]


def add_storage_arguments(command: Any) -> None:
    """Add ``--storage-option`` and ``--endpoint-url`` to a command's parser."""
    command.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an fsspec filesystem argument, as WebDatasetSource's storage_options (repeat "
        "it; a VALUE that parses as JSON is that JSON, e.g. anon=true)",
    )
    command.add_argument(
        "--endpoint-url",
        default=None,
        help="the S3 endpoint (MinIO, moto, R2, ...; storage_options client_kwargs.endpoint_url) "
        "or, for gs:// URLs, the GCS endpoint (an emulator; storage_options endpoint_url)",
    )


def storage_options(
    pairs: Sequence[str], endpoint_url: str | None, urls: Sequence[str] = ()
) -> dict[str, Any]:
    """``--storage-option KEY=VALUE`` and ``--endpoint-url`` as ``storage_options``.

    Raises:
        ValueError: a pair is not ``KEY=VALUE``, or ``client_kwargs`` is no JSON object.

    Examples:
        >>> storage_options(["anon=true"], "http://127.0.0.1:9000", ["s3://b/d.tar"])
        {'anon': True, 'client_kwargs': {'endpoint_url': 'http://127.0.0.1:9000'}}
        >>> storage_options([], "http://127.0.0.1:4443", ["gs://b/d.tar"])
        {'endpoint_url': 'http://127.0.0.1:4443'}
    """
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise ValueError(
                f"--storage-option should be KEY=VALUE, but got {pair!r}; for example "
                "--storage-option anon=true"
            )
        try:
            options[key] = json.loads(text)
        except ValueError:
            options[key] = text
    if endpoint_url is not None and any(u.lower().startswith(("gs://", "gcs://")) for u in urls):
        options["endpoint_url"] = endpoint_url
    elif endpoint_url is not None:
        client = options.get("client_kwargs")
        if client is not None and not isinstance(client, dict):
            raise ValueError(
                f"--storage-option client_kwargs should be a JSON object, but got {client!r}; "
                'pass it as client_kwargs=\'{"region_name": "us-east-1"}\''
            )
        options["client_kwargs"] = {**(client or {}), "endpoint_url": endpoint_url}
    return options
