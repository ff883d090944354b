-- Every lineage edge between entities with the span it held (column edges left out). The graph as of a
-- time T: WHERE valid_from <= T AND (valid_to IS NULL OR valid_to > T); is_current: the edges holding now.
SELECT
  e.upstream_urn,
  e.downstream_urn,
  e.edge_kind,
  e.owner_urn,
  e.aspect_name,
  timestamp_millis(e.valid_from_time) AS valid_from,
  timestamp_millis(e.valid_to_time) AS valid_to,
  e.added_by,
  e.removed_by,
  e.valid_to_time IS NULL AS is_current,
  e.valid_from_time,
  e.valid_to_time
FROM gold.lineage_edges AS e
-- Each owner's rows of its newest publish only: a publish appends its owners' rows and one marker row
-- (edge_kind null) each, and the owners without a marker (none since the last compaction) keep theirs.
LEFT JOIN (
  SELECT m.owner_urn, max(coalesce(m.published_seq, 0)) AS newest_seq
  FROM gold.lineage_edges AS m
  WHERE m.edge_kind IS NULL
  GROUP BY m.owner_urn
) AS p ON p.owner_urn = e.owner_urn
WHERE e.edge_kind <> 'column' AND (p.newest_seq IS NULL OR coalesce(e.published_seq, 0) = p.newest_seq)
