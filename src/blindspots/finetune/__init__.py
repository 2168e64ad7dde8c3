"""blindspots.finetune: the former home of fine-tuning, now `blindspots.training` (replay.py,
classification.py); these modules re-export it for existing imports."""
