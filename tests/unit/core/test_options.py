"""Core's options framework and connection settings on their own: old option names, the settings base."""

from __future__ import annotations

import dataclasses

import pytest

from tubespark.core.options import OptionSpec, parse_bool, parse_non_negative_int, parse_raw, render_table
from tubespark.core.settings import ConnectionSettings
from tubespark.errors import OptionError

RENAMED = (OptionSpec("keepGoing", "true", parse_bool, "Go on.", deprecated=("carryOn",)),)


def test_an_old_name_works_with_a_future_warning_naming_the_new_one():
    with pytest.warns(FutureWarning, match="src: option 'carryOn' is deprecated: use 'keepGoing'"):
        assert parse_raw({"CARRYON": "no"}, RENAMED, mode="read", source="src") == {"keep_going": False}
    assert parse_raw({}, RENAMED, mode="read") == {"keep_going": True}


def test_an_old_name_with_a_bad_value_names_the_old_name():
    with pytest.warns(FutureWarning), pytest.raises(OptionError, match="option carryOn='perhaps'"):
        parse_raw({"carryon": "perhaps"}, RENAMED, mode="read")


def test_old_and_new_name_together_are_refused():
    with pytest.raises(OptionError, match="options keepGoing and carryOn are the same option"):
        parse_raw({"carryOn": "no", "keepgoing": "yes"}, RENAMED, mode="read")


def test_the_table_says_the_old_name_still_works():
    assert render_table(RENAMED).endswith("| `keepGoing` | `true` | read | Go on. The old name `carryOn` still works, "
                                          "with a deprecation warning. |")


def test_non_negative_int():
    assert parse_non_negative_int("n", "0") == 0 and parse_non_negative_int("n", "12") == 12
    with pytest.raises(OptionError, match="option n='-1': expected a non-negative integer"):
        parse_non_negative_int("n", "-1")


def test_connection_settings_defaults_and_subclass_defaults():
    @dataclasses.dataclass(frozen=True)
    class Settings(ConnectionSettings):
        heartbeat_s: float = 2.5

    assert (ConnectionSettings().connect_timeout_s, ConnectionSettings().request_timeout_s) == (3.0, 10.0)
    assert Settings.default_ms("heartbeat_s") == "2500" and Settings.default_ms("request_timeout_s") == "10000"
    with pytest.raises(ValueError, match="has no field 'call_timeout_s'"):
        Settings.default("call_timeout_s")


def _ms_options():
    from tubespark.rocketmq.spark.options import RocketMQOptions
    from tubespark.tank.spark.options import TankOptions
    from tubespark.tubemq.spark.options import TubeMQOptions

    for options in (TubeMQOptions, TankOptions, RocketMQOptions):
        for spec in options.SPECS:
            if spec.name.endswith("Ms"):
                yield pytest.param(options, spec, id=f"{options.SOURCE or options.__name__}-{spec.name}")


@pytest.mark.parametrize(("options", "spec"), list(_ms_options()))
def test_an_option_counting_milliseconds_given_a_duration_says_milliseconds_with_an_example(options, spec):
    """Issue 39: ``requestTimeoutMs='10s'`` said "expected a positive integer"; every ...Ms option of every broker
    now names the unit and an example (the user wrote Spark's duration syntax, which these options do not take)."""
    with pytest.raises(OptionError) as caught:
        spec.parse(spec.name, "10s")
    assert f"option {spec.name}='10s': expected " in str(caught.value)
    assert "milliseconds, e.g. 10000 for 10 s" in str(caught.value), str(caught.value)


def test_request_timeout_in_seconds_syntax_fails_before_any_call_saying_milliseconds():
    from tubespark.tank.spark.options import TankOptions

    with pytest.raises(OptionError, match=r"^option requestTimeoutMs='10s': expected a positive integer of "
                                          r"milliseconds, e\.g\. 10000 for 10 s$"):
        TankOptions.from_raw({"broker": "127.0.0.1:11011", "topic": "t", "requestTimeoutMs": "10s"}, mode="read")
