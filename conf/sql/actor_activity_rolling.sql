-- Per actor, as of today (UTC): activity over the last 7 and 30 days (today included), from the daily
-- aggregates; distinct entities come from the audit events themselves (they do not add up across days).
WITH daily AS (
  SELECT actor_urn, activity_date, events_total, failed_logins, deletes, first_event_time, last_event_time
  FROM gold.actor_activity_daily
  WHERE activity_date > date_sub(current_date(), 30) AND activity_date <= current_date()
),
entities AS (
  SELECT
    actor_urn,
    COUNT(DISTINCT CASE WHEN event_date > date_sub(current_date(), 7) THEN entity_urn END) AS distinct_entities_7d,
    COUNT(DISTINCT entity_urn) AS distinct_entities_30d
  FROM gold.audit_events
  WHERE event_date > date_sub(current_date(), 30) AND event_date <= current_date()
  GROUP BY actor_urn
)
SELECT
  d.actor_urn,
  current_date() AS as_of_date,
  SUM(CASE WHEN d.activity_date > date_sub(current_date(), 7) THEN d.events_total ELSE 0 END) AS events_7d,
  SUM(d.events_total) AS events_30d,
  COUNT(CASE WHEN d.activity_date > date_sub(current_date(), 7) THEN 1 END) AS active_days_7d,
  COUNT(*) AS active_days_30d,
  SUM(CASE WHEN d.activity_date > date_sub(current_date(), 7) THEN d.failed_logins ELSE 0 END) AS failed_logins_7d,
  SUM(d.failed_logins) AS failed_logins_30d,
  SUM(CASE WHEN d.activity_date > date_sub(current_date(), 7) THEN d.deletes ELSE 0 END) AS deletes_7d,
  SUM(d.deletes) AS deletes_30d,
  COALESCE(MAX(e.distinct_entities_7d), 0) AS distinct_entities_7d,
  COALESCE(MAX(e.distinct_entities_30d), 0) AS distinct_entities_30d,
  MIN(d.first_event_time) AS first_event_time_30d,
  MAX(d.last_event_time) AS last_event_time
FROM daily AS d
LEFT JOIN entities AS e ON d.actor_urn = e.actor_urn
GROUP BY d.actor_urn
