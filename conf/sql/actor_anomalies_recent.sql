-- Unusual actor activity flagged in the last 30 days, highest score first: one row per flagged hour or
-- day, with the feature that stands out most and its usual value (docs/anomalies.md).
SELECT
  a.window_date,
  a.actor,
  a.granularity,
  timestamp_millis(a.window_start) AS window_start,
  timestamp_millis(a.window_end) AS window_end,
  a.score,
  a.kind,
  a.peer_scored,
  get_json_object(a.top_features, '$[0].feature') AS top_feature,
  CAST(get_json_object(a.top_features, '$[0].value') AS DOUBLE) AS top_feature_value,
  CAST(get_json_object(a.top_features, '$[0].baseline') AS DOUBLE) AS top_feature_baseline,
  a.model_version
FROM gold.actor_anomalies AS a
WHERE a.window_date >= date_sub(current_date(), 30)
ORDER BY a.score DESC, a.window_start DESC
