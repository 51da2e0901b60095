"""A fake TubeMQ master web API (``/webapi.htm``) answering ``admin_query_topic_deploy_info``.

This is a TEST DOUBLE for the unit tests of :mod:`tubespark.tubemq.client.placement` and the batch reader's
availability check: a real master cannot be put on demand into "broker 2 configured but not running" in a
unit test. The answer's shape is the one a live 2.4.0 master gives (``docs/tubemq/brokers.md``,
"Configured and served partitions"; the integration tests in ``tests/integration/tubemq/test_brokers.py``
check the helper against the real one): per topic a ``deployInfo`` list, one entry per broker, with
``numPartitions``, ``numTopicStores``, ``topicStatusId``, ``createDate`` and a ``runInfo`` block whose fields
hold ``"-"`` while the broker has no running registration.
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class FakeDeploy:
    """One topic on one broker: its configuration, and whether that broker runs now."""

    broker_id: int
    partitions: int = 1
    stores: int = 2
    status_id: int = 0
    running: bool = True
    accept_subscribe: bool = True
    created: str = "20261125074442"
    """``createDate`` of the record (``yyyyMMddHHmmss``): a deployment deleted and added again has another."""

    def as_json(self, topic: str) -> dict[str, Any]:
        run: dict[str, Any] = ({"acceptPublish": True, "acceptSubscribe": self.accept_subscribe,
                                "numPartitions": self.partitions, "numTopicStores": self.stores,
                                "brokerManageStatus": "online"} if self.running else
                               {"acceptPublish": "-", "acceptSubscribe": "-", "numPartitions": "-",
                                "brokerManageStatus": "-"})
        return {"topicName": topic, "brokerId": self.broker_id, "brokerIp": f"127.0.0.{self.broker_id}",
                "brokerPort": 8123, "numPartitions": self.partitions, "numTopicStores": self.stores,
                "topicStatusId": self.status_id, "acceptPublish": True, "acceptSubscribe": True,
                "createUser": "tubespark", "createDate": self.created, "runInfo": run}


Reply = tuple[int, str, bytes] | None
"""An answer: HTTP status, content type, body; ``None`` drops the connection without answering."""


class FormServer:
    """A local web server for the unit tests of the HTTP clients: each POSTed form is recorded in ``forms`` and
    answered by :meth:`reply`. ``url`` is ``http://127.0.0.1:<port>``; a context manager, or call :meth:`close`."""

    def __init__(self) -> None:
        self.forms: list[dict[str, str]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
                fake.forms.append(form)
                answer = fake.reply(form)
                if answer is None:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                status, content_type, body = answer
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def reply(self, form: dict[str, str]) -> Reply:
        raise NotImplementedError

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FormServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class FakeMasterWeb(FormServer):
    """``http://127.0.0.1:<port>/webapi.htm``; ``topics`` maps a topic to its deployments (edit freely); ``forms``
    holds every call."""

    def __init__(self) -> None:
        self.topics: dict[str, list[FakeDeploy]] = {}
        super().__init__()

    def reply(self, form: dict[str, str]) -> Reply:
        return 200, "application/json", json.dumps(self.answer(form)).encode()

    def answer(self, form: dict[str, str]) -> dict[str, Any]:
        if form.get("method") != "admin_query_topic_deploy_info":
            return {"result": False, "errCode": 400, "errMsg": f"Unsupported method {form.get('method')}"}
        wanted = set(form.get("topicName", "").split(",")) - {""}
        data = [{"topicName": topic, "deployInfo": [d.as_json(topic) for d in deploys], "infoCount": len(deploys)}
                for topic, deploys in self.topics.items() if not wanted or topic in wanted]
        return {"result": True, "errCode": 0, "errMsg": "OK", "count": len(data), "data": data}
