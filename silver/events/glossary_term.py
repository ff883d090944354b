"""GLOSSARY_TERM events from `glossaryTerms`: ADD for each term added to the entity, REMOVE for each removed."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from silver.events.common import explode_items, filter_aspects, items, op_is, to_events, with_parsed, with_set_items

ASPECTS = ("glossaryTerms",)


def to_glossary_term_events(pairs_df: DataFrame) -> DataFrame:
    """Return the GLOSSARY_TERM ADD/REMOVE events of the `glossaryTerms` pairs (modifier and termUrn: the term)."""
    parsed_df = with_parsed(filter_aspects(pairs_df, ASPECTS), "glossaryTerms")
    sets_df = with_set_items(parsed_df, F.col("prev.terms"), F.col("new.terms"), lambda t: t["urn"])
    items_df = explode_items(sets_df, items("REMOVE", F.col("removed")), items("ADD", F.col("added")))
    term = F.col("item.new.urn")
    return to_events(
        items_df,
        category="GLOSSARY_TERM",
        operation=F.col("item.op"),
        modifier=term,
        parameters={"termUrn": term},
        old_value=F.when(op_is("REMOVE"), F.to_json("item.old")),
        new_value=F.when(op_is("ADD"), F.to_json("item.new")),
    )
