"""Access layer: the dispatcher (local store -> tier), the read path (tier -> reader), policies."""
