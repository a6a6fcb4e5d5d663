"""What every service runs on: the service template, intake, commits, dead letters, leases."""
