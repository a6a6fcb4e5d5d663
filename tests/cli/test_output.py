"""The pure parts of the command line: the column printing, an unreachable Redis (no server needed)."""

from rubricd_services.cli.__main__ import main
from rubricd_services.cli.context import ago, table


def test_table_aligns_columns_and_durations_read_short():
    assert table([["a", 10, None], ["bbb", 2, "last"]], ["N", "COUNT", "X"]).splitlines() == [
        "N    COUNT  X",
        "a    10",
        "bbb  2      last",
    ]
    assert [ago(0.25), ago(12.34), ago(245), ago(7620), ago(None)] == ["250ms", "12.3s", "4m05s", "2h07m", "-"]


def test_an_unreachable_redis_is_named_without_its_password(capsys) -> None:
    assert main(["--redis-url", "redis://cli:s3cret-pw@127.0.0.1:1/0", "status"]) == 1
    error = capsys.readouterr().err
    assert "cannot reach Redis at redis://***@127.0.0.1:1/0" in error and "s3cret-pw" not in error
