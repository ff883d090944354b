"""Action requests (proposals) as MCL lines of actionRequestInfo and actionRequestStatus versions."""

from __future__ import annotations

import random
from typing import Any

from bronze.formats import ACTION_REQUEST_TYPES
from datagen.catalogue import OWNER_TYPES, OWNER_TYPE_WEIGHTS, STRUCTURED_PROPERTIES, TERM_NODES, Universe
from datagen.files import PartTask, without_gc, worker_state, write_records
from datagen.manifest import GeneratedFile
from datagen.wire import FMT_MCL, NO_RUN, EntityWriter, Sink, dump_json, stamp


def action_request_part(task: PartTask) -> list[GeneratedFile]:
    """Generate and write action requests [first, last): actionRequestInfo and actionRequestStatus versions."""
    with without_gc():
        return _action_requests(task)


def _action_requests(task: PartTask) -> list[GeneratedFile]:
    u, options = worker_state()
    sink = Sink()
    span = u.end_ms - u.start_ms
    for number in range(task.first, task.last):
        rng = random.Random(f"{u.seed}/request/{number}")
        request_type = ACTION_REQUEST_TYPES[number % len(ACTION_REQUEST_TYPES)] if number < len(
            ACTION_REQUEST_TYPES) else rng.choice(ACTION_REQUEST_TYPES)
        ident = "%08x-%04x-4%03x-%04x-%012x" % (rng.getrandbits(32), rng.getrandbits(16), rng.getrandbits(12),
                                                0x8000 | rng.getrandbits(14), rng.getrandbits(48))
        urn = f"urn:li:actionRequest:{ident}"
        writer = EntityWriter("actionRequest", urn, FMT_MCL, sink, rng, options)
        t = u.start_ms + int(span * 0.97 * rng.random())
        creator = u.actor(rng)
        info = _request_info(u, rng, request_type, t, creator)
        writer.upsert("actionRequestInfo", dump_json(info), t, creator, NO_RUN, "request_created")
        writer.upsert("actionRequestStatus", dump_json({"status": "PENDING", "lastModified": stamp(t + 1, creator)}),
                      t + 1, creator, NO_RUN, "request_status")
        later = t + 60_000 + int((u.end_ms - t) * 0.5 * rng.random())
        if rng.random() < 0.25:
            # Reassigned (or the proposal edited): a second actionRequestInfo version.
            info["assignedUsers"] = [u.actor(rng)]
            if request_type == "UPDATE_DESCRIPTION":
                info["params"]["updateDescriptionProposal"]["description"] += " (edited)"
            writer.upsert("actionRequestInfo", dump_json(info), later, creator, NO_RUN, "request_updated")
            later += 60_000
        if rng.random() < 0.7:
            reviewer = u.actor(rng)
            status = {"status": "COMPLETED", "result": rng.choice(("ACCEPTED", "ACCEPTED", "REJECTED")),
                      "lastModified": stamp(later, reviewer)}
            if rng.random() < 0.3:
                status["note"] = rng.choice(("Looks right", "Please use the curated term instead", "Duplicate"))
            writer.upsert("actionRequestStatus", dump_json(status), later, reviewer, NO_RUN, "request_status")
    return write_records(sink, task, random.Random(f"{u.seed}/malformed/action_requests/{task.part}"))


def _request_info(u: Universe, rng: random.Random, request_type: str, t: int, creator: str) -> dict[str, Any]:
    if request_type == "CREATE_GLOSSARY_TERM":
        node = rng.choice(TERM_NODES)
        name = rng.choice(("Churn Rate", "Net Revenue", "Active Customer", "Lifetime Value", "Shipping Address",
                           "Data Owner", "Gross Margin"))
        params = {"createGlossaryTermProposal": {"name": name, "parentNode": f"urn:li:glossaryNode:{node}",
                                                 "description": f"{name} as used by {node.lower()} reporting"}}
        info: dict[str, Any] = {"type": request_type, "assignedUsers": [], "assignedGroups": [],
                                "resourceType": "glossaryTerm", "params": params, "created": t, "createdBy": creator}
        return info
    resource_index = u.random_of(rng, "dataset") if rng.random() < 0.7 else u.random_asset(rng)
    resource = u.urn(resource_index)
    if request_type == "TAG_ASSOCIATION":
        params: dict[str, Any] = {"tagProposal": {"tag": rng.choice(u.tags)}}
    elif request_type == "TERM_ASSOCIATION":
        params = {"glossaryTermProposal": {"glossaryTerm": rng.choice(u.terms)}}
    elif request_type == "DOMAIN_ASSOCIATION":
        params = {"domainProposal": {"domains": [rng.choice(u.domains)]}}
    elif request_type == "OWNER_ASSOCIATION":
        owner_type, type_urn = rng.choices(OWNER_TYPES, weights=OWNER_TYPE_WEIGHTS)[0]
        params = {"ownerProposal": {"owners": [{"owner": u.actor(rng), "type": owner_type, "typeUrn": type_urn}]}}
    elif request_type == "UPDATE_DESCRIPTION":
        params = {"updateDescriptionProposal": {"description": rng.choice((
            "Orders placed through the web shop, one row per order line",
            "Customer master data; PII columns are masked outside finance",
            "Aggregated daily revenue in EUR (\u20ac), restated monthly"))}}
    else:
        urn, kind, choices = rng.choice([p for p in STRUCTURED_PROPERTIES if p[1] != "user"])
        values = ([{"double": rng.choice(choices)}] if kind == "double"
                  else [{"string": v} for v in rng.sample(choices, 1 if kind == "string" else 2)])
        params = {"structuredPropertyProposal": {"structuredPropertyValues": [{"propertyUrn": urn, "values": values}]}}
    return {"type": request_type, "assignedUsers": [], "assignedGroups": [rng.choice(u.groups)],
            "resourceType": u.type_of(resource_index), "resource": resource, "params": params,
            "created": t, "createdBy": creator}
