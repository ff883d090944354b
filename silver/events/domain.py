"""DOMAIN events from `domains`: the domains compare as a set, so a change is REMOVE old + ADD new."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from silver.aspects import to_json_string
from silver.events.common import explode_items, filter_aspects, items, op_is, to_events, with_parsed, with_set_items

ASPECTS = ("domains",)


def to_domain_events(pairs_df: DataFrame) -> DataFrame:
    """Return the DOMAIN ADD/REMOVE events of the `domains` pairs (modifier and domainUrn: the domain urn)."""
    parsed_df = with_parsed(filter_aspects(pairs_df, ASPECTS), "domains")
    sets_df = with_set_items(parsed_df, F.col("prev.domains"), F.col("new.domains"), lambda d: d)
    items_df = explode_items(sets_df, items("REMOVE", F.col("removed")), items("ADD", F.col("added")))
    domain = F.col("item.new")
    return to_events(
        items_df,
        category="DOMAIN",
        operation=F.col("item.op"),
        modifier=domain,
        parameters={"domainUrn": domain},
        old_value=F.when(op_is("REMOVE"), to_json_string(domain)),
        new_value=F.when(op_is("ADD"), to_json_string(domain)),
    )
