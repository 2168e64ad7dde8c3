"""blindspots.mine."""
