"""`lakehouse bench search --pseudonymise`: what pseudonymisation costs a search, measured in one run.

The table is loaded once as landing stores it with `privacy.pseudonymise` on (people, source IPs and
user agents as pseudonyms, each identity recorded encrypted). The in-process engine then serves it
alternately with the setting on and off, the same requests each time: on, a request names people by
identity and the server turns them into pseudonyms and shows identities in its answer (the sensitive
token's view); off, the request names the pseudonyms and the answer shows them as stored. The ratio of
the medians is the cost; the load average is recorded with each phase.
"""

from __future__ import annotations

import os
import statistics
from typing import TYPE_CHECKING, Any

from bronze.pseudonym_rules import pseudonym_of
from pipelines.privacy.keystore import key_store_for

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from conf.settings import Settings

# on/off, off/on, on/off: each variant runs first as often as the other, but for the odd round.
ORDERS = (("on", "off"), ("off", "on"))
QUARANTINE_COLUMNS = ("raw_text", "reason")


def pseudonymised_usage_rows(settings: Settings, rows_df: DataFrame) -> DataFrame:
    """Usage rows as landing stores them with privacy on: their identities recorded, the rows pseudonymous."""
    from pyspark.sql import functions as F

    from bronze.pseudonyms import FOUND_IDENTITIES
    from pipelines.privacy.landing import USAGE_FAMILY, pseudonymise_staged, record_found_identities

    # Landing's staged rows also carry a quarantined record's text and reason, and the blank flag: none here.
    missing = {name: F.lit(None).cast("string") for name in QUARANTINE_COLUMNS if name not in rows_df.columns}
    if "blank" not in rows_df.columns:
        missing["blank"] = F.lit(False)
    staged_df = pseudonymise_staged(settings, USAGE_FAMILY, rows_df.withColumns(missing))
    record_found_identities(settings, staged_df)
    return staged_df.drop(FOUND_IDENTITIES, *missing)


def bench_pseudonymisation(settings: Settings, bench_engine: Any, *, token: str, mix: tuple[str, list[str], int, int],
                           rounds: int, **load: Any) -> dict[str, Any]:  # fmt: skip
    """Serve the pseudonymised table `rounds` times with the setting on and off, alternating; return both and their ratio.

    Args:
        bench_engine: `pipelines.bench.search.bench_engine` (latency and load phases of one server).
        mix: the arguments of `request_mix` with the people by identity.
        load: the load arguments of `bench_engine` (clients, duration_s, requests, seed, warmup_s).
    """
    name, actors, now_ms, days = mix
    secret = key_store_for(settings).pseudonym_secret()
    variants = {
        "on": (("privacy.pseudonymise=true",), (name, actors, now_ms, days)),
        "off": (("privacy.pseudonymise=false",), (name, [pseudonym_of(a, secret) for a in actors], now_ms, days)),
    }
    phases: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
    clients = load["clients"]
    for index in range(rounds):
        for variant in ORDERS[index % 2]:
            overrides, variant_mix = variants[variant]
            load_before = os.getloadavg()[0]
            figures = bench_engine(settings, "inprocess", token=token, mix=variant_mix, overrides=overrides, probes=0, **load)
            phase = figures[f"load_{clients}_clients"]
            phases[variant].append({
                "throughput_rps": phase["throughput_rps"], "p50_ms": phase.get("p50_ms"), "p95_ms": phase.get("p95_ms"),
                "errors": phase["errors"], "server_cpu_ms_per_request": phase["server_cpu_ms_per_request"],
                "single_p95_ms": figures["load_1_client"].get("p95_ms"),
                "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2),
            })  # fmt: skip
    medians = {
        variant: {key: statistics.median(p[key] for p in runs) for key in ("throughput_rps", "p95_ms", "server_cpu_ms_per_request")}
        for variant, runs in phases.items()
    }
    on, off = medians["on"], medians["off"]
    return {
        "rounds": rounds,
        "clients": clients,
        "phases": phases,
        "medians": medians,
        # Time per request on over off: the throughput ratio inverted, and the server's CPU per request.
        "time_ratio": round(off["throughput_rps"] / on["throughput_rps"], 3) if on["throughput_rps"] else None,
        "p95_ratio": round(on["p95_ms"] / off["p95_ms"], 3) if off["p95_ms"] else None,
        "cpu_ratio": round(on["server_cpu_ms_per_request"] / off["server_cpu_ms_per_request"], 3)
        if off["server_cpu_ms_per_request"] else None,
        "target_ratio": 1.1,
    }
