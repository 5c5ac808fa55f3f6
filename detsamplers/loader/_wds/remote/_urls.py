"""Shard URLs: brace patterns expanded as webdataset expands them; local or remote.

A URL with a scheme of two or more letters other than ``file`` (``http://``, ``https://``,
``s3://``, ``gs://``, ...) is remote and read through fsspec (NOTE [ remote reads ]);
anything else is a local path. ``pipe:`` commands and compressed shards are refused: the
source reads byte ranges, which a pipe or a gzip stream cannot give.

webdataset is optional (the ``webdataset`` extra, or ``pip install webdataset``); brace
patterns are expanded by its own code, so :func:`expand_urls` checks first that it is installed and
says how to install it if not (:func:`require_webdataset`).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from types import ModuleType
from typing import Any

__all__ = [
    "INSTALL_WEBDATASET",
    "expand_urls",
    "folder_arg",
    "is_remote",
    "local_path",
    "require_webdataset",
]

#: What to run when webdataset is missing.
INSTALL_WEBDATASET = (
    "pip install webdataset (or, in a clone of detsamplers, pip install -c constraints.txt "
    "-e '.[webdataset]')"
)


def require_webdataset() -> ModuleType:
    """The ``webdataset`` module, or a ``ModuleNotFoundError`` that says how to install it.

    Examples:
        >>> require_webdataset().__name__
        'webdataset'
    """
    try:
        return importlib.import_module("webdataset")
    except ImportError as error:
        raise ModuleNotFoundError(
            "webdataset shards need the webdataset package, which is not installed here "
            f"({error}): {INSTALL_WEBDATASET}. WebDatasetSource, WebDatasetMix, ShardWriter "
            "and `python -m detsamplers index` use it",
            name="webdataset",
        ) from None


def expand_urls(urls: Any) -> list[str]:
    """Expand brace patterns (and ``::`` lists) as webdataset does, into shard URLs.

    Args:
        urls: A string such as ``"data-{000..002}.tar"`` or a sequence of strings; a
            ``pathlib.Path`` (any ``os.PathLike``) counts as its string.

    Raises:
        ModuleNotFoundError: webdataset is not installed (the message says how).
        TypeError: ``urls`` is neither a string nor a sequence of strings (or paths).
        ValueError: it is empty, names an empty shard URL (``''``, a stray ``'::'``), or
            names a piped or compressed shard.

    Examples:
        >>> expand_urls("https://host/data-{000..001}.tar")
        ['https://host/data-000.tar', 'https://host/data-001.tar']
        >>> import pathlib
        >>> expand_urls([pathlib.Path("/d/a.tar"), "/d/b.tar"])
        ['/d/a.tar', '/d/b.tar']
        >>> expand_urls("pipe:curl -s http://host/a.tar")
        Traceback (most recent call last):
        ...
        ValueError: urls should name uncompressed .tar files by path or fsspec URL, but got ...
        >>> expand_urls("a.tar::")
        Traceback (most recent call last):
        ...
        ValueError: urls should name shards, but got an empty shard URL ('', shard 1 of 2) in ...
    """
    require_webdataset()
    if isinstance(urls, os.PathLike):
        urls = _text(urls)
    if isinstance(urls, str):
        from webdataset.shardlists import expand_urls as wds_expand

        out = [str(u) for u in wds_expand(urls)]
    elif isinstance(urls, Sequence) and all(isinstance(u, (str, os.PathLike)) for u in urls):
        out = [_text(u) for u in urls]
    else:
        raise TypeError(
            "urls should be a string (a path or brace pattern), an os.PathLike or a sequence "
            f"of them, but got urls of type {type(urls).__name__}"
        )
    if not out:
        raise ValueError("urls should name at least one shard, but got an empty list")
    for index, url in enumerate(out):
        if not url.strip():
            where = "" if isinstance(urls, str) else f"urls[{index}]="
            raise ValueError(
                f"urls should name shards, but got an empty shard URL ({where}{url!r}, shard "
                f"{index} of {len(out)}) in urls={_shown(urls)}; an empty string names no "
                "file, and '::' separates shard lists: remove the empty entry or the stray '::'"
            )
        if url.startswith("pipe:") or url.endswith((".gz", ".tgz")):
            raise ValueError(
                "urls should name uncompressed .tar files by path or fsspec URL, but got "
                f"{url!r}; the source reads byte ranges of shards, which a pipe or a "
                "compressed stream cannot give: pass the shard's own URL (s3://... with "
                "s3fs, gs://... with gcsfs, https://...) and decompress .tar.gz shards"
            )
    return out


def _text(path: Any) -> Any:
    """A path-like object's string (anything else as it is: the caller refuses it)."""
    text = os.fspath(path) if isinstance(path, os.PathLike) else path
    return os.fsdecode(text) if isinstance(text, bytes) else text


def folder_arg(name: str, value: Any) -> str | None:
    """A folder parameter (``index_dir``, ``cache_dir``) as a string: a str, path or ``None``.

    Raises:
        TypeError: ``value`` is none of these (the message names ``name``).

    Examples:
        >>> import pathlib
        >>> folder_arg("cache_dir", pathlib.Path("/tmp/c")), folder_arg("cache_dir", None)
        ('/tmp/c', None)
        >>> folder_arg("index_dir", 3)
        Traceback (most recent call last):
        ...
        TypeError: index_dir should be a str, an os.PathLike or None, but got index_dir=3
    """
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, os.PathLike):
        return str(_text(value))
    raise TypeError(f"{name} should be a str, an os.PathLike or None, but got {name}={value!r}")


def _shown(urls: Any) -> str:
    """``urls`` as a message shows it: its repr, shortened past 80 characters."""
    text = repr(urls if isinstance(urls, str) else list(urls))
    return text if len(text) <= 80 else text[:77] + "..."


def is_remote(url: str) -> bool:
    """Whether ``url`` is read through fsspec rather than as a local file.

    Examples:
        >>> is_remote("https://host/a.tar"), is_remote("s3://b/a.tar"), is_remote("/d/a.tar")
        (True, True, False)
        >>> is_remote("file:///d/a.tar"), is_remote("C:/d/a.tar")
        (False, False)
    """
    scheme, sep, _ = url.partition("://")
    return bool(sep) and len(scheme) > 1 and scheme != "file"


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
