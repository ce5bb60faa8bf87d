"""Read-only codecs and readers of the broker's local store (spec sections 1-4)."""
