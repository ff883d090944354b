"""OWNER events from `ownership`: owners are keyed by (owner, type), so a type change is REMOVE + ADD."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from conf.errors import InputError
from silver.events.common import explode_items, filter_aspects, items, op_is, to_events, with_parsed, with_set_items

ASPECTS = ("ownership",)
OWNER_CATEGORIES = ("OWNER", "OWNERSHIP")


def owner_type(owner: Column) -> Column:
    """An owner's ownership type; DataHub writes CUSTOM when only a type urn is given."""
    return F.coalesce(owner["type"], F.lit("CUSTOM"))


def to_owner_events(pairs_df: DataFrame, category: str = "OWNER") -> DataFrame:
    """Return the owner ADD/REMOVE events of the `ownership` pairs.

    Args:
        pairs_df: aspect version pairs (other aspects are ignored).
        category: the category name: OWNER (the ECE V1 spec) or OWNERSHIP (newer DataHub releases).

    Returns:
        Events with modifier = owner urn and parameters ownerUrn, ownerType (+ ownerTypeUrn when set).

    Raises:
        InputError: for a category other than OWNER or OWNERSHIP.
    """
    if category not in OWNER_CATEGORIES:
        raise InputError(f"category: {category!r} is not one of {', '.join(OWNER_CATEGORIES)}")
    parsed_df = with_parsed(filter_aspects(pairs_df, ASPECTS), "ownership")

    def key(o: Column) -> Column:
        return F.when(o["owner"].isNotNull(), F.concat_ws("\u0001", o["owner"], owner_type(o)))

    sets_df = with_set_items(parsed_df, F.col("prev.owners"), F.col("new.owners"), key)
    items_df = explode_items(sets_df, items("REMOVE", F.col("removed")), items("ADD", F.col("added")))
    owner = F.col("item.new")
    return to_events(
        items_df,
        category=category,
        operation=F.col("item.op"),
        modifier=owner["owner"],
        parameters={"ownerUrn": owner["owner"], "ownerType": owner_type(owner), "ownerTypeUrn": owner["typeUrn"]},
        old_value=F.when(op_is("REMOVE"), F.to_json("item.old")),
        new_value=F.when(op_is("ADD"), F.to_json("item.new")),
    )
