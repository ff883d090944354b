"""The scheduled jobs: land -> refine -> publish, each stage resumable, every run tracked in MLflow."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from conf.errors import InputError, LakehouseError, StageError, error_text
from conf.settings import Settings
from conf.tables import ENTITY_CHANGE_EVENTS, TABLES
from pipelines.runtime.engine import open_session
from pipelines.runtime.faults import crash_point
from pipelines.runtime.home import home_of
from pipelines.runtime.io import read_table
from pipelines.runtime.lock import run_lock, running_step
from pipelines.runtime.maintenance import maintenance_for
from pipelines.runtime.progress import StageResult
from pipelines.runtime.tracking import tracked_run

if TYPE_CHECKING:
    from pipelines.batch.kafka.client import Message

JOB_STAGES = ("land", "refine", "publish")
# How a run publishes the OpenMetadata ChangeEvents (run_job's `openmetadata`).
OPENMETADATA_AFTER_AUDIT, OPENMETADATA_ALONGSIDE, OPENMETADATA_LATER = "after_audit", "alongside", "later"
OPENMETADATA_MODES = (OPENMETADATA_AFTER_AUDIT, OPENMETADATA_ALONGSIDE, OPENMETADATA_LATER)


@dataclass
class StageReport:
    """One stage of one run: what it consumed and produced, and how long it took."""

    stage: str
    seconds: float
    batch_ids: tuple[str, ...] = ()
    rows_in: int = 0
    rows_out: int = 0
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def rows_per_second(self) -> float:
        """Rows read per second of stage time."""
        return round(self.rows_in / self.seconds, 1) if self.seconds > 0 else 0.0


@dataclass
class RunSummary:
    """What one pipeline run did, as printed and stored with its MLflow run."""

    run_id: str
    stages: list[StageReport]
    versions_before: dict[str, int]
    versions_after: dict[str, int]
    events_by_category: dict[str, int]
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        """The summary as plain JSON-able data."""
        data = asdict(self)
        for stage, report in zip(data["stages"], self.stages):
            stage["rows_per_second"] = report.rows_per_second
        return data


def run_job(
    settings: Settings,
    stages: Sequence[str] = JOB_STAGES,
    *,
    paths: Sequence[Path] | None = None,
    wait_seconds: float = 0.0,
    on_stage: Callable[[str], None] | None = None,
    land_progress: Any = None,
    spark: SparkSession | None = None,
    deliver: bool = True,
    kafka_messages: Sequence[Message] | None = None,
    openmetadata: str = OPENMETADATA_AFTER_AUDIT,
) -> RunSummary:
    """Run pipeline stages in order under the run lock, as one MLflow run.

    Each stage consumes only what its upstream finished and not yet it (ops.stage_progress), so a run
    that was killed resumes where it stopped and a run with nothing new does nothing.

    Args:
        settings: the lakehouse settings.
        stages: a subsequence of land, refine, publish.
        paths: files or folders to land; default (None) the configured landing folders; empty: no files.
        wait_seconds: how long to wait for another run's lock.
        on_stage: called with each stage's name as it starts (progress display).
        land_progress: passed to landing to report per-file progress.
        spark: an open session (tables registered) to run in; default a new one for this run. A
            long-running caller (watch mode) keeps one session across its micro-batches.
        deliver: deliver the subscriptions' pending events after publishing; watch mode delivers
            from its own thread instead, so a slow receiver never holds up a micro-batch.
        kafka_messages: with ingest.kafka configured, the messages to land (watch mode's feed); None
            lands everything the topics hold now.
        openmetadata: how the publish stage treats the OpenMetadata ChangeEvents.
            OPENMETADATA_AFTER_AUDIT (a batch run): published after the audit tables.
            OPENMETADATA_ALONGSIDE (watch mode): those of the batches refined before this run are
            published from a second thread while the run's stages go on; the publish stage publishes
            the audit tables alone, and this run's batches get their ChangeEvents in a later run. The
            ChangeEvents are the longest part of a micro-batch's publish, and the audit rows (what
            search serves) do not wait for them. Their report comes last, as stage
            `publish_openmetadata`.
            OPENMETADATA_LATER (watch mode, between two of those): not published; they wait for a
            later run.

    Returns:
        The run summary.

    Raises:
        InputError: for an unknown stage or openmetadata mode.
        ConcurrencyError: when another run holds the lock.
    """
    unknown = [s for s in stages if s not in JOB_STAGES]
    if unknown or not stages:
        raise InputError(f"stages: {list(stages)!r} must be a non-empty subset of {', '.join(JOB_STAGES)}")
    if openmetadata not in OPENMETADATA_MODES:
        raise InputError(f"openmetadata: {openmetadata!r} must be one of {', '.join(OPENMETADATA_MODES)}")
    ordered = [s for s in JOB_STAGES if s in stages]
    name = "run" if ordered == list(JOB_STAGES) else "job-" + "-".join(ordered)
    started = time.monotonic()
    with run_lock(settings, owner=f"lakehouse {name}", wait_seconds=wait_seconds):
        with tracked_run(settings, name, tags={"profile": settings.profile}) as tracker:
            with contextlib.nullcontext(spark) if spark is not None else open_session(settings) as spark:
                maintenance = maintenance_for(settings, spark)
                versions_before = {key: maintenance.version(key) for key in TABLES}
                tracker.log_params(
                    {"profile": settings.profile, "home": str(settings.home), "stages": ",".join(ordered)}
                )
                reports = []
                alongside = openmetadata == OPENMETADATA_ALONGSIDE
                after_audit = openmetadata == OPENMETADATA_AFTER_AUDIT
                with _openmetadata_alongside(spark, settings, tracker.run_id, alongside) as side:
                    for stage in ordered:
                        crash_point(f"before_{stage}")
                        if on_stage:
                            on_stage(stage)
                        try:
                            with running_step(stage):
                                reports.append(
                                    _run_stage(spark, settings, stage, tracker.run_id, paths, land_progress, deliver,
                                               kafka_messages, openmetadata=after_audit)  # fmt: skip
                                )
                        except LakehouseError:
                            raise  # the project's own errors name their field and value already
                        except Exception as exc:  # the engine's errors (pyspark, grpc, OS) are not one family
                            raise _stage_error(spark, settings, stage, versions_before, exc) from exc
                        crash_point(f"after_{stage}")
                reports.extend(side)
                versions_after = {key: maintenance.version(key) for key in TABLES}
                batch_ids = sorted({b for r in reports for b in r.batch_ids})
                refined = sorted({b for r in reports if r.stage == "refine" for b in r.batch_ids})
                events_by_category = _events_by_category(spark, settings, refined)
            summary = RunSummary(
                run_id=tracker.run_id,
                stages=reports,
                versions_before=versions_before,
                versions_after=versions_after,
                events_by_category=events_by_category,
                seconds=round(time.monotonic() - started, 3),
            )
            tracker.log_params(
                {
                    "batches": ",".join(batch_ids) or "-",
                    **{f"version_before.{k}": v for k, v in versions_before.items()},
                    **{f"version_after.{k}": v for k, v in versions_after.items()},
                }
            )
            tracker.log_metrics(run_metrics(summary))
            tracker.summary["run"] = summary.as_dict()
    return summary


# The progress stage whose pending batches a failed job stage was working on.
_PROGRESS_STAGE = {"refine": "refine", "publish": "publish_audit"}


def _stage_error(
    spark: SparkSession, settings: Settings, stage: str, versions_before: dict[str, int], exc: BaseException
) -> StageError:
    """What a failed stage was doing and what the run had committed: read afresh, best effort."""
    batch_ids: list[str] = []
    committed: list[str] = []
    with contextlib.suppress(Exception):  # the engine may be what failed: the message must still be made
        if stage in _PROGRESS_STAGE:
            from pipelines.runtime.progress import pending_batches

            batch_ids = pending_batches(spark, settings, _PROGRESS_STAGE[stage])
    with contextlib.suppress(Exception):
        maintenance = maintenance_for(settings, spark)
        committed = [key for key in TABLES if maintenance.version(key) != versions_before.get(key)]
    return StageError(stage, batch_ids, committed, error_text(exc))


def _run_stage(
    spark: SparkSession,
    settings: Settings,
    stage: str,
    run_id: str,
    paths: Sequence[Path] | None,
    land_progress: Any,
    deliver: bool,
    kafka_messages: Sequence[Message] | None,
    openmetadata: bool,
) -> StageReport:
    started = time.monotonic()
    if stage == "land":
        from pipelines.batch.landing import land_paths
        from pipelines.batch.landing.model import landing_stage_result

        if paths is None:
            # The configured landing folders are where new files will arrive: an empty one is fine (on
            # object storage, where folders do not exist, a prefix without objects is one).
            home = home_of(settings)
            for folder in settings.landing_paths:
                if isinstance(folder, Path):
                    folder.mkdir(parents=True, exist_ok=True)
        files = list(
            [f for f in settings.landing_paths if isinstance(f, Path) or home.exists(f)] if paths is None else paths
        )
        landings = [land_paths(spark, settings, files, progress=land_progress)] if files else []
        if settings.ingest.kafka.enabled:
            from pipelines.batch.kafka.source import land_kafka

            landings.extend(land_kafka(spark, settings, kafka_messages, progress=land_progress))
        results = [landing_stage_result(landings)]
    elif stage == "refine":
        from pipelines.batch.refine import refine

        results = [refine(spark, settings, run_id=run_id)]
    else:
        results = _publish(spark, settings, run_id, deliver, openmetadata)
    return _stage_report(stage, time.monotonic() - started, results)


def _stage_report(stage: str, seconds: float, results: Sequence[StageResult]) -> StageReport:
    return StageReport(
        stage=stage,
        seconds=round(seconds, 3),
        batch_ids=tuple(sorted({b for r in results for b in r.batch_ids})),
        rows_in=sum(r.rows_in for r in results),
        rows_out=sum(r.rows_out for r in results),
        metrics={
            # Each sub-stage's own counts too: the publish step runs two (publish_audit, publish_openmetadata).
            **{f"{r.stage}.{name}": float(getattr(r, name)) for r in results for name in ("rows_in", "rows_out")},
            **{f"{r.stage}.{k}": float(v) for r in results for k, v in r.metrics.items()},
        },
    )


def _publish(
    spark: SparkSession, settings: Settings, run_id: str, deliver: bool, openmetadata: bool
) -> list[StageResult]:
    from pipelines.batch.publish_audit import publish_audit
    from pipelines.batch.publish_openmetadata import publish_openmetadata
    from pipelines.batch.publish_lineage import publish_lineage
    from pipelines.subscriptions.delivery import deliver_pending

    with running_step("publish", "audit_events"):
        results = [publish_audit(spark, settings, run_id=run_id)]
    if openmetadata:
        crash_point("between_publish_audit_and_openmetadata")
        with running_step("publish", "openmetadata"):
            results.append(publish_openmetadata(spark, settings, run_id=run_id))
    with running_step("publish", "lineage_edges"):
        results.append(publish_lineage(spark, settings, run_id=run_id))
    if settings.bi.sync_on_publish:
        from pipelines.bi.server import sync_after_publish

        with running_step("publish", "sql_server_sync"):
            results.append(sync_after_publish(settings))
    if deliver:
        # Receiver failures never raise: they are retried, recorded on the subscription or dead-lettered.
        with running_step("publish", "deliver"):
            results.append(deliver_pending(spark, settings))
    return results


@contextlib.contextmanager
def _openmetadata_alongside(
    spark: SparkSession, settings: Settings, run_id: str, enabled: bool
) -> Iterator[list[StageReport]]:
    """Publish the pending OpenMetadata ChangeEvents from a second thread during the block (when enabled).

    Yields the list that receives the publish's report once the block has ended. The thread is waited
    for even when the block fails, since it writes under the block's run lock; its own error is raised
    only when the block succeeded.
    """
    reports: list[StageReport] = []
    if not enabled:
        yield reports
        return
    from pipelines.batch.publish_openmetadata import STAGE, publish_openmetadata

    def publish() -> StageReport:
        started = time.monotonic()
        result = publish_openmetadata(spark, settings, run_id=run_id)
        return _stage_report(STAGE, time.monotonic() - started, [result])

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="publish-openmetadata") as side:
        future = side.submit(publish)
        try:
            yield reports
        except BaseException:
            wait([future])
            raise
        reports.append(future.result())


def _events_by_category(spark: SparkSession, settings: Settings, batch_ids: list[str]) -> dict[str, int]:
    if not batch_ids:
        return {}
    rows = (
        read_table(spark, settings, ENTITY_CHANGE_EVENTS)
        .filter(F.col("batch_id").isin(batch_ids))
        .groupBy("category")
        .count()
        .collect()
    )
    return {r.category: r["count"] for r in sorted(rows, key=lambda r: r.category)}


def run_metrics(summary: RunSummary) -> dict[str, float]:
    """A run's MLflow metrics: durations, rows per stage and sub-stage, events per category."""
    metrics: dict[str, float] = {"duration_s": summary.seconds}
    for report in summary.stages:
        metrics[f"{report.stage}.duration_s"] = report.seconds
        metrics[f"{report.stage}.rows_in"] = report.rows_in
        metrics[f"{report.stage}.rows_out"] = report.rows_out
        metrics[f"{report.stage}.rows_per_second"] = report.rows_per_second
        metrics[f"{report.stage}.batches"] = len(report.batch_ids)
        metrics.update(report.metrics)
    for category, count in summary.events_by_category.items():
        metrics[f"events.{category}"] = count
    return metrics

