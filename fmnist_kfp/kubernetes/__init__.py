"""What the steps need to work with the cluster: manifests of the Kubernetes nouns they create
(one noun per module), stable names, shared storage, and the remote-job runner."""
