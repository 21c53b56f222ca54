"""Chaos tests: real processes, killed, paused and restarted under load."""
