"""Ingestion: object events become catalog items and ingestion executions."""
