
from fmnist_kfp.kfp_components.base import component


@component
def freshness_window(freshness: str = "24h") -> str:
    """Names the freshness window this run falls in (e.g. ``24h#20412``).

    Feeding it to ingestion makes the ingestion cache entry expire with the window: runs inside
    one window reuse the ingested dataset, the first run after it re-ingests. Never cached.

    Args:
        freshness: How long ingested data is reused from cache: `30m`, `24h`, `7d`, `P1D` (windows
            aligned to the Unix epoch).

    Returns:
        The window's name (``<freshness>#<index>``), the ingestion step's
        ``freshness_window``.
    """
    from fmnist_kfp.dataset.freshness import freshness_window as window

    return window(freshness)
