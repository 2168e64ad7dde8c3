"""fsspec plumbing shared by the sources: URIs, storage options, one-line errors, batched reads.

A URI is anything with a scheme (`s3://`, `gs://`, `az://`, `abfs://`, `file://`, `memory://`, ...);
anything else is a local path. Storage options go to the filesystem's constructor (s3fs's
`endpoint_url`, `anon`, `profile`, ...); credentials come from each store's usual environment
(AWS_* variables, ~/.aws, GOOGLE_APPLICATION_CREDENTIALS, AZURE_STORAGE_* ...), never from here.
`?key=value&...` after a URI is read as storage options too (`s3://bucket/pool/?endpoint_url=http://minio:9000`).
"""
from __future__ import annotations

import asyncio
import os
import re
from typing import Any, Iterator, Mapping, Sequence
from urllib.parse import parse_qsl

# Lazy imports: fsspec (the scan, its Ray workers and `blindspots --help` start without it: a local folder needs
# none of it).

__all__ = ["is_uri", "split_uri_options", "parse_storage_option", "public_options", "get_fs", "storage_error",
           "cat_many", "join", "tool_url"]

_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
_SECRET_WORDS = ("key", "secret", "token", "password", "credential", "sas", "connection_string")
READ_CHUNK = 32  # objects fetched concurrently per `fs.cat` call (s3fs/gcsfs/adlfs run them in parallel)


def is_uri(value: str) -> bool:
    """True for 's3://b/k', 'file:///x', ...; False for local paths ('a/b.png', '/x', 'C:/x')."""
    return bool(_SCHEME.match(str(value)))


def _value(text: str) -> Any:
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if re.fullmatch(r"-?\d+", low):
        return int(low)
    return text


def split_uri_options(uri: str) -> tuple[str, dict[str, Any]]:
    """'s3://b/p/?endpoint_url=http://h:9000&anon=true' -> ('s3://b/p/', {'endpoint_url': ..., 'anon': True})."""
    if not is_uri(uri) or "?" not in uri:
        return uri, {}
    base, _, query = uri.partition("?")
    return base, {k: _value(v) for k, v in parse_qsl(query, keep_blank_values=True)}


def parse_storage_option(text: str) -> tuple[str, Any]:
    """'endpoint_url=http://127.0.0.1:9000' -> ('endpoint_url', 'http://...'); ValueError naming the option."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"--storage-option: expected KEY=VALUE (e.g. endpoint_url=http://127.0.0.1:9000), "
                         f"got {text!r}")
    return key.strip(), _value(value)


def public_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Storage options without credentials (what a manifest or project file may keep)."""
    return {k: v for k, v in options.items() if not any(w in k.lower() for w in _SECRET_WORDS)}


def get_fs(uri: str, options: Mapping[str, Any] | None = None) -> tuple[Any, str]:
    """(fsspec filesystem, path inside it) for a URI or a local path; ValueError when the protocol's
    package is missing (e.g. s3fs for s3://), naming what to install."""
    import fsspec

    opts = dict(options or {})
    try:
        return fsspec.core.url_to_fs(uri, **opts) if is_uri(uri) else (fsspec.filesystem("file"), os.path.abspath(uri))
    except ImportError as exc:
        scheme = uri.split("://", 1)[0]
        extra = {"s3": "s3fs (pip install 'blindspots[s3]')", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs",
                 "abfs": "adlfs", "abfss": "adlfs"}.get(scheme, f"the fsspec package for {scheme}://")
        raise ValueError(f"pool: expected {extra} installed to read {uri!r}, got {exc}") from None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"--storage-option: expected options that {uri.split('://', 1)[0]}:// takes, "
                         f"got {sorted(opts)} ({exc})") from None


def storage_error(what: str, uri: str, exc: BaseException) -> ValueError:
    """One-line ValueError for a store that cannot be read (missing bucket, no credentials, refused)."""
    name = type(exc).__name__
    text = " ".join(str(exc).split()) or name
    if name in ("NoCredentialsError", "PartialCredentialsError") or "credentials" in text.lower():
        hint = "; set the store's usual credentials (e.g. AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE) " \
               "or --storage-option anon=true for a public bucket"
    elif isinstance(exc, FileNotFoundError):
        hint = " (no such bucket, container or path)"
    elif isinstance(exc, PermissionError):
        hint = " (access denied: check the credentials' rights)"
    else:
        hint = ""
    return ValueError(f"{what}: expected a readable {uri!r}, got {name}: {text}{hint}")


_TOOL_SCHEMES = {"az": "azure-blob", "abfs": "azure-blob", "abfss": "azure-blob", "gcs": "gs", "s3a": "s3"}


def tool_url(uri: str) -> str:
    """An object URL as labelling tools' cloud storages write it ('az://c/k' -> 'azure-blob://c/k', gcs -> gs)."""
    scheme, sep, rest = uri.partition("://")
    return f"{_TOOL_SCHEMES.get(scheme, scheme)}{sep}{rest}" if sep else uri


def join(base: str, rel: str) -> str:
    """base + '/' + rel without doubling the slash (fsspec paths and URIs)."""
    return base.rstrip("/") + "/" + rel.lstrip("/") if base else rel


def _reason(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError):
        return "file not found"
    if isinstance(exc, IsADirectoryError):
        return "not a regular file"
    text = " ".join(str(exc).split())
    return f"cannot read ({type(exc).__name__}: {text})" if text else f"cannot read ({type(exc).__name__})"


async def _gather(fs: Any, paths: list[str]) -> list[Any]:
    return await asyncio.gather(*[fs._cat_file(p) for p in paths], return_exceptions=True)


def cat_many(fs: Any, paths: Sequence[str]) -> Iterator[tuple[bytes | None, str | None]]:
    """(bytes, None) or (None, reason) per path, in order. Async stores (s3fs, gcsfs, adlfs) fetch
    READ_CHUNK objects at once; paths are taken literally (no glob expansion of '[' or '*')."""
    concurrent = bool(getattr(fs, "async_impl", False))
    for s in range(0, len(paths), READ_CHUNK):
        chunk = list(paths[s:s + READ_CHUNK])
        if concurrent and len(chunk) > 1:
            from fsspec.asyn import sync

            try:
                got: list[Any] = sync(fs.loop, _gather, fs, chunk)
            except Exception as exc:  # noqa: BLE001 - the whole call failed: every item says why
                got = [exc] * len(chunk)
        else:
            got = []
            for p in chunk:
                try:
                    got.append(fs.cat_file(p))
                except Exception as exc:  # noqa: BLE001 - one bad object is one error row
                    got.append(exc)
        for value in got:
            if isinstance(value, BaseException):
                yield None, _reason(value)
            elif len(value) == 0:
                yield None, "empty file (0 bytes)"
            else:
                yield bytes(value), None
