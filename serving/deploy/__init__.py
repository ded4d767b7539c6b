"""What the deploy step runs: blessing, local and KServe rollouts, and HTTP verification."""
