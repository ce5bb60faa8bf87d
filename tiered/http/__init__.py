"""The read-only HTTP API (FastAPI)."""
