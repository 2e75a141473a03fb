"""LanceDB sinks: idempotent, resumable tables fed from the factory's topics; query, export."""
