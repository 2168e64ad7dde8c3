"""The report's pages, one module each (a scan, a round, the surprise, label-issues and Defuse folders, the
picks' gallery) and the sections the round page gathers from the engines (`engine_sections.py`,
`scenario_section.py`, `label_efficiency.py`). The names are exported by `blindspots.report`."""
