"""The Redis users a stack's ACL holds, as the tests expect them: the admin, each service, the CLI, KEDA and the
one trainer a stack starts with (tests/cli/test_redis_acl.py, tests/system/test_secure.py)."""

USERS = ("admin", "scorer", "comparer", "arm", "analyzer", "summarizer", "updater", "gateway", "cli", "keda", "trainer")
