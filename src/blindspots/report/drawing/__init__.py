"""What the pages draw: matplotlib figures (`figures.py`), label overlays and thumbnails (`overlays.py`,
`thumbs.py`) and the region questions drawn over an image (`region_thumbs.py`)."""
