"""The PostgreSQL endpoint for BI tools: a read-only replica of gold kept in sync by Delta version."""
