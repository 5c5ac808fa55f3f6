"""Shard URLs: brace patterns expanded as webdataset expands them, and local paths."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

__all__ = ["expand_urls", "local_path"]


def expand_urls(urls: Any) -> list[str]:
    """Expand brace patterns (and ``::`` lists) as webdataset does, into local paths.

    Args:
        urls: A string such as ``"data-{000..002}.tar"`` or a sequence of strings.

    Raises:
        TypeError: ``urls`` is neither a string nor a sequence of strings.
        ValueError: it is empty, or names a remote or piped shard.

    Examples:
        >>> expand_urls("data-{000..002}.tar")
        ['data-000.tar', 'data-001.tar', 'data-002.tar']
        >>> expand_urls("http://host/a.tar")
        Traceback (most recent call last):
        ...
        ValueError: urls should name local uncompressed .tar files, but got 'http://host/a.tar'; ...
    """
    if isinstance(urls, str):
        from webdataset.shardlists import expand_urls as wds_expand

        out = [str(u) for u in wds_expand(urls)]
    elif isinstance(urls, Sequence) and all(isinstance(u, str) for u in urls):
        out = list(urls)
    else:
        raise TypeError(
            "urls should be a string (a path or brace pattern) or a sequence of strings, "
            f"but got urls of type {type(urls).__name__}"
        )
    if not out:
        raise ValueError("urls should name at least one shard, but got an empty list")
    for url in out:
        scheme = url.split(":", 1)[0] if ":" in url else ""
        if (len(scheme) > 1 and scheme != "file") or url.endswith((".gz", ".tgz")):
            raise ValueError(
                f"urls should name local uncompressed .tar files, but got {url!r}; "
                "the source seeks into shards: copy or decompress them to a local folder"
            )
    return out


def local_path(url: str) -> str:
    """The absolute path of a local shard URL (a path or ``file:`` URL).

    Examples:
        >>> local_path("file:/data/a.tar")
        '/data/a.tar'
    """
    if url.startswith("file://"):
        url = url[len("file://") :]
    elif url.startswith("file:"):
        url = url[len("file:") :]
    return os.path.abspath(url)
