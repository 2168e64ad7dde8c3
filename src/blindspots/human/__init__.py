"""People: the one rating rule, votes (majority, agreement), simulated raters and annotators, the labelling
cost model."""
from blindspots.human.votes import agreement_table, format_agreement_table

__all__ = ["agreement_table", "format_agreement_table"]
