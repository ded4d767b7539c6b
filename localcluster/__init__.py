"""The local cluster the tests run on: upstream Kubernetes programs built from their Go modules
(pinned in this folder's go.mod files), started on loopback. `python -m localcluster --help`."""
