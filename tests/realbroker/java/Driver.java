/*
 * The Java side of the real-broker tests: RocketMQ's own remoting client (rocketmq-client) and
 * admin tool (rocketmq-tools), driven by the Python tests.
 *
 *   java -cp <classes>:<lib>/* Driver <command> '<json arguments>'
 *
 * Every result is one JSON object per line on stdout; logs go to stderr and to the client log.
 * Commands:
 *   produce   create the scenario's topics on the broker, then send plain, keyed, tagged,
 *             property-carrying, large (compressed), batch, ordered, delayed and transactional
 *             messages; one line per message sent ({"sent": ...}), rolled-back transactions
 *             as {"rolledBack": ...}
 *   bulk      send `count` messages of `size` bytes to `topic` (fills commitlog files)
 *   consume   read `topics` through a name server with a DefaultLitePullConsumer (assign),
 *             a DefaultMQPushConsumer, or an orderly push consumer; one line per message
 *   admin     run mqadmin sub-commands (MQAdminStartup, as the mqadmin script does) in this JVM;
 *             one line per command with what it printed
 *   load      fixed-rate keyed loads for benchmarks, one per JSON line read on stdin (`count`
 *             messages of `size` bytes to `topic` at `rate` msgs/s from `threads` synchronous
 *             senders); one {"load": ...} line each, with send-latency percentiles and the
 *             broker's commitlog and consume-queue offsets before and after
 *   replay    a timed catch-up of one queue with synchronous pulls (DefaultMQPullConsumer), one
 *             pass per line read on stdin; {"pass": ...} with seconds, messages and bytes
 *   spread    create `topics` topics of `queues` queues each in one admin request, then send
 *             `min`..`max` messages of `minSize`..`maxSize` bytes to every queue, in rounds over
 *             all queues (each round in a new order) from `threads` synchronous senders; one
 *             {"queue": ...} line per queue with its queue offsets and message ids
 */

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.consumer.store.ReadOffsetType;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.RPCHook;
import org.apache.rocketmq.remoting.exception.RemotingException;
import org.apache.rocketmq.remoting.protocol.admin.TopicOffset;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.apache.rocketmq.tools.command.MQAdminStartup;

public class Driver {
    static final PrintStream OUT = System.out;

    public static void main(String[] args) throws Exception {
        System.setOut(System.err); // client and admin chatter goes to stderr; results to OUT
        JSONObject a = JSON.parseObject(args.length > 1 ? args[1] : "{}");
        watchdog(a.getLongValue("maxMs") + a.getLongValue("retryMs") + 240_000);
        try {
            switch (args[0]) {
                case "produce": produce(a); break;
                case "bulk": bulk(a); break;
                case "consume": consume(a); break;
                case "admin": admin(a); break;
                case "load": load(a); break;
                case "replay": replay(a); break;
                case "spread": spread(a); break;
                default: throw new IllegalArgumentException("unknown command " + args[0]);
            }
        } catch (Throwable e) {
            e.printStackTrace(); // to stderr; exit at once (the client's threads would keep the
            System.exit(1);      // JVM alive until the watchdog)
        }
        emit(Map.of("done", true));
        OUT.flush();
        System.exit(0); // client threads are not all daemons
    }

    /** After `ms`, print every thread's stack to stderr and exit 3: a hung client says where. */
    static void watchdog(long ms) {
        Thread t = new Thread(() -> {
            try {
                Thread.sleep(ms);
            } catch (InterruptedException e) {
                return;
            }
            System.err.println("Driver watchdog: still running after " + ms + " ms; threads:");
            // the main thread last: the Python side keeps the tail of stderr
            Map<Thread, StackTraceElement[]> all = Thread.getAllStackTraces();
            List<Thread> order = new ArrayList<>(all.keySet());
            order.sort((x, y) -> Boolean.compare("main".equals(x.getName()), "main".equals(y.getName())));
            for (Thread th : order) {
                System.err.println(th);
                for (StackTraceElement e : all.get(th)) {
                    System.err.println("    at " + e);
                }
            }
            System.exit(3);
        }, "driver-watchdog");
        t.setDaemon(true);
        t.start();
    }

    static synchronized void emit(Object o) {
        OUT.println(JSON.toJSONString(o));
        OUT.flush();
    }

    // --- produce -------------------------------------------------------------------------------

    static DefaultMQProducer producer(JSONObject a, String group) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer(group);
        p.setNamesrvAddr(a.getString("namesrv"));
        p.setInstanceName(group + "-" + System.nanoTime());
        p.setVipChannelEnabled(false);
        p.setMaxMessageSize(2 * 1024 * 1024);
        p.setSendMsgTimeout(15000);
        p.start();
        return p;
    }

    static void createTopics(JSONObject a) throws Exception {
        JSONObject topics = a.getJSONObject("topics");
        if (topics == null || topics.isEmpty()) {
            return;
        }
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(a.getString("namesrv"));
        admin.setInstanceName("it-admin-" + System.nanoTime());
        admin.start();
        try {
            for (String t : topics.keySet()) {
                int n = topics.getIntValue(t);
                admin.createAndUpdateTopicConfig(a.getString("broker"), new TopicConfig(t, n, n, 6));
            }
            // the broker registers the topic with the name server on its own schedule: wait for
            // the route, or the first send fails with "No route info of this topic"
            awaitRoutes(admin, topics.keySet());
        } finally {
            admin.shutdown();
        }
    }

    static byte[] body(Random r, int size, boolean compressible) {
        byte[] b = new byte[size];
        if (compressible) {
            byte[] word = "the quick brown fox jumps over the lazy dog; ".getBytes(StandardCharsets.US_ASCII);
            for (int i = 0; i < size; i++) {
                b[i] = word[i % word.length];
            }
        } else {
            r.nextBytes(b);
        }
        return b;
    }

    static void sent(String kind, SendResult r, int count) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("kind", kind);
        m.put("topic", r.getMessageQueue().getTopic());
        m.put("queueId", r.getMessageQueue().getQueueId());
        m.put("queueOffset", r.getQueueOffset());
        m.put("count", count);
        m.put("msgId", r.getMsgId());
        m.put("offsetMsgId", r.getOffsetMsgId());
        m.put("status", r.getSendStatus().name());
        emit(Map.of("sent", m));
        if (r.getSendStatus() != SendStatus.SEND_OK) {
            throw new IllegalStateException("send " + kind + " returned " + r.getSendStatus());
        }
    }

    /** The scenario of a live broker: every kind of message the tests compare. */
    static void produce(JSONObject a) throws Exception {
        createTopics(a);
        Random rnd = new Random(a.getLongValue("seed"));
        String main = a.getString("main");
        DefaultMQProducer p = producer(a, "it-producer");
        try {
            int[] sizes = {1, 2, 17, 100, 1000, 4095, 4096, 4097, 8000, 65536, 300000, 1048576};
            int n = 0;
            for (int size : sizes) {
                for (boolean comp : new boolean[] {false, true}) {
                    Message m = new Message(main, body(rnd, size, comp));
                    sent("plain", p.send(m), 1);
                    n++;
                }
            }
            for (int i = 0; i < 40; i++) {
                Message m = new Message(main, "Tag" + (char) ('A' + i % 3), "key-" + i + " shared-key",
                    ("keyed and tagged " + i).getBytes(StandardCharsets.UTF_8));
                if (i % 4 == 0) {
                    m.putUserProperty("region", i % 8 == 0 ? "eu" : "us");
                    m.putUserProperty("名前", "値-" + i + " ünïcödé");
                }
                if (i % 5 == 0) {
                    m.setKeys(List.of("key-" + i, "κλειδί-" + i, "鍵" + i));
                }
                sent("keyed", p.send(m), 1);
            }
            // batch sends (one queue per batch, all in one request)
            for (int b = 0; b < 3; b++) {
                List<Message> batch = new ArrayList<>();
                for (int i = 0; i < 10; i++) {
                    Message m = new Message(main, "Batch", "batch-" + b + "-" + i,
                        body(rnd, 50 + 30 * i, false));
                    batch.add(m);
                }
                sent("batch", p.send(batch), batch.size());
            }
            // ordered sends to chosen queues
            for (int i = 0; i < 30; i++) {
                Message m = new Message(main, "Order", "order-" + i,
                    ("order " + i).getBytes(StandardCharsets.UTF_8));
                int q = i % 2 == 0 ? 1 : 3;
                sent("ordered", p.send(m, (mqs, msg, arg) -> mqs.get((Integer) arg % mqs.size()), q), 1);
            }
            // delayed (level 1 = 1 s): stored in SCHEDULE_TOPIC_XXXX first, re-put when due
            for (int i = 0; i < 5; i++) {
                Message m = new Message(main, "Delay", "delay-" + i,
                    ("delayed " + i).getBytes(StandardCharsets.UTF_8));
                m.setDelayTimeLevel(1);
                sent("delayed", p.send(m), 1);
            }
            // other topics, other queue counts
            JSONObject topics = a.getJSONObject("topics");
            for (String t : topics.keySet()) {
                if (t.equals(main)) {
                    continue;
                }
                for (int i = 0; i < 12 * topics.getIntValue(t); i++) {
                    Message m = new Message(t, "T", t + "-" + i, body(rnd, 200 + i, false));
                    sent("other", p.send(m), 1);
                }
            }
        } finally {
            p.shutdown();
        }
        transactions(a, main);
    }

    static void transactions(JSONObject a, String topic) throws Exception {
        TransactionMQProducer p = new TransactionMQProducer("it-tx-producer");
        p.setNamesrvAddr(a.getString("namesrv"));
        p.setInstanceName("it-tx-" + System.nanoTime());
        p.setVipChannelEnabled(false);
        p.setTransactionListener(new TransactionListener() {
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                return "commit".equals(msg.getUserProperty("decision"))
                    ? LocalTransactionState.COMMIT_MESSAGE : LocalTransactionState.ROLLBACK_MESSAGE;
            }

            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                return "commit".equals(msg.getUserProperty("decision"))
                    ? LocalTransactionState.COMMIT_MESSAGE : LocalTransactionState.ROLLBACK_MESSAGE;
            }
        });
        p.start();
        try {
            for (int i = 0; i < 10; i++) {
                boolean commit = i % 2 == 0;
                Message m = new Message(topic, "Tx", "tx-" + i,
                    ("transaction " + i).getBytes(StandardCharsets.UTF_8));
                m.putUserProperty("decision", commit ? "commit" : "rollback");
                TransactionSendResult r = p.sendMessageInTransaction(m, null);
                Map<String, Object> o = new LinkedHashMap<>();
                o.put("kind", commit ? "txCommit" : "txRollback");
                o.put("msgId", r.getMsgId());
                o.put("state", r.getLocalTransactionState().name());
                emit(Map.of(commit ? "committed" : "rolledBack", o));
            }
        } finally {
            p.shutdown();
        }
    }

    static void bulk(JSONObject a) throws Exception {
        createTopics(a);
        Random rnd = new Random(a.getLongValue("seed"));
        DefaultMQProducer p = producer(a, "it-bulk");
        String topic = a.getString("topic");
        int count = a.getIntValue("count");
        int size = a.getIntValue("size");
        int keyEvery = a.getIntValue("keyEvery");
        long pause = a.getLongValue("pauseMs");
        try {
            for (int i = 0; i < count; i++) {
                Message m = new Message(topic, "Bulk", body(rnd, size, false));
                if (keyEvery > 0 && i % keyEvery == 0) {
                    m.setKeys("bulk-" + a.getString("tag") + "-" + i);
                }
                SendResult r = sendRetrying(p, m, a.getLongValue("retryMs"));
                if (a.getBooleanValue("verbose")) {
                    sent("bulk", r, 1);
                } else if (r.getSendStatus() != SendStatus.SEND_OK) {
                    sent("bulk", r, 1);
                }
                if (pause > 0) {
                    Thread.sleep(pause);
                }
            }
        } finally {
            p.shutdown();
        }
        emit(Map.of("bulk", count));
    }

    /** Send, retrying for up to `retryMs` while the broker is down or restarting (a message
     *  whose first attempt was stored before a crash may then be stored twice, as with any
     *  producer that retries). */
    static SendResult sendRetrying(DefaultMQProducer p, Message m, long retryMs) throws Exception {
        long giveUp = System.currentTimeMillis() + retryMs;
        int failures = 0;
        while (true) {
            try {
                SendResult r = p.send(m);
                if (r.getSendStatus() == SendStatus.SEND_OK || System.currentTimeMillis() > giveUp) {
                    if (failures > 0) {
                        emit(Map.of("retried", failures));
                    }
                    return r;
                }
            } catch (Exception e) {
                if (System.currentTimeMillis() > giveUp) {
                    throw e;
                }
            }
            failures++;
            Thread.sleep(200);
        }
    }

    // --- consume -------------------------------------------------------------------------------

    static String host(SocketAddress s) {
        InetSocketAddress i = (InetSocketAddress) s;
        return i.getAddress().getHostAddress() + ":" + i.getPort();
    }

    static Map<String, Object> describe(MessageExt m, String kind) throws Exception {
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("via", kind);
        o.put("topic", m.getTopic());
        o.put("queueId", m.getQueueId());
        o.put("queueOffset", m.getQueueOffset());
        o.put("commitLogOffset", m.getCommitLogOffset());
        o.put("storeSize", m.getStoreSize());
        o.put("msgId", m.getMsgId());
        o.put("bornTimestamp", m.getBornTimestamp());
        o.put("storeTimestamp", m.getStoreTimestamp());
        o.put("bornHost", host(m.getBornHost()));
        o.put("storeHost", host(m.getStoreHost()));
        o.put("sysFlag", m.getSysFlag());
        o.put("flag", m.getFlag());
        o.put("reconsumeTimes", m.getReconsumeTimes());
        o.put("bodyCRC", m.getBodyCRC());
        o.put("tags", m.getTags());
        o.put("keys", m.getKeys());
        o.put("properties", new TreeMap<>(m.getProperties()));
        byte[] b = m.getBody() == null ? new byte[0] : m.getBody();
        o.put("bodyLength", b.length);
        StringBuilder hex = new StringBuilder();
        for (byte x : MessageDigest.getInstance("SHA-256").digest(b)) {
            hex.append(String.format("%02x", x));
        }
        o.put("bodySha256", hex.toString());
        return o;
    }

    static void consume(JSONObject a) throws Exception {
        String mode = a.getString("mode");
        if ("lite".equals(mode)) {
            lite(a);
        } else {
            push(a, "orderly".equals(mode));
        }
    }

    /** Assign every queue of the topics (a new group: from the first offset), poll each to its
     *  max offset. */
    /** An AclClientRPCHook of the `accessKey`/`secretKey` arguments (null without them). */
    static RPCHook hook(JSONObject a) {
        String ak = a.getString("accessKey");
        return ak == null ? null : new AclClientRPCHook(new SessionCredentials(ak, a.getString("secretKey")));
    }

    /** A consumer catching up on one queue, timed: synchronous pulls of N messages from
     *  offset 0, nextBeginOffset after nextBeginOffset, up to `end`, through the remoting
     *  DefaultMQPullConsumer (routes from `namesrv`: the sidecar's replay port answers them).
     *  `passes` rounds, each started by a line on stdin holding N (the caller drops caches in
     *  between):
     *  {"ready": i} before, {"pass": i, "seconds", "messages", "bytes"} after. */
    @SuppressWarnings("deprecation")
    static void replay(JSONObject a) throws Exception {
        DefaultMQPullConsumer c = new DefaultMQPullConsumer(a.getString("group"));
        c.setNamesrvAddr(a.getString("namesrv"));
        c.setInstanceName("it-replay-" + System.nanoTime());
        c.setVipChannelEnabled(false);
        c.start();
        MessageQueue mq = null;
        for (MessageQueue q : c.fetchSubscribeMessageQueues(a.getString("topic"))) {
            if (q.getQueueId() == a.getIntValue("queueId")) {
                mq = q;
            }
        }
        if (mq == null) {
            throw new IllegalStateException("no queue " + a.getIntValue("queueId") + " in the route");
        }
        long end = a.getLongValue("end");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        for (int p = 0; p < a.getIntValue("passes"); p++) {
            emit(Map.of("ready", p));
            String line = in.readLine();
            if (line == null) {
                break;
            }
            int batch = Integer.parseInt(line.trim());
            long off = 0, n = 0, bytes = 0;
            long t0 = System.nanoTime();
            while (off < end) {
                PullResult r = c.pull(mq, "*", off, batch);
                if (r.getPullStatus() != PullStatus.FOUND) {
                    throw new IllegalStateException("pull at " + off + ": " + r);
                }
                for (MessageExt m : r.getMsgFoundList()) {
                    bytes += m.getStoreSize();
                }
                n += r.getMsgFoundList().size();
                off = r.getNextBeginOffset();
            }
            double seconds = (System.nanoTime() - t0) / 1e9;
            emit(Map.of("pass", p, "seconds", seconds, "messages", n, "bytes", bytes));
        }
        c.shutdown();
    }

    static void lite(JSONObject a) throws Exception {
        String ns = a.getString("namesrv");
        RPCHook hook = hook(a);
        DefaultMQAdminExt admin = hook == null ? new DefaultMQAdminExt() : new DefaultMQAdminExt(hook);
        admin.setNamesrvAddr(ns);
        admin.setInstanceName("it-lite-admin-" + System.nanoTime());
        admin.start();
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(a.getString("group"), hook);
        c.setNamesrvAddr(ns);
        c.setInstanceName("it-lite-" + System.nanoTime());
        c.setVipChannelEnabled(false);
        c.setAutoCommit(false);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPullBatchSize(a.getIntValue("batch") > 0 ? a.getIntValue("batch") : 32);
        c.start();
        Map<MessageQueue, Long> end = new HashMap<>();
        List<MessageQueue> all = new ArrayList<>();
        for (Object t : a.getJSONArray("topics")) {
            for (MessageQueue mq : queuesOf(c, (String) t, a.getLongValue("routeMs"))) {
                long max = admin.maxOffset(mq);
                if (max > 0) {
                    end.put(mq, max);
                    all.add(mq);
                }
            }
        }
        emit(Map.of("queues", end.size()));
        // a new group starts at each queue's first offset (CONSUME_FROM_FIRST_OFFSET); no seek
        // right after assign: in 5.3.3 that races the pull tasks assign starts, and the queue
        // was seen to stall (its cache full, poll returning nothing)
        c.assign(all);
        Map<MessageQueue, Long> next = new HashMap<>();
        long deadline = System.currentTimeMillis() + a.getLongValue("maxMs");
        while (!end.isEmpty() && System.currentTimeMillis() < deadline) {
            for (MessageExt m : c.poll(1000)) {
                emit(Map.of("msg", describe(m, "lite")));
                MessageQueue mq = new MessageQueue(m.getTopic(), m.getBrokerName(), m.getQueueId());
                if (end.containsKey(mq) && m.getQueueOffset() + 1 >= end.get(mq)) {
                    end.remove(mq);
                    c.pause(List.of(mq));
                }
            }
        }
        emit(Map.of("unfinished", end.toString()));
        // no shutdown: nothing to commit (autoCommit off), and main's System.exit ends the
        // client threads (a 5.3.3 lite consumer's shutdown was once seen to hang)
    }

    /** The topic's queues, waiting up to `routeMs` (default 60 s) for its route (a broker that just started
     *  registers with the name server some seconds after its boot line). */
    static Collection<MessageQueue> queuesOf(DefaultLitePullConsumer c, String topic, long routeMs) throws Exception {
        long giveUp = System.currentTimeMillis() + (routeMs > 0 ? routeMs : 60_000);
        while (true) {
            try {
                return c.fetchMessageQueues(topic);
            } catch (Exception e) {
                if (System.currentTimeMillis() > giveUp) {
                    throw e;
                }
                Thread.sleep(500);
            }
        }
    }

    /** A push consumer from the first offset, stopped after `stopAfter` messages (or `idleMs`
     *  without one); `delayMs` per message consumed; with `serverRebalance`, the broker assigns
     *  the queues and says whether to pull or pop them (QUERY_ASSIGNMENT); with `watchAssignment`, one
     *  {"assigned": n, "ms": since start} line each time the number of queues rebalancing gave
     *  it (retry topics left out) changes. */
    static void push(JSONObject a, boolean orderly) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(a.getString("group"));
        c.setNamesrvAddr(a.getString("namesrv"));
        c.setInstanceName("it-push-" + System.nanoTime());
        c.setVipChannelEnabled(false);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setConsumeThreadMin(1);
        c.setConsumeThreadMax(1);
        c.setConsumeMessageBatchMaxSize(1);
        c.setPollNameServerInterval(1000);
        c.setPersistConsumerOffsetInterval(1000);
        c.setClientRebalance(!a.getBooleanValue("serverRebalance"));
        for (Object t : a.getJSONArray("topics")) {
            c.subscribe((String) t, a.getString("expression") == null ? "*" : a.getString("expression"));
        }
        int stopAfter = a.getIntValue("stopAfter");
        long delay = a.getLongValue("delayMs");
        AtomicInteger count = new AtomicInteger();
        AtomicLong last = new AtomicLong(System.currentTimeMillis());
        String via = orderly ? "orderly" : "push";
        if (orderly) {
            c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    if (count.get() >= stopAfter) {
                        return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT;
                    }
                    record(m, via, count, last);
                }
                return ConsumeOrderlyStatus.SUCCESS;
            });
        } else {
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    if (count.get() >= stopAfter) {
                        return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                    }
                    if (delay > 0) {
                        LockSupport.parkNanos(delay * 1_000_000L);
                    }
                    record(m, via, count, last);
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
        }
        long started = System.currentTimeMillis();
        c.start();
        AtomicBoolean watching = new AtomicBoolean(a.getBooleanValue("watchAssignment"));
        Thread watcher = watching.get() ? watchAssignment(c, started, watching) : null;
        long deadline = System.currentTimeMillis() + a.getLongValue("maxMs");
        long idle = a.getLongValue("idleMs");
        while (System.currentTimeMillis() < deadline && count.get() < stopAfter
            && (idle == 0 || System.currentTimeMillis() - last.get() < idle)) {
            Thread.sleep(100);
        }
        Thread.sleep(500);
        if (watcher != null) { // no "assigned" line after the last one: the shutdown empties it
            watching.set(false);
            watcher.join();
        }
        commitOffsets(c);
        c.shutdown(); // persists the consumed offsets again (one-way) and leaves the group
        emit(Map.of("consumed", count.get()));
    }

    /** Commit the offsets `c` consumed to the broker, each answered (a sync request), before
     *  its shutdown. The client's own commit at shutdown is one-way and comes after the consume
     *  thread is interrupted; an interrupted send-back (a message returned RECONSUME_LATER past
     *  `stopAfter`) makes the client close its channel to the broker, and the one-way commits
     *  written to that channel were seen lost (its queues then replayed from 0 on restart). */
    static void commitOffsets(DefaultMQPushConsumer c) throws Exception {
        c.suspend(); // no more pulls
        var impl = c.getDefaultMQPushConsumerImpl();
        var store = impl.getOffsetStore();
        for (MessageQueue mq : impl.getRebalanceImpl().getProcessQueueTable().keySet()) {
            long offset = store.readOffset(mq, ReadOffsetType.READ_FROM_MEMORY);
            if (offset < 0 || mq.getTopic().startsWith(MixAll.RETRY_GROUP_TOPIC_PREFIX)) {
                continue; // (the sidecar has no retry topics: it refuses their offsets)
            }
            for (int attempt = 1; ; attempt++) {
                try {
                    store.updateConsumeOffsetToBroker(mq, offset, false);
                    break;
                } catch (RemotingException e) { // the channel closed under it: a new one is made
                    if (attempt == 5) {
                        throw e;
                    }
                    Thread.sleep(100);
                }
            }
        }
    }

    /** Emit the number of (non-retry) queues `c` holds whenever it changes, while `watching`. */
    static Thread watchAssignment(DefaultMQPushConsumer c, long started, AtomicBoolean watching) {
        Thread t = new Thread(() -> {
            long held = -1;
            while (watching.get()) {
                long n = c.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable()
                    .keySet().stream().filter(q -> !q.getTopic().startsWith("%RETRY%")).count();
                if (n != held) {
                    held = n;
                    emit(Map.of("assigned", n, "ms", System.currentTimeMillis() - started));
                }
                LockSupport.parkNanos(50_000_000L);
            }
        }, "driver-assignment");
        t.setDaemon(true);
        t.start();
        return t;
    }

    static void record(MessageExt m, String via, AtomicInteger count, AtomicLong last) {
        try {
            emit(Map.of("msg", describe(m, via)));
        } catch (Exception e) {
            throw new RuntimeException(e);
        }
        count.incrementAndGet();
        last.set(System.currentTimeMillis());
    }

    // --- load ----------------------------------------------------------------------------------

    /** The broker's commitlog max offset (its runtime stats) and the sum of the topic's
     *  consume-queue max offsets. */
    static Map<String, Object> offsets(DefaultMQAdminExt admin, String broker, String topic) throws Exception {
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("commitLogMaxOffset",
            Long.parseLong(admin.fetchBrokerRuntimeStats(broker).getTable().get("commitLogMaxOffset")));
        long messages = 0;
        for (TopicOffset t : admin.examineTopicStats(topic).getOffsetTable().values()) {
            messages += t.getMaxOffset();
        }
        o.put("queueMaxOffsetSum", messages);
        return o;
    }

    static double percentile(long[] sorted, double q) {
        if (sorted.length == 0) {
            return 0;
        }
        int i = (int) Math.ceil(q * sorted.length) - 1;
        return sorted[Math.max(0, Math.min(sorted.length - 1, i))] / 1e6;
    }

    static Map<String, Object> latencies(long[] nanos) {
        long[] s = nanos.clone();
        Arrays.sort(s);
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("p50Ms", percentile(s, 0.50));
        o.put("p90Ms", percentile(s, 0.90));
        o.put("p99Ms", percentile(s, 0.99));
        o.put("p999Ms", percentile(s, 0.999));
        o.put("maxMs", percentile(s, 1.0));
        return o;
    }

    /** Fixed-rate loads for benchmarks, one JVM for a sequence of them: create `topics`,
     *  start one producer, then for each line read on stdin (a JSON phase: `topic`, `count`,
     *  `size`, `rate`, `threads`, `keyShare`, `tag`, `seed`) send it and print one
     *  {"load": ...} line; exit at end of input. A phase is an open-loop schedule: message i is
     *  due at start + i / rate; `threads` senders take the next message, wait until it is due,
     *  send it synchronously and record the time the send call took (service time) and the
     *  time from when it was due (which includes waiting for a free sender). Each message has
     *  two KEYS: a unique one and an order id shared by `keyShare` consecutive messages. */
    static void load(JSONObject a) throws Exception {
        createTopics(a);
        String broker = a.getString("broker");
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(a.getString("namesrv"));
        admin.setInstanceName("it-load-admin-" + System.nanoTime());
        admin.start();
        DefaultMQProducer p = producer(a, "it-load");
        try {
            emit(Map.of("ready", true));
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            String line;
            while ((line = in.readLine()) != null && !line.isBlank()) {
                JSONObject phase = JSON.parseObject(line);
                Map<String, Object> before = offsets(admin, broker, phase.getString("topic"));
                Map<String, Object> o = loadPhase(p, phase);
                o.put("before", before);
                o.put("after", offsets(admin, broker, phase.getString("topic")));
                emit(Map.of("load", o));
            }
        } finally {
            p.shutdown();
            admin.shutdown();
        }
    }

    static Map<String, Object> loadPhase(DefaultMQProducer p, JSONObject a) throws Exception {
        String topic = a.getString("topic");
        int count = a.getIntValue("count");
        double rate = a.getDoubleValue("rate");
        int threads = Math.max(1, a.getIntValue("threads"));
        int share = Math.max(1, a.getIntValue("keyShare"));
        String tag = a.getString("tag");
        Random rnd = new Random(a.getLongValue("seed"));
        byte[][] bodies = new byte[64][];
        for (int i = 0; i < bodies.length; i++) {
            bodies[i] = body(rnd, a.getIntValue("size"), false);
        }
        long[] service = new long[count];
        long[] fromDue = new long[count];
        AtomicInteger next = new AtomicInteger();
        AtomicInteger failed = new AtomicInteger();
        AtomicLong lateMax = new AtomicLong();
        long start = System.nanoTime() + 1_000_000;
        double step = 1e9 / rate;
        List<Thread> senders = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            Thread th = new Thread(() -> {
                while (true) {
                    int i = next.getAndIncrement();
                    if (i >= count) {
                        return;
                    }
                    long due = start + (long) (i * step);
                    long now;
                    while ((now = System.nanoTime()) < due) {
                        LockSupport.parkNanos(due - now);
                    }
                    lateMax.accumulateAndGet(now - due, Math::max);
                    Message m = new Message(topic, "Load", bodies[i % bodies.length]);
                    m.setKeys(List.of("u-" + tag + "-" + i, "order-" + tag + "-" + (i / share)));
                    try {
                        if (p.send(m).getSendStatus() != SendStatus.SEND_OK) {
                            failed.incrementAndGet();
                        }
                    } catch (Exception e) {
                        failed.incrementAndGet();
                    }
                    long end = System.nanoTime();
                    service[i] = end - now;
                    fromDue[i] = end - due;
                }
            }, "load-" + t);
            th.start();
            senders.add(th);
        }
        for (Thread th : senders) {
            th.join();
        }
        long nanos = System.nanoTime() - start;
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("topic", topic);
        o.put("sent", count);
        o.put("failed", failed.get());
        o.put("seconds", nanos / 1e9);
        o.put("rate", count / (nanos / 1e9));
        o.put("service", latencies(service));
        o.put("fromDue", latencies(fromDue));
        o.put("lateMaxMs", lateMax.get() / 1e6);
        return o;
    }

    // --- spread --------------------------------------------------------------------------------

    /** Many topics at once: one UPDATE_AND_CREATE_TOPIC_LIST request creates them all, then the
     *  route of every one is awaited; then every queue gets `min`..`max` messages (seeded), sent
     *  round by round over all queues, each round shuffled, so that consecutive messages land in
     *  different queues as a producer of many topics writes them. */
    static void spread(JSONObject a) throws Exception {
        String prefix = a.getString("prefix");
        int topics = a.getIntValue("topics");
        int queues = a.getIntValue("queues");
        String brokerName = a.getString("brokerName");
        Random rnd = new Random(a.getLongValue("seed"));
        long t0 = System.nanoTime();
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(a.getString("namesrv"));
        admin.setInstanceName("it-spread-admin-" + System.nanoTime());
        admin.start();
        try {
            List<TopicConfig> configs = new ArrayList<>();
            for (int t = 0; t < topics; t++) {
                configs.add(new TopicConfig(prefix + t, queues, queues, 6));
            }
            admin.createAndUpdateTopicConfigList(a.getString("broker"), configs);
            List<String> names = new ArrayList<>();
            for (TopicConfig c : configs) {
                names.add(c.getTopicName());
            }
            awaitRoutes(admin, names);
        } finally {
            admin.shutdown();
        }
        emit(Map.of("created", Map.of("topics", topics, "ms", (System.nanoTime() - t0) / 1_000_000)));
        int min = a.getIntValue("min");
        int max = a.getIntValue("max");
        int minSize = a.getIntValue("minSize");
        int maxSize = a.getIntValue("maxSize");
        int n = topics * queues;
        int[] want = new int[n];
        int rounds = 0;
        for (int i = 0; i < n; i++) {
            want[i] = min + rnd.nextInt(max - min + 1);
            rounds = Math.max(rounds, want[i]);
        }
        List<Integer> plan = new ArrayList<>();
        for (int r = 0; r < rounds; r++) {
            List<Integer> round = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                if (want[i] > r) {
                    round.add(i);
                }
            }
            Collections.shuffle(round, rnd);
            plan.addAll(round);
        }
        int[] sizes = new int[plan.size()];
        for (int i = 0; i < sizes.length; i++) {
            sizes[i] = minSize + rnd.nextInt(maxSize - minSize + 1);
        }
        byte[][] pool = new byte[64][];
        for (int i = 0; i < pool.length; i++) {
            pool[i] = body(rnd, maxSize, false);
        }
        long[][] offsets = new long[n][];
        String[][] ids = new String[n][];
        for (int i = 0; i < n; i++) {
            offsets[i] = new long[want[i]];
            ids[i] = new String[want[i]];
        }
        int[] filled = new int[n];
        AtomicInteger next = new AtomicInteger();
        AtomicInteger failed = new AtomicInteger();
        DefaultMQProducer p = producer(a, "it-spread");
        long s0 = System.nanoTime();
        try {
            List<Thread> senders = new ArrayList<>();
            for (int t = 0; t < Math.max(1, a.getIntValue("threads")); t++) {
                Thread th = new Thread(() -> {
                    while (true) {
                        int i = next.getAndIncrement();
                        if (i >= sizes.length) {
                            return;
                        }
                        int q = plan.get(i);
                        String topic = prefix + (q / queues);
                        Message m = new Message(topic, "Spread", Arrays.copyOf(pool[i % pool.length], sizes[i]));
                        try {
                            SendResult r = sendRetrying(p, m, new MessageQueue(topic, brokerName, q % queues), 30_000);
                            if (r.getSendStatus() != SendStatus.SEND_OK) {
                                failed.incrementAndGet();
                                continue;
                            }
                            synchronized (offsets[q]) {
                                offsets[q][filled[q]] = r.getQueueOffset();
                                ids[q][filled[q]] = r.getMsgId() + "/" + r.getOffsetMsgId();
                                filled[q]++;
                            }
                        } catch (Exception e) {
                            e.printStackTrace();
                            failed.incrementAndGet();
                        }
                    }
                }, "spread-" + t);
                th.start();
                senders.add(th);
            }
            for (Thread th : senders) {
                th.join();
            }
        } finally {
            p.shutdown();
        }
        if (failed.get() > 0) {
            throw new IllegalStateException(failed.get() + " of " + sizes.length + " sends failed");
        }
        long bytes = 0;
        for (int s : sizes) {
            bytes += s;
        }
        emit(Map.of("sent", Map.of("messages", sizes.length, "bodyBytes", bytes,
            "ms", (System.nanoTime() - s0) / 1_000_000)));
        for (int i = 0; i < n; i++) {
            Map<String, Object> o = new LinkedHashMap<>();
            o.put("topic", prefix + (i / queues));
            o.put("queueId", i % queues);
            o.put("offsets", offsets[i]);
            o.put("ids", ids[i]);
            emit(Map.of("queue", o));
        }
    }

    /** Send to one queue, retrying for up to `retryMs` (see the other sendRetrying). */
    static SendResult sendRetrying(DefaultMQProducer p, Message m, MessageQueue mq, long retryMs) throws Exception {
        long giveUp = System.currentTimeMillis() + retryMs;
        while (true) {
            try {
                return p.send(m, mq);
            } catch (Exception e) {
                if (System.currentTimeMillis() > giveUp) {
                    throw e;
                }
            }
            Thread.sleep(200);
        }
    }

    // --- admin ---------------------------------------------------------------------------------

    /** Run each mqadmin sub-command as the mqadmin script would, capturing what it prints. */
    static void admin(JSONObject a) throws Exception {
        JSONArray commands = a.getJSONArray("commands");
        for (int i = 0; i < commands.size(); i++) {
            String[] argv = commands.getJSONArray(i).toArray(new String[0]);
            ByteArrayOutputStream buf = new ByteArrayOutputStream();
            PrintStream cap = new PrintStream(buf, true, StandardCharsets.UTF_8);
            PrintStream oldErr = System.err;
            System.setOut(cap);
            System.setErr(cap);
            try {
                MQAdminStartup.main0(argv, null);
            } finally {
                System.setOut(oldErr);
                System.setErr(oldErr);
            }
            Map<String, Object> o = new LinkedHashMap<>();
            o.put("command", List.of(argv));
            o.put("output", buf.toString(StandardCharsets.UTF_8));
            emit(Map.of("admin", o));
        }
    }

    /** Wait (at most 60 s) until every topic's route has queue data, or the first send fails. */
    static void awaitRoutes(DefaultMQAdminExt admin, Iterable<String> topics) throws Exception {
        long giveUp = System.currentTimeMillis() + 60_000;
        for (String t : topics) {
            while (true) {
                try {
                    if (!admin.examineTopicRouteInfo(t).getQueueDatas().isEmpty()) {
                        break;
                    }
                } catch (Exception e) {
                    if (System.currentTimeMillis() > giveUp) {
                        throw e;
                    }
                }
                Thread.sleep(200);
            }
        }
    }
}
