"""The revisions, a branch per part of the schema (branch labels `jobs`, `references`)."""
