"""The Schema Registry client Avro decoding asks for writer schemas by id (cached: ids are immutable)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from conf.errors import InputError, SourceUnavailable


class SchemaRegistry:
    """Writer schemas by id from a Confluent-compatible Schema Registry (`GET /schemas/ids/<id>`).

    Args:
        url: the registry's base URL.
        timeout_seconds: how long one request may take.
    """

    def __init__(self, url: str, timeout_seconds: float):
        self.url = url.rstrip("/")
        self.timeout_seconds = timeout_seconds
        self._schemas: dict[int, Any] = {}

    def __call__(self, schema_id: int) -> Any:
        """The parsed writer schema of `schema_id`.

        Raises:
            InputError: the registry has no such id (the record is quarantined).
            SourceUnavailable: the registry cannot be reached or answers with an error: the landing
                stops, nothing is committed, and the messages are read again.
        """
        if schema_id not in self._schemas:
            self._schemas[schema_id] = self._fetch(schema_id)
        return self._schemas[schema_id]

    def _fetch(self, schema_id: int) -> Any:
        import fastavro

        address = f"{self.url}/schemas/ids/{schema_id}"
        try:
            with urllib.request.urlopen(address, timeout=self.timeout_seconds) as response:  # noqa: S310 - configured URL
                body = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                raise InputError(f"schema id {schema_id}: not found in the Schema Registry at {self.url}") from None
            raise SourceUnavailable(f"ingest.kafka.schema_registry_url: {address} answered HTTP {exc.code}") from None
        except (OSError, ValueError) as exc:
            raise SourceUnavailable(f"ingest.kafka.schema_registry_url: {address} cannot be read ({exc})") from None
        try:
            return fastavro.parse_schema(json.loads(body["schema"]))
        except Exception as exc:  # noqa: BLE001 - fastavro's schema errors are of several types
            raise InputError(f"schema id {schema_id}: the registry's schema cannot be used ({exc})") from None
