package org.tubespark.interop;

import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;

import org.apache.inlong.tubemq.client.config.ConsumerConfig;
import org.apache.inlong.tubemq.client.config.TubeClientConfig;
import org.apache.inlong.tubemq.client.consumer.ConsumePosition;
import org.apache.inlong.tubemq.client.consumer.ConsumerResult;
import org.apache.inlong.tubemq.client.consumer.PullMessageConsumer;
import org.apache.inlong.tubemq.client.factory.MessageSessionFactory;
import org.apache.inlong.tubemq.client.factory.TubeSingleSessionFactory;
import org.apache.inlong.tubemq.client.producer.MessageProducer;
import org.apache.inlong.tubemq.client.producer.MessageSentResult;
import org.apache.inlong.tubemq.corebase.Message;

import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.UUID;

/**
 * A small command line front end to the official TubeMQ Java client, used by the tubespark tests to
 * compare our Python codec with the real thing.
 *
 * <pre>
 * produce --master H:P --topic T --input FILE.jsonl [--timeout-ms MS]
 * consume --master H:P --group G --topic T --count N [--filters a,b] [--from-first] [--timeout-ms MS]
 * range   --master H:P --group G --topic T --partition-key B:T:P --start X --end Y [--timeout-ms MS]
 * </pre>
 *
 * Input lines of produce: {"data": base64, "attrs": {k: v} | null, "msgType": s | null, "msgTime":
 * "yyyyMMddHHmm" | null}. consume and range also take --heartbeat-ms (master heartbeat period, 3000
 * here instead of the client's 13000 so that a new consumer gets its partitions sooner).
 *
 * Results are JSON lines on stdout (one per message); everything else (the client's own logging
 * included) goes to stderr. Exit code 0 on success, 1 on a failed operation or timeout, 2 on bad
 * usage; a watchdog halts the JVM if shutting the client down hangs past the deadline.
 */
public final class TubeInterop {

    /** Size of one index record: offsets of a one-partition store advance by this per message. */
    static final long INDEX_UNIT = 28L;
    /** Extra time the watchdog allows past --timeout-ms for shutting the client down. */
    static final long SHUTDOWN_GRACE_MS = 20_000L;

    static final Gson GSON = new GsonBuilder().serializeNulls().disableHtmlEscaping().create();

    /** The real stdout, kept for results; System.out is pointed at stderr before anything logs. */
    static PrintStream out;

    private TubeInterop() {
    }

    public static void main(String[] argv) {
        out = new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
        System.setOut(System.err);
        int rc;
        try {
            if (argv.length < 1) {
                throw new UsageException("missing subcommand (produce | consume | range)");
            }
            Args args = Args.parse(argv);
            long timeoutMs = args.getLong("timeout-ms", 60_000L);
            if (timeoutMs <= 0) {
                throw new UsageException("--timeout-ms must be positive");
            }
            Deadline deadline = new Deadline(timeoutMs);
            startWatchdog(timeoutMs + SHUTDOWN_GRACE_MS);
            switch (argv[0]) {
                case "produce":
                    rc = produce(args, deadline);
                    break;
                case "consume":
                    rc = consume(args, deadline);
                    break;
                case "range":
                    rc = range(args, deadline);
                    break;
                default:
                    throw new UsageException("unknown subcommand: " + argv[0]);
            }
        } catch (UsageException e) {
            System.err.println("usage error: " + e.getMessage());
            rc = 2;
        } catch (Throwable e) {
            System.err.println("FAILED: " + e);
            e.printStackTrace(System.err);
            rc = 1;
        }
        out.flush();
        System.err.flush();
        // The client leaves non-daemon netty/timer threads behind: exit explicitly.
        System.exit(rc);
    }

    // ------------------------------------------------------------------------------------------
    // produce

    static int produce(Args args, Deadline deadline) throws Throwable {
        String master = args.require("master");
        String topic = args.require("topic");
        Path input = Path.of(args.require("input"));
        List<Message> messages = new ArrayList<>();
        int lineNo = 0;
        for (String line : Files.readAllLines(input, StandardCharsets.UTF_8)) {
            lineNo++;
            if (line.isBlank()) {
                continue;
            }
            try {
                messages.add(buildMessage(topic, JsonParser.parseString(line).getAsJsonObject()));
            } catch (RuntimeException e) {
                throw new UsageException(input + ":" + lineNo + ": " + e);
            }
        }
        TubeClientConfig config = new TubeClientConfig(master);
        MessageSessionFactory factory = new TubeSingleSessionFactory(config);
        MessageProducer producer = null;
        try {
            producer = factory.createProducer();
            producer.publish(topic);
            // publish() heartbeats once; a freshly deployed topic may need a later heartbeat.
            while (!producer.isTopicCurAcceptPublish(topic)) {
                if (deadline.expired()) {
                    return fail("topic " + topic + " has no publishable partition after "
                            + deadline.elapsedMs() + " ms");
                }
                Thread.sleep(200);
            }
            System.err.println("producer ready for " + topic + " after " + deadline.elapsedMs() + " ms");
            for (int i = 0; i < messages.size(); i++) {
                if (deadline.expired()) {
                    return fail("timeout after sending " + i + " of " + messages.size() + " messages");
                }
                MessageSentResult result = producer.sendMessage(messages.get(i));
                JsonObject line = new JsonObject();
                line.addProperty("ok", result.isSuccess());
                line.addProperty("errCode", result.getErrCode());
                if (result.getPartition() != null) {
                    line.addProperty("partition", result.getPartition().getPartitionKey());
                    line.addProperty("partitionId", result.getPartition().getPartitionId());
                } else {
                    line.add("partition", null);
                    line.add("partitionId", null);
                }
                line.addProperty("messageId", result.getMessageId());
                line.addProperty("appendOffset", result.getAppendOffset());
                line.addProperty("appendTime", result.getAppendTime());
                if (!result.isSuccess()) {
                    line.addProperty("errMsg", result.getErrMsg());
                }
                emit(line);
                if (!result.isSuccess()) {
                    return fail("send of message " + i + " failed: errCode=" + result.getErrCode()
                            + " " + result.getErrMsg());
                }
            }
            System.err.println("sent " + messages.size() + " messages in " + deadline.elapsedMs() + " ms");
            return 0;
        } finally {
            if (producer != null) {
                shutdownQuietly(producer::shutdown);
            }
            shutdownQuietly(factory::shutdown);
        }
    }

    static Message buildMessage(String topic, JsonObject obj) {
        byte[] data = Base64.getDecoder().decode(requireString(obj, "data"));
        Message message = new Message(topic, data);
        JsonElement attrs = obj.get("attrs");
        if (attrs != null && !attrs.isJsonNull()) {
            for (Map.Entry<String, JsonElement> e : attrs.getAsJsonObject().entrySet()) {
                message.setAttrKeyVal(e.getKey(), e.getValue().getAsString());
            }
        }
        String msgType = optString(obj, "msgType");
        String msgTime = optString(obj, "msgTime");
        if (msgType != null || msgTime != null) {
            // Rebuilds the attribute as "$msgType$=T,$msgTime$=yyyyMMddHHmm,<the other items>".
            message.putSystemHeader(msgType, msgTime);
        }
        return message;
    }

    // ------------------------------------------------------------------------------------------
    // consume

    static int consume(Args args, Deadline deadline) throws Throwable {
        String master = args.require("master");
        String group = args.require("group");
        String topic = args.require("topic");
        long count = args.getLong("count", -1L);
        if (count < 0) {
            throw new UsageException("--count N is required");
        }
        TreeSet<String> filters = null;
        String filterArg = args.get("filters");
        if (filterArg != null && !filterArg.isBlank()) {
            filters = new TreeSet<>();
            for (String f : filterArg.split(",")) {
                if (!f.isBlank()) {
                    filters.add(f.trim());
                }
            }
        }
        ConsumePosition position = args.flag("from-first")
                ? ConsumePosition.CONSUMER_FROM_FIRST_OFFSET
                : ConsumePosition.CONSUMER_FROM_LATEST_OFFSET;
        ConsumerConfig config = consumerConfig(master, group, position, args);
        MessageSessionFactory factory = new TubeSingleSessionFactory(config);
        PullMessageConsumer consumer = null;
        try {
            consumer = factory.createPullConsumer(config);
            consumer.subscribe(topic, filters);
            consumer.completeSubscribe();
            long received = 0;
            long firstMessageAt = -1;
            while (received < count) {
                if (deadline.expired()) {
                    return fail("timeout: received " + received + " of " + count + " messages in "
                            + deadline.elapsedMs() + " ms");
                }
                ConsumerResult result = consumer.getMessage();
                if (!result.isSuccess()) {
                    continue; // 404 no data, no partition yet, partitions busy/waiting, ...
                }
                List<Message> batch = result.getMessageList();
                ConsumerResult confirm = consumer.confirmConsume(result.getConfirmContext(), true);
                for (int k = 0; k < batch.size(); k++) {
                    JsonObject line = messageLine(result, batch.get(k), k);
                    line.addProperty("confirmOffset", confirm.isSuccess() ? confirm.getCurrOffset() : -1L);
                    emit(line);
                }
                if (!batch.isEmpty() && firstMessageAt < 0) {
                    firstMessageAt = deadline.elapsedMs();
                    System.err.println("first message after " + firstMessageAt + " ms");
                }
                received += batch.size();
                if (!confirm.isSuccess()) {
                    System.err.println("confirm failed for " + result.getPartitionKey() + ": errCode="
                            + confirm.getErrCode() + " " + confirm.getErrMsg());
                }
            }
            System.err.println("received " + received + " messages in " + deadline.elapsedMs() + " ms");
            return 0;
        } finally {
            if (consumer != null) {
                shutdownQuietly(consumer::shutdown);
            }
            shutdownQuietly(factory::shutdown);
        }
    }

    // ------------------------------------------------------------------------------------------
    // range

    static int range(Args args, Deadline deadline) throws Throwable {
        String master = args.require("master");
        String group = args.require("group");
        String topic = args.require("topic");
        String partKey = args.require("partition-key");
        long start = args.getLong("start", -1L);
        long end = args.getLong("end", -1L);
        String[] keyParts = partKey.split(":");
        if (keyParts.length != 3 || !keyParts[1].equals(topic)) {
            throw new UsageException("--partition-key must be brokerId:" + topic + ":partitionId, got " + partKey);
        }
        if (start < 0 || end < 0 || start % INDEX_UNIT != 0 || end % INDEX_UNIT != 0) {
            throw new UsageException("--start/--end must be non-negative multiples of " + INDEX_UNIT);
        }
        if (start >= end) {
            System.err.println("empty range [" + start + ", " + end + ")");
            return 0;
        }
        // Partitions other than the requested one start at the end of their stores (nothing to skip);
        // the requested one starts at `start`, applied by the client on its first broker registration.
        ConsumerConfig config = consumerConfig(master, group, ConsumePosition.CONSUMER_FROM_LATEST_OFFSET, args);
        MessageSessionFactory factory = new TubeSingleSessionFactory(config);
        PullMessageConsumer consumer = null;
        try {
            consumer = factory.createPullConsumer(config);
            consumer.subscribe(topic, null);
            Map<String, Long> partOffsets = new HashMap<>();
            partOffsets.put(partKey, start);
            String sessionKey = "tubespark-range-" + UUID.randomUUID();
            consumer.completeSubscribe(sessionKey, 1, true, partOffsets);
            long expected = start; // offset the next batch of the partition must start at
            long emitted = 0;
            while (expected < end) {
                if (deadline.expired()) {
                    return fail("timeout: read [" + start + ", " + expected + ") of [" + start + ", " + end
                            + ") of " + partKey + " in " + deadline.elapsedMs() + " ms");
                }
                ConsumerResult result = consumer.getMessage();
                if (!result.isSuccess()) {
                    continue;
                }
                List<Message> batch = result.getMessageList();
                ConsumerResult confirm = consumer.confirmConsume(result.getConfirmContext(), true);
                if (!partKey.equals(result.getPartitionKey())) {
                    continue; // another partition of the topic, handed out by the balancer
                }
                long batchOffset = result.getCurrOffset();
                if (batchOffset != expected) {
                    return fail("batch of " + partKey + " starts at " + batchOffset + ", expected " + expected
                            + (expected == start ? " (requested start not applied or clamped)" : " (gap)"));
                }
                long batchEnd = batchOffset + INDEX_UNIT * batch.size();
                if (!confirm.isSuccess()) {
                    return fail("confirm of " + partKey + " at " + batchOffset + " failed: errCode="
                            + confirm.getErrCode() + " " + confirm.getErrMsg());
                }
                if (confirm.getCurrOffset() >= 0 && confirm.getCurrOffset() != batchEnd) {
                    return fail("batch of " + partKey + " at " + batchOffset + " with " + batch.size()
                            + " messages committed to " + confirm.getCurrOffset() + ", expected " + batchEnd
                            + " (offsets are not dense: several partitions per store, filters or dropped messages)");
                }
                for (int k = 0; k < batch.size(); k++) {
                    long offset = batchOffset + INDEX_UNIT * k;
                    if (offset >= end) {
                        break;
                    }
                    JsonObject line = messageLine(result, batch.get(k), k);
                    line.addProperty("offset", offset);
                    emit(line);
                    emitted++;
                }
                expected = batchEnd;
            }
            System.err.println("read " + emitted + " messages of " + partKey + " [" + start + ", " + end
                    + ") in " + deadline.elapsedMs() + " ms");
            return 0;
        } finally {
            if (consumer != null) {
                shutdownQuietly(consumer::shutdown);
            }
            shutdownQuietly(factory::shutdown);
        }
    }

    // ------------------------------------------------------------------------------------------
    // helpers

    static ConsumerConfig consumerConfig(String master, String group, ConsumePosition position, Args args)
            throws UsageException {
        ConsumerConfig config = new ConsumerConfig(master, group);
        config.setConsumePosition(position);
        // getMessage() returns after at most this long when nothing is consumable, so the loops can
        // check their deadline (the client's default is 90 s).
        config.setPullConsumeReadyWaitPeriodMs(1000L);
        config.setPullConsumeReadyChkSliceMs(20L);
        // The master hands out partitions in heartbeat responses; the client's default period is 13 s.
        config.setHeartbeatPeriodMs(args.getLong("heartbeat-ms", 3000L));
        config.setShutDownRebalanceWaitPeriodMs(3000L);
        return config;
    }

    static JsonObject messageLine(ConsumerResult result, Message msg, int index) {
        JsonObject line = new JsonObject();
        line.addProperty("partitionKey", result.getPartitionKey());
        line.addProperty("batchOffset", result.getCurrOffset());
        line.addProperty("maxOffset", result.getMaxOffset());
        line.addProperty("index", index);
        line.addProperty("data", Base64.getEncoder().encodeToString(msg.getData()));
        line.addProperty("attribute", msg.getAttribute());
        line.addProperty("msgType", msg.getMsgType());
        line.addProperty("msgTime", msg.getMsgTime());
        line.addProperty("flag", msg.getFlag());
        line.addProperty("messageId", msg.getIndexId());
        return line;
    }

    static void emit(JsonObject line) {
        out.println(GSON.toJson(line));
        out.flush();
    }

    static int fail(String reason) {
        System.err.println("FAILED: " + reason);
        return 1;
    }

    static String requireString(JsonObject obj, String key) {
        String value = optString(obj, key);
        if (value == null) {
            throw new IllegalArgumentException("missing \"" + key + "\"");
        }
        return value;
    }

    static String optString(JsonObject obj, String key) {
        JsonElement e = obj.get(key);
        return e == null || e.isJsonNull() ? null : e.getAsString();
    }

    interface Shutdown {
        void run() throws Throwable;
    }

    static void shutdownQuietly(Shutdown action) {
        try {
            action.run();
        } catch (Throwable e) {
            System.err.println("shutdown error (ignored): " + e);
        }
    }

    static void startWatchdog(long limitMs) {
        Thread t = new Thread(() -> {
            try {
                Thread.sleep(limitMs);
            } catch (InterruptedException e) {
                return;
            }
            System.err.println("FAILED: watchdog: still running after " + limitMs + " ms, halting");
            out.flush();
            System.err.flush();
            Runtime.getRuntime().halt(3);
        }, "tubespark-watchdog");
        t.setDaemon(true);
        t.start();
    }

    static final class Deadline {
        private final long startNs = System.nanoTime();
        private final long timeoutMs;

        Deadline(long timeoutMs) {
            this.timeoutMs = timeoutMs;
        }

        long elapsedMs() {
            return (System.nanoTime() - startNs) / 1_000_000L;
        }

        boolean expired() {
            return elapsedMs() >= timeoutMs;
        }
    }

    static final class UsageException extends Exception {
        private static final long serialVersionUID = 1L;

        UsageException(String message) {
            super(message);
        }
    }

    /** {@code --key value} options and bare {@code --flag}s after the subcommand. */
    static final class Args {
        private final Map<String, String> values = new HashMap<>();

        static Args parse(String[] argv) throws UsageException {
            Args args = new Args();
            for (int i = 1; i < argv.length; i++) {
                String a = argv[i];
                if (!a.startsWith("--") || a.length() == 2) {
                    throw new UsageException("unexpected argument: " + a);
                }
                String key = a.substring(2);
                if (i + 1 < argv.length && !argv[i + 1].startsWith("--")) {
                    args.values.put(key, argv[++i]);
                } else {
                    args.values.put(key, null);
                }
            }
            return args;
        }

        String get(String key) {
            return values.get(key);
        }

        boolean flag(String key) {
            return values.containsKey(key);
        }

        String require(String key) throws UsageException {
            String v = values.get(key);
            if (v == null || v.isBlank()) {
                throw new UsageException("--" + key + " is required");
            }
            return v;
        }

        long getLong(String key, long dflt) throws UsageException {
            String v = values.get(key);
            if (v == null) {
                return dflt;
            }
            try {
                return Long.parseLong(v.trim());
            } catch (NumberFormatException e) {
                throw new UsageException("--" + key + " must be an integer, got " + v);
            }
        }
    }
}
