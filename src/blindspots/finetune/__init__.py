"""blindspots.finetune."""
