"""Offline reinforcement learning on the recommenders: CRR stage 2 (``crr.py``, its trainer
``crr_trainer.py``) and reward-aware metrics (``rated.py``)."""
