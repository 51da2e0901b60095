package org.tubespark.bench;

import org.apache.inlong.tubemq.client.config.ConsumerConfig;
import org.apache.inlong.tubemq.client.config.TubeClientConfig;
import org.apache.inlong.tubemq.client.consumer.ConsumePosition;
import org.apache.inlong.tubemq.client.consumer.ConsumerResult;
import org.apache.inlong.tubemq.client.consumer.PullMessageConsumer;
import org.apache.inlong.tubemq.client.factory.MessageSessionFactory;
import org.apache.inlong.tubemq.client.factory.TubeSingleSessionFactory;
import org.apache.inlong.tubemq.client.producer.MessageProducer;
import org.apache.inlong.tubemq.client.producer.MessageSentCallback;
import org.apache.inlong.tubemq.client.producer.MessageSentResult;
import org.apache.inlong.tubemq.corebase.Message;

import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The official TubeMQ Java client at full speed, as the reference tubespark's figures are compared with.
 *
 * <pre>
 * consume --master H:P --group G --topic T --count N [--threads K] [--timeout-ms MS]
 * produce --master H:P --topic T --count N --size BYTES [--rate MSGS_PER_S] [--stamp] [--in-flight K] [--retries R]
 *         [--timeout-ms MS]
 * </pre>
 *
 * consume: one PullMessageConsumer from the first offset, K threads calling getMessage/confirmConsume,
 * until N messages arrived. produce: async sendMessage with at most K unacknowledged messages, optionally
 * paced to a steady rate; with --stamp every body starts with the send time in epoch microseconds (16
 * ASCII digits) so a reader can compute produce-to-sink latency. A send the broker refuses (busy, timeout)
 * is sent again, as an application would, up to --retries times in all (default 1% of N + 100). Both print ONE JSON line on stdout:
 * messages, bytes, seconds (first to last message), setup_seconds (connect, subscribe, first
 * assignment), msgs_per_s. The client's own logging goes to stderr.
 */
public final class TubeBench {

    static PrintStream out;

    private TubeBench() {
    }

    public static void main(String[] argv) throws Exception {
        out = new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
        System.setOut(System.err);
        Map<String, String> args = parse(argv);
        long timeoutMs = Long.parseLong(args.getOrDefault("timeout-ms", "600000"));
        Thread watchdog = new Thread(() -> {
            try {
                Thread.sleep(timeoutMs + 20_000L);
            } catch (InterruptedException e) {
                return;
            }
            System.err.println("FAILED: watchdog halted the JVM after " + timeoutMs + " ms");
            Runtime.getRuntime().halt(3);
        }, "bench-watchdog");
        watchdog.setDaemon(true);
        watchdog.start();
        int rc;
        try {
            switch (argv.length > 0 ? argv[0] : "") {
                case "consume":
                    rc = consume(args, timeoutMs);
                    break;
                case "produce":
                    rc = produce(args, timeoutMs);
                    break;
                default:
                    System.err.println("usage: consume|produce --master H:P --topic T ...");
                    rc = 2;
            }
        } catch (Throwable e) {
            System.err.println("FAILED: " + e);
            e.printStackTrace(System.err);
            rc = 1;
        }
        out.flush();
        System.exit(rc); // the client leaves non-daemon threads behind
    }

    // ------------------------------------------------------------------------------------------

    static int consume(Map<String, String> args, long timeoutMs) throws Exception {
        String master = need(args, "master");
        String group = need(args, "group");
        String topic = need(args, "topic");
        long count = Long.parseLong(need(args, "count"));
        int threads = Integer.parseInt(args.getOrDefault("threads", "2"));
        long started = System.nanoTime();
        long deadline = started + timeoutMs * 1_000_000L;
        ConsumerConfig config = new ConsumerConfig(master, group);
        config.setConsumePosition(ConsumePosition.CONSUMER_FROM_FIRST_OFFSET);
        config.setPullConsumeReadyWaitPeriodMs(1000L);
        config.setPullConsumeReadyChkSliceMs(10L);
        config.setHeartbeatPeriodMs(3000L); // partitions arrive with a heartbeat: 13 s by default
        config.setShutDownRebalanceWaitPeriodMs(1000L);
        MessageSessionFactory factory = new TubeSingleSessionFactory(config);
        PullMessageConsumer consumer = factory.createPullConsumer(config);
        AtomicLong received = new AtomicLong();
        AtomicLong bytes = new AtomicLong();
        AtomicLong firstAt = new AtomicLong(-1);
        AtomicLong lastAt = new AtomicLong(-1);
        try {
            consumer.subscribe(topic, null);
            consumer.completeSubscribe();
            List<Thread> workers = new ArrayList<>();
            List<Throwable> errors = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                Thread w = new Thread(() -> {
                    try {
                        while (received.get() < count && System.nanoTime() < deadline) {
                            ConsumerResult result = consumer.getMessage();
                            if (!result.isSuccess()) {
                                continue; // no data yet, partition busy, not assigned yet
                            }
                            List<Message> batch = result.getMessageList();
                            long size = 0;
                            for (Message m : batch) {
                                size += m.getData().length;
                            }
                            consumer.confirmConsume(result.getConfirmContext(), true);
                            if (!batch.isEmpty()) {
                                firstAt.compareAndSet(-1, System.nanoTime());
                                bytes.addAndGet(size);
                                if (received.addAndGet(batch.size()) >= count) {
                                    lastAt.compareAndSet(-1, System.nanoTime());
                                }
                            }
                        }
                    } catch (Throwable e) {
                        synchronized (errors) {
                            errors.add(e);
                        }
                    }
                }, "bench-fetch-" + t);
                w.start();
                workers.add(w);
            }
            for (Thread w : workers) {
                w.join();
            }
            if (!errors.isEmpty()) {
                throw new RuntimeException(errors.get(0));
            }
            if (received.get() < count) {
                System.err.println("FAILED: received " + received.get() + " of " + count + " before the timeout");
                return 1;
            }
            report(received.get(), bytes.get(), started, firstAt.get(), lastAt.get());
            return 0;
        } finally {
            quietly(consumer::shutdown);
            quietly(factory::shutdown);
        }
    }

    // ------------------------------------------------------------------------------------------

    static int produce(Map<String, String> args, long timeoutMs) throws Exception {
        String master = need(args, "master");
        String topic = need(args, "topic");
        long count = Long.parseLong(need(args, "count"));
        int size = Integer.parseInt(need(args, "size"));
        double rate = Double.parseDouble(args.getOrDefault("rate", "0"));
        boolean stamp = args.containsKey("stamp");
        int inFlight = Integer.parseInt(args.getOrDefault("in-flight", "8192"));
        long started = System.nanoTime();
        long deadline = started + timeoutMs * 1_000_000L;
        TubeClientConfig config = new TubeClientConfig(master);
        MessageSessionFactory factory = new TubeSingleSessionFactory(config);
        MessageProducer producer = factory.createProducer();
        byte[] filler = new byte[size];
        for (int i = 0; i < size; i++) {
            filler[i] = (byte) ('a' + i % 26);
        }
        Semaphore window = new Semaphore(inFlight);
        long retryBudget = Long.parseLong(args.getOrDefault("retries", String.valueOf(count / 100 + 100)));
        AtomicLong retried = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        AtomicLong acked = new AtomicLong();
        AtomicLong lastAck = new AtomicLong();
        ConcurrentLinkedQueue<Message> again = new ConcurrentLinkedQueue<>();
        Map<Integer, Long> errCodes = new java.util.concurrent.ConcurrentHashMap<>();
        MessageSentCallback callback = new MessageSentCallback() {
            @Override
            public void onMessageSent(MessageSentResult result) {
                if (result.isSuccess()) {
                    acked.incrementAndGet();
                    lastAck.set(System.nanoTime());
                } else {
                    errCodes.merge(result.getErrCode(), 1L, Long::sum);
                    if (retried.incrementAndGet() <= retryBudget && result.getMessage() != null) {
                        again.add(result.getMessage());
                    } else {
                        failed.incrementAndGet();
                        acked.incrementAndGet();
                    }
                }
                window.release();
            }

            @Override
            public void onException(Throwable e) {
                errCodes.merge(-1, 1L, Long::sum);
                failed.incrementAndGet();
                acked.incrementAndGet();
                window.release();
            }
        };
        try {
            producer.publish(topic);
            while (!producer.isTopicCurAcceptPublish(topic)) {
                if (System.nanoTime() > deadline) {
                    System.err.println("FAILED: topic " + topic + " not publishable");
                    return 1;
                }
                Thread.sleep(100);
            }
            long first = System.nanoTime();
            for (long i = 0; i < count; i++) {
                if (rate > 0) {
                    long due = first + (long) (i * 1e9 / rate);
                    long wait;
                    while ((wait = due - System.nanoTime()) > 0) {
                        Thread.sleep(wait / 1_000_000L, (int) (wait % 1_000_000L));
                    }
                }
                byte[] body = filler;
                if (stamp) {
                    body = filler.clone();
                    long micros = System.currentTimeMillis() * 1000L + (System.nanoTime() / 1000L) % 1000L;
                    byte[] digits = String.format(Locale.ROOT, "%016d", micros).getBytes(StandardCharsets.US_ASCII);
                    System.arraycopy(digits, 0, body, 0, Math.min(digits.length, body.length));
                }
                resend(producer, again, window, callback);
                window.acquire();
                producer.sendMessage(new Message(topic, body), callback);
                if (System.nanoTime() > deadline) {
                    System.err.println("FAILED: timeout after sending " + i + " messages");
                    return 1;
                }
            }
            while (acked.get() < count) {
                resend(producer, again, window, callback);
                if (System.nanoTime() > deadline) {
                    System.err.println("FAILED: " + acked.get() + " of " + count + " acknowledged before the timeout");
                    return 1;
                }
                Thread.sleep(1);
            }
            if (failed.get() > 0) {
                System.err.println("FAILED: " + failed.get() + " of " + count + " sends failed after "
                        + Math.min(retried.get(), retryBudget) + " retries; errCodes " + errCodes);
                return 1;
            }
            if (retried.get() > 0) {
                System.err.println("re-sent " + retried.get() + " refused messages; errCodes " + errCodes);
            }
            report(count, count * (long) size, started, first, lastAck.get());
            return 0;
        } finally {
            quietly(producer::shutdown);
            quietly(factory::shutdown);
        }
    }

    static void resend(MessageProducer producer, ConcurrentLinkedQueue<Message> again, Semaphore window,
                       MessageSentCallback callback) throws Exception {
        Message m;
        while ((m = again.poll()) != null) {
            window.acquire();
            producer.sendMessage(m, callback);
        }
    }

    // ------------------------------------------------------------------------------------------

    static void report(long messages, long bytes, long started, long first, long last) {
        double seconds = Math.max(1e-9, (last - first) / 1e9);
        out.printf(Locale.ROOT,
                "{\"messages\": %d, \"bytes\": %d, \"seconds\": %.6f, \"setup_seconds\": %.6f, \"msgs_per_s\": %.1f}%n",
                messages, bytes, seconds, (first - started) / 1e9, messages / seconds);
        out.flush();
    }

    interface Action {
        void run() throws Throwable;
    }

    static void quietly(Action action) {
        try {
            action.run();
        } catch (Throwable e) {
            System.err.println("shutdown error (ignored): " + e);
        }
    }

    static String need(Map<String, String> args, String key) {
        String v = args.get(key);
        if (v == null || v.isBlank()) {
            throw new IllegalArgumentException("--" + key + " is required");
        }
        return v;
    }

    static Map<String, String> parse(String[] argv) {
        Map<String, String> values = new HashMap<>();
        for (int i = 1; i < argv.length; i++) {
            String a = argv[i];
            if (!a.startsWith("--")) {
                throw new IllegalArgumentException("unexpected argument: " + a);
            }
            String key = a.substring(2);
            if (i + 1 < argv.length && !argv[i + 1].startsWith("--")) {
                values.put(key, argv[++i]);
            } else {
                values.put(key, "");
            }
        }
        return values;
    }
}
