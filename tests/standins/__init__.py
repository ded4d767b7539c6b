"""Stand-ins of the cluster's APIs (the Kubernetes API server, the training operator, Katib,
KServe, KFP) on loopback HTTP servers: each keeps only the upstream rules our code relies on, each
rule cited (tests/UPSTREAM.md)."""
