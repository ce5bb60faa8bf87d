"""``rocketmq-python-client``'s SimpleConsumer through a RocketMQ Proxy: receive ``batch`` at a
time, ack each, until ``expect`` were acked and a receive came back empty (or ``maxS`` passed).

    python grpc_python_consume.py '{"endpoint": ..., "group": ..., "topic": ..., "expect": N}'

One JSON line per message (``{"msg": {...}}``: id, delivery attempt, tag, keys, properties, body
digest), the last ``{"done": true, ...}``. Run in its own process: the client starts threads and
a gRPC channel of its own and logs as it likes.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from typing import Any

from rocketmq import ClientConfiguration  # type: ignore[import-untyped]
from rocketmq import Credentials
from rocketmq import FilterExpression
from rocketmq import SimpleConsumer


def describe(m: Any) -> dict[str, Any]:
    body = bytes(m.body)
    return {
        "msgId": m.message_id,
        "topic": m.topic,
        "attempt": m.delivery_attempt,
        "tag": m.tag,
        "keys": " ".join(sorted(m.keys or [])),
        "properties": dict(sorted((m.properties or {}).items())),
        "bodySha256": hashlib.sha256(body).hexdigest(),
        "bodyLength": len(body),
    }


def main(args: dict[str, Any]) -> None:
    config = ClientConfiguration(args["endpoint"], Credentials(), request_timeout=10)
    consumer = SimpleConsumer(
        config, args["group"], {args["topic"]: FilterExpression("*")}, await_duration=2
    )
    consumer.startup()
    settled = time.monotonic() + 15
    while True:  # the client's settings reach the proxy over its telemetry stream, after startup
        try:
            got = consumer.receive(args.get("batch", 32), args.get("invisibleS", 30))
            break
        except Exception as e:  # the client raises its own exception types, untyped
            if "settings" not in str(e) or time.monotonic() > settled:
                raise
            time.sleep(0.3)
    received = acked = empty = 0
    deadline = time.monotonic() + args.get("maxS", 150)
    try:
        while time.monotonic() < deadline:
            for m in got:
                received += 1
                print(json.dumps({"msg": describe(m)}), flush=True)
                consumer.ack(m)
                acked += 1
            if not got:
                empty += 1
                if acked >= args["expect"]:
                    break
            got = consumer.receive(args.get("batch", 32), args.get("invisibleS", 30))
    finally:
        consumer.shutdown()
    done = {"done": True, "received": received, "acked": acked, "emptyReceives": empty}
    print(json.dumps(done), flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
