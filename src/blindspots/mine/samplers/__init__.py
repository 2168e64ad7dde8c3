"""The samplers over the score table, one module per strategy (MAD, MAD+, entropy, margin, BALD and PowerBALD,
core-set, BADGE, query by committee, surprise, scenario, random, the portfolio with its EXP3 shares in `bandit.py`
and its rule for S in `teach.py`), their common base and checks (`base.py`) and the one registry
(`registry.py`). The names are exported by `blindspots.mine`."""
