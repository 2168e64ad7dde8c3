"""blindspots: find, explain and fix the failures of segmentation and classification models."""
__version__ = "0.1.0"
