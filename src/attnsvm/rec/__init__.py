"""Transformer sequential recommenders: data, models, training and full-ranking evaluation."""
