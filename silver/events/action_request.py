"""LIFECYCLE CREATE events of action requests (proposals), from the first version of `actionRequestInfo`.

Parameters are exactly those the ECE V1 catalog shows for each of the seven request types; later
versions of a request and its `actionRequestStatus` aspect emit nothing.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from bronze.formats import ACTION_REQUEST_TYPES
from silver.aspects import entity_type_of_urn, to_json_string, to_property_values_json
from silver.events.common import filter_aspects, to_events, with_parsed

ASPECTS = ("actionRequestInfo",)
ENTITY_TYPE = "actionRequest"


def _json_array(items: Column, to_token) -> Column:
    """Compact JSON array text of `items`, each rendered by `to_token` (null array: null)."""
    return F.when(items.isNotNull(), F.concat(F.lit("["), F.array_join(F.transform(items, to_token), ","), F.lit("]")))


def _owner_json(o) -> Column:
    return F.to_json(
        F.struct(
            F.coalesce(o["type"], F.lit("CUSTOM")).alias("type"),
            o["typeUrn"].alias("typeUrn"),
            o["owner"].alias("ownerUrn"),
        )
    )


def _assignment_json(a) -> Column:
    return F.concat(
        F.lit('{"propertyUrn":'),
        to_json_string(a["propertyUrn"]),
        F.lit(',"values":'),
        to_property_values_json(a["values"]),
        F.lit("}"),
    )


def to_action_request_events(pairs_df: DataFrame) -> DataFrame:
    """Return one LIFECYCLE CREATE event (entityType actionRequest) per new action request.

    Parameters by request type: actionRequestType and resourceType always; resourceUrn for requests on
    a resource; domains / owners / structuredProperties as JSON text; tagUrn, glossaryTermUrn,
    description, or glossaryEntityName + parentNodeUrn. Proposal fields are read from DataHub's
    ActionRequestParams (`tagProposal.tag`, ...) or from flat keys (`params.tag`, ...).
    """
    parsed_df = with_parsed(filter_aspects(pairs_df, ASPECTS), "actionRequestInfo")
    p = F.col("new.params")
    request_type = F.col("new.type")
    tag = F.coalesce(p["tagProposal"]["tag"], F.try_element_at(p["tagProposal"]["tags"], F.lit(1)), p["tag"])
    term = F.coalesce(
        p["glossaryTermProposal"]["glossaryTerm"],
        F.try_element_at(p["glossaryTermProposal"]["glossaryTerms"], F.lit(1)),
        p["glossaryTerm"],
    )
    domains = F.coalesce(p["domainProposal"]["domains"], p["domains"])
    owners = F.coalesce(p["ownerProposal"]["owners"], p["owners"])
    assignments = F.coalesce(p["structuredPropertyProposal"]["structuredPropertyValues"], p["structuredPropertyValues"])
    resource = F.col("new.resource")
    resource_type = F.coalesce(
        F.col("new.resourceType"),
        entity_type_of_urn(resource),
        F.when(request_type == "CREATE_GLOSSARY_TERM", F.lit("glossaryTerm")),
    )

    def only(*types: str):
        return lambda value: F.when(request_type.isin(list(types)), value)

    on_resource = only(*[t for t in ACTION_REQUEST_TYPES if t != "CREATE_GLOSSARY_TERM"])
    entries = {
        "actionRequestType": request_type,
        "resourceUrn": on_resource(resource),
        "resourceType": resource_type,
        "domains": only("DOMAIN_ASSOCIATION")(_json_array(domains, to_json_string)),
        "owners": only("OWNER_ASSOCIATION")(_json_array(owners, _owner_json)),
        "tagUrn": only("TAG_ASSOCIATION")(tag),
        "glossaryTermUrn": only("TERM_ASSOCIATION")(term),
        "glossaryEntityName": only("CREATE_GLOSSARY_TERM")(
            F.coalesce(p["createGlossaryTermProposal"]["name"], p["name"])
        ),
        "parentNodeUrn": only("CREATE_GLOSSARY_TERM")(
            F.coalesce(p["createGlossaryTermProposal"]["parentNode"], p["parentNode"])
        ),
        "description": only("UPDATE_DESCRIPTION")(
            F.coalesce(p["updateDescriptionProposal"]["description"], p["description"])
        ),
        "structuredProperties": only("STRUCTURED_PROPERTY_ASSOCIATION")(_json_array(assignments, _assignment_json)),
    }
    first_version = F.col("prev_change_type").isNull() & ~F.col("is_delete") & request_type.isNotNull()
    return to_events(
        parsed_df.filter(first_version),
        category="LIFECYCLE",
        operation="CREATE",
        entity_type=F.lit(ENTITY_TYPE),
        parameters=entries,
        new_value=F.col("new_json"),
    )
