"""Reports: self-contained HTML pages (galleries of picks, later the round report) that open offline."""
from blindspots.report.gallery import write_gallery

__all__ = ["write_gallery"]
