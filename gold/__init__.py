"""Gold: audit search, actor activity aggregates and OpenMetadata ChangeEvents."""
