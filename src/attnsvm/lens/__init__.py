"""The lens: the Att-SVM theory applied to a trained recommender's attention."""
