"""The batch jobs: land -> refine -> publish, exports and time travel, with their table I/O."""
