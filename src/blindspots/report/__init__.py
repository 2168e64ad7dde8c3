"""Reports: self-contained HTML pages (galleries of picks, the scan page, the round report, the engines' pages)
that open offline, rendered from view-models (`views.py`) by autoescaped Jinja templates (`templates/`)."""
from blindspots.report.gallery import gallery_blocks, write_gallery
from blindspots.report.round_page import write_round_report
from blindspots.report.scan_page import write_scan_report

__all__ = ["gallery_blocks", "write_gallery", "write_round_report", "write_scan_report"]
