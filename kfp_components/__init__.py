"""KFP v2 components, one per folder. Each module holds the ``@dsl.component`` and little else:
the work happens in the plain, tested ``fmnist`` package the component image ships."""
