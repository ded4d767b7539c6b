"""The repository's own tooling, not in the wheel: the generated docs (``python -m tools.docs``,
``make readme``) and releases (``python -m tools.release``, ``make release``), run from the
repository's root. They import :mod:`fmnist_kfp`; the package never imports them."""
