"""`python -m blindspots` runs the command line."""
from blindspots.cli import app

app()
