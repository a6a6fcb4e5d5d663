"""The dashboard: a live web page of a deployment's runs, read from Redis only (`rubricd serve dashboard`)."""
