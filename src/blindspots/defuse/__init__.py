"""blindspots.defuse."""
