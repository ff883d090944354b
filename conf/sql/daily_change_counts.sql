-- Change events per day, category and operation, with how many entities and actors were involved.
SELECT
  e.event_date,
  e.category,
  e.operation,
  COUNT(*) AS events,
  COUNT(DISTINCT e.aspect_entity_urn) AS entities,
  COUNT(DISTINCT e.actor) AS actors
FROM silver.entity_change_events AS e
GROUP BY e.event_date, e.category, e.operation
