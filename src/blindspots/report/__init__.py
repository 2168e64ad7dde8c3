"""blindspots.report."""
