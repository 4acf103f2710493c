"""attnsvm: attention as a token-selecting SVM.

Three parts and one rule: ``attnsvm.theory`` (the paper as a library) and ``attnsvm.rec``
(sequential recommenders) never import each other; ``attnsvm.lens`` is the only bridge.
"""

__version__ = "0.1.0"
