"""Reports: self-contained HTML pages (galleries of picks, the scan page, the round report, the engines' pages)
that open offline, rendered from view-models (`viewmodels/`) by autoescaped Jinja templates (`templates/`); the pages
in `pages/`, what they draw in `drawing/`."""
from blindspots.report.pages.defuse import is_defuse_dir, write_defuse_report
from blindspots.report.pages.gallery import gallery_blocks, write_gallery
from blindspots.report.pages.label_issues import is_label_issues_dir, write_label_issues_report
from blindspots.report.pages.round import default_round, round_scenarios, write_round_report
from blindspots.report.pages.scan import write_scan_report
from blindspots.report.scenario_votes import export_scenario_votes, vote_prefix
from blindspots.report.pages.surprise import is_surprise_dir, write_surprise_report

__all__ = ["default_round", "export_scenario_votes", "gallery_blocks", "is_defuse_dir", "is_label_issues_dir",
           "is_surprise_dir", "round_scenarios", "vote_prefix", "write_defuse_report", "write_gallery",
           "write_label_issues_report", "write_round_report", "write_scan_report", "write_surprise_report"]
