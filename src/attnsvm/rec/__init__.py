"""Transformer sequential recommenders: data, models, training and full-ranking evaluation."""

from attnsvm.process import short_spin

# libgomp reads its spin once, when torch loads it, and nearly every module here imports torch:
# the library's policy (``attnsvm.process``) can set it now or never
short_spin()
