"""blindspots.surprise."""
