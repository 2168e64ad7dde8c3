"""What a page shows, computed once as view-model blocks (`blocks.py`: headings, text, tables, figures, picks)
that the templates lay out: a round's view (`round.py`), rater agreement, ranking stability, and the tables and
figures copied from what another command wrote (`copied.py`)."""
