"""The unified inference entry: agents built elsewhere reach the factory through an
OpenAI-compatible gateway (:mod:`.app`) that turns their chat completions into episodes
(:mod:`.conversations`), guards their tool calls and publishes every step."""
