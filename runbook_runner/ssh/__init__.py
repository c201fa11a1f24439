"""SSH: OpenSSH's configuration and known_hosts, connecting, the host lock, batches."""
