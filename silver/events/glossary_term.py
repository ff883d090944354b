"""GLOSSARY_TERM events from `glossaryTerms`: ADD for each term added to the entity, REMOVE for each removed."""

from __future__ import annotations

from pyspark.sql import DataFrame

from silver.events.common import to_urn_set_events

ASPECTS = ("glossaryTerms",)


def to_glossary_term_events(pairs_df: DataFrame) -> DataFrame:
    """Return the GLOSSARY_TERM ADD/REMOVE events of the `glossaryTerms` pairs (modifier and termUrn: the term)."""
    return to_urn_set_events(
        pairs_df,
        aspect_name=ASPECTS[0],
        items_field="terms",
        urn_of=lambda t: t["urn"],
        category="GLOSSARY_TERM",
        parameter="termUrn",
    )
