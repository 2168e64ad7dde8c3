"""The acquisition columns that need the model itself (MC-dropout passes, margins, pooled features, BADGE's
gradient embeddings): `acquisition.py` runs the model over a pool once and adds them to a scan (torch is imported
there only), `names.py` names the columns and says which a scan lacks (torch-free, read by the samplers)."""
