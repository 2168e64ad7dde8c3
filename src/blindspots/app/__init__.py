"""blindspots.app."""
