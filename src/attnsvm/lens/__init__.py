"""The lens: the Att-SVM theory applied to a trained recommender's attention.

``extract`` (a head's X, Z, W from recorded attention), ``scores`` (token scores against the
true next item), ``solve`` and ``analysis`` (the Att-SVMs of a head's selection and how it
compares with the optimal tokens), ``run`` (all of it on a finished run, computed only),
``plots``, ``page`` and ``report`` (the files), ``theory_model`` (the lens on the theory
lab's 1-layer model, where the theory says what it must report).
"""
