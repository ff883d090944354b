"""Watch mode's compaction: the tables micro-batches write are compacted as the watcher runs.

Every micro-batch adds a small file to most tables it writes: left alone, each later micro-batch reads
more files, and freshness drifts up hour by hour. After every `watch.compact_every_batches` micro-batches
the watcher merges these small files again, one table per turn of its loop (after a micro-batch, or
while nothing waits), so a micro-batch never waits for more than one table's compaction. Only files
below `watch.compact_files_below_mb` are merged: rewriting a large table whole (and the deletion
vectors its MERGEs left) takes seconds, and is the nightly `maintain --optimize`'s work.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession

from conf.errors import ConcurrencyError, error_text
from conf.settings import Settings
from conf.tables import ACTOR_ACTIVITY_DAILY, ASPECT_SNAPSHOTS, AUDIT_CHAIN, AUDIT_EVENTS, ENTITY_CHANGE_EVENTS, KAFKA_OFFSETS, LANDED_FILES, OPENMETADATA_CHANGE_EVENTS, QUARANTINE, SKIPPED_SNAPSHOTS, STAGE_PROGRESS, USAGE_EVENTS
from pipelines.runtime.state_store import STATE_TABLE, fold_state_log
from pipelines.runtime.lock import run_lock
from pipelines.runtime.maintenance import maintenance_for

# What a micro-batch writes, the state first (its deletion vectors cost every micro-batch the most; its
# log is folded into it in the same turn).
COMPACTED_TABLES = (
    STATE_TABLE,
    ASPECT_SNAPSHOTS,
    USAGE_EVENTS,
    LANDED_FILES,
    KAFKA_OFFSETS,
    QUARANTINE,
    ENTITY_CHANGE_EVENTS,
    SKIPPED_SNAPSHOTS,
    AUDIT_EVENTS,
    ACTOR_ACTIVITY_DAILY,
    OPENMETADATA_CHANGE_EVENTS,
    STAGE_PROGRESS,
    AUDIT_CHAIN,
)
# A compaction waits this long for a run that holds the lock, then tries again at the next turn.
_LOCK_WAIT_SECONDS = 1.0


class Compaction:
    """Counts micro-batches and compacts the tables they write, one table per turn, every `every_batches`."""

    def __init__(
        self, settings: Settings, every_batches: int, emit: Callable[[dict[str, Any]], None], files_below_mb: int = 0
    ):
        """Start counting.

        Args:
            settings: the lakehouse settings (home, run lock).
            every_batches: micro-batches between two rounds of compaction; 0 never compacts.
            emit: writes one structured log line.
            files_below_mb: merge only the files smaller than this many MiB; 0 rewrites every file.
        """
        self.settings = settings
        self.every_batches = every_batches
        self.files_below_mb = files_below_mb
        self.emit = emit
        self.batches = 0
        self.queue: list[str] = []

    def batch_done(self) -> None:
        """Count a micro-batch that wrote something; queue a round of compaction when one is due."""
        if not self.every_batches:
            return
        self.batches += 1
        if self.batches >= self.every_batches and not self.queue:
            self.batches = 0
            self.queue = list(COMPACTED_TABLES)

    def compact_next(self, spark: SparkSession) -> None:
        """Compact the next queued table under the run lock; log what it did.

        A held lock leaves the table queued for the next turn. Any other failure is logged and the table
        is left to the next round: compaction only speeds reads up, so the watch goes on without it.
        """
        if not self.queue:
            return
        table_key = self.queue[0]
        started = time.monotonic()
        try:
            with run_lock(self.settings, owner="lakehouse run --watch (compaction)", wait_seconds=_LOCK_WAIT_SECONDS):
                folded = fold_state_log(spark, self.settings) if table_key == STATE_TABLE else 0
                metrics = maintenance_for(self.settings, spark).optimize(
                    table_key, small_file_mb=self.files_below_mb or None
                )
        except ConcurrencyError as exc:
            self.emit({"event": "compaction_waiting", "table": table_key, "reason": str(exc)})
            return
        except Exception as exc:  # noqa: BLE001 - see the docstring: a failed compaction never stops the watch
            self.queue.pop(0)
            self.emit({"event": "compaction_failed", "table": table_key, "error": error_text(exc)})
            return
        self.queue.pop(0)
        self.emit(
            {
                "event": "compacted",
                "table": table_key,
                "seconds": round(time.monotonic() - started, 3),
                "files_removed": int(metrics.get("numFilesRemoved", 0)),
                "files_added": int(metrics.get("numFilesAdded", 0)),
                "folded_rows": folded,
            }
        )
