"""Platform adapters of the :class:`meshtest.backend.ShardBackend` port (these import their platform)."""
