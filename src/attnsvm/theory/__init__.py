"""The theory lab: Att-SVM problems, token scores, 1-layer attention and its normalised-GD dynamics.

Everything here is float64 and follows the conventions of the official code (umich-sota/TF-as-SVM):
the attention logits of sequence i are ``X_i @ W @ z_i`` with ``W = K @ Q.T`` in the (K,Q) case.
"""
