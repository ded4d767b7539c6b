"""What a hyperparameter search is, whichever backend runs it: the search space and the
Experiment settings, checked in Katib's own terms (the local Optuna search keeps the same rules)."""
