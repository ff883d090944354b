-- Every change event of every entity in time order: "what happened to this entity, and who did it".
SELECT
  e.entity_urn,
  e.entity_type,
  e.aspect_entity_urn,
  e.event_date,
  e.event_time,
  e.actor,
  e.category,
  e.operation,
  e.modifier,
  e.aspect_name,
  e.old_value,
  e.new_value,
  e.event_id
FROM silver.entity_change_events AS e
