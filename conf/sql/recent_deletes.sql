-- Soft and hard deletes (and restores) of the last 30 days, newest first.
SELECT
  e.event_date,
  e.entity_urn,
  e.entity_type,
  e.operation,
  e.actor,
  e.event_id
FROM silver.entity_change_events AS e
WHERE e.category = 'LIFECYCLE'
  AND e.operation IN ('SOFT_DELETE', 'HARD_DELETE', 'REINSTATE')
  AND e.event_date >= date_sub(current_date(), 30)
ORDER BY e.event_time DESC
