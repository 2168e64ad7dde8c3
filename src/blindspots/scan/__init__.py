"""blindspots.scan."""
