"""blindspots.human."""
