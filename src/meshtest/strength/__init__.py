"""Suite strength: how well the corpus exercises the platform's sharding rules (coverage) and
whether it catches seeded faults in them (mutation mode). Platform-agnostic; the platform is
reached through :class:`meshtest.platforms.backend.ShardBackend`."""
