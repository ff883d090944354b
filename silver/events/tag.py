"""TAG events from `globalTags`: ADD for each tag added to the entity, REMOVE for each tag removed."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from silver.events.common import explode_items, filter_aspects, items, op_is, to_events, with_parsed, with_set_items

ASPECTS = ("globalTags",)


def to_tag_events(pairs_df: DataFrame) -> DataFrame:
    """Return the TAG ADD/REMOVE events of the `globalTags` pairs (modifier and tagUrn: the tag urn)."""
    parsed_df = with_parsed(filter_aspects(pairs_df, ASPECTS), "globalTags")
    sets_df = with_set_items(parsed_df, F.col("prev.tags"), F.col("new.tags"), lambda t: t["tag"])
    items_df = explode_items(sets_df, items("REMOVE", F.col("removed")), items("ADD", F.col("added")))
    tag = F.col("item.new.tag")
    return to_events(
        items_df,
        category="TAG",
        operation=F.col("item.op"),
        modifier=tag,
        parameters={"tagUrn": tag},
        old_value=F.when(op_is("REMOVE"), F.to_json("item.old")),
        new_value=F.when(op_is("ADD"), F.to_json("item.new")),
    )
