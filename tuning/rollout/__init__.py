"""The rollout: plan, journal, push in batches, verify, confirm or restore (docs/architecture.md).

Imports nothing itself: each stage is its own module (``engine``, ``batch_run``, ``journal``, ...)."""
