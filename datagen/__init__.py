"""Realistic DataHub test data: aspect histories in the three wire forms, and simulated actor activity.

Pure Python, no Spark; the same seed and options give byte-identical files, whatever the part size or
the number of worker processes. Entry points are in `history` (generate_history, generate_aspect_versions,
generate_usage_events) and `manifest` (GeneratorManifest). The modules, from the ground up:

- catalogue: entity types, vocabularies, and the `Universe` (which entity sits at which index, its urn).
- wire: one aspect version in DataHub's wire forms (MCL topic-dump line, MCP line, file-sink object).
- simulation: one entity's life (`Simulator`); its edits come from simulation_dataset (schema,
  dataset properties, editable descriptions) and simulation_assets (tags, terms, domains, owners,
  structured properties, deprecation, status, info).
- noise: malformed copies of good lines and where they go in a file.
- manifest: `GeneratedFile`, `MalformedLine`, `GeneratorManifest` (manifest.json).
- files: writing parts (plain or gzip) and running them in worker processes.
- action_requests, usage: action requests (proposals) and usage (audit) events.
- history: argument checks, the output folder, and the public entry points.
- actor_activity: weeks of catalog activity by people and service accounts, as change events, with
  labelled unusual activity.
- lineage: lineage histories (edges added and removed, column edges, jobs, charts, dashboards, deletes
  and restores) as MCL records.
"""

# About this many records per written part, unless an entry point is told otherwise (here, where the
# command line reads it without importing the generator).
DEFAULT_PART_SIZE = 200_000
