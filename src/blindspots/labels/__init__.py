"""blindspots.labels."""
