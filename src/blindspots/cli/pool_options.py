"""The pool options every command that reads a pool takes (`scan`, `init`, `surprise score`, `label-issues`).

POOL is a folder, a list file, a URI prefix (`s3://bucket/pool/`), Parquet shards, WebDataset tar
shards or a Hugging Face `save_to_disk` folder (`blindspots.data.sources.open_pool` says how each is
recognised); the options below refine it.
"""
from __future__ import annotations

from typing import Any, Optional

import typer

from blindspots.data.sources import open_pool, parse_storage_option

POOL_HELP = ("The pool: a folder, a list file (.txt/.csv/.parquet of paths or URIs), a URI prefix (s3://bucket/pool/, "
             "gs://, az://, file://), Parquet shards with an image column, WebDataset shards "
             "(shard-{000000..000099}.tar), a Hugging Face save_to_disk folder, or a FiftyOne dataset "
             "(fiftyone://NAME, fiftyone://NAME?view=SAVED_VIEW).")


def list_file_option() -> Any:
    return typer.Option(None, "--list-file", help="A list of the pool's images (paths relative to POOL, or URIs): "
                        ".txt one a line, or a .csv/.parquet column (--list-column).")


def list_column_option() -> Any:
    return typer.Option(None, "--list-column", help="The column of a CSV / Parquet list file (default: path, url, "
                        "uri, image or file, else the first text column).")


def format_option() -> Any:
    return typer.Option(None, "--pool-format", help="Force how POOL is read: folder, images (a URI prefix of "
                        "image files), list, parquet, webdataset or hf (default: guessed from POOL).")


def image_column_option() -> Any:
    return typer.Option(None, "--image-column", help="The image column of Parquet / Hugging Face pools (default: "
                        "'image' or the only binary / {bytes, path} column).")


def storage_option_option() -> Any:
    return typer.Option([], "--storage-option", help="KEY=VALUE for the object store (fsspec), repeatable, e.g. "
                        "endpoint_url=http://127.0.0.1:9000 for an S3-compatible store; credentials come from the "
                        "store's usual environment (AWS_*, ~/.aws, GOOGLE_APPLICATION_CREDENTIALS, AZURE_*).")


def storage_options(values: list[str] | None) -> dict[str, Any]:
    """['endpoint_url=http://h:9000', 'anon=true'] -> {'endpoint_url': 'http://h:9000', 'anon': True}."""
    return dict(parse_storage_option(v) for v in values or [])


def open_cli_pool(pool: str, *, list_file: Optional[str] = None, list_column: Optional[str] = None,
                  pool_format: Optional[str] = None, image_column: Optional[str] = None,
                  storage_option: list[str] | None = None) -> Any:
    """The pool source the options name (a ValueError is the CLI's one-line error)."""
    return open_pool(pool, list_file=list_file, list_column=list_column, format=pool_format,
                     image_column=image_column, storage_options=storage_options(storage_option))
