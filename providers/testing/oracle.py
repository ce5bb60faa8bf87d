"""Oracles: direct access to a provider's backend (files, the dict, boto3), never through it.

The conformance suite checks what a provider did by looking at the backend itself, and sets up
states (an interrupted seal, orphan chunks) by writing raw objects there.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any
from typing import ClassVar

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

CHUNK_DIGITS = 20


class Oracle(abc.ABC):
    """Raw object names (relative to the provider's root) and their bytes."""

    chunked: ClassVar[bool] = False
    """Whether unsealed segments are chunk objects ``{key}~{position:020d}``."""

    @abc.abstractmethod
    def names(self) -> set[str]:
        """Every object stored below the provider's root, as relative names."""

    @abc.abstractmethod
    def get(self, name: str) -> bytes | None:
        """The bytes of one raw object, ``None`` if absent."""

    @abc.abstractmethod
    def put(self, name: str, data: bytes) -> None:
        """Store one raw object."""

    def names_of(self, key: str) -> set[str]:
        """The raw names that belong to ``key``: the object and its chunk/temporary objects."""
        return {n for n in self.names() if n == key or n.startswith(key + "~")}

    def content(self, key: str) -> bytes | None:
        """The segment's bytes as the backend holds them: the object, else its chunks."""
        names = self.names_of(key)
        if key in names:
            return self.get(key)
        if not self.chunked:
            return None
        chunks = sorted(
            n
            for n in names
            if len(n) == len(key) + 1 + CHUNK_DIGITS and n[-CHUNK_DIGITS:].isdigit()
        )
        if not chunks or int(chunks[0][-CHUNK_DIGITS:]) != 0:
            return None
        parts = [self.get(n) or b"" for n in chunks]
        return b"".join(parts)


class DirectoryOracle(Oracle):
    """Files below a directory (the posix provider, fsspec ``file://``)."""

    def __init__(self, root: Path, *, chunked: bool = False) -> None:
        self.root = root
        self.chunked = chunked  # type: ignore[misc]

    def names(self) -> set[str]:
        found: set[str] = set()
        for dirpath, _, filenames in os.walk(self.root):
            rel = os.path.relpath(dirpath, self.root)
            found.update(name if rel == "." else f"{rel}/{name}" for name in filenames)
        return found

    def get(self, name: str) -> bytes | None:
        path = self.root / name
        return path.read_bytes() if path.is_file() else None

    def put(self, name: str, data: bytes) -> None:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


class DictOracle(Oracle):
    """A mapping of names to bytes-like values (the memory provider's dict, ``memory://``).

    ``root`` is stripped from the mapping's keys (``"/root"`` for fsspec's memory store, whose
    values are file objects with ``getvalue``); ``make(full_name, data)`` builds a new value
    (default ``bytearray``).
    """

    def __init__(
        self,
        objects: MutableMapping[str, Any],
        *,
        root: str = "",
        chunked: bool = False,
        make: Callable[[str, bytes], Any] | None = None,
    ) -> None:
        self.objects = objects
        self.root = root.rstrip("/") + "/" if root else ""
        self.chunked = chunked  # type: ignore[misc]
        self.make = make

    def names(self) -> set[str]:
        return {k[len(self.root) :] for k in list(self.objects) if k.startswith(self.root)}

    def get(self, name: str) -> bytes | None:
        value = self.objects.get(self.root + name)
        if value is None:
            return None
        return bytes(value.getvalue()) if hasattr(value, "getvalue") else bytes(value)

    def put(self, name: str, data: bytes) -> None:
        full = self.root + name
        self.objects[full] = self.make(full, data) if self.make else bytearray(data)


class BotoOracle(Oracle):
    """Objects in an S3 bucket below a prefix, through a plain boto3 client; ``read_args`` go
    with every GET and HEAD, ``write_args`` with every PUT (an encrypted tier's settings)."""

    chunked = True

    def __init__(
        self,
        client: S3Client,
        bucket: str,
        prefix: str = "",
        *,
        read_args: Mapping[str, Any] | None = None,
        write_args: Mapping[str, Any] | None = None,
    ) -> None:
        self.client = client
        self.bucket = bucket
        self.root = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.read_args = dict(read_args or {})
        self.write_args = dict(write_args or {})

    def names(self) -> set[str]:
        found: set[str] = set()
        for page in self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.root
        ):
            found.update(obj["Key"][len(self.root) :] for obj in page.get("Contents", []))
        return found

    def get(self, name: str) -> bytes | None:
        try:
            response = self.client.get_object(
                Bucket=self.bucket, Key=self.root + name, **self.read_args
            )
        except self.client.exceptions.NoSuchKey:
            return None
        return response["Body"].read()

    def head(self, name: str) -> dict[str, Any]:
        """The HEAD response of one raw object (its encryption, size, ...)."""
        response = self.client.head_object(
            Bucket=self.bucket, Key=self.root + name, **self.read_args
        )
        return dict(response)

    def put(self, name: str, data: bytes) -> None:
        self.client.put_object(
            Bucket=self.bucket, Key=self.root + name, Body=data, **self.write_args
        )

    def multipart_uploads(self) -> list[str]:
        """Keys with an unfinished multipart upload below the prefix."""
        response = self.client.list_multipart_uploads(Bucket=self.bucket, Prefix=self.root)
        return [u["Key"][len(self.root) :] for u in response.get("Uploads", [])]
