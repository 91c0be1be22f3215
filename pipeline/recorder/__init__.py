"""The trajectory recorder: an OpenAI-compatible proxy (and an ``openai`` client wrapper) that
writes every call to a write-ahead log, and the commit that turns the log into episodes in the
lake as the ``recorded`` source. See docs/howto-record.md."""
