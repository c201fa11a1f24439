"""The runbook format: YAML with positions, the schema, semantics, templates, expressions."""
