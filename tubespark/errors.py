"""The broker-neutral root of tubespark's one error hierarchy.

Everything tubespark raises on purpose derives from :class:`TubeSparkError`, so a user can catch one
type. This module holds the root and the kinds every broker shares: bytes that do not decode, a
connection that broke or timed out, TLS, a broker's business answer (busy, unknown topic, refused
login, bad request), a range read that gave up, bad options, lost data, an unsupported PySpark. What
only one broker can raise lives in that broker's own module, at the bottom of its layers, subclassing
these: :mod:`tubespark.tubemq.errors`, :mod:`tubespark.tank.errors`, :mod:`tubespark.rocketmq.errors`
(and the payload formats' :mod:`tubespark.formats.errors`).

What ``retriable`` means (aiokafka's and kafka-python's ``KafkaError.retriable``): **the same call,
made again after a backoff, may succeed**, because the cause is a passing condition of the connection
or the server (a broken connection, a timeout, a busy or moved server, a partition another member
still holds, nothing to read yet). Code decides on the flag, never on message text:
:func:`tubespark.core.retry.call_with_retry` retries exactly the errors that set it unless a caller
narrows it, and a stream reader that cannot learn where a partition starts for a retriable reason
asks again at a later trigger instead of failing the query. So:

* an error that fails the same way on every try is not retriable and fails at once: bytes that do
  not decode, a refused login or certificate, an unknown topic, a bad request or option, lost data;
* the flag describes the cause, not how long someone already tried: an error that reports a spent
  retry budget is as retriable as what it gave up on. :class:`RangeReadError` (every broker's range
  read, after its ``retry_s``) wraps only retriable faults, so it is retriable (as Kafka's Java client
  makes its ``TimeoutException`` a ``RetriableException`` and kafka-python its ``KafkaTimeoutError``).
  A loop that catches it retries within its own bound (a :class:`~tubespark.core.retry.RetryPolicy`
  always has one), so nested retries add up, never run forever; Spark's task retry and the query's
  checkpoint are the usual next try.

Spark does not hand our exceptions to the user: an error raised in a Python data source (on the driver
or in a task) reaches ``.load()``, ``.collect()``, ``.save()`` or ``query.awaitTermination()`` as Spark's
own (``AnalysisException``, ``PythonException``, ``StreamingQueryException``, ...) whose text ends with
the Python traceback, our line last. :func:`unwrap` gives the typed error back from that text, and
:func:`typed_errors` (a context manager and a decorator) raises it, so ``except OptionError`` catches what
Spark wrapped. Spark's own "no such data source" for one of our formats comes back as
:class:`DataSourceNotFoundError`, which says what to install where.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Literal, TypeVar, overload


class TubeSparkError(Exception):
    """Root of every error tubespark raises. ``retriable``: the same call, tried again after a backoff, may
    succeed (see the module docstring for the whole rule)."""

    retriable: bool = False


# --- wire codec ------------------------------------------------------------------------------------


class CodecError(TubeSparkError):
    """Bytes that do not form a valid frame or message of a broker's protocol. The stream is unusable then."""


class FrameTooLargeError(CodecError):
    """A frame announced more blocks or bytes than the protocol allows; nothing was allocated for it."""


class TruncatedFrameError(CodecError):
    """The stream ended in the middle of a frame (or the peer closed it while a call waited)."""


class ChecksumMismatchError(CodecError):
    """A received message's CRC does not match its payload. Never skipped silently."""


class MessageFormatError(CodecError):
    """A message payload or attribute string that cannot be encoded or decoded."""


class MessageTooLargeError(MessageFormatError):
    """A message exceeds the topic's maximum size; it was not sent."""


# --- connection ------------------------------------------------------------------------------------


class BrokerConnectionError(TubeSparkError):
    """The TCP connection could not be opened, broke, or was closed while a call was pending."""

    retriable = True
    address: str = ""
    """The ``host:port`` a connection to it could not be opened, or failed before its peer sent one well-formed
    answer (set by :func:`tubespark.core.outage.unanswered`; empty for a connection that broke after its peer
    answered): how :mod:`tubespark.core.outage` tells an address that never answered from one that went down."""


class RpcTimeoutError(BrokerConnectionError):
    """No response arrived within the call's timeout."""


class BrokerUnavailableError(BrokerConnectionError):
    """The broker a call needs is down or restarting: nothing serves a topic that exists.

    Raised where a broker's own evidence says the topic is there but no broker serves it now (TubeMQ: the
    master's configuration holds the topic, the master lists no partition of it; RocketMQ: the name server
    lost the route it gave before), and by :func:`tubespark.core.outage.ride_out` when a broker stayed
    unreachable for the whole ``outageTimeoutMs``. Retriable: the broker may come back; a stream's next
    trigger, Spark's task retry or a restarted query tries again. Not an :class:`UnknownTopicError`: a
    topic that is not there fails at once, a topic whose broker is away is waited for.
    """


class TlsError(TubeSparkError):
    """A TLS connection failed for a reason that trying again will not fix, named in the message.

    The server's certificate is not trusted, has expired or names another host; the server refused the
    client's certificate; one side speaks TLS and the other plain text. These are configuration errors
    (client options or server certificates), so the flag is off and the layers above fail at once
    instead of retrying until their deadlines. Not a :class:`BrokerConnectionError` on purpose: code
    that treats those as "the server is unreachable for now" must not swallow it.
    """


class NeverAnsweredError(TubeSparkError):
    """The address a user gave (a TANK ``broker``, TubeMQ ``master``, RocketMQ ``namesrv``) never accepted a
    connection in this process: the option most likely names the wrong host or port, or nothing runs there.

    :mod:`tubespark.core.outage` raises it after a few seconds of tries (``FIRST_CONTACT_S``) instead of waiting
    ``outageTimeoutMs`` for it: that wait is for a broker that was serving and went down, and spending it on a
    typo hid the mistake for fifteen minutes. ``option`` names the option to check, ``addresses`` its value.
    Not retriable, and not a :class:`BrokerConnectionError` on purpose (like :class:`TlsError`): the layers that
    treat those as "down for now" must not wait for it again. Start the broker first, or fix the option.
    """

    def __init__(self, message: str, *, option: str = "", addresses: tuple[str, ...] = ()) -> None:
        super().__init__(message)  # keyword defaults: the error pickles (tasks send it to the driver)
        self.option = option
        self.addresses = addresses


# --- broker business errors ------------------------------------------------------------------------


class BrokerError(TubeSparkError):
    """A master or broker answered a call with a business error code.

    Each broker's wire layer maps its own codes onto the subclasses below or its own module's
    (:mod:`tubespark.tubemq.wire.errcodes`, :mod:`tubespark.tank.wire.codes`,
    :mod:`tubespark.rocketmq.wire.codes`), so callers branch on the class and ``retriable``, never on a
    number.

    ``advice`` is what the user can do about it (check the ``topic`` option, the credentials, ...): the
    server's own text names a protocol field at best, so the code that maps the answer adds it to the
    message's one line, after what the server said.
    """

    code: int = 0

    def __init__(self, code: int, message: str, *, context: str = "", broker: str = "", advice: str = "") -> None:
        self.code = code
        self.server_message = message
        self.context = context
        where = f" ({context})" if context else ""
        then = f"; {advice}" if advice else ""
        super().__init__(f"{broker + ' ' if broker else ''}error {code}{where}: {message}{then}")


class NoDataError(BrokerError):
    """Nothing new to read right now."""

    retriable = True


class ServerBusyError(BrokerError):
    """The server asks the client to back off and try again (overload, moved, internal error)."""

    retriable = True


class UnknownTopicError(BrokerError):
    """The topic does not exist, is not deployed, or the partition is not part of it."""


class AuthError(BrokerError):
    """Authentication or authorisation refused."""


class BadRequestError(BrokerError):
    """The server rejected the request's parameters."""


# --- reads of exact ranges -------------------------------------------------------------------------


class RangeReadError(TubeSparkError):
    """A read of an exact range ``[start, end)`` gave up after its whole retry budget (``retry_s``).

    One class for every broker's range reader (TubeMQ, TANK, RocketMQ): each retries retriable faults (a
    broken or silent connection, a busy server, a moved or missing leader, data not visible yet) with
    backoff, resuming where it stood, and raises this once the budget is spent, with the last fault as
    ``__cause__``. Retriable, because only retriable faults are wrapped: the same read succeeds once the
    broker is healthy (Spark's task retry, a restarted query, a later trigger). Faults no retry can fix
    (lost data, bytes that do not decode, an unknown topic, a refused login) are never wrapped: they are
    raised at once with their own type.

    ``partition`` names the partition or queue, ``start``/``end`` the planned range, ``reached`` the
    offset below which everything was already handed out; ``broker`` the address read from (empty when
    the reader follows a route), ``messages`` how many were handed out and ``tries`` the faults seen
    (``None`` where a reader does not count them).
    """

    retriable = True

    def __init__(self, message: str, *, partition: str, start: int, end: int, reached: int, broker: str = "",
                 messages: int | None = None, tries: int | None = None) -> None:
        super().__init__(message)
        self.partition = partition
        self.start = start
        self.end = end
        self.reached = reached
        self.broker = broker
        self.messages = messages
        self.tries = tries


# --- user-facing layers ----------------------------------------------------------------------------


class OptionError(TubeSparkError, ValueError):
    """A data source option is missing or has a bad value. Raised before any network call."""


class DataLossError(TubeSparkError):
    """Data the query planned to read is gone (retention, vanished partition) and failOnDataLoss is on."""


class ForeignCheckpointError(TubeSparkError):
    """A stream's checkpoint was written against another cluster, or against an earlier incarnation of a topic
    (deleted and re-created since): the topic's origin recorded in the offsets differs from the one the cluster
    has now. Its offsets mean nothing here and nothing was lost, so this is no :class:`DataLossError` and
    ``failOnDataLoss`` does not apply: skipping would silently read the new topic from wherever the old offsets
    point. Use a new ``checkpointLocation`` (or point the query at the cluster the checkpoint belongs to)."""


class AvailableNowIncompleteError(TubeSparkError):
    """A Trigger.AvailableNow run cannot read a partition below its target (occupied by a stale registration,
    its broker down) within the time it waits: finishing would skip that partition's data."""


class PartitionsUnavailableError(TubeSparkError):
    """Partitions the read covers are configured on brokers that do not serve them now (down, stopped, offline).

    A read that planned only the served partitions would return part of the data without a word, so it
    fails instead, naming each broker and its partitions: ``unavailable`` maps a broker (TubeMQ: its id;
    RocketMQ: its group name) to the keys it holds (``brokerId:topic:partitionId``,
    ``topic:brokerName:queueId``), ``reasons`` a broker to what is known of it. Retriable: the broker may
    come back.
    """

    retriable = True

    def __init__(self, message: str, unavailable: Mapping[Any, tuple[str, ...]],
                 reasons: Mapping[Any, str]) -> None:
        super().__init__(message)
        self.unavailable = unavailable
        self.reasons = reasons


class UnsupportedSparkError(TubeSparkError):
    """The PySpark in use lacks an API tubespark relies on (its version is outside tubespark's range)."""


class SharedDirError(TubeSparkError):
    """A directory read tasks and the driver share (``popReceiptsPath``, ``skippedBundlesPath``) cannot be
    reached, written or read, or its filesystem's package is missing. ``option`` names the option that set
    it and ``location`` its value (:mod:`tubespark.core.shared_dir`)."""

    def __init__(self, message: str, *, option: str = "", location: str = "") -> None:  # defaults: pickles
        super().__init__(message)
        self.option = option
        self.location = location


class DataSourceNotFoundError(TubeSparkError):
    """Spark has no data source for ``format("tubemq")`` (``"tank"``, ``"rocketmq"``) in this session: its own
    ``[DATA_SOURCE_NOT_FOUND]``, which :func:`unwrap` turns into this. PySpark 4 registers tubespark's formats by
    itself only where tubespark is installed in the Python that runs Spark's Python workers (``PYSPARK_PYTHON``; on
    Spark Connect, the server's); the message names that Python and the alternative, ``tubespark.register(spark)``.
    ``format_name`` is the format asked for."""

    def __init__(self, message: str, *, format_name: str = "") -> None:  # keyword default: the error pickles
        super().__init__(message)
        self.format_name = format_name


# --- getting the typed error back from Spark's wrapper --------------------------------------------

_ERROR_LINE = re.compile(r"^(tubespark(?:\.\w+)*\.errors)\.(\w+): ?(.*)$")
"""A traceback's last line for one of our errors: ``tubespark.errors.OptionError: unknown option ...``
(every class lives in an ``errors`` module: :mod:`tubespark.errors`, ``tubespark.<broker>.errors``,
:mod:`tubespark.formats.errors`)."""
_AFTER_MESSAGE = re.compile(r"^\s*(SQLSTATE: |=== Streaming Query ===|JVM stacktrace:|During handling of |"
                            r"The above exception was )|^\s*$")
"""Where Spark's text (or Python's next chained traceback) resumes after a message of several lines."""


def unwrap(exc: BaseException) -> TubeSparkError | None:
    """The tubespark error inside Spark's exception ``exc``, or ``None`` when it holds none.

    The original object never crosses the JVM: Spark keeps only the Python traceback's text. So this
    finds the last ``tubespark....errors.SomeError: message`` line in ``str(exc)`` and makes a new
    instance of that class with that message (its first line says what to do); ``retriable`` and
    ``isinstance`` checks work on it. Attributes a constructor sets (a broker error's ``code``, a range
    read's ``partition``) are not restored. ``exc`` itself, or an exception it was raised from, is
    returned when it already is one (a call that never went through Spark)::

        try:
            spark.read.format("tubemq").options(**opts).load().collect()
        except Exception as exc:
            error = unwrap(exc)
            if isinstance(error, UnknownTopicError):
                ...
            raise
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, TubeSparkError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    text = str(exc)
    lines = text.splitlines()
    for index in range(len(lines) - 1, -1, -1):
        match = _ERROR_LINE.match(lines[index])
        if match:
            module, name, first = match.groups()
            rest = []
            for line in lines[index + 1:]:
                if _AFTER_MESSAGE.match(line):
                    break
                rest.append(line)
            return _rebuilt(module, name, "\n".join([first, *rest]))
    not_found = _NOT_FOUND.search(text)
    if not_found and not_found.group(1).lower() in _FORMATS:
        return data_source_not_found(not_found.group(1).lower())
    return None


_FORMATS = ("tubemq", "tank", "rocketmq")  # tubespark.apps.registry.FORMATS (this module imports no layer above)
_NOT_FOUND = re.compile(r"DATA_SOURCE_NOT_FOUND\]\s*Failed to find (?:the )?data source: ([\w.]+?)\.?(?:\s|$)",
                        re.IGNORECASE)
"""Spark's error for a format nobody registered (error class ``DATA_SOURCE_NOT_FOUND``, SQLSTATE 42K02)."""


def data_source_not_found(format_name: str) -> DataSourceNotFoundError:
    """The typed error for Spark's ``[DATA_SOURCE_NOT_FOUND]`` of one of our formats, naming the Python to install
    tubespark into and the other cure.

    Spark's driver looks the formats up with ``PYSPARK_DRIVER_PYTHON``, else ``PYSPARK_PYTHON``, else ``python3``
    (its ``PythonUtils.defaultPythonExec``, read from the environment the driver JVM started with, which is this
    process's when it started Spark). A PySpark before 4 has no discovery (nor the API tubespark needs): then the
    error says to upgrade it."""
    spark_version = _pyspark_version()
    if spark_version and spark_version.split(".")[0].isdigit() and int(spark_version.split(".")[0]) < 4:
        return DataSourceNotFoundError(
            f"format({format_name!r}) is not registered in this Spark session: PySpark {spark_version} has neither "
            f"Python data source discovery nor the Data Source API tubespark needs; install pyspark 4.2 or newer "
            f"(`pip install 'tubespark[spark]'`)", format_name=format_name)
    for variable in ("PYSPARK_DRIVER_PYTHON", "PYSPARK_PYTHON"):
        python = os.environ.get(variable, "")
        if python:
            which = f"{variable}={python}"
            break
    else:
        which = "the first python3 on the PATH, as neither PYSPARK_DRIVER_PYTHON nor PYSPARK_PYTHON is set"
    command = f"{python or 'python3'} -m pip install tubespark"
    return DataSourceNotFoundError(
        f"format({format_name!r}) is not registered in this Spark session. PySpark 4 registers tubespark's formats "
        f"by itself, at a Spark driver's first use of a Python data source, only where tubespark is installed in "
        f"the Python Spark runs for that: here {which} (on Spark Connect: the server's). Install it there "
        f"(`{command}`; the executors' PYSPARK_PYTHON needs it too), or call tubespark.register(spark) once in the "
        f"session. If it is installed there, Spark's log says why it was skipped (a line starting "
        f"'tubespark: format({format_name!r}) is not registered')",
        format_name=format_name)


def _pyspark_version() -> str:
    """The installed PySpark's version, read from its metadata (no import of PySpark); empty when none is found."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pyspark")
    except PackageNotFoundError:
        return ""


_F = TypeVar("_F", bound=Callable[..., Any])


class _TypedErrors(contextlib.ContextDecorator):
    """What :func:`typed_errors` returns: re-raises Spark's wrapper of a tubespark error as that error."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> Literal[False]:
        # only Exceptions: KeyboardInterrupt and SystemExit pass as they are, as does one of ours
        if exc is None or not isinstance(exc, Exception) or isinstance(exc, TubeSparkError):
            return False
        typed = unwrap(exc)
        if typed is None:
            return False
        if _in_chain(typed, exc):  # the object itself was raised under exc: raise it again, its causes as they are
            raise typed
        raise typed from exc


def _in_chain(error: BaseException, exc: BaseException) -> bool:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if current is error:
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


@overload
def typed_errors(func: None = None) -> _TypedErrors: ...


@overload
def typed_errors(func: _F) -> _F: ...


def typed_errors(func: _F | None = None) -> _TypedErrors | _F:
    """Raise the tubespark error inside Spark's exception, so ``except`` catches it by class.

    Spark wraps what a data source raises (``AnalysisException``, ``StreamingQueryException``,
    ``PythonException``, ``Py4JJavaError``); inside this block, or a function decorated with it, such an
    exception that holds a tubespark error (:func:`unwrap`) is raised as that error, with Spark's exception as
    its ``__cause__`` (the JVM and Python tracebacks stay readable). Every other exception passes untouched::

        with tubespark.typed_errors():
            spark.read.format("tubemq").options(**opts).load().collect()

        @tubespark.typed_errors            # or @tubespark.typed_errors()
        def run_query(spark): ...

        try:
            run_query(spark)
        except OptionError as exc: ...     # a bad option: fix and rerun
        except TubeSparkError as exc:      # anything else tubespark raised
            if exc.retriable: ...

    A stream fails where Spark reports it: wrap ``query.awaitTermination()`` or ``processAllAvailable()``.
    """
    if func is None:
        return _TypedErrors()
    return _TypedErrors()(func)


def _rebuilt(module: str, name: str, message: str) -> TubeSparkError:
    """An instance of ``module.name`` holding ``message`` without calling its constructor (whose arguments
    the text does not carry); the root class when that is not a tubespark error this version has."""
    try:
        cls = getattr(importlib.import_module(module), name, None)
    except ImportError:
        cls = None
    if not (isinstance(cls, type) and issubclass(cls, TubeSparkError)):
        return TubeSparkError(f"{module}.{name}: {message}")
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    return error
