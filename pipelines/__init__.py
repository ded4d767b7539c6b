"""KFP pipeline definitions."""
