"""The constants the gold transforms share with the serving API, in a module without the engine.

The API's workers parse requests with them and import no Spark (docs/api.md#serving-processes); the
DataFrame transforms of `gold.audit` and `gold.anomaly_features` use the same values from here.
"""

from __future__ import annotations

from bronze.formats import USAGE_EVENT_TYPES
from conf.tables import AUDIT_EVENTS, table_spec

# The event types of the Audit Events Search API (DeletePolicyEvent included): one list, bronze's.
EVENT_TYPES = USAGE_EVENT_TYPES
LOGIN_EVENT_TYPES = ("LogInEvent", "FailedLogInEvent")
# The gold.audit_events columns in table order, as the registry declares them.
AUDIT_COLUMNS = table_spec(AUDIT_EVENTS).column_names
# The anomaly model's time buckets, by granularity.
BUCKET_MS = {"hour": 3_600_000, "day": 86_400_000}
