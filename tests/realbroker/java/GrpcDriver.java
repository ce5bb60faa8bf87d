/*
 * RocketMQ 5's gRPC Java client (rocketmq-client-java) against a RocketMQ Proxy, driven by the
 * real-broker tests:
 *
 *   java -cp <classes>:<lib>/* GrpcDriver <command> '<json arguments>'
 *
 * One JSON object per line on stdout ({"msg": ...} per message received, with its id, delivery
 * attempt, tag, keys, user properties and body digest), the last {"done": true, ...}; logs on
 * stderr. Commands (arguments: endpoint, group, topic):
 *   simple      a SimpleConsumer receives `batch` messages at a time with `invisibleMs` and acks
 *               each, until `expect` were acked and a receive came back empty; with `stopAfter`
 *               it stops once that many were acked, and with `leaveInFlight` it then receives one
 *               more batch and acks none of it; with `quiet` no line per message, and the last
 *               line has `elapsedMs`, from the first receive to the last ack (the benchmark's); with
 *               `ackAsync` a batch's acks are sent together (ackAsync) and awaited before the
 *               next receive
 *   redeliver   a SimpleConsumer receives one batch and acks none of it; postpones the first
 *               message of it with changeInvisibleDuration(`postponeMs`); then receives and acks
 *               everything until the rest of that batch came back (deliveryAttempt 2), and the
 *               postponed one after it (it must not come back before its new time)
 *   push        a PushConsumer consumes until `expect` messages were consumed and `settleMs`
 *               passed without another; the messages whose ids `fail` lists fail every time
 *               (ConsumeResult.FAILURE: in a FIFO group the client consumes them again up to the
 *               group's max delivery attempts, then forwards them to the DLQ; in a concurrent one
 *               it makes them invisible for its backoff), until `expectFailures` failures;
 *               with `holdUntilFile` the consumer stays open after that until the file exists
 */

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONObject;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;

public class GrpcDriver {
    public static void main(String[] args) throws Exception {
        JSONObject a = JSON.parseObject(args[1]);
        switch (args[0]) {
            case "simple":
                simple(a);
                break;
            case "redeliver":
                redeliver(a);
                break;
            case "push":
                push(a);
                break;
            default:
                throw new IllegalArgumentException("unknown command " + args[0]);
        }
        System.out.flush();
        System.exit(0);
    }

    static synchronized void emit(Object o) {
        System.out.println(JSON.toJSONString(o));
    }

    static ClientConfiguration configuration(JSONObject a) {
        return ClientConfiguration.newBuilder()
            .setEndpoints(a.getString("endpoint"))
            .enableSsl(false)
            .setRequestTimeout(Duration.ofSeconds(10))
            .build();
    }

    static Map<String, FilterExpression> subscription(JSONObject a) {
        String tag = a.getString("tag");
        return Collections.singletonMap(a.getString("topic"),
            new FilterExpression(tag == null ? "*" : tag, FilterExpressionType.TAG));
    }

    static SimpleConsumer simpleConsumer(JSONObject a) throws Exception {
        return ClientServiceProvider.loadService().newSimpleConsumerBuilder()
            .setClientConfiguration(configuration(a))
            .setConsumerGroup(a.getString("group"))
            .setAwaitDuration(Duration.ofMillis(a.getLongValue("awaitMs") > 0 ? a.getLongValue("awaitMs") : 2000))
            .setSubscriptionExpressions(subscription(a))
            .build();
    }

    static Map<String, Object> describe(MessageView m, String event) throws Exception {
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("event", event);
        o.put("msgId", m.getMessageId().toString());
        o.put("topic", m.getTopic());
        o.put("attempt", m.getDeliveryAttempt());
        o.put("tag", m.getTag().orElse(null));
        o.put("keys", String.join(" ", new TreeSet<>(m.getKeys())));
        o.put("properties", new TreeMap<>(m.getProperties()));
        ByteBuffer body = m.getBody();
        byte[] b = new byte[body.remaining()];
        body.duplicate().get(b);
        StringBuilder hex = new StringBuilder();
        for (byte x : MessageDigest.getInstance("SHA-256").digest(b)) {
            hex.append(String.format("%02x", x));
        }
        o.put("bodySha256", hex.toString());
        o.put("bodyLength", b.length);
        o.put("at", System.currentTimeMillis());
        return o;
    }

    static void simple(JSONObject a) throws Exception {
        int expect = a.getIntValue("expect");
        int batch = a.getIntValue("batch");
        long deadline = System.currentTimeMillis() + a.getLongValue("maxMs");
        Duration invisible = Duration.ofMillis(a.getLongValue("invisibleMs"));
        int stopAfter = a.getIntValue("stopAfter");
        int received = 0;
        int acked = 0;
        int empty = 0;
        boolean quiet = a.getBooleanValue("quiet");
        boolean ackAsync = a.getBooleanValue("ackAsync");
        long started = 0;
        long lastAck = 0;
        try (SimpleConsumer c = simpleConsumer(a)) {
            started = System.nanoTime();
            while (System.currentTimeMillis() < deadline && (stopAfter == 0 || acked < stopAfter)) {
                List<MessageView> got = c.receive(batch, invisible);
                if (got.isEmpty()) {
                    empty++;
                    if (acked >= expect) {
                        break;
                    }
                    continue;
                }
                List<CompletableFuture<Void>> acks = new ArrayList<>();
                for (MessageView m : got) {
                    received++;
                    if (!quiet) {
                        emit(Map.of("msg", describe(m, "received")));
                    }
                    if (ackAsync) {
                        acks.add(c.ackAsync(m));
                    } else {
                        c.ack(m);
                        acked++;
                    }
                }
                for (CompletableFuture<Void> f : acks) {
                    f.get();
                    acked++;
                }
                lastAck = System.nanoTime();
            }
            if (a.getBooleanValue("leaveInFlight")) {
                for (MessageView m : c.receive(batch, invisible)) {
                    received++;
                    emit(Map.of("msg", describe(m, "notAcked")));
                }
            }
        }
        emit(Map.of("done", true, "received", received, "acked", acked, "emptyReceives", empty,
            "elapsedMs", (lastAck - started) / 1e6));
    }

    static void redeliver(JSONObject a) throws Exception {
        int batch = a.getIntValue("batch");
        long deadline = System.currentTimeMillis() + a.getLongValue("maxMs");
        Duration invisible = Duration.ofMillis(a.getLongValue("invisibleMs"));
        long postponeMs = a.getLongValue("postponeMs");
        try (SimpleConsumer c = simpleConsumer(a)) {
            List<MessageView> first = c.receive(batch, invisible);
            Set<String> waiting = new HashSet<>();
            for (MessageView m : first) {
                emit(Map.of("msg", describe(m, "notAcked")));
                waiting.add(m.getMessageId().toString());
            }
            String postponed = null;
            long postponedUntil = 0;
            if (!first.isEmpty()) {
                MessageView p = first.get(0);
                c.changeInvisibleDuration(p, Duration.ofMillis(postponeMs));
                postponed = p.getMessageId().toString();
                postponedUntil = System.currentTimeMillis() + postponeMs;
                emit(Map.of("postponed", postponed, "until", postponedUntil));
            }
            while (!waiting.isEmpty() && System.currentTimeMillis() < deadline) {
                for (MessageView m : c.receive(batch, Duration.ofSeconds(30))) {
                    String id = m.getMessageId().toString();
                    Map<String, Object> d = describe(m, waiting.remove(id) ? "again" : "received");
                    if (id.equals(postponed)) {
                        d.put("early", System.currentTimeMillis() < postponedUntil - 200);
                    }
                    emit(Map.of("msg", d));
                    c.ack(m);
                }
            }
            emit(Map.of("done", true, "stillWaiting", waiting.size()));
        }
    }

    static void push(JSONObject a) throws Exception {
        int expect = a.getIntValue("expect");
        long settle = a.getLongValue("settleMs");
        long deadline = System.currentTimeMillis() + a.getLongValue("maxMs");
        Set<String> fail = new HashSet<>();
        if (a.getJSONArray("fail") != null) {
            fail.addAll(a.getJSONArray("fail").toJavaList(String.class));
        }
        int expectFailures = a.getIntValue("expectFailures");
        AtomicInteger consumed = new AtomicInteger();
        AtomicInteger failures = new AtomicInteger();
        AtomicLong last = new AtomicLong(System.currentTimeMillis());
        PushConsumer c = ClientServiceProvider.loadService().newPushConsumerBuilder()
            .setClientConfiguration(configuration(a))
            .setConsumerGroup(a.getString("group"))
            .setSubscriptionExpressions(subscription(a))
            .setConsumptionThreadCount(4)
            .setMessageListener(m -> {
                boolean failing = fail.contains(m.getMessageId().toString());
                try {
                    emit(Map.of("msg", describe(m, failing ? "failed" : "consumed")));
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
                (failing ? failures : consumed).incrementAndGet();
                last.set(System.currentTimeMillis());
                return failing ? ConsumeResult.FAILURE : ConsumeResult.SUCCESS;
            })
            .build();
        try {
            while (System.currentTimeMillis() < deadline) {
                if (consumed.get() >= expect && failures.get() >= expectFailures
                    && System.currentTimeMillis() - last.get() > settle) {
                    break;
                }
                Thread.sleep(100);
            }
            // what the client still sends after its listener returned (a FIFO group's forward
            // to the DLQ) must not be cut off by close(): the caller says when it arrived
            String hold = a.getString("holdUntilFile");
            while (hold != null && !Files.exists(Paths.get(hold))
                && System.currentTimeMillis() < deadline) {
                Thread.sleep(100);
            }
        } finally {
            c.close();
        }
        emit(Map.of("done", true, "consumed", consumed.get(), "failures", failures.get()));
    }
}
