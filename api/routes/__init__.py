"""The REST app's routes, one router per concern (jobs, speech, operations)."""
