"""A user simulator fitted from real ratings and cold-start episodes on it: the group-Gaussian
simulator (``simulator.py``), the episode evaluator (``episodes.py``), its policies
(``policies.py``) and RLT4Rec's own training on simulated or logged episodes
(``rlt4rec_training.py``)."""
