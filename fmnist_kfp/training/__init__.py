"""The trainer: CNN definitions, hyperparameters, distribution and SavedModel export."""
