"""Request defaults every front and the SDK agree on (import-light: nothing but constants)."""

DEFAULT_SAMPLE_RATE_HZ = 24000
"""The rate audio is delivered at when a request names none (every front, the SDK)."""
