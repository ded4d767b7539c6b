"""Training backends: ``local`` worker processes or a ``kubernetes`` TFJob (see base.py)."""
