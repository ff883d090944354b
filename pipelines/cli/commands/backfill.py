"""`lakehouse backfill`: land DataHub's whole history from its database (`ingest.backfill`)."""

from __future__ import annotations

import typer

from pipelines.cli.console import console, print_json_lines


def register(app: typer.Typer) -> None:
    """Add `backfill` to the CLI."""
    from pipelines.cli.app import state_of

    @app.command("backfill")
    def backfill_command(
        ctx: typer.Context,
        wait: float = typer.Option(0.0, "--wait", min=0, help="Seconds to wait for another run's lock."),
        as_json: bool = typer.Option(False, "--json", help="Print the report as one JSON object."),
        set_kafka_offsets: bool = typer.Option(
            False, "--set-kafka-offsets",
            help="Commit the hand-off offsets of ingest.backfill.handoff_topics as the consumer group's (the Kafka source starts there with ingest.kafka.start_at: group_offsets).",
        ),  # fmt: skip
    ) -> None:
        """Land every version of DataHub's metadata_aspect_v2 table into bronze, window by window; resumes after the last window landed. Then print where the Kafka source must start."""
        from conf.errors import ConfigError
        from pipelines.batch.backfill import committed_mark, run_backfill
        from pipelines.batch.backfill.reader import read_password

        state = state_of(ctx)
        kafka = state.settings.ingest.kafka
        if set_kafka_offsets and not kafka.enabled:
            raise ConfigError("--set-kafka-offsets: ingest.kafka.bootstrap_servers is empty; name the brokers to set the offsets on")
        read_password(state.settings.ingest.backfill)  # a missing password stops here, before the engine starts

        def on_window(report, rows: int) -> None:
            if not as_json:
                totals = report.totals
                console.print(
                    f"window {report.batch_id}: {totals['records_read']} versions, {totals['records_landed']} landed, "
                    f"{totals['records_quarantined']} quarantined ({rows} so far)",
                    highlight=False,
                )

        with state.locked_session("lakehouse backfill", wait) as spark:
            report = run_backfill(spark, state.settings, on_window=on_window)
            mark = committed_mark(spark, state.settings)
        handoff = _handoff(state.settings, mark, set_kafka_offsets)
        if as_json:
            print_json_lines([{**report.as_dict(), "handoff": handoff}])
            return
        totals = report.totals
        resumed = "" if report.resumed_after_us is None else f", resumed after createdon {report.resumed_after_us} µs"
        console.print(
            f"backfill from {report.source}{resumed}: {len(report.windows)} windows, {totals['records_read']} versions = "
            f"{totals['records_landed']} landed + {totals['records_quarantined']} quarantined + "
            f"{totals['duplicates_skipped']} duplicates, in {report.seconds:.1f} s; `lakehouse refine` (or `run`) derives "
            "their change events",
            highlight=False,
        )
        _print_handoff(state.settings, handoff, set_kafka_offsets)


def _handoff(settings, mark: int | None, commit: bool) -> dict | None:
    """The hand-off after the backfill's mark (the offsets when Kafka is configured), committed when asked.

    A broker that cannot be asked leaves the offsets out (`error` says why): the backfill itself is done.
    With `commit` it is the command's error.
    """
    from conf.errors import SourceUnavailable
    from pipelines.batch.backfill.handoff import commit_handoff, find_handoff, format_ms, handoff_time_ms

    if mark is None:
        return None
    time_ms = handoff_time_ms(mark, settings.ingest.backfill.handoff_margin_seconds)
    timed = {"handoff_time_ms": time_ms, "handoff_time": format_ms(time_ms), "partitions": [], "missing_topics": []}
    if not settings.ingest.kafka.enabled:
        return timed
    try:
        found = find_handoff(settings, mark)
    except SourceUnavailable as exc:
        if commit:
            raise
        return {**timed, "error": str(exc)}
    if commit:
        commit_handoff(settings, found)
    return found.as_dict()


def _print_handoff(settings, handoff: dict | None, committed: bool) -> None:
    if handoff is None:
        return
    topics = ", ".join(settings.ingest.backfill.handoff_topics)
    console.print(
        f"hand-off: the Kafka source must read {topics} from the messages of {handoff['handoff_time']} "
        f"({handoff['handoff_time_ms']} ms) on; versions read both ways yield one change event",
        highlight=False,
    )
    if not settings.ingest.kafka.enabled:
        console.print(
            "  set ingest.kafka.bootstrap_servers to find the offsets (and --set-kafka-offsets to set them), or set the "
            "group's offsets to that time yourself (kafka-consumer-groups --reset-offsets --to-datetime)",
            highlight=False,
        )
        return
    if handoff.get("error"):
        console.print(f"  offsets not found: {handoff['error']}", highlight=False)
        return
    for partition in handoff["partitions"]:
        gap = "" if partition["continuous"] else "  (retention removed messages after the hand-off time: run the backfill again)"
        console.print(f"  {partition['source']}: offset {partition['offset']}{gap}", highlight=False)
    for topic in handoff["missing_topics"]:
        console.print(f"  {topic}: not on the broker", highlight=False)
    group = settings.ingest.kafka.group_id
    if committed:
        starts = "starts there" if settings.ingest.kafka.start_at == "group_offsets" else "starts there with ingest.kafka.start_at: group_offsets"
        console.print(f"  committed as consumer group {group!r}'s offsets: the Kafka source {starts}", highlight=False)
    else:
        console.print(f"  not set: --set-kafka-offsets commits them as consumer group {group!r}'s offsets", highlight=False)
