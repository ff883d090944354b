-- The latest version of every (entity, aspect): silver.aspect_state with the rows of its log applied, as
-- MERGEing each logged batch in turn would give it. A logged row replaces its key's row when its order key
-- is newer (of two equal ones the later); a flag row sets entity_deleted on the row its key holds by then.
WITH logged_keys AS (
  SELECT DISTINCT
    l.entity_urn,
    l.aspect_name
  FROM silver.aspect_state_log AS l
), candidates AS (
  SELECT
    s.entity_urn,
    s.entity_type,
    s.aspect_name,
    s.aspect_json,
    s.version,
    s.order_key,
    s.change_type,
    s.created_time,
    s.created_actor,
    s.deleted,
    s.entity_deleted,
    s.record_hash,
    s.batch_id,
    s.updated_at,
    s.source_file,
    s.line_number,
    s.prev_version,
    s.prev_order_key,
    s.prev_change_type,
    s.prev_created_time,
    s.prev_created_actor,
    s.prev_record_hash,
    s.prev_batch_id,
    FALSE AS flag_only,
    CAST(0 AS BIGINT) AS log_seq,
    k.entity_urn IS NOT NULL AS logged
  FROM silver.aspect_state AS s
  LEFT JOIN logged_keys AS k
    ON s.entity_urn = k.entity_urn AND s.aspect_name = k.aspect_name
  UNION ALL
  SELECT
    l.entity_urn,
    l.entity_type,
    l.aspect_name,
    l.aspect_json,
    l.version,
    l.order_key,
    l.change_type,
    l.created_time,
    l.created_actor,
    l.deleted,
    l.entity_deleted,
    l.record_hash,
    l.batch_id,
    l.updated_at,
    l.source_file,
    l.line_number,
    l.prev_version,
    l.prev_order_key,
    l.prev_change_type,
    l.prev_created_time,
    l.prev_created_actor,
    l.prev_record_hash,
    l.prev_batch_id,
    l.flag_only,
    l.log_seq,
    TRUE AS logged
  FROM silver.aspect_state_log AS l
), ranked AS (
  SELECT
    c.*,
    ROW_NUMBER() OVER (PARTITION BY c.entity_urn, c.aspect_name ORDER BY c.order_key DESC, c.log_seq DESC) AS newest
  FROM candidates AS c
  WHERE c.logged AND NOT c.flag_only
), logged_winners AS (
  SELECT
    *
  FROM ranked
  WHERE newest = 1
), winners AS (
  -- a key the log does not name keeps its state row, unranked: only logged keys need the window
  SELECT
    *
  FROM logged_winners
  UNION ALL
  SELECT
    c.*,
    1 AS newest
  FROM candidates AS c
  WHERE NOT c.logged
), flags AS (
  SELECT
    c.entity_urn,
    c.aspect_name,
    c.entity_deleted,
    ROW_NUMBER() OVER (PARTITION BY c.entity_urn, c.aspect_name ORDER BY c.log_seq DESC) AS newest
  FROM candidates AS c
  JOIN logged_winners AS w
    ON c.entity_urn = w.entity_urn AND c.aspect_name = w.aspect_name
  WHERE c.flag_only AND c.log_seq > w.log_seq
)
SELECT
  w.entity_urn,
  w.entity_type,
  w.aspect_name,
  w.aspect_json,
  w.version,
  w.order_key,
  w.change_type,
  w.created_time,
  w.created_actor,
  w.deleted,
  COALESCE(f.entity_deleted, w.entity_deleted) AS entity_deleted,
  w.record_hash,
  w.batch_id,
  w.updated_at,
  w.source_file,
  w.line_number,
  w.prev_version,
  w.prev_order_key,
  w.prev_change_type,
  w.prev_created_time,
  w.prev_created_actor,
  w.prev_record_hash,
  w.prev_batch_id
FROM winners AS w
LEFT JOIN flags AS f
  ON w.entity_urn = f.entity_urn AND w.aspect_name = f.aspect_name AND f.newest = 1
