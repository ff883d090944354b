"""TAG events from `globalTags`: ADD for each tag added to the entity, REMOVE for each tag removed."""

from __future__ import annotations

from pyspark.sql import DataFrame

from silver.events.common import to_urn_set_events

ASPECTS = ("globalTags",)


def to_tag_events(pairs_df: DataFrame) -> DataFrame:
    """Return the TAG ADD/REMOVE events of the `globalTags` pairs (modifier and tagUrn: the tag urn)."""
    return to_urn_set_events(
        pairs_df, aspect_name=ASPECTS[0], items_field="tags", urn_of=lambda t: t["tag"], category="TAG", parameter="tagUrn"
    )
