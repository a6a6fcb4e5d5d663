"""The usage tally of one judged thing's calls."""

from rubricd_services.judges.caller import Tally
from rubricd_services.judges.verdicts import JUDGE


def test_a_cached_verdict_adds_a_cache_hit_and_no_tokens_and_a_failed_one_nothing():
    assert Tally(JUDGE).usage("m", cached=True) == {"judge:m:cache_hits": 1}
    assert Tally(JUDGE).usage("m") == {}
