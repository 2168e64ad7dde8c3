"""blindspots.loop."""
