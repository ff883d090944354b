-- One row per actor over all time: activity volume, reach, failed logins and deletes.
SELECT
  a.actor_urn,
  MIN(a.activity_date) AS first_active_date,
  MAX(a.activity_date) AS last_active_date,
  COUNT(*) AS active_days,
  SUM(a.events_total) AS events_total,
  SUM(a.failed_logins) AS failed_logins,
  SUM(a.deletes) AS deletes,
  MAX(a.distinct_entities) AS most_entities_in_a_day
FROM gold.actor_activity_daily AS a
GROUP BY a.actor_urn
