"""``tubespark.typed_errors`` (issue 39 part 4): ``except OptionError`` catches what Spark wrapped.

Spark's exceptions need a JVM; here they are stood for by exceptions carrying the same text (the Python
traceback Spark keeps, inside its own words), as in test_errors.py's ``unwrap`` cases. The same mechanism on real
Spark exceptions (batch read, stream, write) is tests/integration/tubemq/test_typed_errors.py.
"""

from __future__ import annotations

import pickle
import traceback

import pytest

import tubespark
from tubespark.errors import (
    DataLossError,
    DataSourceNotFoundError,
    OptionError,
    TubeSparkError,
    UnknownTopicError,
    typed_errors,
    unwrap,
)


class AnalysisException(Exception):  # noqa: N818  # Spark's class name
    """Stands for pyspark.errors.AnalysisException (its text: Spark's words around the Python traceback)."""


def _spark_text(error: BaseException) -> str:
    try:
        raise error
    except BaseException:  # noqa: BLE001 - formatted, as PySpark's worker does
        tb = traceback.format_exc()
    return f"[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: {tb} SQLSTATE: 38000"


def wrapped(error: BaseException) -> AnalysisException:
    return AnalysisException(_spark_text(error))


def test_the_package_root_exports_the_catching_helpers():
    assert tubespark.typed_errors is typed_errors and tubespark.unwrap is unwrap


def test_the_context_manager_raises_the_typed_error_with_sparks_exception_as_its_cause():
    spark_error = wrapped(OptionError("option topic is required: add .option(\"topic\", ...)"))
    expected = r'^option topic is required: add \.option\("topic", \.\.\.\)$'
    with pytest.raises(OptionError, match=expected) as caught, typed_errors():
        raise spark_error
    assert caught.value.__cause__ is spark_error
    assert isinstance(caught.value, ValueError)  # OptionError stays a ValueError


def test_the_decorator_with_and_without_parentheses_keeps_the_function_and_its_result():
    @typed_errors
    def bare(fail: bool) -> int:
        """Bare."""
        if fail:
            raise wrapped(UnknownTopicError(0, "no such topic", context="t"))
        return 7

    @typed_errors()
    def called(fail: bool) -> int:
        if fail:
            raise wrapped(DataLossError("offsets [0, 5) of 1:t:0 are gone"))
        return 8

    assert bare(False) == 7 and called(False) == 8
    assert bare.__name__ == "bare" and bare.__doc__ == "Bare."
    with pytest.raises(UnknownTopicError) as caught:
        bare(True)
    assert caught.value.retriable is False and isinstance(caught.value.__cause__, AnalysisException)
    with pytest.raises(DataLossError):
        called(True)


def test_other_exceptions_pass_untouched():
    foreign = AnalysisException("[TABLE_OR_VIEW_NOT_FOUND] The table `x` cannot be found. SQLSTATE: 42P01")
    with pytest.raises(AnalysisException) as caught, typed_errors():
        raise foreign
    assert caught.value is foreign
    with pytest.raises(KeyboardInterrupt), typed_errors():  # not an Exception: never looked into
        raise KeyboardInterrupt(_spark_text(OptionError("x")))
    with typed_errors():  # nothing raised: nothing happens
        pass


def test_a_tubespark_error_raised_directly_is_the_same_object():
    error = OptionError("option x")
    with pytest.raises(OptionError) as caught, typed_errors():
        raise error
    assert caught.value is error and caught.value.__cause__ is None


def test_an_error_raised_under_another_exception_in_process_is_raised_again_without_a_cause_cycle():
    error = OptionError("option x")
    outer = RuntimeError("wrapped in-process")
    outer.__cause__ = error
    with pytest.raises(OptionError) as caught, typed_errors():
        raise outer
    assert caught.value is error and caught.value.__cause__ is None
    assert "option x" in "".join(traceback.format_exception(caught.value))


def test_catching_the_root_class_catches_every_wrapped_error():
    for error in (OptionError("o"), UnknownTopicError(0, "u"), DataLossError("d")):
        with pytest.raises(TubeSparkError), typed_errors():
            raise wrapped(error)


# --- Spark's "no such data source" for one of our formats ----------------------------------------------


NOT_FOUND = ("[DATA_SOURCE_NOT_FOUND] Failed to find the data source: {}. Make sure the provider name is correct "
             "and the package is properly registered and compatible with your Spark version. SQLSTATE: 42K02")


@pytest.mark.parametrize("name", ["tubemq", "tank", "rocketmq", "TubeMQ"])
def test_sparks_data_source_not_found_for_our_format_says_what_to_install_where(name, monkeypatch):
    monkeypatch.delenv("PYSPARK_DRIVER_PYTHON", raising=False)
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/py/bin/python3")
    error = unwrap(AnalysisException(NOT_FOUND.format(name)))
    assert type(error) is DataSourceNotFoundError and error.format_name == name.lower()
    text = str(error)
    assert text.startswith(f"format({name.lower()!r}) is not registered in this Spark session")
    assert "PYSPARK_PYTHON=/opt/py/bin/python3" in text and "`/opt/py/bin/python3 -m pip install tubespark`" in text
    assert "tubespark.register(spark)" in text
    copy = pickle.loads(pickle.dumps(error))
    assert str(copy) == text and copy.format_name == name.lower()


def test_the_driver_python_is_named_first_as_spark_looks_up_with_it(monkeypatch):
    """Spark's driver runs the lookup with PYSPARK_DRIVER_PYTHON when set (PythonUtils.defaultPythonExec)."""
    monkeypatch.setenv("PYSPARK_DRIVER_PYTHON", "/opt/driver/python")
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/py/bin/python3")
    text = str(unwrap(AnalysisException(NOT_FOUND.format("rocketmq"))))
    assert "here PYSPARK_DRIVER_PYTHON=/opt/driver/python" in text and "`/opt/driver/python -m pip" in text


def test_without_pyspark_python_the_error_names_python3_on_the_path(monkeypatch):
    monkeypatch.delenv("PYSPARK_DRIVER_PYTHON", raising=False)
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    expected = r"the first python3 on the PATH, as neither PYSPARK_DRIVER_PYTHON nor PYSPARK_PYTHON is set.*`python3 -m"
    with pytest.raises(DataSourceNotFoundError, match=expected), typed_errors():
        raise AnalysisException(NOT_FOUND.format("tank"))


def test_another_formats_data_source_not_found_is_left_alone():
    for other in ("kafka", "tubemq2", "org.example.tubemq"):
        assert unwrap(AnalysisException(NOT_FOUND.format(other))) is None


def test_a_pyspark_before_4_is_told_to_upgrade(monkeypatch):
    """PySpark 3 has no data source discovery: installing tubespark into its Python would not help."""
    import importlib.metadata

    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "3.5.3" if name == "pyspark" else real(name))
    error = unwrap(AnalysisException(NOT_FOUND.format("tubemq")))
    assert type(error) is DataSourceNotFoundError
    assert str(error) == ("format('tubemq') is not registered in this Spark session: PySpark 3.5.3 has neither Python "
                          "data source discovery nor the Data Source API tubespark needs; install pyspark 4.2 or newer "
                          "(`pip install 'tubespark[spark]'`)")
