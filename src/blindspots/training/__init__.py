"""Training: one epoch loop (loop.py: epochs, poly LR, checkpoints, resume, RNG) shared by segmentation
training (segmentation.py), replay fine-tuning (replay.py), classifier training (classification.py),
the demo zoo (zoo.py) and Defuse's β-VAE."""
