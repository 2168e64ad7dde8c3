"""The acquisition columns beyond the scan's: `acquisition.py` runs the model over a pool once and adds what
needs the model itself (MC-dropout passes, margins, pooled features, BADGE's gradient embeddings; torch is
imported there only), `qbc_maps.py` query by committee's vote entropy from the scan's saved argmax maps, and
`names.py` names the columns and says which a scan lacks (torch-free, read by the samplers)."""
