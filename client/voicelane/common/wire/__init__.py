"""The wire contract voicelane.v1, generated from proto/ by scripts/gen-proto.sh (do not edit)."""
